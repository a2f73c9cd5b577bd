"""Reductions over the data-parallel ranks: the one place that talks to the Lightning strategy.

Techniques, diagnostics and the module ask :class:`Ranks` (or, for per-step scalars,
:class:`lite_ppo.step_metrics.StepMetrics`, which uses it) instead of writing their own
``if world_size > 1: reduce`` branches. Every method is a no-op on one process, and every rank must
call the same methods in the same order (they are collectives).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # pragma: no cover
    from lightning.pytorch import Trainer


class Ranks:
    """The data-parallel ranks of ``trainer`` (None: a single process, e.g. in unit tests).

    Example::

        ranks = Ranks(trainer)
        tokens = ranks.sum(mask.sum())          # over all ranks
        rewards = ranks.cat(batch.rewards)      # [world * B], rank order
        if ranks.any(batch_is_short): ...       # the same decision on every rank
    """

    def __init__(self, trainer: Trainer | None) -> None:
        self.trainer = trainer
        self.world_size = int(trainer.world_size) if trainer is not None else 1

    def _device(self) -> torch.device:
        return self.trainer.strategy.root_device

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks (same shape, same device as ``value``)."""
        if self.world_size <= 1:
            return value
        reduced = self.trainer.strategy.reduce(value.detach().clone().to(self._device()), reduce_op="sum")
        return reduced.to(value.device)

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        """[world, *value.shape]: every rank's ``value`` in rank order (equal shapes on all ranks)."""
        if self.world_size <= 1:
            return value.unsqueeze(0)
        return self.trainer.strategy.all_gather(value.detach().to(self._device())).to(value.device)

    def cat(self, value: torch.Tensor) -> torch.Tensor:
        """Every rank's rows concatenated in rank order: [world * n, ...] (equal n on all ranks)."""
        return self.gather(value).flatten(0, 1)

    def cat_varying(self, value: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Every rank's rows concatenated in rank order, when the ranks hold different numbers of rows
        (e.g. their loss tokens): ``(rows of all ranks, index of this rank's first row in them)``."""
        if self.world_size <= 1:
            return value, 0
        counts = self.gather(torch.tensor([value.shape[0]], device=value.device)).flatten().tolist()
        if max(counts) == 0:
            return value, 0
        padded = value.new_zeros((max(counts), *value.shape[1:]))
        padded[: value.shape[0]] = value
        gathered = self.gather(padded)  # [world, max rows, ...]
        rank = int(self.trainer.global_rank)
        return torch.cat([gathered[r, :n] for r, n in enumerate(counts)]), sum(counts[:rank])

    def max(self, value: torch.Tensor) -> torch.Tensor:
        """Element-wise maximum over ranks."""
        return self.gather(value).amax(0)

    def min(self, value: torch.Tensor) -> torch.Tensor:
        """Element-wise minimum over ranks."""
        return self.gather(value).amin(0)

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank."""
        if self.world_size <= 1:
            return bool(flag)
        return bool(self.trainer.strategy.reduce_boolean_decision(bool(flag), all=False))

    def objects(self, obj: Any) -> list[Any]:
        """``obj`` of every rank (any picklable object, sizes may differ), in rank order."""
        if self.world_size <= 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out
