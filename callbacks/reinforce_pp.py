"""REINFORCE++ and REINFORCE++-baseline advantages: global batch whitening of the return (docs/method.md,
"REINFORCE++")."""

from __future__ import annotations

from typing import Literal

import torch
from lightning.pytorch import LightningModule, Trainer
from typing_extensions import override

from lite_ppo.errors import UserError
from lite_ppo.ops.advantages import weighted_mean_std
from lite_ppo.ops.reinforce_pp import group_baseline_residuals, whitened
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import Technique

WEIGHTINGS = ("token", "sample")


class ReinforcePlusPlus(Technique):
    """The advantage estimator of REINFORCE++ (Hu 2025): A_i = (x_i - mu) / sqrt(sigma^2 + eps), with
    x_i the response's return r_i, or r_i minus its group's mean reward (``group_baseline``,
    REINFORCE++-baseline), and mu, sigma the mean and std of x over the *global* batch
    (:mod:`lite_ppo.ops.reinforce_pp`).

    "Global" is every response of the step on every data-parallel rank: the (x, weight) pairs of all
    ranks are gathered first, so R ranks compute the advantages one process would. It replaces
    ``AdvantageNormalization`` (exactly one advantage estimator may be configured). Outcome rewards
    only: the paper's per-token KL-shaped return is not produced (use ``KLPenalty`` as a loss).

    Args:
        group_baseline: subtract the mean reward of the response's group (prompt) before whitening
            (REINFORCE++-baseline; a group of one response has baseline 0, as in verl).
        weighting: ``token`` (a response counts its length in tokens: verl's whitening over the
            response mask) or ``sample`` (every response counts once).
        eps: added to the variance inside the square root (verl: 1e-8).

    Logs ``reinforce_pp/return_mean`` and ``reinforce_pp/return_std``: mu and sigma, the global
    statistics the returns were whitened with.

    Example (REINFORCE++-baseline)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.ReinforcePlusPlus
              init_args: {group_baseline: true}
    """

    def __init__(
        self, group_baseline: bool = False, weighting: Literal["token", "sample"] = "token", eps: float = 1e-8
    ) -> None:
        if weighting not in WEIGHTINGS:
            raise UserError(f"ReinforcePlusPlus.weighting={weighting!r}: choose token or sample")
        if not eps >= 0:
            raise UserError(f"ReinforcePlusPlus.eps={eps}: must be >= 0")
        self.group_baseline = group_baseline
        self.weighting = weighting
        self.eps = eps

    def statistics_weights(self, batch: RolloutBatch) -> torch.Tensor:
        """[B] float64: how many times each response counts in the batch statistics."""
        if self.weighting == "token":
            return batch.response_lengths.to(torch.float64)
        return torch.ones(batch.num_responses, dtype=torch.float64, device=batch.rewards.device)

    @override
    def compute_advantages(self, trainer: Trainer, module: LightningModule, batch: RolloutBatch) -> torch.Tensor:
        returns = group_baseline_residuals(batch.rewards, batch.group_ids) if self.group_baseline else batch.rewards
        returns = returns.double()
        weights = self.statistics_weights(batch)
        # One all-gather of [B, 2]: every rank whitens with the statistics of the whole global batch
        # (groups never straddle ranks, so the baseline above is already exact per rank).
        gathered = Ranks(trainer).cat(torch.stack([returns, weights.to(returns.device)]).T)
        mean, std = weighted_mean_std(gathered[:, 0], gathered[:, 1])
        # Already global: the same value on every rank, so the mean over ranks is the value.
        module.step_metrics.mean("reinforce_pp/return_mean", mean, 1)
        module.step_metrics.mean("reinforce_pp/return_std", std, 1)
        return whitened(returns, weights, self.eps, stats=(mean, std)).to(torch.float32)
