"""benchmarks/gpu_check.py, the GPU acceptance check, on this CPU: its dry run goes through the whole
sequence (so the script never rots between GPU machines), and a missing optional package is a
"not installed" line and skipped checks, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"

# The table's rows, by what they need (the list of checks).
CPU_CHECKS = [
    "environment",
    "update fp32 (32-true)",
    "update bf16-mixed",
    "update packing on = off",
    "zero3: step = plain step",
    "zero3: checkpoint save + resume",
]
VLLM_CHECKS = [
    f"vllm {dtype}: {part}"
    for dtype in ("fp32", "bf16")
    for part in ("generation", "log-prob drift", "weight sync", "sleep/wake")
]

# sitecustomize for a child interpreter: these modules behave as if not installed (sys.modules[name] =
# None: `import name` and `import name.sub` raise ModuleNotFoundError, importlib.util.find_spec gives None),
# in that process and in every Python process it starts (PYTHONPATH is inherited).
BLOCKER = """import sys
for name in ("vllm", "deepspeed", "flash_attn"):
    sys.modules[name] = None
"""


def run_check(
    out: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, dict, str]:
    """Run the script on the CPU (``--quick``); (the process, results.json's rows by check, what to show on failure)."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=REPO,
    )
    log = out / "gpu_check.log"
    context = f"stdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-3000:]}\n"
    if log.exists():
        context += f"log (end):\n{log.read_text()[-6000:]}"
    assert (out / "results.json").exists(), context
    rows = {row["check"]: row for row in json.loads((out / "results.json").read_text())}
    return proc, rows, context


@pytest.mark.slow
@pytest.mark.extended
def test_cpu_dry_run_passes_and_skips_the_cuda_only_checks(tmp_path):
    """``gpu_check.py --device cpu --quick``: exit 0, every CPU check passing, every vLLM check skipped
    as CUDA only, and the terminal shows the report (the final table), not the libraries' output.

    Not marked ``numerics``: its equivalence checks are those of tests/test_update_layout.py and the
    ZeRO-3 tests, on the same batch with the same tolerances, which ``make test-numerics`` repeats."""
    proc, rows, context = run_check(tmp_path)
    assert proc.returncode == 0, context
    assert list(rows) == CPU_CHECKS[:4] + VLLM_CHECKS + CPU_CHECKS[4:], context
    for name in CPU_CHECKS:
        assert rows[name]["result"] == "pass", (name, rows[name], context)
        assert rows[name]["detail"], name  # a figure
    vllm_importable = importlib.util.find_spec("vllm") is not None
    for name in VLLM_CHECKS:
        assert rows[name]["result"] == "skipped", (name, rows[name])
        assert rows[name]["detail"] == ("CUDA only" if vllm_importable else "vllm not installed"), rows[name]
    summary = proc.stdout.split("== summary", 1)[1]
    for name, row in rows.items():
        assert f"{name} " in summary and row["result"] in summary
    assert "6 passed, 0 failed, 8 skipped" in summary
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "Trainer.fit" not in proc.stdout  # Lightning's own lines went to the log
    assert "Trainer.fit" in (tmp_path / "gpu_check.log").read_text()


def test_missing_optional_packages_are_skipped_not_crashed(tmp_path):
    """vllm, deepspeed and flash_attn made unimportable: each is reported "not installed", their checks
    are skipped with that reason, and the run exits 0 without a traceback."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    out = tmp_path / "out"
    proc, rows, context = run_check(out, "--checks", "vllm,zero3", env=env)
    assert proc.returncode == 0, context
    assert rows["environment"]["result"] == "pass", context
    for name in ("vllm", "deepspeed", "flash_attn"):
        assert f"\n{name}: not installed\n" in proc.stdout, (name, context)
    for name in VLLM_CHECKS:
        assert (rows[name]["result"], rows[name]["detail"]) == ("skipped", "vllm not installed"), rows[name]
    for name in CPU_CHECKS[4:]:
        assert (rows[name]["result"], rows[name]["detail"]) == ("skipped", "deepspeed not installed"), rows[name]
    assert "Traceback" not in proc.stdout + proc.stderr + (out / "gpu_check.log").read_text()
