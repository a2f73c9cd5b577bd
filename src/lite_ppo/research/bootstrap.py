"""A two-level bootstrap of the difference of two groups' accuracies on the same problems.

Held-out accuracy varies for two reasons: the seed (what training did) and the problems (which ones the
held-out set happens to hold). A Welch test over per-seed accuracies sees only the first. With per-problem
results of every run (:mod:`lite_ppo.research.problem_results`), :func:`paired_bootstrap` resamples both:
in each of ``B`` rounds it draws the seeds of each group with replacement, and one set of problems with
replacement that both groups share (paired by problem: a problem that is hard for every policy moves both
groups' means alike and cancels in the difference). The difference of the two means over the drawn seeds
and problems gives

- ``ci``: the percentile interval of the ``B`` differences (2.5 % and 97.5 %);
- ``p``: two-sided, twice the smaller share of differences on either side of 0, with the +1 correction
  ``(count + 1) / (B + 1)`` so that it is never 0 (a percentile bootstrap's p, about as exact as its CI);
- ``se``: the SD of the ``B`` differences (the MDE is computed from it, :func:`lite_ppo.research.power.mde_normal`).

``diff`` is the plain difference of the two groups' mean accuracies over every seed and problem.

Resampling a group's n seeds sees the spread between seeds only through those n: with two seeds, half the
rounds draw one seed twice, and the interval comes out far narrower than the seeds' own t-interval. Its
false-positive rate was measured on real runs from :data:`BOOTSTRAP_CALIBRATED_SEEDS` seeds per group up,
so below that ``compare`` shows its interval without a verdict.

Example:
    >>> a = np.array([[1, 1, 0, 1], [1, 0, 0, 1]]); b = np.array([[1, 0, 0, 0], [0, 0, 1, 0]])
    >>> paired_bootstrap(a, b, np.random.default_rng(0))["diff"]
    0.375
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP_CALIBRATED_SEEDS", "BOOTSTRAP_METHOD", "BOOTSTRAP_ROUNDS", "BOOTSTRAP_SEED", "paired_bootstrap"]

BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_SEED = 0  # a fixed Generator seed: the same runs give the same interval every time
BOOTSTRAP_METHOD = "two-level bootstrap over seeds and problems, paired by problem"
# The fewest seeds per group at which the bootstrap's A/A rate was measured (docs/benchmarks.md, "The
# instrument, calibrated"). Nothing says how it behaves with fewer, and with two seeds it cannot see their spread.
BOOTSTRAP_CALIBRATED_SEEDS = 16


def _counts(rng: np.random.Generator, rounds: int, n: int) -> np.ndarray:
    """``rounds`` x ``n``: how often each of ``n`` items is drawn in each round of ``n`` draws with replacement."""
    draws = rng.integers(0, n, size=(rounds, n)) + (np.arange(rounds) * n)[:, None]
    return np.bincount(draws.ravel(), minlength=rounds * n).reshape(rounds, n).astype(np.float64)


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, rng: np.random.Generator | None = None, rounds: int = BOOTSTRAP_ROUNDS
) -> dict[str, Any]:
    """``{"method", "diff", "ci", "p", "se", "rounds", "n_a", "n_b", "n_problems"}`` for per-problem results
    ``a`` (seeds x problems, 0/1) and ``b`` (seeds x the same problems in the same order)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or not a.size or not b.size:
        raise ValueError(f"expected seeds x problems arrays over the same problems, got {a.shape} and {b.shape}")
    rng = rng if rng is not None else np.random.default_rng(BOOTSTRAP_SEED)
    (n_a, problems), n_b = a.shape, b.shape[0]
    seeds_a, seeds_b = _counts(rng, rounds, n_a), _counts(rng, rounds, n_b)
    weights = _counts(rng, rounds, problems)  # one draw of problems per round, shared by both groups
    # Mean over drawn seeds and problems = Σ_i Σ_p (seed count_i)(problem count_p) x_ip / (n · P), per round.
    mean_a = ((seeds_a @ a) * weights).sum(axis=1) / (n_a * problems)
    mean_b = ((seeds_b @ b) * weights).sum(axis=1) / (n_b * problems)
    diffs = mean_a - mean_b
    below, above = int((diffs <= 0).sum()), int((diffs >= 0).sum())
    low, high = np.quantile(diffs, [0.025, 0.975])
    return {
        "method": BOOTSTRAP_METHOD,
        "diff": float(a.mean() - b.mean()),
        "ci": [float(low), float(high)],
        "p": min(1.0, 2 * (min(below, above) + 1) / (rounds + 1)),
        "se": float(diffs.std(ddof=1)),
        "rounds": rounds,
        "n_a": n_a,
        "n_b": n_b,
        "n_problems": problems,
    }
