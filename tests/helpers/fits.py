"""Fits for tests: the argv of a quick ``lite-ppo fit`` on the tiny model, one training step on a given
batch, and the scalars a fit wrote to TensorBoard."""

from __future__ import annotations

from pathlib import Path

from helpers.paths import REPO


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of every TensorBoard event file under ``log_dir``: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(log_dir.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def tiny_fit_args(tmp: Path, *extra: str, recipe: str = "lite_ppo") -> list[str]:
    """argv of a quick ``lite-ppo fit``: ``configs/recipes/<recipe>.yaml`` on the tiny model
    (``configs/models/tiny.yaml``), checkpoints under ``tmp`` and TensorBoard under ``tmp/tb/run``."""
    return [
        "fit",
        "--config", str(REPO / "configs" / "recipes" / f"{recipe}.yaml"),
        "--config", str(REPO / "configs" / "models" / "tiny.yaml"),
        "--trainer.default_root_dir", str(tmp),
        "--trainer.logger.init_args.save_dir", str(tmp / "tb"),
        "--trainer.logger.init_args.version", "run",
        *extra,
    ]  # fmt: skip


def fit_one_batch(module, rollout, callbacks: list, logger=False, accelerator: str = "cpu") -> None:
    """``Trainer.fit`` of ``module`` on one rollout batch (one training step), one process, nothing
    else (no checkpoints, progress bar, summary or sanity check). ``accelerator``: ``"cpu"`` (the
    tests) or ``"gpu"`` (``benchmarks/gpu_check.py`` re-asserts the tests' invariants on a GPU)."""
    from lightning.pytorch import Trainer
    from torch.utils.data import DataLoader

    from helpers.given_rollouts import GivenRollouts

    trainer = Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=1,
        limit_train_batches=1,
        logger=logger,
        callbacks=[GivenRollouts(), *callbacks],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=DataLoader([{"rollout": rollout}], batch_size=None))
