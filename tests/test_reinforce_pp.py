"""REINFORCE++ and REINFORCE++-baseline advantages: hand-computed cases, a second implementation over
the expanded token list (Python's ``statistics``), the estimator through a real training step, and the
conflict with a second estimator at fit start. The 2-process equality of the global statistics is in
tests/test_distributed.py."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers.technique_fit import GROUPS, LENGTHS, REWARDS, fit_step, logged, rollout
from lite_ppo.callbacks import AdvantageNormalization, LossAggregation, ReinforcePlusPlus
from lite_ppo.errors import UserError
from lite_ppo.ops.reinforce_pp import group_baseline_residuals, reinforce_pp_advantages, whitened
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.strategies.ranks import Ranks


def reference(rewards, groups, lengths, group_baseline, weighting="token", eps=1e-8) -> list[float]:
    """REINFORCE++ as verl computes it, written out: every token of response i carries x_i, and the
    tokens (or, per sample, the responses) are whitened with their mean and Bessel std."""
    x = list(rewards)
    if group_baseline:
        members = {g: [r for r, h in zip(rewards, groups) if h == g] for g in set(groups)}
        x = [r - (statistics.fmean(members[g]) if len(members[g]) > 1 else 0.0) for r, g in zip(rewards, groups)]
    pool = [v for v, n in zip(x, lengths) for _ in range(n)] if weighting == "token" else x
    mean, var = statistics.fmean(pool), statistics.variance(pool)
    return [(v - mean) / (var + eps) ** 0.5 for v in x]


def test_reinforce_pp_by_hand():
    # Rewards [1, 0] of lengths [1, 3]: the tokens carry [1, 0, 0, 0], mean 1/4, Bessel std 1/2.
    got = reinforce_pp_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.tensor([1.0, 3.0]), eps=0.0)
    torch.testing.assert_close(got, torch.tensor([1.5, -0.5], dtype=torch.float64))
    # Per response: [1, 0], mean 1/2, std sqrt(1/2).
    got = reinforce_pp_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.ones(2), eps=0.0)
    torch.testing.assert_close(got, torch.tensor([0.5, -0.5], dtype=torch.float64) * 2**0.5)


def test_reinforce_pp_baseline_by_hand():
    # g0 = [1, 0, 0], g1 = [1, 1] (lengths 1 each): residuals [2/3, -1/3, -1/3, 0, 0], mean 0,
    # Bessel variance (4/9 + 1/9 + 1/9) / 4 = 1/6.
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 1, 1])
    torch.testing.assert_close(
        group_baseline_residuals(rewards, groups), torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0], dtype=torch.float64)
    )
    got = reinforce_pp_advantages(rewards, groups, torch.ones(5), group_baseline=True, eps=0.0)
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0], dtype=torch.float64) * 6**0.5
    torch.testing.assert_close(got, expected)
    # Without the baseline the all-correct group g1 gets a positive advantage: the batch is the reference.
    plain = reinforce_pp_advantages(rewards, groups, torch.ones(5), eps=0.0)
    assert plain[3] > 0 and plain[4] > 0 and abs(float(got[3])) < 1e-12 and abs(float(got[4])) < 1e-12


def test_a_group_of_one_has_no_baseline():
    # verl: a prompt with one response keeps its reward (baseline 0), not r - r = 0.
    residuals = group_baseline_residuals(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([4, 4, 7]))
    torch.testing.assert_close(residuals, torch.tensor([0.5, -0.5, 1.0], dtype=torch.float64))


def test_equal_returns_give_zero_advantages():
    got = reinforce_pp_advantages(torch.ones(4), torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 2, 3, 4]))
    assert torch.equal(got, torch.zeros(4, dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 1.0, 0.5]), st.integers(1, 6)), min_size=2, max_size=9),
    st.booleans(),
    st.sampled_from(["token", "sample"]),
)
def test_matches_the_token_expanded_reference(rows, group_baseline, weighting):
    groups, rewards, lengths = ([r[i] for r in rows] for i in range(3))
    weights = torch.tensor(lengths, dtype=torch.float64) if weighting == "token" else torch.ones(len(rows))
    assume(weights.sum() > 1)
    got = reinforce_pp_advantages(torch.tensor(rewards), torch.tensor(groups), weights, group_baseline)
    want = reference(rewards, groups, lengths, group_baseline, weighting)
    # float64 on both sides; with equal returns the variance is 0 and both divide 0 by sqrt(1e-8).
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)


def test_whitening_with_given_global_statistics():
    got = whitened(torch.tensor([1.0, 3.0]), torch.ones(2), eps=0.0, stats=(torch.tensor(2.0), torch.tensor(4.0)))
    torch.testing.assert_close(got, torch.tensor([-0.25, 0.25], dtype=torch.float64))


def test_estimator_logs_its_statistics_and_validates_settings():
    batch = rollout()
    module = SimpleNamespace(step_metrics=StepMetrics())
    trainer = SimpleNamespace(world_size=1)
    got = ReinforcePlusPlus(group_baseline=True).compute_advantages(trainer, module, batch)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(reference(REWARDS, GROUPS, LENGTHS, True)), rtol=1e-6, atol=1e-7)
    scalars = module.step_metrics.compute(Ranks(None))
    x = [r - m for r, m in zip(REWARDS, [0.5, 0.5, 2 / 3, 2 / 3, 2 / 3, 0.0])]  # group of one: baseline 0
    tokens = [v for v, n in zip(x, LENGTHS) for _ in range(n)]
    assert float(scalars["reinforce_pp/return_mean"]) == pytest.approx(statistics.fmean(tokens), rel=1e-6)
    assert float(scalars["reinforce_pp/return_std"]) == pytest.approx(statistics.stdev(tokens), rel=1e-6)
    for kwargs, match in [({"weighting": "tokens"}, "choose token or sample"), ({"eps": -1.0}, "must be >= 0")]:
        with pytest.raises(UserError, match=match) as err:
            ReinforcePlusPlus(**kwargs)
        assert "\n" not in str(err.value)


def test_second_estimator_is_refused_at_fit_start_naming_both(tiny_model_path, monkeypatch):
    from lite_ppo import LitePPO

    def no_weights(self):
        raise AssertionError("configure_model ran: the conflict must be refused before the weights load")

    monkeypatch.setattr(LitePPO, "configure_model", no_weights)
    with pytest.raises(UserError, match="AdvantageNormalization and ReinforcePlusPlus both compute advantages") as err:
        fit_step(tiny_model_path, [AdvantageNormalization(), ReinforcePlusPlus()])
    assert "\n" not in str(err.value)


@pytest.mark.numerics
def test_reinforce_pp_baseline_step_through_the_module(tiny_model_path, tmp_path):
    """One real step (per-response statistics): the advantages are the reference's, the statistics
    are logged, and the policy loss (ratio 1, token-mean) is -sum_i A_i L_i / sum_i L_i."""
    techniques = [ReinforcePlusPlus(group_baseline=True, weighting="sample"), LossAggregation("token-mean")]
    record = fit_step(tiny_model_path, techniques, log_dir=tmp_path)
    advantages = reference(REWARDS, GROUPS, LENGTHS, group_baseline=True, weighting="sample")
    torch.testing.assert_close(record.batch.advantages, torch.tensor(advantages), rtol=1e-6, atol=1e-7)
    scalars = logged(tmp_path)
    x = [r - m for r, m in zip(REWARDS, [0.5, 0.5, 2 / 3, 2 / 3, 2 / 3, 0.0])]  # group of one: baseline 0
    assert scalars["reinforce_pp/return_mean"] == pytest.approx(statistics.fmean(x), rel=1e-6)
    assert scalars["reinforce_pp/return_std"] == pytest.approx(statistics.stdev(x), rel=1e-6)
    expected = -sum(a * n for a, n in zip(advantages, LENGTHS)) / sum(LENGTHS)
    assert abs(expected) > 0.1  # per-response whitening: the token mean of A is not 0 here
    # float32: 17 token terms of order 1 summed, then one division: <= 18 * 2^-24 ~ 1.1e-6 relative, so 1e-5
    assert scalars["loss/policy"] == pytest.approx(expected, rel=1e-5)
