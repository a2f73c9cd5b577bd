"""Shared fixtures: a per-session model cache, the tiny model, and the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """../shared/data beside the checkout (or $LITE_PPO_SHARED_DATA), None when absent."""
    env = os.environ.get("LITE_PPO_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
    return next((c for c in candidates if (c / "eval").is_dir()), None)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("../shared/data is not present")
    return path


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory) -> Path:
    """Builtin models build into one cache per test session unless LITE_PPO_CACHE is set."""
    if "LITE_PPO_CACHE" not in os.environ:
        os.environ["LITE_PPO_CACHE"] = str(tmp_path_factory.mktemp("lite_ppo_cache"))
    return Path(os.environ["LITE_PPO_CACHE"])


@pytest.fixture(scope="session")
def tiny_model_path(_model_cache) -> str:
    from lite_ppo.models import resolve_model

    return resolve_model("builtin:tiny")


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


@pytest.fixture(scope="session")
def single_results(tmp_path_factory, tiny_model_path) -> Path:
    """The 1-process reference run of tests/test_distributed.py on the global batch, for every
    aggregation mode; computed once per session and compared with by the DDP and ZeRO-3 runs."""
    from test_distributed import launch

    out = tmp_path_factory.getbasetemp() / "single_reference"
    if not (out / "done").exists():
        launch("single", out, tiny_model_path)
        (out / "done").write_text("ok")
    return out


def fit_one_batch(module, rollout, callbacks: list, logger=False, accelerator: str = "cpu") -> None:
    """``Trainer.fit`` of ``module`` on one rollout batch (one training step), one process, nothing
    else (no checkpoints, progress bar, summary or sanity check). ``accelerator``: ``"cpu"`` (the
    tests) or ``"gpu"`` (``benchmarks/gpu_check.py`` re-asserts the tests' invariants on a GPU)."""
    from lightning.pytorch import Trainer
    from torch.utils.data import DataLoader

    trainer = Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=1,
        limit_train_batches=1,
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=DataLoader([{"rollout": rollout}], batch_size=None))
