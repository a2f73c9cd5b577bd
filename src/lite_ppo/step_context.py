"""What every per-step technique hook receives first: one :class:`StepContext` per training step.

Every RL hook has the shape ``hook(self, ctx, batch)`` (``extra_loss_terms`` gets the micro-batch,
``on_update_end`` also the step's ``UpdateStats``): the step's scalars, the ranks, the policy's scoring
and a reference model's loading are all reached through ``ctx``, never through the module's other
members. Example, a technique that records the share of responses that hit the token limit::

    class TruncationShare(Technique):
        @override
        def on_rollout(self, ctx: StepContext, batch: RolloutBatch) -> None:
            ctx.metrics.mean("truncation/share", batch.truncated.float().sum(), batch.num_responses)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from lite_ppo.policy_module import PolicyModule
    from lite_ppo.rollout.settings import RunSettings
    from lite_ppo.step_metrics import StepMetrics
    from lite_ppo.strategies.ranks import Ranks
    from lite_ppo.technique import Technique


@dataclass(frozen=True)
class StepContext:
    """One training step's context, handed to every per-step hook.

    - ``trainer``: the Lightning ``Trainer`` (``global_step``, ``current_epoch``).
    - ``module``: the training module, of which a technique uses only what
      :class:`~lite_ppo.policy_module.PolicyModule` declares (scoring responses with the policy or a
      model laid out like it, loading a frozen reference model, the tokenizer).
    - ``metrics``: this step's :class:`~lite_ppo.step_metrics.StepMetrics`: record scalars with
      ``.mean``/``.sum``/``.max``/``.min``; the module reduces them over micro-batches and ranks once
      and logs them at the end of the step.
    - ``settings``: the run's resolved rollout settings (sampling, generation budget, engine), the
      same object ``configure_run`` received; None in a run without a rollout callback (a test's
      fixed batches).
    - ``techniques``: the run's techniques in callback order, found once at setup: the hooks the
      rollout source calls in stage 1 (``shape_rewards``, ``on_rollout``, ``keep_groups``) and the
      module in the later stages.
    """

    trainer: Any
    module: PolicyModule
    metrics: StepMetrics
    settings: RunSettings | None = None
    techniques: tuple[Technique, ...] = ()

    @property
    def ranks(self) -> Ranks:
        """Sums, gathers and means over the data-parallel ranks (single-process: the values themselves)."""
        from lite_ppo.strategies.ranks import Ranks

        return Ranks(self.trainer)

    @property
    def rank(self) -> int:
        """This process's global rank (0 in a single-process run)."""
        return int(getattr(self.trainer, "global_rank", 0) or 0)

    @property
    def world_size(self) -> int:
        """How many processes share the step's batch (1 in a single-process run)."""
        return int(getattr(self.trainer, "world_size", 1) or 1)

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (Lightning's ``trainer.global_step``)."""
        return int(getattr(self.trainer, "global_step", 0) or 0)
