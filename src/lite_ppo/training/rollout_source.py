"""What the module needs from generation: the rollout of each training step and of each validation batch.

Generation stays in a callback (``lite_ppo.callbacks.Rollout`` owns the engine, its setup, weight sync
and teardown in callback hooks); this is the one declared hand-off. The callback registers itself in
its ``setup`` hook (:meth:`LitePPO.use_rollout_source`), and the module's ``training_step`` asks it
for the step's batch as stage 1. A fit without a source stops at start with a one-line error.

A source may also carry ``settings`` (a :class:`~lite_ppo.rollout.settings.RunSettings`; it is then a
:class:`SettingsSource`): they are read once per fit, and the module hands them to every technique at
setup (``Technique.configure_run``) and in every step's context, so no technique looks for the rollout
callback itself. A source without them (a test's fixed batches) gives techniques ``None``.

A test or a benchmark that trains on fixed batches registers its own source the same way::

    class GivenRollouts(Callback):
        def setup(self, trainer, pl_module, stage):
            pl_module.use_rollout_source(self)

        def training_rollout(self, trainer, module, batch, batch_idx):
            return my_batches[batch_idx]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from lite_ppo.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from lightning.pytorch import Trainer

    from lite_ppo.policy_module import PolicyModule
    from lite_ppo.rollout.batch import RolloutBatch
    from lite_ppo.rollout.settings import RunSettings


@runtime_checkable
class RolloutSource(Protocol):
    """Produces the module's rollouts. ``batch`` is the data module's batch (``problems``, ``index``)."""

    def training_rollout(
        self, trainer: Trainer, module: PolicyModule, batch: dict[str, Any], batch_idx: int
    ) -> RolloutBatch:
        """The training step's batch: generated, scored, shaped and filtered, ready for advantages."""
        ...


@runtime_checkable
class ValidationRolloutSource(RolloutSource, Protocol):
    """A source that also generates the validation batches (the ``Rollout`` callback does)."""

    def validation_rollout(
        self, trainer: Trainer, module: PolicyModule, batch: dict[str, Any], batch_idx: int
    ) -> RolloutBatch: ...


@runtime_checkable
class SettingsSource(RolloutSource, Protocol):
    """A source that says what the run generates with (the ``Rollout`` callback does)."""

    @property
    def settings(self) -> RunSettings: ...


NO_SOURCE = (
    "no rollout source: add `lite_ppo.callbacks.Rollout` under trainer.callbacks (it generates each step's responses)"
)


class SourceSlot:
    """The rollout source a module serves, remembered with the trainer that registered it (a module
    fitted again by another trainer must not use the previous trainer's callback)."""

    def __init__(self) -> None:
        self._entry: tuple[Any, RolloutSource] | None = None
        self._settings: RunSettings | None = None
        self._settings_read = False

    def register(self, trainer: Any, source: RolloutSource) -> None:
        """Remember ``source`` for ``trainer``; a second, different source in one trainer is refused."""
        if not isinstance(source, RolloutSource):
            raise TypeError(f"{type(source).__name__} is not a RolloutSource: it has no training_rollout method")
        if self._entry is not None:
            registered_by, current = self._entry
            if registered_by is trainer and current is not source:
                raise UserError(
                    f"two rollout sources in trainer.callbacks ({type(current).__name__} and "
                    f"{type(source).__name__}): keep one"
                )
        self._entry = (trainer, source)
        self._settings, self._settings_read = None, False

    def source(self, trainer: Any) -> RolloutSource:
        """``trainer``'s source; a one-line error when no callback of it registered one."""
        if self._entry is None or self._entry[0] is not trainer:
            raise UserError(NO_SOURCE)
        return self._entry[1]

    def settings(self) -> RunSettings | None:
        """The registered source's run settings, read once (the first call after it registered); None
        without a source or when it is not a :class:`SettingsSource`."""
        if not self._settings_read and self._entry is not None:
            source = self._entry[1]
            self._settings = source.settings if isinstance(source, SettingsSource) else None
            self._settings_read = True
        return self._settings
