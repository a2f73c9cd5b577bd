"""The runs ``compare`` and ``plan`` count, read by one rule, so that both analyse the same seeds.

:func:`read_run_set` finds the runs named by paths or globs (:func:`lite_ppo.research.runs.find_runs`),
reads their TensorBoard scalars and sets aside, each named in a note:

- **unreadable** runs: event files without a single readable record (damaged, empty, not TensorBoard);
- runs whose **``run.json`` is damaged** (cut short by a full disk or a kill mid-write, or not a JSON object):
  the record is what says a run's seed and its sweep cell, so without it the run would form a group of its
  own (its folder) and be tested against its siblings as another setting. It is left out instead, until the
  file is repaired.

The rest are grouped by everything but the seed (:func:`lite_ppo.research.runs.group_runs`).
:func:`counted_runs` then applies the rule of :mod:`lite_ppo.research.run_health` for a score (diverged runs
and runs shorter than their group leave every score and test) and returns the groups of the runs that count
with every note to print: those above, one per left-out run, groups ending at different training steps, and
groups holding several runs of one seed (counted once, as their mean).

Example:
    >>> run_set = read_run_set(["runs/pilot"])                 # doctest: +SKIP
    >>> counted = counted_runs(run_set, "eval/average/accuracy")  # doctest: +SKIP
    >>> [len(g.runs) for g in counted.groups], counted.notes     # doctest: +SKIP
    ([3, 3], ['group alpha/tiny: seed 3 left out (diverged: ...): runs/pilot/alpha/tiny/seed3'])
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from lite_ppo.errors import UserError
from lite_ppo.research.run_folder import RUN_FILE
from lite_ppo.research.run_health import left_out_runs
from lite_ppo.research.runs import Run, RunGroup, find_runs, group_runs
from lite_ppo.research.scalars import ScalarTable, has_events, read_many

__all__ = ["Counted", "RunSet", "counted_runs", "duplicate_seed_notes", "read_run_set", "record_problem"]


@dataclass
class RunSet:
    """Readable runs grouped by setting, their scalars, and the runs set aside with a note each."""

    groups: list[RunGroup]
    tables: dict[Path, ScalarTable]
    unreadable: list[Path] = field(default_factory=list)
    damaged_records: dict[Path, str] = field(default_factory=dict)  # run -> what is wrong with its run.json

    @property
    def tags(self) -> set[str]:
        """Every scalar tag some run logged."""
        return {tag for table in self.tables.values() for tag in table}

    @property
    def notes(self) -> list[str]:
        """One note per run left out for its damaged ``run.json``."""
        return [
            f"left out {path}: its {RUN_FILE} is damaged ({why}), so its seed and setting are unknown and it "
            f"would form a group of its own; repair {path / RUN_FILE} to count the run"
            for path, why in self.damaged_records.items()
        ]


@dataclass
class Counted:
    """The runs that count for a score: ``groups`` (left-out runs removed; a group may end up empty),
    ``left_out`` (run -> reason) and ``notes`` (what to print, one line each)."""

    groups: list[RunGroup]
    left_out: dict[Path, str]
    notes: list[str]


def record_problem(run: Run) -> str | None:
    """What is wrong with the run's ``run.json`` (``"not valid JSON: ..."``), None when it is a JSON object
    or absent (a plain Lightning run, which groups by its config or folder)."""
    path = run.path / RUN_FILE
    if run.record is not None or not path.is_file():
        return None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg.lower()}; cut short?"
    except (OSError, ValueError) as err:  # ValueError: bytes that are not UTF-8
        return str(err)
    return f"a JSON {type(loaded).__name__}, not an object"


def read_run_set(patterns: list[str], jobs: int | None = None) -> RunSet:
    """The runs named by ``patterns``, read and grouped; raises :class:`UserError` when none is readable."""
    runs = find_runs(patterns)
    tables = read_many([run.path for run in runs], jobs)
    # A run without a single scalar may have just started; one without a single record is unreadable.
    unreadable = [run.path for run in runs if not tables[run.path] and not has_events(run.path)]
    if len(unreadable) == len(runs):
        raise UserError(
            f"none of the {len(runs)} runs has a readable TensorBoard event file (damaged, empty or not "
            f"TensorBoard files): {', '.join(map(str, unreadable))}"
        )
    runs = [run for run in runs if run.path not in unreadable]
    damaged = {run.path: why for run in runs if (why := record_problem(run)) is not None}
    runs = [run for run in runs if run.path not in damaged]
    if not runs:
        raise UserError(
            f"every readable run has a damaged {RUN_FILE}: "
            + "; ".join(f"{path / RUN_FILE} ({why})" for path, why in damaged.items())
        )
    kept = {run.path: tables[run.path] for run in runs}
    return RunSet(group_runs(runs), kept, unreadable, damaged)


def duplicate_seed_notes(groups: list[RunGroup]) -> list[str]:
    """A note for each group holding several runs of one seed: they count once, as their mean."""
    notes = []
    for group in groups:
        seeds = [r.seed for r in group.runs if r.seed is not None]
        if len(seeds) != len(set(seeds)):
            notes.append(
                f"group {group.label} holds several runs with the same seed (counted once, as their mean: they "
                f"are not independent samples): {[str(r.path) for r in group.runs]}"
            )
    return notes


def counted_runs(run_set: RunSet, score_tag: str | None) -> Counted:
    """The runs that count for ``score_tag`` by :func:`lite_ppo.research.run_health.left_out_runs`, and
    every note on what was set aside or is counted specially (see the module docstring)."""
    left_out, health_notes = left_out_runs(run_set.groups, run_set.tables, score_tag)
    groups = [dataclasses.replace(g, runs=[r for r in g.runs if r.path not in left_out]) for g in run_set.groups]
    return Counted(groups, left_out, [*run_set.notes, *health_notes, *duplicate_seed_notes(groups)])
