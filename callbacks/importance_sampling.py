"""Truncated importance-sampling correction for rollout/trainer policy mismatch (off by default)."""

from __future__ import annotations

import torch
from typing_extensions import override

from lite_ppo.ops.drift import truncated_importance_weights
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique


class TruncatedImportanceSampling(Technique):
    """Weights every response token's surrogate loss by ``min(pi_trainer / pi_engine, cap)``.

    The responses were sampled by the rollout engine (vLLM), whose log-probs differ from the
    trainer's ``old_logprobs`` (precision, kernels, a stale weight copy). The PPO surrogate assumes
    the tokens came from the trainer's old policy; the per-token importance ratio
    ``r_t = exp(old_logprobs - engine_logprobs)``, truncated at ``cap`` to bound the variance,
    corrects for that (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"; :mod:`lite_ppo.ops.drift`). The weights are constants (no gradient),
    computed once per training step in ``token_weights`` (the module multiplies them with any other
    technique's weights). Where the two
    log-probs agree the weight is exactly 1 and the loss is the uncorrected one.

    Logged (over this step's response tokens, all ranks): ``tis/weight_mean`` (mean weight after
    the cap) and ``tis/capped_share`` (share of tokens whose ratio exceeded the cap).

    Needs an engine that reports log-probs (``VLLMEngine``); with one that does not (``HFEngine``,
    which samples with the trainer's own policy, so there is nothing to correct) it is an error.

    Args:
        cap: the truncation C (>= 1; 2 in Yao et al.).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.TruncatedImportanceSampling
              init_args: {cap: 2.0}
    """

    def __init__(self, cap: float = 2.0) -> None:
        if not cap >= 1:
            raise ValueError(f"TruncatedImportanceSampling.cap must be >= 1, got {cap}")
        self.cap = float(cap)

    @override
    def configure_run(self, settings: RunSettings) -> None:
        # Fail before any weights load when the engine cannot report log-probs.
        if not settings.engine_logprobs:
            raise ValueError(_no_logprobs_message(settings.engine))

    @override
    def token_weights(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        if batch.engine_logprobs is None:
            raise RuntimeError(_no_logprobs_message("the rollout engine"))
        weights, capped = truncated_importance_weights(
            batch.old_logprobs, batch.engine_logprobs, batch.response_mask, self.cap
        )
        mask = batch.response_mask.double()
        ctx.metrics.mean("tis/weight_mean", (weights.double() * mask).sum(), mask.sum())
        ctx.metrics.mean("tis/capped_share", capped.double().sum(), mask.sum())
        return weights


def _no_logprobs_message(engine: str) -> str:
    return (
        f"TruncatedImportanceSampling needs the rollout engine's log-probs of the sampled tokens, but {engine} "
        "reports none: use lite_ppo.rollout.VLLMEngine (with return_logprobs: true), or drop the technique "
        "(an engine that samples with the trainer's own policy, like HFEngine, needs no correction)"
    )
