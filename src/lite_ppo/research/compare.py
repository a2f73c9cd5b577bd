"""``lite-ppo compare RUN_OR_GLOB... --out DIR``: paper-style figures and a seed-aggregated summary with
confidence intervals, pairwise tests and factorial effects.

Reads the TensorBoard event files of the given runs, groups the runs that differ only in their seed
(:mod:`lite_ppo.research.runs`), and writes into ``DIR``:

- ``overview.png`` (one panel per key quantity) and ``<quantity>.png`` (one per quantity), over
  training steps or over the compute spent (``--x tokens|seconds``, :mod:`lite_ppo.research.compute_axis`);
- ``summary.md`` / ``summary.json``: per group, final and best value of each quantity as mean ± std
  with the 95 % CI over seeds and n, the compute per run, the held-out score under the checkpoint rule
  (``--checkpoint last|best``, :mod:`lite_ppo.research.scores`) with every pair of groups compared
  (difference, Welch CI and p-value), the main effects and interactions of a ``sweep --factor`` grid
  (:mod:`lite_ppo.research.factorial`), each with its minimum detectable effect at 80 % power and a
  verdict sentence (:mod:`lite_ppo.research.power`; also printed), a paired analysis by problem where
  the runs wrote per-problem held-out results (:mod:`lite_ppo.research.bootstrap`), and the steps until
  training accuracy reached 50 % / 90 % of its final value. Each contrast has one primary verdict, the
  others labelled secondary (:data:`lite_ppo.research.summary.PRIMARY_RULE`).

Runs of different lengths, quantities some runs never logged and runs still being written are fine.
The runs are read as ``lite-ppo plan`` reads them (:mod:`lite_ppo.research.run_set`): a run whose event
files hold no readable record (damaged, empty, not TensorBoard files) is left out and named
(``summary.json``'s ``unreadable``), and so is a run whose ``run.json`` is damaged (``damaged_records``, and a
note); when no run is readable, compare fails (exit 2). Diverged and short runs stay in the figures and
leave the scores and tests (:mod:`lite_ppo.research.run_health`), each named in a note.

Example::

    lite-ppo compare 'runs/*/smollm2-135m-instruct/seed*' --out cmp
    lite-ppo compare runs/lite_ppo runs/grpo runs/dapo --out cmp --x tokens
    lite-ppo compare runs/ablation --out cmp --checkpoint best --select-on 'val/*/accuracy' \\
        --score eval/average/accuracy
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lite_ppo.errors import OneLineParser, UserError
from lite_ppo.research.compute_axis import AXES
from lite_ppo.research.scalars import ScalarTable
from lite_ppo.research.scores import POOLED_VAL, CheckpointRule, default_score, score_series

# Only what building the parser needs is imported above, so that `lite-ppo compare --help` answers at
# once: the figures (matplotlib), the statistics (scipy, statsmodels) and the atomic writer (whose package
# imports Lightning) are imported by compare() when it runs.

__all__ = ["compare", "main"]


def _check_logged(option: str, tag: str | None, tables: dict[Path, ScalarTable]) -> None:
    if tag is not None and not any(score_series(table, tag) is not None for table in tables.values()):
        raise UserError(f"{option} {tag}: no run logged it (held-out accuracies: val/<tier>/accuracy, eval/...)")


def compare(
    patterns: list[str],
    out_dir: Path,
    band: str = "ci",
    jobs: int | None = None,
    x: str = "step",
    checkpoint: str = "last",
    score: str | None = None,
    select_on: str = POOLED_VAL,
) -> dict:
    """Run the whole comparison; returns the summary (as written to ``summary.json``)."""
    from lite_ppo.reliability.checkpoint_io import atomic_write_bytes
    from lite_ppo.research.compute_axis import cumulative
    from lite_ppo.research.figures import BAND_TEXT, plot_comparison
    from lite_ppo.research.quantities import quantities_for
    from lite_ppo.research.run_set import counted_runs, read_run_set
    from lite_ppo.research.summary import summarize, summary_markdown

    if x not in AXES:
        raise UserError(f"--x {x!r}: expected one of {', '.join(AXES)}")
    run_set = read_run_set(patterns, jobs)
    groups, tables = run_set.groups, run_set.tables
    all_tags = run_set.tags
    quantities = quantities_for(all_tags)
    axis = AXES[x]
    cums = {path: cumulative(table, axis, path) for path, table in tables.items()}
    _check_logged("--score", score, tables)
    rule = CheckpointRule(checkpoint, score or default_score(all_tags), select_on)  # type: ignore[arg-type]
    if checkpoint == "best":
        _check_logged("--select-on", select_on, tables)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = plot_comparison(groups, tables, quantities, out_dir, band=band, axis=axis, cums=cums)  # type: ignore[arg-type]
    # The runs that count (plan counts the same ones: lite_ppo.research.run_set) and the notes on the others.
    summary = summarize(groups, tables, quantities, rule, counted_runs(run_set, rule.score))
    summary["figures"] = [p.name for p in figures]
    summary["band"] = band
    summary["unreadable"] = [str(path) for path in run_set.unreadable]
    summary["damaged_records"] = {str(path): why for path, why in run_set.damaged_records.items()}
    summary["band_text"] = f"{BAND_TEXT[band]}, cut at each quantity's range"
    summary["x"] = axis.name
    summary["x_label"] = axis.label
    # Each output replaced whole: a kill mid-write leaves the earlier comparison's file, never part of one.
    atomic_write_bytes(out_dir / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    markdown = summary_markdown(summary)
    if figures:
        markdown += "\n![overview](" + figures[0].name + ")\n"
    atomic_write_bytes(out_dir / "summary.md", markdown.encode())
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
        "--x",
        choices=tuple(AXES),
        default="step",
        help="x-axis of the figures: training steps, cumulative generated tokens or training seconds (default step)",
    )
    parser.add_argument(
        "--band",
        choices=("ci", "minmax", "std"),
        default="ci",
        help="spread drawn around the mean over seeds: 95%% CI of the mean (default), min-max or ±1 std",
    )
    parser.add_argument(
        "--checkpoint",
        choices=("last", "best"),
        default="last",
        help="which evaluation gives a run's score: its last, or the best on --select-on (default last)",
    )
    parser.add_argument(
        "--score",
        default=None,
        metavar="TAG",
        help="held-out score (default eval/average/accuracy if logged, else val/*/accuracy: the tiers pooled)",
    )
    parser.add_argument(
        "--select-on",
        default=POOLED_VAL,
        metavar="TAG",
        help=f"held-out split that picks the best evaluation, disjoint from --score (default {POOLED_VAL})",
    )
    parser.add_argument("--jobs", type=int, default=None, help="runs read in parallel (default: CPUs, at most 8)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from lite_ppo.research.summary import verdict_lines

    try:
        summary = compare(
            args.runs, args.out, args.band, args.jobs, args.x, args.checkpoint, args.score, args.select_on
        )
    except UserError as err:
        print(f"lite-ppo compare: error: {err}", file=sys.stderr)
        return 2
    if summary["unreadable"]:
        print(
            f"lite-ppo compare: warning: left out {len(summary['unreadable'])} runs whose event files could not be "
            f"read (damaged, empty or not TensorBoard files): {', '.join(summary['unreadable'])}",
            file=sys.stderr,
        )
    n_runs = sum(len(g["runs"]) for g in summary["groups"])
    print(
        f"compared {n_runs} runs in {len(summary['groups'])} groups: "
        + ", ".join(g["label"] for g in summary["groups"])
    )
    for note in summary["notes"]:
        print(f"note: {note}")
    for line in verdict_lines(summary):
        print(line)
    print(f"figures and summary in {args.out}/ ({len(summary['figures'])} PNG, summary.md, summary.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
