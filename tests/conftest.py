"""Shared fixtures only: a per-session model cache, the tiny model, the shared data folder and the
1-process reference run (builders and helpers live in tests/helpers/, imported as ``helpers.<module>``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.paths import shared_data_dir


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


@pytest.fixture(scope="session")
def single_results(tmp_path_factory, tiny_model_path) -> Path:
    """The 1-process reference run of tests/helpers/distributed.py on the global batch, for every
    aggregation mode; computed once per session and compared with by the DDP and ZeRO-3 runs."""
    from helpers.distributed import launch

    out = tmp_path_factory.getbasetemp() / "single_reference"
    if not (out / "done").exists():
        launch("single", out, tiny_model_path)
        (out / "done").write_text("ok")
    return out


@pytest.fixture(autouse=True)
def _lightning_logs_to_a_live_stream():
    """Lightning binds its log handler to the ``sys.stderr`` of the moment it is imported; under pytest
    that may be a test's capture stream, closed when that test ends, and every later Lightning log line
    then prints "--- Logging error ---" with a traceback into the next test's output. Point the handler
    at the stream of the test that runs."""
    import logging
    import sys

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler:
                handler.stream = sys.stderr  # not setStream: it flushes the old stream, maybe closed
    yield
