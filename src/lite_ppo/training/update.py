"""One PPO update: the ``num_mini_batches`` optimizer steps over a training step's batch.

Each optimizer step: its rows and loss denominators (global: all micro-batches, all ranks), then
per micro-batch a forward, the old log-probs (:class:`~lite_ppo.training.old_logprobs.OldLogprobs`),
the per-token policy objective, its aggregation, the techniques' extra terms and a backward; then
gradient clipping, the divergence guard, the optimizer and the learning-rate schedule.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import torch

from lite_ppo import metric_names as names
from lite_ppo.ops import PolicyObjective, aggregate_loss, aggregation_denominator, policy_objective
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.strategies.zero import begin_micro_batch, deepspeed_engine, engine_grad_norm
from lite_ppo.technique import MiniBatchContext, Technique, objective_kwargs
from lite_ppo.training.old_logprobs import OldLogprobs
from lite_ppo.training.policy_forward import forward_token_counts, packs_into_one_row
from lite_ppo.training.step_statistics import micro_statistics

if TYPE_CHECKING:  # pragma: no cover
    from lite_ppo.training.module import LitePPO


def ppo_update(
    module: LitePPO,
    rollout: RolloutBatch,
    techniques: list[Technique],
    ctx: StepContext,
    old: OldLogprobs,
) -> None:
    """The ``num_mini_batches`` optimizer steps on ``rollout``, each micro-batch's old log-probs
    from ``old``; their scalars go to the step's metrics (``ctx.metrics``)."""
    optimizer, scheduler = module.optimizers(), module.lr_schedulers()
    guard = module.divergence_guard  # skips optimizer steps with a non-finite loss or grad norm (found at setup)
    metrics = ctx.metrics
    update = _Update(techniques, ctx, policy_objective(module.loss_config.objective), module.mini_batches(rollout), old)
    for step, step_rows in enumerate(update.mini_batches):
        module.report_phase("updating", step + 1, len(update.mini_batches))
        # 1. The optimizer step's rows, and its loss denominators over all its micro-batches and ranks.
        mini = rollout.select(step_rows)
        denominators = _loss_denominators(module, mini)
        # 2. Loss and backward per micro-batch; the gradients add up (DDP all-reduces at the last one).
        optimizer.zero_grad()
        micro_rows = module.micro_batch_rows(mini)
        for i, rows in enumerate(micro_rows):
            last = i == len(micro_rows) - 1
            loss = _micro_step(
                module, update, mini.select(rows), step_rows[rows], denominators, first=(step == 0, i == 0), sync=last
            )
            guard.observe_loss(loss)
        # 3. Clip, step (the guard drops a non-finite step and stops an exploding one), schedule.
        grad_norm = _clip_gradients(module, optimizer)
        guard.before_optimizer_step(module.trainer, optimizer, grad_norm)
        optimizer.step()
        guard.after_optimizer_step(module.trainer, module.policy)
        # The norm is the same on every rank (computed on the reduced gradient): a mean over ranks
        # and optimizer steps is the mean over optimizer steps.
        metrics.mean(names.GRAD_NORM, grad_norm if grad_norm is not None else engine_grad_norm(module._trainer), 1)
        scheduler.step()
        module.policy_version += 1
    metrics.mean(names.LEARNING_RATE, optimizer.param_groups[0]["lr"], 1)  # the same on every rank


def _loss_denominators(module: LitePPO, mini: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The aggregation denominators of one optimizer step (all its micro-batches, all ranks) in one
    all-reduce: the extra terms' over ``loss_mask``, the policy loss's over ``policy_loss_mask``
    (the same unless a technique returned a ``policy_mask``)."""
    cfg = module.loss_config
    masks = (mini.loss_mask, mini.policy_loss_mask)
    terms, policy = Ranks(module._trainer).sum(
        torch.stack([aggregation_denominator(mask, cfg.aggregation, cfg.generation_budget) for mask in masks])
    )
    return terms, policy


def _micro_step(
    module: LitePPO,
    update: _Update,
    micro: RolloutBatch,
    rows: torch.Tensor,
    denominators: tuple[torch.Tensor, torch.Tensor],
    first: tuple[bool, bool],
    sync: bool,
) -> torch.Tensor:
    """Forward, loss and backward of one micro-batch (``rows`` of the rollout); returns the loss.

    ``first``: whether this is the first optimizer step and its first micro-batch, whose old
    log-probs may come from this forward (``update.old``)."""
    cfg, metrics, objective = module.loss_config, update.ctx.metrics, update.objective
    terms_denominator, policy_denominator = denominators
    begin_micro_batch(module._trainer)  # DeepSpeed: accumulate, not overwrite, this micro-batch's gradient
    logprobs, entropy = module.score_responses(micro)
    real, processed = forward_token_counts(
        micro, pack=module.packs_prompts(), one_row=packs_into_one_row(module.policy)
    )
    metrics.mean(names.PADDING_EFFICIENCY, real, processed)
    micro = replace(micro, old_logprobs=update.old.of_micro(micro, rows, logprobs, *first))
    # The objective's mask is the policy loss's: GSPO's s_i averages over (and so sends its
    # gradient to) exactly the tokens the policy loss keeps, and the statistics count them.
    token_loss, objective_stats = objective.fn(
        logprobs, micro.old_logprobs, micro.advantages, micro.policy_loss_mask, **objective_kwargs(cfg)
    )
    if micro.token_weights is not None:
        token_loss = token_loss * micro.token_weights
    policy_loss = aggregate_loss(token_loss, micro.policy_loss_mask, cfg.aggregation, policy_denominator)
    loss = policy_loss
    minibatch = MiniBatchContext(
        batch=micro,
        logprobs=logprobs,
        entropy=entropy,
        metrics=metrics,
        compute_logits=partial(module.forward_logits, micro),
        rows=rows,
    )
    steps = len(update.mini_batches)  # each optimizer step's loss is a global mean: report their mean
    for technique in update.techniques:
        for name, term in technique.extra_loss_terms(update.ctx, minibatch).items():
            term_loss = aggregate_loss(term, micro.loss_mask, cfg.aggregation, terms_denominator)
            loss = loss + term_loss
            metrics.sum(f"loss/{name}", term_loss / steps)
    # DDP and DeepSpeed average gradients over ranks; the loss is already a global mean.
    with contextlib.nullcontext() if sync else _no_gradient_sync(module):
        module.manual_backward(loss * Ranks(module._trainer).world_size)
    micro_statistics(metrics, micro, entropy, logprobs, objective.prefix, objective_stats)
    metrics.sum(names.POLICY_LOSS, policy_loss / steps)
    if loss is not policy_loss:  # a technique added terms: the optimized loss differs from the surrogate
        metrics.sum(names.TOTAL_LOSS, loss / steps)
    return loss


def _clip_gradients(module: LitePPO, optimizer) -> torch.Tensor | None:
    """Clip and return the pre-clip global norm; None under DeepSpeed, which clips inside
    ``step()`` (config ``gradient_clipping`` = ``max_grad_norm``) and reports the norm after it."""
    if deepspeed_engine(module._trainer) is not None:
        return None
    max_norm = module.hparams.max_grad_norm
    params = [p for p in module.policy.parameters() if p.grad is not None]
    return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm is not None else math.inf).detach().float().cpu()


def _no_gradient_sync(module: LitePPO):
    """DDP's ``no_sync`` through Lightning: this backward accumulates locally, no all-reduce.

    DDP's reducer all-reduces the accumulated ``.grad`` at the next synced backward, so the
    step's gradient is unchanged. A no-op for one process and for DeepSpeed (ZeRO reduces each
    micro-batch's gradient partition itself; its ``no_sync`` refuses ZeRO-3).
    """
    strategy = module.trainer.strategy
    if isinstance(
        strategy.model, torch.nn.parallel.DistributedDataParallel
    ):  # not DeepSpeed's engine: its no_sync refuses ZeRO-3
        return strategy.block_backward_sync()
    return contextlib.nullcontext()


@dataclass(frozen=True)
class _Update:
    """What every micro-batch of one ``ppo_update`` shares."""

    techniques: list[Technique]
    ctx: StepContext
    objective: PolicyObjective
    mini_batches: list[torch.Tensor]
    old: OldLogprobs
