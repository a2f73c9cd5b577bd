"""Test-only techniques and callbacks for the fault-injection tests (tests/test_reliability_*.py).

Importable by class_path when ``tests/`` is on PYTHONPATH (the subprocess fits set it).
"""

from __future__ import annotations

import io
from pathlib import Path

import torch
from lightning.pytorch import Callback

from lite_ppo.technique import Technique


class SignedAdvantages(Technique):
    """The advantage estimator: +1 for responses whose first token id is even, -1 otherwise.

    A deterministic learning signal that moves the random tiny model's weights every step (the
    verifier's rewards are all 0 for it, so the real estimators would give zero advantages)."""

    def compute_advantages(self, ctx, batch):
        return torch.where(batch.response_ids[:, 0] % 2 == 0, 1.0, -1.0)


class NaNLoss(Technique):
    """A loss term that is NaN (with a NaN gradient) on the listed training steps (0-based rollout batches)."""

    def __init__(self, steps: list[int] | None = None) -> None:
        self.steps = set(steps or [])
        self._step = -1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._step = trainer.fit_loop.epoch_loop.total_batch_idx

    def extra_loss_terms(self, ctx, minibatch):
        if self._step not in self.steps:
            return {}
        return {"injected_nan": minibatch.logprobs * float("nan")}


class StepMarker(Callback):
    """Writes the number of finished training steps into ``path`` after each one (atomically), so
    a test process knows when to send a signal."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(trainer.fit_loop.epoch_loop.batch_progress.total.processed))
        tmp.replace(self.path)


class DenyWritesAfter(Callback):
    """From the end of training step ``step`` (0-based) on, opening a file for writing under
    ``folder`` fails with ``PermissionError``: the folder "turned read-only" mid-run (works as root,
    where ``chmod`` does not stop writes). Undone at teardown."""

    def __init__(self, folder: str, step: int = 0) -> None:
        self.folder = str(Path(folder).resolve())
        self.step = step
        self._original = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        import builtins

        if self._original is not None or trainer.fit_loop.epoch_loop.total_batch_idx < self.step:
            return
        self._original = original = builtins.open
        folder = self.folder

        def guarded_open(file, mode="r", *args, **kwargs):
            if any(m in mode for m in "wax+") and str(Path(str(file)).resolve()).startswith(folder):
                raise PermissionError(13, "Permission denied", str(file))
            return original(file, mode, *args, **kwargs)

        builtins.open = io.open = guarded_open  # io.open: pathlib and TensorBoard's writer open through it

    def teardown(self, trainer, pl_module, stage: str) -> None:
        import builtins

        if self._original is not None:
            builtins.open = io.open = self._original
            self._original = None

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "fit")


def fit_with_faults(tmp: Path, ckpt_dir: Path, callbacks: list[dict], *extra: str) -> None:
    """``lite-ppo fit`` of the Lite PPO recipe on the tiny model with :class:`SignedAdvantages` (the
    weights move every step), a checkpoint every 2 optimizer steps into ``ckpt_dir`` and the given
    fault callbacks, through the real dispatcher (one-line errors, exit codes)."""
    import yaml

    from helpers.paths import REPO
    from lite_ppo.cli.commands import main

    listed = [
        {"remove": "lite_ppo.callbacks.AdvantageNormalization"},  # the recipe's estimator, replaced by:
        {"class_path": "helpers.reliability_faults.SignedAdvantages"},
        {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}},
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(ckpt_dir), "save_last": True, "every_n_train_steps": 2, "save_top_k": -1},
        },
        *callbacks,
    ]
    config = tmp / "faults.yaml"
    config.write_text(
        yaml.safe_dump({"trainer": {"callbacks": listed, "enable_progress_bar": False, "enable_model_summary": False}})
    )
    main(
        [
            "fit",
            "--config", str(REPO / "configs/recipes/lite_ppo.yaml"),
            "--config", str(REPO / "configs/models/tiny.yaml"),
            "--config", str(config),
            "--trainer.default_root_dir", str(tmp),
            "--trainer.logger.init_args.save_dir", str(tmp / "tb"),
            *extra,
        ]
    )  # fmt: skip


class LearningRateAt(Callback):
    """Sets the optimizer's learning rate to ``lr`` for the first optimizer step of training step
    ``step`` (0-based rollout batch; the LR schedule sets it back after that step): a finite but
    exploding update."""

    def __init__(self, step: int, lr: float) -> None:
        self.step = step
        self.lr = lr

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if trainer.fit_loop.epoch_loop.total_batch_idx == self.step:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] = self.lr


class HoldAfterStep(Callback):
    """After training step ``step`` (0-based) writes ``marker`` and waits until ``release`` exists (at most
    ``timeout`` seconds): a test can act while this run is inside its run folder, mid-training."""

    def __init__(self, marker: str, release: str, step: int = 0, timeout: float = 300.0) -> None:
        self.marker, self.release = Path(marker), Path(release)
        self.step, self.timeout = step, timeout

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        import time

        if trainer.fit_loop.epoch_loop.total_batch_idx != self.step:
            return
        self.marker.write_text("held")
        deadline = time.monotonic() + self.timeout
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
