"""lite_ppo.cli.allocator: freed memory is reused without page faults once lite-ppo starts.

Each case runs in a fresh interpreter (the setting is process-wide and cannot be undone) and repeats
a "step" that allocates and fills tensors of 64, 8, 100, 3 and 16 MiB and frees them, counting the
minor page faults of each step. Without the setting glibc unmaps (or trims) the freed blocks and
every step faults most of their 48,896 pages in again; with it the heap keeps them, and after a few
steps (while the free blocks settle into sizes the next allocations fit) no step faults at all.
A training run computes the same bits either way (reused memory is not zeroed as fresh pages are, so
code that read ``torch.empty`` as zeros would show up there).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from helpers.fits import read_scalars, tiny_fit_args
from lite_ppo.cli.allocator import DISABLE_ENV, retain_freed_memory, retention_enabled
from lite_ppo.models import resolve_model

SIZES_MIB = (64, 8, 100, 3, 16)
PAGES = sum(SIZES_MIB) * 2**20 // 4096  # pages one step writes
STEPS, SETTLED = 12, 4  # the last SETTLED steps are counted

SCRIPT = """
import contextlib, io, json, resource, sys
import torch
applied = None
if sys.argv[1] == "direct":
    from lite_ppo.cli.allocator import retain_freed_memory
    applied = retain_freed_memory()
elif sys.argv[1] == "cli":
    from lite_ppo.cli.commands import main
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["data", "--help"])
        except SystemExit:
            pass
faults = []
for _ in range(int(sys.argv[2])):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(mib * 2**18) for mib in json.loads(sys.argv[3])]  # float32, every page written
    del blocks
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the setting is glibc malloc's"
)


def _huge_pages_always() -> bool:
    try:
        return "[always]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return False


# With transparent huge pages on for every mapping, a fresh block faults once per 2 MiB, not per page.
counts_4k_faults = pytest.mark.skipif(_huge_pages_always(), reason="transparent huge pages: 2 MiB faults")


def _reallocation_faults(mode: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in (DISABLE_ENV, "LD_PRELOAD")}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(STEPS), json.dumps(SIZES_MIB)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["settled"] = result["faults"][-SETTLED:]
    return result


@glibc_only
@counts_4k_faults
def test_freed_blocks_are_reused_without_page_faults():
    plain = _reallocation_faults("none")
    kept = _reallocation_faults("direct")
    assert kept["applied"] is True
    # Default glibc: every step faults most of its pages in again.
    assert min(plain["settled"]) >= PAGES * 0.5, plain
    # Kept: the first step faults its pages in once; settled steps reuse them.
    assert kept["faults"][0] >= PAGES * 0.9, kept
    assert max(kept["settled"]) <= PAGES * 0.02, kept


@glibc_only
@counts_4k_faults
def test_lite_ppo_applies_it_at_start_unless_turned_off():
    assert max(_reallocation_faults("cli")["settled"]) <= PAGES * 0.02
    assert min(_reallocation_faults("cli", **{DISABLE_ENV: "0"})["settled"]) >= PAGES * 0.5


@pytest.mark.parametrize(
    "environ",
    [{DISABLE_ENV: "0"}, {DISABLE_ENV: "off"}, {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"}],
)
def test_turned_off_or_left_to_a_preloaded_allocator(environ):
    # Returns before touching the allocator, so this process is left as it was.
    assert retention_enabled(environ) is False
    assert retain_freed_memory(environ) is False


@glibc_only
@pytest.mark.parametrize("setting", ["", "1", "yes", " On "])
def test_enabled_by_default_on_glibc(setting):
    assert retention_enabled({DISABLE_ENV: setting}) is True


def test_a_misspelt_setting_is_refused_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "lite_ppo.cli", "data", "--help"],
        env={**os.environ, DISABLE_ENV: "nope"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"lite-ppo data: error: {DISABLE_ENV}='nope': expected 0/false/no/off or 1/true/yes/on"
    )


FIT = """
import json, sys
from lite_ppo.cli.commands import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit as done:
    if done.code:
        raise
"""

# Scalars that depend only on the computation (not on timing or memory).
COMPUTED = ["loss/policy", "update/grad_norm", "policy/entropy", "policy/approx_kl", "clip/fraction", "reward/mean"]


@glibc_only
@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.numerics
def test_training_computes_the_same_bits_with_and_without(tmp_path):
    model = resolve_model("builtin:tiny-arith")  # the smoke model: it earns rewards, so gradients are not 0

    environ = {k: v for k, v in os.environ.items() if k not in (DISABLE_ENV, "LD_PRELOAD")}
    runs = {}
    for name, env in (("kept", {}), ("glibc", {DISABLE_ENV: "0"})):
        args = tiny_fit_args(tmp_path / name, "--model.model_path", model)
        subprocess.run(
            [sys.executable, "-c", FIT, json.dumps(args)],
            env={**environ, **env},
            check=True,
            timeout=600,
            capture_output=True,
        )
        runs[name] = read_scalars(tmp_path / name / "tb")
    for tag in COMPUTED:
        assert runs["kept"][tag] == runs["glibc"][tag], tag
    # Not vacuous: some step had a gradient. Which steps do depends on the sampled groups (a step whose
    # groups are all right or all wrong has zero advantages), and so on the CPU's rounding.
    grad_norms = [v for _, v in runs["kept"]["update/grad_norm"]]
    assert len(grad_norms) == 3 and max(grad_norms) > 0, grad_norms
