"""Micro-batches sized by a token budget instead of a fixed row count (verl's "dynamic batch size").

A fixed count of responses padded to the longest one wastes compute when lengths vary: one
8,000-token response pads fifteen 300-token ones. Sorting rows by length and packing them greedily
under a budget on the *padded* cost (rows x longest row, what the forward really processes) keeps
similar lengths together.

The gradient does not change: the loss of every micro-batch is divided by the denominator of the
whole optimizer step (``aggregation_denominator`` over the mini-batch, all ranks), so summing the
micro-batch gradients gives the same total whatever the partition.

Example:
    >>> import torch
    >>> lengths = torch.tensor([5, 100, 7, 90, 6])
    >>> [b.tolist() for b in token_budget_micro_batches(lengths, max_tokens=200)]
    [[1, 3], [0, 2, 4]]
"""

from __future__ import annotations

import torch

__all__ = ["padded_cost", "real_token_span", "split_to_count", "token_budget_micro_batches"]


def padded_cost(lengths: torch.Tensor, concatenated: bool = False) -> int:
    """Tokens a forward processes for these rows once padded: n_rows x longest row.

    ``lengths`` is [n] (one length per row) or [n, k] (k segments padded separately, e.g. a
    left-padded prompt and a right-padded response: width = longest prompt + longest response).
    ``concatenated``: the rows run back to back in one sequence, without padding: the sum.
    """
    if lengths.numel() == 0:
        return 0
    if concatenated:
        return int(lengths.sum())
    lengths = lengths.reshape(lengths.shape[0], -1)
    return int(lengths.shape[0] * lengths.max(dim=0).values.sum().item())


def token_budget_micro_batches(
    lengths: torch.Tensor, max_tokens: int, concatenated: bool = False
) -> list[torch.Tensor]:
    """Partition rows into micro-batches whose padded cost stays within ``max_tokens``.

    Rows are sorted by total length, longest first (ties by row index, so the result is
    deterministic), and appended to the current micro-batch while its padded cost
    (:func:`padded_cost`) stays within the budget; otherwise a new micro-batch starts. A row that
    alone exceeds the budget gets a micro-batch of its own. Every row appears exactly once.

    Args:
        lengths: [n] tokens per row, or [n, k] per separately padded segment (see :func:`padded_cost`).
        max_tokens: the budget of padded tokens per micro-batch (> 0).
        concatenated: the forward runs a micro-batch's rows back to back without padding, so its
            cost is the sum of their lengths.

    Returns:
        A list of 1-D long tensors of row indices, longest micro-batch first (so an out-of-memory
        shows at the first one); the indices of each micro-batch are in ascending row order.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    lengths = lengths.detach().to("cpu", torch.long)
    lengths = lengths.reshape(lengths.shape[0], -1)
    totals = lengths.sum(dim=1)
    # Stable sort on -total: longest first, equal lengths keep row order.
    order = torch.sort(-totals, stable=True).indices.tolist()
    batches: list[list[int]] = []
    current: list[int] = []
    widths = torch.zeros(lengths.shape[1], dtype=torch.long)  # longest (concatenated: sum) of each segment in `current`
    for row in order:
        grown = widths + lengths[row] if concatenated else torch.maximum(widths, lengths[row])
        cost = int(grown.sum()) if concatenated else (len(current) + 1) * int(grown.sum())
        if current and cost > max_tokens:
            batches.append(current)
            current, grown = [], lengths[row].clone()
        current.append(row)
        widths = grown
    if current:
        batches.append(current)
    return [torch.tensor(sorted(b), dtype=torch.long) for b in batches]


def real_token_span(attention_mask: torch.Tensor, prompt_width: int) -> tuple[int, int]:
    """Columns [start, end) of a left-padded-prompt / right-padded-response batch that hold any real token.

    A micro-batch selected from a wider batch keeps the batch's padding; slicing the sequence
    tensors to ``[start, end)`` (and the response tensors to ``[0, end - prompt_width)``) makes the
    forward process ``n_rows x (longest prompt + longest response)`` tokens, the cost
    :func:`token_budget_micro_batches` budgets. ``start <= prompt_width - 1`` always, so the
    logit predicting the first response token stays inside the span.
    """
    real = attention_mask.bool().any(dim=0)
    prompt_real = real[:prompt_width].nonzero()
    start = int(prompt_real[0]) if len(prompt_real) else prompt_width - 1
    response_real = real[prompt_width:].nonzero()
    end = prompt_width + (int(response_real[-1]) + 1 if len(response_real) else 0)
    return min(start, prompt_width - 1), end


def split_to_count(micro_batches: list[torch.Tensor], count: int) -> list[torch.Tensor]:
    """``micro_batches`` split until there are ``count`` of them: the one with the most rows is halved
    each time (used when every data-parallel rank must run the same number of forward passes).

    Example:
        >>> [b.tolist() for b in split_to_count([torch.tensor([0, 1, 2]), torch.tensor([3])], 3)]
        [[0], [1, 2], [3]]
    """
    out = list(micro_batches)
    while len(out) < count:
        k = max(range(len(out)), key=lambda i: len(out[i]))
        if len(out[k]) < 2:
            raise ValueError(
                f"cannot split {len(micro_batches)} micro-batches into {count}: every one holds a single row"
            )
        half = len(out[k]) // 2
        out[k : k + 1] = [out[k][:half], out[k][half:]]
    return out
