"""``lite-ppo sweep --parallel auto``: how many runs side by side, and with how many math threads, chosen by
measuring this sweep's own first run on this machine.

On a CPU the threads of one run wait for each other, so C runs of one thread each can finish more runs
per hour than one run on all C cores; for a run that uses the cores well it is the other way round. Which
one holds depends on the model and the machine, so it is measured, not assumed: a short probe of the
sweep's first unfinished point (its own configs, :data:`PROBE_STEPS` rollout steps, no evaluation, no
checkpoint kept) runs once alone with C threads, then C times side by side with one thread each. The mean
``time/step_s`` after the first step gives each layout's throughput in steps per second, and side by side
wins when it is :data:`MARGIN` faster. The choice and what it rests on are kept in
``<out>/parallel_choice.json``, so the same command later runs with the same threads (a run's arithmetic
can depend on its thread count) without measuring again; delete the file to measure again. A signal to
the sweep while it measures stops the probe's runs (SIGTERM: each stops its reward workers) and removes
their folder.

A machine with a GPU is not probed: one run at a time (a GPU run is not limited by CPU threads).

Example (the line the sweep prints; this machine's figures are in docs/benchmarks.md)::

    sweep --parallel auto: 2 runs of 1 thread side by side: <A> steps/s against <B> with 1 run of 2
    threads (measured on lite_ppo_seed0, 3 steps each; kept in runs/study/parallel_choice.json)
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from lite_ppo import metric_names as names
from lite_ppo.errors import UserError
from lite_ppo.reliability.checkpoint_io import atomic_write_bytes
from lite_ppo.research.child_processes import start_child, stop_children
from lite_ppo.research.grid import GridPoint, run_env
from lite_ppo.research.run_folder import RunDir
from lite_ppo.research.scalars import read_scalars
from lite_ppo.rewards.math_verify_reward import available_cores

CHOICE_FILE = "parallel_choice.json"
PROBE_STEPS = 3  # rollout steps of each probe run; the first (warm-up) is not counted
MARGIN = 1.05  # side by side must finish at least 5 % more steps per second to be chosen
STOP_WAIT_S = 30  # how long a probe run stopped by a signal may take to stop its reward workers, then killed
# The probe is a short copy of the point: no held-out evaluation, no run record (its folder is deleted).
PROBE_ARGS = (
    f"--data.steps_per_epoch={PROBE_STEPS}",
    "--trainer.max_epochs=1",  # one epoch of PROBE_STEPS, whatever the point's config says
    "--trainer.max_steps=-1",
    "--trainer.limit_val_batches=0",
    "--run_record.enabled=false",
)


@dataclass(frozen=True)
class ParallelChoice:
    """How a sweep runs its points: ``parallel`` at a time, ``threads`` math threads each (None: inherited),
    and the measurement it rests on (steps per second of each layout; None when nothing was measured)."""

    parallel: int
    threads: int | None
    why: str
    alone_steps_per_s: float | None = None
    side_by_side_steps_per_s: float | None = None


def decide(alone_step_s: float, side_by_side_step_s: float, cores: int) -> ParallelChoice:
    """The layout that finishes more steps per second: one run on ``cores`` threads taking ``alone_step_s``
    a step, or ``cores`` runs of one thread each taking ``side_by_side_step_s`` a step (their mean).

    Example:
        >>> decide(2.0, 3.0, 2).parallel, decide(2.0, 4.0, 2).parallel   # 2/3 > 1/2 steps/s; 2/4 = 1/2
        (2, 1)
    """
    alone, together = 1.0 / alone_step_s, cores / side_by_side_step_s
    if together >= MARGIN * alone:
        return ParallelChoice(cores, 1, "side by side finishes more", alone, together)
    return ParallelChoice(1, cores, "one run on every core finishes as much or more", alone, together)


def choose_parallel(out: Path, python: str | None, todo: list[GridPoint], echo=print) -> ParallelChoice:
    """The sweep's :class:`ParallelChoice`: the one kept in ``out`` from an earlier measurement, else one
    measured now on the first point of ``todo`` (and kept), else one at a time (nothing to run, one core,
    or a GPU)."""
    kept = _kept_choice(out)
    if kept is not None:
        echo(f"sweep --parallel auto: {_describe(kept)} (measured before; kept in {out / CHOICE_FILE})")
        return kept
    cores = available_cores()
    if not todo or cores < 2 or _has_gpu():
        reason = "nothing to run" if not todo else ("one core" if cores < 2 else "a GPU machine")
        choice = ParallelChoice(1, None, reason)
        echo(f"sweep --parallel auto: one run at a time ({reason}; nothing measured)")
        return choice
    point = todo[0]
    echo(
        f"sweep --parallel auto: measuring {point.label} for {PROBE_STEPS} steps, alone on {cores} threads, "
        f"then {cores} side by side on 1 thread each ..."
    )
    probe = out / ".parallel_probe"
    shutil.rmtree(probe, ignore_errors=True)
    try:
        alone = _mean_step_seconds(point, probe / "alone", python, copies=1, threads=cores)
        together = _mean_step_seconds(point, probe / "side_by_side", python, copies=cores, threads=1)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    choice = decide(alone, together, cores)
    atomic_write_bytes(out / CHOICE_FILE, (json.dumps(asdict(choice), indent=1) + "\n").encode())
    echo(
        f"sweep --parallel auto: {_describe(choice)} (measured on {point.label}, {PROBE_STEPS} steps each; "
        f"kept in {out / CHOICE_FILE})"
    )
    return choice


def _describe(choice: ParallelChoice) -> str:
    alone, together = choice.alone_steps_per_s, choice.side_by_side_steps_per_s
    if alone is None or together is None:
        return f"one run at a time ({choice.why})"
    if choice.parallel > 1:
        cores = choice.parallel
        return (
            f"{cores} runs of 1 thread side by side: {together:.2f} steps/s against {alone:.2f} with 1 run "
            f"of {cores} threads"
        )
    cores = choice.threads
    return f"1 run of {cores} threads: {alone:.2f} steps/s against {together:.2f} with {cores} runs of 1 thread"


def _kept_choice(out: Path) -> ParallelChoice | None:
    path = out / CHOICE_FILE
    if not path.is_file():
        return None
    try:
        return ParallelChoice(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise UserError(f"{path}: not a parallel choice this sweep wrote ({err}); delete it to measure again") from None


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _mean_step_seconds(point: GridPoint, folder: Path, python: str | None, copies: int, threads: int) -> float:
    """Mean ``time/step_s`` after the first step over ``copies`` probe runs of ``point`` started together,
    each with ``threads`` math threads."""
    env = run_env(threads)
    children: list[subprocess.Popen] = []
    outs, logs = [], []
    try:
        for k in range(copies):
            run_out = folder / f"copy{k}"
            run_out.mkdir(parents=True)
            logs.append((run_out / "probe.log").open("w"))
            outs.append(run_out)
            command = [*point.command(run_out, python), *PROBE_ARGS]
            # Its own process group, as the sweep's runs: a Ctrl-C at the terminal reaches it through the
            # sweep. Registered before a signal's exception can fire (it fired inside Popen and lost the child).
            start_child(children, command, stdout=logs[-1], stderr=subprocess.STDOUT, env=env, process_group=0)
        codes = [child.wait() for child in children]
    except BaseException:  # a signal to the sweep (raised by its handler), or anything else: no probe left running
        stop_children(children, STOP_WAIT_S)  # SIGTERM: a fit stops its reward workers
        raise
    finally:
        for log in logs:
            log.close()
    seconds = []
    for run_out, code in zip(outs, codes):
        if code != 0:
            tail = (run_out / "probe.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise UserError(
                f"sweep --parallel auto: the probe of {point.label} failed (exit {code}: {' '.join(tail)}); "
                "give --parallel P --threads T"
            )
        runs = RunDir.below(run_out)
        steps = read_scalars(runs[0].path).get(names.STEP_SECONDS) if runs else None
        if steps is None or len(steps.values) < 2:
            raise UserError(f"sweep --parallel auto: the probe of {point.label} logged no step times")
        seconds.extend(float(v) for v in steps.values[1:])
    return sum(seconds) / len(seconds)


__all__ = ["CHOICE_FILE", "ParallelChoice", "choose_parallel", "decide"]
