"""CISPO (MiniMax-M1, 2025): clip the importance-sampling weight, keep every token's gradient."""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from lite_ppo.ops.cispo import CISPO_EPS_HIGH_IS
from lite_ppo.technique import PolicyLossConfig, Technique


class CISPO(Technique):
    """Replaces the clipped surrogate with CISPO's REINFORCE-style loss
    ``-sg(clip(r, 1 - eps_low_is, 1 + eps_high_is)) * A * log pi_theta`` (``lite_ppo.ops.cispo``).

    PPO's clip gives a token whose ratio crossed the bound no gradient; CISPO bounds only the
    token's importance weight (a constant, stop-gradient), so every token keeps its gradient
    ``-w * A * grad log pi_theta``. MiniMax-M1 sets no floor on the weight and tunes only the cap.
    The paper aggregates over tokens (1 / sum_i |o_i|): ``LossAggregation(mode=token-mean)``, as in
    ``configs/recipes/cispo.yaml``. The PPO clip (``ClipHigher``) does not apply and is refused at fit start.

    Logged (over the step's loss tokens, all ranks): ``cispo/clipped_fraction`` (share of tokens
    whose weight was clipped; they keep their gradient) and ``cispo/weight_mean`` (mean weight).
    ``loss/policy`` is the value of the CISPO loss, -w * A * log pi, not a surrogate near -A.

    Args:
        eps_high_is: the weight's cap is 1 + eps_high_is (default 4: a cap of 5, TRL's recommendation).
        eps_low_is: the weight's floor is 1 - eps_low_is; ``null`` (default): no floor, as in MiniMax-M1.

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.CISPO
              init_args: {eps_high_is: 4.0, eps_low_is: null}
            - class_path: lite_ppo.callbacks.LossAggregation
              init_args: {mode: token-mean}
    """

    def __init__(self, eps_high_is: float = CISPO_EPS_HIGH_IS, eps_low_is: float | None = None) -> None:
        if not eps_high_is >= 0:
            raise ValueError(f"CISPO.eps_high_is must be >= 0, got {eps_high_is}")
        if eps_low_is is not None and not 0 <= eps_low_is <= 1:
            raise ValueError(f"CISPO.eps_low_is must be in [0, 1] (or null for no floor), got {eps_low_is}")
        self.eps_high_is = float(eps_high_is)
        self.eps_low_is = None if eps_low_is is None else float(eps_low_is)

    @override
    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        return {
            "objective": "cispo",
            "objective_args": {"eps_low_is": self.eps_low_is, "eps_high_is": self.eps_high_is},
        }
