"""KL-Cov: a KL penalty on the tokens whose log-prob / advantage covariance is the largest (Cui et al.
2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"; docs/method.md)."""

from __future__ import annotations

import math

import torch
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.callbacks.clip_cov import loss_token_covariance
from lite_ppo.errors import UserError
from lite_ppo.ops.covariance import kl_cov_mask, kl_cov_penalty
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import MiniBatchContext, Technique, UpdateStats


class KLCov(Technique):
    """Adds ``coef * |log pi_theta(y_t) - log pi_old(y_t)|`` to the loss of the ``share`` of the
    step's loss tokens with the largest covariance ``Cov_t = (log pi_old(y_t) - mean) * (A_t - mean)``
    (``lite_ppo.ops.covariance``; the reference code's form of the paper's KL term, verl's
    ``compute_policy_loss_kl_cov``). The term is aggregated like the surrogate, over every loss
    token (``extra_loss_terms``, logged by the module as ``loss/kl_cov``); it is 0 with zero gradient
    while the policy has not moved (the first mini-batch) and pulls the selected tokens back to
    pi_old afterwards.

    **Over the global batch, before the update.** The covariance, its means and the top tokens are
    taken once per step over every loss token of every rank (gathered in rank order, ties to the
    earlier token) from the old log-probs, before the first optimizer step, when they equal the
    current policy's; so two ranks penalize exactly the tokens one process penalizes, for every
    mini-batch of the update. The reference code ranks the current log-probs within each
    micro-batch of a rank (the same values in its first mini-batch).

    **The surrogate.** Here the penalty is added to the configured objective (the clipped surrogate
    unless a technique chose another); the reference code's KL-Cov loss has no PPO clip at all.

    Logged: ``kl_cov/selected_share`` (share of the step's loss tokens penalized),
    ``kl_cov/threshold`` (the smallest selected Cov_t) and ``kl_cov/covariance`` (the mean Cov_t).

    Excludes ``ClipCov`` (the two are the paper's alternative policy losses).

    Args:
        share: k, the share of loss tokens penalized (the paper: 2e-3 for Qwen2.5-7B, 2e-4 for 32B);
            at least one token.
        coef: beta, the penalty's coefficient (the paper: 1).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.KLCov
              init_args: {share: 2.0e-3, coef: 1.0}
    """

    def __init__(self, share: float = 2e-3, coef: float = 1.0) -> None:
        if not 0 < share <= 1:
            raise UserError(f"KLCov.share must be in (0, 1] (the paper: 2e-3), got {share}")
        if not 0 <= coef < math.inf:
            raise UserError(f"KLCov.coef must be >= 0 and finite (the paper: 1), got {coef}")
        self.share, self.coef = float(share), float(coef)
        self.penalized: torch.Tensor | None = None  # [B, R] bool: this step's selection on this rank

    conflicts_with = {
        "ClipCov": "are alternative policy losses of Cui et al. 2025 (both act on the high-covariance tokens)"
    }

    @override
    def before_update(self, ctx: StepContext, batch: RolloutBatch) -> None:
        covariance, offset, tokens = loss_token_covariance(ctx.trainer, batch)
        selected = kl_cov_mask(covariance, self.share)
        n = int(tokens.sum())
        mine = slice(offset, offset + n)
        ctx.metrics.mean(names.KL_COV_SELECTED_SHARE, selected[mine].sum(), n)
        ctx.metrics.mean(names.KL_COV_COVARIANCE, covariance[mine].sum(), n)
        if selected.any():  # one global value, the same on every rank
            ctx.metrics.max(names.KL_COV_THRESHOLD, covariance[selected].min())
        self.penalized = torch.zeros_like(tokens)
        self.penalized[tokens] = selected[mine].to(tokens.device)

    @override
    def extra_loss_terms(self, ctx: StepContext, minibatch: MiniBatchContext) -> dict[str, torch.Tensor]:
        if self.penalized is None or minibatch.rows is None:
            raise RuntimeError("KLCov: no selection for this micro-batch (before_update runs before the update)")
        penalized = self.penalized[minibatch.rows.to(self.penalized.device)].to(minibatch.logprobs.dtype)
        return {"kl_cov": kl_cov_penalty(minibatch.logprobs, minibatch.batch.old_logprobs, self.coef) * penalized}

    @override
    def on_update_end(self, ctx: StepContext, batch: RolloutBatch, stats: UpdateStats) -> None:
        self.penalized = None  # the selection belongs to this step's batch
