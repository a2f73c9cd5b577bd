"""Power of a comparison over seeds: the minimum detectable effect (MDE), the seeds a target MDE needs, and
one plain sentence per contrast, all from statsmodels' power module (no power formula written here).

- :func:`mde_two_groups`: the smallest true difference of two groups' means that the test detects with
  probability ``power`` at two-sided level ``alpha``, given each group's n and the observed SD pooled within
  the groups (``TTestIndPower``: the independent two-sample t-test; compare's Welch test has about the same
  power when the two spreads are alike, and Welch's degrees of freedom are not known before the data).
- :func:`mde_contrast`: the same for a mean of per-seed contrasts (a factorial main effect or interaction,
  tested by the one-sample t-test): ``TTestPower`` with the contrasts' own SD.
- :func:`mde_normal`: the MDE of an estimate with a known standard error (a bootstrap's), normal approximation
  (``NormalIndPower`` with one observation of SD ``se``).
- :func:`seeds_for_two_groups` / :func:`seeds_for_contrast`: the inverse, seeds per cell for a target MDE
  (``solve_power`` for n, rounded up, at least 2).
- :func:`pooled_sd`: the within-group SD of existing runs' scores (groups with one run add nothing).
- :func:`verdict`: ``detected: +0.031 (95 % CI +0.012 to +0.050, p = 0.003)`` or ``not detected: no effect
  larger than 0.024 at 80 % power (observed +0.004, 95 % CI -0.015 to +0.023, p = 0.64)``.

Example:
    >>> round(mde_two_groups(5, 5, sd=0.025), 4)      # 5 seeds per cell, per-cell SD 0.025
    0.0506
    >>> seeds_for_two_groups(0.02, sd=0.025)           # per cell, for an MDE of 2 points
    26
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

__all__ = [
    "ALPHA",
    "POWER",
    "POWER_METHOD",
    "mde_contrast",
    "mde_normal",
    "mde_two_groups",
    "pooled_sd",
    "power_two_groups",
    "seeds_for_contrast",
    "seeds_for_two_groups",
    "verdict",
]

ALPHA = 0.05
POWER = 0.8
POWER_METHOD = (
    "minimum detectable effect (MDE) at 80 % power, α = 0.05 two-sided: pairs from the SD pooled within the "
    "two groups and their n (statsmodels TTestIndPower), factorial effects from the per-seed contrasts' SD and "
    "n (TTestPower), the paired bootstrap from its standard error (NormalIndPower)"
)


def _solve(analysis: Any, **kwargs: Any) -> float:
    # statsmodels warns and falls back to another root finder on hard cases; its answer is still checked
    # by the tests against scipy's noncentral t, so the warning says nothing a user can act on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(analysis.solve_power(alternative="two-sided", **kwargs))


def _effect_size(mde: float, sd: float) -> float:
    if not (mde > 0 and sd > 0 and math.isfinite(mde) and math.isfinite(sd)):
        raise ValueError(f"MDE and SD must be positive and finite, got mde={mde}, sd={sd}")
    return mde / sd


def mde_two_groups(n_a: int, n_b: int, sd: float | None, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The MDE of a difference of two groups' means (None below two values per group or without spread)."""
    from statsmodels.stats.power import TTestIndPower

    if n_a < 2 or n_b < 2 or sd is None or not sd > 0:
        return None
    d = _solve(TTestIndPower(), effect_size=None, nobs1=n_a, ratio=n_b / n_a, alpha=alpha, power=power)
    return d * sd


def mde_contrast(n: int, sd: float | None, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The MDE of a mean of ``n`` per-seed contrasts of SD ``sd`` (None below two contrasts or without spread)."""
    from statsmodels.stats.power import TTestPower

    if n < 2 or sd is None or not sd > 0:
        return None
    return _solve(TTestPower(), effect_size=None, nobs=n, alpha=alpha, power=power) * sd


def mde_normal(se: float | None, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The MDE of an estimate with standard error ``se`` under a normal approximation (None without one)."""
    from statsmodels.stats.power import NormalIndPower

    if se is None or not se > 0:
        return None
    # ratio=0: a one-sample z-test; one observation of SD se is the estimate itself.
    return _solve(NormalIndPower(), effect_size=None, nobs1=1, ratio=0.0, alpha=alpha, power=power) * se


def _seeds(solved: float, power_at: Any, power: float) -> int:
    """The fewest whole seeds (at least 2) with ``power_at(n) >= power``, from the solver's fractional answer."""
    # The root finder stops within ~1e-7 of the exact n: 3.0000001 must give 3, so the whole number below
    # the rounded-up answer is checked with the power function itself. Fewer than two seeds per cell leave
    # no spread to test with, whatever the power calculation says.
    n = max(2, math.ceil(solved))
    while n > 2 and power_at(n - 1) >= power:
        n -= 1
    return n


def power_two_groups(difference: float, n: int, sd: float, alpha: float = ALPHA) -> float:
    """The power of the two-sample t-test to detect ``difference`` with ``n`` seeds per cell, SD ``sd`` each."""
    from statsmodels.stats.power import TTestIndPower

    return float(TTestIndPower().power(effect_size=abs(difference) / sd, nobs1=n, alpha=alpha, ratio=1.0))


def seeds_for_two_groups(mde: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Seeds per cell for a 2-cell comparison to detect ``mde`` (two equal groups, SD ``sd`` each)."""
    from statsmodels.stats.power import TTestIndPower

    d = _effect_size(mde, sd)
    n = _solve(TTestIndPower(), effect_size=d, nobs1=None, ratio=1.0, alpha=alpha, power=power)
    return _seeds(n, lambda k: power_two_groups(mde, k, sd, alpha), power)


def seeds_for_contrast(mde: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Seeds per cell for a mean of per-seed contrasts of SD ``sd`` to detect ``mde``.

    For a 2 x 2 main effect, the per-seed contrast is the mean of two differences of cells, so with cells of
    SD ``sd`` and independent between cells its SD is ``sd`` too. Seeds shared by the cells (the same data
    order and sampling) usually make it smaller, but not always: with a pilot of the design itself, pass the
    SD of its own per-seed contrasts (``lite-ppo plan`` prints the paired figure when groups share seeds)."""
    from statsmodels.stats.power import TTestPower

    d = _effect_size(mde, sd)
    n = _solve(TTestPower(), effect_size=d, nobs=None, alpha=alpha, power=power)
    return _seeds(n, lambda k: TTestPower().power(effect_size=d, nobs=k, alpha=alpha), power)


def pooled_sd(groups: list[list[float]] | list[np.ndarray]) -> tuple[float | None, int]:
    """``(sd, df)``: the SD pooled within groups, sqrt(Σ squared deviations from each group's mean / Σ (n - 1)),
    and its degrees of freedom; ``(None, 0)`` when no group has two values.

    Example:
        >>> pooled_sd([[0.5, 0.6, 0.7], [0.2, 0.4]])
        (0.11547005383792514, 3)
    """
    squares, df = 0.0, 0
    for values in groups:
        arr = np.asarray(values, dtype=np.float64)
        if arr.size >= 2:
            squares += float(((arr - arr.mean()) ** 2).sum())
            df += arr.size - 1
    return (math.sqrt(squares / df), df) if df else (None, 0)


def _num(value: float, sign: bool = False) -> str:
    return f"{value:+.3g}" if sign else f"{value:.3g}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


def verdict(
    diff: float | None,
    ci: list[float] | None,
    p: float | None,
    mde: float | None,
    alpha: float = ALPHA,
    power: float = POWER,
) -> str | None:
    """One sentence for a contrast: detected (p < alpha) or not, and then which effects are ruled out.

    None when there is no test (fewer than two seeds, no spread): nothing can be said.

    Example:
        >>> verdict(0.004, [-0.015, 0.023], 0.64, 0.024)
        'not detected: no effect larger than 0.024 at 80 % power (observed +0.004, 95 % CI -0.015 to +0.023, p = 0.64)'
    """
    if diff is None or p is None:
        return None
    interval = f"95 % CI {_num(ci[0], True)} to {_num(ci[1], True)}, " if ci else ""
    if p < alpha:
        return f"detected: {_num(diff, True)} ({interval}p = {_p(p)})"
    ruled_out = f"no effect larger than {_num(mde)} at {power * 100:.0f} % power " if mde is not None else ""
    return f"not detected: {ruled_out}(observed {_num(diff, True)}, {interval}p = {_p(p)})"
