"""SAPO (Gao et al. 2025): a soft, temperature-controlled gate in place of the hard clip."""

from __future__ import annotations

import math
from typing import Any

from typing_extensions import override

from lite_ppo.ops.sapo import SAPO_TAU_NEG, SAPO_TAU_POS
from lite_ppo.technique import PolicyLossConfig, Technique


class SAPO(Technique):
    """Replaces the clipped surrogate with SAPO's gated loss ``-f(r; tau) * A``, where
    ``f(r; tau) = sigmoid(tau (r - 1)) * 4 / tau`` and tau is ``tau_pos`` for A > 0 tokens and
    ``tau_neg`` for the others (``lite_ppo.ops.sapo``).

    On-policy (r = 1) a token's gradient is the plain policy gradient; as its ratio moves away the
    gate fades it smoothly (by the slope 4 sigmoid (1 - sigmoid)) instead of cutting it at a bound,
    faster for a larger temperature; ``tau_neg > tau_pos`` damps negative updates more. verl and TRL
    aggregate it per response (1/G sum_i 1/|y_i| sum_t): ``LossAggregation(mode=seq-mean-token-mean)``,
    as in ``configs/recipes/sapo.yaml``. The PPO clip (``ClipHigher``) does not apply and is refused at fit start.

    Logged (over the step's loss tokens, all ranks): ``sapo/grad_scale_of_positive`` and
    ``sapo/grad_scale_of_negative``, the mean share of the plain policy gradient the gate keeps on
    A > 0 and A < 0 tokens (1 = on-policy). ``loss/policy`` is the gated loss, -2A/tau at r = 1.

    Args:
        tau_pos: the gate's temperature for A > 0 tokens (> 0; default 1.0).
        tau_neg: for A <= 0 tokens (> 0; default 1.05).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.SAPO
              init_args: {tau_pos: 1.0, tau_neg: 1.05}
            - class_path: lite_ppo.callbacks.LossAggregation
              init_args: {mode: seq-mean-token-mean}
    """

    def __init__(self, tau_pos: float = SAPO_TAU_POS, tau_neg: float = SAPO_TAU_NEG) -> None:
        for name, tau in (("tau_pos", tau_pos), ("tau_neg", tau_neg)):
            if not 0 < tau < math.inf:
                raise ValueError(f"SAPO.{name} must be > 0, got {tau} (a finite number)")
        self.tau_pos = float(tau_pos)
        self.tau_neg = float(tau_neg)

    @override
    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        return {"objective": "sapo", "objective_args": {"tau_pos": self.tau_pos, "tau_neg": self.tau_neg}}
