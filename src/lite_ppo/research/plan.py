"""``lite-ppo plan RUN_OR_GLOB... --mde 0.02``: how many seeds per cell a study needs to detect a given
effect on the held-out score, and how long it would take on this machine, from a pilot's or earlier runs.

Counts the runs ``compare`` counts (:mod:`lite_ppo.research.run_set`: the same run finding and grouping by
everything but the seed, the same held-out score and checkpoint rule, and the same runs left out: unreadable
ones, ones whose ``run.json`` is damaged, diverged ones and ones shorter than their group), and prints the
same ``note:`` lines about them. Then:

- the per-seed SD of the score, pooled within groups (:func:`lite_ppo.research.power.pooled_sd`: each
  group's spread around its own mean, so a difference between groups does not count as noise), with its
  95 % interval from its degrees of freedom (chi-square, :func:`~lite_ppo.research.power.sd_interval`);
- seeds per cell for the target MDE at ``--power`` and two-sided ``--alpha``: for a 2-cell comparison
  (two-sample t-test, :func:`~lite_ppo.research.power.seeds_for_two_groups`) and for a main effect of a 2 x 2
  factorial (per-seed contrasts, :func:`~lite_ppo.research.power.seeds_for_contrast`), each with the seeds
  needed at the two ends of the SD's interval: a pilot of few seeds leaves that range wide, and says so;
- when groups share seeds (a sweep's cells do), the plan paired by seed, as ``compare`` analyses such a
  design: the SD of the per-seed differences of every two groups that share at least two seeds (pooled
  over the pairs, each around its own mean) and the seeds per cell for a mean of per-seed differences. A
  shared seed (the same data order and sampling) usually makes the difference vary less than two
  independent runs, but not always; only the pilot's own differences tell. Differences that are all the
  same (an SD below :data:`~lite_ppo.research.power.NO_SPREAD`) give no paired plan, and a line says why;
- the expected wall time: the runs' mean wall seconds (``run.json``'s start to end; for runs without both,
  the sum of their ``time/step_s``, which leaves out start-up and evaluation) x seeds x cells, run one
  after another, and with ``--parallel P`` for P runs side by side. When the runs lie in the folder of a
  ``lite-ppo sweep --parallel auto``, whose ``parallel_choice.json`` holds the steps per second it measured
  for one run alone and for runs side by side, the times are scaled by those rates (and the pilot's own
  runs are taken to have run as that sweep chose); otherwise P side by side is taken to run as fast as
  one alone, which on shared cores it does not, and the line says it is an assumption.

``--mde`` must lie in (0, 1] (the score is an accuracy) and need at most
:data:`~lite_ppo.research.power.MAX_SEEDS` seeds per cell; anything else is a one-line error (exit 2)
saying what is allowed.

Example::

    lite-ppo plan 'runs/pilot/*' --mde 0.02
    lite-ppo plan runs/pilot --mde 0.03 --score val/hard/accuracy --parallel 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lite_ppo import metric_names as names
from lite_ppo.errors import OneLineParser, UserError
from lite_ppo.research.power import ALPHA, POWER
from lite_ppo.research.scores import POOLED_VAL

# Only what building the parser needs is imported above (`lite-ppo plan --help` answers at once); the
# statistics (scipy, statsmodels) and the run reading are imported by plan() when it runs.
if TYPE_CHECKING:  # pragma: no cover
    from lite_ppo.research.runs import Run, RunGroup
    from lite_ppo.research.scalars import ScalarTable
    from lite_ppo.research.scores import CheckpointRule

__all__ = ["FEW_DF", "Layout", "find_layout", "main", "plan", "wall_seconds"]


WHOLE_RUN = "run.json start to end"
DESIGNS = {
    "two_cell": "2-cell comparison",
    "factorial_2x2": "2 x 2 factorial, main effect",
    "paired": "2-cell comparison paired by seed",
}
# Below this many degrees of freedom an SD's upper 95 % bound is more than 1.44 x the estimate (chi-square at
# 20: sqrt(20 / 9.59)), so a study may need more than twice the seeds planned: plan says so in words.
FEW_DF = 20


@dataclass(frozen=True)
class Layout:
    """What a sweep measured (``parallel_choice.json``): ``cores`` runs of one thread side by side finish
    ``together`` steps/s between them, one run on ``cores`` threads ``alone`` steps/s; the sweep then ran its
    runs ``parallel`` at a time."""

    file: Path
    cores: int
    alone: float
    together: float
    parallel: int

    @property
    def pilot_rate(self) -> float:
        """Steps per second of each of the pilot's runs, in the layout the sweep chose."""
        return self.together / self.cores if self.parallel > 1 else self.alone


def wall_seconds(run: Run, table: ScalarTable) -> tuple[float | None, str | None]:
    """``(seconds, source)`` of one run: ``run.json``'s ``started`` to ``ended``, else the sum of its
    ``time/step_s``; ``(None, None)`` when it has neither."""
    record = run.record or {}
    try:
        start, end = datetime.fromisoformat(record["started"]), datetime.fromisoformat(record["ended"])
        if end > start:
            return (end - start).total_seconds(), WHOLE_RUN
    except (KeyError, TypeError, ValueError):
        pass
    steps = table.get(names.STEP_SECONDS)
    if steps is not None and len(steps.finite()):
        return float(steps.finite().values.sum()), "sum of time/step_s (no start-up, no evaluation)"
    return None, None


def seed_differences(by_seed: dict[str, dict[int, float]]) -> list[list[float]]:
    """The per-seed differences of every two groups sharing at least two seeds, one list per pair.

    Example:
        >>> seed_differences({"a": {0: 0.5, 1: 0.6, 2: 0.7}, "b": {1: 0.4, 2: 0.6, 3: 0.9}})
        [[0.19999999999999996, 0.09999999999999998]]
    """
    labels = sorted(by_seed)
    pairs = []
    for i, first in enumerate(labels):
        for second in labels[i + 1 :]:
            shared = sorted(set(by_seed[first]) & set(by_seed[second]))
            if len(shared) >= 2:
                pairs.append([by_seed[first][seed] - by_seed[second][seed] for seed in shared])
    return pairs


def find_layout(runs: list[Path]) -> tuple[Layout | None, str]:
    """The measurement of the sweep whose folder holds every run (the nearest ``parallel_choice.json`` above
    each, the same for all), and a sentence on where it came from or why there is none."""
    # Imported here, when a plan is made: the sweep's module brings torch, which `plan --help` need not load.
    from lite_ppo.research.parallel_choice import CHOICE_FILE, ParallelChoice

    nearest = {next((p / CHOICE_FILE for p in run.parents if (p / CHOICE_FILE).is_file()), None) for run in runs}
    if nearest == {None}:
        return None, f"no {CHOICE_FILE} of `lite-ppo sweep --parallel auto` above the runs"
    if len(nearest) > 1:
        return None, f"the runs lie in folders with different {CHOICE_FILE} files, or some in none"
    (file,) = nearest
    try:
        choice = ParallelChoice(**json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        return None, f"{file} is not a parallel choice a sweep wrote ({err})"
    alone, together = choice.alone_steps_per_s, choice.side_by_side_steps_per_s
    if alone is None or together is None or not (alone > 0 and together > 0):
        return None, f"{file} holds no measurement ({choice.why or 'nothing measured'})"
    # parallel_choice.decide: side by side is `cores` runs of 1 thread, alone one run of `cores` threads.
    cores = choice.parallel if choice.parallel > 1 else int(choice.threads or 1)
    parallel = choice.parallel
    return Layout(file, cores, float(alone), float(together), parallel), f"measured by the sweep, {file}"


def _check(option: str, value: float, low: float, high: float) -> None:
    if not (low < value < high):
        raise UserError(f"{option} {value}: expected a number between {low} and {high} (exclusive)")


def _check_mde(mde: float) -> None:
    # The score is an accuracy: no difference of two is larger than 1, and an MDE above that plans nothing.
    if not (0 < mde <= 1):
        raise UserError(
            f"--mde {mde:g}: expected an effect above 0 and at most 1 in score units (the score is an accuracy; "
            "0.02 = 2 points)"
        )


def _scores(
    groups: list[RunGroup], tables: dict[Path, ScalarTable], rule: CheckpointRule, key: str
) -> tuple[dict[str, list[float]], dict[str, dict[int, float]], dict[str, list[str]]]:
    """Per group: one score per seed, the scores by seed, and the runs scored (as compare counts them)."""
    from lite_ppo.research.scores import run_scores
    from lite_ppo.research.summary import mean_by_seed, one_per_seed

    scores, by_seed, counted = {}, {}, {}
    for group in groups:
        scored = [(r, run_scores(tables[r.path], rule)[key]) for r in group.runs]
        scored = [(r, v) for r, v in scored if v is not None]
        # As compare counts them: runs that share a seed are one value, their mean.
        scores[group.label] = one_per_seed([r.seed for r, _ in scored], [v for _, v in scored])
        seeded = [(r.seed, v) for r, v in scored if r.seed is not None]
        by_seed[group.label] = mean_by_seed([seed for seed, _ in seeded], [v for _, v in seeded])
        counted[group.label] = [str(r.path) for r, _ in scored]
    return scores, by_seed, counted


def _seeds_needed(design: str, mde: float, sd: float, alpha: float, power: float) -> int:
    from lite_ppo.research.power import seeds_for_contrast, seeds_for_two_groups

    solve = seeds_for_two_groups if design == "two_cell" else seeds_for_contrast
    return solve(mde, sd, alpha, power)


def _seeds_or_none(design: str, mde: float, sd: float, alpha: float, power: float) -> int | None:
    """Seeds per cell, None beyond :data:`~lite_ppo.research.power.MAX_SEEDS`."""
    from lite_ppo.research.power import TooManySeeds

    try:
        return _seeds_needed(design, mde, sd, alpha, power)
    except TooManySeeds:
        return None


def _design(design: str, mde: float, sd: float, df: int, alpha: float, power: float) -> dict[str, Any]:
    """Seeds per cell for one design at the SD, and at the two ends of the SD's 95 % interval."""
    from lite_ppo.research.power import sd_interval

    low, high = sd_interval(sd, df)
    return {
        "cells": 2 if design != "factorial_2x2" else 4,
        "seeds_per_cell": _seeds_needed(design, mde, sd, alpha, power),
        "sd_interval": [low, high],
        # None: more than MAX_SEEDS at that end.
        "seeds_range": [
            _seeds_or_none(design, mde, low, alpha, power),
            _seeds_or_none(design, mde, high, alpha, power),
        ],
    }


def _designs(mde: float, sds: dict[str, tuple[float, int]], alpha: float, power: float) -> dict[str, dict[str, Any]]:
    """:func:`_design` of each design in ``sds`` (design -> its SD and degrees of freedom); a one-line error
    for an MDE that needs more than :data:`~lite_ppo.research.power.MAX_SEEDS` seeds per cell."""
    from lite_ppo.research.power import TooManySeeds

    try:
        return {design: _design(design, mde, sd, df, alpha, power) for design, (sd, df) in sds.items()}
    except TooManySeeds:
        raise _too_small(mde, {design: sd for design, (sd, _) in sds.items()}, alpha, power) from None


def _too_small(mde: float, sds: dict[str, float], alpha: float, power: float) -> UserError:
    """The error for an MDE that needs more than MAX_SEEDS seeds per cell, with the smallest one allowed."""
    from lite_ppo.research.power import MAX_SEEDS, mde_contrast, mde_two_groups

    floors = [
        mde_two_groups(MAX_SEEDS, MAX_SEEDS, sd, alpha, power)
        if design == "two_cell"
        else mde_contrast(MAX_SEEDS, sd, alpha, power)
        for design, sd in sds.items()
    ]
    # Rounded up at 3 significant digits, so that the smallest MDE said is itself allowed.
    floor = max(f for f in floors if f is not None)
    unit = 10 ** (math.floor(math.log10(floor)) - 2)
    return UserError(
        f"--mde {mde:g}: needs more than {MAX_SEEDS:,} seeds per cell at the pilot's SD ({sds['two_cell']:.3g}); "
        f"expected an effect between {math.ceil(floor / unit) * unit:.3g} and 1"
    )


def plan(
    patterns: list[str],
    mde: float,
    score: str | None = None,
    checkpoint: str = "last",
    select_on: str = POOLED_VAL,
    power: float = POWER,
    alpha: float = ALPHA,
    parallel: int = 1,
    jobs: int | None = None,
) -> dict[str, Any]:
    """The plan as a dict (what :func:`main` prints); raises :class:`UserError` for what the runs cannot tell."""
    from lite_ppo.research.power import NO_SPREAD, mde_contrast, mde_two_groups, pooled_sd
    from lite_ppo.research.run_set import counted_runs, read_run_set
    from lite_ppo.research.scores import CheckpointRule, default_score, score_series

    _check_mde(mde)
    _check("--power", power, 0.0, 1.0)
    _check("--alpha", alpha, 0.0, 1.0)
    if parallel < 1:
        raise UserError(f"--parallel {parallel}: expected 1 or more runs side by side")
    run_set = read_run_set(patterns, jobs)
    tables = run_set.tables
    if score is not None and not any(score_series(table, score) is not None for table in tables.values()):
        raise UserError(f"--score {score}: no run logged it (held-out accuracies: val/<tier>/accuracy, eval/...)")
    rule = CheckpointRule(checkpoint, score or default_score(run_set.tags), select_on)  # type: ignore[arg-type]
    if rule.score is None:
        raise UserError("no held-out score logged by these runs (val/<tier>/accuracy or eval/<benchmark>/accuracy)")
    counted = counted_runs(run_set, rule.score)  # the runs compare counts, and its notes on the others
    key = "best" if checkpoint == "best" else "final"
    scores, by_seed, scored_runs = _scores(counted.groups, tables, rule, key)
    if not any(scores.values()):
        raise UserError(f"no run has a {key} score for `{rule.score}` under checkpoint rule `{checkpoint}`")
    sd, df = pooled_sd(list(scores.values()))
    if sd is None:
        raise UserError(
            "fewer than 2 seeds: no group has two scored runs, so the spread over seeds is unknown "
            "(run a pilot with at least 2 seeds of one setting)"
        )
    if sd < NO_SPREAD:
        raise UserError(f"the score `{rule.score}` is the same for every seed (SD {sd:.2g}): nothing to plan from")
    differences = seed_differences(by_seed)
    paired_sd, paired_df = pooled_sd(differences)
    has_paired = paired_sd is not None and paired_sd >= NO_SPREAD
    sds = {"two_cell": (sd, df), "factorial_2x2": (sd, df)}
    if has_paired:
        sds["paired"] = (paired_sd, paired_df)
    designs = _designs(mde, sds, alpha, power)
    kept = [r for g in counted.groups for r in g.runs]
    known, sources = _walls(kept, tables)
    layout, layout_source = find_layout([r.path for r in kept])
    pilot_n = max(len(v) for v in scores.values())
    out: dict[str, Any] = {
        "score": rule.score,
        "rule": rule.describe(),
        "groups": {label: len(v) for label, v in scores.items()},
        "counted": scored_runs,
        "notes": counted.notes,
        "unreadable": [str(path) for path in run_set.unreadable],
        "sd": sd,
        "df": df,
        "mde": mde,
        "power": power,
        "alpha": alpha,
        "pilot_n": pilot_n,
        "pilot_mde": mde_two_groups(pilot_n, pilot_n, sd, alpha, power),
        **designs,
        "parallel": parallel,
        "layout": layout,
        "layout_source": layout_source,
        "wall_per_run": sum(known) / len(known) if known else None,
        "wall_runs": len(known),
        "wall_source": sources,
    }
    if differences:
        shared = max(len(pair) for pair in differences)
        paired = out.setdefault("paired", {"cells": 2})
        paired |= {"pairs": len(differences), "sd": paired_sd, "df": paired_df, "pilot_n": shared}
        # All the same (to rounding): no spread to plan a paired comparison from, said instead of a number.
        paired["no_spread"] = not has_paired
        paired["pilot_mde"] = mde_contrast(shared, paired_sd, alpha, power) if has_paired else None
    for design in DESIGNS:
        if design in out and not out[design].get("no_spread"):
            _add_times(out, out[design])
    return out


def _walls(runs: list[Run], tables: dict[Path, ScalarTable]) -> tuple[list[float], list[str]]:
    """The wall seconds of the runs that have them, and where they come from (:func:`wall_seconds`)."""
    walls = [wall_seconds(run, tables[run.path]) for run in runs]
    if any(source == WHOLE_RUN for _, source in walls):  # runs still going (no end yet) would count short
        walls = [(seconds, source) for seconds, source in walls if source == WHOLE_RUN]
    known = [seconds for seconds, _ in walls if seconds is not None]
    return known, sorted({source for _, source in walls if source is not None})


def _add_times(result: dict[str, Any], entry: dict[str, Any]) -> None:
    """``runs``, ``serial_s`` and ``parallel_s`` of one design (see the module docstring)."""
    entry["runs"] = entry["cells"] * entry["seeds_per_cell"]
    wall, layout, parallel = result["wall_per_run"], result["layout"], result["parallel"]
    if wall is None:
        entry["serial_s"] = entry["parallel_s"] = None
        entry["parallel_measured"] = False
        return
    work = wall * entry["runs"]  # seconds of the pilot's runs, in the layout they ran in
    if layout is None:
        entry["serial_s"], entry["parallel_s"], entry["parallel_measured"] = work, work / parallel, False
        return
    # Scaled by the measured rates: one run alone at `alone` steps/s; `cores` side by side at `together`.
    entry["serial_s"] = work * layout.pilot_rate / layout.alone
    entry["parallel_measured"] = parallel == layout.cores
    entry["parallel_s"] = (
        work * layout.pilot_rate / layout.together if entry["parallel_measured"] else entry["serial_s"] / parallel
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _count(n: int | None) -> str:
    from lite_ppo.research.power import MAX_SEEDS

    return f"more than {MAX_SEEDS:,}" if n is None else str(n)


def _sd_lines(result: dict[str, Any]) -> list[str]:
    """The SD, its interval, and a note when it rests on few degrees of freedom."""
    low, high = result["two_cell"]["sd_interval"]
    lines = [
        f"per-seed SD of `{result['score']}`, pooled within groups: {result['sd']:.3g} ({result['df']} degrees of "
        f"freedom; 95 % interval {low:.3g} to {high:.3g}, chi-square)"
    ]
    if result["df"] < FEW_DF:
        lines.append(
            f"few degrees of freedom: the SD rests on {result['df']}, so the true SD may be up to "
            f"{high / result['sd']:.2g} x this one, and the seeds needed grow with its square; the seeds at the "
            "ends of its interval are given for each design (a larger pilot narrows them)"
        )
    return lines


def _paired_line(paired: dict[str, Any]) -> str:
    if paired["no_spread"]:
        return (
            f"paired by seed (the groups share seeds): the per-seed differences are all the same (SD "
            f"{paired['sd']:.2g} over {paired['pilot_n']} shared seeds, {paired['pairs']} pair(s) of groups): no "
            "spread to plan a paired comparison from (the pilot's cells differ by a constant, or its scores are "
            "copies); the plans below do not pair"
        )
    low, high = paired["sd_interval"]
    return (
        f"paired by seed (the groups share seeds): SD of the per-seed differences {paired['sd']:.3g} "
        f"({paired['pairs']} pair(s) of groups, {paired['df']} degrees of freedom; 95 % interval {low:.3g} to "
        f"{high:.3g}); with {paired['pilot_n']} shared seeds a paired comparison detects {paired['pilot_mde']:.3g}"
    )


def _layout_line(result: dict[str, Any]) -> str | None:
    """How the side-by-side times were reckoned: measured by the sweep, or an assumption said as one."""
    layout = result["layout"]
    if layout is None:
        if result["parallel"] == 1:
            return None
        return (
            f"side by side: not measured ({result['layout_source']}), so {result['parallel']} runs side by side "
            "are assumed to run each as fast as alone; on shared cores they do not (`lite-ppo sweep --parallel "
            "auto` measures it)"
        )
    ran = f"{layout.cores} side by side" if layout.parallel > 1 else "one at a time"
    text = (
        f"side by side, {result['layout_source']}: {layout.cores} runs of 1 thread finish {layout.together:.3g} "
        f"steps/s together, 1 run of {layout.cores} threads {layout.alone:.3g} steps/s; the pilot's runs ran {ran} "
        "as that sweep chose, and the times below are scaled by these rates"
    )
    if result["parallel"] not in (1, layout.cores):
        text += (
            f"; --parallel {result['parallel']} was not measured (only {layout.cores}), so its times assume each "
            "runs as fast as alone"
        )
    return text


def report(result: dict[str, Any]) -> list[str]:
    """The printed plan, one line each (the notes on the runs left out are printed before it)."""
    groups = ", ".join(f"{label} ({n})" for label, n in result["groups"].items())
    lines = [
        f"{result['rule']} Groups (scored seeds): {groups}.",
        *_sd_lines(result),
        f"with {result['pilot_n']} seeds per cell a 2-cell comparison detects {result['pilot_mde']:.3g}",
        f"target: MDE {result['mde']:.3g} at {result['power'] * 100:.0f} % power, α = {result['alpha']:g} two-sided",
    ]
    if "paired" in result:
        lines.append(_paired_line(result["paired"]))
    titles = {d: title for d, title in DESIGNS.items() if d in result and not result[d].get("no_spread")}
    for design, title in titles.items():
        entry = result[design]
        low, high = (_count(n) for n in entry["seeds_range"])
        lines.append(
            f"  {title}: {entry['seeds_per_cell']} seeds per cell ({entry['runs']} runs), {low} to {high} at the "
            "ends of the SD's 95 % interval"
        )
    if result["wall_per_run"] is None:
        lines.append("wall time: unknown (no run has run.json start and end times or time/step_s)")
        return lines
    lines.append(
        f"wall time per run: {result['wall_per_run']:.0f} s (mean of {result['wall_runs']} runs; "
        f"{'; '.join(result['wall_source'])})"
    )
    layout_line = _layout_line(result)
    if layout_line:
        lines.append(layout_line)
    alone = f" (each alone on {result['layout'].cores} threads)" if result["layout"] is not None else ""
    for design, title in titles.items():
        entry = result[design]
        text = f"  {title}: {_duration(entry['serial_s'])} one run after another{alone}"
        if result["parallel"] > 1:
            how = "measured" if entry["parallel_measured"] else "assumed as fast as alone"
            text += f", {_duration(entry['parallel_s'])} with {result['parallel']} runs side by side ({how})"
        lines.append(text)
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="lite-ppo plan",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_GLOB", help="pilot or earlier runs, as for compare")
    parser.add_argument("--mde", type=float, required=True, help="the effect to detect, in score units (0.02)")
    parser.add_argument(
        "--score", default=None, metavar="TAG", help="held-out score (default: as compare, eval/average or val/*)"
    )
    parser.add_argument("--checkpoint", choices=("last", "best"), default="last", help="checkpoint rule (last)")
    parser.add_argument("--select-on", default=POOLED_VAL, metavar="TAG", help="selection split for --checkpoint best")
    parser.add_argument("--power", type=float, default=POWER, help=f"power to detect --mde (default {POWER})")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"two-sided test level (default {ALPHA})")
    parser.add_argument("--parallel", type=int, default=1, help="runs side by side, for the wall time (default 1)")
    parser.add_argument("--jobs", type=int, default=None, help="runs read in parallel (default: CPUs, at most 8)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = plan(
            args.runs,
            args.mde,
            args.score,
            args.checkpoint,
            args.select_on,
            args.power,
            args.alpha,
            args.parallel,
            args.jobs,
        )
    except UserError as err:
        print(f"lite-ppo plan: error: {err}", file=sys.stderr)
        return 2
    if result["unreadable"]:  # as compare says it
        print(
            f"lite-ppo plan: warning: left out {len(result['unreadable'])} runs whose event files could not be "
            f"read (damaged, empty or not TensorBoard files): {', '.join(result['unreadable'])}",
            file=sys.stderr,
        )
    for note in result["notes"]:
        print(f"note: {note}")
    print("\n".join(report(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
