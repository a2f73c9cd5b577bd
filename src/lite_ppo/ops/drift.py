"""Rollout-engine vs trainer log-prob mismatch: drift statistics and truncated importance weights.

A rollout engine (vLLM) samples responses with its own kernels, precision and weight copy; the
trainer then recomputes ``log pi_trainer`` of the same tokens (``old_logprobs``). Both are the
log-probs of the *sampled* tokens, masked by ``mask`` (the response tokens). Write

    d_t = log pi_trainer(o_t) - log pi_engine(o_t),      r_t = exp(d_t) = pi_trainer / pi_engine

for a token o_t the engine sampled, i.e. o_t ~ pi_engine.

Drift (:func:`drift_sums`: sums to divide once they are added over micro-batches and ranks; the
``LogprobDrift`` callback records them as token-weighted means in the step's metrics):

- mean |d_t| and max |d_t| over the masked tokens, and the signed mean of d_t;
- a KL estimate with Schulman's k3 estimator ("Approximating KL divergence", 2020):
  ``k3_t = (r_t - 1) - log r_t = exp(d_t) - 1 - d_t``. Because o_t ~ pi_engine and
  ``E_engine[r_t] = 1``, ``E_engine[k3_t] = E_engine[-log r_t] = KL(pi_engine || pi_trainer)`` at
  that position: unbiased, and ``k3_t >= 0`` for every token (``e^x >= 1 + x``), 0 exactly where the
  two log-probs agree; its token mean estimates the per-token KL of the rollout policy from the
  trainer's policy. (Caveat: with top-k / top-p the engine samples from a truncated distribution,
  so ``E[r_t]`` is then only close to 1; the estimate stays >= 0 and 0 when the two agree.)

Truncated importance sampling (:func:`truncated_importance_weights`; Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training"): the surrogate's expectation
is over the trainer's old policy but the tokens came from the engine, so each token's loss is
weighted by ``w_t = min(r_t, cap)`` (a constant, no gradient); the cap bounds the variance.

Nothing here imports the rest of the project; every function is a plain function of tensors.
"""

from __future__ import annotations

import torch

from lite_ppo.ops.kl import kl_estimate

# |d_t| is clamped at this before exponentiating in k3 so that one absurd token cannot make it inf.
MAX_LOG_RATIO = 20.0


def _log_ratio(
    trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(d, bool mask) with d set to 0 outside the mask (padding may hold anything, even -inf)."""
    if trainer_logprobs.shape != engine_logprobs.shape or trainer_logprobs.shape != mask.shape:
        raise ValueError(
            f"shape mismatch: trainer log-probs {tuple(trainer_logprobs.shape)}, engine log-probs "
            f"{tuple(engine_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    valid = mask.bool()
    d = torch.where(
        valid,
        trainer_logprobs.detach().double() - engine_logprobs.detach().double(),
        torch.zeros((), dtype=torch.float64, device=mask.device),
    )
    return d, valid


def drift_sums(
    trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Sums over the masked tokens, to be added over micro-batches or ranks before dividing.

    Example:
        >>> s = drift_sums(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -2.0]]), torch.ones(1, 2))
        >>> float(s["abs_diff"] / s["tokens"]), float(s["max_abs_diff"])
        (0.25, 0.5)

    Returns float64 scalars: ``tokens`` (count), ``abs_diff`` (sum |d|), ``diff`` (sum d),
    ``k3`` (sum of k3), and ``max_abs_diff`` (max |d|, 0 when no token is masked in).
    """
    d, valid = _log_ratio(trainer_logprobs, engine_logprobs, mask)
    # k3 estimate of KL(pi_engine || pi_trainer) on engine-sampled tokens: exp(d) - 1 - d.
    # (kl_estimate's log-ratio is ref - logprobs = 0 - (-d) = d; d is 0 off the mask, so k3 is too.)
    k3 = kl_estimate(-d, torch.zeros_like(d), "k3", clamp=MAX_LOG_RATIO)
    return {
        "tokens": valid.sum().double(),
        "abs_diff": d.abs().sum(),
        "diff": d.sum(),
        "k3": k3.sum(),
        "max_abs_diff": d.abs().max() if d.numel() else torch.zeros((), dtype=torch.float64),
    }


def truncated_importance_weights(
    trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor, cap: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token truncated importance weights ``min(pi_trainer / pi_engine, cap)``, detached.

    Args:
        trainer_logprobs: [B, T] the trainer's old log-probs of the sampled tokens.
        engine_logprobs: [B, T] the engine's log-probs of the same tokens.
        mask: [B, T] 1 on response tokens.
        cap: upper bound of a weight (> 0).

    Returns:
        (weights [B, T] float32, 1 outside the mask; capped [B, T] bool, the tokens whose ratio
        exceeded ``cap``). Where the two log-probs are equal the weight is exactly 1.

    Example:
        >>> w, c = truncated_importance_weights(
        ...     torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, -3.0]]), torch.ones(1, 2)
        ... )
        >>> w.tolist(), c.tolist()
        ([[1.0, 2.0]], [[False, True]])
    """
    if cap <= 0:
        raise ValueError(f"the importance-weight cap must be > 0, got {cap}")
    d, valid = _log_ratio(trainer_logprobs, engine_logprobs, mask)
    ratio = torch.exp(d)  # may be inf for an absurd token; the cap handles it
    capped = valid & (ratio > cap)
    weights = torch.where(valid, ratio.clamp(max=cap), torch.ones_like(ratio))
    return weights.to(torch.float32), capped
