"""Evaluation metrics: accuracy, mean@n, unbiased pass@k, length, truncation and parse failures.

:class:`EvalMetric` is a ``torchmetrics.Metric`` whose states are all sums
(``dist_reduce_fx="sum"``), so ``compute()`` on several data-parallel ranks gives exactly the
numbers one process would give on all their responses together.

Each problem gets ``n`` responses (``n = 1`` for greedy decoding). Per benchmark:

- ``accuracy``: share of correct responses. Greedy (n = 1): the paper's pass@1 / accuracy;
  sampled (n > 1): the mean over the n samples, reported as ``mean@n`` too.
- ``pass@k`` (for 1 < k <= n, when n > 1): the unbiased estimator of Chen et al. (2021),
  ``1 - C(n - c, k) / C(n, k)`` averaged over problems, c = correct samples of a problem.
- ``maj@k`` (the same k): the share of problems whose most frequent answer among their first k samples
  is right, answers grouped by math-verify equivalence, a tie counted as a random tie-break
  (:mod:`lite_ppo.evaluation.majority`); reported when the update gives the per-problem votes.
- ``response_length``: mean tokens per response (EOS included when generated).
- ``truncation_rate``: share of responses that hit ``max_new_tokens`` without finishing.
- ``unparsed_rate``: share of responses whose answer math-verify could not judge
  (status ``unparsed``, ``no_box``, ``timeout``, ``batch_timeout`` or ``error``; see ``MathVerifyReward``).
- ``status/<status>``: share of each reward status; ``num_problems``, ``num_responses``.

Averages over benchmarks (:func:`average_metrics`): ``average`` is the unweighted mean over the
benchmarks (the paper's average); ``weighted_average`` weights each benchmark by its number of
problems (= the pooled accuracy over all problems).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torchmetrics import Metric

from lite_ppo.rewards import STATUSES

CORRECT_INDEX = STATUSES.index("correct")
UNPARSED_STATUSES = ("unparsed", "no_box", "timeout", "batch_timeout", "error")
UNPARSED_INDICES = tuple(STATUSES.index(s) for s in UNPARSED_STATUSES)
COUNT_KEYS = ("num_problems", "num_responses")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021).

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which avoids huge binomials.

    Example:
        >>> pass_at_k(4, 1, 2)        # 1 - C(3,2)/C(4,2) = 1 - 3/6
        0.5
        >>> pass_at_k(4, 3, 2), pass_at_k(4, 0, 2)
        (1.0, 0.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def default_ks(n: int) -> list[int]:
    """pass@k reported for n samples: powers of two in (1, n), then n (none when n = 1).

    Example:
        >>> default_ks(1), default_ks(8), default_ks(6)
        ([], [2, 4, 8], [2, 4, 6])
    """
    ks, k = [], 2
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n > 1 else []


class EvalMetric(Metric):
    """Metrics of one benchmark over problems with ``num_samples`` responses each.

    Args:
        num_samples: responses per problem (n).
        ks: the k of the reported pass@k (each 1 <= k <= n; default :func:`default_ks`).

    ``update(statuses, lengths, truncated)`` takes ``[P, n]`` tensors: the index of each
    response's reward status in ``lite_ppo.rewards.STATUSES``, its length in tokens, and whether it
    was truncated. Use :func:`status_indices` to turn status strings into indices.

    Example:
        >>> m = EvalMetric(num_samples=2)
        >>> m.update(status_indices([["correct", "wrong"], ["no_box", "no_box"]]),
        ...          torch.tensor([[10, 20], [30, 40]]), torch.tensor([[False, False], [False, True]]))
        >>> out = m.compute(); float(out["accuracy"]), float(out["pass@2"]), float(out["unparsed_rate"])
        (0.25, 0.5, 0.5)
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, num_samples: int = 1, ks: Sequence[int] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.num_samples = int(num_samples)
        self.ks = list(default_ks(self.num_samples) if ks is None else ks)
        for k in self.ks:
            if not 1 <= k <= self.num_samples:
                raise ValueError(f"pass@{k} needs 1 <= k <= num_samples={self.num_samples}")
        # correct_hist[c] = problems with exactly c correct responses: every metric derives from it.
        self.add_state("correct_hist", torch.zeros(self.num_samples + 1, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("status_counts", torch.zeros(len(STATUSES), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("length_sum", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("truncated_count", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        # maj@k: the per-problem scores' sum for each k, and the problems that came with them.
        self.add_state("majority_sum", torch.zeros(len(self.ks), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("majority_problems", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self,
        statuses: torch.Tensor,
        lengths: torch.Tensor,
        truncated: torch.Tensor,
        majority: torch.Tensor | None = None,
    ) -> None:
        """``majority``: ``[P, len(ks)]`` maj@k scores per problem, when the caller has the answers to
        vote on (:func:`~lite_ppo.evaluation.majority.majority_score`)."""
        if statuses.dim() != 2 or statuses.shape[1] != self.num_samples:
            raise ValueError(f"expected statuses of shape [problems, {self.num_samples}], got {tuple(statuses.shape)}")
        if lengths.shape != statuses.shape or truncated.shape != statuses.shape:
            raise ValueError("statuses, lengths and truncated must have the same shape")
        device = self.correct_hist.device
        statuses = statuses.to(device=device, dtype=torch.long)
        correct_per_problem = (statuses == CORRECT_INDEX).sum(dim=1)
        self.correct_hist += torch.bincount(correct_per_problem, minlength=self.num_samples + 1).to(torch.float64)
        self.status_counts += torch.bincount(statuses.reshape(-1), minlength=len(STATUSES)).to(torch.float64)
        self.length_sum += lengths.to(device=device, dtype=torch.float64).sum()
        self.truncated_count += truncated.to(device=device).to(torch.float64).sum()
        if majority is not None and self.ks:
            if tuple(majority.shape) != (statuses.shape[0], len(self.ks)):
                raise ValueError(f"expected majority of shape [problems, {len(self.ks)}], got {tuple(majority.shape)}")
            self.majority_sum += majority.to(device=device, dtype=torch.float64).sum(dim=0)
            self.majority_problems += float(statuses.shape[0])

    def compute(self) -> dict[str, torch.Tensor]:
        n = self.num_samples
        problems = self.correct_hist.sum()
        responses = problems * n
        denom_p, denom_r = problems.clamp(min=1), responses.clamp(min=1)
        correct = (self.correct_hist * torch.arange(n + 1, dtype=torch.float64, device=self.correct_hist.device)).sum()
        out: dict[str, torch.Tensor] = {"accuracy": correct / denom_r}
        if n > 1:
            out[f"mean@{n}"] = out["accuracy"].clone()
        for k in self.ks:
            weights = torch.tensor(
                [pass_at_k(n, c, k) for c in range(n + 1)], dtype=torch.float64, device=self.correct_hist.device
            )
            out[f"pass@{k}"] = (self.correct_hist * weights).sum() / denom_p
        if self.ks and problems > 0 and bool(self.majority_problems == problems):  # every problem voted
            for i, k in enumerate(self.ks):
                out[f"maj@{k}"] = self.majority_sum[i] / denom_p
        out["response_length"] = self.length_sum / denom_r
        out["truncation_rate"] = self.truncated_count / denom_r
        out["unparsed_rate"] = self.status_counts[list(UNPARSED_INDICES)].sum() / denom_r
        for i, status in enumerate(STATUSES):
            out[f"status/{status}"] = self.status_counts[i] / denom_r
        out["num_problems"] = problems
        out["num_responses"] = responses
        return out


def status_indices(statuses: Sequence[Sequence[str]]) -> torch.Tensor:
    """``[P][n]`` status strings -> a ``[P, n]`` long tensor of indices into ``STATUSES``."""
    index = {s: i for i, s in enumerate(STATUSES)}
    try:
        return torch.tensor([[index[s] for s in row] for row in statuses], dtype=torch.long).reshape(len(statuses), -1)
    except KeyError as error:
        raise ValueError(f"unknown reward status {error.args[0]!r}; known: {', '.join(STATUSES)}") from None


def to_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Tensors -> python floats (counts as exact floats)."""
    return {k: float(v) for k, v in values.items()}


def average_metrics(
    per_benchmark: Mapping[str, Mapping[str, float]], include: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """``{"average": ..., "weighted_average": ...}`` over the ``include``d benchmarks.

    ``average`` is the unweighted mean over benchmarks (the paper's average); ``weighted_average``
    weights each benchmark by its ``num_problems``. Only metrics every included benchmark has are
    averaged; ``num_problems`` / ``num_responses`` are summed in both. Empty dicts when nothing is
    included.

    Example:
        >>> avg = average_metrics(
        ...     {"a": {"accuracy": 1.0, "num_problems": 1.0}, "b": {"accuracy": 0.0, "num_problems": 3.0}}
        ... )
        >>> avg["average"]["accuracy"], avg["weighted_average"]["accuracy"]
        (0.5, 0.25)
    """
    names = [n for n in (per_benchmark if include is None else include) if n in per_benchmark]
    if not names:
        return {"average": {}, "weighted_average": {}}
    rows = [per_benchmark[n] for n in names]
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    weights = [r.get("num_problems", 1.0) for r in rows]
    total = sum(weights)
    average, weighted = {}, {}
    for key in keys:
        values = [r[key] for r in rows]
        if key in COUNT_KEYS:
            average[key] = weighted[key] = float(sum(values))
            continue
        average[key] = float(sum(values) / len(values))
        weighted[key] = float(sum(v * w for v, w in zip(values, weights)) / total) if total > 0 else math.nan
    return {"average": average, "weighted_average": weighted}


def flatten(prefix: str, groups: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{"<prefix>/<group>/<metric>": value}`` for logging (e.g. ``eval/math500/accuracy``)."""
    return {f"{prefix}/{group}/{key}": value for group, metrics in groups.items() for key, value in metrics.items()}
