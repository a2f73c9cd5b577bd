"""Response-level advantages from scalar rewards with independent centre and scale scopes.

docs/method.md, technique 1 ("Advantage normalization"), with r the reward of response i of group g:

    group:   A = (r - mean_group) / (std_group + eps)          (GRPO)
    batch:   A = (r - mean_batch) / (std_batch + eps)          (REINFORCE++)
    no std:  A = r - mean_{group or batch}                     (Dr. GRPO, "remove std")
    mixed:   A = (r - mean_group) / (std_batch + eps)          (Lite PPO)

The centre (``mean_scope``) and the scale (``std_scope``) are chosen independently among
``group`` / ``batch`` / ``none``. Standard deviations are Bessel-corrected (``torch.std``'s default,
as GRPO implementations use); "batch" means the whole global rollout batch, so callers running on
several ranks pass the global ``batch_stats``.

A response left out of the statistics (weight 0, e.g. a truncated one) still receives an advantage.
Under a std scale it is never larger in magnitude than the largest |A| of the responses the
statistics count (:func:`bound_excluded_advantages`): otherwise a truncated response whose
group-mates share one reward would be divided by std_group + eps = eps and get |A| ~ 1e6. Without a
scale (``std_scope="none"``) A = r - centre is in reward units already and is left as is.
"""

from __future__ import annotations

import torch

SCOPES = ("group", "batch", "none")
# (centre, scale) pairs whose centre lies within the scale's scope (a group lies within the batch).
_NESTED_PAIRS = frozenset({("group", "group"), ("group", "batch"), ("batch", "batch")})


def scale_vanishes_alone(mean_scope: str, std_scope: str) -> bool:
    """True when the std can be 0 while ``r - centre`` is not, so A = (r - centre) / eps (~1e6).

    A std over a scope is 0 exactly when every reward of that scope is equal. Only a centre taken
    within the same scope (or a narrower one: a group lies within the batch) is then equal to those
    rewards, so ``r - centre = 0`` too. A batch centre with a group std gives every all-correct or
    all-wrong group |r - mean_batch| / eps; no centre (``none``) gives r / eps when the scale's scope
    is all-correct. No bound would be right there, since the data hold no scale for that group.

    Example:
        >>> scale_vanishes_alone("batch", "group"), scale_vanishes_alone("group", "batch")
        (True, False)
    """
    return std_scope != "none" and (mean_scope, std_scope) not in _NESTED_PAIRS


def group_statistics(
    rewards: torch.Tensor, group_ids: torch.Tensor, weight: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-response mean and std of the response's group (Bessel-corrected).

    Args:
        rewards: [B] float.
        group_ids: [B] long, ids in any order (need not be contiguous).
        weight: [B] 0/1, the responses that count in the statistics (all when None).

    Returns:
        (group_mean [B], group_std [B]); a group with one counted response has std 0.
    """
    weight = torch.ones_like(rewards) if weight is None else weight.to(rewards.dtype)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n = int(inverse.max().item()) + 1 if inverse.numel() else 0
    counts = torch.zeros(n, dtype=rewards.dtype, device=rewards.device).index_add_(0, inverse, weight)
    sums = torch.zeros_like(counts).index_add_(0, inverse, rewards * weight)
    means = sums / counts.clamp(min=1)
    sq_dev = torch.zeros_like(counts).index_add_(0, inverse, weight * (rewards - means[inverse]) ** 2)
    stds = (sq_dev / (counts - 1).clamp(min=1)).sqrt()
    return means[inverse], stds[inverse]


def weighted_mean_std(values: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Frequency-weighted mean and Bessel-corrected std of ``values`` [N] (float64): the statistics
    of the multiset in which value i appears ``weights[i]`` times.

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


def excluded_bound_scope(std_scope: str) -> str | None:
    """Where the bound of an excluded response's advantage comes from: the scope of the std it is
    divided by (``group`` or ``batch``); None without a std (no division, nothing to bound)."""
    return None if std_scope == "none" else std_scope


def bound_excluded_advantages(
    advantages: torch.Tensor,
    included: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    batch_bound: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Clamp the advantage of every excluded response to [-M, M], M the largest |A| of the included
    responses of its group (``group_ids`` given) or of the batch (``batch_bound``, default: over
    ``advantages``; pass the global value on several ranks). Included responses are unchanged.

    Args:
        advantages: [B] float.
        included: [B] bool, True where the response counts in the statistics.
        group_ids: [B] long for a per-group bound; None for a batch-wide bound.
        batch_bound: M for a batch-wide bound.

    Returns:
        [B] advantages; M = 0 (so A = 0) where no response of the group / batch is included.

    Example:
        >>> bound_excluded_advantages(torch.tensor([0.5, -0.5, -9.0]), torch.tensor([True, True, False]))
        tensor([ 0.5000, -0.5000, -0.5000])
    """
    included = included.bool()
    magnitude = torch.where(included, advantages.abs(), torch.zeros_like(advantages))
    if group_ids is not None:
        _, inverse = torch.unique(group_ids, return_inverse=True)
        n = int(inverse.max().item()) + 1 if inverse.numel() else 0
        bound = torch.zeros(n, dtype=advantages.dtype, device=advantages.device).scatter_reduce_(
            0, inverse, magnitude, reduce="amax"
        )[inverse]
    elif batch_bound is None:
        bound = magnitude.max() if magnitude.numel() else magnitude.new_zeros(())
    else:
        bound = torch.as_tensor(batch_bound, dtype=advantages.dtype, device=advantages.device)
    clamped = torch.minimum(torch.maximum(advantages, -bound), bound)
    return torch.where(included, advantages, clamped)


def normalized_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    mean_scope: str = "group",
    std_scope: str = "batch",
    eps: float = 1e-6,
    batch_stats: tuple[torch.Tensor, torch.Tensor] | None = None,
    weights: torch.Tensor | None = None,
    bound_excluded: bool = True,
) -> torch.Tensor:
    """A_i = (r_i - centre_i) / (scale_i + eps), one advantage per response.

    Args:
        rewards: [B] float rewards.
        group_ids: [B] long; responses of one prompt share an id.
        mean_scope: ``group`` | ``batch`` | ``none`` (centre 0).
        std_scope: ``group`` | ``batch`` | ``none`` (scale 1, eps not added).
        eps: added to the std (docs/method.md: 1e-6).
        batch_stats: (mean, std) of the global batch; computed from ``rewards`` when None.
        weights: [B] non-negative frequency weights of the responses in the group and batch
            statistics (all 1 when None: the paper's definition). ``w_i = L_i`` gives token-weighted
            statistics; ``w_i = 0`` leaves a response out of the statistics (e.g. a truncated one)
            while it still receives an advantage from the others' statistics.
        bound_excluded: under a std scope, clamp the advantage of each weight-0 response by the
            largest |A| of the included ones of its group or batch (:func:`excluded_bound_scope`,
            :func:`bound_excluded_advantages`; a batch bound over ``rewards`` only: callers on
            several ranks pass False and bound with the global value themselves).

    Returns:
        [B] advantages. Under a group scope, a response whose whole group has weight 0 gets 0
        (there is no statistic to compare it with).
    """
    if mean_scope not in SCOPES or std_scope not in SCOPES:
        raise ValueError(f"mean_scope and std_scope must be in {SCOPES}, got {mean_scope!r}, {std_scope!r}")
    if weights is not None and bool((weights < 0).any()):
        raise ValueError("statistics weights must be >= 0")
    # float64: an all-equal group must centre to (almost) exactly 0 before dividing by std + eps,
    # where float32 rounding of the mean (~1e-8) would become ~1e-2 after dividing by eps = 1e-6.
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    r = rewards.double()
    w = torch.ones_like(r) if weights is None else weights.double()

    uses_group = "group" in (mean_scope, std_scope)
    if uses_group:
        g_mean, g_std = group_statistics(r, group_ids, w)
        _, inverse = torch.unique(group_ids, return_inverse=True)
        group_weight = torch.zeros(
            int(inverse.max().item()) + 1 if inverse.numel() else 0, dtype=w.dtype, device=w.device
        )
        empty_group = group_weight.index_add_(0, inverse, w)[inverse] == 0
    if "batch" in (mean_scope, std_scope):
        if batch_stats is None:
            b_mean, b_std = weighted_mean_std(r, w)
        else:
            b_mean, b_std = torch.as_tensor(batch_stats[0]).double(), torch.as_tensor(batch_stats[1]).double()

    centre = {"group": lambda: g_mean, "batch": lambda: b_mean, "none": lambda: 0.0}[mean_scope]()
    out = r - centre
    if std_scope != "none":
        out = out / ((g_std if std_scope == "group" else b_std) + eps)
    if uses_group:
        out = torch.where(empty_group, torch.zeros_like(out), out)
    bound_scope = excluded_bound_scope(std_scope)
    if bound_excluded and weights is not None and bound_scope is not None:
        out = bound_excluded_advantages(out, w > 0, group_ids if bound_scope == "group" else None)
    return out.to(out_dtype)
