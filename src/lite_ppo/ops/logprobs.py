"""Per-token log-probabilities and entropy from logits, without materialising log_softmax twice."""

from __future__ import annotations

import torch


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[tokens], computed in float32.

    Args:
        logits: [B, T, V]; tokens: [B, T] long.

    Returns:
        [B, T] float32.
    """
    logits = logits.float()
    picked = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = logsumexp(z) - sum softmax(z) * z, per position: [B, T, V] -> [B, T] float32."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
