"""REINFORCE++ and REINFORCE++-baseline advantages: hand-computed cases, a second implementation over
the expanded token list (Python's ``statistics``), the estimator through a real training step, and the
conflict with a second estimator at fit start; the KL-shaped return (per-token advantages) by hand,
written out against log-probs scored by transformers directly, and refused with GSPO's sequence ratio.
The 2-process equality of the global statistics (KL-shaped too) is in tests/test_distributed.py."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers.technique_batches import step_ctx
from helpers.technique_fit import GROUPS, LENGTHS, REWARDS, fit_step, logged, rollout
from lite_ppo.callbacks import AdvantageNormalization, LossAggregation, ReinforcePlusPlus
from lite_ppo.errors import UserError
from lite_ppo.ops.reinforce_pp import group_baseline_residuals, kl_shaped_returns, reinforce_pp_advantages, whitened
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
    got = ReinforcePlusPlus(group_baseline=True).compute_advantages(step_ctx(trainer, module), batch)
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


# -- the KL-shaped return ----------------------------------------------------------------------------


def shaped_reference(x, kl_rows, beta, eps=1e-8) -> list[list[float]]:
    """The paper's KL-shaped REINFORCE++ written out: token t of response i earns -beta * KL_t and the
    outcome x_i comes at the end, so its return is x_i - beta * (KL_t + ... + KL_last); every token's
    return is whitened with the mean and Bessel std of all tokens' returns."""
    returns = [[xi - beta * sum(row[t:]) for t in range(len(row))] for xi, row in zip(x, kl_rows)]
    pool = [g for row in returns for g in row]
    mean, var = statistics.fmean(pool), statistics.variance(pool)
    return [[(g - mean) / (var + eps) ** 0.5 for g in row] for row in returns]


def test_kl_shaped_returns_by_hand():
    # Row 0: x 1, KL 0.1 0.2 0.3: to go 0.6 0.5 0.3 -> 1 - 0.5 * (0.6, 0.5, 0.3). Row 1: two tokens,
    # its padding KL (9) ignored: x -0.5, to go 0.9 0.5.
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    got = kl_shaped_returns(torch.tensor([1.0, -0.5]), kl, mask, beta=0.5)
    expected = torch.tensor([[0.7, 0.75, 0.85], [-0.95, -0.75, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(got, expected)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.integers(1, 5)), min_size=2, max_size=6), st.booleans())
def test_without_kl_the_shaped_return_is_the_token_weighted_outcome_form(rows, group_baseline):
    rewards, lengths = torch.tensor([r for r, _ in rows]), [n for _, n in rows]
    assume(len(set(rewards.tolist())) > 1)
    groups = torch.arange(len(rows)) // 2
    mask = torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths])
    x = group_baseline_residuals(rewards, groups) if group_baseline else rewards.double()
    returns = kl_shaped_returns(x, torch.rand(mask.shape), mask, beta=0.0)
    per_token = whitened(returns[mask.bool()], torch.ones(int(mask.sum())))
    outcome = reinforce_pp_advantages(rewards, groups, torch.tensor(lengths, dtype=torch.float64), group_baseline)
    torch.testing.assert_close(per_token, outcome.repeat_interleave(torch.tensor(lengths)))


def _perturbed_copy(model_path: str, out, scale: float = 0.05) -> str:
    """A reference that differs from the policy: the tiny model with every weight moved by noise."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))
    model.save_pretrained(out)
    return str(out)


@pytest.mark.numerics
def test_kl_shaped_step_through_the_module(tiny_model_path, tmp_path):
    """One real step with the KL-shaped return: the per-token advantages are the written-out
    reference's, computed from log-probs of the policy and the reference scored by transformers
    directly (full logits), and the logged mean KL is theirs."""
    from transformers import AutoModelForCausalLM

    from helpers.packed_batches import reference_logprobs

    reference_path = _perturbed_copy(tiny_model_path, tmp_path / "reference")
    beta = 0.5
    techniques = [ReinforcePlusPlus(kl_coef=beta, reference_path=reference_path), LossAggregation("token-mean")]
    record = fit_step(tiny_model_path, techniques, log_dir=tmp_path / "logs")

    batch = rollout()
    with torch.no_grad():
        old = reference_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_path), batch)
        ref = reference_logprobs(AutoModelForCausalLM.from_pretrained(reference_path), batch)
    kl_rows = [(old[i, :n] - ref[i, :n]).tolist() for i, n in enumerate(LENGTHS)]  # k1 = log pi_old - log pi_ref
    assert max(abs(k) for row in kl_rows for k in row) > 0.01  # the reference differs: the KL shapes the return
    expected = shaped_reference(REWARDS, kl_rows, beta)
    got = record.batch.advantages
    assert got.shape == batch.response_mask.shape
    for i, n in enumerate(LENGTHS):
        torch.testing.assert_close(got[i, :n], torch.tensor(expected[i], dtype=torch.float32), rtol=1e-4, atol=1e-4)
        assert torch.all(got[i, n:] == 0)
    tokens = [k for row in kl_rows for k in row]
    assert logged(tmp_path / "logs")["reinforce_pp/ref_kl"] == pytest.approx(statistics.fmean(tokens), abs=1e-5)


@pytest.mark.numerics
def test_a_far_reference_is_clamped_per_token_and_counted(tiny_model_path, tmp_path):
    """k3 with a reference far from the policy: each token's estimate is bounded at 10 (as the reference
    implementation bounds it) instead of exp(log-ratio), the advantages are the written-out reference's
    on the clamped values, and the logged share of clamped tokens is the share computed here."""
    import math

    from transformers import AutoModelForCausalLM

    from helpers.packed_batches import reference_logprobs

    reference_path = _perturbed_copy(tiny_model_path, tmp_path / "reference", scale=0.5)
    beta = 0.5
    techniques = [
        ReinforcePlusPlus(kl_coef=beta, kl_estimator="k3", reference_path=reference_path),
        LossAggregation("token-mean"),
    ]
    record = fit_step(tiny_model_path, techniques, log_dir=tmp_path / "logs")
    batch = rollout()
    with torch.no_grad():
        old = reference_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_path), batch)
        ref = reference_logprobs(AutoModelForCausalLM.from_pretrained(reference_path), batch)
    raw = [[math.exp(r - o) - (r - o) - 1 for o, r in zip(old[i, :n].tolist(), ref[i, :n].tolist())]
           for i, n in enumerate(LENGTHS)]  # fmt: skip
    flat = [k for row in raw for k in row]
    clamped_share = sum(k > 10 for k in flat) / len(flat)
    assert 0 < clamped_share < 1 and max(flat) > 20  # some tokens far out (k3 grows as exp of the log-ratio)
    expected = shaped_reference(REWARDS, [[min(k, 10.0) for k in row] for row in raw], beta)
    got = record.batch.advantages
    assert torch.isfinite(got).all()
    for i, n in enumerate(LENGTHS):
        torch.testing.assert_close(got[i, :n], torch.tensor(expected[i], dtype=torch.float32), rtol=1e-4, atol=1e-4)
    assert logged(tmp_path / "logs")["reinforce_pp/kl_clamped_share"] == pytest.approx(clamped_share, abs=1e-6)


def test_kl_shaped_settings_are_checked_in_one_line():
    for kwargs, match in [
        ({"kl_coef": -0.1}, "kl_coef=-0.1: must be >= 0"),
        ({"kl_coef": 0.1, "weighting": "sample"}, "needs weighting: token"),
        ({"kl_coef": 0.1, "kl_estimator": "k4"}, "choose one of k1, k2, k3"),
    ]:
        with pytest.raises(UserError, match=match) as err:
            ReinforcePlusPlus(**kwargs)
        assert "\n" not in str(err.value)
    assert ReinforcePlusPlus(kl_coef=0.1).per_token_advantages and not ReinforcePlusPlus().per_token_advantages


def test_per_token_advantages_with_a_sequence_ratio_are_refused_naming_both(tiny_model_path):
    from lite_ppo.callbacks import GSPO

    techniques = [ReinforcePlusPlus(kl_coef=0.1), GSPO(variant="sequence"), LossAggregation("seq-mean-token-mean")]
    with pytest.raises(UserError, match="ReinforcePlusPlus gives every token its own advantage.*'gspo'") as err:
        fit_step(tiny_model_path, techniques)
    assert "\n" not in str(err.value)
    # The token variant takes per-token advantages: it runs.
    techniques = [ReinforcePlusPlus(kl_coef=0.1), GSPO(variant="token"), LossAggregation("seq-mean-token-mean")]
    assert fit_step(tiny_model_path, techniques).batch.advantages.dim() == 2
