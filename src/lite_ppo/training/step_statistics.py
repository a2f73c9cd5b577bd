"""A training step's statistics: per micro-batch token means and extrema, the step's own scalars,
the typed :class:`~lite_ppo.technique.UpdateStats` and what is logged where."""

from __future__ import annotations

import math

import torch

from lite_ppo import metric_names as names
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.technique import UpdateStats

# Shown in the progress bar too (the clip share of whichever objective runs).
LIVE = frozenset(
    {
        names.APPROX_KL,
        names.CLIP_FRACTION,
        names.GSPO_CLIP_FRACTION,
        names.CISPO_CLIPPED_FRACTION,
        names.SAPO_GRAD_SCALE_POSITIVE,
    }
)


@torch.no_grad()
def micro_statistics(
    metrics: StepMetrics,
    micro: RolloutBatch,
    entropy: torch.Tensor,
    logprobs: torch.Tensor,
    prefix: str,
    objective_stats: dict[str, tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """Token-weighted means over the step's loss tokens (all micro-batches, all ranks) and extrema;
    the objective's own statistics (``clip/*`` for ppo_clip) as ``<prefix>/<name>``."""
    mask = micro.loss_mask
    n = mask.sum()
    for name, (total, count) in objective_stats.items():
        metrics.mean(f"{prefix}/{name}", total, count)
    log_ratio = (logprobs - micro.old_logprobs) * mask
    ratio = torch.exp(logprobs - micro.old_logprobs)
    metrics.mean(names.ENTROPY, (entropy * mask).sum(), n)
    # k3 estimator of KL(pi_old || pi_theta): E_old[(rho - 1) - log rho] (Schulman 2020), >= 0.
    metrics.mean(names.APPROX_KL, (((ratio - 1) * mask) - log_ratio).sum(), n)
    # A rank without loss tokens records -inf / +inf, so every rank records the same names.
    real = ratio[mask > 0]
    metrics.max(names.RATIO_MAX, real.max() if real.numel() else -math.inf)
    metrics.min(names.RATIO_MIN, real.min() if real.numel() else math.inf)


def update_stats(scalars: dict[str, torch.Tensor]) -> UpdateStats:
    value = lambda name: float(scalars.get(name, torch.zeros(())))  # noqa: E731
    return UpdateStats(
        policy_loss=value(names.POLICY_LOSS),
        clip_fraction=value(names.CLIP_FRACTION),
        clip_upper=value(names.CLIP_UPPER_POSITIVE),
        clip_lower=value(names.CLIP_LOWER_NEGATIVE),
        approx_kl=value(names.APPROX_KL),
        entropy=value(names.ENTROPY),
        grad_norm=value(names.GRAD_NORM),
        learning_rate=value(names.LEARNING_RATE),
        scalars=scalars,
    )


def step_statistics(metrics: StepMetrics, rollout: RolloutBatch, old_logprob_s: float, update_s: float) -> None:
    """The step's timings (per rank: their mean over ranks, a count of 1 per rank) and the share of
    responses with a non-zero advantage."""
    metrics.mean(names.OLD_LOGPROB_SECONDS, old_logprob_s, 1)
    metrics.mean(names.UPDATE_SECONDS, update_s, 1)
    metrics.mean(names.UPDATE_TOKENS_PER_SECOND, rollout.attention_mask.sum() / max(update_s, 1e-9), 1)
    nonzero = rollout.advantages.abs() > 1e-8
    if nonzero.dim() == 2:  # per-token advantages: a response counts when any of its tokens has one
        nonzero = (nonzero & rollout.response_mask.bool()).any(-1)
    metrics.mean(names.ADVANTAGE_NONZERO, nonzero.sum(), rollout.num_responses)
