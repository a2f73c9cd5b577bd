"""Overlong filtering: truncated responses contribute nothing to the policy loss (docs/method.md, technique 4)."""

from __future__ import annotations

import torch

from lite_ppo.hooks import Technique
from lite_ppo.ops.overlong import mask_rows
from lite_ppo.rollout.batch import RolloutBatch


class OverlongFilter(Technique):
    """Zeroes the ``loss_mask`` rows of truncated responses (those that hit the generation limit
    without EOS), in ``on_advantages``, i.e. *after* the advantages are computed.

    Masking after the advantages matters: whatever reward and advantage a truncated response got,
    none of it reaches the loss, and the other responses' advantages are those of the estimator.
    Their tokens also leave the aggregation's denominator (token count or sequence count).

    Whether truncated responses still count in the group / batch *statistics* of the advantages is
    the estimator's option: ``AdvantageNormalization(count_truncated=false)`` leaves them out,
    the default keeps them (a truncated response then still pulls its group's mean down).

    Logs ``overlong_filter/masked_response_share`` and ``overlong_filter/masked_token_share``
    (shares of this rank's responses / response tokens removed from the loss).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.AdvantageNormalization
              init_args: {mean_scope: group, std_scope: batch}
            - class_path: lite_ppo.callbacks.OverlongFilter
    """

    def on_advantages(self, trainer, module, batch: RolloutBatch) -> None:
        truncated = batch.truncated.bool()
        before = batch.loss_mask.sum()
        batch.loss_mask = mask_rows(batch.loss_mask, truncated)
        n_tokens = batch.response_mask.sum().clamp(min=1)
        module.log_dict(
            {
                "overlong_filter/masked_response_share": truncated.float().mean() if truncated.numel() else torch.zeros(()),
                "overlong_filter/masked_token_share": (before - batch.loss_mask.sum()).float() / n_tokens,
            },
            on_step=True,
            on_epoch=False,
            batch_size=max(batch.num_responses, 1),
        )
