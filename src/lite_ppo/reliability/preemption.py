"""Preemption: a signal ends the run at the next step boundary with a resumable checkpoint and a
non-zero exit status, so schedulers requeue it and no finished step is lost.

Built on Lightning's own signal handling (``trainer/connectors/signal_connector.py``): Lightning
already turns SIGTERM into ``trainer.received_sigterm``, lets the running training step finish and
raises ``SIGTERMException`` at the end of it; but that exception is a ``SystemExit`` with status 0
and nothing is saved, and SIGUSR1 / Ctrl-C are not handled that way. :class:`Preemption`

- routes each configured signal (default SIGTERM, SIGUSR1, SIGINT) into that same mechanism (through
  Lightning's notifier, which also forwards the signal to DDP workers started by Lightning), so the
  current step always finishes: no half-applied optimizer steps in a checkpoint;
- on ``SIGTERMException`` saves ``last.ckpt`` through the first ``ModelCheckpoint`` (exactly the
  file a ``save_last`` checkpoint would be; resuming from it reproduces the uninterrupted run), unless
  that callback already saved this step, and prints one line with the path;
- sets the exit status to 128 + signal number (143 SIGTERM, 138 SIGUSR1, 130 Ctrl-C);
- on SLURM with Lightning's auto-requeue (``SLURMEnvironment(auto_requeue=True)``, the default in a
  SLURM job) the requeue signal also goes through the step boundary: Lightning's own SLURM handler
  then writes ``hpc_ckpt_<n>.ckpt`` (which a requeued job resumes from automatically) and runs
  ``scontrol requeue``, instead of saving from inside the signal handler in the middle of a step.

A second Ctrl-C stops at once, without a checkpoint (Lightning's KeyboardInterrupt path, status 1).

Before the first training step there is nothing to finish or save, and the start-up can take minutes (a
large model loading, an inference engine starting, an evaluation before training), during which Lightning's
handler only notes a SIGTERM until the end of the first step. :class:`StartupSignals` (installed by
``lite-ppo fit`` before anything loads) makes SIGTERM stop the start-up at once instead: exit status 143,
one line, the run folder of the run that never started removed (``lite_ppo.cli.lightning_cli``). From the
first training step on it only passes the signal to the handlers above.

Example::

    preemption:
      signals: [SIGTERM, SIGUSR1, SIGINT]
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lite_ppo.errors import UserError


class Preemption(Callback):
    """Stop at the next step boundary on a signal, save a resumable checkpoint, exit 128 + signum.

    Args:
        signals: signal names that stop the run this way. SIGTERM is what SLURM and Kubernetes send
            before a kill; SIGUSR1 is the usual ``#SBATCH --signal=SIGUSR1@90`` warning; SIGINT is Ctrl-C.
        save_checkpoint: write ``last.ckpt`` when stopping (off: only the exit status changes).
    """

    def __init__(self, signals: list[str] | None = None, save_checkpoint: bool = True) -> None:
        names = ["SIGTERM", "SIGUSR1", "SIGINT"] if signals is None else list(signals)
        unknown = [n for n in names if not isinstance(getattr(signal, str(n), None), signal.Signals)]
        if unknown:
            raise UserError(
                f"preemption.signals: unknown signal name(s) {unknown}; "
                "use names like SIGTERM, SIGUSR1, SIGUSR2, SIGINT"
            )
        self.signals = [getattr(signal, n) for n in names]
        self.save_checkpoint = save_checkpoint
        self.received: signal.Signals | None = None
        self.checkpoint_path: str | None = None
        self._trainer = None

    # -- signals -------------------------------------------------------------------------------------
    @override
    def on_train_start(self, trainer, pl_module) -> None:
        # Lightning registers its handlers right before the fit loop runs and restores the previous
        # ones at teardown; ours go on top (and are undone with them).
        self._trainer = trainer
        self.received = None
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.signals:
            previous = signal.getsignal(signum)
            signal.signal(signum, self._handler(signum, previous))

    def _handler(self, signum: signal.Signals, previous):
        connector = self._trainer._signal_connector

        def handle(received, frame) -> None:
            first = self.received is None
            self.received = self.received or signal.Signals(received)
            if signum == signal.SIGINT:
                if not first:  # second Ctrl-C: stop now (Lightning's KeyboardInterrupt path), no checkpoint
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    raise KeyboardInterrupt
                if self._trainer.is_global_zero:
                    print(
                        "lite-ppo: Ctrl-C: finishing the current step, then saving "
                        "a checkpoint (Ctrl-C again stops at once without saving)",
                        file=sys.stderr,
                        flush=True,
                    )
            if signum == signal.SIGTERM and callable(previous):
                previous(received, frame)  # Lightning's SIGTERM handler (and whatever it chained)
            else:
                # Other signals: Lightning's SIGTERM notifier (sets received_sigterm, forwards the
                # signal to workers it launched). Lightning's SLURM SIGUSR1 handler is not called
                # here: it would save in the middle of a step; on_exception calls it at the boundary.
                connector._sigterm_notifier_fn(received, frame)

        return handle

    def _slurm_requeue_signal(self):
        environment = self._trainer._accelerator_connector.cluster_environment
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            return environment.requeue_signal
        return None

    # -- the stop ------------------------------------------------------------------------------------
    @override
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        signum = self.received or signal.SIGTERM
        exception.code = 128 + int(signum)  # SIGTERMException is a SystemExit: this is the exit status
        requeue = signum == self._slurm_requeue_signal()
        if requeue:
            # Lightning's SLURM handler, now at a step boundary: writes hpc_ckpt_<n>.ckpt, requeues.
            trainer._signal_connector._slurm_sigusr_handler_fn(signum, None)
            self.checkpoint_path = trainer._checkpoint_connector._hpc_resume_path
        elif self.save_checkpoint:
            self.checkpoint_path = save_last_checkpoint(trainer)
        if trainer.is_global_zero:
            if requeue:
                where = f"checkpoint {self.checkpoint_path}; SLURM requeue requested (the requeued job resumes from it)"
            elif self.checkpoint_path:
                where = f"checkpoint {self.checkpoint_path}; resume with --ckpt_path {self.checkpoint_path}"
            else:
                where = "no checkpoint saved"
            print(
                f"lite-ppo: stopped by {signum.name} after training step "
                f"{trainer.fit_loop.epoch_loop.batch_progress.total.completed} "
                f"(optimizer step {trainer.global_step}); {where}",
                file=sys.stderr,
                flush=True,
            )


def save_last_checkpoint(trainer) -> str:
    """Save ``last.ckpt`` the way the first ``ModelCheckpoint`` would (its folder, its bookkeeping),
    or reuse the one it saved at this very step; without a ``ModelCheckpoint``,
    ``<default_root_dir>/checkpoints/last.ckpt``."""
    callback = next((c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)), None)
    if callback is not None and callback.dirpath is not None:
        if (
            callback.save_last
            and callback.last_model_path
            and callback._last_global_step_saved == trainer.global_step
            and Path(callback.last_model_path).exists()
        ):
            return callback.last_model_path
        if callback.save_last:
            callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))
            return callback.last_model_path
        path = os.path.join(callback.dirpath, ModelCheckpoint.CHECKPOINT_NAME_LAST + ModelCheckpoint.FILE_EXTENSION)
    else:
        path = os.path.join(trainer.default_root_dir, "checkpoints", "last.ckpt")
    trainer.save_checkpoint(path)
    return path


class StoppedBySignal(SystemExit):
    """A stop signal outside the training steps ended the run at once: a ``SystemExit`` with status
    128 + signal number (nothing catches it as an error on the way out)."""

    def __init__(self, signum: int, when: str) -> None:
        super().__init__(128 + int(signum))
        self.signum = signal.Signals(signum)
        self.when = when


_LIGHTNING_SIGNAL_LOGGER = "lightning.pytorch.trainer.connectors.signal_connector"


class StartupSignals:
    """SIGTERM stops ``fit`` at once while it starts up (:class:`StoppedBySignal`, status 143), until
    :meth:`training_started` (the first training step begins); from then on the signal belongs to
    Lightning and :class:`Preemption` (the step finishes, a checkpoint is saved).

    Installed before the model loads, its handler is the one in place when Lightning registers its own,
    which calls it after noting the signal (Lightning chains the handler it finds): so the start-up
    stops promptly both before and after Lightning's registration. After training, once Lightning has put
    it back, it stops at once again (there is no step left to finish).

    Example::

        startup = StartupSignals().install()
        try:
            ...  # build the trainer, fit; a training-step callback calls startup.training_started()
        finally:
            startup.uninstall()
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)) -> None:
        self.signals = signals
        self.training = False
        self._previous: dict[signal.Signals, object] = {}

    def install(self) -> StartupSignals:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            for signum in self.signals:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)
            # Lightning's handler logs "Received SIGTERM" before it calls this one: the stop's own line says it.
            logging.getLogger(_LIGHTNING_SIGNAL_LOGGER).addFilter(self._quiet_before_training)
        return self

    def _quiet_before_training(self, record: logging.LogRecord) -> bool:
        return self.training or "Received SIGTERM" not in record.getMessage()

    def training_started(self) -> None:
        self.training = True

    def uninstall(self) -> None:
        """Put back the handlers found at :meth:`install` (where this one is still in place)."""
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) in (self._handle, signal.SIG_IGN):  # SIG_IGN: set when it stopped
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
        logging.getLogger(_LIGHTNING_SIGNAL_LOGGER).removeFilter(self._quiet_before_training)

    def _handle(self, signum: int, frame) -> None:
        if self.training and signal.getsignal(signum) != self._handle:
            return  # called by Lightning's handler during training: the step finishes (Preemption)
        when = "after training" if self.training else "during start-up, before the first training step"
        # Once: a second SIGTERM would raise again inside the clean-up (a half-removed run folder).
        signal.signal(signum, signal.SIG_IGN)
        raise StoppedBySignal(signum, when)
