"""An entropy bonus as a user's own technique: it lives in the user's file, outside the lite_ppo
package, and is enabled by ``class_path`` in YAML (CONTRIBUTING.md, "Write a new technique as a callback" walks through it)."""

from __future__ import annotations

import torch

from lite_ppo.hooks import MiniBatchContext, Technique
from lite_ppo.ops import entropy_from_logits


class EntropyBonus(Technique):
    """Rewards entropy: adds ``-coef * H_t`` per response token to the loss, H_t the entropy of the
    policy's (temperature-scaled) next-token distribution. Minimising the loss then raises entropy.

    The module aggregates the term exactly like the policy loss (token- or sequence-level) and logs
    it as ``loss/entropy_bonus``; this callback logs ``entropy_bonus/entropy`` (token mean over the
    step's loss tokens on this rank) and ``entropy_bonus/coef``.

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
        self._entropy_sum = 0.0
        self._tokens = 0.0

    def extra_loss_terms(self, trainer, module, ctx: MiniBatchContext) -> dict[str, torch.Tensor]:
        entropy = entropy_from_logits(ctx.logits)  # [b, R], carries gradients
        mask = ctx.batch.loss_mask
        self._entropy_sum += float((entropy.detach() * mask).sum())
        self._tokens += float(mask.sum())
        return {"entropy_bonus": -self.coef * entropy}

    def on_update_end(self, trainer, module, batch, stats) -> None:
        # (On several ranks, sum the two counters over ranks first, as lite_ppo.callbacks.KLPenalty does.)
        mean_entropy = self._entropy_sum / max(self._tokens, 1.0)
        self._entropy_sum, self._tokens = 0.0, 0.0
        module.log_dict(
            {"entropy_bonus/entropy": torch.tensor(mean_entropy), "entropy_bonus/coef": torch.tensor(self.coef)},
            on_step=True,
            on_epoch=False,
            batch_size=batch.num_responses,
        )
