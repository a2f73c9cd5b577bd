"""Loss aggregation: token level, sequence level or seq-mean-token-sum (docs/method.md, technique 3)."""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import override

from lite_ppo.technique import PolicyLossConfig, Technique


class LossAggregation(Technique):
    """Chooses how per-token losses become the scalar loss of an optimizer step.

    - ``token-mean``: sum over all loss tokens / their count (Lite PPO, DAPO; helps base models).
    - ``seq-mean-token-mean``: mean over responses of each response's token mean (GRPO).
    - ``seq-mean-token-sum``: mean over responses of each response's token sum (Dr. GRPO).

    Denominators are global: all ranks and all micro-batches of the optimizer step.

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.LossAggregation
              init_args: {mode: token-mean}
    """

    def __init__(self, mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean") -> None:
        self.mode = mode

    @override
    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        return {"aggregation": self.mode}
