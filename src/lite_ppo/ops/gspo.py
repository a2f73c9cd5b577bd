"""GSPO: the importance ratio of a whole response, clipped per sequence.

Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071 (GSPO and GSPO-token objectives).
With the response's loss tokens t = 1..|y_i| (the loss mask), the sequence ratio is the geometric mean
of its token ratios:

    s_i = (pi_theta(y_i | x) / pi_old(y_i | x)) ^ (1 / |y_i|) = exp( 1/|y_i| sum_t (log pi_theta - log pi_old) )

    GSPO        l_i     = -min( s_i * A_i , clip(s_i, 1 - eps_low, 1 + eps_high) * A_i )
                J       = 1/G sum_i l_i                                  (aggregation seq-mean-token-mean)

    GSPO-token  s_{i,t} = sg[s_i] * pi_theta(y_{i,t}) / sg[pi_theta(y_{i,t})]
                l_{i,t} = -min( s_{i,t} * A_{i,t} , clip(s_{i,t}, 1 - eps_low, 1 + eps_high) * A_{i,t} )
                J       = 1/G sum_i 1/|y_i| sum_t l_{i,t}                (seq-mean-token-mean)

s_{i,t} has the value s_i and the gradient s_i * grad log pi_theta(y_{i,t}), so with one advantage per
response (A_{i,t} = A_i) GSPO-token equals GSPO in value, clipping and gradient; with per-token
advantages (or per-token weights) each token's gradient carries its own A_{i,t}. The paper's clip range
is tiny (3e-4 / 4e-4) because s_i averages the token log-ratios.

Both functions return the loss broadcast to every token [B, T], so that ``aggregate_loss`` with
``seq-mean-token-mean`` gives exactly 1/G sum_i l_i, and per-sequence clip statistics.
"""

from __future__ import annotations

import torch

# The clip range of the paper's experiments: left 3e-4, right 4e-4.
GSPO_CLIP_LOW = 3e-4
GSPO_CLIP_HIGH = 4e-4


def sequence_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = 1/|y_i| sum_t mask_t (log pi_theta - log pi_old), [B]; 0 for a row without loss tokens."""
    tokens = mask.sum(-1).clamp(min=1).to(logprobs.dtype)
    return ((logprobs - old_logprobs) * mask).sum(-1) / tokens


def gspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = GSPO_CLIP_LOW,
    clip_high: float = GSPO_CLIP_HIGH,
) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """GSPO's sequence-level clipped loss, the same value on each token of a response.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (with gradient).
        old_logprobs: [B, T] log pi_old.
        advantages: [B], one per response (GSPO is defined for sequence advantages; per-token ones
            need :func:`gspo_token`).
        mask: [B, T] 0/1 loss mask: the tokens s_i averages over.
        clip_low, clip_high: the sequence ratio's clip range [1 - clip_low, 1 + clip_high].

    Returns:
        (loss [B, T], statistics {name: (total, count)}), see :func:`sequence_clip_statistics`.
    """
    if advantages.dim() != 1:
        raise ValueError("gspo takes one advantage per response ([B]); use gspo_token for per-token advantages")
    ratio = torch.exp(sequence_log_ratio(logprobs, old_logprobs, mask))
    unclipped = -ratio * advantages
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = torch.maximum(unclipped, clipped).unsqueeze(-1).expand_as(logprobs)
    return loss, sequence_clip_statistics(ratio.detach(), advantages, mask, clip_low, clip_high)


def gspo_token(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = GSPO_CLIP_LOW,
    clip_high: float = GSPO_CLIP_HIGH,
) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """GSPO-token: the value of s_i on every token, the gradient of each token's own log-prob.

    Args are those of :func:`gspo`, except ``advantages``: [B] or per token [B, T]. The statistics
    are GSPO's per-sequence ones, judged with each response's mean advantage over its loss tokens
    (its A_i when advantages are per response).
    """
    log_ratio = sequence_log_ratio(logprobs, old_logprobs, mask).detach().unsqueeze(-1)
    # exp(sg[log s_i] + (log pi - sg[log pi])): the value exactly s_i (the bracket is 0), the derivative s_i * d log pi.
    ratio = torch.exp(log_ratio + (logprobs - logprobs.detach()))
    token_advantages = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    unclipped = -ratio * token_advantages
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * token_advantages
    loss = torch.maximum(unclipped, clipped)
    sequence_advantages = advantages
    if advantages.dim() == 2:
        sequence_advantages = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1).to(advantages.dtype)
    return loss, sequence_clip_statistics(log_ratio.squeeze(-1).exp(), sequence_advantages, mask, clip_low, clip_high)


@torch.no_grad()
def sequence_clip_statistics(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip_low: float, clip_high: float
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per-sequence clip counts of GSPO, over the responses with at least one loss token.

    A response's gradient is removed when A_i > 0 and s_i > 1 + clip_high, or A_i < 0 and
    s_i < 1 - clip_low (then the min picks the constant clipped term).

    Returns {name: (total, count)}: ``clip_fraction`` (of responses), ``clip_upper_of_positive``
    (of A > 0 responses), ``clip_lower_of_negative`` (of A < 0 responses) and ``seq_ratio_abs_dev``
    (mean |s_i - 1|, to compare with the clip range).
    """
    valid = mask.sum(-1) > 0
    positive, negative = valid & (advantages > 0), valid & (advantages < 0)
    upper = positive & (ratio > 1.0 + clip_high)
    lower = negative & (ratio < 1.0 - clip_low)
    count = lambda flags: flags.sum().to(torch.float64)  # noqa: E731
    return {
        "clip_fraction": (count(upper) + count(lower), count(valid)),
        "clip_upper_of_positive": (count(upper), count(positive)),
        "clip_lower_of_negative": (count(lower), count(negative)),
        "seq_ratio_abs_dev": (((ratio - 1.0).abs() * valid).sum().to(torch.float64), count(valid)),
    }
