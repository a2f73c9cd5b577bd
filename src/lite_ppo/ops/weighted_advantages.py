"""Advantage normalization with per-response statistics weights (sample- or token-weighted).

:func:`lite_ppo.ops.advantages.normalized_advantages` counts every response once. Here response i
counts ``w_i`` times in the group and batch statistics (frequency weights):

- ``w_i = 1``: sample-weighted statistics (the usual GRPO / Lite PPO definition);
- ``w_i = L_i`` (its number of loss tokens): token-weighted statistics, i.e. the statistics of the
  rewards *as the tokens see them*, matching a token-level loss where a long response carries more
  weight;
- ``w_i = 0``: the response does not count in the statistics (e.g. a truncated response under
  overlong filtering) but still receives an advantage from the others' statistics.

Weighted mean and Bessel-corrected std are those of the multiset in which reward r_i appears w_i
times: ``mean = sum w r / sum w``, ``var = sum w (r - mean)^2 / (sum w - 1)``. With integer weights
the result equals the unweighted statistics of the rewards repeated w_i times.
"""

from __future__ import annotations

import torch

from lite_ppo.ops.advantages import SCOPES, group_statistics


def weighted_mean_std(values: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Frequency-weighted mean and Bessel-corrected std of ``values`` [N] (float64).

    Example:
        >>> m, s = weighted_mean_std(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 3.0]))   # 0,1,1,1
        >>> round(m.item(), 4), round(s.item(), 4)
        (0.75, 0.5)
    """
    values, weights = values.double(), weights.double()
    total = weights.sum()
    mean = (weights * values).sum() / total.clamp(min=1e-12)
    var = (weights * (values - mean) ** 2).sum() / (total - 1).clamp(min=1)
    return mean, var.sqrt()


def weighted_normalized_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    weights: torch.Tensor,
    mean_scope: str = "group",
    std_scope: str = "batch",
    eps: float = 1e-6,
    batch_stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """A_i = (r_i - centre_i) / (scale_i + eps) with weighted statistics.

    Args:
        rewards: [B] float rewards.
        group_ids: [B] long; responses of one prompt share an id.
        weights: [B] non-negative statistics weights (see the module docstring).
        mean_scope, std_scope: ``group`` | ``batch`` | ``none`` as in ``normalized_advantages``.
        eps: added to the std.
        batch_stats: weighted (mean, std) of the global batch; computed from this batch when None.

    Returns:
        [B] advantages. A response whose whole group has weight 0 gets advantage 0 under a group
        scope (there is no statistic to compare it with).
    """
    if mean_scope not in SCOPES or std_scope not in SCOPES:
        raise ValueError(f"mean_scope and std_scope must be in {SCOPES}, got {mean_scope!r}, {std_scope!r}")
    if (weights < 0).any():
        raise ValueError("statistics weights must be >= 0")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    r, w = rewards.double(), weights.double()

    empty_group = torch.zeros_like(r, dtype=torch.bool)
    if "group" in (mean_scope, std_scope):
        g_mean, g_std = group_statistics(r, group_ids, w)
        _, inverse = torch.unique(group_ids, return_inverse=True)
        group_weight = torch.zeros(int(inverse.max().item()) + 1 if inverse.numel() else 0, dtype=w.dtype, device=w.device)
        empty_group = group_weight.index_add_(0, inverse, w)[inverse] == 0
    if "batch" in (mean_scope, std_scope):
        b_mean, b_std = weighted_mean_std(r, w) if batch_stats is None else (torch.as_tensor(batch_stats[0]).double(), torch.as_tensor(batch_stats[1]).double())

    centre = {"group": lambda: g_mean, "batch": lambda: b_mean, "none": lambda: 0.0}[mean_scope]()
    out = r - centre
    if std_scope != "none":
        out = out / ((g_std if std_scope == "group" else b_std) + eps)
    if "group" in (mean_scope, std_scope):
        out = torch.where(empty_group, torch.zeros_like(out), out)
    return out.to(out_dtype)
