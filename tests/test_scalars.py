"""What a run shows: the logged TensorBoard scalars equal the documented set (``metric_names.SCALARS``,
the README's table), no two tags carry the same quantity, the TensorBoard layout and HPARAMS entry are
written, the console bar names the phase of the running step and shows the live metrics, and the
typed ``RolloutBatch.correct`` field is what correctness means everywhere."""

from __future__ import annotations

import re
import sys
from itertools import combinations

import pytest
import torch

from helpers.fits import read_scalars
from helpers.paths import REPO
from helpers.technique_batches import CaptureModule, make_batch, step_ctx
from lite_ppo import metric_names as names
from lite_ppo.callbacks import Diagnostics, DynamicSampling
from lite_ppo.callbacks.console import ConsoleProgressBar, phase_text
from lite_ppo.rewards import STATUSES, MathVerifyReward, RewardResult
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import Generation
from lite_ppo.rollout.producer import build_rollout_batch
from lite_ppo.technique import Technique, UpdateStats

STEPS = 2


class HalfRightReward(MathVerifyReward):
    """A verifier stand-in for the random tiny model (which never answers right): a response is
    "correct" when its text has an even number of characters, so groups are mixed, advantages and
    clipping are non-zero, and every quantity moves."""

    def score_batch(self, texts, answers):
        return [RewardResult(1.0, "correct", t) if len(t) % 2 == 0 else RewardResult(0.0, "wrong", t) for t in texts]


class PhaseSpy(Technique):
    """Reads the console bar from inside the step: its description at each phase, its live metrics,
    and checks that the rollout's ``correct`` field is the verifier's verdict."""

    descriptions: list[str] = []
    live: list[dict] = []
    correct_matches_status: list[bool] = []
    callback_types: set[str] = set()
    clock_ticking: list[bool] = []
    validation_phases: list[tuple] = []  # (sanity check?, phase, bar visible, description, clock ticking)

    def _bar(self, trainer) -> ConsoleProgressBar:
        bar = trainer.progress_bar_callback
        assert isinstance(bar, ConsoleProgressBar), type(bar)
        return bar

    def _record(self, trainer) -> None:
        PhaseSpy.descriptions.append(self._bar(trainer).train_progress_bar.description)

    def on_rollout(self, ctx, batch) -> None:
        PhaseSpy.callback_types |= {type(cb).__name__ for cb in ctx.trainer.callbacks}
        ticker = self._bar(ctx.trainer)._ticker  # the bar's clock runs during the step
        PhaseSpy.clock_ticking.append(ticker is not None and ticker.is_alive())
        self._record(ctx.trainer)  # scoring has just finished
        PhaseSpy.live.append(dict(self._bar(ctx.trainer).get_metrics(ctx.trainer, ctx.module)))
        PhaseSpy.correct_matches_status.append(batch.correct.tolist() == [s == "correct" for s in batch.reward_status])

    def on_phase(self, trainer, module) -> None:
        """During the held-out evaluations (before training and at the end): the validation bar the user sees."""
        if trainer.training or module.phase is None:
            return
        bar = self._bar(trainer)
        task_id = bar.val_sanity_progress_bar_id if trainer.sanity_checking else bar.val_progress_bar_id
        task = None if task_id is None else bar.progress.tasks[task_id]
        ticker = bar._ticker
        PhaseSpy.validation_phases.append(
            (
                trainer.sanity_checking,
                module.phase[0],
                task is not None and task.visible,
                None if task is None else task.description,
                ticker is not None and ticker.is_alive(),
            )
        )

    def token_weights(self, ctx, batch) -> None:  # old log-probs are done
        self._record(ctx.trainer)
        return None

    def extra_loss_terms(self, ctx, minibatch):
        self._record(ctx.trainer)
        return {}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_model_path):
    """One CLI fit of the Lite PPO recipe on the tiny model, with overlong reward shaping (so the
    shaped mean reward differs from the accuracy) and the spy."""
    from lite_ppo.cli import main

    tmp = tmp_path_factory.mktemp("scalars")
    PhaseSpy.descriptions, PhaseSpy.live, PhaseSpy.correct_matches_status = [], [], []
    PhaseSpy.callback_types = set()
    PhaseSpy.clock_ticking, PhaseSpy.validation_phases = [], []
    this = sys.modules[__name__].__name__
    main(
        [
            "fit",
            "--config",
            str(REPO / "configs/recipes/lite_ppo.yaml"),
            "--config",
            str(REPO / "configs/models/tiny.yaml"),
            "--model.model_path=builtin:tiny",  # random outputs of varied length: HalfRightReward mixes every group
            "--data.steps_per_epoch",
            str(STEPS),
            "--rollout.reward",
            f"{this}.HalfRightReward",
            "--trainer.callbacks+=lite_ppo.callbacks.OverlongRewardShaping",
            f"--trainer.callbacks+={this}.PhaseSpy",
            # The held-out tiers before and after training, as a researcher's run evaluates them.
            "--trainer.callbacks+=lite_ppo.callbacks.Evaluation",
            "--trainer.callbacks.benchmarks=[]",
            "--trainer.callbacks.evaluate_before_training=true",
            "--trainer.default_root_dir",
            str(tmp),
            "--trainer.logger.init_args.save_dir",
            str(tmp / "tb"),
            "--trainer.logger.init_args.name",
            "run",
            "--trainer.logger.init_args.version",
            "v",
        ]
    )
    return tmp / "tb"


def expected_tags(techniques: list[str]) -> set[str]:
    """The documented set for a single-tier CPU run with an engine that shares the policy weights."""
    tags = {tag for tag in names.SCALARS if "<" not in tag}
    tags |= {names.reward_status_rate(s) for s in STATUSES if s != "correct"}
    for technique in techniques:
        tags |= set(names.TECHNIQUE_SCALARS[technique])
    if torch.cuda.is_available():
        tags.add(names.PEAK_GPU)
    return tags


EVALUATION_TAG = re.compile(r"^(eval|val)/[^/]+/[^/]+$")  # eval/<benchmark>/<metric>, val/<tier>/<metric>


@pytest.mark.slow
def test_logged_scalars_are_the_documented_set(tiny_run):
    scalars = read_scalars(tiny_run)
    training = {tag for tag in scalars if not EVALUATION_TAG.match(tag)}
    expected = expected_tags(["OverlongRewardShaping"])
    assert training == expected, (
        f"logged but undocumented: {sorted(training - expected)}; documented but not logged: "
        f"{sorted(expected - training)}"
    )
    for tag in training:
        assert [step for step, _ in scalars[tag]] == list(range(STEPS)), f"{tag}: {scalars[tag]}"
    # The recipe holds out problems of every tier: their validation columns, once, after training.
    evaluation = set(scalars) - training
    assert {f"val/{tier}/accuracy" for tier in ("easy", "medium", "hard")} <= evaluation, sorted(evaluation)


@pytest.mark.slow
def test_no_two_tags_carry_the_same_quantity(tiny_run):
    """Two tags whose series are identical over the run (and not constant, which says nothing)
    are one quantity logged twice."""
    series = {tag: tuple(round(v, 6) for _, v in points) for tag, points in read_scalars(tiny_run).items()}
    moving = {tag: s for tag, s in series.items() if len(set(s)) > 1}
    assert len(moving) >= 15, f"too few quantities move to compare: {sorted(moving)}"
    duplicates = [(a, b) for a, b in combinations(sorted(moving), 2) if moving[a] == moving[b]]
    assert not duplicates, duplicates


@pytest.mark.slow
def test_layout_and_hparams_are_written(tiny_run):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.hparams import plugin_data_pb2

    layout, experiment = None, None
    for events in tiny_run.rglob("events.out.tfevents.*"):
        for event in EventFileLoader(str(events)).Load():
            for value in event.summary.value:
                plugin = value.metadata.plugin_data
                if plugin.plugin_name == "custom_scalars":
                    layout = layout_pb2.Layout.FromString(value.tensor.string_val[0])
                elif plugin.plugin_name == "hparams":
                    data = plugin_data_pb2.HParamsPluginData.FromString(plugin.content)
                    if data.HasField("experiment"):
                        experiment = data.experiment
    assert layout is not None, "no custom-scalars layout"
    charts = {chart.title: chart for category in layout.category for chart in category.chart}
    for panel in ("accuracy, training (verifier)", "response length, correct", "entropy", "truncation rate"):
        assert panel in charts
    # The run's three tiers have their categories; its technique with tags of its own, its charts.
    assert {"3 tier easy", "3 tier medium", "3 tier hard"} <= {category.title for category in layout.category}
    assert "OverlongRewardShaping: overlong_shaping/penalty_mean" in charts
    # TensorBoard colours a custom-scalars line by run: a chart of two tags of one run draws them in one
    # colour. Every chart draws at most one of the tags this run wrote (a margin chart: one line and its band).
    logged = list(read_scalars(tiny_run))
    for title, chart in charts.items():
        if chart.HasField("margin"):
            series = chart.margin.series
            assert len(series) == 1 and {series[0].value, series[0].lower, series[0].upper} <= set(logged), title
        else:
            drawn = [tag for tag in logged if any(re.search(p, tag) for p in chart.multiline.tag)]
            assert len(drawn) <= 1, (title, drawn)
    assert experiment is not None, "no HPARAMS entry"
    # The metric columns: training accuracy, each tier's held-out accuracy, length, entropy, mixed groups;
    # no benchmark average (this run evaluates no benchmark: the column would stay empty).
    tiers = [f"val/{tier}/accuracy" for tier in ("easy", "medium", "hard")]
    expected = {"reward/accuracy", *tiers, "response/length_mean", "policy/entropy", "groups/mixed"}
    assert {m.name.tag for m in experiment.metric_infos} == expected
    hparams = {h.name for h in experiment.hparam_infos}
    assert {"model/lr", "model/clip_eps", "techniques", "technique/AdvantageNormalization/mean_scope"} <= hparams
    # TensorBoard sorts the columns by (not differs, name) and shows the first few: the settings that tell
    # runs apart come first, not model/betas ... model/gradient_checkpointing.
    shown = sorted(experiment.hparam_infos, key=lambda info: (not info.differs, info.name))[:5]
    assert [info.name for info in shown] == ["model/lora", "model/lr", "model/model_path", "seed", "techniques"]
    # The first row of the custom scalars: training and held-out accuracy and the KL, no empty benchmark chart.
    first = [chart.title for chart in layout.category[0].chart]
    assert first[:5] == [
        "accuracy, training (verifier)",
        "held-out accuracy, easy",
        "held-out accuracy, medium",
        "held-out accuracy, hard",
        "approx KL",
    ]
    assert "accuracy, benchmark average" not in charts
    assert "hp_metric" not in read_scalars(tiny_run)


@pytest.mark.slow
def test_the_bar_names_each_phase_and_shows_the_live_metrics(tiny_run):
    # Per step: scoring (on_rollout), old log-probs, then one description per micro-batch of each of
    # the 2 mini-batches (16 responses, 8 per mini-batch, micro-batches of 8).
    per_step = ["scoring", "old log-probs", "updating 1/2", "updating 2/2"]
    assert len(PhaseSpy.descriptions) == STEPS * len(per_step), PhaseSpy.descriptions
    for i, description in enumerate(PhaseSpy.descriptions):
        assert description.startswith("Training") and description.endswith(per_step[i % len(per_step)]), (
            i,
            description,
        )
    # The live metrics of step 1 are in the bar during step 2 (v_num is gone).
    first, second = PhaseSpy.live
    assert "v_num" not in second and {"acc", "len", "kl", "clip", "s/step"} <= set(second), second
    assert second["len"] > 0 and second["s/step"] > 0
    assert all(PhaseSpy.correct_matches_status) and len(PhaseSpy.correct_matches_status) == STEPS
    # lite-ppo's one-line model summary replaces Lightning's table (whose FLOPs read 0)
    assert "PolicySummary" in PhaseSpy.callback_types and "RichModelSummary" not in PhaseSpy.callback_types
    assert PhaseSpy.clock_ticking == [True] * STEPS


@pytest.mark.slow
def test_the_held_out_evaluations_show_progress_in_a_real_fit(tiny_run):
    """Before training and after it, the held-out evaluation's bar is on screen from its first phase, named
    for what it is, with the clock ticking (it used to stay hidden until a whole batch was done)."""
    seen = PhaseSpy.validation_phases
    assert {sanity for sanity, *_ in seen} == {True, False}, seen  # both evaluations ran
    # The bar hears of a phase after this spy (callback order): the spy sees the first phase of each
    # evaluation before the bar has drawn it, and every later one after it has drawn the previous one.
    later = [record for previous, record in zip(seen, seen[1:]) if previous[0] == record[0]]
    assert len(later) >= 2 and {sanity for sanity, *_ in later} == {True, False}, seen
    for sanity, phase, visible, description, ticking in later:
        title = "Validating before training" if sanity else "Validation"
        assert visible and ticking and description.startswith(f"{title} "), (sanity, phase, description, ticking)
    assert {phase for _, phase, *_ in seen} >= {"generating", "scoring"}, seen


def test_summary_line_and_phase_text():
    bar = ConsoleProgressBar()
    trainer = type("T", (), {})()
    trainer.num_training_batches, trainer.max_epochs = 3, 2
    trainer.callback_metrics = {
        names.REWARD_ACCURACY: torch.tensor(0.40625),
        names.RESPONSE_LENGTH: torch.tensor(23.125),
        names.APPROX_KL: torch.tensor(0.0021),
        names.STEP_SECONDS: torch.tensor(12.34),
    }
    # The clip fraction was not logged this step: left out rather than shown as 0.
    assert bar.summary_line(trainer, 3) == "step 3/6 | acc 0.406 | len 23.1 | kl 0.0021 | 12.3 s"
    assert ConsoleProgressBar(summary_metrics={"mixed": names.GROUPS_MIXED}).summary_line(trainer, 1) == "step 1/6"
    # GSPO, CISPO, SAPO log no clip/fraction: their own figure stands in for it.
    for tag, shown in (
        (names.GSPO_CLIP_FRACTION, "clip 0.25"),
        (names.CISPO_CLIPPED_FRACTION, "clip 0.25"),
        (names.SAPO_GRAD_SCALE_POSITIVE, "gate+ 0.25"),
    ):
        trainer.callback_metrics = {names.APPROX_KL: torch.tensor(0.0021), tag: torch.tensor(0.25)}
        assert bar.summary_line(trainer, 1) == f"step 1/6 | kl 0.0021 | {shown}"
    assert (
        phase_text(("updating", 2, 4)) == "updating 2/4"
        and phase_text(("generating", 0, 0)) == "generating"
        and phase_text(None) == ""
    )
    with pytest.raises(ValueError):
        ConsoleProgressBar(summary_every_n_steps=-1)


def test_validation_bars_show_from_their_first_phase():
    """Lightning adds a validation bar hidden until its first batch ends; one large batch (the held-out
    problems before training) would leave the screen empty for minutes. The first phase shows it."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks.progress.rich_progress import CustomProgress

    for sanity in (True, False):
        bar = ConsoleProgressBar()
        bar.progress = CustomProgress(auto_refresh=False)  # what Lightning's bar draws with
        task = bar.progress.add_task("Validation", total=1, visible=False)
        bar.val_sanity_progress_bar_id, bar.val_progress_bar_id = (task, None) if sanity else (None, task)
        trainer = SimpleNamespace(training=False, sanity_checking=sanity, validating=not sanity)
        bar.on_phase(trainer, SimpleNamespace(phase=("generating", 0, 0)))
        shown = bar.progress.tasks[0]
        assert shown.visible and shown.completed == 0
        expected = "Validating before training generating" if sanity else "Validation generating"
        assert shown.description == expected, shown.description


def _rendered_bar(bar, width: int, metric_columns) -> list[str]:
    """The lines of one training task drawn at ``width`` columns with ``bar``'s columns."""
    import io

    from lightning.pytorch.callbacks.progress.rich_progress import CustomProgress
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    progress = CustomProgress(*bar.configure_columns(None), *metric_columns, console=console, auto_refresh=False)
    progress.add_task("Training updating 4/4", total=20, completed=3)
    console.print(progress.make_tasks_table(progress.tasks))
    return console.file.getvalue().rstrip("\n").splitlines()


def test_the_bar_is_one_line_that_fits_the_terminal():
    """Lightning's columns (with its it/s) wrap long metrics onto more lines at 100 columns; the console
    bar draws one line within the width, cut with an ellipsis, and drops it/s."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks.progress.rich_progress import MetricsTextColumn, RichProgressBar

    from lite_ppo.callbacks.console import _OneLine

    def metrics_column(bar):
        trainer = SimpleNamespace(
            state=SimpleNamespace(fn="fit"), sanity_checking=False, training=False, progress_bar_callback=bar
        )
        bar.train_progress_bar_id = 0
        column = MetricsTextColumn(trainer, "white", " ", ".3g")
        column.update({"acc": 0.535, "len": 45.0, "clip": 0.0111, "kl": 0.00432, "s/step": 2.83, "extra": 1.5})
        return column

    lightning = RichProgressBar()
    assert len(_rendered_bar(lightning, 100, [metrics_column(lightning)])) > 1  # the control: it wraps
    bar = ConsoleProgressBar()
    for width in (80, 100, 120):
        lines = _rendered_bar(bar, width, [_OneLine(metrics_column(bar))])
        assert len(lines) == 1 and len(lines[0]) <= width, lines
        assert "3/20" in lines[0] and "it/s" not in lines[0] and "acc: 0.535" in lines[0], lines
    assert _rendered_bar(bar, 100, [_OneLine(metrics_column(bar))])[0].rstrip().endswith("\N{HORIZONTAL ELLIPSIS}")


def test_the_clock_ticks_inside_a_phase():
    """Lightning's bar redraws only on a change, so a minute of generating read 0:00:00: the console's
    ticker asks for a redraw on its own."""
    import time
    from types import SimpleNamespace

    from lite_ppo.callbacks.console import _Ticker

    asked = []
    bar = SimpleNamespace(progress=SimpleNamespace(soft_refresh=lambda: asked.append(time.monotonic())))
    ticker = _Ticker(bar, interval=0.01)
    ticker.start()
    deadline = time.monotonic() + 10
    while len(asked) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    ticker.stop()
    ticker.join(timeout=5)
    assert len(asked) >= 3 and not ticker.is_alive()
    # A bar with a running ticker still pickles (spawned processes copy the callbacks).
    import pickle

    bar = ConsoleProgressBar()
    bar._ticker = _Ticker(bar)
    assert pickle.loads(pickle.dumps(bar))._ticker is None


def test_the_model_summary_is_one_line_and_start_up_noise_is_filtered():
    import logging

    from lightning.pytorch import LightningModule
    from lightning.pytorch.utilities.model_summary import summarize

    from lite_ppo.callbacks.console import _StartupNoise, summary_line

    class Holder(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.policy = torch.nn.Linear(10, 10)

    holder = Holder()
    summary = summarize(holder)
    line = summary_line(summary._get_summary_data(), summary.total_parameters, summary.trainable_parameters, 0.0)
    assert line == "model: policy Linear, 110 parameters, 110 trainable (0.0 MB)"  # 10 x 10 + 10
    holder.policy.requires_grad_(False)
    summary = summarize(holder)
    assert ", 0 trainable" in summary_line(
        summary._get_summary_data(), summary.total_parameters, summary.trainable_parameters, 0.0
    )

    def shown(message: str) -> bool:
        return _StartupNoise().filter(logging.LogRecord("x", logging.INFO, "f", 1, message, None, None))

    assert not shown("GPU available: False, used: False") and not shown("TPU available: False, using: 0 TPU cores")
    assert not shown("Loading `train_dataloader` to estimate number of stepping batches.")
    assert shown("GPU available: True (cuda), used: False")  # something a user can act on stays
    assert shown("lite-ppo fit: run folder runs/x")


# -- the documented set itself --------------------------------------------------------------------
def test_scalar_table_lists_every_documented_tag_once():
    table = names.scalar_table_markdown()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    tags = [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]
    assert len(tags) == len(set(tags))
    assert set(names.SCALARS) | set(names.CONDITIONAL_SCALARS) <= set(tags)
    assert {f"tier/<t>/{s}" for s in names.TIER_SCALARS} <= set(tags)


def test_layout_charts_only_documented_tags():
    documented = set(names.SCALARS) | set(names.CONDITIONAL_SCALARS) | {names.reward_status_rate(s) for s in STATUSES}
    documented |= {tag for tags in names.TECHNIQUE_SCALARS.values() for tag in tags}  # charts of a technique's own tags
    for tier in ("easy", "hard"):
        documented |= {names.tier_tag(tier, s) for s in names.TIER_SCALARS} | {names.val_accuracy(tier)}
    layout = names.custom_scalars_layout(["easy", "hard"], list(names.TECHNIQUE_SCALARS))
    assert "3 tier hard" in layout and "4 techniques" in layout
    for category in layout.values():
        for title, (kind, tags) in category.items():
            if kind == "Margin":  # exact tags: value, lower, upper
                assert len(tags) == 3 and set(tags) <= documented, title
            else:
                assert kind == "Multiline"
                for pattern in tags:
                    assert sum(bool(re.search(pattern, tag)) for tag in documented) == 1, (title, pattern)
    # One tier: tier/<t>/* is not logged, so the tier has no category; its held-out accuracy is on the first row.
    one = names.custom_scalars_layout(["easy"])
    assert "3 tier easy" not in one and "held-out accuracy, easy" in one["1 paper panels"]
    assert "accuracy, benchmark average" not in one["1 paper panels"]
    assert "accuracy, benchmark average" in names.custom_scalars_layout(["easy"], benchmarks=True)["1 paper panels"]


# -- the typed correctness field -----------------------------------------------------------------
def test_correct_field_is_filled_kept_and_defaulted():
    gens = [[Generation([5, 6], False), Generation([7], True)], [Generation([8, 9, 10], False)]]
    batch = build_rollout_batch(
        [[1, 2], [3]], gens, [1.0, -0.5, 0.0], pad_id=0, temperature=1.0, correct=[True, False, False]
    )
    assert batch.correct.dtype == torch.bool and batch.correct.tolist() == [True, False, False]
    assert batch.select(torch.tensor([2, 0])).correct.tolist() == [False, True]
    both = RolloutBatch.concat([batch, batch.select(torch.tensor([0]))], pad_token_id=0)
    assert both.correct.tolist() == [True, False, False, True]
    # Built without verdicts (hand-made batches): reward > 0.5.
    assert build_rollout_batch([[1]], [[Generation([5], False)] * 2], [1.0, 0.25], 0, 1.0).correct.tolist() == [
        True,
        False,
    ]


def test_correctness_is_the_field_not_the_shaped_reward():
    # Rewards shaped so that a wrong response scores higher than a right one; statuses absent.
    batch = make_batch([0.2, 0.9, 0.9, 0.9], [0, 0, 1, 1], [2, 2, 3, 1])
    batch.correct = torch.tensor([True, False, False, False])
    module = CaptureModule()
    diag = Diagnostics(ngram=2, repetition_window=None)
    diag.on_rollout(step_ctx(module.trainer, module), batch)
    batch.advantages = torch.zeros(4)
    diag.on_update_end(step_ctx(module.trainer, module), batch, UpdateStats())
    m = module.logged
    assert m["reward/accuracy"] == 0.25 and m["groups/mixed"] == 0.5 and m["groups/all_wrong"] == 0.5
    assert m["response/length_mean_correct"] == 2 and m["response/length_mean_wrong"] == pytest.approx(6 / 3)
    assert DynamicSampling(metric="correct").keep_groups(step_ctx(None, None), batch).tolist() == [
        True,
        True,
        False,
        False,
    ]


def test_vllm_logging_level_and_repeats_shown_once(caplog):
    """The engine's log_level reaches vLLM's loggers and a repeated message passes once, through the
    handler vLLM installs (a stand-in here: the check needs no vLLM)."""
    import logging

    from lite_ppo.rollout.vllm import _quiet_vllm_logging

    root = logging.getLogger("vllm")
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(record.getMessage())
    root.addHandler(handler)
    old_level, old_propagate = root.level, root.propagate
    try:
        root.propagate = False
        _quiet_vllm_logging("WARNING")
        worker = logging.getLogger("vllm.v1.worker.cpu_worker")
        for _ in range(4):
            worker.warning("the KV cache is nearly full")
        worker.info("Processed prompts")  # below WARNING
        logging.getLogger("vllm.other").warning("another message")
        # start-up advice a lite-ppo user cannot act on (the LD_PRELOAD tip, Triton on a CPU) is dropped
        worker.warning("libtcmalloc is not found in LD_PRELOAD. For best performance, please follow ...")
        logging.getLogger("vllm.triton_utils.importing").warning(
            "Triton is installed, but doesn't include CPU backend. Disabling Triton."
        )
        assert seen == ["the KV cache is nearly full", "another message"]
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        root.propagate = old_propagate


def test_vllm_start_up_noise_is_shown_at_info():
    import logging

    from lite_ppo.rollout.vllm import _OncePerMessage

    def passes(f, message):
        return f.filter(logging.LogRecord("vllm.x", logging.WARNING, "f", 1, message, None, None))

    noisy = "libiomp is not found in LD_PRELOAD. For best performance ..."
    assert not passes(_OncePerMessage(drop_noise=True), noisy)
    assert passes(_OncePerMessage(drop_noise=False), noisy)  # log_level INFO / DEBUG: everything, once


def test_docs_scalar_table_is_the_generated_one():
    """docs/tensorboard.md (linked from the README) shows exactly the table rendered from
    ``metric_names``: a tag added, renamed or re-described without regenerating it fails here."""
    page = (REPO / "docs" / "tensorboard.md").read_text()
    begin = page.index("-->", page.index("<!-- scalar-table:begin")) + len("-->\n")
    end = page.index("<!-- scalar-table:end -->")
    assert page[begin:end] == names.scalar_table_markdown()


def test_planned_rollout_steps_and_the_short_run_note():
    from lite_ppo.training.schedule import planned_rollout_steps, short_run_note

    def trainer(batches, epochs, max_steps):
        fields = {"num_training_batches": batches, "max_epochs": epochs, "max_steps": max_steps}
        return type("T", (), {**fields, "estimated_stepping_batches": 0})()

    # The case: 20 rollout steps of 4 optimizer steps, max_steps 12 -> 3 rollout steps, not 20.
    assert planned_rollout_steps(trainer(20, 1, 12), 4) == 3
    assert planned_rollout_steps(trainer(20, 2, -1), 4) == 40
    assert planned_rollout_steps(trainer(20, 1, 200), 4) == 20
    assert planned_rollout_steps(trainer(float("inf"), -1, 10), 4) == 3  # ceil(10 / 4)
    assert planned_rollout_steps(trainer(float("inf"), -1, -1), 4) is None
    note = short_run_note(trainer(20, 1, 12), 4)
    assert "stops after 3 of the epoch's 20 rollout steps" in note and "--data.steps_per_epoch=3" in note
    assert short_run_note(trainer(20, 1, 80), 4) is None and short_run_note(trainer(20, 1, -1), 4) is None
