"""KL loss to a frozen reference policy (GRPO's KL term; docs/method.md, technique 5)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from lightning.pytorch import LightningModule, Trainer
from typing_extensions import override

from lite_ppo.callbacks.reference_policy import ReferencePolicy
from lite_ppo.ops.kl import KL_ESTIMATORS, kl_estimate
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import MiniBatchContext, Technique


class KLPenalty(Technique):
    """Adds ``coef * KL_t`` per token to the loss, KL_t estimating KL(pi_theta || pi_ref) at every
    response token with the k1 / k2 / k3 estimator (:mod:`lite_ppo.ops.kl`; GRPO uses k3).

    The reference is a frozen copy of the *initial* policy, loaded from ``reference_path`` (the
    policy's own checkpoint by default) at fit start, so a resumed run still compares with the
    starting weights. When the policy trains LoRA adapters (``model.lora``) and no
    ``reference_path`` is given, the reference is the policy itself with its adapters off (its frozen
    base, :meth:`LitePPO.adapters_disabled`): nothing is loaded and no second copy is held. With
    ``coef == 0`` nothing is loaded and nothing is computed: the technique costs nothing. Reference
    log-probs are computed under ``no_grad`` for each micro-batch, with the same temperature scaling
    as the policy's (``batch.temperature``).

    The term is aggregated exactly like the surrogate (the configured loss aggregation) and logged
    by the module as ``loss/kl``; this callback also logs the raw token-mean estimate ``kl/ref_kl``
    (without the coefficient) over the step's loss tokens.

    Args:
        coef: the KL coefficient beta (GRPO: 0.001-0.04; Lite PPO and the paper's runs: 0).
        estimator: ``k1`` | ``k2`` | ``k3``.
        reference_path: local HF folder (or ``builtin:...``) of the reference; ``None`` = the
            policy's ``model_path``.
        clamp: bound on |log pi_ref - log pi_theta| per token before the estimator (``None``: none).

    Example (GRPO)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.KLPenalty
              init_args: {coef: 0.001, estimator: k3}
    """

    def __init__(
        self,
        coef: float = 0.001,
        estimator: Literal["k1", "k2", "k3"] = "k3",
        reference_path: str | None = None,
        clamp: float | None = 10.0,
    ) -> None:
        if not 0 <= coef < math.inf:  # inf x a zero KL is NaN: every step would be skipped
            raise ValueError(f"KLPenalty.coef must be >= 0 and finite, got {coef}")
        if estimator not in KL_ESTIMATORS:
            raise ValueError(f"KLPenalty.estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
        self.coef = coef
        self.estimator = estimator
        self.reference_path = reference_path
        self.clamp = clamp
        self._reference = ReferencePolicy(reference_path)

    @property
    def reference(self) -> torch.nn.Module | None:
        """The loaded reference model (None before fit start, with ``coef == 0`` and for a LoRA base)."""
        return self._reference.model

    @property
    def reference_is_base(self) -> bool:
        """True when the reference is the policy's own frozen base (LoRA adapters off)."""
        return self._reference.is_base

    # -- reference model -----------------------------------------------------------------------------
    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.coef > 0:
            self._reference.load(pl_module)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reference.release()

    def reference_logprobs(self, module, batch: RolloutBatch) -> torch.Tensor:
        """log pi_ref of the response tokens of ``batch``: [b, R] (zero on padding), scored exactly
        as the module scores the policy (same positions, temperature, packing)."""
        return self._reference.logprobs(module, batch)

    # -- hooks ---------------------------------------------------------------------------------------
    @override
    def extra_loss_terms(self, ctx: StepContext, minibatch: MiniBatchContext) -> dict[str, torch.Tensor]:
        if self.coef == 0:
            return {}
        reference = self.reference_logprobs(ctx.module, minibatch.batch)
        kl = kl_estimate(minibatch.logprobs, reference, self.estimator, self.clamp)
        mask = minibatch.batch.loss_mask
        ctx.metrics.mean("kl/ref_kl", (kl.detach() * mask).sum(), mask.sum())
        return {"kl": self.coef * kl}
