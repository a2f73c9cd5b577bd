"""Per-token factors that multiply: the loss mask, token weights and policy mask of a step are each the
product of every technique's answer (None stands for "no change"), so no answer depends on the order of
the callbacks."""

from __future__ import annotations

import torch


def multiply_factors(base: torch.Tensor | None, factors: list[torch.Tensor | None]) -> torch.Tensor | None:
    """``base`` times every factor that is not None (None stands for ones; all None gives ``base``);
    float32 when ``base`` is None.

    Example:
        >>> multiply_factors(None, [None, torch.tensor([1, 0]), torch.tensor([0.5, 0.5])])
        tensor([0.5000, 0.0000])
    """
    for factor in factors:
        if factor is not None:
            base = factor.to(torch.float32) if base is None else base * factor.to(base.dtype)
    return base
