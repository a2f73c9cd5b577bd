"""Which runs a comparison leaves out, by a stated rule: diverged runs and runs shorter than their group.

A mean over seeds is only a comparison of settings when every seed's value means the same thing:

- **diverged**: the run's training loss (``loss/policy``), training accuracy or score ends non-finite.
  Taking its last finite value would report a run that broke as if it had finished, and a group whose
  runs blew up early would keep their early scores.
- **short**: the run logged fewer training steps than the longest run of its group (the seeds of one
  setting were meant to run equally long); its final value is from earlier in training.

Such runs stay in the figures (their curves show what happened) and are left out of every score, test
and effect; a diverged run also leaves the per-quantity tables (a short one stays there: its
``final_step`` shows it). The console and ``summary.md`` name each with its reason. Groups whose runs end
at different training steps get a note: their difference mixes the setting with the training length.

Example:
    >>> import numpy as np
    >>> from lite_ppo.research.scalars import Series
    >>> broke = {"loss/policy": Series(np.arange(3), np.array([0.1, 0.2, np.nan]))}
    >>> why_left_out(broke, longest=3, score_tag=None)
    'diverged: loss/policy is nan at step 2'
"""

from __future__ import annotations

import math
from pathlib import Path

from lite_ppo import metric_names as names
from lite_ppo.research.runs import RunGroup
from lite_ppo.research.scalars import ScalarTable
from lite_ppo.research.scores import POOLED_VAL

__all__ = ["LEFT_OUT_RULE", "left_out_runs", "training_steps", "why_left_out"]

LEFT_OUT_RULE = (
    "runs left out of the scores, tests and effects: diverged (loss/policy, the training accuracy or the "
    "score ends non-finite; also out of the quantity tables) and short (fewer training "
    "steps than the longest run of their group)"
)
_WATCHED = (names.POLICY_LOSS, names.REWARD_ACCURACY)


def training_steps(table: ScalarTable) -> int:
    """Training steps the run logged: the last step of its training accuracy (+1), 0 without it."""
    series = table.get(names.REWARD_ACCURACY)
    return int(series.steps[-1]) + 1 if series is not None and len(series) else 0


def _score_tags(table: ScalarTable, score_tag: str) -> list[str]:
    """The logged tags the score is made of (``val/*/accuracy``: every tier's accuracy)."""
    tags = (
        [t for t in table if t.startswith("val/") and t.endswith("/accuracy")]
        if score_tag == POOLED_VAL
        else [score_tag]
    )
    return [t for t in tags if t in table and len(table[t])]


def why_left_out(table: ScalarTable, longest: int, score_tag: str | None) -> str | None:
    """The reason to leave this run out (see the module docstring), or None to keep it."""
    for tag in [*_WATCHED, *(_score_tags(table, score_tag) if score_tag else [])]:
        series = table.get(tag)
        if series is not None and len(series) and not math.isfinite(series.last()):
            never = "" if len(series.finite()) else ", never finite"
            return f"diverged: {tag} is {series.last()} at step {int(series.steps[-1])}{never}"
    steps = training_steps(table)
    if steps < longest:
        return f"short: {steps} training steps, its group's longest run {longest}"
    return None


def left_out_runs(
    groups: list[RunGroup], tables: dict[Path, ScalarTable], score_tag: str | None
) -> tuple[dict[Path, str], list[str]]:
    """The runs to leave out (path -> reason) and the notes to print: one per left-out run, and one
    when the groups end at different training steps."""
    reasons: dict[Path, str] = {}
    notes: list[str] = []
    ends: dict[str, int] = {}
    for group in groups:
        longest = max((training_steps(tables[r.path]) for r in group.runs), default=0)
        for run in group.runs:
            why = why_left_out(tables[run.path], longest, score_tag)
            if why:
                reasons[run.path] = why
                notes.append(f"group {group.label}: seed {run.seed} left out ({why}): {run.path}")
        kept = [training_steps(tables[r.path]) for r in group.runs if r.path not in reasons]
        if kept:
            ends[group.label] = max(kept)
    if len(set(ends.values())) > 1:
        notes.append(
            "groups end at different training steps ("
            + ", ".join(f"{label}: {steps}" for label, steps in ends.items())
            + "): their differences mix the setting with the training length"
        )
    return reasons, notes
