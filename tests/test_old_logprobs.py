"""Where the old log-probs come from (``model.old_logprobs``): the first mini-batch's own forward
(``reuse_first``, default), a separate pass (``recompute``), or the engine's (``engine``, guarded)."""

from __future__ import annotations

import pytest
import torch

from conftest import fit_one_batch
from lite_ppo import LitePPO
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.technique import Technique

ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.8, -0.3, 0.2, -0.9])


class FixedAdvantages(Technique):
    def compute_advantages(self, trainer, module, batch):
        return ADVANTAGES.clone()


class Observe(Technique):
    """Records the old log-probs the update used, and the step's scalars."""

    def observe_old_logprobs(self, trainer, module, batch, metrics):
        self.old = batch.old_logprobs.detach().clone()

    def on_update_end(self, trainer, module, batch, stats):
        self.scalars = {k: float(v) for k, v in stats.scalars.items()}


def _batch(engine_shift: float | None = None, true_logprobs: torch.Tensor | None = None) -> RolloutBatch:
    """8 responses (4 groups of 2) with left-padded prompts of 2-4 tokens and responses of 1-5 tokens."""
    gen = torch.Generator().manual_seed(0)
    prompt_lengths, response_lengths = [2, 2, 4, 4, 3, 3, 2, 2], [5, 1, 3, 4, 2, 5, 3, 1]
    p, r = max(prompt_lengths), max(response_lengths)
    input_ids = torch.zeros(8, p + r, dtype=torch.long)
    attention_mask = torch.zeros(8, p + r, dtype=torch.long)
    response_mask = torch.zeros(8, r)
    prompts = [torch.randint(3, 60, (pl,), generator=gen) for pl in prompt_lengths[::2]]  # one per group
    for i, (pl, rl) in enumerate(zip(prompt_lengths, response_lengths)):
        input_ids[i, p - pl : p] = prompts[i // 2]
        input_ids[i, p : p + rl] = torch.randint(3, 60, (rl,), generator=gen)
        attention_mask[i, p - pl : p + rl] = 1
        response_mask[i, :rl] = 1
    engine = None
    if true_logprobs is not None:
        engine = (true_logprobs + (engine_shift or 0.0)) * response_mask
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        group_ids=torch.arange(8) // 2,
        rewards=torch.zeros(8),
        truncated=torch.zeros(8, dtype=torch.bool),
        response_lengths=torch.tensor(response_lengths),
        engine_logprobs=engine,
        temperature=0.9,
    )


def _step(tiny_model_path: str, batch: RolloutBatch, extra: list[Technique] = (), **kwargs) -> tuple[LitePPO, Observe]:
    torch.manual_seed(0)
    module = LitePPO(
        **{"model_path": tiny_model_path, "lr": 1e-2, "max_grad_norm": None, "micro_batch_size": 3, **kwargs}
    )
    observe = Observe()
    fit_one_batch(module, batch, [FixedAdvantages(), observe, *extra])
    return module, observe


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
    reuse, seen_reuse = _step(tiny_model_path, batch, num_mini_batches=num_mini_batches)
    recompute, seen_recompute = _step(
        tiny_model_path, batch, num_mini_batches=num_mini_batches, old_logprobs="recompute"
    )
    torch.testing.assert_close(seen_reuse.old, seen_recompute.old, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(seen_reuse.old, _initial_logprobs(tiny_model_path, batch), atol=1e-5, rtol=1e-5)
    # Adam's first steps move every weight by about lr (1e-2) whatever the gradient's size, so float
    # rounding in near-zero gradients shows up to ~2e-5; wrong old log-probs would move them by ~lr.
    for (name, a), b in zip(reuse.policy.named_parameters(), recompute.policy.parameters()):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=0, msg=name)
    assert seen_reuse.scalars["loss/policy"] == pytest.approx(seen_recompute.scalars["loss/policy"], rel=1e-5, abs=1e-7)


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
