"""Tier mixture weights over batch indices, with an optional curriculum schedule."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from lite_ppo.errors import UserError


def validate_weights(weights: Mapping[str, float], tiers: Sequence[str], where: str) -> dict[str, float]:
    """Check a ``{tier: weight}`` mapping and return it over all ``tiers`` (missing tiers weigh 0).

    Raises :class:`~lite_ppo.errors.UserError` naming ``where`` when a tier is unknown, a weight is negative or not a
    finite number, or every weight is zero.

    Example:
        >>> validate_weights({"easy": 1}, ["easy", "hard"], "weights")
        {'easy': 1.0, 'hard': 0.0}
    """
    if not isinstance(weights, Mapping):
        raise UserError(f"{where}: expected a mapping {{tier: weight}}, got {type(weights).__name__}")
    known = ", ".join(tiers)
    for tier, weight in weights.items():
        if tier not in tiers:
            raise UserError(f"{where}: unknown tier {tier!r}; the tiers defined in sources are: {known}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise UserError(f"{where}: weight of tier {tier!r} must be a finite number, got {weight!r}")
        if weight < 0:
            raise UserError(f"{where}: weight of tier {tier!r} is negative ({weight}); weights must be >= 0")
    if not any(weight > 0 for weight in weights.values()):
        raise UserError(f"{where}: all tier weights are zero; give at least one of {known} a positive weight")
    return {tier: float(weights.get(tier, 0.0)) for tier in tiers}


class TierMixture:
    """Which tier each prompt of batch ``k`` comes from.

    The weights at batch index ``k`` are those of the last schedule entry whose ``step <= k``, or
    ``weights`` before the first entry. Weights need not sum to 1 (they are relative). Batch
    indices count rollout steps (batches of prompts), not optimizer steps.

    Args:
        tiers: every tier name the sources define.
        weights: the starting ``{tier: weight}``.
        schedule: curriculum entries ``{"step": int >= 0, "weights": {tier: weight}}``, any order,
            distinct steps.

    Example:
        >>> m = TierMixture(["easy", "hard"], {"easy": 1.0}, [{"step": 10, "weights": {"easy": 1, "hard": 3}}])
        >>> m.weights_at(9)
        {'easy': 1.0, 'hard': 0.0}
        >>> m.weights_at(10)
        {'easy': 1.0, 'hard': 3.0}
    """

    def __init__(
        self, tiers: Sequence[str], weights: Mapping[str, float], schedule: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        if not tiers:
            raise UserError("sources: define at least one tier")
        self.tiers = tuple(tiers)
        self.base = validate_weights(weights, self.tiers, "weights")
        entries: list[tuple[int, dict[str, float]]] = []
        for position, entry in enumerate(schedule or []):
            where = f"schedule[{position}]"
            if not isinstance(entry, Mapping) or set(entry) != {"step", "weights"}:
                raise UserError(f"{where}: expected {{'step': int, 'weights': {{tier: weight}}}}, got {entry!r}")
            step = entry["step"]
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise UserError(f"{where}: 'step' must be an integer >= 0, got {step!r}")
            entries.append((step, validate_weights(entry["weights"], self.tiers, f"{where}.weights")))
        entries.sort(key=lambda item: item[0])
        for (step, _), (next_step, _) in zip(entries, entries[1:]):
            if step == next_step:
                raise UserError(f"schedule: two entries have step {step}; steps must be distinct")
        self.schedule = tuple(entries)

    def weights_at(self, k: int) -> dict[str, float]:
        """The ``{tier: weight}`` in force at batch index ``k``."""
        current = self.base
        for step, weights in self.schedule:
            if step > k:
                break
            current = weights
        return dict(current)

    def draw(self, rng: random.Random, k: int, n: int) -> list[str]:
        """Draw the tiers of the ``n`` prompts of batch ``k`` independently from its weights.

        A zero-weight tier is never drawn (``random.choices`` gives it an empty interval).
        """
        weights = self.weights_at(k)
        return rng.choices(self.tiers, weights=[weights[tier] for tier in self.tiers], k=n)
