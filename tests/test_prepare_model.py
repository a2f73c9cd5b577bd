"""``lite-ppo prepare-model``: stdout is the model folder and nothing else (``$(lite-ppo prepare-model ...)``
gives a path, on the first call too), and stderr says what was checked or repaired."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BUILD_RECORD = "lite_ppo_build.json"  # the registry's record of a build (not one of the model's files)


def _prepare(cache: Path, *argv: str) -> subprocess.CompletedProcess:
    """``lite-ppo prepare-model ARGV`` in a fresh interpreter (nothing imported before: the first call's
    imports, DeepSpeed's accelerator line among them, happen in it), with its own model cache."""
    return subprocess.run(
        [sys.executable, "-m", "lite_ppo.cli", "prepare-model", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "LITE_PPO_CACHE": str(cache)},
        timeout=600,
    )


def _model_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != BUILD_RECORD)


def test_stdout_is_the_folder_alone_and_stderr_says_what_was_checked_or_repaired(tmp_path):
    folder = tmp_path / "models" / "tiny"

    first = _prepare(tmp_path, "builtin:tiny")  # builds it: transformers, DeepSpeed's import-time log line
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{folder}\n"
    files = _model_files(folder)
    assert len(files) >= 3  # config, weights, tokenizer at least

    again = _prepare(tmp_path, "builtin:tiny")
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{folder}\n"
    assert f"{len(files)} files match their recorded SHA-256" in again.stderr
    assert "again" not in again.stderr

    damaged = folder / "config.json"
    original = damaged.read_bytes()
    damaged.write_bytes(original.replace(b"{", b"{ ", 1))  # one byte more: a changed file
    repaired = _prepare(tmp_path, "builtin:tiny")
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout == f"{folder}\n"
    assert "config.json changed since it was built" in repaired.stderr
    assert f"{len(files)} files" in repaired.stderr.strip().splitlines()[-1]
    assert damaged.read_bytes() == original  # rebuilt: the same deterministic build
