"""Divergence guard: a non-finite loss or gradient norm never reaches the weights or a checkpoint.

Without it, one NaN gradient (a too-large learning rate, an overflowing extra loss term) goes
through ``optimizer.step()``, the weights become NaN, are written over ``last.ckpt``, and the run
dies a step later inside generation. :class:`DivergenceGuard` is the callback the ``lite-ppo`` CLI
adds by default; the update (``lite_ppo.training.update.ppo_update``) asks it before every optimizer step:

- **skip**: when the mini-batch loss (summed over its micro-batches) or the global gradient norm is
  not finite on any rank, the gradients are dropped (``zero_grad(set_to_none=True)``) and
  ``optimizer.step()`` runs on no gradient: AdamW leaves weights, moments and its step count
  unchanged. The step still counts: ``global_step``, the LR scheduler and the checkpoint cadence
  advance as in a run without the fault, so step numbers and the LR schedule stay aligned with
  ``max_steps`` (a skipped step is a lost step of budget, not a postponed one). A warning names it and
  ``update/skipped_steps`` (the run's total) is logged every training step;
- **stop**: ``max_consecutive_skips`` skipped optimizer steps in a row raise :class:`TrainingDiverged`
  (one line, non-zero exit). The weights then are those of the last finite step;
- **stop on an exploding step**: a finite but absurd update (``model.lr 1e20`` moves every weight by
  ~1e20) passes the checks above. After every optimizer step the global norm of the weights is
  compared with its value before the step; a step that multiplies or divides it by more than
  ``max_weight_norm_factor`` raises :class:`TrainingDiverged` at once, before any checkpoint holds
  those weights;
- **where to resume**: a stop names the newest checkpoint whose weights predate the divergence
  (saved at or before the optimizer step where the skipped streak, or the exploding step, began),
  since a ``last.ckpt`` written after that step may hold what went wrong;
- **never save non-finite weights**: before every checkpoint save the parameters are checked (each
  rank its own shard under ZeRO-3) and a non-finite one raises :class:`TrainingDiverged` instead of
  writing over the last good checkpoint;
- **alarms** (off by default): a warning when the step's approx KL, importance-ratio extremes or
  entropy cross a threshold (e.g. ``alarm_approx_kl: 1.0``, ``alarm_entropy_min: 0.01``).

Under DeepSpeed the engine owns the gradients and its ``step()``: the loss is checked before the step
(counted, warned, stop after N in a row) but the step cannot be skipped from outside; DeepSpeed's own
fp16 loss scaler skips overflowing steps, bf16/fp32 steps are applied. The save check still applies.

Example::

    divergence_guard:
      max_consecutive_skips: 8
      max_weight_norm_factor: 2.0
      alarm_approx_kl: 1.0
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_warn
from lightning.pytorch import Callback
from typing_extensions import override

from lite_ppo.errors import UserError
from lite_ppo.metric_names import APPROX_KL, ENTROPY, SKIPPED_STEPS
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.strategies.zero import deepspeed_strategy


class TrainingDiverged(UserError):
    """The run stopped because its loss, gradients or weights stopped being finite."""


class DivergenceGuard(Callback):
    """Skip optimizer steps with a non-finite loss or gradient norm; stop after N in a row.

    Args:
        enabled: off restores the unguarded behaviour (every step is applied).
        max_consecutive_skips: optimizer steps in a row that may be skipped before the run stops.
            A rollout step makes ``num_mini_batches`` optimizer steps, so the default 8 allows two
            bad rollout batches at 4 mini-batches.
        check_weights_before_save: refuse to save a checkpoint with a non-finite parameter.
        max_weight_norm_factor: stop when one optimizer step multiplies the global norm of the
            weights by more than this factor or divides it by more than it (an exploding but finite
            update; an ordinary step changes it by far less than 1 %). ``null``: no check (and no
            norm computed, one pass over the weights per optimizer step).
        alarm_approx_kl: warn when the step's approx KL exceeds this (None: no alarm).
        alarm_ratio_max: warn when the largest importance ratio exceeds this.
        alarm_ratio_min: warn when the smallest importance ratio falls below this.
        alarm_entropy_min: warn when the mean entropy falls below this (entropy collapse).
    """

    def __init__(
        self,
        enabled: bool = True,
        max_consecutive_skips: int = 8,
        check_weights_before_save: bool = True,
        max_weight_norm_factor: float | None = 2.0,
        alarm_approx_kl: float | None = None,
        alarm_ratio_max: float | None = None,
        alarm_ratio_min: float | None = None,
        alarm_entropy_min: float | None = None,
    ) -> None:
        if max_consecutive_skips < 1:
            raise UserError(f"divergence_guard.max_consecutive_skips must be >= 1, got {max_consecutive_skips}")
        if max_weight_norm_factor is not None and not (
            math.isfinite(max_weight_norm_factor) and max_weight_norm_factor > 1
        ):
            raise UserError(
                f"divergence_guard.max_weight_norm_factor must be a number > 1, or null for no check; "
                f"got {max_weight_norm_factor}"
            )
        self.enabled = enabled
        self.max_consecutive_skips = max_consecutive_skips
        self.check_weights_before_save = check_weights_before_save
        self.max_weight_norm_factor = max_weight_norm_factor
        self.alarms = {
            "approx_kl_max": alarm_approx_kl,
            "ratio_max": alarm_ratio_max,
            "ratio_min": alarm_ratio_min,
            "entropy_min": alarm_entropy_min,
        }
        self.skipped_steps = 0
        self.consecutive = 0
        self._loss: torch.Tensor | None = None
        self._step = 0  # trainer.global_step before the optimizer step being taken
        self._streak_start = 0  # the optimizer step where the current streak of skips began
        self._weight_norm: float | None = None  # after the last optimizer step (or at train start)

    # -- called by the module, around each optimizer step ---------------------------------------------
    def observe_loss(self, loss: torch.Tensor) -> None:
        """Add one micro-batch's loss to the current optimizer step's."""
        loss = loss.detach().float().sum()
        self._loss = loss if self._loss is None else self._loss + loss

    def before_optimizer_step(self, trainer, optimizer, grad_norm: torch.Tensor | None) -> bool:
        """True (and the gradients dropped) when this optimizer step must not change the weights."""
        loss, self._loss = self._loss, None
        self._step = int(trainer.global_step)
        if not self.enabled:
            return False
        local_bad = (loss is not None and not torch.isfinite(loss).item()) or (
            grad_norm is not None and not torch.isfinite(grad_norm).all().item()
        )
        # One verdict for all ranks (DDP gradients are equal after the all-reduce; a loss may not be).
        bad = (
            trainer.strategy.reduce_boolean_decision(bool(local_bad), all=False)
            if trainer.world_size > 1
            else local_bad
        )
        if not bad:
            self.consecutive = 0
            return False
        if self.consecutive == 0:
            self._streak_start = self._step
        self.skipped_steps += 1
        self.consecutive += 1
        values = f"loss {_fmt(loss)}, grad norm {_fmt(grad_norm)}"
        if self.consecutive >= self.max_consecutive_skips:
            raise TrainingDiverged(
                f"divergence guard: {self.consecutive} optimizer steps in a row had a non-finite "
                f"loss or gradient norm (optimizer steps {self._streak_start}-{self._step}, last: {values}); "
                f"stopping (divergence_guard.max_consecutive_skips={self.max_consecutive_skips}). Lower model.lr "
                f"or set model.max_grad_norm; {_resume_hint(trainer, self._streak_start)}"
            )
        if _deepspeed(trainer):
            rank_zero_warn(
                f"divergence guard: optimizer step {trainer.global_step} has a non-finite {values}; under DeepSpeed "
                "the engine applies or skips it (fp16 loss scaling skips it)"
            )
            return False
        rank_zero_warn(
            f"divergence guard: optimizer step {trainer.global_step} skipped ({values}); {self.consecutive} in a row, "
            f"{self.skipped_steps} in this run"
        )
        optimizer.zero_grad(set_to_none=True)  # step() on no gradient: AdamW leaves weights and state alone
        return True

    def after_optimizer_step(self, trainer, model: torch.nn.Module) -> None:
        """Stop (raise :class:`TrainingDiverged`) when the step just taken changed the global norm of
        ``model``'s weights by more than ``max_weight_norm_factor`` either way."""
        if not self.enabled or self.max_weight_norm_factor is None:
            return
        before, after = self._weight_norm, weight_norm(trainer, model)
        self._weight_norm = after
        if before is None or not before > 0:
            return
        factor = after / before if math.isfinite(after) else math.inf
        if factor <= self.max_weight_norm_factor and factor * self.max_weight_norm_factor >= 1:
            return
        raise TrainingDiverged(
            f"divergence guard: optimizer step {self._step} changed the weights' norm from {before:.4g} to "
            f"{after:.4g} (x{factor:.3g}; divergence_guard.max_weight_norm_factor={self.max_weight_norm_factor:g}): "
            f"an exploding update, stopping before any checkpoint holds it. Lower model.lr; "
            f"{_resume_hint(trainer, self._step)}"
        )

    # -- Lightning hooks -----------------------------------------------------------------------------------
    @override
    def on_train_start(self, trainer, pl_module) -> None:
        # The reference for the first step's check: the weights as loaded or restored from a checkpoint.
        policy = getattr(pl_module, "policy", pl_module)
        if self.enabled and self.max_weight_norm_factor is not None:
            self._weight_norm = weight_norm(trainer, policy)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.enabled:
            return
        pl_module.log(SKIPPED_STEPS, float(self.skipped_steps), on_step=True, on_epoch=False, batch_size=1)
        self._alarms(trainer)

    def _alarms(self, trainer) -> None:
        metrics = trainer.callback_metrics
        checks = [
            (
                "approx_kl_max",
                APPROX_KL,
                lambda v, t: v > t,
                "approx KL {v:.4g} > {t}: the policy moved far from the rollout policy",
            ),
            ("ratio_max", "policy/ratio_max", lambda v, t: v > t, "largest importance ratio {v:.4g} > {t}"),
            ("ratio_min", "policy/ratio_min", lambda v, t: v < t, "smallest importance ratio {v:.4g} < {t}"),
            ("entropy_min", ENTROPY, lambda v, t: v < t, "entropy {v:.4g} < {t}: the policy is collapsing"),
        ]
        for key, tag, crossed, text in checks:
            threshold = self.alarms[key]
            if threshold is None or tag not in metrics:
                continue
            value = float(metrics[tag])
            if crossed(value, threshold) or math.isnan(value):
                rank_zero_warn(
                    f"divergence alarm at optimizer step {trainer.global_step}: " + text.format(v=value, t=threshold)
                )

    @override
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if not (self.enabled and self.check_weights_before_save):
            return
        bad = next(
            (
                name
                for name, p in pl_module.named_parameters()
                if not torch.isfinite(getattr(p, "ds_tensor", p).detach()).all()
            ),
            None,
        )
        any_bad = (
            trainer.strategy.reduce_boolean_decision(bad is not None, all=False)
            if trainer.world_size > 1
            else bad is not None
        )
        if any_bad:
            where = f"parameter {bad}" if bad else "a parameter on another rank"
            raise TrainingDiverged(
                f"divergence guard: {where} is not finite at optimizer step {trainer.global_step}; not saving the "
                "checkpoint (the previous ones are untouched)"
            )

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"skipped_steps": self.skipped_steps, "consecutive": self.consecutive}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped_steps = int(state_dict.get("skipped_steps", 0))
        self.consecutive = int(state_dict.get("consecutive", 0))


class _NoGuard:
    """What the module talks to when no guard is configured: every step is applied."""

    def observe_loss(self, loss: torch.Tensor) -> None:
        pass

    def before_optimizer_step(self, trainer, optimizer, grad_norm) -> bool:
        return False

    def after_optimizer_step(self, trainer, model) -> None:
        pass


_NO_GUARD = _NoGuard()


def divergence_guard_of(trainer) -> DivergenceGuard | _NoGuard:
    """The trainer's :class:`DivergenceGuard`, or a no-op stand-in when there is none."""
    callbacks = getattr(trainer, "callbacks", None) or []
    return next((c for c in callbacks if isinstance(c, DivergenceGuard)), _NO_GUARD)


def weight_norm(trainer, model: torch.nn.Module) -> float:
    """The global L2 norm of ``model``'s parameters; under ZeRO-3 each rank holds a shard
    (``ds_tensor``) and the squares are summed over ranks.

    Each tensor's norm is taken in its own dtype (no float64 copy of a large embedding on the GPU) and
    combined in float64. Weights of ~1e20 overflow a float32 norm to inf, which reads as what it is:
    an exploded step."""
    params = list(model.parameters())
    partitioned = any(hasattr(p, "ds_tensor") for p in params)
    squares = torch.zeros((), dtype=torch.float64, device=params[0].device if params else "cpu")
    for p in params:
        shard = getattr(p, "ds_tensor", p).detach()
        squares += torch.linalg.vector_norm(shard).to(squares.device, torch.float64) ** 2
    if partitioned:
        squares = Ranks(trainer).sum(squares)
    return float(squares.sqrt())


def checkpoint_global_step(path: str | os.PathLike) -> int | None:
    """The ``global_step`` a checkpoint (file or DeepSpeed folder) was saved at; None when unreadable.
    Memory-mapped: the weights are not read."""
    path = Path(path)
    if path.is_dir():  # DeepSpeed: <ckpt>/<tag>/*mp_rank_00_model_states.pt holds the client state
        tag = path / "latest"
        files = sorted((path / tag.read_text().strip()).glob("*mp_rank_00_model_states.pt")) if tag.is_file() else []
        if not files:
            return None
        path = files[0]
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # noqa: BLE001 (a damaged or foreign file is simply not a candidate)
        return None
    step = state.get("global_step") if isinstance(state, dict) else None
    return int(step) if isinstance(step, int) else None


def checkpoint_before(trainer, step: int) -> tuple[Path, int] | None:
    """The newest checkpoint in the folders of the trainer's ``ModelCheckpoint`` callbacks saved at
    or before optimizer step ``step`` (a step-named file rather than ``last.ckpt`` on a tie), with its step."""
    found: list[tuple[int, bool, Path]] = []
    for callback in getattr(trainer, "checkpoint_callbacks", None) or []:
        folder = getattr(callback, "dirpath", None)
        if not folder or not os.path.isdir(folder):
            continue
        for path in Path(folder).glob("*.ckpt"):
            saved = checkpoint_global_step(path)
            if saved is not None and saved <= step:
                found.append((saved, not path.name.startswith("last"), path))
    if not found:
        return None
    saved, _, path = max(found)
    return path, saved


def _resume_hint(trainer, step: int) -> str:
    """Where to resume from: the newest checkpoint saved before optimizer step ``step`` went wrong."""
    found = checkpoint_before(trainer, step)
    if found is None:
        return f"no checkpoint was saved before optimizer step {step}: start the run again"
    path, saved = found
    return f"resume with --ckpt_path {path} (saved at optimizer step {saved}, before the divergence)"


def _deepspeed(trainer) -> bool:
    return deepspeed_strategy(trainer) is not None


def _fmt(value: torch.Tensor | None) -> str:
    return "n/a" if value is None else f"{float(value):.4g}"
