"""Settings validated at fit start, over-long prompts, the excluded-advantage bound, resume with changed
settings and the LR schedule's length."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import Callback, Trainer

from helpers.fits import read_scalars, tiny_fit_args
from helpers.paths import REPO
from helpers.technique_batches import step_ctx
from lite_ppo.callbacks import CISPO, GSPO, SAPO, AdvantageNormalization, ClipHigher, LossAggregation, Rollout
from lite_ppo.data.datamodule import MathDataModule
from lite_ppo.errors import UserError
from lite_ppo.metric_names import OVERLONG_PROMPTS_DROPPED
from lite_ppo.ops.advantages import normalized_advantages
from lite_ppo.policy_module import rollout_of
from lite_ppo.rollout import HFEngine, SamplingConfig
from lite_ppo.training.module import LitePPO


# -- helpers -------------------------------------------------------------------------------------------
def _rollout(n=2, max_new_tokens=4, **kwargs) -> Rollout:
    return Rollout(engine=HFEngine(batch_size=8), sampling=SamplingConfig(n=n, max_new_tokens=max_new_tokens), **kwargs)


def _trainer(tmp_path: Path, rollout: Rollout, *extra_callbacks, **kwargs) -> Trainer:
    kwargs.setdefault("max_epochs", 1)
    kwargs.setdefault("logger", False)
    kwargs.setdefault("log_every_n_steps", 1)
    return Trainer(
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        callbacks=[AdvantageNormalization(), LossAggregation(), *extra_callbacks, rollout],
        **kwargs,
    )


@pytest.fixture
def no_weights(monkeypatch):
    """Loading the policy's weights fails the test: the check must come before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model's weights were loaded before the settings were checked")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


# -- invalid settings: one line, before any weights load ------------------------------------------------
INVALID = [
    ({"model": {"max_grad_norm": -1.0}}, "model.max_grad_norm=-1.0"),
    ({"model": {"max_grad_norm": 0.0}}, "model.max_grad_norm=0.0"),
    ({"model": {"max_grad_norm": float("nan")}}, "model.max_grad_norm=nan"),
    ({"data": {"prompts_per_step": 3}, "n": 3}, "model.num_mini_batches=2"),
    ({"trainer": {"max_steps": 5, "max_epochs": -1}}, "trainer.max_steps=5"),
    ({"max_new_tokens": 2048}, "rollout.sampling.max_new_tokens=2048"),  # builtin:tiny's context is 2048
    ({"rollout": {"max_prompt_tokens": 2040}, "max_new_tokens": 16}, "rollout.max_prompt_tokens=2040"),
    ({"model": {"lr": 0.0}}, "model.lr=0.0"),
    ({"model": {"weight_decay": -1.0}}, "model.weight_decay=-1.0"),
    ({"model": {"clip_eps": 0.0}}, "model.clip_eps=0.0"),
    ({"callbacks": [AdvantageNormalization("group", "group")]}, "both compute advantages"),
    ({"callbacks": [LossAggregation("seq-mean-token-mean")]}, "both set the loss's 'aggregation'"),
    ({"callbacks": [GSPO(), CISPO()]}, "GSPO and CISPO both set the loss's 'objective'"),
    ({"callbacks": [ClipHigher(), SAPO()]}, "ClipHigher sets the loss's 'clip_high', which the 'sapo' objective"),
    ({"model": {"lr_schedule": "cosine"}, "trainer": {"max_steps": -1, "max_epochs": -1}}, "needs a finite budget"),
]


@pytest.mark.parametrize(("settings", "needle"), INVALID, ids=[needle for _, needle in INVALID])
def test_invalid_setting_is_one_line_error_before_the_model_loads(
    tmp_path, tiny_model_path, no_weights, settings, needle
):
    model = LitePPO(model_path="builtin:tiny", num_mini_batches=2, micro_batch_size=4, **settings.get("model", {}))
    data = MathDataModule(**{"prompts_per_step": 2, "steps_per_epoch": 1, **settings.get("data", {})})
    rollout = _rollout(
        n=settings.get("n", 2), max_new_tokens=settings.get("max_new_tokens", 4), **settings.get("rollout", {})
    )
    trainer = _trainer(tmp_path, rollout, *settings.get("callbacks", []), **settings.get("trainer", {}))
    with pytest.raises(UserError) as error:
        trainer.fit(model, datamodule=data)
    message = str(error.value)
    assert needle in message and "\n" not in message


def test_valid_settings_reach_the_model_load(tmp_path, tiny_model_path, no_weights):
    # The counterpart of the test above: the same set-up with valid settings gets to from_pretrained.
    trainer = _trainer(tmp_path, _rollout())
    with pytest.raises(AssertionError, match="weights were loaded"):
        trainer.fit(
            LitePPO(model_path="builtin:tiny", num_mini_batches=2),
            datamodule=MathDataModule(prompts_per_step=2, steps_per_epoch=1),
        )


def _fake(world_size=1, prompts=4, n=2, m=2, max_steps=-1):
    hparams = SimpleNamespace(
        max_grad_norm=1.0,
        lr=1e-6,
        weight_decay=0.0,
        betas=(0.9, 0.999),
        warmup_steps=0,
        min_lr_ratio=0.1,
        lr_schedule="constant",
        num_mini_batches=m,
        model_path="builtin:tiny",
        clip_eps=0.2,
    )
    callbacks = [AdvantageNormalization(), _rollout(n=n)]
    trainer = SimpleNamespace(
        world_size=world_size,
        max_steps=max_steps,
        max_epochs=1,
        datamodule=SimpleNamespace(prompts_per_step=prompts),
        callbacks=callbacks,
    )
    return trainer, SimpleNamespace(hparams=hparams, rollout_source=callbacks[1]), callbacks[:1]


def test_shape_checks_count_per_rank(tiny_model_path):
    from lite_ppo.training.preflight import check_fit_settings

    check_fit_settings(
        *_fake(world_size=2, prompts=4, n=2, m=2)
    )  # 2 prompts x 2 samples per rank, 2 mini-batches: fine
    with pytest.raises(UserError, match=r"prompts_per_step=3 is not divisible by the world size 2"):
        check_fit_settings(*_fake(world_size=2, prompts=3))
    # Each rank splits its own responses: 2 prompts x 2 samples per rank into 4 mini-batches is fine, but
    # 1 prompt x 2 samples per rank is not, although the 4 responses of the global batch would divide by 4.
    check_fit_settings(*_fake(world_size=2, prompts=4, n=2, m=4))
    with pytest.raises(UserError, match=r"each rank's 2 responses per step .*num_mini_batches=4"):
        check_fit_settings(*_fake(world_size=2, prompts=2, n=2, m=4))


def test_deepspeed_clipping_refuses_non_positive_norms():
    from lite_ppo.strategies.zero import set_gradient_clipping

    set_gradient_clipping(None, None)
    set_gradient_clipping(None, 1.0)
    for bad in (0.0, -1.0):
        with pytest.raises(UserError, match="model.max_grad_norm"):
            set_gradient_clipping(None, bad)


# -- over-long prompts ----------------------------------------------------------------------------------
def _long_data(tmp_path: Path, long_tokens_words: int) -> Path:
    """Problems 0..7 short, 8..11 long (repeated words), in one JSONL file."""
    path = tmp_path / "mixed.jsonl"
    rows = [{"id": f"short-{i}", "problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]
    rows += [
        {"id": f"long-{i}", "problem": "Add these: " + " + ".join(["1"] * long_tokens_words), "answer": "0"}
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class _Seen(Callback):
    """Records the problem ids and prompt lengths of every training rollout."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.prompt_lengths: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        rollout = rollout_of(outputs)
        self.ids += rollout.extras["problem_id"]
        width = rollout.response_mask.shape[1]
        self.prompt_lengths += rollout.attention_mask[:, :-width].sum(-1).tolist()


@pytest.mark.slow
def test_prompts_longer_than_the_context_are_dropped_counted_and_warned(tmp_path, tiny_model_path):
    # The default limit is the model's context (2048) minus max_new_tokens: before, a 4000-token
    # prompt was generated for silently (and slowly).
    data = MathDataModule(sources={"easy": str(_long_data(tmp_path, 800))}, prompts_per_step=4, steps_per_epoch=2)
    batches = [data.global_batch(k) for k in range(2)]
    long_in_batches = sum(p.id.startswith("long") for batch in batches for p in batch)
    assert long_in_batches > 0, "the test data must put long problems in the first batches"
    seen = _Seen()
    trainer = _trainer(tmp_path, _rollout(), seen, logger=_tb(tmp_path))
    with pytest.warns(UserWarning, match="dropping problems whose prompt is longer than 2044 tokens") as warned:
        trainer.fit(LitePPO(model_path="builtin:tiny", num_mini_batches=2, lr=1e-5), datamodule=data)
    assert sum("dropping problems" in str(w.message) for w in warned) == 1  # warned once
    assert all(i.startswith("short") for i in seen.ids) and len(seen.ids) == 2 * 4 * 2  # shape kept
    assert max(seen.prompt_lengths) <= 2044
    # Each step skips its own long problems and the long replacements met before the last one used
    # (the replacements come from the data module's refill stream, from round 1023 down), no more.
    from lite_ppo.callbacks.rollout import _REPLACEMENT_FIRST_ROUND

    def skipped(k: int) -> int:
        need = count = sum(p.id.startswith("long") for p in batches[k])
        round_index = _REPLACEMENT_FIRST_ROUND
        while need:
            for problem in data.refill_batch(k, round_index)["problems"]:
                if not need:
                    break
                if problem.id.startswith("long"):
                    count += 1
                else:
                    need -= 1
            round_index -= 1
        return count

    dropped = [v for _, v in sorted(read_scalars(tmp_path / "tb")[OVERLONG_PROMPTS_DROPPED])]
    assert dropped == [skipped(0), skipped(1)]


@pytest.mark.slow
def test_over_long_prompt_refused_names_the_problem_and_its_length(tmp_path, tiny_model_path):
    data = MathDataModule(sources={"easy": str(_long_data(tmp_path, 40))}, prompts_per_step=4, steps_per_epoch=2)
    assert any(p.id.startswith("long") for k in range(2) for p in data.global_batch(k))
    trainer = _trainer(tmp_path, _rollout(max_prompt_tokens=60, overlong_prompts="refuse"))
    with pytest.raises(
        UserError, match=r"problem 'long-\d' \(tier easy\) has a \d+-token prompt, over the limit of 60"
    ) as error:
        trainer.fit(LitePPO(model_path="builtin:tiny", num_mini_batches=2), datamodule=data)
    assert "\n" not in str(error.value)


def _tb(tmp_path: Path):
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=str(tmp_path / "tb"), name="", version="run")


# -- item 8: an excluded response's advantage is bounded by the included ones' ---------------------------
def test_truncated_response_in_a_constant_group_gets_zero_not_a_million():
    # Group [1, 1, 1, 0*], 0* truncated and excluded: the included mean is 1, std 0, so before the
    # fix A* = (0 - 1) / (0 + 1e-6) = -1e6. The included advantages are all 0, hence the bound 0.
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0])
    weights = torch.tensor([1.0, 1.0, 1.0, 0.0])
    got = normalized_advantages(rewards, torch.zeros(4, dtype=torch.long), "group", "group", 1e-6, weights=weights)
    torch.testing.assert_close(got, torch.zeros(4))


def test_excluded_advantage_clamped_to_the_largest_included_one_by_hand():
    # Group [1, 0, 0 | -2*]: included mean 1/3, Bessel std sqrt(1/3); included A = 2/sqrt(3), -1/sqrt(3), -1/sqrt(3).
    # Unbounded A* = (-2 - 1/3) * sqrt(3) = -4.04; bounded to -2/sqrt(3). Group 1 [0, 1] is untouched.
    rewards = torch.tensor([1.0, 0.0, 0.0, -2.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    weights = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    s3 = math.sqrt(3)
    expected = torch.tensor([2 / s3, -1 / s3, -1 / s3, -2 / s3, -1 / math.sqrt(2), 1 / math.sqrt(2)])
    got = normalized_advantages(rewards, groups, "group", "group", 0.0, weights=weights)
    torch.testing.assert_close(got, expected)
    # A within the bound is unchanged: reward 0 excluded -> -1/sqrt(3) as computed from the statistics.
    rewards[3] = 0.0
    expected[3] = -1 / s3
    torch.testing.assert_close(normalized_advantages(rewards, groups, "group", "group", 0.0, weights=weights), expected)


def test_callback_bounds_under_a_batch_std_too():
    # Mixed normalization (group mean, batch std), every counted reward 1: batch std 0, so an
    # excluded 0 would get (0 - 1) / eps. Groups [1, 1, 0*], [1, 1, 1*]: included A all 0 -> bound 0.
    batch = SimpleNamespace(
        rewards=torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0]),
        group_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
        truncated=torch.tensor([False, False, True, False, False, True]),
        response_lengths=torch.full((6,), 3),
        num_responses=6,
    )
    module = SimpleNamespace(trainer=SimpleNamespace(world_size=1))
    for mean_scope, std_scope in (("group", "batch"), ("group", "group"), ("batch", "batch")):
        got = AdvantageNormalization(mean_scope, std_scope, count_truncated=False).compute_advantages(
            step_ctx(module.trainer, module), batch
        )
        torch.testing.assert_close(got, torch.zeros(6), msg=f"{mean_scope}/{std_scope}")


def test_scope_pairs_whose_std_can_vanish_alone_are_refused():
    """A (centre, scale) pair is refused exactly when some batch makes |A| ~ 1/eps: checked on every
    0/1 reward batch of 2 groups x 2 responses, computed by ops.normalized_advantages."""
    import itertools

    from lite_ppo.ops.advantages import SCOPES, scale_vanishes_alone

    groups = torch.tensor([0, 0, 1, 1])
    batches = [torch.tensor(r, dtype=torch.float64) for r in itertools.product([0.0, 1.0], repeat=4)]
    for mean_scope, std_scope in itertools.product(SCOPES, SCOPES):
        largest = max(
            float(normalized_advantages(r, groups, mean_scope, std_scope, eps=1e-6).abs().max()) for r in batches
        )
        # Bounded pairs stay at or below |r - centre| / (smallest non-zero std of these rewards, 0.5) <= 2.
        assert (largest > 1e5) == scale_vanishes_alone(mean_scope, std_scope), (mean_scope, std_scope, largest)
        if scale_vanishes_alone(mean_scope, std_scope):
            with pytest.raises(ValueError, match=f"mean_scope='{mean_scope}' with std_scope='{std_scope}'"):
                AdvantageNormalization(mean_scope, std_scope)
        else:
            AdvantageNormalization(mean_scope, std_scope)


def test_bound_helper_per_batch():
    from lite_ppo.ops.advantages import bound_excluded_advantages

    a = torch.tensor([0.5, -0.25, 3.0, -7.0])
    included = torch.tensor([True, True, False, False])
    torch.testing.assert_close(bound_excluded_advantages(a, included), torch.tensor([0.5, -0.25, 0.5, -0.5]))
    torch.testing.assert_close(
        bound_excluded_advantages(a, included, batch_bound=2.0), torch.tensor([0.5, -0.25, 2.0, -2.0])
    )


# -- item 7: the LR schedule ends at min_lr_ratio * lr at the last optimizer step ----------------------
class _LearningRates(Callback):
    """The learning rate each optimizer step runs with."""

    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.lrs.append(optimizer.param_groups[0]["lr"])


# 4 optimizer steps (2 rollout steps x 2 mini-batches), cosine from 1e-3 to 0.1 x 1e-3, no warm-up:
# lr_k = 1e-3 * (0.1 + 0.9 * (1 + cos(pi * k / 3)) / 2) = 1e-3, 7.75e-4, 3.25e-4, 1e-4.
EXPECTED_LRS = [1e-3, 7.75e-4, 3.25e-4, 1e-4]


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["max_epochs", "max_steps"])
def test_cosine_reaches_min_lr_at_the_last_optimizer_step(tmp_path, tiny_model_path, budget):
    lrs = _LearningRates()
    if budget == "max_epochs":  # 1 epoch of 2 rollout steps
        trainer, data = (
            _trainer(tmp_path, _rollout(), lrs, max_epochs=1),
            MathDataModule(prompts_per_step=2, steps_per_epoch=2),
        )
    else:  # max_steps counts optimizer steps: 4 = 2 rollout steps of an epoch of 100
        trainer, data = (
            _trainer(tmp_path, _rollout(), lrs, max_steps=4, max_epochs=None),
            MathDataModule(prompts_per_step=2, steps_per_epoch=100),
        )
    model = LitePPO(
        model_path="builtin:tiny",
        lr=1e-3,
        lr_schedule="cosine",
        min_lr_ratio=0.1,
        num_mini_batches=2,
        micro_batch_size=4,
    )
    trainer.fit(model, datamodule=data)
    assert lrs.lrs == pytest.approx(EXPECTED_LRS, rel=1e-9, abs=0)


# -- item 6: resume with changed settings ---------------------------------------------------------------
def _cli(tmp: Path, *extra: str):
    from lite_ppo.cli.lightning_cli import TRAINER_DEFAULTS, LitePPOCLI

    return LitePPOCLI(
        LitePPO,
        MathDataModule,
        args=[
            "fit",
            "--config",
            str(REPO / "configs/recipes/lite_ppo.yaml"),
            "--config",
            str(REPO / "configs/models/tiny.yaml"),
            "--data.prompts_per_step=2",
            "--data.steps_per_epoch=1",
            "--rollout.sampling.n=2",
            "--rollout.sampling.max_new_tokens=4",
            "--trainer.default_root_dir",
            str(tmp),
            "--trainer.logger.init_args.save_dir",
            str(tmp / "tb"),
            *extra,
        ],
        trainer_defaults=TRAINER_DEFAULTS,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, _model_cache) -> Path:
    tmp = tmp_path_factory.mktemp("resume")
    _cli(tmp)
    return next(tmp.rglob("last.ckpt"))


@pytest.mark.slow
def test_resume_refuses_changed_unsafe_settings_listing_them(tmp_path, checkpoint, no_weights):
    with pytest.raises(UserError) as error:
        _cli(
            tmp_path,
            f"--ckpt_path={checkpoint}",
            "--model.num_mini_batches=1",
            "--model.lr=0.001",
            "--model.model_path=builtin:tiny-qwen3",
        )
    message = str(error.value)
    assert "\n" not in message and str(checkpoint) in message
    for change in (
        "model.lr 0.0001 → 0.001",
        "model.num_mini_batches 2 → 1",
        "model.model_path builtin:tiny-arith → builtin:tiny-qwen3",
    ):
        assert change in message


@pytest.mark.slow
def test_resume_applies_changed_safe_settings(tmp_path, checkpoint):
    cli = _cli(
        tmp_path,
        f"--ckpt_path={checkpoint}",
        "--model.clip_eps=0.3",
        "--model.max_grad_norm=0.5",
        "--trainer.max_epochs=2",
    )
    assert cli.model.hparams.clip_eps == 0.3 and cli.model.hparams.max_grad_norm == 0.5
    assert cli.model.loss_config.clip_low == 0.3 and cli.model.loss_config.clip_high == 0.3
    assert cli.trainer.global_step == 4  # the resumed run did train: 2 rollout steps x 2 mini-batches


def test_resume_lists_added_removed_and_changed_techniques(caplog):
    """The checkpoint records the techniques (LitePPO.on_save_checkpoint); a resumed fit with other
    ones lists every change (LitePPO.on_load_checkpoint), and says nothing when they are the same."""
    import logging

    from lite_ppo.callbacks import ClipHigher, KLPenalty

    def trainer(*callbacks):
        return SimpleNamespace(state=SimpleNamespace(fn="fit"), callbacks=list(callbacks), ckpt_path="last.ckpt")

    module = LitePPO(model_path="builtin:tiny")
    saved: dict = {}
    module._trainer = trainer(AdvantageNormalization("group", "batch"), KLPenalty(), LossAggregation("token-mean"))
    module.on_save_checkpoint(saved)
    resumed = trainer(AdvantageNormalization("group", "group"), LossAggregation("token-mean"), ClipHigher(eps_high=0.3))
    for callbacks, expected in (
        (
            resumed.callbacks,
            ["AdvantageNormalization.std_scope batch → group", "removed KLPenalty(", "added ClipHigher("],
        ),
        (module._trainer.callbacks, []),
    ):
        module._trainer = trainer(*callbacks)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            module.on_load_checkpoint(saved)
        lines = [r.getMessage() for r in caplog.records if "changed techniques" in r.getMessage()]
        if not expected:
            assert lines == []
            continue
        assert len(lines) == 1 and all(part in lines[0] for part in expected), lines
        assert "eps_high=0.3" in lines[0] and "LossAggregation" not in lines[0]


def test_cli_prints_the_invalid_setting_as_one_line_and_exits_2(tmp_path, tiny_model_path, no_weights, capsys):
    from lite_ppo.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(tiny_fit_args(tmp_path, "--data.prompts_per_step=3", "--rollout.sampling.n=3"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "num_mini_batches" in line]
    assert len(lines) == 1 and "each rank's 9 responses per step" in lines[0]
