"""Loss aggregation: how per-token losses l_{i,t} become one scalar.

docs/method.md, technique 3:

    token level     L_tok = 1 / sum_i L_i * sum_i sum_t l_{i,t}             (``token-mean``)
    sequence level  L_seq = 1 / G * sum_i (1 / L_i) * sum_t l_{i,t}         (``seq-mean-token-mean``)
    Dr. GRPO style  1 / G * sum_i sum_t l_{i,t}                             (``seq-mean-token-sum``)

Across ranks and micro-batches the denominator must be the one of the whole optimizer step, so the
functions take it explicitly: a micro-batch contributes ``sum(...) / denominator`` and the
micro-batch losses add up to exactly the full-step loss.
"""

from __future__ import annotations

import torch

from lite_ppo.ops.stats import masked_sum


def aggregation_denominator(mask: torch.Tensor, mode: str) -> torch.Tensor:
    """The count a loss of this ``mode`` divides by: valid tokens (token-mean) or sequences.

    Args:
        mask: [B, T] 0/1 loss mask. A response whose mask is all zero does not count as a sequence.
    """
    if mode == "token-mean":
        return mask.sum().to(torch.float32)
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return (mask.sum(-1) > 0).sum().to(torch.float32)
    raise ValueError(f"unknown aggregation mode {mode!r}")


def aggregate_loss(
    loss: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", denominator: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Aggregate per-token ``loss`` [B, T] over the valid tokens of ``mask`` [B, T].

    Args:
        mode: ``token-mean`` | ``seq-mean-token-mean`` | ``seq-mean-token-sum``.
        denominator: the global count (see :func:`aggregation_denominator`); this batch's own when None.
    """
    if denominator is None:
        denominator = aggregation_denominator(mask, mode)
    if isinstance(denominator, torch.Tensor):
        denominator = denominator.clamp(min=1)
    else:
        denominator = max(float(denominator), 1.0)
    if mode == "token-mean":
        return masked_sum(loss, mask) / denominator
    per_seq = masked_sum(loss, mask, dim=-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1).to(loss.dtype)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown aggregation mode {mode!r}")
    return per_seq.sum() / denominator
