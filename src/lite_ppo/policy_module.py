"""What a technique may use of the module it is handed: the declared interface of ``LitePPO``.

Hooks receive the module as ``ctx.module`` (:class:`~lite_ppo.step_context.StepContext`); of it a
technique uses only what :class:`PolicyModule` names. ``tests/test_hook_contract.py`` reads every shipped
callback and fails on any other member, so the module can change everything else without breaking a
technique. A user's technique that keeps to this list keeps working.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from lite_ppo.rollout.batch import RolloutBatch
    from lite_ppo.step_context import StepContext
    from lite_ppo.step_metrics import StepMetrics


@runtime_checkable
class PolicyModule(Protocol):
    """The members of the training module a technique may read or call."""

    #: This training step's scalars: record with ``.mean``/``.sum``/``.max``/``.min``; reduced over
    #: micro-batches and ranks once and logged at the end of the step.
    step_metrics: StepMetrics
    #: The policy's tokenizer (decoding, pad id) and its resolved model folder.
    tokenizer: Any
    model_path: str
    #: What the step is doing now, ``(name, done, total)`` or None (read in ``on_phase``).
    phase: tuple[str, int, int] | None
    #: Bumped after every optimizer step (an engine syncs its weights when it changes).
    policy_version: int
    #: Whether the policy trains LoRA adapters (its frozen base is then ``adapters_disabled``).
    has_adapters: bool
    #: The module's init arguments, read-only (``Diagnostics`` writes them to TensorBoard's HPARAMS tab).
    hparams: Any

    @property
    def device(self) -> torch.device: ...

    # -- scoring with the policy or a model laid out like it (lite_ppo.training.policy_scorer) ---------
    def score_responses(
        self, batch: RolloutBatch, model: torch.nn.Module | None = None, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def sequence_logprobs(self, batch: RolloutBatch) -> torch.Tensor: ...

    def micro_batch_rows(self, batch: RolloutBatch) -> list[torch.Tensor]: ...

    def forward_logits(self, batch: RolloutBatch, model: torch.nn.Module | None = None) -> torch.Tensor: ...

    # -- a reference model -----------------------------------------------------------------------------
    def load_frozen_model(self, path: str) -> torch.nn.Module: ...

    def adapters_disabled(self) -> AbstractContextManager[None]: ...

    # -- the rollout callback's side (generation runs in a callback) -----------------------------------
    def use_rollout_source(self, source: Any) -> None: ...

    def report_phase(self, phase: str | None, done: int = 0, total: int = 0) -> None: ...

    def step_context(self) -> StepContext: ...

    # -- Lightning's logging, for what is not a step scalar (histograms, timings) ------------------------
    def log(self, name: str, value: Any, **kwargs: Any) -> None: ...

    def log_dict(self, dictionary: Any, **kwargs: Any) -> None: ...


MEMBERS = frozenset(name for name in dir(PolicyModule) if not name.startswith("_")) | frozenset(
    PolicyModule.__annotations__
)


@runtime_checkable
class PhaseListener(Protocol):
    """A callback told whenever the training step's phase changes (``module.report_phase``): it reads
    ``module.phase``. Every technique is one (``Technique.on_phase``, a no-op by default); the console's
    progress bar shows the phase. Any callback with this method is called, in callback order."""

    def on_phase(self, trainer: Any, module: Any) -> None: ...


#: The key under which ``training_step`` and ``validation_step`` return their batch: under manual
#: optimization Lightning takes a step's ``outputs`` as a dict (or a tensor), and hands it to every
#: callback's ``on_train_batch_end`` / ``on_validation_batch_end``.
STEP_OUTPUT_KEY = "rollout"


def step_outputs(rollout: RolloutBatch) -> dict[str, RolloutBatch]:
    """A step's ``outputs``: its final batch (after advantages, masks and old log-probs when training)."""
    return {STEP_OUTPUT_KEY: rollout}


def rollout_of(outputs: Any) -> RolloutBatch | None:
    """The batch in a step's ``outputs`` (:func:`step_outputs`); None for another module's outputs."""
    return outputs.get(STEP_OUTPUT_KEY) if isinstance(outputs, dict) else None
