"""Attention of packed groups without the dense mask: the prompt once, each response against it.

A packed row ``[prompt][response 1] ... [response G]`` (``ops.packing``) is usually run with a dense
[L, L] mask in which each response sees the prompt and its own prefix. Most of that square is
masked: a response of n tokens needs n x (p + n) scores, the dense row computes L^2 with
L = p + G n, so G responses pay ~G times the attention they use (8 x 45-token responses behind a
45-token prompt: 168k scores for 26k needed). Here the same attention runs on gathered blocks:

- prompt queries against the prompt's keys (causal): [groups, p, p];
- each response's queries against the prompt's keys and its own (causal): [responses, n, p + n];

and the outputs go back to their packed positions. Every real query sees exactly the keys the
dense mask lets it see, so the output equals ``sdpa(q, k, v, dense mask)`` at the real positions
(to float rounding; padding positions give 0), and gradients flow through the gathers to q, k, v.

Shapes: n packed rows of length L, h query heads, h_kv key/value heads (h_kv divides h), d head
size; B responses, P the longest prompt, N the longest response.

Example:
    >>> import torch
    >>> from lite_ppo.ops.packing import packed_attention_mask
    >>> segments = torch.tensor([[0, 0, 1, 1, 2, -1]])       # prompt of 2, responses of 2 and 1, padding
    >>> layout = shared_prompt_layout(segments)
    >>> q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    >>> dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=packed_attention_mask(segments))
    >>> out = shared_prompt_attention(q, k, v, layout)       # [n, L, h, d]
    >>> torch.allclose(out.transpose(1, 2)[..., :5, :], dense[..., :5, :], atol=1e-6)
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["SharedPromptLayout", "shared_prompt_attention", "shared_prompt_layout"]


@dataclass
class SharedPromptLayout:
    """Where the prompt and response blocks lie in the flattened [n * L] packed positions.

    - ``prompt_index`` [n, P]: flat position of each prompt token; ``prompt_mask`` [n, 1, P, P]:
      causal over the row's real prompt tokens.
    - ``query_index`` [B, N]: flat position of each response token; ``key_index`` [B, P + N]: the
      row's prompt positions, then the response's own; ``response_mask`` [B, 1, N, P + N]: the
      prompt's real keys and the response's causal prefix.
    - Entries past a prompt's or a response's end are filler indices whose outputs are dropped
      (their mask rows allow key 0, so no softmax row is empty).
    - ``real_entries`` [T]: the real entries of the flattened [n * P] prompt block followed by the
      flattened [B * N] response block (offset by n * P); ``real_positions`` [T]: their packed
      positions. Every real packed position appears once.
    """

    prompt_index: torch.Tensor
    prompt_mask: torch.Tensor
    query_index: torch.Tensor
    key_index: torch.Tensor
    response_mask: torch.Tensor
    real_entries: torch.Tensor
    real_positions: torch.Tensor


def shared_prompt_layout(segment_ids: torch.Tensor) -> SharedPromptLayout:
    """The block layout of packed rows from their [n, L] segment ids (``PackedGroups.segment_ids``:
    0 prompt, k the row's k-th response, -1 padding; each segment contiguous, prompt first)."""
    n, length = segment_ids.shape
    device = segment_ids.device
    flat = torch.arange(n * length, device=device).view(n, length)

    prompt_len = (segment_ids == 0).sum(-1)  # [n]
    p_max = int(prompt_len.max()) if n else 0
    cols = torch.arange(p_max, device=device)
    prompt_valid = cols[None, :] < prompt_len[:, None]  # the prompt is the row's first p tokens
    prompt_index = torch.where(prompt_valid, flat[:, :p_max], flat[:, :1])
    causal = torch.ones(p_max, p_max, dtype=torch.bool, device=device).tril()
    prompt_mask = causal[None] & prompt_valid[:, None, :]
    prompt_mask[:, :, 0] |= ~prompt_valid  # filler query rows: allow key 0
    prompt_mask = prompt_mask[:, None]

    # Responses: one per (row, segment k >= 1), in row order then segment order.
    seg = segment_ids.clamp(min=0)
    num_segments = int(seg.max()) if n else 0
    counts = F.one_hot(seg, num_segments + 1)[..., 1:].sum(1) if num_segments else seg.new_zeros(n, 0)  # [n, K]
    row_of, segment_of = counts.nonzero(as_tuple=True)  # responses that exist
    lengths = counts[row_of, segment_of]  # [B]
    # A response's first column: its row's prompt plus the earlier responses of the row.
    starts = prompt_len[row_of] + torch.cumsum(counts, 1)[row_of, segment_of] - lengths
    n_max = int(lengths.max()) if len(lengths) else 0
    offsets = torch.arange(n_max, device=device)
    query_valid = offsets[None, :] < lengths[:, None]
    query_cols = torch.where(query_valid, starts[:, None] + offsets[None, :], starts[:, None])
    query_index = flat[row_of[:, None], query_cols]
    key_index = torch.cat([prompt_index[row_of], query_index], dim=1)
    own = torch.ones(n_max, n_max, dtype=torch.bool, device=device).tril()[None] & query_valid[:, None, :]
    response_mask = torch.cat([prompt_valid[row_of][:, None, :].expand(-1, n_max, -1), own], dim=2)
    response_mask[:, :, 0] |= ~query_valid  # filler query rows: allow key 0 (a real prompt token)
    real_entries = torch.cat(
        [
            prompt_valid.reshape(-1).nonzero().squeeze(1),
            prompt_valid.numel() + query_valid.reshape(-1).nonzero().squeeze(1),
        ]
    )
    real_positions = torch.cat([prompt_index[prompt_valid], query_index[query_valid]])
    return SharedPromptLayout(
        prompt_index=prompt_index,
        prompt_mask=prompt_mask,
        query_index=query_index,
        key_index=key_index,
        response_mask=response_mask[:, None],
        real_entries=real_entries,
        real_positions=real_positions,
    )


def shared_prompt_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: SharedPromptLayout,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of the packed rows by blocks: [n, h, L, d] query, [n, h_kv, L, d] key and value ->
    [n, L, h, d] output (the layout attention implementations return), 0 at padding positions."""
    n, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    # [n, h, L, d] -> [n * L, h, d]: one row per packed position, so blocks are plain index gathers.
    q = query.transpose(1, 2).reshape(n * length, heads, dim)
    k = key.transpose(1, 2).reshape(n * length, kv_heads, dim)
    v = value.transpose(1, 2).reshape(n * length, kv_heads, dim)

    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        # [b, rows] positions -> [b, heads, rows, d] for sdpa. index_select, whose backward is an
        # index_add (prompt keys are gathered by every response of the group), not an index_put.
        return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:]).transpose(1, 2)

    def block(q_index: torch.Tensor, k_index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(
            gather(q, q_index),
            gather(k, k_index),
            gather(v, k_index),
            attn_mask=mask,
            scale=scale,
            enable_gqa=kv_heads != heads,
        )
        return out.transpose(1, 2).reshape(-1, heads, dim)  # [b * rows, heads, d]

    prompt_out = block(layout.prompt_index, layout.prompt_index, layout.prompt_mask)
    response_out = block(layout.query_index, layout.key_index, layout.response_mask)
    # Each real position is the query of exactly one block entry: place those, zeros elsewhere.
    real = torch.cat([prompt_out, response_out]).index_select(0, layout.real_entries)
    out = query.new_zeros(n * length, heads, dim).index_copy(0, layout.real_positions, real)
    return out.view(n, length, heads, dim)
