"""Where the old log-probs come from (``model.old_logprobs``): the first mini-batch's own forward
(``reuse_first``, default), a separate pass (``recompute``), or the engine's (``engine``, guarded)."""

from __future__ import annotations

import pytest
import torch

from helpers.update_steps import assert_same_update
from helpers.update_steps import batch as _batch
from helpers.update_steps import step as _step
from lite_ppo import LitePPO
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.technique import Technique

# Equivalence to float rounding: .ci/run repeats these at the CPU dispatch level below this one.
pytestmark = pytest.mark.numerics


def _initial_logprobs(tiny_model_path: str, batch: RolloutBatch) -> torch.Tensor:
    module = LitePPO(model_path=tiny_model_path)
    module.configure_model()
    return module.sequence_logprobs(batch)


class CountNoGradRows(Technique):
    """Counts the rows the policy's decoder processes without gradient (the separate old-log-prob
    pass); run with ``pack_prompts=False`` so that a row is a response."""

    def on_fit_start(self, trainer, pl_module):
        self.rows = 0

        def count(module, args, kwargs, output):
            if not torch.is_grad_enabled():
                self.rows += kwargs["input_ids"].shape[0]

        pl_module.policy.get_decoder().register_forward_hook(count, with_kwargs=True)


def test_first_mini_batch_ratio_is_exactly_one_without_a_separate_pass(tiny_model_path):
    counter = CountNoGradRows()
    _, observe = _step(tiny_model_path, _batch(), num_mini_batches=1, pack_prompts=False, extra=[counter])
    # One mini-batch, old log-probs from its own forward: every ratio is exactly 1, the k3 KL exactly 0,
    # and no row needed a no-gradient pass.
    assert observe.scalars["policy/ratio_max"] == 1.0 and observe.scalars["policy/ratio_min"] == 1.0
    assert observe.scalars["policy/approx_kl"] == 0.0 and observe.scalars["clip/fraction"] == 0.0
    assert counter.rows == 0
    # Two mini-batches: only the second one's 4 rows get the pass; recompute passes all 8.
    _step(tiny_model_path, _batch(), num_mini_batches=2, pack_prompts=False, extra=[counter])
    assert counter.rows == 4
    _step(tiny_model_path, _batch(), num_mini_batches=2, pack_prompts=False, old_logprobs="recompute", extra=[counter])
    assert counter.rows == 8


@pytest.mark.parametrize("num_mini_batches", [1, 2])
def test_reuse_first_equals_a_separate_pass(tiny_model_path, num_mini_batches):
    batch = _batch()
    reuse = _step(tiny_model_path, batch, num_mini_batches=num_mini_batches, optimizer="sgd")
    recompute = _step(
        tiny_model_path, batch, num_mini_batches=num_mini_batches, old_logprobs="recompute", optimizer="sgd"
    )
    torch.testing.assert_close(reuse[1].old, _initial_logprobs(tiny_model_path, batch), atol=1e-5, rtol=1e-5)
    # The same old log-probs, loss, gradient at every optimizer step and weights after (SGD).
    assert_same_update(*reuse, *recompute)


def test_engine_logprobs_used_when_they_match_and_refused_when_they_drift(tiny_model_path):
    true = _initial_logprobs(tiny_model_path, _batch())
    # Matching engine log-probs (up to 1e-5): they are the old log-probs, as given.
    near = _batch(engine_shift=1e-5, true_logprobs=true)
    _, seen = _step(tiny_model_path, near, num_mini_batches=2, old_logprobs="engine")
    assert torch.equal(seen.old, near.engine_logprobs)
    assert seen.scalars["update/engine_logprob_drift"] == pytest.approx(1e-5, rel=0.2)  # the guard's measure, logged
    # Injected drift of 0.1 nats per token (> tolerance 1e-3): warned, the trainer's own are used.
    far = _batch(engine_shift=0.1, true_logprobs=true)
    with pytest.warns(UserWarning, match="differ from the trainer's by 1.00e-01"):
        _, seen = _step(tiny_model_path, far, num_mini_batches=2, old_logprobs="engine")
    torch.testing.assert_close(seen.old, true, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(seen.old, far.engine_logprobs, atol=1e-2)
    assert seen.scalars["update/engine_logprob_drift"] == pytest.approx(0.1, rel=1e-3)


def test_a_step_that_falls_back_from_the_engine_updates_as_recompute_would(tiny_model_path):
    """Drifting engine log-probs are replaced for every optimizer step, not only the first: the
    second mini-batch's ratio is taken against the trainer's own pass (before: the engine's)."""
    true = _initial_logprobs(tiny_model_path, _batch())
    far = _batch(engine_shift=0.1, true_logprobs=true)
    with pytest.warns(UserWarning, match="differ from the trainer's"):
        fallback = _step(tiny_model_path, far, num_mini_batches=2, old_logprobs="engine", optimizer="sgd")
    recompute = _step(tiny_model_path, far, num_mini_batches=2, old_logprobs="recompute", optimizer="sgd")
    assert_same_update(*fallback, *recompute)


class SlowNoGradPasses(Technique):
    """Every forward of the policy without gradient takes ``seconds`` longer (a slow old-log-prob pass)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_fit_start(self, trainer, pl_module):
        import time

        def slow(module, args, kwargs, output):
            if not torch.is_grad_enabled():
                time.sleep(self.seconds)

        pl_module.policy.get_decoder().register_forward_hook(slow, with_kwargs=True)


def test_the_engine_fallbacks_pass_counts_as_old_logprobs_not_update(tiny_model_path):
    """Falling back from drifting engine log-probs scores the later rows inside the update: that pass's
    time is reported in time/old_logprobs_s (it was in time/update_s, and old_logprobs_s read ~0)."""
    true = _initial_logprobs(tiny_model_path, _batch())
    far = _batch(engine_shift=0.1, true_logprobs=true)
    delay = 1.0  # per no-gradient forward: the fallback's pass is the step's only one
    with pytest.warns(UserWarning, match="differ from the trainer's"):
        _, seen = _step(tiny_model_path, far, [SlowNoGradPasses(delay)], num_mini_batches=2, old_logprobs="engine")
    assert seen.scalars["time/old_logprobs_s"] >= delay
    assert seen.scalars["time/update_s"] < seen.scalars["time/old_logprobs_s"]  # the tiny update itself: < 1 s
