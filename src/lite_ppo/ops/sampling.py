"""Next-token sampling: temperature, top-k and top-p (nucleus) on a batch of logits.

The filters are applied in the order and with the tie rules of transformers' ``generate``
(``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``, each keeping at least one
token), so an engine that samples with them draws from the same distribution as ``generate``.

Example:
    >>> logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    >>> warp_logits(logits, temperature=1.0, top_k=2, top_p=1.0)
    tensor([[2., 1., -inf, -inf]])
"""

from __future__ import annotations

import torch

__all__ = ["sample_next", "warp_logits"]


def warp_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """``logits`` [B, V] divided by ``temperature``, with the tokens outside the top-k and outside the
    top-p nucleus set to ``-inf`` (``top_k <= 0`` or ``>= V`` and ``top_p >= 1`` switch a filter off).

    Top-k keeps every token whose logit ties the k-th largest; top-p removes the tokens whose
    ascending cumulative probability stays ``<= 1 - top_p`` and always keeps the most likely token.
    """
    scores = logits / temperature
    vocab = scores.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ascending, order = torch.sort(scores, dim=-1, descending=False)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= (1 - top_p)
        drop_sorted[..., -1:] = False  # the most likely token always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """One token id per row of ``logits`` [B, V], drawn from ``softmax(warp_logits(...))`` [B].

    Works on the top-k candidates only (sorted once by ``topk``): top-p's ascending cumulative sum is
    their descending one reversed, and the draw inverts the kept candidates' cumulative distribution
    with one uniform number per row. Where a row's k-th logit is tied with others (the full filter
    keeps them all), the whole vocabulary is used instead.
    """
    scores = logits / temperature
    vocab = scores.shape[-1]
    k = top_k if 0 < top_k < vocab else vocab
    values, ids = torch.topk(scores, k, dim=-1)  # descending
    if k < vocab and bool(((scores >= values[:, -1:]).sum(dim=-1) > k).any()):
        values, ids = torch.sort(warp_logits(logits, temperature, 0, 1.0), dim=-1, descending=True)
        values = values.masked_fill(scores.gather(-1, ids) < values[:, k - 1 : k], float("-inf"))
    probs = values.softmax(dim=-1)
    if top_p < 1.0:
        drop = (probs.flip(-1).cumsum(dim=-1) <= (1 - top_p)).flip(-1)
        drop[:, 0] = False  # the most likely token always stays
        probs = probs.masked_fill(drop, 0.0)
    cumulative = probs.cumsum(dim=-1)
    kept = (probs > 0).sum(dim=-1, keepdim=True) - 1  # the kept candidates are a prefix
    u = torch.rand(cumulative.shape[0], 1, generator=generator, device=logits.device) * cumulative[:, -1:]
    chosen = torch.searchsorted(cumulative, u, right=True).clamp(max=kept)
    return ids.gather(-1, chosen).squeeze(-1)
