"""Token-budget micro-batches: budget and partition invariants, and the same gradient as fixed-count micro-batches."""

from __future__ import annotations

import pytest
import torch

from lite_ppo.ops import (
    aggregate_loss,
    aggregation_denominator,
    clipped_surrogate,
    padded_cost,
    real_token_span,
    token_budget_micro_batches,
)

# Equivalence to float rounding: .ci/run repeats these at the CPU dispatch level below this one.
pytestmark = pytest.mark.numerics


def test_by_hand():
    lengths = torch.tensor([5, 100, 7, 90, 6])
    assert [b.tolist() for b in token_budget_micro_batches(lengths, 200)] == [[1, 3], [0, 2, 4]]
    # 100 alone exceeds 99: it gets a micro-batch of its own; 90 too (2 x 90 > 99).
    assert [b.tolist() for b in token_budget_micro_batches(lengths, 99)] == [[1], [3], [0, 2, 4]]
    assert padded_cost(torch.tensor([[3, 4], [5, 1]])) == 2 * (5 + 4)  # segments padded separately
    # Rows run back to back without padding: the cost is the sum. Longest first while the sum fits:
    # 100 + 90 > 120, so 100 alone; 90 + 7 + 6 = 103, then 5 would make 108 <= 120.
    assert padded_cost(torch.tensor([[3, 4], [5, 1]]), concatenated=True) == 13
    assert [b.tolist() for b in token_budget_micro_batches(lengths, 120, concatenated=True)] == [[1], [0, 2, 3, 4]]
    assert [b.tolist() for b in token_budget_micro_batches(lengths, 100, concatenated=True)] == [[1], [2, 3], [0, 4]]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("segments", "concatenated"), [(1, False), (2, False), (1, True)])
def test_budget_and_partition_invariants(seed, segments, concatenated):
    gen = torch.Generator().manual_seed(seed)
    n = 40
    # Long-tailed lengths: most short, a few long (some longer than the budget).
    lengths = (-60 * torch.rand(n, segments, generator=gen).log() + 1).long()  # exponential, mean ~60
    lengths[torch.randint(0, n, (3,), generator=gen)] *= 10
    budget = 800
    batches = token_budget_micro_batches(lengths, budget, concatenated=concatenated)
    rows = torch.cat(batches)
    assert sorted(rows.tolist()) == list(range(n))  # every row exactly once
    for b in batches:
        assert b.tolist() == sorted(b.tolist())
        # only a lone row may exceed the budget
        assert padded_cost(lengths[b], concatenated=concatenated) <= budget or len(b) == 1
    # Greedy packing wastes little: two consecutive micro-batches could not have been merged.
    for a, b in zip(batches, batches[1:]):
        assert padded_cost(lengths[torch.cat([a, b])], concatenated=concatenated) > budget
    assert [b.tolist() for b in token_budget_micro_batches(lengths, budget, concatenated=concatenated)] == [
        b.tolist() for b in batches
    ]  # deterministic


def test_real_token_span():
    # P = 4: prompts left-padded (longest 3 real tokens), responses right-padded (longest 2).
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 0]])
    assert real_token_span(mask, prompt_width=4) == (1, 6)


def test_token_budget_gradient_equals_fixed_count_gradient(tiny_model_path):
    """Token-mean clipped surrogate, global denominator: budget micro-batches (trimmed) == fixed-count ones."""
    from transformers import AutoModelForCausalLM

    from helpers.packed_batches import make_batch, reference_logprobs
    from lite_ppo.training.policy_forward import trim_padding

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).train()
    batch = make_batch([6, 3, 9], [3, 3, 2], [2, 11, 4, 1, 9, 3, 12, 5], vocab=model.config.vocab_size, seed=4)
    gen = torch.Generator().manual_seed(5)
    batch.advantages = torch.randn(batch.num_responses, generator=gen)

    def logprobs(micro):
        return reference_logprobs(model, micro)

    with torch.no_grad():  # old log-probs a little away from the current ones, so some ratios clip
        batch.old_logprobs = (
            logprobs(batch) + 0.3 * torch.randn(batch.response_mask.shape, generator=gen)
        ) * batch.response_mask
    denominator = aggregation_denominator(batch.loss_mask, "token-mean")

    def accumulated_gradient(micro_rows, trim):
        model.zero_grad()
        for idx in micro_rows:
            micro = batch.select(idx)
            micro = trim_padding(micro) if trim else micro
            token_loss, _ = clipped_surrogate(logprobs(micro), micro.old_logprobs, micro.advantages, 0.2, 0.28)
            aggregate_loss(token_loss, micro.loss_mask, "token-mean", denominator).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    fixed = accumulated_gradient(torch.arange(batch.num_responses).split(3), trim=False)
    lengths = torch.stack(
        [batch.attention_mask[:, : batch.prompt_width].sum(-1), batch.attention_mask[:, batch.prompt_width :].sum(-1)],
        dim=-1,
    )
    budget_rows = token_budget_micro_batches(lengths, max_tokens=40)
    assert len(budget_rows) > 2 and all(padded_cost(lengths[b]) <= 40 or len(b) == 1 for b in budget_rows)
    budget = accumulated_gradient(budget_rows, trim=True)
    for name, grad in fixed.items():
        torch.testing.assert_close(budget[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert any(g.abs().sum() > 0 for g in fixed.values())


def test_trim_padding_keeps_real_columns_only():
    from helpers.packed_batches import make_batch
    from lite_ppo.training.policy_forward import trim_padding

    batch = make_batch([6, 3, 9], [2, 2, 1], [2, 11, 4, 1, 9], vocab=50, seed=7)
    batch.old_logprobs = torch.randn(batch.response_mask.shape)
    micro = batch.select(torch.tensor([2, 3]))  # group 1 only: prompt 3 tokens, responses 4 and 1
    trimmed = trim_padding(micro)
    assert trimmed.input_ids.shape == (2, 3 + 4) and trimmed.prompt_width == 3
    assert trimmed.attention_mask.sum() == micro.attention_mask.sum()  # no real token lost
    assert torch.equal(trimmed.response_ids, micro.response_ids[:, :4])
    for name in ("response_mask", "loss_mask", "old_logprobs"):
        assert torch.equal(getattr(trimmed, name), getattr(micro, name)[:, :4])
