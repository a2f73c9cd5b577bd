"""Engine/trainer log-prob drift and the truncated importance-sampling correction: the pure math by
hand, the two techniques on constructed batches, and the weights inside a real PPO update."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.fits import fit_one_batch
from helpers.technique_batches import CaptureModule, make_batch, step_ctx
from lite_ppo.callbacks import LogprobDrift, Rollout, TruncatedImportanceSampling
from lite_ppo.ops.drift import MAX_LOG_RATIO, drift_sums, truncated_importance_weights
from lite_ppo.ops.kl import kl_estimate
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import Generation
from lite_ppo.rollout.hf import HFEngine
from lite_ppo.rollout.producer import build_rollout_batch
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import Technique
from lite_ppo.training.module import LitePPO

# Two responses of widths 3 and 2 (padding at [1, 2] holds garbage on purpose, even -inf).
TRAINER = torch.tensor([[-1.0, -0.5, -2.0], [-0.1, -3.0, 0.0]])
ENGINE = torch.tensor([[-1.0, -1.0, -2.5], [-0.3, -3.0, float("-inf")]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
# d = trainer - engine on the 5 masked tokens
D = [0.0, 0.5, 0.5, 0.2, 0.0]


def _k3(d: float) -> float:
    return math.exp(d) - 1 - d


# -- ops -----------------------------------------------------------------------------------------------
def test_drift_sums_by_hand():
    sums = drift_sums(TRAINER, ENGINE, MASK)
    assert float(sums["tokens"]) == 5 and float(sums["abs_diff"]) == pytest.approx(sum(abs(d) for d in D))  # 1.2
    assert float(sums["diff"]) == pytest.approx(sum(D)) and float(sums["max_abs_diff"]) == pytest.approx(0.5)
    assert float(sums["k3"]) == pytest.approx(sum(_k3(d) for d in D))
    assert all(torch.isfinite(v) for v in sums.values()), "padding must not leak into the sums"


def test_drift_recorded_in_parts_equals_one_batch():
    """What several micro-batches or ranks do: each records its sums, the step divides once."""
    whole, parts = StepMetrics(), StepMetrics()
    LogprobDrift().observe_old_logprobs(step_ctx(None, None, whole), _batch_with_logprobs())
    for row in range(2):
        LogprobDrift().observe_old_logprobs(
            step_ctx(None, None, parts), _batch_with_logprobs().select(torch.tensor([row]))
        )
    expected, got = whole.compute(Ranks(None)), parts.compute(Ranks(None))
    assert set(got) == set(expected) == {"drift/mean_abs_diff", "drift/max_abs_diff", "drift/mean_diff", "drift/kl_k3"}
    for name, value in expected.items():
        assert float(got[name]) == pytest.approx(float(value))


def k3_kl(trainer: torch.Tensor, engine: torch.Tensor) -> torch.Tensor:
    """The per-token k3 of drift_sums: KL(pi_engine || pi_trainer) on engine-sampled tokens."""
    return kl_estimate(engine.double(), trainer.double(), "k3", clamp=MAX_LOG_RATIO)


def test_k3_by_hand_and_limits():
    assert float(k3_kl(torch.tensor(0.0), torch.tensor(-1.0))) == pytest.approx(math.e - 2)
    assert float(k3_kl(torch.tensor(-1.0), torch.tensor(0.0))) == pytest.approx(math.exp(-1))
    assert float(k3_kl(torch.tensor(-0.7), torch.tensor(-0.7))) == 0.0
    # a wild token is clamped, not infinite
    assert math.isfinite(float(k3_kl(torch.tensor(0.0), torch.tensor(-1e4))))
    assert float(k3_kl(torch.tensor(0.0), torch.tensor(-1e4))) == pytest.approx(_k3(MAX_LOG_RATIO))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=20))
def test_k3_is_non_negative_and_zero_only_on_agreement(pairs):
    trainer = torch.tensor([p[0] for p in pairs])
    engine = torch.tensor([p[1] for p in pairs])
    k3 = k3_kl(trainer, engine)
    assert bool((k3 >= 0).all())
    assert bool((k3[trainer == engine] == 0).all())


def test_k3_mean_estimates_kl_of_the_engine_from_the_trainer():
    """Sampling from pi_engine, the token mean of k3 converges to KL(pi_engine || pi_trainer)."""
    gen = torch.Generator().manual_seed(0)
    # far apart, so the two KL directions differ (0.635 vs 0.676 nats) by much more than the sampling error
    engine_probs = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    trainer_probs = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    tokens = torch.multinomial(engine_probs, 400_000, replacement=True, generator=gen)
    estimate = float(k3_kl(trainer_probs.log()[tokens], engine_probs.log()[tokens]).mean())
    exact = float((engine_probs * (engine_probs / trainer_probs).log()).sum())
    reverse = float((trainer_probs * (trainer_probs / engine_probs).log()).sum())
    assert estimate == pytest.approx(exact, rel=0.02)
    assert estimate != pytest.approx(reverse, rel=0.02)
    # drift_sums' k3 is the same estimator
    sums = drift_sums(
        trainer_probs.log()[tokens][None], engine_probs.log()[tokens][None], torch.ones(1, tokens.numel())
    )
    assert float(sums["k3"]) / tokens.numel() == pytest.approx(estimate, rel=1e-9)


def test_truncated_importance_weights_by_hand():
    w, capped = truncated_importance_weights(TRAINER, ENGINE, MASK, cap=1.5)
    # ratios exp(d): 1, e^0.5 = 1.6487 (capped at 1.5), 1.6487 (capped), e^0.2 = 1.2214, 1; padding 1
    expected = torch.tensor([[1.0, 1.5, 1.5], [math.exp(0.2), 1.0, 1.0]])
    assert torch.allclose(w, expected)
    assert capped.tolist() == [[False, True, True], [False, False, False]]
    assert w.dtype == torch.float32 and not w.requires_grad
    # a token the engine found far less likely than the trainer: capped, finite
    w, capped = truncated_importance_weights(torch.tensor([[0.0]]), torch.tensor([[-1e4]]), torch.ones(1, 1), cap=2.0)
    assert w.item() == 2.0 and capped.item()
    # below 1 is never capped
    w, capped = truncated_importance_weights(torch.tensor([[-2.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1), cap=2.0)
    assert w.item() == pytest.approx(math.exp(-1)) and not capped.item()


def test_equal_logprobs_give_weights_exactly_one():
    lp = -torch.rand(4, 7) * 5
    w, capped = truncated_importance_weights(lp, lp.clone(), torch.ones(4, 7), cap=2.0)
    assert torch.equal(w, torch.ones(4, 7)) and not capped.any()


def test_shape_mismatch_and_bad_cap_are_errors():
    with pytest.raises(ValueError, match="shape mismatch"):
        drift_sums(TRAINER, ENGINE[:, :2], MASK)
    with pytest.raises(ValueError, match="cap"):
        truncated_importance_weights(TRAINER, ENGINE, MASK, cap=0.0)
    with pytest.raises(ValueError, match="cap"):
        TruncatedImportanceSampling(cap=0.5)


# -- the techniques on constructed batches --------------------------------------------------------------
def _batch_with_logprobs(engine: torch.Tensor | None = ENGINE) -> RolloutBatch:
    batch = make_batch([1.0, 0.0], [0, 0], [3, 2], width=3)
    batch.old_logprobs = TRAINER * MASK
    batch.engine_logprobs = None if engine is None else engine.clone()
    return batch


def test_logprob_drift_logs_the_statistics():
    module, metrics = CaptureModule(), StepMetrics()
    LogprobDrift().observe_old_logprobs(step_ctx(module.trainer, module, metrics), _batch_with_logprobs())
    logged = {k: float(v) for k, v in metrics.compute(Ranks(None)).items()}
    assert set(logged) == {"drift/mean_abs_diff", "drift/max_abs_diff", "drift/mean_diff", "drift/kl_k3"}
    assert logged["drift/mean_abs_diff"] == pytest.approx(1.2 / 5)
    assert logged["drift/max_abs_diff"] == pytest.approx(0.5)
    assert logged["drift/kl_k3"] == pytest.approx(sum(_k3(d) for d in D) / 5)


def test_logprob_drift_without_engine_logprobs_warns_once_and_logs_nothing():
    module, drift, metrics = CaptureModule(), LogprobDrift(), StepMetrics()
    with pytest.warns(UserWarning, match="no log-probs"):
        drift.observe_old_logprobs(step_ctx(module.trainer, module, metrics), _batch_with_logprobs(engine=None))
    drift.observe_old_logprobs(
        step_ctx(module.trainer, module, metrics), _batch_with_logprobs(engine=None)
    )  # silent now
    assert metrics.compute(Ranks(None)) == {}


def test_importance_sampling_sets_and_multiplies_token_weights():
    module, metrics = CaptureModule(), StepMetrics()
    batch = _batch_with_logprobs()
    weights = TruncatedImportanceSampling(cap=1.5).token_weights(step_ctx(module.trainer, module, metrics), batch)
    expected = torch.tensor([[1.0, 1.5, 1.5], [math.exp(0.2), 1.0, 1.0]])
    assert torch.allclose(weights, expected)
    assert batch.token_weights is None  # returned, not written into the batch
    logged = metrics.compute(Ranks(None))
    assert float(logged["tis/weight_mean"]) == pytest.approx((1 + 1.5 + 1.5 + math.exp(0.2) + 1) / 5)
    assert float(logged["tis/capped_share"]) == pytest.approx(2 / 5)


def test_importance_sampling_without_engine_logprobs_is_a_clear_error():
    module = CaptureModule()
    with pytest.raises(RuntimeError, match="needs the rollout engine's log-probs"):
        TruncatedImportanceSampling().token_weights(
            step_ctx(module.trainer, module, StepMetrics()), _batch_with_logprobs(engine=None)
        )
    # ...and at fit start already, when the configured engine is known to report none
    with pytest.raises(ValueError, match="HFEngine reports none"):
        TruncatedImportanceSampling().configure_run(Rollout(engine=HFEngine()).settings)


# -- inside a real PPO update ---------------------------------------------------------------------------
ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5])


class FixedAdvantages(Technique):
    def compute_advantages(self, ctx, batch):
        return ADVANTAGES.clone()


class Record(Technique):
    def on_update_end(self, ctx, batch, stats):
        self.stats = {k: torch.as_tensor(v).detach().clone() for k, v in stats.scalars.items()}
        self.weights = None if batch.token_weights is None else batch.token_weights.clone()


def _constructed_rollout() -> RolloutBatch:
    """2 prompts of 2 tokens x 2 responses (lengths 4, 2, 3, 1) on the tiny model's vocabulary, laid
    out by the rollout producer's own ``build_rollout_batch``."""
    responses = [[10, 17, 24, 31], [38, 45], [66, 73, 80], [94]]
    generations = [[Generation(r, True) for r in responses[:2]], [Generation(r, True) for r in responses[2:]]]
    return build_rollout_batch([[5, 6], [9, 10]], generations, [1.0, 0.0, 1.0, 0.0], pad_id=2, temperature=0.9)


def _update(model_path: str, engine_logprobs: torch.Tensor | None, *techniques: Technique):
    """One training step (one optimizer step) of LitePPO on the constructed batch."""
    torch.manual_seed(0)
    module = LitePPO(model_path=model_path, lr=1e-3, num_mini_batches=1, micro_batch_size=2, max_grad_norm=None)
    rollout = _constructed_rollout()
    rollout.engine_logprobs = engine_logprobs
    record = Record()
    fit_one_batch(module, rollout, [FixedAdvantages(), *techniques, record])
    return record, {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


@pytest.fixture(scope="module")
def trainer_logprobs(tiny_model_path) -> torch.Tensor:
    """The trainer's own log-probs of the constructed responses (what a perfect engine reports)."""
    module = LitePPO(model_path=tiny_model_path, micro_batch_size=2)
    module.configure_model()
    return module.sequence_logprobs(_constructed_rollout())


def test_weights_of_one_leave_the_update_unchanged(tiny_model_path, trainer_logprobs):
    plain, plain_weights = _update(tiny_model_path, trainer_logprobs.clone())
    corrected, corrected_weights = _update(
        tiny_model_path, trainer_logprobs.clone(), TruncatedImportanceSampling(cap=2.0)
    )
    assert plain.weights is None
    assert torch.equal(corrected.weights, torch.ones_like(corrected.weights))
    assert torch.equal(corrected.stats["loss/policy"], plain.stats["loss/policy"])
    for name, value in plain_weights.items():
        assert torch.equal(corrected_weights[name], value), name


def test_weights_scale_the_per_token_loss(tiny_model_path, trainer_logprobs):
    """At the first optimizer step the ratio is 1, so each token's loss is -A_i: with token-mean
    aggregation the loss is -sum(w * A * mask) / sum(mask)."""
    mask = _constructed_rollout().response_mask
    shift = torch.tensor([[0.0, 1.0, -0.3, 0.2], [0.5, 0.0, 0, 0], [-1.0, 0.1, 0.0, 0], [2.0, 0, 0, 0]])
    engine = (trainer_logprobs - shift) * mask  # d = shift on response tokens
    corrected, _ = _update(tiny_model_path, engine, TruncatedImportanceSampling(cap=2.0))
    w = torch.where(mask.bool(), shift.exp().clamp(max=2.0), torch.ones_like(shift))
    assert torch.allclose(corrected.weights, w, atol=1e-6)
    expected = -(w * ADVANTAGES[:, None] * mask).sum() / mask.sum()
    assert float(corrected.stats["loss/policy"]) == pytest.approx(float(expected), rel=1e-5, abs=1e-6)
    plain, _ = _update(tiny_model_path, engine)
    assert float(plain.stats["loss/policy"]) == pytest.approx(
        float(-(ADVANTAGES[:, None] * mask).sum() / mask.sum()), rel=1e-5, abs=1e-6
    )
