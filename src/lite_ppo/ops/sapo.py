"""SAPO: a soft, temperature-controlled gate in place of PPO's hard clip.

Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347:

    r_{i,t}   = pi_theta(y_{i,t} | x, y_{i,<t}) / pi_old(y_{i,t} | x, y_{i,<t})
    tau_{i,t} = tau_pos if A_{i,t} > 0 else tau_neg
    f(r; tau) = sigmoid(tau * (r - 1)) * 4 / tau
    l_{i,t}   = -f(r_{i,t}; tau_{i,t}) * A_{i,t}
    J         = 1/G sum_i 1/|y_i| sum_t l_{i,t}        (seq-mean-token-mean, as verl and TRL aggregate it)

d l / d log pi_theta = -A * f'(r) * r with f'(r) = 4 * sigmoid(tau (r - 1)) * (1 - sigmoid(tau (r - 1))):
on-policy (r = 1) f' = 1, the plain policy gradient; as r leaves 1 the gate fades the token's gradient
smoothly instead of cutting it at a bound, faster for a larger tau. tau_neg > tau_pos damps the
negative-advantage updates more (verl's and TRL's defaults: tau_pos 1.0, tau_neg 1.05).
"""

from __future__ import annotations

import torch

SAPO_TAU_POS = 1.0
SAPO_TAU_NEG = 1.05


def sapo_gate(ratio: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
    """f(r; tau) = sigmoid(tau (r - 1)) * 4 / tau: value 2 / tau and slope 1 at r = 1."""
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)


def sapo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    tau_pos: float = SAPO_TAU_POS,
    tau_neg: float = SAPO_TAU_NEG,
) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Per-token SAPO loss.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (with gradient).
        old_logprobs: [B, T] log pi_old.
        advantages: [B] (one per response) or [B, T].
        mask: [B, T] 0/1 loss mask (for the statistics).
        tau_pos, tau_neg: the gate's temperature for A > 0 and for A <= 0 tokens.

    Returns:
        (loss [B, T], statistics {name: (total, count)}): ``grad_scale_of_positive`` and
        ``grad_scale_of_negative``, the mean slope f'(r) over the A > 0 / A < 0 loss tokens: the
        share of the plain policy gradient the gate lets through (1 on-policy, towards 0 off it).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.expand_as(logprobs)
    ratio = torch.exp(logprobs - old_logprobs)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    loss = -sapo_gate(ratio, tau) * advantages
    with torch.no_grad():
        gate = torch.sigmoid(tau * (ratio - 1.0))
        slope = 4.0 * gate * (1.0 - gate)
        positive, negative = (advantages > 0) * mask, (advantages < 0) * mask
        stats = {
            "grad_scale_of_positive": ((slope * positive).sum().to(torch.float64), positive.sum().to(torch.float64)),
            "grad_scale_of_negative": ((slope * negative).sum().to(torch.float64), negative.sum().to(torch.float64)),
        }
    return loss, stats
