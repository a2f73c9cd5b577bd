"""``lite-ppo advise RUN``: which technique fits this run, read from its measured training state.

Applies the rules of :mod:`lite_ppo.research.rules` (the practical reading of Liu et al., "Tricks
or Traps? A Deep Dive into RL for LLM Reasoning", arXiv 2508.08221) to the run's TensorBoard scalars
and its ``config.yaml``, and prints a ranked list of findings: measured value, threshold, one-sentence
reasoning and the YAML to add, change or remove. A run where no rule fires says so.

Example::

    lite-ppo advise runs/lite_ppo/smollm2-135m-instruct/seed42
    lite-ppo advise runs/grpo/Qwen3-4B/seed42 --model-kind aligned --json
    lite-ppo advise runs --latest --paths     # the newest run, with where its logs are
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from lite_ppo.errors import OneLineParser, UserError
from lite_ppo.research.context import context_from_config
from lite_ppo.research.rules import advise, format_findings
from lite_ppo.research.runs import find_runs
from lite_ppo.research.scalars import read_scalars

__all__ = ["advise_run", "main"]


def _started(run) -> str:
    return str((run.record or {}).get("started") or "")


def advise_run(run: str, model_kind: str | None = None, latest: bool = False) -> tuple[str, list[dict], Path]:
    """(text, findings as dicts, run path) for the single run ``run`` (a path or a pattern matching
    one run; with ``latest``, the most recently started of the runs it matches)."""
    runs = find_runs([run])
    if len(runs) != 1 and not latest:
        raise UserError(f"{run}: matches {len(runs)} runs; advise reads one run (e.g. {runs[0].path}) or pass --latest")
    target = max(runs, key=lambda r: (_started(r), r.path.stat().st_mtime))
    table = read_scalars(target.path)
    if not table:
        raise UserError(f"{target.path}: no TensorBoard scalars yet")
    ctx = context_from_config(target.config, model_kind)
    findings = advise(table, ctx)
    steps = max((len(s) for s in table.values()), default=0)
    return format_findings(findings, ctx, steps), [dataclasses.asdict(f) for f in findings], target.path


def _relative(path: Path) -> Path:
    """``path`` relative to the working directory when it lies below it (shorter commands to copy)."""
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def main(argv: list[str]) -> int:
    parser = OneLineParser(
        prog="lite-ppo advise",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", metavar="RUN", help="a run directory (runs/<recipe>/<model>/seed<S>)")
    parser.add_argument(
        "--model-kind",
        choices=("base", "aligned"),
        default=None,
        help="override the base/aligned reading of the run's config",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--latest", action="store_true", help="RUN may match several runs: advise on the most recently started"
    )
    parser.add_argument(
        "--paths", action="store_true", help="first print where the run's TensorBoard logs are and the compare command"
    )
    args = parser.parse_args(argv)
    try:
        text, findings, path = advise_run(args.run, args.model_kind, args.latest)
    except UserError as err:
        print(f"lite-ppo advise: error: {err}", file=sys.stderr)
        return 2
    if args.paths:
        path = _relative(path)
        print(f"TensorBoard logs: {path}   (view: tensorboard --logdir {path.parent})")
        print(f"Compare seeds:    lite-ppo compare '{path.parent}/seed*' --out {path.parent}/compare")
        print(
            f"Compare recipes:  lite-ppo compare '{path.parent.parent.parent}/*/{path.parent.name}/seed*' --out "
            f"{path.parent.parent.parent}/compare"
        )
    if args.json:
        print(json.dumps({"run": str(path), "findings": findings}, indent=2))
    else:
        print(f"Technique advice for {path}\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
