"""The statistics of a comparison over seeds, all from scipy: a mean's confidence interval, the
difference of two groups' means (Welch), and a mean of paired contrasts (factorial effects).

- :func:`mean_ci`: the mean over seeds with a two-sided t-interval, mean ± t(level, n-1) · s / √n
  (``scipy.stats.ttest_1samp(...).confidence_interval``); it assumes the seeds' values are
  independent draws of a roughly normal quantity, which with 2-5 seeds is the honest reading, and
  its width shows how little a few seeds pin down.
- :func:`welch_difference`: mean(a) - mean(b) with Welch's t-test (unequal variances,
  ``scipy.stats.ttest_ind(a, b, equal_var=False)``): its two-sided p-value and the
  Welch-Satterthwaite confidence interval of the difference.
- :func:`contrast_ci`: the mean of per-seed contrasts (a factorial effect computed within each
  seed) with its t-interval and the one-sample t-test's p-value against 0.

Undefined values are None: a CI with fewer than two values, a p-value when every value is equal
(zero variance: the interval is the single point, the test has no answer).

Example:
    >>> mean_ci([0.5, 0.6, 0.7])["ci"]        # doctest: +ELLIPSIS
    [0.351..., 0.848...]
    >>> welch_difference([0.5, 0.6, 0.7], [0.2, 0.4])["p"]  # doctest: +ELLIPSIS
    0.14...
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["CONFIDENCE", "contrast_ci", "mean_ci", "welch_difference"]

CONFIDENCE = 0.95


def _clean(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def mean_ci(values: list[float] | np.ndarray, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """``{"mean", "std", "n", "ci": [low, high]}``: std the sample std (ddof=1); std and ci None below two values."""
    arr = np.asarray(values, dtype=np.float64)
    n = int(arr.size)
    if n == 0:
        return {"mean": None, "std": None, "n": 0, "ci": None}
    mean = float(arr.mean())
    if n == 1:
        return {"mean": mean, "std": None, "n": 1, "ci": None}
    std = float(arr.std(ddof=1))
    if std == 0.0:  # scipy's interval is NaN at zero spread; the values pin the mean exactly
        return {"mean": mean, "std": 0.0, "n": n, "ci": [mean, mean]}
    low, high = stats.ttest_1samp(arr, 0.0).confidence_interval(confidence)
    return {"mean": mean, "std": std, "n": n, "ci": [float(low), float(high)]}


def welch_difference(
    a: list[float] | np.ndarray, b: list[float] | np.ndarray, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """``{"diff", "ci", "p", "n_a", "n_b"}``: mean(a) - mean(b), Welch's CI and two-sided p-value
    (None with fewer than two values in either group or zero variance in both)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    out: dict[str, Any] = {
        "diff": float(x.mean() - y.mean()) if x.size and y.size else None,
        "ci": None,
        "p": None,
        "n_a": int(x.size),
        "n_b": int(y.size),
    }
    if x.size < 2 or y.size < 2 or (x.std() == 0.0 and y.std() == 0.0):
        return out
    result = stats.ttest_ind(x, y, equal_var=False)
    low, high = result.confidence_interval(confidence)
    out["ci"] = [float(low), float(high)]
    out["p"] = _clean(float(result.pvalue))
    return out


def contrast_ci(contrasts: list[float] | np.ndarray, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """``{"estimate", "ci", "p", "n"}``: the mean of per-seed contrasts, its t-interval and the
    one-sample t-test's two-sided p-value against 0 (None below two contrasts or at zero spread)."""
    summary = mean_ci(contrasts, confidence)
    out = {"estimate": summary["mean"], "ci": summary["ci"], "p": None, "n": summary["n"]}
    if summary["n"] >= 2 and summary["std"]:
        out["p"] = _clean(float(stats.ttest_1samp(np.asarray(contrasts, dtype=np.float64), 0.0).pvalue))
    return out
