"""Power of a comparison over seeds: the minimum detectable effect (MDE), the seeds a target MDE needs, and
one plain sentence per contrast, from statsmodels' power module; only the whole-seed search checks its answer with
the same two-sided t-test power taken from scipy's noncentral t (statsmodels answers NaN for large effects).

- :func:`mde_two_groups`: the smallest true difference of two groups' means that the test detects with
  probability ``power`` at two-sided level ``alpha``, given each group's n and the observed SD pooled within
  the groups (``TTestIndPower``: the independent two-sample t-test; compare's Welch test has about the same
  power when the two spreads are alike, and Welch's degrees of freedom are not known before the data).
- :func:`mde_contrast`: the same for a mean of per-seed contrasts (a factorial main effect or interaction,
  tested by the one-sample t-test): ``TTestPower`` with the contrasts' own SD.
- :func:`mde_normal`: the MDE of an estimate with a known standard error (a bootstrap's), normal approximation
  (``NormalIndPower`` with one observation of SD ``se``).
- :func:`seeds_for_two_groups` / :func:`seeds_for_contrast`: the inverse, seeds per cell for a target MDE
  (``solve_power`` for n, rounded up, at least 2; where the solver fails, as it does for an effect of many
  SDs or a tiny one, the fewest seeds with the power, found with the power function itself); beyond
  :data:`MAX_SEEDS` per cell, :class:`TooManySeeds`.
- :func:`sd_interval`: the 95 % confidence interval of an SD from its degrees of freedom (chi-square), for
  what an SD estimated from few seeds leaves open.
- :func:`pooled_sd`: the within-group SD of existing runs' scores (groups with one run add nothing).
- :func:`verdict`: ``detected: +0.031 (95 % CI +0.012 to +0.050, p = 0.003)`` or ``not detected: no effect
  larger than 0.024 at 80 % power (observed +0.004, 95 % CI -0.015 to +0.023, p = 0.64)``; for a method used
  below the seeds where it is calibrated, the interval only, with no claim either way.

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
    "MAX_SEEDS",
    "NO_SPREAD",
    "POWER",
    "POWER_METHOD",
    "TooManySeeds",
    "mde_contrast",
    "mde_normal",
    "mde_two_groups",
    "pooled_sd",
    "power_two_groups",
    "sd_interval",
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
# The most seeds per cell a plan is computed for: far beyond any study, and where the power functions still
# answer (a plan asking for more says so instead of a number).
MAX_SEEDS = 1_000_000
# An SD below this, in score units, is no spread: a held-out accuracy moves in steps of 1 / problems (1e-6
# for a million problems), and event files store float32, whose rounding of a score near 1 is ~6e-8, so a
# smaller SD is rounding, not a difference between seeds.
NO_SPREAD = 1e-6


class TooManySeeds(ValueError):
    """A target effect that needs more than :data:`MAX_SEEDS` seeds per cell."""


def _solve(analysis: Any, **kwargs: Any) -> float:
    # statsmodels warns and falls back to another root finder on hard cases; its answer is still checked
    # by the tests against scipy's noncentral t, so the warning says nothing a user can act on. statsmodels
    # imports its warning classes on its first failure, and that import sets their filter to "always" in
    # front of ours: imported here first, its filter comes before the "ignore" below.
    import statsmodels.tools.sm_exceptions  # noqa: F401

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


def _seeds(solve: Any, power_at: Any, power: float) -> int:
    """The fewest whole seeds (at least 2) with ``power_at(n) >= power``, from the solver's fractional answer
    (``solve()``); :class:`TooManySeeds` beyond :data:`MAX_SEEDS`."""
    # Fewer than two seeds per cell leave no spread to test with, whatever the power calculation says; an
    # effect of many SDs has its power at 2 seeds already (where the solver returns NaN).
    if power_at(2) >= power:
        return 2
    if power_at(MAX_SEEDS) < power:
        raise TooManySeeds(f"more than {MAX_SEEDS:,} seeds per cell")
    solved = solve()
    n = math.ceil(solved) if math.isfinite(solved) and 2 <= solved <= MAX_SEEDS else None
    if n is None or power_at(n) < power:
        n = _bisect(power_at, power)  # the solver failed (NaN, or an answer without the power)
    # The root finder stops within ~1e-7 of the exact n: 3.0000001 must give 3, so the whole number below
    # the rounded-up answer is checked with the power function itself.
    while n > 2 and power_at(n - 1) >= power:
        n -= 1
    return n


def _bisect(power_at: Any, power: float) -> int:
    """The fewest seeds in 2 .. :data:`MAX_SEEDS` with ``power_at(n) >= power`` (power rises with n)."""
    low, high = 2, MAX_SEEDS  # power_at(low) < power <= power_at(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power_at(middle) >= power else (middle, high)
    return high


def _t_test_power(ncp: float, df: int, alpha: float) -> float:
    """The power of a two-sided t-test with ``df`` degrees of freedom whose statistic has noncentrality ``ncp``
    (what statsmodels' power functions compute, without their NaN for a large ``ncp``)."""
    from scipy.stats import nct, t

    critical = t.ppf(1 - alpha / 2, df)
    # scipy's lower tail comes out NaN for a large ncp; it is at most P(T < 0) = Φ(-ncp), negligible there, and
    # leaving it out can only understate the power (never plan too few seeds).
    lower = float(nct.cdf(-critical, df, ncp))
    return float(nct.sf(critical, df, ncp)) + (lower if math.isfinite(lower) else 0.0)


def power_two_groups(difference: float, n: int, sd: float, alpha: float = ALPHA) -> float:
    """The power of the two-sample t-test to detect ``difference`` with ``n`` seeds per cell, SD ``sd`` each."""
    d = abs(difference) / sd
    return _t_test_power(d * math.sqrt(n / 2), 2 * n - 2, alpha)  # statsmodels' answer, without its NaN


def seeds_for_two_groups(mde: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Seeds per cell for a 2-cell comparison to detect ``mde`` (two equal groups, SD ``sd`` each)."""
    from statsmodels.stats.power import TTestIndPower

    d = _effect_size(mde, sd)
    return _seeds(
        lambda: _solve(TTestIndPower(), effect_size=d, nobs1=None, ratio=1.0, alpha=alpha, power=power),
        lambda k: _t_test_power(d * math.sqrt(k / 2), 2 * k - 2, alpha),
        power,
    )


def seeds_for_contrast(mde: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Seeds per cell for a mean of per-seed contrasts of SD ``sd`` to detect ``mde``.

    For a 2 x 2 main effect, the per-seed contrast is the mean of two differences of cells, so with cells of
    SD ``sd`` and independent between cells its SD is ``sd`` too. Seeds shared by the cells (the same data
    order and sampling) usually make it smaller, but not always: with a pilot of the design itself, pass the
    SD of its own per-seed contrasts (``lite-ppo plan`` prints the paired figure when groups share seeds)."""
    from statsmodels.stats.power import TTestPower

    d = _effect_size(mde, sd)
    return _seeds(
        lambda: _solve(TTestPower(), effect_size=d, nobs=None, alpha=alpha, power=power),
        lambda k: _t_test_power(d * math.sqrt(k), k - 1, alpha),
        power,
    )


def sd_interval(sd: float, df: int, confidence: float = 0.95) -> tuple[float, float]:
    """The ``confidence`` interval of the true SD behind an SD ``sd`` estimated with ``df`` degrees of freedom
    (normal scores: ``df · sd² / σ²`` is chi-square with ``df`` degrees of freedom).

    Example:
        >>> [round(x, 4) for x in sd_interval(0.025, 6)]   # six degrees of freedom leave a factor 3.4 open
        [0.0161, 0.0551]
    """
    from scipy.stats import chi2

    tail = (1 - confidence) / 2
    return sd * math.sqrt(df / chi2.ppf(1 - tail, df)), sd * math.sqrt(df / chi2.ppf(tail, df))


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
    uncalibrated: str | None = None,
) -> str | None:
    """One sentence for a contrast: detected (p < alpha) or not, and then which effects are ruled out.

    None when there is no test (fewer than two seeds, no spread): nothing can be said. ``uncalibrated`` says
    why the method's p-value and MDE cannot be trusted here (``not calibrated below 16 seeds per cell``):
    the sentence then gives the interval and claims neither a detection nor a bound.

    Example:
        >>> verdict(0.004, [-0.015, 0.023], 0.64, 0.024)
        'not detected: no effect larger than 0.024 at 80 % power (observed +0.004, 95 % CI -0.015 to +0.023, p = 0.64)'
        >>> verdict(0.004, [-0.015, 0.023], 0.64, 0.024, uncalibrated="not calibrated below 16 seeds")[:60]
        "not calibrated below 16 seeds: interval shown, no 'detected'"
    """
    if diff is None or p is None:
        return None
    interval = f"95 % CI {_num(ci[0], True)} to {_num(ci[1], True)}, " if ci else ""
    if uncalibrated:
        return (
            f"{uncalibrated}: interval shown, no 'detected' or 'no effect larger than' claim "
            f"(observed {_num(diff, True)}, {interval}p = {_p(p)})"
        )
    if p < alpha:
        return f"detected: {_num(diff, True)} ({interval}p = {_p(p)})"
    ruled_out = f"no effect larger than {_num(mde)} at {power * 100:.0f} % power " if mde is not None else ""
    return f"not detected: {ruled_out}(observed {_num(diff, True)}, {interval}p = {_p(p)})"
