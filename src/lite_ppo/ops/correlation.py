"""Correlation between two per-response quantities (e.g. response length and advantage)."""

from __future__ import annotations

import torch


def pearson_correlation(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pearson correlation of ``x`` and ``y`` [N] over the entries where ``mask`` is true.

    Computed in float64. Returns 0 (not NaN) when fewer than two entries count or when either
    variable is constant over them: "no linear relation measurable".

    Example:
        >>> pearson_correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0]))
        tensor(1.)
    """
    x, y = x.double().reshape(-1), y.double().reshape(-1)
    if mask is not None:
        keep = mask.reshape(-1).bool()
        x, y = x[keep], y[keep]
    if x.numel() < 2:
        return torch.zeros((), dtype=torch.float32)
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = (dx * dx).sum(), (dy * dy).sum()
    # A constant variable: relative threshold so that float noise in a constant column reads as 0.
    tiny = 1e-12
    if sxx <= tiny * max(1.0, float((x * x).sum())) or syy <= tiny * max(1.0, float((y * y).sum())):
        return torch.zeros((), dtype=torch.float32)
    return ((dx * dy).sum() / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0).to(torch.float32)
