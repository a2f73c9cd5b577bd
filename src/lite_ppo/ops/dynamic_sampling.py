"""DAPO's dynamic sampling criterion: keep only groups whose responses disagree."""

from __future__ import annotations

import torch


def mixed_group_mask(scores: torch.Tensor, group_ids: torch.Tensor, atol: float = 0.0) -> torch.Tensor:
    """[B] bool: True for responses whose group's ``scores`` are not all equal.

    A group is "all-same" (every response correct, every response wrong, or in general every score
    equal within ``atol``) when ``max - min <= atol`` over its responses; its advantages under group
    centring are all 0 and it carries no learning signal. Whole groups are kept or dropped.

    Example:
        >>> mixed_group_mask(torch.tensor([1., 1., 0., 1., 0., 0.]), torch.tensor([0, 0, 1, 1, 2, 2]))
        tensor([False, False,  True,  True, False, False])
    """
    if scores.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=scores.device)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n = int(inverse.max().item()) + 1
    s = scores.double()
    high = torch.full((n,), -torch.inf, dtype=s.dtype, device=s.device).scatter_reduce(0, inverse, s, reduce="amax")
    low = torch.full((n,), torch.inf, dtype=s.dtype, device=s.device).scatter_reduce(0, inverse, s, reduce="amin")
    return ((high - low) > atol)[inverse]
