"""Advantage normalization with independent centre and scale scopes (PAPER.md technique 1)."""

from __future__ import annotations

import torch

from lite_ppo.hooks import Technique
from lite_ppo.ops.advantages import SCOPES, normalized_advantages
from lite_ppo.rollout.batch import RolloutBatch


class AdvantageNormalization(Technique):
    """Computes A_i = (r_i - centre) / (scale + eps) with the centre over ``mean_scope`` and the scale
    over ``std_scope`` (each ``group``, ``batch`` or ``none``).

    "batch" statistics are those of the global rollout batch: on several data-parallel ranks the
    rewards of all ranks are gathered first, so R ranks compute the advantages one rank would.

    Args:
        mean_scope: where the centre comes from (``group`` = GRPO / Lite PPO).
        std_scope: where the scale comes from (``batch`` = Lite PPO, ``group`` = GRPO, ``none`` = Dr. GRPO).
        eps: added to the std (PAPER.md: 1e-6).

    Example (Lite PPO's mixed normalization)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.AdvantageNormalization
              init_args: {mean_scope: group, std_scope: batch}
    """

    def __init__(self, mean_scope: str = "group", std_scope: str = "batch", eps: float = 1e-6) -> None:
        if mean_scope not in SCOPES:
            raise ValueError(f"AdvantageNormalization.mean_scope must be one of {SCOPES}, got {mean_scope!r}")
        if std_scope not in SCOPES:
            raise ValueError(f"AdvantageNormalization.std_scope must be one of {SCOPES}, got {std_scope!r}")
        self.mean_scope = mean_scope
        self.std_scope = std_scope
        self.eps = eps

    def compute_advantages(self, trainer, module, batch: RolloutBatch) -> torch.Tensor:
        batch_stats = None
        if "batch" in (self.mean_scope, self.std_scope):
            batch_stats = _global_mean_std(module, batch.rewards.double())
        return normalized_advantages(
            batch.rewards, batch.group_ids, self.mean_scope, self.std_scope, self.eps, batch_stats=batch_stats
        )


def _global_mean_std(module, rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and Bessel-corrected std of the rewards of every rank (one all-gather of [B] floats)."""
    gathered = module.all_gather(rewards) if module.trainer.world_size > 1 else rewards
    flat = gathered.reshape(-1)
    return flat.mean(), flat.std() if flat.numel() > 1 else flat.new_zeros(())
