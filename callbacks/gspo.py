"""GSPO (Zheng et al. 2025): the sequence-level importance ratio, clipped per response."""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import override

from lite_ppo.ops.gspo import GSPO_CLIP_HIGH, GSPO_CLIP_LOW
from lite_ppo.technique import PolicyLossConfig, Technique


class GSPO(Technique):
    """Replaces the per-token clipped surrogate with GSPO's sequence-level objective.

    The importance ratio of response i is the geometric mean of its token ratios over its loss
    tokens, s_i = exp(mean_t(log pi_theta - log pi_old)), clipped to [1 - clip_low, 1 + clip_high]
    per response: a response whose ratio left the range on its advantage's side contributes no
    gradient at all (``lite_ppo.ops.gspo``). ``variant: token`` is GSPO-token: every token carries
    the value s_i but the gradient of its own log-prob, which equals GSPO with one advantage per
    response and lets per-token weights act per token.

    The paper averages over responses (1/G sum_i): use ``LossAggregation(mode=seq-mean-token-mean)``,
    as ``configs/recipes/gspo.yaml`` does (the module warns about another aggregation). The clip range
    is GSPO's own, much smaller than PPO's because s_i averages the token log-ratios; so GSPO does not
    combine with a technique that sets the PPO clip (``ClipHigher``): that is refused at fit start.

    Logged (per response, over the step's responses with loss tokens, all ranks):
    ``gspo/clip_fraction`` (share of responses clipped), ``gspo/clip_upper_of_positive``,
    ``gspo/clip_lower_of_negative`` and ``gspo/seq_ratio_abs_dev`` (mean |s_i - 1|). The module's
    token-level ``clip/*`` are PPO-clip statistics and are not logged under GSPO.

    Args:
        clip_low: the sequence ratio's floor is 1 - clip_low (paper: 3e-4).
        clip_high: its ceiling is 1 + clip_high (paper: 4e-4).
        variant: ``sequence`` (GSPO) or ``token`` (GSPO-token).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.GSPO
              init_args: {clip_low: 3.0e-4, clip_high: 4.0e-4, variant: sequence}
            - class_path: lite_ppo.callbacks.LossAggregation
              init_args: {mode: seq-mean-token-mean}
    """

    def __init__(
        self,
        clip_low: float = GSPO_CLIP_LOW,
        clip_high: float = GSPO_CLIP_HIGH,
        variant: Literal["sequence", "token"] = "sequence",
    ) -> None:
        if not 0 <= clip_low < 1:
            raise ValueError(f"GSPO.clip_low must be in [0, 1), got {clip_low}")
        if not clip_high >= 0:
            raise ValueError(f"GSPO.clip_high must be >= 0, got {clip_high}")
        if variant not in ("sequence", "token"):
            raise ValueError(f"GSPO.variant must be 'sequence' or 'token', got {variant!r}")
        self.clip_low = float(clip_low)
        self.clip_high = float(clip_high)
        self.variant = variant

    @override
    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        return {
            "objective": "gspo" if self.variant == "sequence" else "gspo_token",
            "objective_args": {"clip_low": self.clip_low, "clip_high": self.clip_high},
        }
