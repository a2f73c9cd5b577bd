"""REINFORCE++ and REINFORCE++-baseline advantages: global batch whitening of the (optionally
KL-shaped) return (docs/method.md, "REINFORCE++")."""

from __future__ import annotations

import math
from typing import Literal

import torch
from lightning.pytorch import LightningModule, Trainer
from typing_extensions import override

from lite_ppo.callbacks.reference_policy import ReferencePolicy
from lite_ppo.errors import UserError
from lite_ppo.ops.advantages import weighted_mean_std
from lite_ppo.ops.kl import KL_ESTIMATORS, kl_estimate
from lite_ppo.ops.reinforce_pp import kl_shaped_returns, outcome_returns, whitened
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique

WEIGHTINGS = ("token", "sample")


KL_CLAMP = 10.0  # per-token bound on the KL estimate of the shaped return (OpenRLHF's compute_approx_kl: +-10)


class ReinforcePlusPlus(Technique):
    """The advantage estimator of REINFORCE++ (Hu 2025): A_i = (x_i - mu) / sqrt(sigma^2 + eps), with
    x_i the response's return r_i, or r_i minus its group's mean reward (``group_baseline``,
    REINFORCE++-baseline), and mu, sigma the mean and std of x over the *global* batch
    (:mod:`lite_ppo.ops.reinforce_pp`).

    "Global" is every response of the step on every data-parallel rank: the (x, weight) pairs of all
    ranks are gathered first, so R ranks compute the advantages one process would. It replaces
    ``AdvantageNormalization`` (exactly one advantage estimator may be configured).

    With ``kl_coef`` beta > 0 the return is the paper's KL-shaped one: every response token also earns
    -beta * KL_t, KL_t estimating log pi_old - log pi_ref at that token, so
    G_{i,t} = x_i - beta * sum_{u >= t} KL_{i,u} and the advantages are per token [B, R], whitened over
    every response token of the global batch. pi_old's log-probs cost one more no-gradient forward of
    the policy, the reference's one of the reference (loaded at fit start like ``KLPenalty``'s: the
    initial policy, or with LoRA the policy with its adapters off). An objective that needs one
    advantage per response (GSPO's sequence ratio) is refused at fit start.

    Args:
        group_baseline: subtract the mean reward of the response's group (prompt) before whitening
            (REINFORCE++-baseline; a group of one response has baseline 0, as in verl).
        weighting: ``token`` (a response counts its length in tokens: verl's whitening over the
            response mask) or ``sample`` (every response counts once).
        eps: added to the variance inside the square root (verl: 1e-8).
        kl_coef: beta of the KL-shaped return; 0 (default) = the outcome return, one advantage per
            response. Needs ``weighting: token`` (every token carries its own return).
        kl_estimator: ``k1`` (the paper's log-ratio) | ``k2`` | ``k3`` (:mod:`lite_ppo.ops.kl`).
        reference_path: local HF folder (or ``builtin:...``) of the reference; None = the policy's
            ``model_path``.

    Logs ``reinforce_pp/return_mean`` and ``reinforce_pp/return_std``: mu and sigma, the global
    statistics the returns were whitened with; with ``kl_coef`` > 0 also ``reinforce_pp/ref_kl``, the
    mean KL_t over the response tokens.

    Example (REINFORCE++-baseline)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.ReinforcePlusPlus
              init_args: {group_baseline: true}
    """

    def __init__(
        self,
        group_baseline: bool = False,
        weighting: Literal["token", "sample"] = "token",
        eps: float = 1e-8,
        kl_coef: float = 0.0,
        kl_estimator: Literal["k1", "k2", "k3"] = "k1",
        reference_path: str | None = None,
    ) -> None:
        if weighting not in WEIGHTINGS:
            raise UserError(f"ReinforcePlusPlus.weighting={weighting!r}: choose token or sample")
        if not 0 <= eps < math.inf:
            raise UserError(f"ReinforcePlusPlus.eps={eps}: must be >= 0 and finite")
        if not 0 <= kl_coef < math.inf:
            raise UserError(f"ReinforcePlusPlus.kl_coef={kl_coef}: must be >= 0 and finite")
        if kl_estimator not in KL_ESTIMATORS:
            raise UserError(
                f"ReinforcePlusPlus.kl_estimator={kl_estimator!r}: choose one of {', '.join(KL_ESTIMATORS)}"
            )
        if kl_coef > 0 and weighting != "token":
            raise UserError(
                "ReinforcePlusPlus.kl_coef > 0 needs weighting: token (the KL-shaped return differs per token, "
                "so every token counts in the statistics)"
            )
        self.group_baseline = group_baseline
        self.weighting = weighting
        self.eps = eps
        self.kl_coef = kl_coef
        self.kl_estimator = kl_estimator
        self.reference_path = reference_path
        self._reference = ReferencePolicy(reference_path)

    @property
    @override
    def per_token_advantages(self) -> bool:  # type: ignore[override]
        """The KL-shaped return gives every token its own advantage."""
        return self.kl_coef > 0

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.kl_coef > 0:
            self._reference.load(pl_module)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reference.release()

    def statistics_weights(self, batch: RolloutBatch) -> torch.Tensor:
        """[B] float64: how many times each response counts in the batch statistics."""
        if self.weighting == "token":
            return batch.response_lengths.to(torch.float64)
        return torch.ones(batch.num_responses, dtype=torch.float64, device=batch.rewards.device)

    @override
    def compute_advantages(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        returns = outcome_returns(batch.rewards, batch.group_ids, self.group_baseline)
        if self.kl_coef > 0:
            return self.kl_shaped_advantages(ctx, batch, returns)
        weights = self.statistics_weights(batch)
        # One all-gather of [B, 2]: every rank whitens with the statistics of the whole global batch
        # (groups never straddle ranks, so the baseline above is already exact per rank).
        gathered = ctx.ranks.cat(torch.stack([returns, weights.to(returns.device)]).T)
        mean, std = weighted_mean_std(gathered[:, 0], gathered[:, 1])
        # Already global: the same value on every rank, so the mean over ranks is the value.
        ctx.metrics.mean("reinforce_pp/return_mean", mean, 1)
        ctx.metrics.mean("reinforce_pp/return_std", std, 1)
        # ops.reinforce_pp_advantages with the global statistics: the baselined returns whitened.
        return whitened(returns, weights, self.eps, stats=(mean, std)).to(torch.float32)

    def kl_shaped_advantages(self, ctx: StepContext, batch: RolloutBatch, outcome: torch.Tensor) -> torch.Tensor:
        """[B, R] advantages of the KL-shaped return, 0 off the response tokens."""
        mask = batch.response_mask
        # pi_old is the policy as it is now (no optimizer step yet this step) and the reference its
        # frozen start: the per-token KL the return is shaped with.
        raw = kl_estimate(
            ctx.module.sequence_logprobs(batch),
            self._reference.logprobs_by_micro_batch(ctx.module, batch),
            self.kl_estimator,
            clamp=None,
        )
        # Each token's estimate bounded as the reference implementation bounds it: one token far from the
        # reference (k3 grows as exp of the log-ratio) would otherwise outweigh the outcome reward.
        kl = raw.clamp(-KL_CLAMP, KL_CLAMP)
        ctx.metrics.mean("reinforce_pp/kl_clamped_share", ((raw.abs() > KL_CLAMP) * mask).sum(), mask.sum())
        returns = kl_shaped_returns(outcome, kl, mask, self.kl_coef)
        tokens = returns[mask.bool()]
        # Every rank's response tokens (their counts differ): the statistics of the whole global batch.
        gathered, _ = ctx.ranks.cat_varying(tokens)
        mean, std = weighted_mean_std(gathered, torch.ones_like(gathered))
        ctx.metrics.mean("reinforce_pp/return_mean", mean, 1)
        ctx.metrics.mean("reinforce_pp/return_std", std, 1)
        ctx.metrics.mean("reinforce_pp/ref_kl", (kl.double() * mask).sum(), mask.sum())
        advantages = whitened(returns, torch.ones_like(returns), self.eps, stats=(mean, std)) * mask
        return advantages.to(torch.float32)
