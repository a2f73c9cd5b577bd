"""``lite-ppo compare RUN_OR_GLOB... --out DIR``: paper-style figures and a seed-aggregated summary.

Reads the TensorBoard event files of the given runs, groups the runs that differ only in their seed
(:mod:`lite_ppo.research.runs`), and writes into ``DIR``:

- ``overview.png`` (one panel per key quantity) and ``<quantity>.png`` (one per quantity);
- ``summary.md`` / ``summary.json``: per group, final and best value of each quantity as mean ± std
  over seeds with n, and the steps until training accuracy reached 50 % / 90 % of its final value.

Runs of different lengths, quantities some runs never logged and runs still being written are fine.

Example::

    lite-ppo compare 'runs/*/smollm2-135m-instruct/seed*' --out cmp
    lite-ppo compare runs/lite_ppo runs/grpo --out cmp --band std
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lite_ppo.errors import UserError
from lite_ppo.research.figures import plot_comparison
from lite_ppo.research.quantities import quantities_for
from lite_ppo.research.runs import RunGroup, find_runs, group_runs
from lite_ppo.research.scalars import ScalarTable, read_many
from lite_ppo.research.summary import summarize, summary_markdown

__all__ = ["compare", "main"]


def compare(patterns: list[str], out_dir: Path, band: str = "minmax", jobs: int | None = None) -> dict:
    """Run the whole comparison; returns the summary (as written to ``summary.json``)."""
    runs = find_runs(patterns)
    tables: dict[Path, ScalarTable] = read_many([run.path for run in runs], jobs)
    groups: list[RunGroup] = group_runs(runs)
    all_tags = {tag for table in tables.values() for tag in table}
    quantities = quantities_for(all_tags)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = plot_comparison(groups, tables, quantities, out_dir, band=band)  # type: ignore[arg-type]
    summary = summarize(groups, tables, quantities)
    summary["figures"] = [p.name for p in figures]
    summary["band"] = band
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = summary_markdown(summary)
    if figures:
        markdown += "\n![overview](" + figures[0].name + ")\n"
    (out_dir / "summary.md").write_text(markdown)
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lite-ppo compare",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN_OR_GLOB", help="run directories, folders of runs, or glob patterns (quote them)"
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="folder for the PNG figures, summary.md and summary.json"
    )
    parser.add_argument(
        "--band", choices=("minmax", "std"), default="minmax", help="spread drawn around the mean over seeds"
    )
    parser.add_argument("--jobs", type=int, default=None, help="runs read in parallel (default: CPUs, at most 8)")
    args = parser.parse_args(argv)
    try:
        summary = compare(args.runs, args.out, args.band, args.jobs)
    except UserError as err:
        print(f"lite-ppo compare: error: {err}", file=sys.stderr)
        return 2
    n_runs = sum(len(g["runs"]) for g in summary["groups"])
    print(
        f"compared {n_runs} runs in {len(summary['groups'])} groups: "
        + ", ".join(g["label"] for g in summary["groups"])
    )
    for group in summary["groups"]:
        seeds = [s for s in group["seeds"] if s is not None]
        if len(seeds) != len(set(seeds)):
            print(f"note: group {group['label']} holds several runs with the same seed: {group['runs']}")
    print(f"figures and summary in {args.out}/ ({len(summary['figures'])} PNG, summary.md, summary.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
