"""The clipped surrogate of PPO with an asymmetric clip range (Clip-Higher) and optional dual clip.

docs/method.md, "The base algorithm":

    rho_{i,t} = exp(log pi_theta - log pi_old)
    l_{i,t}   = -min( rho_{i,t} * A_i , clip(rho_{i,t}, 1 - eps_low, 1 + eps_high) * A_i )

Dual clip (Ye et al. 2020), for A < 0 only: l = min(l, -c * A), i.e. the loss of a negative-advantage
token is bounded by c * |A| however large the ratio grows.
"""

from __future__ import annotations

import torch


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate loss.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (with gradient).
        old_logprobs: [B, T] log pi_old of the same tokens.
        advantages: [B] (one per response, broadcast over tokens) or [B, T].
        clip_low, clip_high: eps_low and eps_high.
        dual_clip: constant c > 1 or None.

    Returns:
        (loss [B, T], ratio [B, T]). Aggregate ``loss`` with :func:`lite_ppo.ops.aggregate_loss`.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -ratio * advantages
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss, ratio


def clip_fractions(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> dict[str, torch.Tensor]:
    """Share of valid tokens whose gradient the clip removed, split by bound and advantage sign.

    A token is clipped at the upper bound when A > 0 and rho > 1 + eps_high, at the lower bound when
    A < 0 and rho < 1 - eps_low (only then does the min pick the constant clipped term). Dual clip
    triggers when A < 0 and rho > c. Ratios beyond a bound on the other sign's side are reported as
    ``*_inactive`` (they cross the bound but keep their gradient).

    Returns fractions over all valid tokens: ``upper`` (A>0), ``lower`` (A<0), ``total`` (both and ``dual``),
    ``upper_inactive`` (A<0, rho > 1+eps_high), ``lower_inactive`` (A>0, rho < 1-eps_low), ``dual``.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(ratio)
    valid = mask.bool()
    n = valid.sum().clamp(min=1).to(ratio.dtype)
    pos, neg = (advantages > 0) & valid, (advantages < 0) & valid
    above, below = ratio > 1.0 + clip_high, ratio < 1.0 - clip_low
    out = {
        "upper": (pos & above).sum() / n,
        "lower": (neg & below).sum() / n,
        "upper_inactive": (neg & above).sum() / n,
        "lower_inactive": (pos & below).sum() / n,
    }
    out["dual"] = (neg & (ratio > dual_clip)).sum() / n if dual_clip is not None else ratio.new_zeros(())
    out["total"] = out["upper"] + out["lower"] + out["dual"]  # the dual clip removes the gradient too
    return out


def ppo_clip(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """The ``ppo_clip`` policy objective (the default): :func:`clipped_surrogate` and its clip statistics.

    Returns:
        (loss [B, T], statistics {name: (total, count)}): ``fraction`` (share of loss tokens whose
        gradient the clip removed), ``upper_of_positive`` (of A > 0 tokens), ``lower_of_negative``
        (of A < 0 tokens) and, with a dual clip, ``dual_of_negative``; logged under ``clip/``.
    """
    loss, ratio = clipped_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high, dual_clip)
    with torch.no_grad():
        shares = clip_fractions(ratio, advantages, mask, clip_low, clip_high, dual_clip)
        n = mask.sum()
        signs = (advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)).expand_as(mask)
        positive, negative = ((signs > 0) * mask).sum(), ((signs < 0) * mask).sum()
        # Counts (shares x n) over the token counts they are shares of, so micro-batches and ranks add up.
        stats = {
            "fraction": (shares["total"] * n, n),
            "upper_of_positive": (shares["upper"] * n, positive),
            "lower_of_negative": (shares["lower"] * n, negative),
        }
        if dual_clip is not None:
            stats["dual_of_negative"] = (shares["dual"] * n, negative)
    return loss, stats
