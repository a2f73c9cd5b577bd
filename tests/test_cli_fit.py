"""End to end through the CLI: a tiny random model, 3 steps, TensorBoard read back, resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.fits import read_scalars, tiny_fit_args
from lite_ppo.cli import main

pytestmark = pytest.mark.slow

# The scalars every step must log.
REQUIRED = [
    "reward/mean",
    "reward/std",
    "groups/all_correct",
    "groups/all_wrong",
    "groups/mixed",
    "response/length_mean",
    "response/truncation_rate",
    "reward/unparsed_rate",
    "reward/timeout_rate",
    "clip/fraction",
    "policy/entropy",
    "policy/approx_kl",
    "loss/policy",
    "update/grad_norm",
    "update/lr",
    "time/generation_s",
    "time/reward_s",
    "time/update_s",
]


def _fit(tmp: Path, *extra: str) -> None:
    main(tiny_fit_args(tmp, *extra))


def test_fit_logs_every_scalar_and_resumes(tmp_path, tiny_model_path, recwarn):
    ckpt_dir = tmp_path / "ckpt"
    _fit(
        tmp_path,
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={ckpt_dir}",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.save_top_k=-1",
    )
    # Lightning's 15-line advice to checkpoint the pre-optimization state under manual optimization does
    # not apply (a checkpoint holds the weights after its step, what a resume continues from): not shown.
    assert not [w for w in recwarn if "manual optimization and every_n_train_steps" in str(w.message)]
    scalars = read_scalars(tmp_path / "tb")
    for tag in REQUIRED:
        assert tag in scalars, f"missing scalar {tag}; have {sorted(scalars)}"
        assert len(scalars[tag]) == 3, f"{tag} logged {len(scalars[tag])} times, expected once per step"
    for step, share_sum in _sum_by_step(scalars, ["groups/all_correct", "groups/all_wrong", "groups/mixed"]).items():
        assert share_sum == pytest.approx(1.0), f"group shares at step {step} sum to {share_sum}"
    # 4 prompts x 4 samples per step, 16 max tokens: lengths within limits.
    assert all(0 < v <= 32 for _, v in scalars["response/length_mean"])  # configs/models/tiny.yaml: max_new_tokens 32
    assert all(v >= 0 for _, v in scalars["policy/approx_kl"])

    ckpts = sorted(ckpt_dir.glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    assert ckpts, "no checkpoint written"
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
    # 3 rollout steps x 2 mini-batches = 6 optimizer steps
    assert state["global_step"] == 6
    assert state["policy_version"] == 6

    # Resume from the step-1 checkpoint (2 optimizer steps) and run to the end of the epoch.
    first = next(p for p in ckpts if "step=2" in p.name)
    resumed = tmp_path / "resumed"
    _fit(resumed, f"--ckpt_path={first}", "--trainer.logger.init_args.version=resumed")
    resumed_scalars = read_scalars(resumed / "tb")
    # Only the two remaining rollout steps ran after the resume.
    assert len(resumed_scalars["reward/mean"]) == 2


def _sum_by_step(scalars, tags):
    out: dict[int, float] = {}
    for tag in tags:
        for step, value in scalars[tag]:
            out[step] = out.get(step, 0.0) + value
    return out
