"""The technique advisor: for each rule a constructed run (event files + config.yaml) that triggers
it and one just on the other side of its threshold that does not; the callback writes its findings
as TensorBoard text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lite_ppo import metric_names as m
from lite_ppo.research import rules as r
from lite_ppo.research.advise import main as advise_main

STEPS = 8  # quarters of 2 steps: "early" = steps 0-1, "recent" = steps 6-7

# A healthy run: no rule fires (plenty of mixed groups, upper clip between the two clip thresholds,
# flat entropy, no truncation). Each case changes only what its rule reads.
HEALTHY = {
    m.REWARD_STD: 0.45,
    m.REWARD_ACCURACY: 0.5,
    m.GROUPS_MIXED: 0.8,
    m.CLIP_UPPER_POSITIVE: 0.007,
    m.ENTROPY: 1.0,
    m.TRUNCATION_RATE: 0.0,
    m.REPETITION_TRUNCATED: 0.0,
    m.RESPONSE_LENGTH: 200.0,
}
LITE_PPO_CALLBACKS = [
    {
        "class_path": "lite_ppo.callbacks.AdvantageNormalization",
        "init_args": {"mean_scope": "group", "std_scope": "batch"},
    },
    {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}},
]
SEQ_LEVEL = [
    LITE_PPO_CALLBACKS[0],
    {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "seq-mean-token-mean"}},
]


def ramp(early: float, late: float) -> list[float]:
    """Steps 0-1 at ``early``, steps 6-7 at ``late``, linear between."""
    return [early, early] + [early + (late - early) * k / 5 for k in range(1, 5)] + [late, late]


def make_run(
    root: Path, name: str, scalars: dict | None = None, *, model: str = "builtin:tiny", callbacks=None, weights=None
) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    values = {**HEALTHY, **(scalars or {})}
    run_dir = root / name
    writer = SummaryWriter(str(run_dir))
    for tag, value in values.items():
        series = value if isinstance(value, list) else [value] * STEPS
        assert len(series) == STEPS
        for t, v in enumerate(series):
            writer.add_scalar(tag, v, t)
    writer.close()
    config = {
        "recipe": "test",
        "model": {"model_path": model},
        "trainer": {"callbacks": callbacks if callbacks is not None else LITE_PPO_CALLBACKS},
        "data": {"weights": weights or {"easy": 1.0}},
        "rollout": {"prompt": None},
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def fired(run_dir: Path, capsys, *extra: str) -> list[str]:
    assert advise_main([str(run_dir), "--json", *extra]) == 0
    return [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]]


def test_ramp_helper():
    values = ramp(0.0, 1.0)
    assert len(values) == STEPS and values[:2] == [0.0, 0.0] and values[-2:] == [1.0, 1.0]


def test_healthy_run_fires_nothing_and_says_so(tmp_path, capsys):
    run = make_run(tmp_path, "healthy")
    assert fired(run, capsys) == []
    assert advise_main([str(run)]) == 0
    assert "No rule fired" in capsys.readouterr().out


# (rule, triggering scalars/config, just-below scalars/config)
CASES = {
    "reward_std_collapsed": ({m.REWARD_STD: 0.045}, {m.REWARD_STD: 0.0501}),
    "low_reward_signal": ({m.REWARD_STD: 0.29}, {m.REWARD_STD: 0.301}),
    "low_reward_signal/mixed": ({m.GROUPS_MIXED: 0.49}, {m.GROUPS_MIXED: 0.501}),
    "clip_higher_cannot_matter": ({m.CLIP_UPPER_POSITIVE: 0.0045}, {m.CLIP_UPPER_POSITIVE: 0.0051}),
    "clip_higher_helps": (
        {m.CLIP_UPPER_POSITIVE: 0.0101, m.ENTROPY: ramp(1.0, 0.85)},
        {m.CLIP_UPPER_POSITIVE: 0.0101, m.ENTROPY: ramp(1.0, 0.91)},  # a 9 % drop: below the 10 % threshold
    ),
    "clip_higher_helps/clip": (
        {m.CLIP_UPPER_POSITIVE: 0.0101, m.ENTROPY: ramp(1.0, 0.85)},
        {m.CLIP_UPPER_POSITIVE: 0.0099, m.ENTROPY: ramp(1.0, 0.85)},
    ),
    "overlong_filtering": (
        {m.TRUNCATION_RATE: ramp(0.03, 0.06), m.REPETITION_TRUNCATED: 0.6},
        {m.TRUNCATION_RATE: ramp(0.03, 0.06), m.REPETITION_TRUNCATED: 0.49},
    ),
    "overlong_filtering/rise": (
        {m.TRUNCATION_RATE: ramp(0.05, 0.075), m.REPETITION_TRUNCATED: 0.6},
        {m.TRUNCATION_RATE: ramp(0.06, 0.075), m.REPETITION_TRUNCATED: 0.6},  # rises by 0.015 < 0.02
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_fires_above_and_not_just_below(case, tmp_path, capsys):
    rule = case.split("/")[0]
    trigger, below = CASES[case]
    assert rule in fired(make_run(tmp_path, "trigger", trigger), capsys)
    assert rule not in fired(make_run(tmp_path, "below", below), capsys)


def test_token_level_for_base_model_on_hard_or_long(tmp_path, capsys):
    base = "/models/Qwen3-4B-Base"
    hard = make_run(tmp_path, "hard", model=base, callbacks=SEQ_LEVEL, weights={"easy": 0.5, "hard": 0.5})
    assert "token_level_for_base" in fired(hard, capsys)
    not_hard = make_run(tmp_path, "mostly_easy", model=base, callbacks=SEQ_LEVEL, weights={"easy": 0.51, "hard": 0.49})
    assert "token_level_for_base" not in fired(not_hard, capsys)
    long = make_run(tmp_path, "long", {m.RESPONSE_LENGTH: 1030.0}, model=base, callbacks=SEQ_LEVEL)
    assert "token_level_for_base" in fired(long, capsys)
    short = make_run(tmp_path, "short", {m.RESPONSE_LENGTH: 1020.0}, model=base, callbacks=SEQ_LEVEL)
    assert "token_level_for_base" not in fired(short, capsys)
    # Already token-level: nothing to change.
    token = make_run(tmp_path, "token", model=base, weights={"hard": 1.0})
    assert "token_level_for_base" not in fired(token, capsys)


def test_sequence_level_for_aligned_model(tmp_path, capsys):
    aligned = make_run(tmp_path, "aligned", model="builtin:smollm2-135m-instruct")
    assert "sequence_level_for_aligned" in fired(aligned, capsys)
    base = make_run(tmp_path, "base", model="/models/Qwen3-4B-Base")
    assert "sequence_level_for_aligned" not in fired(base, capsys)
    unknown = make_run(tmp_path, "unknown", model="builtin:tiny")
    assert "sequence_level_for_aligned" not in fired(unknown, capsys)
    assert "sequence_level_for_aligned" in fired(unknown, capsys, "--model-kind", "aligned")


def test_findings_ranked_and_complete(tmp_path, capsys):
    run = make_run(
        tmp_path, "many", {m.REWARD_STD: 0.2, m.CLIP_UPPER_POSITIVE: 0.001}, model="builtin:smollm2-135m-instruct"
    )
    assert advise_main([str(run), "--json"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [f["rule"] for f in findings] == [
        "low_reward_signal",
        "sequence_level_for_aligned",
        "clip_higher_cannot_matter",
    ]
    for f in findings:
        assert f["measured"] and f["threshold"] and f["reasoning"] and f["yaml"]
        assert "2508.08221" in f["reasoning"]
    assert "DynamicSampling" in findings[0]["yaml"]
    yaml.safe_load(findings[1]["yaml"])  # the YAML to paste is valid YAML


def test_threshold_constants_match_docstring():
    # The docstring justifies each threshold by value; keep them in step.
    for name in (
        "CLIP_UPPER_NEGLIGIBLE",
        "CLIP_UPPER_ACTIVE",
        "REWARD_STD_LOW",
        "REWARD_STD_COLLAPSED",
        "MIXED_GROUPS_MIN",
    ):
        assert f"{name} = {getattr(r, name)}" in r.__doc__


def test_callback_writes_findings_to_tensorboard(tmp_path):
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lite_ppo.callbacks import TechniqueAdvisor

    logger = TensorBoardLogger(str(tmp_path), name="run", version="seed0")

    class FakeTrainer:  # what the callback touches of a Trainer
        loggers = [logger]
        log_dir = logger.log_dir
        callbacks: list = []
        callback_metrics: dict = {}

    from types import SimpleNamespace

    from lite_ppo.step_context import StepContext

    trainer = FakeTrainer()
    module = SimpleNamespace(model_path=None)  # no techniques: the advisor describes the run from them
    module.step_context = lambda: StepContext(trainer, module, None)
    advisor = TechniqueAdvisor(every_n_steps=2, print_findings=False)
    for step in range(5):
        trainer.callback_metrics = {
            m.REWARD_STD: torch.tensor(0.01),
            m.REWARD_ACCURACY: torch.tensor(0.0),
            m.CLIP_UPPER_POSITIVE: torch.tensor(0.02),
        }
        advisor.on_train_batch_end(trainer, module, None, None, step)
    advisor.on_train_end(trainer, module)
    assert [f.rule for f in advisor.last_findings] == ["reward_std_collapsed"]
    logger.experiment.flush()
    acc = EventAccumulator(logger.log_dir)
    acc.Reload()
    texts = acc.Tensors(TechniqueAdvisor.TAG + "/text_summary")  # torch.utils.tensorboard names text tags so
    assert [t.step for t in texts] == [2, 4, 5]  # every 2 steps and at the end
    assert b"Reward std has collapsed" in texts[-1].tensor_proto.string_val[0]


def test_clip_rules_respect_an_active_clip_higher(tmp_path, capsys):
    def clip_higher(eps_high: float) -> list[dict]:
        return [
            *LITE_PPO_CALLBACKS,
            {"class_path": "lite_ppo.callbacks.ClipHigher", "init_args": {"eps_low": 0.2, "eps_high": eps_high}},
        ]

    # A near-zero rate measured at a raised bound says nothing about the symmetric one: silent.
    raised = make_run(tmp_path, "raised", {m.CLIP_UPPER_POSITIVE: 0.001}, callbacks=clip_higher(0.28))
    assert "clip_higher_cannot_matter" not in fired(raised, capsys)
    # Clipping and entropy collapse with a bound below DAPO's 0.28: raise it; at 0.28 already: nothing.
    collapsing = {m.CLIP_UPPER_POSITIVE: 0.02, m.ENTROPY: ramp(1.0, 0.8)}
    low = make_run(tmp_path, "low", collapsing, callbacks=clip_higher(0.24))
    assert advise_main([str(low), "--json"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    helps = [f for f in findings if f["rule"] == "clip_higher_helps"]
    assert helps and "eps_high: 0.28" in helps[0]["yaml"] and "# change" in helps[0]["yaml"]
    assert "clip_higher_helps" not in fired(make_run(tmp_path, "dapo", collapsing, callbacks=clip_higher(0.28)), capsys)
