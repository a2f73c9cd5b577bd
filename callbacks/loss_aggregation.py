"""Loss aggregation: token level, sequence level, sequence sum, or Dr. GRPO's constant normalizer
(docs/method.md, technique 3 and "Dr. GRPO")."""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import override

from lite_ppo.errors import UserError
from lite_ppo.ops.aggregation import MODES
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.technique import PolicyLossConfig, Technique


class LossAggregation(Technique):
    """Chooses how per-token losses become the scalar loss of an optimizer step
    (:mod:`lite_ppo.ops.aggregation` has the equations):

    - ``token-mean``: sum over all loss tokens / their count (Lite PPO, DAPO; helps base models).
    - ``seq-mean-token-mean``: mean over responses of each response's token mean (GRPO).
    - ``seq-mean-token-sum``: sum of every response's token sum / the number of responses.
    - ``seq-mean-token-sum-norm``: sum of every response's token sum / (number of responses x
      ``generation_budget``), a constant: Dr. GRPO's normalizer (Liu et al. 2025), which no response
      length changes.

    Denominators are global: all ranks and all micro-batches of the optimizer step.

    Args:
        mode: one of the four above.
        generation_budget: L_max of ``seq-mean-token-sum-norm`` in tokens; None takes the rollout's
            ``sampling.max_new_tokens`` at fit start (Dr. GRPO divides by the generation budget). Only
            for that mode.

    Example (Dr. GRPO)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.LossAggregation
              init_args: {mode: seq-mean-token-sum-norm}   # generation_budget: rollout max_new_tokens
    """

    def __init__(
        self,
        mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
            "token-mean"
        ),
        generation_budget: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise UserError(f"LossAggregation.mode={mode!r}: choose one of {', '.join(MODES)}")
        if generation_budget is not None and mode != "seq-mean-token-sum-norm":
            raise UserError(
                f"LossAggregation.generation_budget={generation_budget} is only used by mode "
                f"seq-mean-token-sum-norm (mode is {mode}); leave it null"
            )
        if generation_budget is not None and generation_budget < 1:
            raise UserError(f"LossAggregation.generation_budget={generation_budget}: must be >= 1 tokens, or null")
        self.mode = mode
        self.generation_budget = generation_budget
        self._budget: int | None = generation_budget

    @override
    def configure_run(self, settings: RunSettings) -> None:
        # L_max: generation_budget, or the rollout's max_new_tokens (before the module's
        # on_fit_start, which calls configure_loss).
        if self.generation_budget is None:
            self._budget = settings.max_new_tokens

    @override
    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        if self.mode != "seq-mean-token-sum-norm":
            return {"aggregation": self.mode}
        if self._budget is None:
            raise UserError(
                "LossAggregation(mode=seq-mean-token-sum-norm): generation_budget is null and the rollout "
                "source gives no max_new_tokens; set generation_budget"
            )
        return {"aggregation": self.mode, "generation_budget": self._budget}
