"""The tree stays as ruff (configured in pyproject.toml) wants it: lint rules and formatting."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO


def _ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")  # the dev extra installs it into the venv
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean(args):
    proc = subprocess.run([_ruff(), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
