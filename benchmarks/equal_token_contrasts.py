"""Held-out accuracy of a study's cells, paired by seed, after the last step and at equal generated tokens.

The per-token rule of docs/takeaways.md (studies (v) and R2-5), fixed before their runs: for each seed the
budget B is the fewest tokens any cell generated in its whole run, and each cell is scored at its last
held-out evaluation with at most B tokens generated before it. Accuracy is every held-out tier pooled
(``val/*/accuracy``, as ``compare`` scores it); each contrast is the one-sample t-test on the per-seed
differences (``lite_ppo.research.stats.contrast_ci``) with its minimum detectable effect at 80 % power
(``lite_ppo.research.power``). Also prints, per cell, the mean of last-step mechanism scalars. Reads the
runs' TensorBoard scalars; trains nothing.

    .venv/bin/python benchmarks/equal_token_contrasts.py runs/r2_recipes --order lite_ppo dapo grpo \\
        --record docs/takeaways/r2_recipes/per_seed.json

``--record FILE`` keeps what the analysis reads, per cell and seed (the held-out evaluations' steps, pooled
accuracy and tokens before them, the run's tokens and last-step scalars), so a later top-up of seeds pairs
with these without their run folders.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from lite_ppo import metric_names as names
from lite_ppo.research.compute_axis import AXES, cumulative, x_at
from lite_ppo.research.power import mde_contrast
from lite_ppo.research.runs import find_runs, group_runs
from lite_ppo.research.scalars import read_scalars
from lite_ppo.research.scores import POOLED_VAL, score_series
from lite_ppo.research.stats import contrast_ci

MECHANISM = (
    names.RESPONSE_LENGTH,
    names.TRUNCATION_RATE,
    names.ENTROPY,
    names.GROUPS_MIXED,
    names.REWARD_STD,
)


def contrast(diffs: list[float]) -> str:
    """The per-seed contrasts' mean, t-interval and one-sample t-test (``contrast_ci``) and their MDE."""
    if len(diffs) < 2:  # e.g. at equal tokens when one cell has no held-out evaluation within the budget
        return f"no contrast: {len(diffs)} paired seed(s)"
    c = contrast_ci(diffs)
    sd = float(np.std(diffs, ddof=1))
    low, high = c["ci"]
    mde = mde_contrast(c["n"], sd)
    return f"{c['estimate']:+.4f} [{low:+.4f}, {high:+.4f}], p = {c['p']:.2g}, MDE {mde:.4f} (n = {c['n']})"


def at_step(a: dict[int, dict], b: dict[int, dict], seeds: list[int], step: int, key: str = "acc") -> list[float]:
    """Per-seed differences of the held-out accuracy (``key``: ``acc`` pooled, ``hard`` the hard tier) after
    ``step`` (seeds where both runs evaluated there)."""
    diffs = []
    for seed in seeds:
        i, j = np.flatnonzero(a[seed]["steps"] == step), np.flatnonzero(b[seed]["steps"] == step)
        if len(i) and len(j):
            diffs.append(float(a[seed][key][i[0]] - b[seed][key][j[0]]))
    return diffs


def words(label: str) -> list[str]:
    """A group label's parts: ``lite_ppo/testbed-base [agg=token]`` -> lite_ppo, testbed-base, agg=token."""
    return [w for w in re.split(r"[/\s\[\],()]+", label) if w]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="a sweep's --out folder")
    parser.add_argument("--record", help="write the per-seed values read to this JSON file")
    parser.add_argument(
        "--order",
        nargs="+",
        default=[],
        help="recipes or factor levels (parts of the group labels: lite_ppo, agg=token) in the order A - B is read",
    )
    parser.add_argument(
        "--at-step",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="also the contrasts after step N (pooled and hard tier), where both cells have a held-out evaluation",
    )
    args = parser.parse_args()
    cells: dict[str, dict[int, dict]] = defaultdict(dict)
    for group in group_runs(find_runs([args.study])):
        for run in group.runs:
            if (run.record or {}).get("status") != "finished":
                continue  # running, failed or interrupted: not scored
            table = read_scalars(run.path)
            pooled = score_series(table, POOLED_VAL)  # every held-out tier, weighted by its problems
            steps, accuracy = pooled.steps, pooled.values
            tokens = x_at(steps, cumulative(table, AXES["tokens"], run.path))
            total = float(table[names.GENERATED_TOKENS].values.sum())
            last = {tag: float(table[tag].values[-1]) for tag in MECHANISM if tag in table}
            hard = table["val/hard/accuracy"].values if "val/hard/accuracy" in table else np.full(len(steps), np.nan)
            cells[group.label][run.seed] = {
                "steps": steps,
                "acc": accuracy,
                "hard": hard,
                "tokens": tokens,
                "total": total,
                **last,
            }
    if args.record:
        plain = {
            cell: {
                str(seed): {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in run.items()}
                for seed, run in runs.items()
            }
            for cell, runs in cells.items()
        }
        with open(args.record, "w", encoding="utf-8") as out:
            json.dump({"study": Path(args.study).name, "cells": plain}, out, indent=1, sort_keys=True)
            out.write("\n")
    seeds = sorted(set.intersection(*(set(runs) for runs in cells.values())))
    print(f"{len(seeds)} seeds in every cell: {seeds}")
    budget = {seed: min(cells[c][seed]["total"] for c in cells) for seed in seeds}
    at_budget = {}
    for cell, runs in cells.items():
        at_budget[cell] = {}
        for seed in seeds:
            run = runs[seed]
            within = np.flatnonzero(run["tokens"] <= budget[seed])
            at_budget[cell][seed] = (run["acc"][within[-1]], int(run["steps"][within[-1]])) if len(within) else None
        rows = list(runs.values())
        print(
            f"\n{cell}: last-step held-out {np.mean([r['acc'][-1] for r in rows]):.4f}, "
            f"tokens per run {np.mean([r['total'] for r in rows]):.3g}"
        )
        for i, step in enumerate(rows[0]["steps"]):
            accuracy, tokens = np.mean([r["acc"][i] for r in rows]), np.mean([r["tokens"][i] for r in rows])
            hard = np.mean([r["hard"][i] for r in rows])
            print(f"  after step {step}: held-out {accuracy:.4f}, hard tier {hard:.4f} ({tokens:.3g} tokens before it)")
        for tag in MECHANISM:
            print(f"  last step {tag}: {np.mean([r[tag] for r in rows if tag in r]):.4f}")
        chosen = [at_budget[cell][s][1] for s in seeds if at_budget[cell][s] is not None]
        counts = {step: chosen.count(step) for step in sorted(set(chosen))}
        print(f"  at equal tokens scored after step: seeds {counts}")
    print(f"\nbudget B per seed: {min(budget.values()):.3g}-{max(budget.values()):.3g} tokens")
    rank = {
        label: (min([args.order.index(w) for w in words(label) if w in args.order], default=len(args.order)), label)
        for label in cells
    }
    for a, b in itertools.combinations(sorted(cells, key=rank.get), 2):
        last = [cells[a][s]["acc"][-1] - cells[b][s]["acc"][-1] for s in seeds]
        both = [s for s in seeds if at_budget[a][s] and at_budget[b][s]]
        equal = [at_budget[a][s][0] - at_budget[b][s][0] for s in both]
        hard = [cells[a][s]["hard"][-1] - cells[b][s]["hard"][-1] for s in seeds]
        print(f"\n{a} - {b}\n  after the last step: {contrast(last)}\n  at equal tokens:     {contrast(equal)}")
        for step in args.at_step:
            print(f"  after step {step}:     {contrast(at_step(cells[a], cells[b], seeds, step))}")
            print(f"    hard tier:       {contrast(at_step(cells[a], cells[b], seeds, step, 'hard'))}")
        print(f"  hard tier, after the last step: {contrast(hard)}")
        for tag in MECHANISM:
            d = [cells[a][s][tag] - cells[b][s][tag] for s in seeds if tag in cells[a][s]]
            if len(d) >= 2:
                print(f"  last step {tag}: {np.mean(d):+.4f} (p = {contrast_ci(d)['p']:.2g})")


if __name__ == "__main__":
    main()
