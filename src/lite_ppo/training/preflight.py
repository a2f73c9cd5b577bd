"""Settings checked at fit start, before any model weights load.

A run that cannot work should say so in the first seconds, not after minutes of model loading and a
first rollout. :func:`check_fit_settings` runs from ``LitePPO.setup("fit")``, which Lightning calls
after the data module's and callbacks' ``setup`` and *before* ``configure_model`` (where the policy
loads). It reads only settings and the model's ``config.json`` (no weights), and raises a one-line
:class:`~lite_ppo.errors.UserError` for the first problem found:

- ``model.max_grad_norm`` is ``null`` (no clipping) or a finite number > 0. Torch clipping with a
  negative limit flips the gradient and 0 zeroes it, while DeepSpeed reads both as "no clipping":
  only ``null`` and positive values mean the same under every strategy.
- ``model.clip_eps`` in (0, 1); exactly one advantage estimator among the techniques, and no two
  techniques setting one field of the loss (what ``on_fit_start`` builds).
- ``model.lr`` > 0, ``model.weight_decay`` >= 0, ``model.betas`` each in [0, 1), ``model.warmup_steps``
  >= 0, ``model.min_lr_ratio`` in [0, 1]; a cosine schedule needs a finite budget
  (``trainer.max_epochs`` or ``trainer.max_steps``).
- ``data.prompts_per_step`` divides by the world size; each rank's responses
  (``prompts_per_step / world_size * rollout.sampling.n``) divide by ``model.num_mini_batches``.
- ``trainer.max_steps`` counts optimizer steps (``num_mini_batches`` per rollout step under manual
  optimization), so it must be a multiple of ``model.num_mini_batches``.
- the context (the model's ``max_position_embeddings``, or the engine's ``max_model_len`` when
  smaller) holds ``rollout.sampling.max_new_tokens`` (and ``eval_sampling``'s) plus at least one
  prompt token, and ``rollout.max_prompt_tokens`` plus them when set.
- ``model.lora`` is not combined with DeepSpeed: the merged-weight sync and the adapters-off
  reference read whole tensors, which ZeRO-3 partitions (the values and target modules of
  ``model.lora`` are checked by ``lite_ppo.models.lora``, also before the weights load).

:func:`check_techniques`, called next, refuses a technique given twice, two that conflict and a misspelt
hook, naming them, adapts a technique written with the hooks' earlier signatures and returns the one
advantage estimator.

:func:`check_module_arguments` checks ``LitePPO``'s own arguments that are wrong whatever the run (counts
below 1, an unknown mini-batch split or old-log-prob source) when the module is built.

Example:
    >>> check_fit_settings(trainer, module, techniques)   # doctest: +SKIP
    Traceback (most recent call last):
    lite_ppo.errors.UserError: model.max_grad_norm=-1.0: must be > 0, or null for no clipping
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from lite_ppo.errors import UserError
from lite_ppo.ops import MINI_BATCH_SPLITS
from lite_ppo.rollout.context import context_limit, model_context, prompt_budget
from lite_ppo.training.old_logprobs import OLD_LOGPROB_SOURCES
from lite_ppo.training.schedule import short_run_note

if TYPE_CHECKING:  # pragma: no cover
    from lightning.pytorch import LightningModule, Trainer

    from lite_ppo.technique import Technique

__all__ = ["check_fit_settings", "check_module_arguments", "check_techniques", "model_context_length"]


def check_fit_settings(trainer: Trainer, module: LightningModule, techniques: list[Technique]) -> None:
    """Raise a one-line :class:`UserError` for the first invalid or incompatible setting.

    Reads ``module.hparams`` (the LitePPO settings), the trainer (world size, budget), the data
    module's ``prompts_per_step``, the registered rollout source's sampling settings when it generates,
    and the ``techniques`` the module found among the trainer's callbacks.
    """
    hp = module.hparams
    _check_optimization(hp, trainer)
    _check_techniques(hp, techniques)
    _check_lora(hp, trainer)
    rollout = _generating_source(module)
    _check_batch_shape(hp, trainer, rollout)
    note = short_run_note(trainer, hp.num_mini_batches)
    if note and trainer.is_global_zero:
        print(f"lite-ppo fit: note: {note}", file=sys.stderr, flush=True)
    if rollout is not None:
        _check_context(hp.model_path, rollout)


def check_techniques(techniques: list[Technique]) -> Technique:
    """Refuse a repeated or conflicting technique and a misspelt hook, naming the techniques; adapt a
    technique written with the hooks' earlier signatures; return the one advantage estimator."""
    from lite_ppo.technique import (
        adapt_legacy_hooks,
        advantage_estimator,
        check_hook_names,
        refuse_conflicting_techniques,
        refuse_repeated_techniques,
    )

    refuse_repeated_techniques([type(t) for t in techniques])
    refuse_conflicting_techniques(techniques)
    check_hook_names(techniques)
    adapt_legacy_hooks(techniques)
    return advantage_estimator(techniques)


def model_context_length(model_path: str) -> int | None:
    """``max_position_embeddings`` (or ``n_positions``) from the model's ``config.json``; no weights load.

    ``builtin:`` names are resolved (built once into the cache) first. None when the config names no
    context length.
    """
    return model_context(_model_config(model_path))


def _model_config(model_path: str) -> Any:
    from transformers import AutoConfig

    from lite_ppo.models import resolve_model

    try:
        return AutoConfig.from_pretrained(resolve_model(model_path))
    except UserError:
        raise
    except (OSError, ValueError) as error:  # a missing folder, no config.json, an unknown builtin
        raise UserError(f"model.model_path={model_path!r}: {error}") from error


# -- the checks -----------------------------------------------------------------------------------
def _check_optimization(hp: Any, trainer: Trainer) -> None:
    norm = hp.max_grad_norm
    if norm is not None and not (isinstance(norm, (int, float)) and math.isfinite(norm) and norm > 0):
        raise UserError(
            f"model.max_grad_norm={norm}: must be > 0, or null for no clipping "
            "(a negative limit flips gradients and 0 freezes the weights under torch clipping, "
            "while DeepSpeed treats both as no clipping)"
        )
    if not (math.isfinite(hp.lr) and hp.lr > 0):
        raise UserError(f"model.lr={hp.lr}: must be a finite number > 0")
    if not (math.isfinite(hp.weight_decay) and hp.weight_decay >= 0):
        raise UserError(f"model.weight_decay={hp.weight_decay}: must be a finite number >= 0 (AdamW's decoupled decay)")
    betas = list(hp.betas)
    if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
        raise UserError(f"model.betas={betas}: must be two numbers in [0, 1) (AdamW's moment decay rates)")
    if hp.warmup_steps < 0:
        raise UserError(f"model.warmup_steps={hp.warmup_steps}: must be >= 0")
    if not 0 <= hp.min_lr_ratio <= 1:
        raise UserError(f"model.min_lr_ratio={hp.min_lr_ratio}: must be in [0, 1]")
    m = hp.num_mini_batches
    max_steps = trainer.max_steps
    if max_steps is not None and max_steps > 0 and max_steps % m:
        raise UserError(
            f"trainer.max_steps={max_steps} counts optimizer steps, {m} per rollout step "
            f"(model.num_mini_batches={m}): use a multiple of {m}"
        )
    if hp.lr_schedule == "cosine" and (max_steps is None or max_steps < 0) and trainer.max_epochs in (None, -1):
        raise UserError("model.lr_schedule=cosine needs a finite budget: set trainer.max_epochs or trainer.max_steps")


def _check_techniques(hp: Any, techniques: list[Technique]) -> None:
    """The clip range, one advantage estimator, no two techniques setting one loss field: what
    ``LitePPO.on_fit_start`` builds, checked here before the model loads."""
    from lite_ppo.technique import PolicyLossConfig, advantage_estimator, build_loss_config

    if not 0 < hp.clip_eps < 1:
        raise UserError(f"model.clip_eps={hp.clip_eps}: must be in (0, 1)")
    try:
        advantage_estimator(techniques)
        build_loss_config(PolicyLossConfig(clip_low=hp.clip_eps, clip_high=hp.clip_eps), techniques)
    except UserError:
        raise
    except ValueError as error:  # the hook contract's own one-line messages name the techniques
        raise UserError(str(error)) from error


def _check_lora(hp: Any, trainer: Trainer) -> None:
    from lite_ppo.strategies.zero import deepspeed_strategy

    if getattr(hp, "lora", None) is not None and deepspeed_strategy(trainer) is not None:
        raise UserError(
            "model.lora does not run under DeepSpeed (ZeRO-3): use the default strategy or ddp, where the frozen "
            "base is held once per rank and only the adapters have gradients and optimizer state"
        )


def _check_batch_shape(hp: Any, trainer: Trainer, rollout: Any) -> None:
    world = max(1, int(trainer.world_size))
    datamodule = getattr(trainer, "datamodule", None)
    prompts = getattr(datamodule, "prompts_per_step", None)
    if prompts is None:
        return
    if prompts % world:
        raise UserError(
            f"data.prompts_per_step={prompts} is not divisible by the world size {world} "
            "(trainer.num_nodes x trainer.devices): every rank generates for an equal share"
        )
    if rollout is None:
        return
    n = rollout.sampling.n
    per_rank = prompts // world * n
    m = hp.num_mini_batches
    if per_rank % m:
        raise UserError(
            f"each rank's {per_rank} responses per step (data.prompts_per_step={prompts} / world size {world} "
            f"x rollout.sampling.n={n}) do not divide into model.num_mini_batches={m} equal mini-batches"
        )


def _check_context(model_path: str, rollout: Any) -> None:
    # The rule each step applies (rollout.context), from the model's config, read without its weights.
    limit = context_limit(_model_config(model_path), rollout.engine)
    if limit is None:
        return
    context = limit.tokens
    source = f"max_position_embeddings of {model_path}" if limit.source == "max_position_embeddings" else limit.source
    max_prompt = getattr(rollout, "max_prompt_tokens", None)
    for section, sampling in (("rollout.sampling", rollout.sampling), ("rollout.eval_sampling", rollout.eval_sampling)):
        new = sampling.max_new_tokens
        if prompt_budget(context, new) < 1:
            raise UserError(
                f"{section}.max_new_tokens={new} leaves no room for a prompt in the model's context of "
                f"{context} tokens ({source}): use at most {context - 1}"
            )
        if max_prompt is not None and max_prompt > prompt_budget(context, new):
            raise UserError(
                f"rollout.max_prompt_tokens={max_prompt} + {section}.max_new_tokens={new} = {max_prompt + new} "
                f"exceeds the model's context of {context} tokens ({source})"
            )


def _generating_source(module: LightningModule) -> Any:
    """The module's registered rollout source when it generates (it holds a RolloutProducer: the
    ``Rollout`` callback); None for a source of fixed batches, whose settings there is nothing to check."""
    from lite_ppo.rollout.producer import RolloutProducer

    source = module.rollout_source
    return source if isinstance(getattr(source, "producer", None), RolloutProducer) else None


def check_module_arguments(
    num_mini_batches: int,
    micro_batch_size: int,
    micro_batch_tokens: int | None,
    logprob_chunk_size: int | None,
    mini_batch_split: str,
    old_logprobs: str,
) -> None:
    """``LitePPO``'s own arguments that are wrong whatever the run: one line naming the option."""
    if num_mini_batches < 1 or micro_batch_size < 1:
        raise UserError(
            f"model.num_mini_batches={num_mini_batches} and model.micro_batch_size={micro_batch_size}: "
            "both must be >= 1"
        )
    if micro_batch_tokens is not None and micro_batch_tokens < 1:
        raise UserError(
            f"model.micro_batch_tokens={micro_batch_tokens}: must be >= 1, "
            "or null for micro_batch_size responses per pass"
        )
    if logprob_chunk_size is not None and logprob_chunk_size < 1:
        raise UserError(f"model.logprob_chunk_size={logprob_chunk_size}: must be >= 1, or null for full logits")
    if mini_batch_split not in MINI_BATCH_SPLITS:
        raise UserError(f"model.mini_batch_split={mini_batch_split!r}: choose group or row")
    if old_logprobs not in OLD_LOGPROB_SOURCES:
        raise UserError(f"model.old_logprobs={old_logprobs!r}: choose reuse_first, recompute or engine")
