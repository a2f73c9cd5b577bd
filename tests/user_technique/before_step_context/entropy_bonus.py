"""The user's entropy bonus as CONTRIBUTING.md wrote it before hooks took a ``StepContext``
(``extra_loss_terms(self, trainer, module, ctx)``), kept verbatim: such a technique still runs, through
an adapter, with one deprecation line (tests/test_user_technique.py)."""

from __future__ import annotations

import torch
from typing_extensions import override

from lite_ppo.technique import MiniBatchContext, Technique


class EntropyBonus(Technique):
    """Rewards entropy: adds ``-coef * H_t`` per response token to the loss, H_t the entropy of the
    policy's (temperature-scaled) next-token distribution. Minimising the loss then raises entropy.

    The module aggregates the term exactly like the policy loss (token- or sequence-level) and logs
    it as ``loss/entropy_bonus``; this callback records ``entropy_bonus/entropy`` (token mean over the
    step's loss tokens, all ranks) in the step's metrics, which the module reduces and logs, and ``entropy_bonus/coef``.

    Args:
        coef: weight of the bonus (0 disables it).

    Example::

        trainer:
          callbacks:
            - class_path: entropy_bonus.EntropyBonus
              init_args: {coef: 0.001}
    """

    def __init__(self, coef: float = 1e-3) -> None:
        if coef < 0:
            raise ValueError(f"EntropyBonus.coef must be >= 0, got {coef}")
        self.coef = coef

    @override
    def extra_loss_terms(self, trainer, module, ctx: MiniBatchContext) -> dict[str, torch.Tensor]:
        entropy = ctx.entropy  # [b, R], carries gradients
        mask = ctx.batch.loss_mask
        ctx.metrics.mean("entropy_bonus/entropy", (entropy.detach() * mask).sum(), mask.sum())
        ctx.metrics.mean("entropy_bonus/coef", self.coef, 1)
        return {"entropy_bonus": -self.coef * entropy}
