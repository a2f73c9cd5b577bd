"""Per-token estimators of KL(pi_theta || pi_ref) from the log-probs of sampled tokens.

With log-ratio ``d = log pi_ref(o_t) - log pi_theta(o_t)`` of a token sampled from pi_theta
(Schulman, "Approximating KL divergence", 2020):

    k1 = -d                     unbiased, high variance, can be negative per token
    k2 = d^2 / 2                biased, low variance, >= 0
    k3 = exp(d) - d - 1         unbiased, low variance, >= 0      (GRPO's KL loss)

Every estimator is 0 where the two log-probs agree. Gradients flow through ``logprobs``; the
reference log-probs are constants.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3", clamp: float | None = 10.0
) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (may carry gradients).
        ref_logprobs: [B, T] log pi_ref of the same tokens (treated as constants).
        estimator: ``k1`` | ``k2`` | ``k3`` (see the module docstring).
        clamp: bound on |log pi_ref - log pi_theta| before exponentiating (k3), ``None`` for none;
            keeps one wild token from producing an infinite loss.

    Returns:
        [B, T]. Mask and aggregate it like the policy loss.

    Example:
        >>> lp, ref = torch.tensor([[0.0]]), torch.tensor([[-1.0]])
        >>> round(kl_estimate(lp, ref, "k3").item(), 4)   # exp(-1) + 1 - 1
        0.3679
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")
    log_ratio = ref_logprobs.detach() - logprobs
    if clamp is not None:
        log_ratio = log_ratio.clamp(-clamp, clamp)
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    return torch.expm1(log_ratio) - log_ratio  # expm1: exact for the tiny ratios of near-equal policies
