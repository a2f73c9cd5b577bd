"""Block attention of packed groups equals sdpa with the dense packed mask: values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lite_ppo.ops.packed_attention import shared_prompt_attention, shared_prompt_layout
from lite_ppo.ops.packing import packed_attention_mask

# Equivalence to float rounding: .ci/run repeats these at the CPU dispatch level below this one.
pytestmark = pytest.mark.numerics


def _segments(rows: list[tuple[int, list[int]]], length: int) -> torch.Tensor:
    """[n, length] segment ids of rows given as (prompt length, response lengths), padded with -1."""
    out = torch.full((len(rows), length), -1, dtype=torch.long)
    for r, (prompt, responses) in enumerate(rows):
        ids = [0] * prompt + [k for k, n in enumerate(responses, start=1) for _ in range(n)]
        out[r, : len(ids)] = torch.tensor(ids)
    return out


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (6, 2)])
def test_equals_dense_mask_values_and_gradients(heads, kv_heads):
    # unequal prompts and responses, a one-token response, a row with one response, padding
    rows = [(3, [4, 1, 2]), (5, [2]), (1, [3, 3])]
    segments = _segments(rows, length=11)
    gen = torch.Generator().manual_seed(0)
    n, length, dim = segments.shape[0], segments.shape[1], 8
    q = torch.randn(n, heads, length, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(n, kv_heads, length, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(n, kv_heads, length, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    real = segments >= 0
    weights = torch.randn(n, length, heads, dim, generator=gen, dtype=torch.float64) * real[:, :, None, None]

    repeat = heads // kv_heads
    dense = F.scaled_dot_product_attention(
        q, k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1), attn_mask=packed_attention_mask(segments)
    ).transpose(1, 2)
    expected = torch.autograd.grad((dense * weights).sum(), (q, k, v))

    out = shared_prompt_attention(q, k, v, shared_prompt_layout(segments))
    got = torch.autograd.grad((out * weights).sum(), (q, k, v))

    torch.testing.assert_close(out[real], dense[real], rtol=0, atol=1e-12)
    assert (out[~real] == 0).all()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_layout_counts_the_scores_each_response_needs():
    # prompt 3, responses 4 and 2: the response blocks hold 2 rows of P + N = 3 + 4 keys, each
    # response query allowed the 3 prompt keys and its own prefix; the prompt block 3 causal rows.
    layout = shared_prompt_layout(_segments([(3, [4, 2])], length=9))
    assert layout.query_index.tolist() == [[3, 4, 5, 6], [7, 8, 7, 7]]
    assert layout.key_index.tolist() == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 7, 8, 7, 7]]
    real_queries = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)  # responses of 4 and 2
    allowed = layout.response_mask[:, 0][real_queries].sum(-1).tolist()
    assert allowed == [4, 5, 6, 7, 4, 5]  # 3 prompt keys + 1..n own
    assert layout.prompt_mask[0, 0].sum(-1).tolist() == [1, 2, 3]


def test_groups_in_one_row_equal_a_row_each():
    """The groups of one row (no padding) get the outputs and gradients they get in rows of their own."""
    rows = [(3, [4, 1, 2]), (5, [2]), (1, [3, 3])]
    grid = _segments(rows, length=11)
    real = grid >= 0
    one_row = grid[real][None]  # [1, 24]: the groups back to back
    gen = torch.Generator().manual_seed(1)
    heads, kv_heads, dim = 6, 2, 8
    q = torch.randn(3, heads, 11, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, kv_heads, 11, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, kv_heads, 11, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 11, heads, dim, generator=gen, dtype=torch.float64) * real[:, :, None, None]

    def flatten(x: torch.Tensor) -> torch.Tensor:  # [3, h, 11, d] -> [1, h, 24, d]: real positions, in order
        return x.transpose(1, 2)[real].transpose(0, 1)[None]

    expected = shared_prompt_attention(q, k, v, shared_prompt_layout(grid))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (q, k, v))
    out = shared_prompt_attention(flatten(q), flatten(k), flatten(v), shared_prompt_layout(one_row))
    got_grads = torch.autograd.grad((out * weights[real][None]).sum(), (q, k, v))

    torch.testing.assert_close(out[0], expected[real], rtol=0, atol=1e-12)
    for g, e in zip(got_grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    # And the dense mask of the one row (groups told apart) agrees too.
    dense = F.scaled_dot_product_attention(
        flatten(q),
        *(flatten(x).repeat_interleave(heads // kv_heads, 1) for x in (k, v)),
        attn_mask=packed_attention_mask(one_row),
    ).transpose(1, 2)
    torch.testing.assert_close(out, dense, rtol=0, atol=1e-12)
