"""Diagnostics: values on a constructed batch where clip fractions, entropy and correlation are known
by hand, the per-tier breakdown, refill rounds, and the repetition / correlation definitions."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from helpers.constructed_fit import (
    LENGTHS,
    RATIOS,
    V,
    entropy_at_ratio,
    fit_constructed,
)
from helpers.fits import read_scalars
from helpers.technique_batches import CaptureModule, make_batch, step_ctx
from lite_ppo.callbacks import ClipHigher, Diagnostics, OverlongFilter
from lite_ppo.ops.correlation import pearson_correlation
from lite_ppo.ops.repetition import repeated_ngram_share, repetition_shares
from lite_ppo.technique import UpdateStats


def test_constructed_batch_through_the_module(tmp_path):
    s, log_dir = fit_constructed(tmp_path)
    approx = lambda v: pytest.approx(v, rel=1e-4, abs=1e-6)  # noqa: E731
    # Clip fractions over the 9 loss tokens: row 0 (A > 0, rho 1.5 > 1.2, 3 tokens) at the upper bound,
    # row 1 (A < 0, rho 0.5 < 0.8, 2 tokens) at the lower bound; rows 2 and 3 inside.
    assert s["clip/fraction"] == approx(5 / 9)
    # Conditional on the advantage sign: 6 tokens with A > 0 (3 clipped), 3 with A < 0 (2 clipped).
    assert s["clip/upper_of_positive"] == approx(0.5)
    assert s["clip/lower_of_negative"] == approx(2 / 3)
    assert not {"clip/upper_inactive", "clip/lower_inactive", "clip/dual_of_negative", "loss/total"} & set(s)
    # Entropy of softmax with logit x on one token and 0 on the other V - 1, token-weighted.
    entropy = sum(n * entropy_at_ratio(r) for n, r in zip(LENGTHS, RATIOS)) / 9
    assert s["policy/entropy"] == approx(entropy)
    assert entropy_at_ratio(1.0) == pytest.approx(math.log(V))
    assert s["policy/approx_kl"] == approx(sum(n * ((r - 1) - math.log(r)) for n, r in zip(LENGTHS, RATIOS)) / 9)
    assert s["policy/ratio_max"] == approx(1.5) and s["policy/ratio_min"] == approx(0.5)
    # Pearson(length, advantage): lengths [3, 2, 3, 1] vs [1, -1, 1, -1] -> 3 / sqrt(11).
    assert s["update/length_advantage_corr"] == approx(3 / math.sqrt(11))
    assert s["update/advantage_mean"] == 0 and s["update/loss_token_fraction"] == 1
    assert s["update/advantage_min"] == -1 and s["update/advantage_max"] == 1
    # Generation view (no rollout callback here: read from the trained batch).
    assert s["reward/mean"] == approx(0.75) and s["reward/std"] == approx(0.5) and s["reward/accuracy"] == approx(0.75)
    assert (s["groups/all_correct"], s["groups/all_wrong"], s["groups/mixed"]) == (0.5, 0.0, 0.5)
    assert s["response/length_mean"] == approx(9 / 4) and s["response/length_max"] == 3
    assert s["response/generated_tokens"] == 3 + 2 + 3 + 1  # the step's response tokens (lengths 3, 2, 3, 1)
    assert s["response/truncation_rate"] == 0.5
    # Truncated rows [7, 7, 7] (bigram share 1/2: repetitive) and [7, 8, 9] (0): rate 1/2, mean share 1/4.
    assert s["response/repetition_rate_truncated"] == 0.5
    assert s["response/repetition_rate_finished"] == 0
    # Correct rows 0, 2, 3 (lengths 3, 3, 1), wrong row 1 (length 2); one prompt token each.
    assert s["response/length_mean_correct"] == approx(7 / 3) and s["response/length_mean_wrong"] == 2
    assert s["prompt/length_mean"] == 1 and s["prompt/length_max"] == 1
    assert s["reward/wrong_rate"] == 0.25 and s["reward/unparsed_rate"] == 0
    # Per tier.
    assert s["tier/easy/share_of_prompts"] == 0.5 and s["tier/hard/share_of_prompts"] == 0.5
    assert s["tier/easy/accuracy"] == 0.5 and s["tier/hard/accuracy"] == 1.0
    assert s["tier/easy/groups_mixed"] == 1.0 and s["tier/hard/groups_all_correct"] == 1.0
    assert s["tier/easy/length_mean"] == approx(2.5) and s["tier/hard/length_mean"] == approx(2.0)
    assert s["tier/easy/truncation_rate"] == 0.5 and s["tier/hard/repetition_rate_truncated"] == 0
    assert s["tier/easy/share_of_loss_tokens"] == approx(5 / 9) and s["tier/hard/share_of_loss_tokens"] == approx(4 / 9)
    assert s["tier/easy/advantage_nonzero_share"] == 1.0
    # The length histograms sit at the step of the scalars.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = next(log_dir.rglob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events), size_guidance={"histograms": 0})
    acc.Reload()
    assert {"response/length", "groups/correct_per_group", "tier/easy/length", "tier/hard/length"} <= set(
        acc.Tags()["histograms"]
    )
    per_group = acc.Histograms("groups/correct_per_group")[-1].histogram_value
    assert (per_group.num, per_group.min, per_group.max, per_group.sum) == (2, 1, 2, 3)  # g0: 1 of 2, g1: 2 of 2
    hist = acc.Histograms("response/length")[-1]
    assert hist.histogram_value.num == 4 and hist.histogram_value.max == 3
    assert hist.step == read_scalars(log_dir)["clip/fraction"][-1][0]


def test_clip_higher_and_overlong_filter_move_the_diagnostics(tmp_path):
    # eps_high 0.6: rho 1.5 stays inside. The filter removes rows 0 and 2 (truncated) from the loss.
    s, _ = fit_constructed(tmp_path, ClipHigher(0.2, 0.6), OverlongFilter())
    assert s["clip/upper_of_positive"] == 0
    # Loss tokens now rows 1 (2 tokens, A < 0, clipped at the lower bound) and 3 (1 token, A < 0).
    assert s["clip/lower_of_negative"] == pytest.approx(2 / 3)
    assert s["update/loss_token_fraction"] == pytest.approx(3 / 9)
    assert s["tier/easy/share_of_loss_tokens"] == pytest.approx(2 / 3)
    assert s["overlong_filter/masked_response_share"] == 0.5


def test_generation_view_counts_every_refill_round():
    diag = Diagnostics(ngram=2, repetition_window=None)
    module = CaptureModule()
    # Round 1: g0 all wrong (easy), g1 mixed (hard). Round 2: g0 all correct (hard). Group ids restart.
    r1 = make_batch(
        [0, 0, 1, 0],
        [0, 0, 1, 1],
        [2, 2, 4, 4],
        truncated=[False, False, True, True],
        statuses=["wrong", "wrong", "correct", "wrong"],
        tiers=["easy", "easy", "hard", "hard"],
        width=4,
    )
    r2 = make_batch([1, 1], [0, 0], [1, 3], statuses=["correct", "correct"], tiers=["hard", "hard"], width=4)
    diag.on_rollout(step_ctx(module.trainer, module), r1)
    diag.on_rollout(step_ctx(module.trainer, module), r2)
    # Dynamic sampling kept only r1's mixed group.
    final = r1.select(torch.tensor([2, 3]))
    final.advantages = torch.tensor([1.0, -1.0])
    diag.on_update_end(step_ctx(module.trainer, module), final, UpdateStats())
    m = module.logged
    assert (m["groups/all_correct"], m["groups/all_wrong"], m["groups/mixed"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert m["reward/accuracy"] == pytest.approx(3 / 6)
    assert m["response/length_mean"] == pytest.approx(16 / 6)
    assert m["tier/easy/share_of_prompts"] == pytest.approx(1 / 3) and m["tier/hard/share_of_prompts"] == pytest.approx(
        2 / 3
    )
    assert m["tier/hard/groups_mixed"] == pytest.approx(0.5) and m["tier/hard/groups_all_correct"] == pytest.approx(0.5)
    assert m["tier/hard/accuracy"] == pytest.approx(3 / 4) and m["tier/easy/accuracy"] == 0
    # Update view: the kept group only. Lengths equal -> correlation 0 by definition.
    assert m["update/length_advantage_corr"] == 0
    assert m["tier/hard/share_of_loss_tokens"] == 1.0 and "tier/easy/share_of_loss_tokens" not in m
    # Records are cleared after each step.
    diag.on_update_end(step_ctx(module.trainer, module), final, UpdateStats())
    assert module.logged["groups/mixed"] == 1.0


def test_repeated_ngram_share_definition():
    assert repeated_ngram_share([1, 2, 3, 1, 2, 3, 1, 2, 3], n=2) == pytest.approx(5 / 8)
    assert repeated_ngram_share([1, 2, 3, 4, 5, 6], n=2) == 0.0
    assert repeated_ngram_share([4, 4, 4, 4], n=1) == pytest.approx(3 / 4)
    assert repeated_ngram_share([1, 2], n=4) == 0.0  # too short to repeat
    # Only the tail window counts: a loop at the end is found however long the preamble.
    tail = [9, 8] * 10
    assert repeated_ngram_share(list(range(100, 200)) + tail, n=4, window=20) == pytest.approx(
        (20 - 2 - 4 + 1) / (20 - 4 + 1)
    )
    # A cycle of period p over L tokens: (L - p - n + 1) / (L - n + 1).
    cycle = [1, 2, 3, 4, 5] * 6
    assert repeated_ngram_share(cycle, n=4) == pytest.approx((30 - 5 - 4 + 1) / (30 - 4 + 1))
    ids = torch.tensor([[1, 1, 1, 0], [1, 2, 3, 4]])
    torch.testing.assert_close(
        repetition_shares(ids, torch.tensor([3, 4]), n=1, window=None), torch.tensor([2 / 3, 0.0])
    )


@pytest.mark.parametrize("window", [None, 1, 7, 40, 100])
def test_batched_repetition_shares_equal_the_per_response_definition(window):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 5, (50, 40), generator=gen)
    lengths = torch.randint(0, 41, (50,), generator=gen)
    expected = torch.tensor([repeated_ngram_share(ids[i, : lengths[i]].tolist(), 3, window) for i in range(50)])
    assert torch.equal(repetition_shares(ids, lengths, 3, window), expected)


def test_pearson_correlation_by_hand():
    x = torch.tensor([3.0, 2.0, 3.0, 1.0])
    y = torch.tensor([1.0, -1.0, 1.0, -1.0])
    assert float(pearson_correlation(x, y)) == pytest.approx(3 / math.sqrt(11), rel=1e-6)
    assert float(pearson_correlation(x, -2 * y + 5)) == pytest.approx(-3 / math.sqrt(11), rel=1e-6)
    assert float(pearson_correlation(x, torch.ones(4))) == 0.0
    assert float(pearson_correlation(x, y, mask=torch.tensor([True, False, False, True]))) == pytest.approx(1.0)
    assert float(pearson_correlation(torch.tensor([1.0]), torch.tensor([2.0]))) == 0.0


def test_hparams_leave_out_lightning_entries_and_show_booleans_as_words():
    """The HPARAMS tab: no ``model/_instantiator`` column (Lightning's bookkeeping), and a boolean
    setting as true/false (TensorBoard's summary stores a Python bool as the number 1.0)."""
    from lite_ppo.callbacks import AdvantageNormalization
    from lite_ppo.callbacks.diagnostics import run_hparams

    module = SimpleNamespace(hparams={"lr": 1e-6, "pack_prompts": True, "_instantiator": "lightning.cli..."})
    trainer = SimpleNamespace(datamodule=None)
    params = run_hparams(trainer, module, [AdvantageNormalization(count_truncated=False)])
    assert not [key for key in params if "_instantiator" in key]
    assert params["model/lr"] == 1e-6 and params["model/pack_prompts"] == "true"
    assert params["technique/AdvantageNormalization/count_truncated"] == "false"
    assert params["techniques"] == "AdvantageNormalization"


def test_the_benchmark_average_chart_follows_what_the_data_module_validates():
    """The TensorBoard layout charts a benchmark average only when validation includes a benchmark:
    Diagnostics asks the data module (the sets given to ``configure_validation``), not a sibling callback."""
    from lite_ppo.callbacks.diagnostics import _evaluated
    from lite_ppo.data import MathDataModule, Problem

    datamodule = MathDataModule(prompts_per_step=4, val_size=1)
    trainer = SimpleNamespace(datamodule=datamodule, callbacks=[])
    tiers = ["easy", "medium", "hard"]
    assert _evaluated(trainer) == (tiers, tiers, False)
    datamodule.configure_validation([], batch_size=2)  # held-out tiers only, as `lite-ppo fit` by default
    assert _evaluated(trainer)[2] is False
    datamodule.configure_validation([("mini", [Problem("m1", "1 + 1?", "2", "mini")])], batch_size=2)
    assert datamodule.validation_sets == ["mini"] and _evaluated(trainer)[2] is True


def test_a_run_without_held_out_problems_charts_no_held_out_accuracy():
    """``val_size: 0`` (or ``limit_val_batches: 0``): no held-out accuracy is logged, so the first row
    of the custom scalars and the HPARAMS columns leave it out; the training tiers keep their charts."""
    from lite_ppo import metric_names as names
    from lite_ppo.callbacks.diagnostics import _evaluated
    from lite_ppo.data import MathDataModule

    tiers = ["easy", "medium", "hard"]
    for datamodule, limit in ((MathDataModule(prompts_per_step=4, val_size=0), 1.0), (MathDataModule(val_size=2), 0)):
        trainer = SimpleNamespace(datamodule=datamodule, callbacks=[], limit_val_batches=limit)
        _, held_out, benchmarks = _evaluated(trainer)
        assert (held_out, benchmarks) == ([], False)
        layout = names.custom_scalars_layout(tiers, [], benchmarks, held_out)
        assert not [title for title in layout["1 paper panels"] if title.startswith("held-out")]
        assert {"3 tier easy", "3 tier medium", "3 tier hard"} <= set(layout)
        assert not [tag for tag in names.hparam_metrics(held_out, benchmarks) if tag.startswith("val/")]
