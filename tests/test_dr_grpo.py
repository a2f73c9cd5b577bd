"""Dr. GRPO's constant normalizer (``seq-mean-token-sum-norm``): hand-computed values and gradients,
its global denominator over micro-batches, the budget from the rollout's ``max_new_tokens``, and a
real training step whose logged loss is the equation of docs/method.md ("Dr. GRPO")."""

from __future__ import annotations

import pytest
import torch

from helpers.technique_fit import GROUPS, LENGTHS, REWARDS, TRUNCATED, fit_step
from lite_ppo.callbacks import AdvantageNormalization, LossAggregation, OverlongFilter
from lite_ppo.errors import UserError
from lite_ppo.ops import aggregate_loss, aggregation_denominator, clipped_surrogate
from lite_ppo.rollout.engine import SamplingConfig
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.technique import PolicyLossConfig, build_loss_config

# Four responses of 3, 1, 0 (fully masked) and 4 loss tokens; advantages of both signs.
MASK = torch.tensor([[1.0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
ADV = torch.tensor([1.0, -1.0, 0.5, -2.0])


def test_constant_normalizer_by_hand():
    # At ratio 1 every token's loss is -A_i: token sums -3, +1, 0 (masked), +8 -> total 6.
    logp = torch.zeros(4, 4)
    loss, _ = clipped_surrogate(logp, logp, ADV)
    # Dr. GRPO: 6 / (4 responses x L_max 8); the masked response counts in G.
    assert aggregate_loss(loss, MASK, "seq-mean-token-sum-norm", generation_budget=8).item() == pytest.approx(6 / 32)
    # seq-mean-token-sum: 6 / 3 responses with a loss token; L_max plays no part.
    assert aggregate_loss(loss, MASK, "seq-mean-token-sum").item() == pytest.approx(6 / 3)
    assert aggregation_denominator(MASK, "seq-mean-token-sum-norm", 8).item() == 32
    assert aggregation_denominator(MASK, "seq-mean-token-sum").item() == 3
    # A clipped case: A = +1 at ratio 1.5 (clipped to 1.2) and A = -1 at ratio 0.5 (clipped to 0.8),
    # 2 tokens each, L_max 5: (-1.2 * 2 + 0.8 * 2) / (2 * 5).
    logp = torch.log(torch.tensor([[1.5, 1.5], [0.5, 0.5]]))
    loss, _ = clipped_surrogate(logp, torch.zeros(2, 2), torch.tensor([1.0, -1.0]))
    got = aggregate_loss(loss, torch.ones(2, 2), "seq-mean-token-sum-norm", generation_budget=5)
    assert got.item() == pytest.approx((-2.4 + 1.6) / 10)


def test_gradient_is_minus_advantage_over_the_constant():
    """d L / d log pi_{i,t} = -A_i rho_{i,t} m_{i,t} / (G L_max) (unclipped): no 1 / L_i, so every
    token of every response weighs the same, whatever the response's length."""
    logp = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    loss, _ = clipped_surrogate(logp, torch.zeros(4, 4, dtype=torch.float64), ADV.double())
    (grad,) = torch.autograd.grad(aggregate_loss(loss, MASK.double(), "seq-mean-token-sum-norm", None, 8), logp)
    torch.testing.assert_close(grad, -ADV.double().unsqueeze(-1) * MASK.double() / 32)


def test_gradcheck():
    gen = torch.Generator().manual_seed(0)
    logp = (0.05 * torch.randn(4, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    old = 0.05 * torch.randn(4, 4, generator=gen, dtype=torch.float64)

    def fn(x):
        loss, _ = clipped_surrogate(x, old, ADV.double())  # |log ratio| <= ~0.3: no clip kink within 1e-6
        return aggregate_loss(loss, MASK.double(), "seq-mean-token-sum-norm", generation_budget=7)

    assert torch.autograd.gradcheck(fn, (logp,))


def test_micro_batches_with_the_step_denominator_add_up():
    """Every row of the step counts, so micro-batches of any split (a fully masked one included)
    add up to the whole step's loss."""
    loss = torch.arange(16.0).reshape(4, 4)
    whole = aggregate_loss(loss, MASK, "seq-mean-token-sum-norm", generation_budget=6)
    denominator = aggregation_denominator(MASK, "seq-mean-token-sum-norm", 6)
    for split in ([[0, 1], [2, 3]], [[0], [1, 2, 3]], [[2], [0, 1, 3]]):
        parts = sum(aggregate_loss(loss[rows], MASK[rows], "seq-mean-token-sum-norm", denominator) for rows in split)
        assert parts.item() == pytest.approx(whole.item())


def test_budget_is_required():
    with pytest.raises(ValueError, match="generation_budget"):
        aggregation_denominator(MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="generation_budget"):
        PolicyLossConfig(aggregation="seq-mean-token-sum-norm").validate()
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_loss(MASK, MASK, "seq-mean")


def test_loss_aggregation_reads_the_budget_from_the_rollout_at_fit_start():
    settings = RunSettings(SamplingConfig(n=2, max_new_tokens=48), SamplingConfig(n=1), "HFEngine", False)
    technique = LossAggregation("seq-mean-token-sum-norm")
    technique.configure_run(settings)
    cfg = build_loss_config(PolicyLossConfig(), [technique])
    assert (cfg.aggregation, cfg.generation_budget) == ("seq-mean-token-sum-norm", 48)
    explicit = LossAggregation("seq-mean-token-sum-norm", generation_budget=100)
    explicit.configure_run(settings)
    assert build_loss_config(PolicyLossConfig(), [explicit]).generation_budget == 100
    # The other modes set the aggregation only.
    assert build_loss_config(PolicyLossConfig(), [LossAggregation("seq-mean-token-sum")]).generation_budget is None
    with pytest.raises(UserError, match="generation_budget is null and the rollout source gives no max_new_tokens"):
        build_loss_config(PolicyLossConfig(), [LossAggregation("seq-mean-token-sum-norm")])  # no settings handed


def test_loss_aggregation_rejects_bad_settings_in_one_line():
    for kwargs, match in [
        ({"mode": "token-mean", "generation_budget": 10}, "only used by mode seq-mean-token-sum-norm"),
        ({"mode": "seq-mean-token-sum-norm", "generation_budget": 0}, "must be >= 1"),
        ({"mode": "token-sum"}, "choose one of"),
    ]:
        with pytest.raises(UserError, match=match) as err:
            LossAggregation(**kwargs)
        assert "\n" not in str(err.value)


@pytest.mark.numerics
def test_dr_grpo_step_through_the_module(tiny_model_path):
    """One real step of the Dr. GRPO recipe's techniques (+ the overlong filter, so one response is
    masked): the logged policy loss is -sum_i A_i * (loss tokens of i) / (G * L_max) with
    A = r - mean_group, G = all 6 responses (the masked one included), L_max = 16."""
    budget = 16
    record = fit_step(
        tiny_model_path,
        [
            AdvantageNormalization(mean_scope="group", std_scope="none"),
            LossAggregation("seq-mean-token-sum-norm", generation_budget=budget),
            OverlongFilter(),
        ],
    )
    # By hand: groups [1, 0] | [1, 1, 0] | [1] -> A = [1/2, -1/2 | 1/3, 1/3, -2/3 | 0].
    group_mean = {g: sum(r for r, h in zip(REWARDS, GROUPS) if h == g) / GROUPS.count(g) for g in set(GROUPS)}
    advantages = [r - group_mean[g] for r, g in zip(REWARDS, GROUPS)]
    assert advantages == pytest.approx([0.5, -0.5, 1 / 3, 1 / 3, -2 / 3, 0.0])
    torch.testing.assert_close(record.batch.advantages, torch.tensor(advantages))
    kept_tokens = [0 if t else n for n, t in zip(LENGTHS, TRUNCATED)]  # the truncated one is masked
    # The only mini-batch takes its old log-probs from its own forward: ratio 1, l = -A per token.
    expected = -sum(a * n for a, n in zip(advantages, kept_tokens)) / (len(REWARDS) * budget)
    assert expected == pytest.approx(-(7 / 3) / 96)
    (step,) = record.steps
    # float32: ~20 terms summed, then one division: <= 21 * 2^-24 ~ 1.3e-6 relative, so 1e-5
    assert step["loss/policy"] == pytest.approx(expected, rel=1e-5)
    assert step["policy/ratio_max"] == 1.0 and step["policy/ratio_min"] == 1.0
    assert len(record.micro) == 2  # 6 rows in micro-batches of 4: the denominator is the step's
