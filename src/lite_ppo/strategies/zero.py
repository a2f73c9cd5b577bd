"""What the module needs to know about DeepSpeed (ZeRO-3) under Lightning's manual optimization.

The module trains with manual optimization: per optimizer step it calls ``manual_backward`` once per
micro-batch and then ``optimizer.step()``. Under Lightning's ``DeepSpeedStrategy`` these become
``DeepSpeedEngine.backward(loss)`` and ``DeepSpeedEngine.step()``. Three things differ from DDP:

1. **Gradient accumulation over micro-batches.** Lightning sets DeepSpeed's
   ``gradient_accumulation_steps`` to ``trainer.accumulate_grad_batches`` (1), so every
   ``engine.backward`` is at an accumulation boundary and ``engine.step()`` applies the update: the
   sum of all micro-batch gradients of the step, which is what the module's global-denominator
   losses want (``backward`` divides by ``gradient_accumulation_steps`` = 1: no rescaling).
   But ZeRO-3 decides *copy or add* for each micro-batch's reduced gradient partition with a
   counter (``micro_step_id``) that only ``DeepSpeedEngine.forward`` advances. Lightning calls the
   engine's forward once per ``training_step``; the module calls the policy directly for every
   micro-batch, so without help each micro-batch's gradient would *overwrite* the previous one.
   :func:`begin_micro_batch` does the bookkeeping ``DeepSpeedEngine.forward`` does first.
2. **Clipping and the gradient norm.** Gradients live in partitions inside DeepSpeed's optimizer
   (``param.grad`` is None), so ``torch.nn.utils.clip_grad_norm_`` cannot see them; DeepSpeed clips
   inside ``step()`` by its config's ``gradient_clipping`` and keeps the pre-clip global norm
   (:func:`set_gradient_clipping`, :func:`engine_grad_norm`).
3. **Loading a Hugging Face model.** Lightning runs ``configure_model`` inside ``deepspeed.zero.Init``.
   :func:`hf_zero3_loading` tells transformers about it, so ``from_pretrained`` loads the checkpoint
   into the partitioned parameters (rank 0 reads, every rank keeps its shard) and ``generate``
   keeps ranks in lock-step (``synced_gpus``) so that ranks that finish early keep serving the
   parameter all-gathers of the others.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from lite_ppo.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from lightning.pytorch import Trainer


def deepspeed_strategy(trainer: Trainer | None):
    """The trainer's ``DeepSpeedStrategy`` (or a subclass such as the CPU test one), else None."""
    if trainer is None:
        return None
    from lightning.pytorch.strategies import DeepSpeedStrategy

    strategy = getattr(trainer, "strategy", None)
    return strategy if isinstance(strategy, DeepSpeedStrategy) else None


def deepspeed_engine(trainer: Trainer | None):
    """The ``DeepSpeedEngine`` wrapping the LightningModule once training set it up, else None."""
    strategy = deepspeed_strategy(trainer)
    if strategy is None:
        return None
    try:
        from deepspeed import DeepSpeedEngine
    except ImportError:  # pragma: no cover
        return None
    engine = strategy.model
    return engine if isinstance(engine, DeepSpeedEngine) else None


def begin_micro_batch(trainer: Trainer | None) -> None:
    """Call before the forward pass of every micro-batch whose loss goes to ``manual_backward``.

    Does what ``DeepSpeedEngine.forward`` does first: tell the ZeRO optimizer a new forward/backward
    pair starts, so that the next backward *adds* its reduced gradient partition to those of the
    earlier micro-batches of this optimizer step instead of overwriting them (ZeRO-3 advances its
    ``micro_step_id`` here; ``optimizer.zero_grad()`` and ``step()`` reset it). A no-op without
    DeepSpeed.
    """
    engine = deepspeed_engine(trainer)
    if engine is None:
        return
    optimizer = getattr(engine, "optimizer", None)
    clear = getattr(optimizer, "clear_backward_seen_flag", None)
    if clear is not None:
        clear()


def set_gradient_clipping(trainer: Trainer | None, max_norm: float | None) -> None:
    """Make DeepSpeed clip at ``max_norm`` (None = no clipping); call before ``deepspeed.initialize``.

    Lightning fills the config's ``gradient_clipping`` from ``Trainer(gradient_clip_val)``, which manual
    optimization does not allow, so the module's ``max_grad_norm`` is the one setting. A different
    non-zero value written in the strategy's config is overridden with a warning. ``max_norm`` must be
    None or > 0 under every strategy: DeepSpeed reads 0 and negative values as "no clipping", while
    torch's ``clip_grad_norm_`` zeroes (0) or flips (< 0) the gradient, so both are refused.
    """
    if max_norm is not None and not float(max_norm) > 0:
        raise UserError(f"model.max_grad_norm={max_norm}: must be > 0, or null for no clipping")
    strategy = deepspeed_strategy(trainer)
    if strategy is None:
        return
    strategy._init_config_if_needed()
    value = float(max_norm) if max_norm is not None else 0.0
    old = strategy.config.get("gradient_clipping")
    if old not in (None, 0, 0.0) and float(old) != value:
        warnings.warn(
            f"the DeepSpeed config sets gradient_clipping={old}, but the module's max_grad_norm={max_norm} wins; "
            "set model.max_grad_norm instead",
            stacklevel=2,
        )
    strategy.config["gradient_clipping"] = value


def engine_grad_norm(trainer: Trainer | None) -> torch.Tensor | None:
    """The global (all ranks, pre-clip) gradient norm DeepSpeed computed in its last ``step()``."""
    engine = deepspeed_engine(trainer)
    if engine is None:
        return None
    norm = engine.get_global_grad_norm()
    if norm is None:
        return torch.tensor(float("nan"))
    return torch.as_tensor(norm, dtype=torch.float32).detach().float().cpu().reshape(())


class _HFZero3Config:
    """The two things transformers asks of its global DeepSpeed config object (``is_zero3()`` and
    ``config``), without ``accelerate``, which transformers' own ``HfDeepSpeedConfig`` requires."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def is_zero3(self) -> bool:
        return True


@contextlib.contextmanager
def hf_zero3_loading(trainer: Trainer | None) -> Iterator[Any]:
    """Wrap ``from_pretrained`` in ``configure_model``; yields a keep-alive token or None.

    Under a ZeRO-3 ``DeepSpeedStrategy`` this registers the strategy's config as transformers' global
    DeepSpeed config (a weak reference: it stays in force while the returned token is alive; keep the
    token as long as the model, as ``LitePPO`` does beside its policy), so that

    - ``from_pretrained`` builds the model partitioned and loads the checkpoint into the shards
      (without it, weights loaded inside Lightning's ``deepspeed.zero.Init`` would be lost);
    - ``generate`` runs with ``synced_gpus`` on several ranks: ranks whose responses all ended keep
      stepping until every rank is done, since each forward all-gathers parameters from all ranks.

    Elsewhere (DDP, one device, ZeRO-1/2) it does nothing and yields None.
    """
    strategy = deepspeed_strategy(trainer)
    if strategy is None:
        yield None
        return
    strategy._init_config_if_needed()
    if not strategy.zero_stage_3:
        yield None
        return
    yield register_hf_zero3(strategy.config)


def register_hf_zero3(config: dict[str, Any]) -> Any:
    """Make ``config`` (a ZeRO-3 DeepSpeed config) transformers' global DeepSpeed config while the
    returned token is alive (what ``HfDeepSpeedConfig`` does, without needing ``accelerate``).

    There is no release function, on purpose: transformers keeps only a weak reference
    (``set_hf_deepspeed_config``), so the flag goes away with the token, i.e. with the object that
    keeps the partitioned model. Releasing it earlier, e.g. when ``fit`` ends, would be wrong: the
    partitioned policy is still used afterwards (``validate`` / ``test`` with the same module, or
    generating after ``fit`` as ``tests/test_zero3.py`` does), and on several ranks ``generate``
    without ``synced_gpus`` hangs once one rank finishes first.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    token = _HFZero3Config(config)
    hf_deepspeed.set_hf_deepspeed_config(token)
    return token


def zero3_inference_engine(model: torch.nn.Module, trainer: Trainer | None) -> Any | None:
    """Under a ZeRO-3 strategy, a DeepSpeed engine without optimizer around ``model``, a frozen model
    built partitioned (``from_pretrained`` while the policy's :func:`hf_zero3_loading` token is
    alive); None elsewhere.

    A partitioned parameter holds only this rank's shard; only a DeepSpeed engine's hooks gather it
    for the forward of its layer. The policy gets them from the strategy's training engine; a second
    model (a reference policy) needs its own: ``deepspeed.initialize`` with the strategy's config
    minus the optimizer and scheduler sections, as TRL does for its reference model. Keep the engine
    alive as long as the model: its destructor removes the hooks.
    """
    strategy = deepspeed_strategy(trainer)
    if strategy is None:
        return None
    strategy._init_config_if_needed()
    if not strategy.zero_stage_3:
        return None
    import deepspeed

    config = {key: value for key, value in strategy.config.items() if key not in ("optimizer", "scheduler")}
    zero = config.get("zero_optimization") or {}
    config["zero_optimization"] = {key: value for key, value in zero.items() if key != "offload_optimizer"}
    engine, *_ = deepspeed.initialize(model=model, config=config)
    engine.eval()
    return engine


def offloads_optimizer(trainer: Trainer | None) -> bool:
    """True when the DeepSpeed config offloads optimizer states (``offload_optimizer.device`` cpu/nvme)."""
    strategy = deepspeed_strategy(trainer)
    if strategy is None:
        return False
    strategy._init_config_if_needed()
    zero = strategy.config.get("zero_optimization") or {}
    return (zero.get("offload_optimizer") or {}).get("device", "none") in ("cpu", "nvme")


def adamw_class(trainer: Trainer | None, fused: bool = True):
    """``torch.optim.AdamW``, or DeepSpeed's CPU AdamW when the optimizer states are offloaded
    (DeepSpeed refuses other optimizers with ZeRO-Offload; same arguments, decoupled weight decay).

    ``fused``: torch's fused AdamW kernel (one kernel over all parameters instead of a for-each loop;
    the same update to float rounding, several times faster on CPU: docs/benchmarks.md) outside
    DeepSpeed, whose ZeRO partitions manage their own flat buffers.
    """
    if offloads_optimizer(trainer):
        import functools

        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return functools.partial(DeepSpeedCPUAdam, adamw_mode=True)
    if fused and deepspeed_strategy(trainer) is None:
        import functools

        return functools.partial(torch.optim.AdamW, fused=True)
    return torch.optim.AdamW
