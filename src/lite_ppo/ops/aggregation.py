"""Loss aggregation: how per-token losses l_{i,t} become one scalar.

docs/method.md, technique 3 and "Dr. GRPO", with G the number of responses, L_i the loss tokens of
response i and L_max a constant (the generation budget, ``max_new_tokens``):

    token level     L_tok  = 1 / sum_i L_i * sum_i sum_t l_{i,t}          (``token-mean``)
    sequence level  L_seq  = 1 / G * sum_i (1 / L_i) * sum_t l_{i,t}      (``seq-mean-token-mean``)
    sequence sum    L_sum  = 1 / G * sum_i sum_t l_{i,t}                  (``seq-mean-token-sum``)
    Dr. GRPO        L_drg  = 1 / (G * L_max) * sum_i sum_t l_{i,t}        (``seq-mean-token-sum-norm``)

``seq-mean-token-sum`` divides by the number of responses with a loss token; ``seq-mean-token-sum-norm``
is Dr. GRPO's constant normalizer (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
Perspective", arXiv 2503.20783; TRL's ``loss_type="dr_grpo"``: sum / (num_rows * max_completion_length)):
every response of the step counts in G, masked or not, so the normalizer is a constant of the
configuration and no response's length or mask rescales another's gradient. The two differ by the
factor L_max (and by fully masked responses, which L_sum does not count).

Across ranks and micro-batches the denominator must be the one of the whole optimizer step, so the
functions take it explicitly: a micro-batch contributes ``sum(...) / denominator`` and the
micro-batch losses add up to exactly the full-step loss.
"""

from __future__ import annotations

import torch

from lite_ppo.ops.stats import masked_sum

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def aggregation_denominator(mask: torch.Tensor, mode: str, generation_budget: int | None = None) -> torch.Tensor:
    """The count a loss of this ``mode`` divides by: valid tokens (token-mean), sequences, or
    responses x ``generation_budget`` (seq-mean-token-sum-norm).

    Args:
        mask: [B, T] 0/1 loss mask. A response whose mask is all zero does not count as a sequence,
            except in ``seq-mean-token-sum-norm``, where every row counts (the normalizer is a constant).
        generation_budget: L_max of ``seq-mean-token-sum-norm`` (required there, ignored elsewhere).
    """
    if mode == "token-mean":
        return mask.sum().to(torch.float32)
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return (mask.sum(-1) > 0).sum().to(torch.float32)
    if mode == "seq-mean-token-sum-norm":
        if generation_budget is None or generation_budget < 1:
            raise ValueError(f"seq-mean-token-sum-norm needs a generation_budget >= 1, got {generation_budget}")
        return torch.tensor(float(mask.shape[0] * generation_budget), dtype=torch.float32, device=mask.device)
    raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {MODES}")


def aggregate_loss(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
    generation_budget: int | None = None,
) -> torch.Tensor:
    """Aggregate per-token ``loss`` [B, T] over the valid tokens of ``mask`` [B, T].

    Args:
        mode: one of :data:`MODES`.
        denominator: the global count (see :func:`aggregation_denominator`); this batch's own when None.
        generation_budget: L_max of ``seq-mean-token-sum-norm`` when ``denominator`` is None.
    """
    if mode not in MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {MODES}")
    if denominator is None:
        denominator = aggregation_denominator(mask, mode, generation_budget)
    if isinstance(denominator, torch.Tensor):
        denominator = denominator.clamp(min=1)
    else:
        denominator = max(float(denominator), 1.0)
    if mode == "token-mean":
        return masked_sum(loss, mask) / denominator
    per_seq = masked_sum(loss, mask, dim=-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1).to(loss.dtype)
    # seq-mean-token-sum and seq-mean-token-sum-norm differ only in the denominator.
    return per_seq.sum() / denominator
