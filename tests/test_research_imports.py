"""``lite-ppo compare|plan|sweep --help`` build their parsers without importing the
plotting, statistics or training stacks (docs/usage.md: a project command's help answers well under a
second). Checked on the modules a fresh interpreter has loaded, not on a timing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "scipy", "statsmodels", "torch", "lightning", "tensorboard", "transformers")
PROBE = """
import json, sys
from lite_ppo.cli.commands import main
try:
    main([{command!r}, "--help"])
except SystemExit as done:
    assert done.code == 0, done.code
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


@pytest.mark.parametrize("command", ["compare", "plan", "sweep"])
def test_help_imports_no_heavy_module(command):
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(command=command)], capture_output=True, text=True, check=True, timeout=120
    )
    printed, loaded = done.stdout.rsplit("\n", 2)[0], json.loads(done.stdout.strip().splitlines()[-1])
    assert f"usage: lite-ppo {command}" in printed
    assert not set(HEAVY) & set(loaded), sorted(set(HEAVY) & set(loaded))
