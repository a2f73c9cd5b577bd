"""Entropy bonus with a constant or an adaptive coefficient (docs/method.md, "Entropy bonus")."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.errors import UserError
from lite_ppo.ops.entropy_bonus import RULES, entropy_bonus, next_entropy_coef
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import MiniBatchContext, Technique, UpdateStats

DEFAULT_RATES = {"additive": 1e-4, "multiplicative": 0.05}


class EntropyBonus(Technique):
    """Adds ``-c * H_t`` per response token to the loss (``extra_loss_terms``), H_t the policy's
    entropy at the sampling temperature, with gradient; the module aggregates it like the surrogate
    (the configured aggregation, global denominators) and logs it as ``loss/entropy_bonus``.

    With ``target_entropy`` null, c is ``coef`` throughout. With a target, c starts at ``coef`` and
    after every training step moves by one step of ``rule`` towards the target: up when the step's
    ``policy/entropy`` (its loss tokens' mean, the same on every rank) is below the target, down when
    above, never leaving [``min_coef``, ``max_coef``] (:func:`lite_ppo.ops.entropy_bonus.next_entropy_coef`).
    The current c is saved in checkpoints and restored on resume.

    Args:
        coef: c, or its starting value (>= 0; > 0 for the multiplicative rule).
        target_entropy: H* in nats per token, or null for a constant coefficient.
        rule: ``additive`` (c +/- rate) or ``multiplicative`` (c x (1 + rate) up, / (1 + rate) down).
        rate: the step; null: 1e-4 (additive) or 0.05 (multiplicative).
        min_coef, max_coef: the bounds of an adaptive c.

    Logs ``entropy_bonus/coef``: the c this step's loss used.

    Example (entropy held near 0.3 nats/token)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.EntropyBonus
              init_args: {coef: 0.001, target_entropy: 0.3, rule: additive, rate: 0.0005, max_coef: 0.01}
    """

    def __init__(
        self,
        coef: float = 1e-3,
        target_entropy: float | None = None,
        rule: Literal["additive", "multiplicative"] = "additive",
        rate: float | None = None,
        min_coef: float = 0.0,
        max_coef: float = 1e-2,
    ) -> None:
        if rule not in RULES:
            raise UserError(f"EntropyBonus.rule={rule!r}: choose additive or multiplicative")
        rate = DEFAULT_RATES[rule] if rate is None else rate
        if not 0 <= coef < math.inf:
            raise UserError(f"EntropyBonus.coef={coef}: must be >= 0 and finite")
        if target_entropy is not None:
            if not 0 < target_entropy < math.inf:
                raise UserError(f"EntropyBonus.target_entropy={target_entropy}: must be > 0 nats per token, or null")
            if not 0 < rate < math.inf:
                raise UserError(f"EntropyBonus.rate={rate}: must be > 0 and finite")
            if not 0 <= min_coef <= coef <= max_coef < math.inf:
                raise UserError(
                    f"EntropyBonus: need 0 <= min_coef <= coef <= max_coef, got {min_coef}, {coef}, {max_coef}"
                )
            if rule == "multiplicative" and coef == 0:
                raise UserError("EntropyBonus.coef=0 with rule multiplicative would never move: start above 0")
        self.initial_coef = coef
        self.target_entropy = target_entropy
        self.rule = rule
        self.rate = rate
        self.min_coef = min_coef
        self.max_coef = max_coef
        self.coef = coef  # the coefficient of the next step

    @property
    def adaptive(self) -> bool:
        return self.target_entropy is not None

    @override
    def extra_loss_terms(self, ctx: StepContext, minibatch: MiniBatchContext) -> dict[str, torch.Tensor]:
        if minibatch.entropy is None:
            raise RuntimeError("EntropyBonus needs the entropy of the policy (MiniBatchContext.entropy)")
        # Recorded as an extremum: the one value of the step, exactly, whatever the number of micro-batches.
        ctx.metrics.max(names.ENTROPY_BONUS_COEF, self.coef)
        return {"entropy_bonus": entropy_bonus(minibatch.entropy, self.coef)}

    @override
    def on_update_end(self, ctx: StepContext, batch: RolloutBatch, stats: UpdateStats) -> None:
        if self.adaptive:
            self.coef = next_entropy_coef(
                self.coef, stats.entropy, self.target_entropy, self.rule, self.rate, self.min_coef, self.max_coef
            )

    # -- checkpoints: the adaptive coefficient survives a resume ------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A constant coefficient is a setting: the resumed run's own value applies. An adaptive one is
        # state: continue from where the run was, inside the (possibly changed) bounds.
        if self.adaptive and "coef" in state_dict:
            self.coef = min(max(float(state_dict["coef"]), self.min_coef), self.max_coef)
