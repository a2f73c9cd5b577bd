"""Overlong filtering: truncated responses contribute nothing to the policy loss (docs/method.md, technique 4)."""

from __future__ import annotations

import torch
from typing_extensions import override

from lite_ppo.ops.overlong import mask_rows
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique


class OverlongFilter(Technique):
    """Zeroes the ``loss_mask`` rows of truncated responses (those that hit the generation limit
    without EOS), through the ``loss_mask`` hook, i.e. *after* the advantages are computed.

    Masking after the advantages matters: whatever reward and advantage a truncated response got,
    none of it reaches the loss, and the other responses' advantages are those of the estimator.
    Their tokens also leave the aggregation's denominator (token count or sequence count).

    Whether truncated responses still count in the group / batch *statistics* of the advantages is
    the estimator's option: ``AdvantageNormalization(count_truncated=false)`` leaves them out,
    the default keeps them (a truncated response then still pulls its group's mean down).

    Logs ``overlong_filter/masked_response_share`` and ``overlong_filter/masked_token_share``
    (shares of the step's responses / response tokens removed from the loss, all ranks).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.AdvantageNormalization
              init_args: {mean_scope: group, std_scope: batch}
            - class_path: lite_ppo.callbacks.OverlongFilter
    """

    @override
    def loss_mask(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        truncated = batch.truncated.bool()
        keep = mask_rows(torch.ones_like(batch.loss_mask), truncated)
        ctx.metrics.mean("overlong_filter/masked_response_share", truncated.sum(), truncated.numel())
        ctx.metrics.mean(
            "overlong_filter/masked_token_share", (batch.loss_mask * (1 - keep)).sum(), batch.response_mask.sum()
        )
        return keep
