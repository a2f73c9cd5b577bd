"""From rollout batches to metrics and per-response records, shared by the command and the callback.

Both the ``lite-ppo evaluate`` command and the ``Evaluation`` callback generate and score with
:class:`~lite_ppo.rollout.producer.RolloutProducer` (same prompt formatter, same engine, same
``MathVerifyReward``), then feed the resulting ``RolloutBatch`` to :class:`GroupMetrics` here, so a
number means the same in both places.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from lite_ppo.evaluation.majority import majority_score
from lite_ppo.evaluation.metrics import EvalMetric, average_metrics, status_indices, to_floats
from lite_ppo.rewards import STATUSES

if TYPE_CHECKING:  # type hints only: keeps this module free of Lightning imports
    from lite_ppo.data.problem import Problem
    from lite_ppo.rollout.batch import RolloutBatch


def rows_by_problem(rollout: RolloutBatch, num_problems: int) -> list[list[int]]:
    """Row indices of each problem's responses (``group_ids`` = position of the problem in the batch)."""
    rows: list[list[int]] = [[] for _ in range(num_problems)]
    for row, group in enumerate(rollout.group_ids.tolist()):
        rows[group].append(row)
    return rows


def response_records(
    group: str,
    problems: Sequence[Problem],
    rollout: RolloutBatch,
    prompts: Sequence[str] | None = None,
    valid: Sequence[bool] | None = None,
) -> list[dict[str, Any]]:
    """One JSON-ready record per response of the ``valid`` problems, in problem then sample order.

    Keys: ``benchmark, id, sample, prompt, response, answer, extracted, status, correct, length,
    truncated`` (``prompt`` only when ``prompts`` is given).
    """
    _require_statuses(rollout)
    extras = rollout.extras
    lengths = rollout.response_lengths.tolist()
    truncated = rollout.truncated.tolist()
    correct = rollout.correct.tolist()  # the verifier's verdict, as scored
    out = []
    for p, rows in enumerate(rows_by_problem(rollout, len(problems))):
        if valid is not None and not valid[p]:
            continue
        for sample, row in enumerate(rows):
            record: dict[str, Any] = {"benchmark": group, "id": problems[p].id, "sample": sample}
            if prompts is not None:
                record["prompt"] = prompts[p]
            status = rollout.reward_status[row]
            record.update(
                response=extras["response_text"][row],
                answer=problems[p].answer,
                extracted=extras["extracted"][row],
                status=status,
                correct=bool(correct[row]),
                length=int(lengths[row]),
                truncated=bool(truncated[row]),
            )
            out.append(record)
    return out


def problem_results(problems: Sequence[Problem], rollout: RolloutBatch) -> list[dict[str, Any]]:
    """``{"id", "tier", "correct"}`` per problem of a batch scored with one response per problem;
    ``correct`` is the verifier's status ``"correct"``, the rule :class:`GroupMetrics` counts as accurate.

    Example:
        >>> from types import SimpleNamespace
        >>> from lite_ppo.data.problem import Problem
        >>> batch = SimpleNamespace(group_ids=torch.tensor([1, 0]), reward_status=["wrong", "correct"])
        >>> problem_results([Problem("a", "1+1?", "2", "easy"), Problem("b", "2+2?", "4", "easy")], batch)
        [{'id': 'a', 'tier': 'easy', 'correct': True}, {'id': 'b', 'tier': 'easy', 'correct': False}]
    """
    statuses = _require_statuses(rollout)
    out = []
    for problem, rows in zip(problems, rows_by_problem(rollout, len(problems)), strict=True):
        if len(rows) != 1:
            raise ValueError(f"problem {problem.id!r} has {len(rows)} responses: per-problem results need exactly 1")
        out.append({"id": problem.id, "tier": problem.tier, "correct": statuses[rows[0]] == "correct"})
    return out


def _require_statuses(rollout: RolloutBatch) -> list[str]:
    if rollout.reward_status is None:
        raise ValueError(
            "the rollout batch carries no reward_status: evaluation needs the verifier's status of every response"
        )
    return rollout.reward_status


class GroupMetrics:
    """One :class:`EvalMetric` per group (benchmark or tier), plus averages over the groups.

    Args:
        groups: group names in report order (every rank must list the same ones, in the same order:
            ``compute`` synchronises the metrics across ranks group by group).
        num_samples: responses per problem.
        ks: pass@k values (default: :func:`~lite_ppo.evaluation.metrics.default_ks`).
        averaged: the groups that enter ``average`` / ``weighted_average`` (default: all).

    Example:
        >>> gm = GroupMetrics(["a", "b"])
        >>> gm.update_records("a", [{"status": "correct", "length": 3, "truncated": False}])
        >>> gm.update_records("b", [{"status": "wrong", "length": 5, "truncated": True}])
        >>> gm.compute()["average"]["accuracy"]
        0.5
    """

    def __init__(
        self,
        groups: Sequence[str],
        num_samples: int = 1,
        ks: Sequence[int] | None = None,
        averaged: Sequence[str] | None = None,
    ) -> None:
        self.groups = list(groups)
        self.num_samples = num_samples
        self.ks = ks
        self.averaged = list(self.groups if averaged is None else averaged)
        self.metrics = {g: EvalMetric(num_samples=num_samples, ks=ks) for g in self.groups}

    def to(self, device: torch.device | str) -> GroupMetrics:
        for metric in self.metrics.values():
            metric.to(device)
        return self

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset()

    def add_group(self, group: str, averaged: bool = False) -> None:
        """Add a group discovered late (single-process use only: ranks must agree on groups)."""
        if group not in self.metrics:
            self.groups.append(group)
            if averaged:
                self.averaged.append(group)
            metric = EvalMetric(num_samples=self.num_samples, ks=self.ks)
            if self.metrics:
                metric.to(next(iter(self.metrics.values())).correct_hist.device)
            self.metrics[group] = metric

    def update_rollout(
        self, group: str, problems: Sequence[Problem], rollout: RolloutBatch, valid: Sequence[bool] | None = None
    ) -> None:
        """Add a batch's responses (the problems flagged ``valid``; padding rows are skipped)."""
        rows = [r for p, r in enumerate(rows_by_problem(rollout, len(problems))) if valid is None or valid[p]]
        n = self.num_samples
        for problem_rows in rows:
            if len(problem_rows) != n:
                raise ValueError(
                    f"group {group!r}: a problem has {len(problem_rows)} responses, expected {n} "
                    "(rollout n and metric n differ)"
                )
        statuses = _require_statuses(rollout)
        answers = rollout.extras.get("extracted") if isinstance(rollout.extras, dict) else None
        index = torch.tensor([r for problem_rows in rows for r in problem_rows], dtype=torch.long)
        majority = None
        if answers is not None:
            majority = self._majority(
                [[statuses[r] for r in problem_rows] for problem_rows in rows],
                [[answers[r] for r in problem_rows] for problem_rows in rows],
            )
        self.metrics[group].update(
            status_indices([[statuses[r] for r in problem_rows] for problem_rows in rows]).reshape(len(rows), n),
            rollout.response_lengths.cpu()[index].reshape(len(rows), n),
            rollout.truncated.cpu()[index].reshape(len(rows), n),
            majority,
        )

    def _majority(self, statuses: list[list[str]], answers: list[list[str | None]]) -> torch.Tensor | None:
        """``[problems, len(ks)]`` maj@k scores (None without sampled ks: one response per problem)."""
        ks = self.metrics[self.groups[0]].ks if self.groups else []
        if not ks:
            return None
        scores = [[majority_score(s, a, k) for k in ks] for s, a in zip(statuses, answers)]
        return torch.tensor(scores, dtype=torch.float64).reshape(len(statuses), len(ks))

    def update_records(self, group: str, records: Sequence[dict[str, Any]]) -> None:
        """Add responses given as records (consecutive runs of ``num_samples`` per problem)."""
        n = self.num_samples
        if len(records) % n:
            raise ValueError(f"{len(records)} records are not a whole number of problems of {n} responses")
        index = {s: i for i, s in enumerate(STATUSES)}
        shape = (len(records) // n, n)
        problems = [records[i : i + n] for i in range(0, len(records), n)]
        majority = self._majority(
            [[r["status"] for r in rs] for rs in problems], [[r.get("extracted") for r in rs] for rs in problems]
        )
        self.metrics[group].update(
            torch.tensor([index[r["status"]] for r in records], dtype=torch.long).reshape(shape),
            torch.tensor([r["length"] for r in records], dtype=torch.long).reshape(shape),
            torch.tensor([r["truncated"] for r in records], dtype=torch.bool).reshape(shape),
            majority,
        )

    def compute(self) -> dict[str, dict]:
        """``{"groups": {name: {metric: float}}, "average": {...}, "weighted_average": {...}}``.

        Every rank must call it (it synchronises the metric states when distributed).
        """
        import warnings

        per_group = {}
        with warnings.catch_warnings():
            # A group that got no problem on this rank is fine: its zero states still sync.
            warnings.filterwarnings("ignore", message=".*compute.*before the ``update``.*")
            for group in self.groups:
                per_group[group] = to_floats(self.metrics[group].compute())
        return {"groups": per_group, **average_metrics(per_group, [g for g in self.averaged if g in per_group])}
