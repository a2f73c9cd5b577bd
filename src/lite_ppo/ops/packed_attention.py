"""Attention of packed groups without the dense mask: the prompt once, each response against it.

A packed group ``[prompt][response 1] ... [response G]`` (``ops.packing``) is usually run with a dense
[L, L] mask in which each response sees the prompt and its own prefix. Most of that square is
masked: a response of n tokens needs n x (p + n) scores, the dense row computes L^2 with
L = p + G n, so G responses pay ~G times the attention they use (8 x 45-token responses behind a
45-token prompt: 168k scores for 26k needed). Here the same attention runs on gathered blocks:

- prompt queries against the prompt's keys (causal): [groups, p, p];
- each response's queries against the prompt's keys and its own (causal): [responses, n, p + n];

and the outputs go back to their packed positions. A packed row may hold several groups back to
back (``pack_shared_prompts(one_row=True)``: no padding at all); blocks never cross groups. Every
real query sees exactly the keys the dense mask lets it see, so the output equals
``sdpa(q, k, v, dense mask)`` at the real positions (to float rounding; padding positions give 0),
and gradients flow through the gathers to q, k, v.

Shapes: n packed rows of length L holding G groups, h query heads, h_kv key/value heads (h_kv
divides h), d head size; B responses, P the longest prompt, N the longest response.

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

from lite_ppo.ops.packing import group_starts

__all__ = ["SharedPromptLayout", "shared_prompt_attention", "shared_prompt_layout"]


@dataclass
class SharedPromptLayout:
    """Where the prompt and response blocks lie in the flattened [n * L] packed positions.

    - ``prompt_index`` [G, P]: flat position of each group's prompt tokens; ``prompt_mask``
      [G, 1, P, P]: causal over the group's real prompt tokens.
    - ``query_index`` [B, N]: flat position of each response token; ``key_index`` [B, P + N]: its
      group's prompt positions, then the response's own; ``response_mask`` [B, 1, N, P + N]: the
      prompt's real keys and the response's causal prefix.
    - Entries past a prompt's or a response's end are filler indices whose outputs are dropped
      (their mask rows allow key 0, so no softmax row is empty).
    - ``real_entries`` [T]: the real entries of the flattened [G * P] prompt block followed by the
      flattened [B * N] response block (offset by G * P); ``real_positions`` [T]: their packed
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
    0 prompt, k the group's k-th response, -1 padding; each segment contiguous).

    A row holds one or more groups back to back, each its prompt then its responses
    (``ops.group_starts`` finds where each begins).
    """
    device = segment_ids.device
    seg = segment_ids.reshape(-1)  # one entry per flat packed position
    opens_group = group_starts(segment_ids).reshape(-1)
    group_start = opens_group.nonzero().squeeze(1)  # [G] flat position of each group's first token
    num_groups = len(group_start)
    group_of = torch.cumsum(opens_group, 0) - 1  # group of each real position

    prompt_len = torch.bincount(group_of[seg == 0], minlength=num_groups)  # [G]
    p_max = int(prompt_len.max()) if num_groups else 0
    cols = torch.arange(p_max, device=device)
    prompt_valid = cols[None, :] < prompt_len[:, None]  # the prompt is the group's first p tokens
    prompt_index = group_start[:, None] + torch.where(prompt_valid, cols[None, :], 0)
    causal = torch.ones(p_max, p_max, dtype=torch.bool, device=device).tril()
    prompt_mask = causal[None] & prompt_valid[:, None, :]
    prompt_mask[:, :, 0] |= ~prompt_valid  # filler query rows: allow key 0
    prompt_mask = prompt_mask[:, None]

    # Responses: one per (group, segment k >= 1), in group order then segment order.
    num_segments = int(seg.max()) if seg.numel() else 0
    in_response = seg > 0
    counts = torch.bincount(
        group_of[in_response] * num_segments + seg[in_response] - 1, minlength=num_groups * num_segments
    ).view(num_groups, num_segments)  # [G, K] tokens of each group's k-th response
    group_of_response, segment_of = counts.nonzero(as_tuple=True)  # responses that exist
    lengths = counts[group_of_response, segment_of]  # [B]
    # A response's first column in its group: the prompt plus the group's earlier responses.
    starts = prompt_len[group_of_response] + torch.cumsum(counts, 1)[group_of_response, segment_of] - lengths
    n_max = int(lengths.max()) if len(lengths) else 0
    offsets = torch.arange(n_max, device=device)
    query_valid = offsets[None, :] < lengths[:, None]
    query_index = group_start[group_of_response, None] + starts[:, None] + torch.where(query_valid, offsets[None, :], 0)
    key_index = torch.cat([prompt_index[group_of_response], query_index], dim=1)
    own = torch.ones(n_max, n_max, dtype=torch.bool, device=device).tril()[None] & query_valid[:, None, :]
    response_mask = torch.cat([prompt_valid[group_of_response][:, None, :].expand(-1, n_max, -1), own], dim=2)
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
