"""Clip-Cov: detach a few tokens whose log-prob / advantage covariance is high (Cui et al. 2025,
"The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"; docs/method.md)."""

from __future__ import annotations

import torch
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.data.seeding import run_seed
from lite_ppo.errors import UserError
from lite_ppo.ops.covariance import clip_cov_mask, token_covariance
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import Technique


class ClipCov(Technique):
    """Detaches from the policy gradient a random ``share`` of the step's loss tokens among those whose
    covariance ``Cov_t = (log pi_old(y_t) - mean) * (A_t - mean)`` lies in (``lower``, ``upper``)
    (``lite_ppo.ops.covariance``): their surrogate gets weight 0 (``token_weights``) and stays in
    the loss's denominator, as in the reference code (verl's ``compute_policy_loss_clip_cov``).

    **Over the global batch, before the update.** The covariance, its means and the draw are taken
    once per step over every loss token of every rank (gathered in rank order) from the old
    log-probs, before the first optimizer step, when they equal the current policy's; so two ranks
    detach exactly the tokens one process detaches, and the selection holds for every mini-batch of
    the update. The reference code recomputes it per micro-batch of a rank from the current
    log-probs (the same values in its first mini-batch) and leaves out tokens the PPO clip already
    stops; at the moment of selection every ratio is 1, so the clip stops none.

    **Randomness.** The draw uses its own generator seeded from ``seed`` (the run's
    ``seed_everything`` when null) and the optimizer step count, so it is the same on every rank, in
    a 1-process run and after a resume, and independent of torch's global generator.

    Logged: ``clip_cov/detached_share`` (share of the step's loss tokens detached),
    ``clip_cov/candidate_share`` (share inside the bounds) and ``clip_cov/covariance`` (the mean
    Cov_t, i.e. the batch covariance of log-prob and advantage).

    Needs a token-level objective: under GSPO's sequence ratio a weight of 0 only rescales the
    response, every token keeps its gradient, so that combination is refused at fit start
    (``gspo_token`` works). Excludes ``KLCov`` (the two are the paper's alternative policy losses).

    Args:
        share: r, the share of loss tokens to detach (the paper: 2e-4); at least one token when any
            is a candidate.
        lower, upper: omega_low < omega_high, the covariance bounds (the paper: 1 and 5).
        seed: the draw's seed; null for the run's seed.

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.ClipCov
              init_args: {share: 2.0e-4, lower: 1.0, upper: 5.0}
    """

    needs_token_level_objective = True  # a weight of 0 detaches a token only from a token-level objective

    def __init__(self, share: float = 2e-4, lower: float = 1.0, upper: float = 5.0, seed: int | None = None) -> None:
        if not 0 < share <= 1:
            raise UserError(f"ClipCov.share must be in (0, 1] (the paper: 2e-4), got {share}")
        if not lower < upper:
            raise UserError(f"ClipCov.lower must be below ClipCov.upper (the paper: 1 and 5), got {lower} and {upper}")
        self.share, self.lower, self.upper = float(share), float(lower), float(upper)
        self.seed = seed

    @override
    def token_weights(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        covariance, offset, tokens = loss_token_covariance(ctx.trainer, batch)
        generator = torch.Generator().manual_seed(step_seed(run_seed(self.seed), ctx.global_step))
        detached, candidates = clip_cov_mask(covariance, self.share, self.lower, self.upper, generator)
        n = int(tokens.sum())
        mine = slice(offset, offset + n)
        ctx.metrics.mean(names.CLIP_COV_DETACHED_SHARE, detached[mine].sum(), n)
        ctx.metrics.mean(names.CLIP_COV_CANDIDATE_SHARE, candidates[mine].sum(), n)
        ctx.metrics.mean(names.CLIP_COV_COVARIANCE, covariance[mine].sum(), n)
        weights = torch.ones_like(batch.loss_mask, dtype=torch.float32)
        weights[tokens] = 1.0 - detached[mine].to(weights)
        return weights


def loss_token_covariance(trainer, batch: RolloutBatch) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Cov_t of every rank's loss tokens from the old log-probs (``ops.token_covariance``):
    ``(covariances of all ranks in rank order, where this rank's start, this rank's token mask [B, R])``."""
    tokens = batch.loss_mask > 0
    advantages = batch.advantages if batch.advantages.dim() == 2 else batch.advantages.unsqueeze(-1)
    pairs = torch.stack([batch.old_logprobs[tokens], advantages.expand_as(tokens)[tokens]], dim=-1).double()
    everything, offset = Ranks(trainer).cat_varying(pairs)  # row-major: rank r's tokens follow rank r-1's
    return token_covariance(everything[:, 0], everything[:, 1]), offset, tokens


def step_seed(seed: int, step: int) -> int:
    """One generator seed per (run seed, optimizer steps so far): a new draw each step, the same on
    every rank and after a resume."""
    return (seed * 1_000_003 + step) % 2**63
