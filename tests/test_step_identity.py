"""Every shipped recipe's first three steps, against values recorded before a refactor.

A change that is meant to leave the RL step as it was (moving code between files, new types for the
same values) must give the same scalars and weights. Each recipe runs 3 steps of the tiny model
through the CLI (the coin-flip reward of ``test_recipes``, so groups mix outcomes) and is compared
with ``tests/data/step_fingerprints.json``: every logged scalar of every step except wall times and
memory, and the final weights' sum and sum of squares, to a relative 1e-4 (float rounding differs
between CPU kinds, an actual change of the step does not stay that small); on the machine that
recorded them (same CPU model, dispatch level, threads and torch), the weights' SHA-256 must match exactly.

Record again only when a change is meant to change the step: ``python tests/test_step_identity.py``.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback

sys.path.insert(0, str(Path(__file__).parent))
from helpers.fits import read_scalars, tiny_fit_args  # noqa: E402
from helpers.paths import REPO  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.extended]

FINGERPRINTS = Path(__file__).parent / "data" / "step_fingerprints.json"
RECIPES = sorted(p.stem for p in (REPO / "configs" / "recipes").glob("*.yaml"))
STEPS = 3
# Wall times, throughputs and memory differ from run to run; everything else is computed.
_UNTIMED = ("time/", "memory/")


def _computed(tag: str) -> bool:
    return not tag.startswith(_UNTIMED) and "per_s" not in tag and not tag.endswith("_s")


class WeightPrint(Callback):
    """The policy's weights at the end of the fit: exact SHA-256 and float64 sum / sum of squares."""

    last: dict = {}

    def on_train_end(self, trainer, pl_module) -> None:
        digest = hashlib.sha256()
        total = squares = 0.0
        for name, param in sorted(pl_module.policy.named_parameters()):
            data = param.detach().float().contiguous().cpu()
            digest.update(name.encode())
            digest.update(data.numpy().tobytes())
            total += float(data.double().sum())
            squares += float(data.double().square().sum())
        WeightPrint.last = {"sha256": digest.hexdigest(), "sum": total, "sum_squares": squares}


def machine() -> dict:
    """What decides bit-level results: the CPU, the dispatch level and threads torch runs with, torch itself."""
    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "")
    return {"cpu": cpu or platform.processor(), "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "torch": torch.__version__}  # fmt: skip


def _cpuinfo() -> list[str]:
    path = Path("/proc/cpuinfo")
    return path.read_text().splitlines() if path.exists() else []


def fingerprint(recipe: str, tmp: Path) -> dict:
    """Scalars per step and final weights of a 3-step tiny run of ``recipe``."""
    from lite_ppo.cli import main

    main(
        tiny_fit_args(
            tmp,
            "--data.steps_per_epoch", str(STEPS),
            "--rollout.reward", "test_recipes.CoinFlipReward",
            "--trainer.callbacks+=test_step_identity.WeightPrint",
            recipe=recipe,
        )
    )  # fmt: skip
    scalars = {
        tag: [v for _, v in values] for tag, values in sorted(read_scalars(tmp / "tb").items()) if _computed(tag)
    }
    import test_step_identity as recorder  # the module the CLI imported the callback from

    return {"scalars": scalars, "weights": dict(recorder.WeightPrint.last)}


@pytest.fixture(scope="module")
def recorded() -> dict:
    if not FINGERPRINTS.exists():
        pytest.fail(f"{FINGERPRINTS} is missing: record it with `python tests/test_step_identity.py`")
    return json.loads(FINGERPRINTS.read_text())


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_steps_as_recorded(recipe, recorded, tmp_path, tiny_model_path):
    assert recipe in recorded["recipes"], f"{recipe} has no recorded fingerprint: record it"
    want, got = recorded["recipes"][recipe], fingerprint(recipe, tmp_path)
    assert sorted(got["scalars"]) == sorted(want["scalars"]), "a different set of scalars was logged"
    for tag, values in want["scalars"].items():
        assert got["scalars"][tag] == pytest.approx(values, rel=1e-4, abs=1e-6, nan_ok=True), tag
    for key in ("sum", "sum_squares"):
        assert got["weights"][key] == pytest.approx(want["weights"][key], rel=1e-4), key
    if machine() == recorded["machine"]:  # the recording machine: bit for bit
        assert got["weights"]["sha256"] == want["weights"]["sha256"]


if __name__ == "__main__":  # record: python tests/test_step_identity.py
    import tempfile

    out = {"machine": machine(), "steps": STEPS, "recipes": {}}
    for recipe in RECIPES:
        with tempfile.TemporaryDirectory() as tmp:
            out["recipes"][recipe] = fingerprint(recipe, Path(tmp))
        print(recipe, out["recipes"][recipe]["weights"]["sha256"][:16], flush=True)
    FINGERPRINTS.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FINGERPRINTS}")
