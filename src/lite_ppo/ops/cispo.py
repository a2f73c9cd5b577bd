"""CISPO: clip the importance-sampling weight, not the update (REINFORCE-style, every token keeps its gradient).

MiniMax et al. 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
arXiv 2506.13585, the CISPO objective:

    r_{i,t}   = pi_theta(o_{i,t} | q, o_{i,<t}) / pi_old(o_{i,t} | q, o_{i,<t})
    w_{i,t}   = sg( clip(r_{i,t}, 1 - eps_low_is, 1 + eps_high_is) )
    l_{i,t}   = -w_{i,t} * A_{i,t} * log pi_theta(o_{i,t} | q, o_{i,<t})
    J         = 1 / sum_i |o_i| * sum_i sum_t l_{i,t}                      (aggregation token-mean)

The gradient of every token is -w_{i,t} * A_{i,t} * grad log pi_theta: the weight is bounded, the
token is never dropped (PPO's clip gives tokens past the bound no gradient at all). MiniMax-M1 sets no
lower bound (eps_low_is large) and tunes only eps_high_is; TRL recommends an IS-weight cap of 5.
"""

from __future__ import annotations

import torch

# The IS weight's cap 1 + eps_high_is = 5 (TRL's recommended cap for its `cispo` loss); no floor (MiniMax-M1).
CISPO_EPS_HIGH_IS = 4.0


def cispo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low_is: float | None = None,
    eps_high_is: float = CISPO_EPS_HIGH_IS,
) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Per-token CISPO loss.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (with gradient).
        old_logprobs: [B, T] log pi_old.
        advantages: [B] (one per response) or [B, T].
        mask: [B, T] 0/1 loss mask (for the statistics).
        eps_low_is: the weight's floor is 1 - eps_low_is; ``None``: no floor (MiniMax-M1).
        eps_high_is: the weight's cap is 1 + eps_high_is.

    Returns:
        (loss [B, T], statistics {name: (total, count)} over the loss tokens): ``clipped_fraction``
        (share whose weight was clipped, at either bound) and ``weight_mean`` (mean weight w).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(logprobs - old_logprobs).detach()
    floor = None if eps_low_is is None else 1.0 - eps_low_is
    weight = torch.clamp(ratio, min=floor, max=1.0 + eps_high_is)
    loss = -weight * advantages * logprobs
    with torch.no_grad():
        n = mask.sum().to(torch.float64)
        stats = {
            "clipped_fraction": (((weight != ratio) * mask).sum().to(torch.float64), n),
            "weight_mean": ((weight * mask).sum().to(torch.float64), n),
        }
    return loss, stats
