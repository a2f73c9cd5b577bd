"""The lower CPU dispatch levels that CI re-runs the numerics-sensitive tests under really are in force
in a child process, agree to rounding, and the lowest really rounds differently (else those runs would
prove nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from helpers.dispatch import AVX2, SCALAR, lower_dispatch_levels
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


def test_lower_levels_are_the_other_cpu_kind_then_scalar():
    assert lower_dispatch_levels("AVX512") == [AVX2, SCALAR]
    assert lower_dispatch_levels("AVX512_BF16") == [AVX2, SCALAR]
    assert lower_dispatch_levels("AVX2") == [SCALAR]


def test_the_lower_levels_are_in_force_and_the_lowest_moves_the_rounding():
    native = _child({})  # the machine's own level (a level forced on this process is not passed on)
    levels = lower_dispatch_levels(native["capability"])
    for env in levels:
        lower = _child(env)
        assert lower["capability"] == env["ATEN_CPU_CAPABILITY"].upper()
        differ = []
        for op in ("mm", "log_softmax", "exp", "sum"):
            # Both are the same function to rounding: a sum of up to 300 (mm) or 4096 (sum, log_softmax)
            # terms errs by at most n * u of the sum of |terms|, here bounded by n x the largest |entry|.
            terms = 4096 if op in ("sum", "log_softmax") else 300
            assert_close_to_scale(torch.tensor(lower[op]), torch.tensor(native[op]), terms * UNIT_ROUNDOFF, msg=op)
            differ.append(lower[op] != native[op])
        # The scalar kernels sum in another order than any vector width: the bits move, so a test that
        # passes there too does not depend on this machine's rounding. (AVX2 under AVX-512 need not:
        # on an AMD EPYC with AVX-512 it computed these four bit for bit.)
        if env is SCALAR:
            assert any(differ), "the scalar dispatch level computed the same bits: it would test nothing"
    assert levels[-1] is SCALAR
