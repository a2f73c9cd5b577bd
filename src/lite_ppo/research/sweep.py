"""``lite-ppo sweep``: a grid of recipes x seeds (x config / override axes), run one after another,
then compared.

Each grid point runs as its own process (``python -m lite_ppo.cli fit ...``) with its own named run
directory under ``--out`` (``<out>[/<variant>]/<recipe>/<model>/seed<S>``) and its output in
``<out>/sweep_logs/<label>.log``. A point whose run already finished (its ``run.json`` has
``status: finished`` and the point's ``sweep_key``) is skipped, so an interrupted sweep resumes where
it stopped; an unfinished one runs again into a fresh folder (``seed<S>-1``: nothing is overwritten).
At the end ``lite-ppo compare`` runs on the finished runs (``<out>/compare``).

With ``--emit-slurm DIR`` nothing runs: it writes one launch script per unfinished point and a SLURM
array script (``sbatch DIR/sweep.sbatch``).

Example::

    lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml configs/recipes/grpo.yaml --seed 0 1 2 \\
        --config configs/models/qwen3_4b_base.yaml --out runs/ablation --emit-slurm slurm/ablation \\
        --sbatch-option=--gres=gpu:8
    lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml --seed 0 1 --config configs/models/tiny.yaml \\
        --grid model.lr=1e-4,1e-5 --out runs/lr_sweep -- --data.steps_per_epoch=2
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from lite_ppo.errors import UserError
from lite_ppo.research.grid import GridPoint, expand_grid
from lite_ppo.research.slurm import emit_slurm

__all__ = ["find_point_runs", "main", "run_sweep"]

STATUS_FINISHED = "finished"


def find_point_runs(point: GridPoint, out: Path) -> list[Path]:
    """The run directories this point already produced (any status), oldest first."""
    from lite_ppo.research.run_record import read_run_record  # imports Lightning: not for --help

    root = point.save_dir(out)
    if not root.is_dir():
        return []
    found = []
    for record_path in root.rglob("run.json"):
        record = read_run_record(record_path.parent)
        if record and record.get("sweep_key") == point.sweep_key:
            found.append((str(record.get("started") or ""), record_path.parent))
    return [path for _, path in sorted(found)]


def finished_run(point: GridPoint, out: Path) -> Path | None:
    from lite_ppo.research.run_record import read_run_record  # imports Lightning: not for --help

    for path in reversed(find_point_runs(point, out)):
        record = read_run_record(path) or {}
        if record.get("status") == STATUS_FINISHED:
            return path
    return None


def run_sweep(
    points: list[GridPoint], out: Path, python: str | None = None, echo=print
) -> tuple[list[Path], list[GridPoint], list[GridPoint]]:
    """Run the unfinished points sequentially; returns (finished run dirs, points run now, failed points)."""
    logs = out / "sweep_logs"
    logs.mkdir(parents=True, exist_ok=True)
    ran, failed = [], []
    for i, point in enumerate(points, 1):
        done = finished_run(point, out)
        if done is not None:
            echo(f"[{i}/{len(points)}] {point.label}: finished before, skipped ({done})")
            continue
        log_path = logs / f"{point.label}.log"
        echo(f"[{i}/{len(points)}] {point.label}: running (log: {log_path})")
        start = time.monotonic()
        with log_path.open("w") as log:
            code = subprocess.run(
                point.command(out, python), stdout=log, stderr=subprocess.STDOUT, check=False
            ).returncode
        ran.append(point)
        result = finished_run(point, out)
        if code != 0 or result is None:
            failed.append(point)
            echo(
                f"[{i}/{len(points)}] {point.label}: FAILED (exit {code}) "
                f"after {time.monotonic() - start:.0f} s; see {log_path}"
            )
        else:
            echo(f"[{i}/{len(points)}] {point.label}: finished in {time.monotonic() - start:.0f} s -> {result}")
    finished = [p for p in (finished_run(point, out) for point in points) if p is not None]
    return finished, ran, failed


def main(argv: list[str]) -> int:
    if "--" in argv:  # everything after "--" goes to every run unchanged
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    else:
        passthrough = []
    parser = argparse.ArgumentParser(
        prog="lite-ppo sweep",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--recipe", nargs="+", required=True, help="recipe YAML files (one grid axis)")
    parser.add_argument("--seed", nargs="+", type=int, default=[42], help="seeds (one grid axis; default 42)")
    parser.add_argument(
        "--config", action="append", default=[], help="a config for every run, after the recipe (repeatable)"
    )
    parser.add_argument(
        "--grid-config",
        action="append",
        default=[],
        metavar="A.yaml,B.yaml",
        help="one more grid axis: each run gets one of these configs",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="one more grid axis: each run gets --KEY=Vi (e.g. model.lr=1e-5,1e-6)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("runs/sweep"), help="root of the run directories (default runs/sweep)"
    )
    parser.add_argument("--compare-out", type=Path, default=None, help="where compare writes (default <out>/compare)")
    parser.add_argument("--no-compare", action="store_true", help="do not run compare at the end")
    parser.add_argument(
        "--emit-slurm",
        type=Path,
        default=None,
        metavar="DIR",
        help="write SLURM launch scripts to DIR instead of running",
    )
    parser.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPT",
        help="an #SBATCH line for the array script, e.g. --sbatch-option=--gres=gpu:8",
    )
    parser.add_argument("--python", default=None, help="Python interpreter of the runs (default: this one)")
    args = parser.parse_args(argv)
    try:
        points = expand_grid(args.recipe, args.seed, args.config, args.grid_config, args.grid, passthrough)
    except UserError as err:
        print(f"lite-ppo sweep: error: {err}", file=sys.stderr)
        return 2
    if args.emit_slurm is not None:
        todo = [p for p in points if finished_run(p, args.out) is None]
        if not todo:
            print(f"all {len(points)} runs of the grid already finished under {args.out}; nothing to emit")
            return 0
        paths = emit_slurm(todo, args.emit_slurm, args.out, args.sbatch_option, args.python)
        print(f"wrote {len(todo)} launch scripts ({len(points) - len(todo)} finished runs left out) and {paths[-1]}")
        print(f"submit: sbatch {paths[-1]}")
        print(f"afterwards: lite-ppo compare '{args.out}' --out {args.compare_out or args.out / 'compare'}")
        return 0
    finished, ran, failed = run_sweep(points, args.out, args.python)
    print(
        f"sweep: {len(points)} runs in the grid, {len(ran)} run "
        f"now, {len(points) - len(ran)} skipped, {len(failed)} failed"
    )
    if finished and not args.no_compare:
        from lite_ppo.research.compare import compare

        compare_out = args.compare_out or args.out / "compare"
        summary = compare([str(p) for p in finished], compare_out)
        print(f"comparison of {len(finished)} finished runs ({len(summary['groups'])} groups) in {compare_out}/")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
