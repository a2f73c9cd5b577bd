"""The scalars of one training step, accumulated over micro-batches and reduced once over ranks."""

from __future__ import annotations

import math

import torch

from lite_ppo.strategies.ranks import Ranks


class StepMetrics:
    """Per-step scalars for the module and the techniques, with the reduction done once.

    Record as often as you like during the step (every micro-batch, every refill round); at the end
    of the step the module calls :meth:`compute`, which sums the numerators and denominators of
    every rank in one all-reduce and takes the extrema in one all-gather, then logs the values and
    starts the next step empty. So a technique never reduces anything itself, and a value is the
    same whether the step ran on one rank or on several.

    - ``mean(name, total, count)``: reported as ``sum(total) / sum(count)`` (a token-weighted mean
      when ``count`` counts tokens); 0 when the count is 0.
    - ``sum(name, value)``: reported as ``sum(value)``.
    - ``max`` / ``min``: the extremum; a step where no rank recorded a finite value reports nothing.

    Every rank must record the same names (the reduction is a collective); record an empty
    ``count`` of 0, or an infinite extremum, rather than skipping a name on one rank.

    Example (in a technique's ``extra_loss_terms``)::

        ctx.metrics.mean("kl/ref_kl", (kl.detach() * mask).sum(), mask.sum())
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._ratios: dict[str, tuple[str, str]] = {}
        self._maxima: dict[str, torch.Tensor] = {}

    def _add(self, key: str, value: torch.Tensor | float) -> None:
        value = torch.as_tensor(value).detach().to("cpu", torch.float64).reshape(())
        self._sums[key] = self._sums[key] + value if key in self._sums else value

    def mean(self, name: str, total: torch.Tensor | float, count: torch.Tensor | float) -> None:
        self._ratios[name] = (f"{name}#total", f"{name}#count")
        self._add(f"{name}#total", total)
        self._add(f"{name}#count", count)

    def sum(self, name: str, value: torch.Tensor | float) -> None:
        self._ratios.pop(name, None)
        self._add(name, value)

    def max(self, name: str, value: torch.Tensor | float) -> None:
        value = torch.as_tensor(value).detach().to("cpu", torch.float64).reshape(())
        self._maxima[name] = torch.maximum(self._maxima[name], value) if name in self._maxima else value

    def min(self, name: str, value: torch.Tensor | float) -> None:
        # Kept as a maximum of -value so that one gather serves both.
        self.max(f"{name}#neg", -torch.as_tensor(value, dtype=torch.float64))

    def compute(self, ranks: Ranks) -> dict[str, torch.Tensor]:
        """The step's values over all ranks (float32 scalars), and reset for the next step."""
        out: dict[str, torch.Tensor] = {}
        keys = sorted(self._sums)
        if keys:
            totals = dict(zip(keys, ranks.sum(torch.stack([self._sums[k] for k in keys]))))
            for name, (num, den) in self._ratios.items():
                out[name] = totals[num] / totals[den] if totals[den] != 0 else torch.zeros((), dtype=torch.float64)
            for key in keys:
                if "#" not in key:
                    out[key] = totals[key]
        names = sorted(self._maxima)
        if names:
            maxima = ranks.max(torch.stack([self._maxima[n] for n in names]))
            for name, value in zip(names, maxima):
                if math.isfinite(float(value)):
                    out[name.removesuffix("#neg")] = -value if name.endswith("#neg") else value
        self.reset()
        return {k: v.float() for k, v in sorted(out.items())}

    def reset(self) -> None:
        self._sums.clear()
        self._ratios.clear()
        self._maxima.clear()
