"""Shared-prompt packing: indices and masks by hand, and equality with the unpacked forward on the tiny model."""

from __future__ import annotations

import pytest
import torch

from helpers.packed_batches import (
    assert_same_logprobs_and_gradients,
    make_batch,
    reference_logprobs,
    surrogate_like_loss,
)
from lite_ppo.ops import group_rows, pack_shared_prompts, packed_attention_mask, packed_lengths

# Equivalence to float rounding: .ci/run repeats these at the CPU dispatch level below this one.
pytestmark = pytest.mark.numerics


def test_pack_layout_by_hand():
    # P = 3, R = 3; group 0: prompt [5, 6] + responses [7, 8] and [9]; group 1: prompt [4] + [3, 2, 1].
    ids = torch.tensor([[0, 5, 6, 7, 8, 0], [0, 5, 6, 9, 0, 0], [0, 0, 4, 3, 2, 1]])
    packed = pack_shared_prompts(ids, (ids != 0).long(), prompt_width=3, group_ids=torch.tensor([0, 0, 1]))
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9], [4, 3, 2, 1, 0]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 2], [0, 1, 2, 3, 0]]
    assert packed.segment_ids.tolist() == [[0, 0, 1, 1, 2], [0, 1, 1, 1, -1]]
    assert packed.row.tolist() == [0, 0, 1]
    # Token t of a response is predicted at the last prompt token (t = 0) or at its token t - 1.
    assert packed.predict_index.tolist() == [[1, 2, 0], [1, 0, 0], [0, 1, 2]]
    assert packed.response_valid.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    assert packed.num_tokens == 9
    # Lengths of the packed rows, the unit a token budget packs when groups are packed.
    assert packed_lengths((ids != 0).long(), 3, torch.tensor([0, 0, 1])).tolist() == [5, 4]
    assert [r.tolist() for r in group_rows(torch.tensor([2, 0, 2, 1]))] == [[0, 2], [1], [3]]


def test_pack_one_row_by_hand():
    # The groups of test_pack_layout_by_hand back to back, plus group 2 (prompt [7]) whose only
    # response is empty: nothing to score, so it is left out.
    ids = torch.tensor([[0, 5, 6, 7, 8, 0], [0, 5, 6, 9, 0, 0], [0, 0, 4, 3, 2, 1], [0, 0, 7, 0, 0, 0]])
    groups = torch.tensor([0, 0, 1, 2])
    packed = pack_shared_prompts(ids, (ids != 0).long(), prompt_width=3, group_ids=groups, one_row=True)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9, 4, 3, 2, 1]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 2, 0, 1, 2, 3]]
    assert packed.segment_ids.tolist() == [[0, 0, 1, 1, 2, 0, 1, 1, 1]]
    assert packed.row.tolist() == [0, 0, 0, 0]
    # Group 1 starts at column 5: its prompt token 4 predicts its first response token.
    assert packed.predict_index.tolist() == [[1, 2, 0], [1, 0, 0], [5, 6, 7], [0, 0, 0]]
    assert packed.response_valid.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]
    assert packed.num_tokens == 9
    # Only empty groups: one is kept, so that the forward has a row.
    empty = pack_shared_prompts(ids[3:], (ids[3:] != 0).long(), prompt_width=3, group_ids=groups[3:], one_row=True)
    assert empty.input_ids.tolist() == [[7]]


def test_packed_attention_mask_of_two_groups_in_one_row():
    # Group A: prompt of 2, responses of 1 and 1; group B: prompt of 1, a response of 2.
    mask = packed_attention_mask(torch.tensor([[0, 0, 1, 2, 0, 1, 1]]))[0, 0].int()
    expected = [
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0],  # B's prompt sees only itself: nothing of group A
        [0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 1, 1, 1],
    ]
    assert mask.tolist() == expected


def test_packed_attention_mask_by_hand():
    mask = packed_attention_mask(torch.tensor([[0, 0, 1, 1, 2, -1]]))[0, 0].int()
    expected = [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],  # the second response sees the prompt and itself, not the first response
        [0, 0, 0, 0, 0, 1],  # padding sees itself only (no empty softmax row)
    ]
    assert mask.tolist() == expected


def test_pack_rejects_a_group_with_two_prompts():
    ids = torch.tensor([[0, 5, 6, 7], [0, 5, 8, 9]])
    with pytest.raises(ValueError, match="same prompt"):
        pack_shared_prompts(ids, (ids != 0).long(), prompt_width=3, group_ids=torch.tensor([0, 0]))


@pytest.fixture(scope="module")
def tiny_policy(tiny_model_path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    return model.train()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logprobs_and_gradients_equal_unpacked(tiny_policy, attn):
    from lite_ppo.training.policy_forward import response_logprobs

    model = tiny_policy
    model.config._attn_implementation = attn  # the decoder layers read it at call time
    try:
        # 3 groups, unequal prompts (7, 3, 11 tokens) and group sizes, response lengths 1..9, groups interleaved.
        batch = make_batch([7, 3, 11], [3, 2, 4], [5, 9, 1, 4, 8, 2, 7, 9, 3], vocab=model.config.vocab_size)
        order = torch.tensor([0, 3, 5, 1, 6, 4, 2, 7, 8])  # rows of a group need not be adjacent
        batch = batch.select(order)

        model.zero_grad()
        expected = reference_logprobs(model, batch)
        surrogate_like_loss(expected, batch).backward()
        expected_grads = {n: p.grad.clone() for n, p in model.named_parameters()}

        model.zero_grad()
        got, entropy = response_logprobs(model, batch, pack=True, chunk_size=5)
        surrogate_like_loss(got, batch).backward()

        torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
        assert (got[batch.response_mask == 0] == 0).all()
        for name, param in model.named_parameters():
            torch.testing.assert_close(param.grad, expected_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    finally:
        model.config._attn_implementation = "sdpa"
        model.zero_grad()


def test_unpacked_hidden_state_path_equals_full_logits(tiny_policy):
    from lite_ppo.training.policy_forward import response_logprobs

    batch = make_batch([4, 6], [2, 3], [3, 6, 2, 5, 4], vocab=tiny_policy.config.vocab_size, seed=1)
    with torch.no_grad():
        expected = reference_logprobs(tiny_policy, batch)
        got, _ = response_logprobs(tiny_policy, batch, pack=False, chunk_size=4)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)


def test_packed_equals_unpacked_on_qwen3(_model_cache):
    """The same equality on the Qwen3 architecture (q/k norms, its own attention module)."""
    from transformers import AutoModelForCausalLM

    from lite_ppo.models import resolve_model
    from lite_ppo.training.policy_forward import response_logprobs

    model = AutoModelForCausalLM.from_pretrained(resolve_model("builtin:tiny-qwen3"), dtype=torch.float32).train()
    batch = make_batch([5, 9], [3, 2], [6, 2, 8, 3, 5], vocab=model.config.vocab_size, seed=8)
    assert_same_logprobs_and_gradients(model, batch, lambda m, b: response_logprobs(m, b, pack=True)[0])


def test_packed_forward_runs_block_attention_and_restores_the_model(tiny_policy, monkeypatch):
    """Without gradient checkpointing every layer's attention is the block one (no [L, L] mask),
    and the model's own implementation is back afterwards."""
    import lite_ppo.training.policy_forward as policy_forward
    from lite_ppo.ops import shared_prompt_attention as original

    calls = []

    def spy(query, key, value, layout, scale=None):
        calls.append(query.shape)
        return original(query, key, value, layout, scale)

    monkeypatch.setattr(policy_forward, "shared_prompt_attention", spy)
    batch = make_batch([4, 6], [2, 3], [3, 6, 2, 5, 4], vocab=tiny_policy.config.vocab_size, seed=2)
    policy_forward.response_logprobs(tiny_policy, batch, pack=True)
    assert len(calls) == tiny_policy.config.num_hidden_layers
    assert tiny_policy.config._attn_implementation == "sdpa"


def test_packed_with_gradient_checkpointing_equals_unpacked(tiny_policy):
    """Checkpointed layers re-run in backward with the model's own attention: the packed forward
    then uses the dense packed mask, and log-probs and gradients still equal the unpacked ones."""
    from lite_ppo.training.policy_forward import response_logprobs

    tiny_policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        batch = make_batch([7, 3], [3, 2], [5, 9, 1, 4, 8], vocab=tiny_policy.config.vocab_size, seed=3)
        assert_same_logprobs_and_gradients(tiny_policy, batch, lambda m, b: response_logprobs(m, b, pack=True)[0])
    finally:
        tiny_policy.gradient_checkpointing_disable()
        tiny_policy.zero_grad()
