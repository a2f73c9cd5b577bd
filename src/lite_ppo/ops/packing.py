"""Shared-prompt packing: each group's prompt once, followed by its G responses, in one row.

With G responses per prompt, the usual layout computes every prompt G times. Packing a group as

    [prompt][response 1][response 2] ... [response G]

with an attention mask in which every response sees the prompt and its own causal prefix only
(never another response), and position ids that restart at the prompt length for each response,
gives each response token exactly the context, positions and therefore hidden states it has in the
unpacked layout: the per-token log-probs are equal (to float tolerance). The prompt's activations
are computed once and their gradient is the sum over the group's responses, as autograd would
compute it for G copies.

This module only builds indices and masks (pure tensor code); running the model on them is the
caller's business.

By default each group gets a row of its own, padded to the longest; ``one_row=True`` concatenates
the groups into a single row with no padding at all (a group then starts at each prompt token that
follows a response token: see :func:`packed_attention_mask`). The model computes the same values
either way; one row saves the padding's compute.

Layout of the input (the rollout layout): ``input_ids`` [B, P + R] = prompt left-padded to P, then
the response right-padded to R; ``attention_mask`` 1 on real tokens; ``group_ids`` [B] (rows of one
group share the prompt).

Example:
    >>> import torch
    >>> ids = torch.tensor([[0, 5, 6, 7, 8, 0], [0, 5, 6, 9, 0, 0]])   # pad 0, P = 3, R = 3
    >>> mask = (ids != 0).long()
    >>> packed = pack_shared_prompts(ids, mask, prompt_width=3, group_ids=torch.tensor([0, 0]))
    >>> packed.input_ids.tolist(), packed.position_ids.tolist()
    ([[5, 6, 7, 8, 9]], [[0, 1, 2, 3, 2]])
    >>> two = pack_shared_prompts(ids, mask, prompt_width=3, group_ids=torch.tensor([0, 1]), one_row=True)
    >>> two.input_ids.tolist(), two.segment_ids.tolist()
    ([[5, 6, 7, 8, 5, 6, 9]], [[0, 0, 1, 1, 0, 0, 1]])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "PackedGroups",
    "group_rows",
    "group_starts",
    "pack_shared_prompts",
    "packed_attention_mask",
    "packed_lengths",
]


@dataclass
class PackedGroups:
    """Packed groups (one row each, or all in one row), and where each response token's predicting
    position lies.

    Shapes (n = rows: the groups, or 1; L = longest packed row, B = responses, R = response width):

    - ``input_ids`` [n, L] (``pad_token_id`` after the row's end), ``position_ids`` [n, L].
    - ``segment_ids`` [n, L]: 0 on prompt tokens, k on the tokens of the group's k-th response
      (1-based), -1 on padding.
    - ``row`` [B]: the packed row of each response.
    - ``predict_index`` [B, R]: the packed column whose output predicts response token t (the last
      prompt token for t = 0, response token t - 1 otherwise); 0 where ``response_valid`` is 0.
    - ``response_valid`` [B, R]: 1 on the real response tokens (those the packed rows hold).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    row: torch.Tensor
    predict_index: torch.Tensor
    response_valid: torch.Tensor

    def attention_mask(self) -> torch.Tensor:
        """[n, 1, L, L] bool, True where a query may attend to a key (see :func:`packed_attention_mask`)."""
        return packed_attention_mask(self.segment_ids)

    @property
    def num_tokens(self) -> int:
        """Real tokens in the packed rows (what the forward must process, padding aside)."""
        return int((self.segment_ids >= 0).sum())


def packed_attention_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Attention mask of packed rows: [n, L] segment ids -> [n, 1, L, L] bool (True = may attend).

    Query i attends to key j <= i of its own group when j is a prompt token (segment 0) or in i's
    own segment. A group starts at every prompt token that does not follow another prompt token
    (rows may hold several groups back to back). Padding (segment -1) attends to itself only, so no
    row of the mask is empty (an all-masked row would turn into NaN in softmax).
    """
    n, length = segment_ids.shape
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    group = torch.cumsum(group_starts(segment_ids), dim=1)  # [n, L] group number within the row
    query, key = segment_ids[:, :, None], segment_ids[:, None, :]
    same_group = group[:, :, None] == group[:, None, :]
    visible = causal & same_group & (query >= 0) & ((key == 0) | (key == query))
    visible |= torch.eye(length, dtype=torch.bool, device=segment_ids.device)
    return visible[:, None]


def group_starts(segment_ids: torch.Tensor) -> torch.Tensor:
    """[n, L] bool: True at the first token of each packed group, a prompt token (segment 0) at the
    row's start or after a token of another segment (rows may hold several groups back to back)."""
    previous = torch.full_like(segment_ids, -1)  # a row's first token follows nothing
    previous[:, 1:] = segment_ids[:, :-1]
    return (segment_ids == 0) & (previous != 0)


def group_rows(group_ids: torch.Tensor) -> list[torch.Tensor]:
    """Row indices of each group, groups in the order of their first row: the packing order."""
    groups: dict[int, list[int]] = {}
    for b, g in enumerate(group_ids.tolist()):
        groups.setdefault(g, []).append(b)
    return [torch.tensor(rows, dtype=torch.long) for rows in groups.values()]


def packed_lengths(attention_mask: torch.Tensor, prompt_width: int, group_ids: torch.Tensor) -> torch.Tensor:
    """[n_groups] tokens of each group's packed row: its prompt once plus all its responses.

    With :func:`group_rows`, this lets ``token_budget_micro_batches`` budget whole groups:
    ``units = token_budget_micro_batches(packed_lengths(...), budget)`` then
    ``rows = torch.cat([group_rows(group_ids)[u] for u in unit])`` per micro-batch.
    """
    real = attention_mask.bool()
    prompt, response = real[:, :prompt_width].sum(-1), real[:, prompt_width:].sum(-1)
    return (
        torch.stack([prompt[rows[0]] + response[rows].sum() for rows in group_rows(group_ids)])
        if len(group_ids)
        else torch.zeros(0, dtype=torch.long)
    )


def pack_shared_prompts(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_width: int,
    group_ids: torch.Tensor,
    pad_token_id: int = 0,
    one_row: bool = False,
) -> PackedGroups:
    """Pack each group of responses behind one copy of its prompt.

    Groups are packed in the order of their first row, one row each (padded to the longest) or,
    with ``one_row``, all in a single row without padding. The rows of a group must hold the same
    prompt (checked: a ``ValueError`` otherwise). The prompt's real tokens get positions
    0 .. p - 1 and each response's tokens p .. p + len - 1, the positions of the unpacked,
    left-padded layout (``attention_mask.cumsum(-1) - 1``).

    Args:
        input_ids: [B, P + R] prompt left-padded to ``prompt_width`` = P, response right-padded.
        attention_mask: [B, P + R] 1 on real tokens (responses are right-padded: their real tokens
            are a prefix of the response part).
        prompt_width: P.
        group_ids: [B] the group (prompt) of each row.
        pad_token_id: the id written after each packed row's end.
        one_row: concatenate the packed groups into one row (no padding). Groups without a
            response token are then left out (nothing to score; their rows' ``response_valid`` is 0).

    Returns:
        :class:`PackedGroups`.
    """
    device = input_ids.device
    num_rows, width = input_ids.shape
    response_width = width - prompt_width
    real = attention_mask.bool()
    prompt_lengths = real[:, :prompt_width].sum(-1).tolist()
    response_lengths = real[:, prompt_width:].sum(-1).tolist()
    groups = [rows.tolist() for rows in group_rows(group_ids)]
    if one_row:
        # A group without a response token has nothing to score, and in one row its prompt would
        # run into the next group's: leave it out (keeping one group when all are empty).
        groups = [members for members in groups if any(response_lengths[b] for b in members)] or groups[:1]

    rows_ids, rows_pos, rows_seg = [], [], []
    row = torch.zeros(num_rows, dtype=torch.long)
    predict_index = torch.zeros(num_rows, response_width, dtype=torch.long)
    response_valid = torch.zeros(num_rows, response_width, dtype=torch.long)
    for members in groups:
        prompt = _shared_prompt(input_ids, members, prompt_lengths, prompt_width, group_ids)
        p = len(prompt)
        r = 0 if one_row else len(rows_ids)  # this group's packed row
        start = sum(map(len, rows_ids)) if one_row else 0  # packed column of the prompt's first token
        ids, pos, seg = [prompt], [torch.arange(p)], [torch.zeros(p, dtype=torch.long)]
        offset = start + p  # packed column of the next token
        for k, b in enumerate(members, start=1):
            n = response_lengths[b]
            ids.append(input_ids[b, prompt_width : prompt_width + n])
            pos.append(torch.arange(p, p + n))
            seg.append(torch.full((n,), k, dtype=torch.long))
            row[b] = r
            # Token t is predicted by the output at the previous token: the last prompt token
            # for t = 0, this response's token t - 1 otherwise.
            predict_index[b, :n] = torch.cat(
                [torch.tensor([start + p - 1]), torch.arange(offset, offset + max(n - 1, 0))]
            )[:n]
            response_valid[b, :n] = 1
            offset += n
        rows_ids.append(torch.cat(ids))
        rows_pos.append(torch.cat(pos))
        rows_seg.append(torch.cat(seg))

    if one_row and rows_ids:
        rows_ids, rows_pos, rows_seg = [torch.cat(rows_ids)], [torch.cat(rows_pos)], [torch.cat(rows_seg)]
    length = max((len(x) for x in rows_ids), default=0)
    return PackedGroups(
        input_ids=_right_padded(rows_ids, length, pad_token_id).to(device),
        position_ids=_right_padded(rows_pos, length, 0).to(device),
        segment_ids=_right_padded(rows_seg, length, -1).to(device),
        row=row.to(device),
        predict_index=predict_index.to(device),
        response_valid=response_valid.to(device),
    )


def _shared_prompt(
    input_ids: torch.Tensor, members: list[int], prompt_lengths: list[int], prompt_width: int, group_ids: torch.Tensor
) -> torch.Tensor:
    """The real prompt tokens of a group's rows ``members``; a ``ValueError`` unless they all hold the
    same, non-empty prompt."""
    first = members[0]
    p = prompt_lengths[first]
    if p == 0:
        raise ValueError(
            f"row {first} has an empty prompt: the first response token has no position to be predicted from"
        )
    prompt = input_ids[first, prompt_width - p : prompt_width]
    for b in members[1:]:
        if prompt_lengths[b] != p or not torch.equal(input_ids[b, prompt_width - p : prompt_width], prompt):
            raise ValueError(f"rows {first} and {b} share group id {group_ids[first].item()} but not the same prompt")
    return prompt


def _right_padded(rows: list[torch.Tensor], length: int, value: int) -> torch.Tensor:
    """[len(rows), length]: each row followed by ``value`` up to ``length``."""
    return torch.stack([torch.nn.functional.pad(x, (0, length - len(x)), value=value) for x in rows])
