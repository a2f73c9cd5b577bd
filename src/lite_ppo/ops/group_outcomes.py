"""How the G responses of each prompt fared: all correct, all wrong, or mixed (docs/method.md, "Diagnostics")."""

from __future__ import annotations

import torch


def group_outcome_shares(
    rewards: torch.Tensor, group_ids: torch.Tensor, correct_threshold: float = 0.5
) -> dict[str, torch.Tensor]:
    """Share of groups whose responses are all correct, all wrong, or mixed.

    Args:
        rewards: [B]; a response counts as correct when its reward > ``correct_threshold``.
        group_ids: [B] long.

    Returns:
        ``all_correct``, ``all_wrong``, ``mixed``: fractions of groups, summing to 1.
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    correct = (rewards > correct_threshold).float()
    hits = torch.zeros(n_groups).index_add_(0, inverse.cpu(), correct.cpu())
    sizes = torch.zeros(n_groups).index_add_(0, inverse.cpu(), torch.ones_like(correct).cpu())
    denom = max(n_groups, 1)
    all_correct = (hits == sizes).float().sum() / denom
    all_wrong = (hits == 0).float().sum() / denom
    return {"all_correct": all_correct, "all_wrong": all_wrong, "mixed": 1.0 - all_correct - all_wrong}
