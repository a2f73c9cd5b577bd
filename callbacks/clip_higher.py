"""Clip-Higher (DAPO): a wider upper clip bound, optionally with dual clip (docs/method.md, technique 2)."""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from lite_ppo.technique import PolicyLossConfig, Technique


class ClipHigher(Technique):
    """Sets the clip range of the surrogate to [1 - eps_low, 1 + eps_high].

    Raising ``eps_high`` above ``eps_low`` lets low-probability tokens with positive advantage grow
    further in one update (more exploration). It only changes the objective when ratios actually
    cross the upper bound: watch ``clip/upper_of_positive`` (share of A > 0 tokens clipped at
    1 + eps_high); the paper saw about 0.003 on base models, where Clip-Higher did not help.
    With ``eps_high == eps_low`` this is exactly the symmetric PPO clip.

    Args:
        eps_low: lower clip, ratio floor 1 - eps_low for A < 0 (DAPO: 0.2). ``None`` (default): the
            module's ``model.clip_eps``, the one source of the lower clip; a value that differs
            from it is refused at fit start.
        eps_high: upper clip, ratio ceiling 1 + eps_high for A > 0 (DAPO: 0.28; the paper sweeps 0.20-0.32).
        dual_clip: constant c > 1 bounding the loss of negative-advantage tokens by c * |A| however
            large the ratio grows (Ye et al. 2020), or ``None`` (off, the default). Logged as ``clip/dual_of_negative``.

    Example (DAPO)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.ClipHigher
              init_args: {eps_low: 0.2, eps_high: 0.28}
    """

    def __init__(self, eps_low: float | None = None, eps_high: float = 0.28, dual_clip: float | None = None) -> None:
        if eps_low is not None and not 0 <= eps_low < 1:
            raise ValueError(f"ClipHigher.eps_low must be in [0, 1), got {eps_low}")
        if not eps_high >= 0:  # NaN too (inf is no upper clip at all, which is well defined)
            raise ValueError(f"ClipHigher.eps_high must be >= 0, got {eps_high}")
        if dual_clip is not None and not dual_clip > 1:
            raise ValueError(f"ClipHigher.dual_clip must be > 1 (or null), got {dual_clip}")
        self.eps_low = eps_low
        self.eps_high = eps_high
        self.dual_clip = dual_clip

    @override
    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        fields: dict[str, Any] = {"clip_high": self.eps_high}
        if self.eps_low is not None:
            fields["clip_low"] = self.eps_low
        if self.dual_clip is not None:
            fields["dual_clip"] = self.dual_clip
        return fields
