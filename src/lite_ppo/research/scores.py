"""A run's held-out score under a checkpoint rule: which evaluation of a run its score comes from.

The score is a held-out accuracy logged at each validation: ``eval/<benchmark>/accuracy``,
``eval/average/accuracy`` (the paper's benchmark average), ``val/<tier>/accuracy`` (problems held out
of a training tier), or ``val/*/accuracy``: every held-out tier pooled, each tier's accuracy weighted by
its ``val/<tier>/num_problems`` (the accuracy over all held-out problems).

Checkpoint rules:

- ``last``: the score at the run's last evaluation;
- ``best``: the evaluation at which another held-out split (``select_on``) scored highest (the
  earliest on ties), reported with the score's value there. Selecting and reporting on the same
  problems would report the maximum of noisy evaluations, biased upwards, so ``select_on`` and the
  score must be disjoint: a ``val/`` split selects for an ``eval/`` score, or two different tiers
  or benchmarks (checked by :func:`overlap`).

Default score: ``eval/average/accuracy`` when a run logged it, else ``val/*/accuracy``; default
selection split: ``val/*/accuracy``.

Example:
    >>> rule = CheckpointRule("best", score="eval/average/accuracy", select_on="val/*/accuracy")
    >>> run_scores(table, rule)                     # doctest: +SKIP
    {'final': 0.52, 'final_step': 200, 'best': 0.55, 'best_step': 150}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from lite_ppo import metric_names as names
from lite_ppo.errors import UserError
from lite_ppo.research.scalars import ScalarTable, Series

__all__ = ["POOLED_VAL", "CheckpointRule", "default_score", "overlap", "run_scores", "score_series", "val_tier"]

POOLED_VAL = names.val_accuracy("*")  # val/*/accuracy: every held-out tier, problem-weighted
_AVERAGES = {"average", "weighted_average", "*"}  # names that stand for every benchmark / tier of their prefix


def _split(tag: str) -> tuple[str, str] | None:
    """``("val" | "eval", name)`` of a held-out accuracy tag, None for any other tag."""
    for prefix in (names.VAL_PREFIX, names.EVAL_PREFIX):
        if tag.startswith(prefix) and tag.endswith("/accuracy"):
            name = tag[len(prefix) : -len("/accuracy")]
            if name and "/" not in name:
                return prefix.rstrip("/"), name
    return None


def val_tier(tag: str | None) -> str | None:
    """The held-out tier a ``val/<tier>/accuracy`` tag scores (``"*"`` for the pooled ``val/*/accuracy``);
    None for any other tag (a benchmark's ``eval/...``, a training scalar)."""
    split = _split(tag) if tag else None
    return split[1] if split is not None and split[0] == "val" else None


def overlap(a: str, b: str) -> bool:
    """Whether two held-out accuracy tags may share problems: the same prefix and the same name, or
    an average / pooled tag with anything of its prefix (``val/`` tiers and ``eval/`` benchmarks are
    different problem sets)."""
    sa, sb = _split(a), _split(b)
    if sa is None or sb is None or sa[0] != sb[0]:
        return False
    return sa[1] == sb[1] or sa[1] in _AVERAGES or sb[1] in _AVERAGES


def score_series(table: ScalarTable, tag: str) -> Series | None:
    """The score over evaluations (finite values only); ``val/*/accuracy`` pools the tiers logged at each step."""
    if tag != POOLED_VAL:
        series = table.get(tag)
        return series.finite() if series is not None and len(series.finite()) else None
    sums: dict[int, list[float]] = {}  # step -> [weighted accuracy, problems]
    for t in table:
        split = _split(t)
        if split is None or split[0] != "val" or split[1] in _AVERAGES:
            continue
        acc = table[t].finite()
        counts = table.get(f"{names.VAL_PREFIX}{split[1]}/num_problems")
        weight = dict(zip(counts.steps.tolist(), counts.values.tolist())) if counts is not None else {}
        for step, value in zip(acc.steps.tolist(), acc.values.tolist()):
            n = weight.get(step, 1.0)
            entry = sums.setdefault(step, [0.0, 0.0])
            entry[0] += value * n
            entry[1] += n
    pairs = [(step, total / n) for step, (total, n) in sorted(sums.items()) if n > 0]
    return Series.from_pairs(pairs) if pairs else None


def default_score(tags: Iterable[str]) -> str | None:
    """``eval/average/accuracy`` when logged, else ``val/*/accuracy`` when a tier was held out, else None."""
    tags = set(tags)
    if names.EVAL_AVERAGE_ACCURACY in tags:
        return names.EVAL_AVERAGE_ACCURACY
    if any((s := _split(t)) is not None and s[0] == "val" for t in tags):
        return POOLED_VAL
    return None


@dataclass(frozen=True)
class CheckpointRule:
    """Which evaluation a run's score comes from (see the module docstring)."""

    checkpoint: Literal["last", "best"] = "last"
    score: str | None = None
    select_on: str | None = POOLED_VAL

    def __post_init__(self) -> None:
        if self.checkpoint not in ("last", "best"):
            raise UserError(f"--checkpoint {self.checkpoint!r}: expected last or best")
        for option, tag in (("--score", self.score), ("--select-on", self.select_on)):
            if tag is not None and _split(tag) is None:
                raise UserError(
                    f"{option} {tag!r}: expected a held-out accuracy tag, eval/<benchmark>/accuracy, "
                    "val/<tier>/accuracy or val/*/accuracy"
                )
        if self.checkpoint == "best" and (self.select_on is None or self.score is None):
            raise UserError("--checkpoint best: needs a held-out score and a separate --select-on split")
        if self.checkpoint == "best" and overlap(self.score, self.select_on):  # type: ignore[arg-type]
            raise UserError(
                f"--checkpoint best: --select-on {self.select_on} and --score {self.score} share problems; "
                "a checkpoint selected and reported on the same problems overstates its score "
                "(select on val/..., report eval/..., or two different tiers)"
            )

    @property
    def can_select(self) -> bool:
        """Whether ``best`` is defined: a selection split disjoint from the score."""
        return self.score is not None and self.select_on is not None and not overlap(self.score, self.select_on)

    def describe(self) -> str:
        """One sentence for the summary."""
        if self.score is None:
            return "No held-out score was logged."
        last = f"`last`: `{self.score}` at each run's last evaluation"
        best = (
            f"`best`: the evaluation at which `{self.select_on}` scored highest (earliest on ties), "
            f"reported as `{self.score}` there (selection and report on disjoint problems)"
        )
        if self.checkpoint == "best":
            return f"Checkpoint rule {best}; also shown: {last}."
        return f"Checkpoint rule {last}." + (f" Also shown: {best}." if self.can_select else "")


def run_scores(table: ScalarTable, rule: CheckpointRule) -> dict[str, Any]:
    """``{"final", "final_step", "best", "best_step"}`` of one run (None where not logged / not defined)."""
    out: dict[str, Any] = {"final": None, "final_step": None, "best": None, "best_step": None}
    if rule.score is None:
        return out
    score = score_series(table, rule.score)
    if score is None:
        return out
    out["final"], out["final_step"] = score.last(), int(score.steps[-1])
    if not rule.can_select:
        return out
    select = score_series(table, rule.select_on)  # type: ignore[arg-type]
    if select is None:
        return out
    chosen = np.flatnonzero(np.isin(select.steps, score.steps))  # evaluations that logged both
    if not chosen.size:
        return out
    pick = chosen[int(np.argmax(select.values[chosen]))]  # argmax: the first (earliest) maximum
    step = int(select.steps[pick])
    out["best"], out["best_step"] = float(score.values[np.searchsorted(score.steps, step)]), step
    return out
