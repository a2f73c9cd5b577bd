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
