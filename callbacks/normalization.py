"""Advantage normalization with independent centre and scale scopes (docs/method.md, technique 1)."""

from __future__ import annotations

from typing import Literal

import torch
from typing_extensions import override

from lite_ppo.ops.advantages import (
    SCOPES,
    bound_excluded_advantages,
    excluded_bound_scope,
    normalized_advantages,
    scale_vanishes_alone,
    weighted_mean_std,
)
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import Technique

WEIGHTINGS = ("sample", "token")


class AdvantageNormalization(Technique):
    """Computes A_i = (r_i - centre) / (scale + eps) with the centre over ``mean_scope`` and the scale
    over ``std_scope`` (each ``group``, ``batch`` or ``none``).

    "batch" statistics are those of the global rollout batch: on several data-parallel ranks the
    rewards of all ranks are gathered first, so R ranks compute the advantages one rank would.

    Args:
        mean_scope: where the centre comes from (``group`` = GRPO / Lite PPO).
        std_scope: where the scale comes from (``batch`` = Lite PPO, ``group`` = GRPO, ``none`` = Dr. GRPO).
            Under a std, the mean must be taken over the same scope or a narrower one (a group lies
            within the batch): ``mean_scope: batch`` with ``std_scope: group``, and ``mean_scope: none``
            with a std, are refused, because an all-equal group (or batch) has std 0 while its
            ``r - centre`` is not 0, which would give advantages of about 1/eps.
        eps: added to the std (docs/method.md: 1e-6).
        count_truncated: whether truncated responses (no EOS within the length limit) count in the
            group and batch statistics. They always *receive* an advantage; under a std scope it is
            never larger in magnitude than the largest |A| of the responses the statistics count (of
            the group under a group std, of the global batch under a batch std): a truncated response
            whose group-mates share one reward gets 0, not (r - mean) / eps. Pair ``False`` with
            :class:`~lite_ppo.callbacks.OverlongFilter` to drop them from the loss as well. A group
            whose responses are all excluded gets advantage 0 under a group scope.
        weighting: ``sample`` (every counted response weighs 1, the paper's definition) or ``token``
            (a response weighs its length in tokens: the statistics of the rewards as a token-level
            loss sees them). See :func:`lite_ppo.ops.normalized_advantages`.

    Example (Lite PPO's mixed normalization)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.AdvantageNormalization
              init_args: {mean_scope: group, std_scope: batch}

    Example (GRPO's group z-score, truncated responses left out of the statistics and the loss)::

        - class_path: lite_ppo.callbacks.AdvantageNormalization
          init_args: {mean_scope: group, std_scope: group, count_truncated: false}
        - class_path: lite_ppo.callbacks.OverlongFilter
    """

    def __init__(
        self,
        mean_scope: str = "group",
        std_scope: str = "batch",
        eps: float = 1e-6,
        count_truncated: bool = True,
        weighting: Literal["sample", "token"] = "sample",
    ) -> None:
        if mean_scope not in SCOPES:
            raise ValueError(f"AdvantageNormalization.mean_scope must be one of {SCOPES}, got {mean_scope!r}")
        if std_scope not in SCOPES:
            raise ValueError(f"AdvantageNormalization.std_scope must be one of {SCOPES}, got {std_scope!r}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"AdvantageNormalization.weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        if scale_vanishes_alone(mean_scope, std_scope):
            # A group (or batch) whose rewards are all equal has std 0 while r - centre is not 0:
            # its advantages would be (r - centre) / eps, about 1e6 (ops.advantages explains why).
            raise ValueError(
                f"AdvantageNormalization: mean_scope={mean_scope!r} with std_scope={std_scope!r} divides "
                f"by eps wherever a {std_scope}'s rewards are all equal (advantages ~1/eps); take the mean over "
                f"the std's scope or a narrower one (mean_scope: group, or mean_scope: {std_scope}), or std_scope: none"
            )
        self.mean_scope = mean_scope
        self.std_scope = std_scope
        self.eps = eps
        self.count_truncated = count_truncated
        self.weighting = weighting

    def statistics_weights(self, batch: RolloutBatch) -> torch.Tensor:
        """[B] float64: how many times each response counts in the statistics."""
        weights = torch.ones(batch.num_responses, dtype=torch.float64, device=batch.rewards.device)
        if not self.count_truncated:
            weights = weights * (~batch.truncated.bool()).to(weights.dtype)
        if self.weighting == "token":
            weights = weights * batch.response_lengths.to(weights.dtype)
        return weights

    @override
    def compute_advantages(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        weights = self.statistics_weights(batch)
        uses_batch = "batch" in (self.mean_scope, self.std_scope)
        ranks = ctx.ranks
        batch_stats = _global_weighted_mean_std(ranks, batch.rewards.double(), weights) if uses_batch else None
        advantages = normalized_advantages(
            batch.rewards,
            batch.group_ids,
            self.mean_scope,
            self.std_scope,
            self.eps,
            batch_stats=batch_stats,
            weights=weights,
            bound_excluded=False,
        )
        # Under a std, an excluded response's |A| never exceeds the included ones' largest
        # (ops.advantages explains why).
        included = weights > 0
        scope = excluded_bound_scope(self.std_scope)
        if scope is None:
            return advantages
        if scope == "group":
            return bound_excluded_advantages(advantages, included, batch.group_ids)
        local = (
            torch.where(included, advantages.abs(), torch.zeros_like(advantages)).max()
            if advantages.numel()
            else advantages.new_zeros(())
        )
        bound = ranks.max(local)
        return bound_excluded_advantages(advantages, included, batch_bound=bound)


def _global_weighted_mean_std(
    ranks: Ranks, rewards: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean and std over every rank (one all-gather of [2, B] floats)."""
    stacked = ranks.cat(torch.stack([rewards, weights]).T)  # [world * B, 2]
    return weighted_mean_std(stacked[:, 0], stacked[:, 1])
