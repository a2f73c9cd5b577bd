"""DAPO's soft overlong punishment: a linear reward penalty over a buffer before the max length."""

from __future__ import annotations

import math

import torch
from typing_extensions import override

from lite_ppo.ops.overlong import overlong_penalty
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique


class OverlongRewardShaping(Technique):
    """Adds ``factor * R_len(L)`` to every response's reward (the ``shape_rewards`` hook):

        R_len(L) = 0 for L <= L_max - L_buf,  (L_max - L_buf - L) / L_buf inside the buffer,  -1 for L > L_max

    (:func:`lite_ppo.ops.overlong.overlong_penalty`). With ``max_length`` null, L_max is the
    generation limit, so a truncated response has L = L_max and gets the full ``-factor``.
    The verifier's verdict stays in ``batch.correct``, so accuracy diagnostics and dynamic
    sampling (which judge correctness) are unaffected.

    Args:
        max_length: L_max in tokens; ``None`` takes the rollout's ``sampling.max_new_tokens``.
        buffer_length: L_buf in tokens; ``None`` uses ``buffer_fraction * max_length``.
        buffer_fraction: the buffer as a share of L_max when ``buffer_length`` is None
            (DAPO: 4096 of 20480 = 0.2).
        factor: penalty scale (DAPO: 1.0).

    Logs ``overlong_shaping/penalty_mean`` and ``overlong_shaping/penalized_share`` over every
    response generated for the step (all refill rounds of dynamic sampling included, all ranks).

    Example (DAPO)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.OverlongRewardShaping
              init_args: {buffer_length: 4096, factor: 1.0}
    """

    def __init__(
        self,
        max_length: int | None = None,
        buffer_length: int | None = None,
        buffer_fraction: float = 0.2,
        factor: float = 1.0,
    ) -> None:
        if max_length is not None and max_length < 1:
            raise ValueError(f"OverlongRewardShaping.max_length must be >= 1, got {max_length}")
        if buffer_length is not None and buffer_length < 1:
            raise ValueError(f"OverlongRewardShaping.buffer_length must be >= 1, got {buffer_length}")
        if not 0 < buffer_fraction <= 1:
            raise ValueError(f"OverlongRewardShaping.buffer_fraction must be in (0, 1], got {buffer_fraction}")
        if not 0 <= factor < math.inf:  # inf x a zero penalty is NaN: every reward would be NaN
            raise ValueError(f"OverlongRewardShaping.factor must be >= 0 and finite, got {factor}")
        self.max_length = max_length
        self.buffer_length = buffer_length
        self.buffer_fraction = buffer_fraction
        self.factor = factor
        self._max_new_tokens: int | None = None  # the rollout's, from configure_run

    def resolve(self, max_new_tokens: int | None) -> tuple[int, int]:
        """(L_max, L_buf): ``max_length``, else the rollout's ``max_new_tokens``."""
        max_length = self.max_length if self.max_length is not None else max_new_tokens
        if max_length is None:
            raise ValueError(
                "OverlongRewardShaping.max_length is null and the rollout source gives no max_new_tokens; "
                "set max_length"
            )
        buffer_length = (
            self.buffer_length if self.buffer_length is not None else max(1, round(self.buffer_fraction * max_length))
        )
        if buffer_length > max_length:
            raise ValueError(f"OverlongRewardShaping.buffer_length={buffer_length} exceeds the max length {max_length}")
        return max_length, buffer_length

    @override
    def configure_run(self, settings: RunSettings) -> None:
        self._max_new_tokens = settings.max_new_tokens
        self.resolve(self._max_new_tokens)  # fail at start, with the message, on an inconsistent configuration

    @override
    def shape_rewards(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        max_length, buffer_length = self.resolve(self._max_new_tokens)
        penalty = overlong_penalty(batch.response_lengths, max_length, buffer_length, self.factor).to(
            batch.rewards.device
        )
        ctx.metrics.mean("overlong_shaping/penalty_mean", penalty.sum(), penalty.numel())
        ctx.metrics.mean("overlong_shaping/penalized_share", (penalty < 0).sum(), penalty.numel())
        return penalty.to(batch.rewards.dtype)
