"""Entropy bonus and its adaptive coefficient; docs/method.md, "Entropy bonus".

The per-token term added to the loss (minimizing it raises the entropy; PPO's entropy bonus,
Schulman et al. 2017, eq. 9, with the sign of a loss):

    l^H_{i,t} = -c * H_{i,t},   H_{i,t} = -sum_v pi(v | x, o_{i,<t}) log pi(v | x, o_{i,<t})

Adaptive coefficient (a target entropy H* in nats per token, as Skywork-OR1's adaptive entropy
control, He et al. 2025, arXiv 2505.22312): after each training step, with H the step's mean entropy
over its loss tokens, c moves one step towards raising H when H < H* and towards lowering it when
H > H*, and stays in [c_min, c_max]:

    additive        c <- clip(c + delta * s, c_min, c_max)
    multiplicative  c <- clip(c * (1 + delta) ** s, c_min, c_max),   s = sign(H* - H) in {-1, 0, +1}
"""

from __future__ import annotations

import math

import torch

RULES = ("additive", "multiplicative")


def entropy_bonus(entropy: torch.Tensor, coef: float) -> torch.Tensor:
    """The per-token loss term -c * H [b, R] (gradient -c with respect to H)."""
    return -coef * entropy


def next_entropy_coef(
    coef: float, entropy: float, target: float, rule: str, rate: float, min_coef: float, max_coef: float
) -> float:
    """The coefficient of the next step from this step's mean ``entropy`` (see the module docstring).

    Example:
        >>> next_entropy_coef(0.01, entropy=0.5, target=1.0, rule="additive", rate=0.005, min_coef=0, max_coef=1)
        0.015
    """
    if rule not in RULES:
        raise ValueError(f"unknown entropy coefficient rule {rule!r}; choose one of {RULES}")
    if not math.isfinite(entropy):  # a skipped or empty step says nothing about the entropy
        return coef
    direction = (target > entropy) - (target < entropy)
    moved = coef + rate * direction if rule == "additive" else coef * (1 + rate) ** direction
    return min(max(moved, min_coef), max_coef)
