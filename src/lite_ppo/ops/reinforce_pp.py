"""REINFORCE++ advantages (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large
Language Models", arXiv 2501.03262), outcome-reward form; docs/method.md, "REINFORCE++".

With one verifiable reward r_i per response and discount 1, the return G_{i,t} of every token of
response i is r_i, so the advantage is one number per response. REINFORCE++ normalizes it over the
whole global batch, not per prompt:

    REINFORCE++            x_i = r_i
    REINFORCE++-baseline   x_i = r_i - mean_{j in group(i)} r_j      (a group of one: baseline 0)
    both                   A_i = (x_i - mu) / sqrt(sigma^2 + eps)

with mu and sigma^2 the weighted mean and Bessel-corrected variance of x over the batch, response i
counting w_i times. verl (``compute_reinforce_plus_plus_outcome_advantage``,
``compute_reinforce_plus_plus_baseline_outcome_advantage``: ``masked_whiten`` over the response
mask, eps = 1e-8 inside the square root) whitens over response *tokens*: w_i = L_i, the response's
length. w_i = 1 gives the per-response statistics.

KL-shaped return (the paper's form): every response token also earns -beta * KL_t, KL_t an estimate
of log pi_old(o_t) - log pi_ref(o_t) at that token, so with discount 1 the return of token t is

    G_{i,t} = x_i - beta * sum_{u >= t} KL_{i,u}                          (:func:`kl_shaped_returns`)

and the advantages are per token: A_{i,t} = (G_{i,t} - mu) / sqrt(sigma^2 + eps), mu and sigma over
every response token of the batch (verl's ``masked_whiten``; OpenRLHF's REINFORCE++ with the KL in
the reward). beta = 0 gives back the token-weighted outcome form above.
"""

from __future__ import annotations

import torch

from lite_ppo.ops.advantages import weighted_mean_std


def group_baseline_residuals(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """x_i = r_i - mean of r over the group of response i (float64); 0 baseline in a group of one.

    Args:
        rewards: [B] rewards.
        group_ids: [B] long; responses of one prompt share an id (any order).

    Example:
        >>> group_baseline_residuals(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 1]))
        tensor([ 0.6667, -0.3333, -0.3333,  1.0000], dtype=torch.float64)
    """
    r = rewards.double()
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n = int(inverse.max().item()) + 1 if inverse.numel() else 0
    counts = torch.zeros(n, dtype=r.dtype, device=r.device).index_add_(0, inverse, torch.ones_like(r))
    sums = torch.zeros_like(counts).index_add_(0, inverse, r)
    # verl: a prompt with a single response has no baseline (mean 0), not its own reward.
    means = torch.where(counts > 1, sums / counts.clamp(min=1), torch.zeros_like(sums))
    return r - means[inverse]


def whitened(
    values: torch.Tensor,
    weights: torch.Tensor,
    eps: float = 1e-8,
    stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """(x - mu) / sqrt(sigma^2 + eps) with mu, sigma the frequency-weighted mean and Bessel std of
    ``values`` [B] under ``weights`` [B] (:func:`lite_ppo.ops.advantages.weighted_mean_std`), or the
    given global ``stats`` (mean, std). Float64.

    Example:
        >>> whitened(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 3.0]), eps=0.0)   # 0,1,1,1: mean 3/4, std 1/2
        tensor([-1.5000,  0.5000], dtype=torch.float64)
    """
    x = values.double()
    mean, std = weighted_mean_std(x, weights) if stats is None else (stats[0].double(), stats[1].double())
    return (x - mean) / torch.sqrt(std**2 + eps)


def outcome_returns(rewards: torch.Tensor, group_ids: torch.Tensor, group_baseline: bool = False) -> torch.Tensor:
    """x_i: the outcome return r_i (REINFORCE++) or r_i minus its group's mean reward
    (REINFORCE++-baseline, :func:`group_baseline_residuals`), float64 [B]."""
    return group_baseline_residuals(rewards, group_ids) if group_baseline else rewards.double()


def reinforce_pp_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    weights: torch.Tensor,
    group_baseline: bool = False,
    eps: float = 1e-8,
    stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """REINFORCE++ (``group_baseline=False``) or REINFORCE++-baseline advantages [B], float64: the
    two steps the ``ReinforcePlusPlus`` callback runs (it gathers ``stats`` over ranks in between),
    :func:`outcome_returns` then :func:`whitened`.

    Args:
        rewards: [B] outcome rewards (the return of every token of the response).
        group_ids: [B] prompt ids (used by the baseline only).
        weights: [B] how many times each response counts in the batch statistics (verl: its length).
        stats: the global (mean, std) of the baselined returns over all ranks; this batch's when None.
    """
    return whitened(outcome_returns(rewards, group_ids, group_baseline), weights, eps, stats)


def kl_shaped_returns(x: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """G_{i,t} = x_i - beta * sum_{u >= t} KL_{i,u}: the return of every response token when each
    token earns -beta * KL_t and the response's (baselined) outcome x_i comes at its end, discount 1.
    [B, R] float64, 0 off ``mask``.

    Args:
        x: [B] the outcome part of the return (r_i, or r_i minus its group's mean reward).
        kl: [B, R] the per-token KL estimate (its padding is ignored).
        mask: [B, R] 0/1, the response tokens.
        beta: the KL coefficient.

    Example:
        >>> kl = torch.tensor([[0.1, 0.2, 0.3]])
        >>> kl_shaped_returns(torch.tensor([1.0]), kl, torch.tensor([[1, 1, 0]]), beta=1.0)
        tensor([[0.7000, 0.8000, 0.0000]], dtype=torch.float64)
    """
    m = mask.double()
    to_go = (kl.double() * m).flip(-1).cumsum(-1).flip(-1)  # sum over u >= t of the response's KL
    return (x.double().unsqueeze(-1) - beta * to_go) * m
