"""The lower CPU dispatch level that CI re-runs the numerics-sensitive tests under really is in force
in a child process, and it really rounds differently (else that second run would prove nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from helpers.dispatch import AVX2, SCALAR, lower_dispatch_env
from helpers.update_steps import UNIT_ROUNDOFF, assert_close_to_scale

# The same fixed computations in a child process: the capability in force and the results' bits.
CHILD = """
import json, torch
torch.manual_seed(0)
a, b, x = torch.randn(64, 300), torch.randn(300, 77), torch.randn(4096)
out = {"mm": a @ b, "log_softmax": torch.log_softmax(x, 0), "exp": x.exp(), "sum": x.sum()}
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  **{k: v.flatten().tolist() for k, v in out.items()}}))
"""


def _child(env: dict[str, str]) -> dict:
    keep = {k: v for k, v in os.environ.items() if k not in AVX2}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env={**keep, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_lower_level_is_the_other_cpu_kind():
    assert lower_dispatch_env("AVX512") == AVX2
    assert lower_dispatch_env("AVX512_BF16") == AVX2
    assert lower_dispatch_env("AVX2") == SCALAR


def test_the_lower_level_is_in_force_and_moves_the_rounding():
    native = _child({})  # the machine's own level (a level forced on this process is not passed on)
    lower = _child(lower_dispatch_env(native["capability"]))
    expected = "AVX2" if native["capability"].startswith("AVX512") else "DEFAULT"
    assert lower["capability"] == expected
    differ = []
    for op in ("mm", "log_softmax", "exp", "sum"):
        # Both are the same function to rounding: a sum of up to 300 (mm) or 4096 (sum, log_softmax)
        # terms errs by at most n * u of the sum of |terms|, here bounded by n x the largest |entry|.
        terms = 4096 if op in ("sum", "log_softmax") else 300
        assert_close_to_scale(torch.tensor(lower[op]), torch.tensor(native[op]), terms * UNIT_ROUNDOFF, msg=op)
        differ.append(lower[op] != native[op])
    # Another vector width sums in another order: the bits move, so a test that passes at both
    # levels does not depend on one machine's rounding.
    assert any(differ), "the lower dispatch level computed the same bits: it would test nothing"
