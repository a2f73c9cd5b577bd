"""``lite-ppo plan RUN_OR_GLOB... --mde 0.02``: how many seeds per cell a study needs to detect a given
effect on the held-out score, and how long it would take on this machine, from a pilot's or earlier runs.

Reads the runs as ``compare`` does (the same run finding, grouping by everything but the seed, held-out
score and checkpoint rule), then:

- the per-seed SD of the score, pooled within groups (:func:`lite_ppo.research.power.pooled_sd`: each
  group's spread around its own mean, so a difference between groups does not count as noise);
- seeds per cell for the target MDE at ``--power`` and two-sided ``--alpha``: for a 2-cell comparison
  (two-sample t-test, :func:`~lite_ppo.research.power.seeds_for_two_groups`) and for a main effect of a 2 x 2
  factorial (per-seed contrasts, :func:`~lite_ppo.research.power.seeds_for_contrast`);
- when groups share seeds (a sweep's cells do), the plan paired by seed, as ``compare`` analyses such a
  design: the SD of the per-seed differences of every two groups that share at least two seeds (pooled
  over the pairs, each around its own mean) and the seeds per cell for a mean of per-seed differences. A
  shared seed (the same data order and sampling) usually makes the difference vary less than two
  independent runs, but not always; only the pilot's own differences tell;
- the expected wall time: the runs' mean wall seconds (``run.json``'s start to end; for runs without both,
  the sum of their ``time/step_s``, which leaves out start-up and evaluation) x seeds x cells, run one
  after another, and divided by ``--parallel P`` for P runs side by side (as if each ran as fast as alone:
  on shared cores that is optimistic, measure it).

Example::

    lite-ppo plan 'runs/pilot/*' --mde 0.02
    lite-ppo plan runs/pilot --mde 0.03 --score val/hard/accuracy --parallel 2
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime
from typing import Any

from lite_ppo import metric_names as names
from lite_ppo.errors import OneLineParser, UserError
from lite_ppo.research.power import (
    ALPHA,
    POWER,
    mde_contrast,
    mde_two_groups,
    pooled_sd,
    seeds_for_contrast,
    seeds_for_two_groups,
)
from lite_ppo.research.runs import Run, find_runs, group_runs
from lite_ppo.research.scalars import ScalarTable, has_events, read_many
from lite_ppo.research.scores import POOLED_VAL, CheckpointRule, default_score, run_scores, score_series
from lite_ppo.research.summary import mean_by_seed, one_per_seed

__all__ = ["main", "plan", "wall_seconds"]


WHOLE_RUN = "run.json start to end"
DESIGNS = {
    "two_cell": "2-cell comparison",
    "factorial_2x2": "2 x 2 factorial, main effect",
    "paired": "2-cell comparison paired by seed",
}


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


def _check(option: str, value: float, low: float, high: float) -> None:
    if not (low < value < high):
        raise UserError(f"{option} {value}: expected a number between {low} and {high} (exclusive)")


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
    if not (0 < mde < math.inf):
        raise UserError(f"--mde {mde}: expected a positive effect in score units (0.02 = 2 points of accuracy)")
    _check("--power", power, 0.0, 1.0)
    _check("--alpha", alpha, 0.0, 1.0)
    if parallel < 1:
        raise UserError(f"--parallel {parallel}: expected 1 or more runs side by side")
    runs = find_runs(patterns)
    tables = read_many([run.path for run in runs], jobs)
    runs = [run for run in runs if tables[run.path] or has_events(run.path)]
    if not runs:
        raise UserError("none of the runs has a readable TensorBoard event file (damaged, empty or not TensorBoard)")
    all_tags = {tag for run in runs for tag in tables[run.path]}
    if score is not None and not any(score_series(tables[run.path], score) is not None for run in runs):
        raise UserError(f"--score {score}: no run logged it (held-out accuracies: val/<tier>/accuracy, eval/...)")
    rule = CheckpointRule(checkpoint, score or default_score(all_tags), select_on)  # type: ignore[arg-type]
    if rule.score is None:
        raise UserError("no held-out score logged by these runs (val/<tier>/accuracy or eval/<benchmark>/accuracy)")
    key = "best" if checkpoint == "best" else "final"
    scores, by_seed = {}, {}
    for group in group_runs(runs):
        scored = [(r.seed, run_scores(tables[r.path], rule)[key]) for r in group.runs]
        scored = [(seed, v) for seed, v in scored if v is not None]
        # As compare counts them: runs that share a seed are one value, their mean.
        scores[group.label] = one_per_seed([seed for seed, _ in scored], [v for _, v in scored])
        seeded = [(seed, v) for seed, v in scored if seed is not None]
        by_seed[group.label] = mean_by_seed([seed for seed, _ in seeded], [v for _, v in seeded])
    if not any(scores.values()):
        raise UserError(f"no run has a {key} score for `{rule.score}` under checkpoint rule `{checkpoint}`")
    sd, df = pooled_sd(list(scores.values()))
    if sd is None:
        raise UserError(
            "fewer than 2 seeds: no group has two scored runs, so the spread over seeds is unknown "
            "(run a pilot with at least 2 seeds of one setting)"
        )
    if sd == 0:
        raise UserError(f"the score `{rule.score}` is the same for every seed (SD 0): nothing to plan from")
    walls = [wall_seconds(run, tables[run.path]) for run in runs]
    if any(source == WHOLE_RUN for _, source in walls):  # runs still going (no end yet) would count short
        walls = [(seconds, source) for seconds, source in walls if source == WHOLE_RUN]
    known = [seconds for seconds, _ in walls if seconds is not None]
    pilot_n = max(len(v) for v in scores.values())
    out: dict[str, Any] = {
        "score": rule.score,
        "rule": rule.describe(),
        "groups": {label: len(v) for label, v in scores.items()},
        "sd": sd,
        "df": df,
        "mde": mde,
        "power": power,
        "alpha": alpha,
        "pilot_n": pilot_n,
        "pilot_mde": mde_two_groups(pilot_n, pilot_n, sd, alpha, power),
        "two_cell": {"cells": 2, "seeds_per_cell": seeds_for_two_groups(mde, sd, alpha, power)},
        "factorial_2x2": {"cells": 4, "seeds_per_cell": seeds_for_contrast(mde, sd, alpha, power)},
        "parallel": parallel,
        "wall_per_run": sum(known) / len(known) if known else None,
        "wall_runs": len(known),
        "wall_source": sorted({source for _, source in walls if source is not None}),
    }
    differences = seed_differences(by_seed)
    paired_sd, paired_df = pooled_sd(differences)
    if paired_sd:  # None below two shared seeds, 0 when every difference is the same
        shared = max(len(pair) for pair in differences)
        out["paired"] = {
            "cells": 2,
            "pairs": len(differences),
            "sd": paired_sd,
            "df": paired_df,
            "pilot_n": shared,
            "pilot_mde": mde_contrast(shared, paired_sd, alpha, power),
            "seeds_per_cell": seeds_for_contrast(mde, paired_sd, alpha, power),
        }
    for design in DESIGNS:
        if design not in out:
            continue
        entry = out[design]
        entry["runs"] = entry["cells"] * entry["seeds_per_cell"]
        serial = out["wall_per_run"] * entry["runs"] if out["wall_per_run"] is not None else None
        entry["serial_s"] = serial
        entry["parallel_s"] = serial / parallel if serial is not None else None
    return out


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def report(result: dict[str, Any]) -> list[str]:
    """The printed plan, one line each."""
    groups = ", ".join(f"{label} ({n})" for label, n in result["groups"].items())
    lines = [
        f"{result['rule']} Groups (scored seeds): {groups}.",
        f"per-seed SD of `{result['score']}`, pooled within groups: {result['sd']:.3g} ({result['df']} degrees of "
        "freedom)",
        f"with {result['pilot_n']} seeds per cell a 2-cell comparison detects {result['pilot_mde']:.3g}",
        f"target: MDE {result['mde']:.3g} at {result['power'] * 100:.0f} % power, α = {result['alpha']:g} two-sided",
    ]
    if "paired" in result:
        paired = result["paired"]
        lines.append(
            f"paired by seed (the groups share seeds): SD of the per-seed differences {paired['sd']:.3g} "
            f"({paired['pairs']} pair(s) of groups, {paired['df']} degrees of freedom); with {paired['pilot_n']} "
            f"shared seeds a paired comparison detects {paired['pilot_mde']:.3g}"
        )
    titles = {design: title for design, title in DESIGNS.items() if design in result}
    for design, title in titles.items():
        entry = result[design]
        lines.append(f"  {title}: {entry['seeds_per_cell']} seeds per cell ({entry['runs']} runs)")
    if result["wall_per_run"] is None:
        lines.append("wall time: unknown (no run has run.json start and end times or time/step_s)")
        return lines
    lines.append(
        f"wall time per run: {result['wall_per_run']:.0f} s (mean of {result['wall_runs']} runs; "
        f"{'; '.join(result['wall_source'])})"
    )
    for design, title in titles.items():
        entry = result[design]
        text = f"  {title}: {_duration(entry['serial_s'])} one run after another"
        if result["parallel"] > 1:
            text += (
                f", {_duration(entry['parallel_s'])} with {result['parallel']} runs side by side "
                "(assumes each runs as fast as alone)"
            )
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
    print("\n".join(report(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
