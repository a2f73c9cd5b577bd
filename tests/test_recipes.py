"""Every recipe runs 2 steps of the tiny model through the CLI and configures what it says.

The tiny random model almost never answers right, so these runs score responses with a
deterministic coin flip (``CoinFlipReward``): groups then mix right and wrong answers and every
technique has something to act on (dynamic sampling in particular).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from helpers.fits import read_scalars
from helpers.paths import REPO
from lite_ppo.cli import main
from lite_ppo.rewards import MathVerifyReward, RewardResult
from lite_ppo.technique import Technique

pytestmark = pytest.mark.slow


class CoinFlipReward(MathVerifyReward):
    """1 or 0 from a hash of the response text: a quarter right, deterministic, no math-verify.

    With 4 samples a group is all wrong about a third of the time, so dynamic sampling has work.
    """

    def score(self, response: str, gold: str) -> RewardResult:
        ok = hashlib.md5(response.encode()).digest()[0] % 4 == 0
        return RewardResult(1.0 if ok else 0.0, "correct" if ok else "wrong", None)


class Recorder(Technique):
    """Records the loss configuration and, per step, whether each trained group mixes outcomes."""

    seen: list[dict] = []
    generated = 0

    def on_rollout(self, ctx, batch) -> None:
        Recorder.generated += batch.num_responses  # every generation round, before dynamic sampling

    def on_update_end(self, ctx, batch, stats) -> None:
        statuses = batch.reward_status
        groups = {}
        for g, s in zip(batch.group_ids.tolist(), statuses):
            groups.setdefault(g, set()).add(s == "correct")
        Recorder.seen.append(
            {
                "config": ctx.module.loss_config,
                "responses": batch.num_responses,
                "dropped": Recorder.generated - batch.num_responses,
                "mixed": [len(v) == 2 for v in groups.values()],
                "advantages": batch.advantages.clone(),
                "rewards": batch.rewards.clone(),
            }
        )
        Recorder.generated = 0


def fit(tmp: Path, recipe: str, *extra: str) -> dict[str, list[tuple[int, float]]]:
    Recorder.seen, Recorder.generated = [], 0
    main(
        [
            "fit",
            "--config",
            str(REPO / f"configs/recipes/{recipe}.yaml"),
            "--config",
            str(REPO / "configs/models/tiny.yaml"),
            "--data.steps_per_epoch",
            "2",
            "--trainer.default_root_dir",
            str(tmp),
            "--trainer.logger.init_args.save_dir",
            str(tmp / "tb"),
            "--trainer.logger.init_args.version",
            "run",
            "--rollout.reward",
            "test_recipes.CoinFlipReward",
            "--trainer.callbacks+=test_recipes.Recorder",
            *extra,
        ]
    )
    return read_scalars(tmp / "tb")


# recipe -> (clip_low, clip_high, aggregation) and the technique scalars it must log
RECIPES = {
    "grpo": ((0.2, 0.2, "seq-mean-token-mean"), ["loss/kl", "kl/ref_kl"]),
    "dapo": ((0.2, 0.28, "token-mean"), ["overlong_shaping/penalty_mean"]),
    "ppo_baseline": ((0.2, 0.2, "seq-mean-token-mean"), []),
    "lite_ppo_no_norm": ((0.2, 0.2, "token-mean"), []),
    "lite_ppo_no_std": ((0.2, 0.2, "token-mean"), []),
    "lite_ppo_group_std": ((0.2, 0.2, "token-mean"), []),
    "lite_ppo_batch_norm": ((0.2, 0.2, "token-mean"), []),
    "lite_ppo_seq_level": ((0.2, 0.2, "seq-mean-token-mean"), []),
    "lite_ppo_overlong_filter": ((0.2, 0.2, "token-mean"), ["overlong_filter/masked_response_share"]),
    "dr_grpo": ((0.2, 0.2, "seq-mean-token-sum-norm"), []),
    "reinforce_pp_baseline": ((0.2, 0.2, "token-mean"), ["reinforce_pp/return_std", "loss/kl"]),
    "lite_ppo_entropy_bonus": ((0.2, 0.2, "token-mean"), ["entropy_bonus/coef", "loss/entropy_bonus"]),
    "lite_ppo_high_entropy": ((0.2, 0.2, "token-mean"), ["high_entropy/selected_share", "high_entropy/threshold"]),
    "lite_ppo_clip_cov": ((0.2, 0.2, "token-mean"), ["clip_cov/detached_share", "clip_cov/candidate_share"]),
    "lite_ppo_kl_cov": ((0.2, 0.2, "token-mean"), ["kl_cov/selected_share", "kl_cov/covariance", "loss/kl_cov"]),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_runs_two_steps(recipe, tmp_path, tiny_model_path):
    (clip_low, clip_high, aggregation), tags = RECIPES[recipe]
    scalars = fit(tmp_path, recipe)
    for tag in ["loss/policy", "clip/fraction", "reward/mean", *tags]:
        assert len(scalars.get(tag, [])) == 2, f"{recipe}: {tag} logged {len(scalars.get(tag, []))} times, expected 2"
    assert len(Recorder.seen) == 2
    cfg = Recorder.seen[0]["config"]
    assert (cfg.clip_low, cfg.clip_high, cfg.aggregation) == (clip_low, clip_high, aggregation)
    if recipe == "dapo":
        # Dynamic sampling: no all-correct / all-wrong group reaches the update (and some were dropped).
        assert all(all(step["mixed"]) for step in Recorder.seen)
        assert any(step["dropped"] for step in Recorder.seen)
        assert all(step["responses"] == 16 for step in Recorder.seen)  # refilled to 4 prompts x 4
        assert any(v >= 1 for _, v in scalars["groups/refill_rounds"])
    if recipe in ("ppo_baseline", "lite_ppo_no_norm"):
        assert all(torch.equal(step["advantages"], step["rewards"]) for step in Recorder.seen)  # A = r
    if recipe == "grpo":
        assert all(v >= 0 for _, v in scalars["kl/ref_kl"])  # k3 >= 0
    if recipe == "dr_grpo":
        assert cfg.generation_budget == 32  # the rollout's max_new_tokens (configs/models/tiny.yaml)
    if recipe == "lite_ppo_high_entropy":
        # ceil(0.2 N) of the step's N loss tokens (~400 here): the share is 0.2 up to 1 / N
        assert all(0.2 <= v < 0.21 for _, v in scalars["high_entropy/selected_share"])
    if recipe == "lite_ppo_clip_cov":  # only candidates are detached
        shares = zip(scalars["clip_cov/detached_share"], scalars["clip_cov/candidate_share"])
        assert all(detached <= candidates for (_, detached), (_, candidates) in shares)
    if recipe == "lite_ppo_kl_cov":  # max(1, floor(2e-3 N)) tokens (N ~400: 1 or 2), the penalty >= 0
        assert all(0 < v < 0.01 for _, v in scalars["kl_cov/selected_share"])
        assert all(v >= 0 for _, v in scalars["loss/kl_cov"])
    if recipe == "lite_ppo_entropy_bonus":
        # Step 2's coefficient is step 1's moved by the rate 0.0005 towards the target 0.3 nats.
        (_, first), (_, second) = scalars["entropy_bonus/coef"]
        entropy = scalars["policy/entropy"][0][1]
        assert first == pytest.approx(0.001)
        assert second == pytest.approx(0.001 + (0.0005 if entropy < 0.3 else -0.0005))


def test_diagnostics_through_the_cli(tmp_path, tiny_model_path):
    scalars = fit(tmp_path, "lite_ppo")
    for tag in [
        "reward/mean",
        "reward/accuracy",
        "groups/mixed",
        "response/length_mean",
        "response/truncation_rate",
        "response/repetition_rate_truncated",
        "update/length_advantage_corr",
        "clip/upper_of_positive",
    ]:
        assert len(scalars.get(tag, [])) == 2, f"missing {tag}"
    for step, mixed in scalars["groups/mixed"]:
        total = mixed + dict(scalars["groups/all_correct"])[step] + dict(scalars["groups/all_wrong"])[step]
        assert total == pytest.approx(1.0)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for events in (tmp_path / "tb").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events), size_guidance={"histograms": 0})
        acc.Reload()
        tags |= set(acc.Tags()["histograms"])
    assert "response/length" in tags and "groups/correct_per_group" in tags
    # One tier: no tier/ block repeating the global values.
    assert not any(tag.startswith("tier/") for tag in scalars) and "tier/easy/length" not in tags


def test_reinforce_pp_recipe_is_the_baseline_recipe_without_the_baseline(capsys):
    """reinforce_pp.yaml differs from reinforce_pp_baseline.yaml (which runs above) in the one flag;
    checked on the composed config rather than by a third fit of the same code."""
    configs = {}
    for recipe in ("reinforce_pp", "reinforce_pp_baseline"):
        with pytest.raises(SystemExit):
            main(["fit", "--config", str(REPO / f"configs/recipes/{recipe}.yaml"), "--print_config"])
        configs[recipe] = capsys.readouterr().out
    assert "ReinforcePlusPlus" in configs["reinforce_pp"]
    assert (
        "group_baseline: false" in configs["reinforce_pp"]
        and "group_baseline: true" in configs["reinforce_pp_baseline"]
    )
    plain = configs["reinforce_pp"].replace("group_baseline: false", "group_baseline: true")
    assert (
        plain.replace("recipe: reinforce_pp\n", "recipe: reinforce_pp_baseline\n") == configs["reinforce_pp_baseline"]
    )


@pytest.mark.parametrize("model", ["qwen3_4b_base", "qwen3_8b_base", "qwen3_4b_instruct"])
def test_paper_model_configs_parse(model, capsys):
    """The Qwen3 configs compose with a recipe (keys and class paths valid); they need GPUs to run."""
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(REPO / "configs/recipes/dapo.yaml"),
                "--config",
                str(REPO / f"configs/models/{model}.yaml"),
                "--print_config",
            ]
        )
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "deepspeed_stage_3" in printed and "bf16-mixed" in printed and "VLLMEngine" in printed
