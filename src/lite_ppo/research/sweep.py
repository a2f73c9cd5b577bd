"""``lite-ppo sweep``: a grid of recipes x seeds (x factors, config and override axes), run one after
another (or ``--parallel P`` side by side, ``--threads T`` math threads each), then compared.

Each grid point runs as its own process, forked from a server that imported the training stack once
(:mod:`lite_ppo.research.fork_server`; ``--launch process``: ``python -m lite_ppo.cli fit ...``), with its own named run
directory under ``--out`` (``<out>[/<variant>]/<recipe>/<model>/seed<S>``) and its output in
``<out>/sweep_logs/<label>.log``. A point whose run already finished (its ``run.json`` has
``status: finished`` and the point's ``sweep_key``) is skipped, so an interrupted sweep resumes where
it stopped. A run stopped part-way (``status: interrupted`` after a signal, or still ``running`` with its
process gone) resumes in its own folder from its checkpoint (:func:`resumable_run`); a failed one runs again
into a fresh folder (``seed<S>-1``: nothing is overwritten).
At the end ``lite-ppo compare`` runs on the finished runs (``<out>/compare``; its options in
``--compare-args``). The points run seed by seed (every cell of a seed, then the next seed), so a sweep
stopped early leaves whole seeds but the last; ``--no-start-after WHEN`` starts no point after that moment (the
running ones finish, the same command later runs the rest: :mod:`lite_ppo.research.start_deadline`).

``--factor NAME=LEVEL:FRAGMENT.yaml,...`` makes a factorial grid of technique settings with named
cells (:mod:`lite_ppo.research.factors`): each run's folder (``<out>/norm=batch_std_agg=token/...``)
and ``run.json`` (``cell``, ``factors``) name its cell, and ``compare`` reports each factor's main
effect and the interactions with confidence intervals.

A signal to the sweep (SIGTERM from a scheduler, SIGUSR1, Ctrl-C) is forwarded to the running
``fit``, which finishes its step and saves its checkpoint (:mod:`lite_ppo.reliability.preemption`);
the sweep waits for it, starts no further point and exits with 128 + the signal number. No ``fit``
is left running on its own.

With ``--emit-slurm DIR`` nothing runs: it writes one launch script per unfinished point and a SLURM
array script (``sbatch DIR/sweep.sbatch``).

Example::

    lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml configs/recipes/grpo.yaml --seed 0 1 2 \\
        --config configs/models/qwen3_4b_base.yaml --out runs/ablation --emit-slurm slurm/ablation \\
        --sbatch-option=--gres=gpu:8
    lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml --seed 0 1 --config configs/models/tiny.yaml \\
        --grid model.lr=1e-4,1e-5 --out runs/lr_sweep -- --data.steps_per_epoch=2
    lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml --seed 0 1 2 --config configs/models/tiny.yaml \\
        --factor norm=group_std:configs/factors/norm_group_std.yaml,batch_std:configs/factors/norm_batch_std.yaml \\
        --factor agg=token:configs/factors/agg_token.yaml,seq:configs/factors/agg_seq.yaml \\
        --out runs/lite_ppo_2x2 --compare-args='--x tokens'
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from lite_ppo.errors import OneLineParser, UserError, one_line
from lite_ppo.research.child_processes import deferred_signals, signals_to
from lite_ppo.research.fork_server import ForkedRun, ForkServer, ForkServerGone
from lite_ppo.research.grid import FIT_ENTRY, FIT_PRELOAD, GridPoint, expand_grid, run_env
from lite_ppo.research.run_folder import RunDir
from lite_ppo.research.slurm import emit_slurm
from lite_ppo.research.start_deadline import no_start_after
from lite_ppo.research.sweep_lock import SweepLock

__all__ = ["find_point_runs", "main", "run_sweep"]

STATUS_FINISHED = "finished"
# Forking after the imports is safe where fork copies a process as it is (Linux); macOS's system
# frameworks are not fork-safe once loaded, and Windows has no fork.
DEFAULT_LAUNCH = "fork" if sys.platform == "linux" else "process"


class SweepOutcome(NamedTuple):
    """What :func:`run_sweep` did: the grid's finished run folders (before and now), the points it
    started, those that failed, and those it did not start because ``start_until`` had passed."""

    finished: list[Path]
    ran: list[GridPoint]
    failed: list[GridPoint]
    not_started: list[GridPoint]


class SweepInterrupted(Exception):
    """The sweep received ``signum``; the running point got it too and has stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def find_point_runs(point: GridPoint, out: Path) -> list[Path]:
    """The run directories this point already produced (any status), oldest first."""
    found = []
    for run in RunDir.below(point.save_dir(out)):
        record = run.record
        if record and record.get("sweep_key") == point.sweep_key:
            found.append((str(record.get("started") or ""), run.path))
    return [path for _, path in sorted(found)]


def only_points(points: list[GridPoint], only: list[str]) -> list[GridPoint]:
    """The points whose cell has every ``FACTOR=LEVEL`` of ``only`` (all points without it)."""
    wanted: dict[str, str] = {}
    for item in only:
        name, sep, level = item.partition("=")
        if not sep or not name or not level:
            raise UserError(f"--only {item!r}: expected FACTOR=LEVEL (e.g. init=aligned)")
        wanted[name] = level
    if not wanted:
        return points
    design = dict(points[0].design) if points else {}
    for name, level in wanted.items():
        if name not in design:
            raise UserError(f"--only {name}={level}: no factor {name!r}; the factors: {', '.join(design) or 'none'}")
        if level not in design[name]:
            raise UserError(f"--only {name}={level}: {name} has the levels {', '.join(design[name])}")
    return [p for p in points if all(dict(p.cell).get(n) == lv for n, lv in wanted.items())]


def finished_run(point: GridPoint, out: Path) -> Path | None:
    from lite_ppo.research.run_record import read_run_record  # imports Lightning: not for --help

    for path in reversed(find_point_runs(point, out)):
        record = read_run_record(path) or {}
        if record.get("status") == STATUS_FINISHED:
            return path
    return None


def resumable_run(point: GridPoint, out: Path) -> tuple[Path, Path] | None:
    """The newest run of ``point`` that stopped part-way and can continue: (run folder, checkpoint).

    Interrupted runs (a signal, Ctrl-C) name their checkpoint in ``run.json``; a run still marked
    ``running`` whose process is gone from this host (killed, crashed with no chance to write) resumes
    from its ``checkpoints/last.ckpt``. Failed runs start over: their error would come back."""
    from lite_ppo.research.run_record import STATUS_INTERRUPTED, process_gone, read_run_record

    for path in reversed(find_point_runs(point, out)):
        record = read_run_record(path) or {}
        status = record.get("status")
        if status == STATUS_FINISHED:
            return None
        if status == STATUS_INTERRUPTED or (status == "running" and process_gone(record)):
            for candidate in (record.get("checkpoint"), path / "checkpoints" / "last.ckpt"):
                if candidate and Path(candidate).is_file():
                    return path, Path(candidate)
    return None


def dry_run(points: list[GridPoint], out: Path, python: str | None = None, deadline=None, echo=print) -> None:
    """What the sweep would do, point by point, in its order: skip a finished run, resume an
    interrupted one from its checkpoint, or start one (with the ``fit`` command it would run)."""
    counts = {"finished": 0, "resume": 0, "run": 0}
    for i, point in enumerate(points, 1):
        done = finished_run(point, out)
        resume = None if done is not None else resumable_run(point, out)
        if done is not None:
            counts["finished"] += 1
            echo(f"[{i}/{len(points)}] {point.label}: finished, skipped ({done})")
            continue
        counts["resume" if resume else "run"] += 1
        what = f"resume from {resume[1]}" if resume else f"to run, under {point.save_dir(out)}"
        command = point.command(out, python=python, ckpt_path=resume[1] if resume else None)
        echo(f"[{i}/{len(points)}] {point.label}: {what}\n    {shlex.join(str(a) for a in command)}")
    when = f"; none would start after {deadline:%Y-%m-%d %H:%M:%S}" if deadline is not None else ""
    echo(
        f"sweep --dry-run: {len(points)} runs in the grid: {counts['finished']} finished, {counts['resume']} to "
        f"resume, {counts['run']} to run{when}; nothing was run"
    )


def _signals_raise():
    """While it lasts, a stop signal (SIGTERM, SIGUSR1, Ctrl-C) raises :class:`SweepInterrupted` here (what runs
    inside stops its own children on the way out)."""

    def interrupt(signum, frame) -> None:
        raise SweepInterrupted(signum)

    return signals_to(interrupt)


def _parallel(text: str) -> int | str:
    """``--parallel``: a number of runs, or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of runs or auto") from None


def run_sweep(
    points: list[GridPoint],
    out: Path,
    python: str | None = None,
    echo=print,
    parallel: int = 1,
    threads: int | None = None,
    launch: str = DEFAULT_LAUNCH,
    start_until: float | None = None,
) -> SweepOutcome:
    """Run the unfinished points in their order, ``parallel`` at a time (each with ``threads`` math
    threads, or the inherited setting), none started after ``start_until`` (``time.time()``'s scale).
    ``launch``: ``fork`` forks each run from a server that imported the training stack once
    (:mod:`lite_ppo.research.fork_server`), ``process`` starts each as ``python -m lite_ppo.cli fit ...``.

    A stop signal (SIGTERM, SIGUSR1, Ctrl-C) reaches every running point; no further point starts, the running
    ones are waited for, then :class:`SweepInterrupted` is raised."""
    logs = out / "sweep_logs"
    logs.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[int, GridPoint, Path | None]] = []
    for i, point in enumerate(points, 1):
        done = finished_run(point, out)
        if done is not None:
            echo(f"[{i}/{len(points)}] {point.label}: finished before, skipped ({done})")
            continue
        resume = resumable_run(point, out)
        todo.append((i, point, resume[1] if resume else None))
    env = run_env(threads)
    ran, failed, received, not_started = [], [], [], []
    running: dict[subprocess.Popen | ForkedRun, tuple[int, GridPoint, Path, float]] = {}
    server = None

    def forward(signum, frame) -> None:
        received.append(signum)
        for child in running:
            if child.poll() is None:
                child.send_signal(signum)

    # no handlers outside the main thread: the children are still waited for
    with signals_to(forward):
        try:
            # After a signal no point starts: the sweep ends once the running ones have stopped, however
            # many are still to start (waiting for them to start was a hang).
            while running or (todo and not received):
                if todo and start_until is not None and time.time() >= start_until:
                    not_started = [point for _, point, _ in todo]
                    todo.clear()
                    echo(
                        f"no run starts after {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start_until))} "
                        f"(--no-start-after): {len(not_started)} of {len(points)} not started"
                        + (f"; waiting for the {len(running)} running" if running else "")
                    )
                while todo and len(running) < parallel and not received:
                    i, point, checkpoint = todo.pop(0)
                    log_path = logs / f"{point.label}.log"
                    how = f"resuming from {checkpoint}" if checkpoint else "running"
                    echo(f"[{i}/{len(points)}] {point.label}: {how} (log: {log_path})")
                    # Appended, one header per attempt: an earlier attempt's output (a failure's traceback)
                    # stays in the log when the point starts over.
                    with log_path.open("a") as log:
                        log.write(f"=== lite-ppo sweep, {time.strftime('%Y-%m-%d %H:%M:%S')}: {point.label} {how}\n")
                    # Each run in its own process group: a Ctrl-C at the terminal reaches it once, through
                    # the sweep, like a kill of the sweep does. A signal while it starts is forwarded once it
                    # is in `running` (before, it missed the run, which then trained to its end).
                    with deferred_signals():
                        if launch == "fork":
                            if server is None:
                                server = ForkServer(FIT_ENTRY, FIT_PRELOAD, python, env, title="lite-ppo")
                            child = server.start(point.fit_args(out, checkpoint), log_path, append=True)
                        else:
                            with log_path.open("a") as log:  # the child keeps its own descriptor
                                child = subprocess.Popen(
                                    point.command(out, python, checkpoint),
                                    process_group=0,
                                    stdout=log,
                                    stderr=subprocess.STDOUT,
                                    env=env,
                                )
                        running[child] = (i, point, log_path, time.monotonic())
                    ran.append(point)
                ended = [child for child in running if child.poll() is not None]
                if not ended:
                    time.sleep(0.1)
                    continue
                for child in ended:
                    i, point, log_path, start = running.pop(child)
                    _report(child.returncode, received, i, len(points), point, out, log_path, start, failed, echo)
            if received:
                raise SweepInterrupted(received[0])
        finally:
            if server is not None:
                server.close()
    finished = [p for p in (finished_run(point, out) for point in points) if p is not None]
    return SweepOutcome(finished, ran, failed, not_started)


def _report(code, received, i, total, point, out, log_path, start, failed, echo) -> None:
    if received:
        # A run stopped during its start-up has no checkpoint: the same command starts it again.
        kept = "its checkpoint and log" if resumable_run(point, out) is not None else "no checkpoint yet; its log"
        echo(
            f"[{i}/{total}] {point.label}: stopped by {signal.Signals(received[0]).name} (exit {code}); "
            f"{kept}: {log_path}. Run the same command again to continue the sweep."
        )
        return
    result = finished_run(point, out)
    if code != 0 or result is None:
        failed.append(point)
        echo(
            f"[{i}/{total}] {point.label}: FAILED (exit {code}) after {time.monotonic() - start:.0f} s; see {log_path}"
        )
    else:
        echo(f"[{i}/{total}] {point.label}: finished in {time.monotonic() - start:.0f} s -> {result}")


def main(argv: list[str]) -> int:
    if "--" in argv:  # everything after "--" goes to every run unchanged
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    else:
        passthrough = []
    parser = OneLineParser(
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
        "--factor",
        action="append",
        default=[],
        metavar="NAME=LEVEL:A.yaml,LEVEL:B.yaml",
        help="one more grid axis, a factor with named levels: each run gets one level's config fragment, "
        "its callbacks merged by class into the recipe's (a LEVEL alone: the recipe unchanged)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="FACTOR=LEVEL",
        help="run only the grid points with this factor level (repeatable; e.g. --only init=aligned to add seeds "
        "to some cells of a design: the runs keep the whole design's cell names and compare with the others)",
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
        "--compare-args",
        default="",
        metavar="ARGS",
        help="options for the compare at the end, e.g. --compare-args='--x tokens --checkpoint best'",
    )
    parser.add_argument(
        "--emit-slurm",
        type=Path,
        default=None,
        metavar="DIR",
        help="write SLURM launch scripts to DIR instead of running",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the grid (each run: finished, to resume or to run, with its fit command) and run nothing",
    )
    parser.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPT",
        help="an #SBATCH line for the array script, e.g. --sbatch-option=--gres=gpu:8",
    )
    parser.add_argument("--python", default=None, help="Python interpreter of the runs (default: this one)")
    parser.add_argument(
        "--parallel",
        type=_parallel,
        default=1,
        metavar="P",
        help="runs side by side (default 1); on a CPU, P runs of --threads 1 each can finish more per hour "
        "than one run on every core (docs/benchmarks.md, 'The instrument: speed'); auto: measure both on "
        "this sweep's first run and keep the faster (lite_ppo.research.parallel_choice)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="T",
        help="math threads of each run (OMP_NUM_THREADS; default: inherited)",
    )
    parser.add_argument(
        "--launch",
        choices=("fork", "process"),
        default=DEFAULT_LAUNCH,
        help="how each run starts: fork (from a server process that imported the training stack once: "
        "no run pays the imports again; the default on Linux) or process (a fresh `python -m lite_ppo.cli fit`)",
    )
    parser.add_argument(
        "--no-start-after",
        default=None,
        metavar="WHEN",
        help="start no run after this moment: HH:MM (the next such time), an ISO date-time or +90m / +2h; "
        "the running ones finish, the same command later runs the rest (a study's time box, fixed in advance)",
    )
    args = parser.parse_args(argv)
    if (args.parallel != "auto" and args.parallel < 1) or (args.threads is not None and args.threads < 1):
        print("lite-ppo sweep: error: --parallel and --threads must be >= 1", file=sys.stderr)
        return 2
    if args.parallel == "auto" and args.threads is not None:
        print("lite-ppo sweep: error: --parallel auto chooses the threads too: leave out --threads", file=sys.stderr)
        return 2
    try:
        points = expand_grid(args.recipe, args.seed, args.config, args.grid_config, args.grid, passthrough, args.factor)
        points = only_points(points, args.only)
        compare_args = shlex.split(args.compare_args)
        deadline = no_start_after(args.no_start_after) if args.no_start_after else None
    except (UserError, ValueError) as err:
        print(f"lite-ppo sweep: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    if compare_args:  # checked now, not after the runs
        from lite_ppo.research.compare import build_parser

        try:
            build_parser().parse_args(["RUNS", "--out", "OUT", *compare_args])
        except SystemExit:
            print(f"lite-ppo sweep: error: --compare-args {args.compare_args!r}: see above", file=sys.stderr)
            return 2
    if args.dry_run:
        if args.emit_slurm is not None:
            print("lite-ppo sweep: error: --dry-run and --emit-slurm: give one", file=sys.stderr)
            return 2
        dry_run(points, args.out, args.python, deadline)
        return 0
    if args.emit_slurm is not None:
        if deadline is not None:
            print(
                "lite-ppo sweep: error: --no-start-after times runs started here; with --emit-slurm SLURM "
                "starts them (give the array a time limit with --sbatch-option=--time=...)",
                file=sys.stderr,
            )
            return 2
        todo = [p for p in points if finished_run(p, args.out) is None]
        if not todo:
            print(f"all {len(points)} runs of the grid already finished under {args.out}; nothing to emit")
            return 0
        paths = emit_slurm(todo, args.emit_slurm, args.out, args.sbatch_option, args.python)
        print(f"wrote {len(todo)} launch scripts ({len(points) - len(todo)} finished runs left out) and {paths[-1]}")
        print(f"submit: sbatch {paths[-1]}")
        print(
            f"afterwards: lite-ppo compare '{args.out}' --out {args.compare_out or args.out / 'compare'}"
            + (f" {shlex.join(compare_args)}" if compare_args else "")
        )
        return 0
    try:
        with SweepLock(args.out):
            return _run_and_compare(args, points, deadline, compare_args)
    except UserError as err:  # another sweep holds the folder (or a mistake found on the way)
        print(f"lite-ppo sweep: error: {err}", file=sys.stderr)
        return 2


def _run_and_compare(args: argparse.Namespace, points: list[GridPoint], deadline, compare_args: list[str]) -> int:
    """The sweep's runs, its summary line and the compare at the end; the exit status."""
    if deadline is not None:
        print(f"sweep: no run starts after {deadline:%Y-%m-%d %H:%M:%S} (--no-start-after)")
    parallel, threads = args.parallel, args.threads
    if parallel == "auto":
        from lite_ppo.research.parallel_choice import choose_parallel

        todo = [point for point in points if finished_run(point, args.out) is None]
        if deadline is not None and time.time() >= deadline.timestamp():
            todo = []  # no run will start (--no-start-after): nothing to measure for
        try:
            with _signals_raise():
                choice = choose_parallel(args.out, args.python, todo)
        except SweepInterrupted as stop:
            name = signal.Signals(stop.signum).name
            print(f"sweep --parallel auto: stopped by {name} while measuring; no run started", file=sys.stderr)
            return 128 + stop.signum
        parallel, threads = choice.parallel, choice.threads
    try:
        finished, ran, failed, not_started = run_sweep(
            points,
            args.out,
            args.python,
            parallel=parallel,
            threads=threads,
            launch=args.launch,
            start_until=deadline.timestamp() if deadline is not None else None,
        )
    except SweepInterrupted as stop:
        return 128 + stop.signum
    except ForkServerGone as err:
        print(f"lite-ppo sweep: error: {err}; --launch process starts each run as its own process", file=sys.stderr)
        return 1
    skipped = len(points) - len(ran) - len(not_started)
    print(
        f"sweep: {len(points)} runs in the grid, {len(ran)} run now, {skipped} skipped (finished before), "
        + (f"{len(not_started)} not started (--no-start-after: the same command runs them), " if not_started else "")
        + f"{len(failed)} failed"
    )
    if finished and not args.no_compare:
        from lite_ppo.research.compare import main as compare_main

        compare_out = args.compare_out or args.out / "compare"
        code = compare_main([*(str(p) for p in finished), "--out", str(compare_out), *compare_args])
        if code != 0:
            return code
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
