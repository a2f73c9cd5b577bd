"""The module's rollout source in tests that train on fixed batches instead of generating."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch import Callback


class GivenRollouts(Callback):
    """Registers as the module's ``RolloutSource``: each step's batch is ``make(trainer, module,
    batch_idx)``, or by default the ``rollout`` the data loader's batch carries."""

    def __init__(self, make: Callable[[Any, Any, int], Any] | None = None) -> None:
        self.make = make

    def setup(self, trainer, pl_module, stage: str) -> None:
        pl_module.use_rollout_source(self)

    def training_rollout(self, trainer, module, batch, batch_idx: int):
        return self.make(trainer, module, batch_idx) if self.make is not None else batch["rollout"].to(module.device)
