"""Clip-Cov and KL-Cov: restrain the tokens whose log-prob / advantage covariance drives entropy down.

Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models":
under a policy gradient step the change of the policy's entropy is about minus the covariance of
the log-prob and the advantage of the sampled tokens, so the few tokens with a large covariance
(a likely token with a high advantage) cause the entropy collapse. Over the N loss tokens of a batch,

    Cov_t = (log pi(y_t) - 1/N sum_j log pi(y_j)) * (A_t - 1/N sum_j A_j)

- Clip-Cov: draw ``max(1, floor(r * N))`` tokens uniformly among those with
  ``omega_low < Cov_t < omega_high`` (all of them when fewer) and detach them: their surrogate
  enters the loss with weight 0 (still counted in its denominator, as in the reference code).
- KL-Cov: the ``max(1, floor(k * N))`` tokens with the largest Cov_t get a penalty
  ``beta * |log pi_theta(y_t) - log pi_old(y_t)|`` added to their loss (the paper's KL term
  between pi_old and pi_theta, in the reference code's absolute-log-ratio form).

The paper's defaults: r = 2e-4, omega_low = 1, omega_high = 5; k = 2e-3 (2e-4 for the 32B
model), beta = 1. The reference implementation is verl's ``compute_policy_loss_clip_cov`` /
``compute_policy_loss_kl_cov`` (from PRIME-RL/Entropy-Mechanism-of-RL).

Nothing here imports the rest of the project; every function is a plain function of tensors.
"""

from __future__ import annotations

import torch

from lite_ppo.ops.token_selection import share_count, top_k_mask


def token_covariance(logprobs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Cov_t [N] (float64) of the N tokens' log-probs and advantages, both [N], centred by their
    means over the N tokens (module docstring). No gradient."""
    logprobs = logprobs.detach().double()
    advantages = advantages.detach().double()
    if logprobs.numel() == 0:
        return logprobs
    return (logprobs - logprobs.mean()) * (advantages - advantages.mean())


def clip_cov_mask(
    covariance: torch.Tensor,
    share: float = 2e-4,
    lower: float = 1.0,
    upper: float = 5.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-Cov's detached tokens: ``(detached [N] bool, candidates [N] bool)``.

    The candidates are the tokens with ``lower < Cov < upper``; ``max(1, floor(share * N))`` of them
    are drawn without replacement with ``generator`` (a CPU ``torch.Generator``), all of them when
    there are fewer. The same covariances and generator state give the same draw.
    """
    candidates = (covariance > lower) & (covariance < upper)
    detached = torch.zeros_like(candidates)
    count = share_count(share, covariance.numel(), "floor")
    where = torch.nonzero(candidates).flatten()
    if count and where.numel():
        pick = torch.randperm(where.numel(), generator=generator)[:count]
        detached[where[pick.to(where.device)]] = True
    return detached, candidates


def kl_cov_mask(covariance: torch.Tensor, share: float = 2e-3) -> torch.Tensor:
    """KL-Cov's penalized tokens: the ``max(1, floor(share * N))`` largest covariances [N] (ties to
    the earlier position)."""
    return top_k_mask(covariance, share_count(share, covariance.numel(), "floor"))


def kl_cov_penalty(logprobs: torch.Tensor, old_logprobs: torch.Tensor, coef: float = 1.0) -> torch.Tensor:
    """``coef * |log pi_theta - log pi_old|`` per token (same shape); the gradient flows through
    ``logprobs``: ``coef * sign(log pi_theta - log pi_old)`` (0 where they are equal)."""
    return coef * (logprobs - old_logprobs.detach()).abs()
