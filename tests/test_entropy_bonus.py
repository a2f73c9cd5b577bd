"""The entropy bonus: the term and its gradient by hand, the adaptive coefficient's steps on
hand-checked sequences (direction and bounds), one real training step whose logged term is the
equation on the step's own entropies, and the coefficient surviving a checkpoint and resume."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from helpers.given_rollouts import GivenRollouts
from helpers.technique_fit import Record, fit_step, rollout
from lite_ppo import LitePPO
from lite_ppo.callbacks import AdvantageNormalization, EntropyBonus, LossAggregation
from lite_ppo.errors import UserError
from lite_ppo.ops import entropy_from_logits
from lite_ppo.ops.entropy_bonus import entropy_bonus, next_entropy_coef


def test_term_and_its_gradient_by_hand():
    """-c H per token; through the softmax, d(-c H)/dz_k = c p_k (log p_k + H)."""
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]]], requires_grad=True)
    term = entropy_bonus(entropy_from_logits(logits), 0.01)  # the module's entropy (float32)
    torch.testing.assert_close(term[0, 1], torch.tensor(-0.01 * math.log(3)))
    (grad,) = torch.autograd.grad(term.sum(), logits)
    p = torch.softmax(logits.detach().double(), -1)
    h = -(p * p.log()).sum(-1, keepdim=True)
    # float32 softmax and logsumexp of 3 logits: a few ulps of values of order 0.01
    torch.testing.assert_close(grad.double(), 0.01 * p * (p.log() + h), rtol=1e-5, atol=1e-8)

    def float64_entropy(z):
        return -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)

    z = logits.detach().double().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: entropy_bonus(float64_entropy(z), 0.3), (z,))


def _sequence(coef, entropies, **kwargs):
    out = []
    for h in entropies:
        coef = next_entropy_coef(coef, h, **kwargs)
        out.append(coef)
    return out


def test_additive_steps_towards_the_target_within_bounds():
    # target 1.0: below it c rises by 0.004, above it falls by 0.004, at it stays; bounds [0.002, 0.02].
    got = _sequence(
        0.01,
        [0.5, 0.5, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
        target=1.0,
        rule="additive",
        rate=0.004,
        min_coef=0.002,
        max_coef=0.02,
    )
    # 0.022 is capped at 0.02; 0.000 is floored at 0.002.
    assert got == pytest.approx([0.014, 0.018, 0.02, 0.02, 0.016, 0.012, 0.008, 0.004, 0.002, 0.002])


def test_multiplicative_steps_towards_the_target_within_bounds():
    # rate 1: c doubles below the target, halves above it; bounds [0.003, 0.05].
    got = _sequence(
        0.01,
        [3.0, 3.0, 3.0, 0.1, 0.1, 0.1, 0.1, 0.1],
        target=1.0,
        rule="multiplicative",
        rate=1.0,
        min_coef=0.003,
        max_coef=0.05,
    )
    assert got == pytest.approx([0.005, 0.003, 0.003, 0.006, 0.012, 0.024, 0.048, 0.05])


def test_a_non_finite_entropy_leaves_the_coefficient():
    args = {"target": 1.0, "rule": "additive", "rate": 0.1, "min_coef": 0.0, "max_coef": 1.0}
    assert next_entropy_coef(0.2, float("nan"), **args) == 0.2
    with pytest.raises(ValueError, match="rule"):
        next_entropy_coef(0.2, 1.0, 1.0, "proportional", 0.1, 0.0, 1.0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"coef": -1.0}, "coef=-1.0: must be >= 0"),
        ({"target_entropy": 0.0}, "target_entropy=0.0: must be > 0"),
        ({"target_entropy": 1.0, "rate": 0.0}, "rate=0.0: must be > 0"),
        ({"target_entropy": 1.0, "coef": 0.5, "max_coef": 0.1}, "min_coef <= coef <= max_coef"),
        ({"target_entropy": 1.0, "coef": 0.0, "rule": "multiplicative"}, "would never move"),
        ({"rule": "pid"}, "choose additive or multiplicative"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, match):
    with pytest.raises(UserError, match=match) as err:
        EntropyBonus(**kwargs)
    assert "\n" not in str(err.value)


def test_state_restores_an_adaptive_coefficient_only():
    adaptive = EntropyBonus(coef=0.001, target_entropy=0.5, max_coef=0.01)
    adaptive.load_state_dict({"coef": 0.004})
    assert adaptive.coef == 0.004 and adaptive.state_dict() == {"coef": 0.004}
    adaptive.load_state_dict({"coef": 0.5})  # outside the (changed) bounds: clamped into them
    assert adaptive.coef == 0.01
    constant = EntropyBonus(coef=0.002)  # a constant coefficient is a setting: the run's own applies
    constant.load_state_dict({"coef": 0.004})
    assert constant.coef == 0.002


@pytest.mark.numerics
def test_entropy_bonus_step_through_the_module(tiny_model_path, tmp_path):
    """One real step: the logged term is -c x (token mean of the step's entropies over its loss
    tokens), the optimized loss adds it, c is logged, and c then steps up (the tiny random model's
    entropy, ~log of its vocabulary, is below the target 100)."""
    bonus = EntropyBonus(coef=0.01, target_entropy=100.0, rate=0.002, max_coef=0.05)
    techniques = [AdvantageNormalization(), LossAggregation("token-mean"), bonus]
    record = fit_step(tiny_model_path, techniques)
    (step,) = record.steps
    tokens = sum(float(m["loss_mask"].sum()) for m in record.micro)
    mean_entropy = sum(float((m["entropy"] * m["loss_mask"]).sum()) for m in record.micro) / tokens
    assert 1.0 < mean_entropy < 100.0
    # float32: 17 per-token entropies summed (the loss tokens), then one division: <= 18 * 2^-24
    # ~ 1e-6 relative each side, so 1e-5
    assert step["loss/entropy_bonus"] == pytest.approx(-0.01 * mean_entropy, rel=1e-5)
    assert step["policy/entropy"] == pytest.approx(mean_entropy, rel=1e-5)
    assert step["loss/total"] == pytest.approx(step["loss/policy"] + step["loss/entropy_bonus"], rel=1e-5, abs=1e-7)
    assert step["entropy_bonus/coef"] == pytest.approx(0.01)
    assert bonus.coef == pytest.approx(0.012)  # entropy below the target: one additive step up


def _trainer(max_epochs: int, callbacks: list) -> Trainer:
    return Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        logger=False,
        callbacks=[GivenRollouts(), *callbacks],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


def test_adaptive_coefficient_survives_checkpoint_and_resume(tiny_model_path, tmp_path):
    """Step 1 moves c from 0.01 to 0.012; a run resumed from its checkpoint, with a fresh callback
    configured to start at 0.01, trains step 2 with 0.012 and then moves it to the bound 0.013."""
    args = {"coef": 0.01, "target_entropy": 100.0, "rate": 0.002, "max_coef": 0.013}
    loader = DataLoader([{"rollout": rollout()}], batch_size=None)
    module_args = {"model_path": tiny_model_path, "lr": 1e-3, "num_mini_batches": 1, "micro_batch_size": 4}

    first, record = EntropyBonus(**args), Record()
    trainer = _trainer(1, [AdvantageNormalization(), first, record])
    trainer.fit(LitePPO(**module_args), train_dataloaders=loader)
    assert record.steps[0]["entropy_bonus/coef"] == pytest.approx(0.01) and first.coef == pytest.approx(0.012)
    ckpt = tmp_path / "step1.ckpt"
    trainer.save_checkpoint(ckpt)

    resumed, record = EntropyBonus(**args), Record()
    assert resumed.coef == 0.01
    _trainer(2, [AdvantageNormalization(), resumed, record]).fit(
        LitePPO(**module_args), train_dataloaders=loader, ckpt_path=ckpt
    )
    (step,) = record.steps  # only the second epoch's step ran
    assert step["entropy_bonus/coef"] == pytest.approx(0.012)
    assert resumed.coef == pytest.approx(0.013)  # 0.014 capped at max_coef
