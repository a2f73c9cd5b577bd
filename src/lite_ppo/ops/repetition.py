"""Repetition inside one response, measured on token ids with n-grams.

Definition (used by the diagnostics):

- Take the last ``window`` tokens of the response (the whole response when it is shorter, or when
  ``window`` is None). Repetition is judged at the tail because a response that "answers, then
  repeats until truncated" loops at its end.
- The *repeated n-gram share* of that span is the number of n-gram positions whose n-gram already
  occurred at an earlier position of the span, divided by the number of n-gram positions
  (``len(span) - n + 1``). A span with fewer than ``n + 1`` tokens has share 0.
- The response is *repetitive* when that share is at least ``threshold``.

For a span that repeats a cycle of p tokens, every n-gram after the first cycle is a repeat, so
the share is ``(len - p - n + 1) / (len - n + 1)`` for n <= p: close to 1 for long loops. Natural
text reuses some n-grams too, hence a threshold well above 0 (default 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def repeated_ngram_share(tokens: Sequence[int], n: int = 4, window: int | None = None) -> float:
    """Share of the n-gram positions of the tail span that repeat an earlier n-gram of the span.

    Example:
        >>> repeated_ngram_share([1, 2, 3, 1, 2, 3, 1, 2, 3], n=2)   # 8 bigrams, 5 seen before
        0.625
        >>> repeated_ngram_share([1, 2, 3, 4, 5], n=2)
        0.0
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    span = list(tokens)
    if window is not None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        span = span[-window:]
    positions = len(span) - n + 1
    if positions < 2:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for i in range(positions):
        gram = tuple(span[i : i + n])
        if gram in seen:
            repeats += 1
        else:
            seen.add(gram)
    return repeats / positions


def repetition_shares(
    response_ids: torch.Tensor, lengths: torch.Tensor, n: int = 4, window: int | None = 256
) -> torch.Tensor:
    """:func:`repeated_ngram_share` of every row of a right-padded [B, R] id tensor: [B] float32.

    Args:
        response_ids: [B, R] token ids; row i's response is its first ``lengths[i]`` ids.
        lengths: [B] response lengths.
        n, window: as in :func:`repeated_ngram_share`.

    Only the tail spans (at most ``window`` ids per row) leave the tensor, so long responses cost
    no more than short ones.
    """
    ids = response_ids.detach()
    if ids.numel() == 0:
        return torch.zeros(ids.shape[0], dtype=torch.float32)
    width = ids.shape[1] if window is None else min(window, ids.shape[1])
    lengths = lengths.detach().to(ids.device).long().clamp(max=ids.shape[1])
    start = (lengths - width).clamp(min=0)
    index = start.unsqueeze(1) + torch.arange(width, device=ids.device).unsqueeze(0)
    # Gather the tails where the ids live; only [B, window] ids travel to the host.
    tails = torch.gather(ids, 1, index.clamp(max=ids.shape[1] - 1)).cpu().tolist()
    spans = lengths.clamp(max=width).cpu().tolist()
    return torch.tensor([repeated_ngram_share(tail[:span], n) for tail, span in zip(tails, spans)], dtype=torch.float32)
