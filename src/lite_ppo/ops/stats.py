"""Masked statistics over the valid entries of a tensor."""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero. ``mask`` broadcasts against ``values``."""
    masked = values * mask.to(values.dtype)
    return masked.sum() if dim is None else masked.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the valid entries; 0 where there are none (rather than NaN)."""
    count = mask.to(values.dtype).sum() if dim is None else mask.to(values.dtype).sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_std(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Standard deviation over all valid entries (Bessel-corrected by default, like ``torch.std``)."""
    count = mask.to(values.dtype).sum()
    mean = masked_mean(values, mask)
    var = masked_sum((values - mean) ** 2, mask) / (count - 1 if unbiased else count).clamp(min=1)
    return var.sqrt()
