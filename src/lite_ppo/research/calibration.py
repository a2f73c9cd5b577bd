"""Calibration of compare's pairwise test on real runs: does it say "significant" as often as it should?

- :func:`aa_split_rate` (A/A): the seeds of one cell split at random into two halves, many times; every split
  compares two groups run the same way, so the share of splits with Welch p < alpha should be near alpha.
- :func:`split_detection_rate` (positive control from one set of runs): each seed scored under two
  conditions (e.g. its held-out accuracy at step 10 and at step 20); every split gives one half of the
  seeds the first condition and the other half the second, so the two groups never share a seed.
- :func:`simulated_split_gap` (the yardstick for a positive control from one set of runs): how far the
  share :func:`split_detection_rate` finds may sit from the power predicted from the same runs, when the
  runs are fresh draws from a normal distribution with their means, SDs and correlation.
- :func:`detection_rate` (positive control): two cells that differ by a known change (10 vs 20 training
  steps, a halved learning rate), random ``half``-vs-``half`` subsamples; the share detected is the power at
  that n, to hold against the planner's prediction (:mod:`lite_ppo.research.power`).

The three rate functions return the share with its 95 % Clopper-Pearson interval
(``scipy.stats.binomtest(...).proportion_ci``).
That interval treats the splits as independent trials; splits of one fixed set of seeds are not (they
reuse the same values), so it describes the splitting noise only, not the luck of the seeds that were run.

Example:
    >>> rng = np.random.default_rng(0)
    >>> aa_split_rate(rng.normal(size=32), 1000, rng)["rate"]      # doctest: +SKIP
    0.047
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from lite_ppo.research.power import ALPHA, power_two_groups

__all__ = ["aa_split_rate", "detection_rate", "predicted_power", "simulated_split_gap", "split_detection_rate"]


def _rate(p: np.ndarray, alpha: float) -> dict[str, Any]:
    detected, n = int((p < alpha).sum()), int(p.size)
    ci = stats.binomtest(detected, n).proportion_ci(confidence_level=0.95, method="exact")
    return {"rate": detected / n, "ci": [float(ci.low), float(ci.high)], "detected": detected, "n_splits": n}


def _welch_p(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Welch's two-sided p-value of each row of ``x`` against the same row of ``y`` (NaN rows: no spread, p = 1)."""
    p = stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue
    return np.where(np.isfinite(p), p, 1.0)


def aa_split_rate(
    scores: list[float] | np.ndarray, n_splits: int, rng: np.random.Generator, alpha: float = ALPHA
) -> dict[str, Any]:
    """``{"rate", "ci", "detected", "n_splits"}``: the share of random half-vs-half splits of one cell's
    per-seed ``scores`` with Welch p < ``alpha`` (an odd seed out is left out of each split)."""
    values = np.asarray(scores, dtype=np.float64)
    half = values.size // 2
    if half < 2:
        raise ValueError(f"an A/A split needs at least 4 seeds, got {values.size}")
    order = rng.permuted(np.tile(np.arange(values.size), (n_splits, 1)), axis=1)
    return _rate(_welch_p(values[order[:, :half]], values[order[:, half : 2 * half]]), alpha)


def detection_rate(
    a_scores: list[float] | np.ndarray,
    b_scores: list[float] | np.ndarray,
    half: int,
    n_splits: int,
    rng: np.random.Generator,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """``{"rate", "ci", "detected", "n_splits"}``: the share of ``n_splits`` random subsamples of ``half`` seeds
    from each cell (without replacement) whose Welch test gives p < ``alpha``."""
    a, b = np.asarray(a_scores, dtype=np.float64), np.asarray(b_scores, dtype=np.float64)
    if half < 2 or half > min(a.size, b.size):
        raise ValueError(f"half must be 2 .. {min(a.size, b.size)} (the smaller cell's seeds), got {half}")
    pick_a = rng.permuted(np.tile(np.arange(a.size), (n_splits, 1)), axis=1)[:, :half]
    pick_b = rng.permuted(np.tile(np.arange(b.size), (n_splits, 1)), axis=1)[:, :half]
    return _rate(_welch_p(a[pick_a], b[pick_b]), alpha)


def split_detection_rate(
    first: list[float] | np.ndarray,
    second: list[float] | np.ndarray,
    n_splits: int,
    rng: np.random.Generator,
    alpha: float = ALPHA,
    half: int | None = None,
) -> dict[str, Any]:
    """``{"rate", "ci", "detected", "n_splits"}``: seed ``i`` scored ``first[i]`` under one condition and
    ``second[i]`` under the other; each split draws ``half`` random seeds (default: half of them) for
    ``first`` and ``half`` others for ``second`` (the rest sit the split out); the share of splits with
    Welch p < ``alpha``. Fewer than half the seeds per group makes the splits less alike, nearer to fresh
    samples."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape or a.size < 4:
        raise ValueError(f"expected the same seeds under both conditions, at least 4, got {a.size} and {b.size}")
    half = a.size // 2 if half is None else half
    if not 2 <= half <= a.size // 2:
        raise ValueError(f"half must be 2 .. {a.size // 2} (half the seeds), got {half}")
    order = rng.permuted(np.tile(np.arange(a.size), (n_splits, 1)), axis=1)
    return _rate(_welch_p(a[order[:, :half]], b[order[:, half : 2 * half]]), alpha)


def predicted_power(
    first: list[float] | np.ndarray, second: list[float] | np.ndarray, half: int, alpha: float = ALPHA
) -> float:
    """The two-sample t-test's power at ``half`` seeds per group for the observed difference of means, in
    units of the two conditions' root-mean-square SD (statsmodels), as ``plan`` predicts it."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    return power_two_groups(float(a.mean() - b.mean()), half, math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2), alpha)


def simulated_split_gap(
    first: list[float] | np.ndarray,
    second: list[float] | np.ndarray,
    half: int,
    pools: int,
    n_splits: int,
    rng: np.random.Generator,
    alpha: float = ALPHA,
) -> dict[str, float]:
    """What :func:`split_detection_rate` against :func:`predicted_power` gives on fresh runs: ``pools``
    sets of as many seeds drawn from a bivariate normal with the observed means, SDs and correlation of
    ``first`` and ``second``, each split and predicted as the real set is.

    Returns ``power`` (at the drawn distribution's own parameters), ``rate`` and ``predicted`` (their means
    over the sets) and ``gap``, ``gap_sd`` (mean and SD of rate − predicted over the sets): a real gap
    within a couple of ``gap_sd`` of ``gap`` is what the method promises."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    mean, cov = np.array([a.mean(), b.mean()]), np.cov(a, b)
    rates, predicted = np.empty(pools), np.empty(pools)
    for i in range(pools):
        x, y = rng.multivariate_normal(mean, cov, size=a.size).T
        rates[i] = split_detection_rate(x, y, n_splits, rng, alpha, half=half)["rate"]
        predicted[i] = predicted_power(x, y, half, alpha)
    gaps = rates - predicted
    return {
        "power": power_two_groups(float(mean[0] - mean[1]), half, math.sqrt((cov[0, 0] + cov[1, 1]) / 2), alpha),
        "rate": float(rates.mean()),
        "predicted": float(predicted.mean()),
        "gap": float(gaps.mean()),
        "gap_sd": float(gaps.std(ddof=1)),
    }
