"""Factorial ablations: main effects and interactions of the factors of a ``lite-ppo sweep --factor`` grid.

A sweep with factors (``norm={group_std,batch_std} x agg={token,seq}``) writes each run's cell and the
design into its ``run.json`` (``cell``, ``factors``); :func:`find_designs` collects the groups of one
design, :func:`effects` estimates, from one value per run (the held-out score):

- the main effect of a factor's level: the level minus the factor's reference level (its first),
  averaged over every combination of the other factors' levels;
- the interaction of two factors' levels: the difference of differences
  ``(y[a, b] - y[ref, b]) - (y[a, ref] - y[ref, ref])``, averaged over the remaining factors;
- the simple effect of a factor's level at each combination of the other factors' levels: the level minus
  the reference in that combination alone (Clip-Higher on the aligned init, and on the base init), what a
  claim of the form "helps here, not there" is about.

Each contrast is computed within a seed (a sweep runs every cell with the same seeds, so a seed's data
order and sampling are shared across cells and cancel in the contrast), then its mean over the seeds is
given with a t-interval and a one-sample t-test against 0 (:func:`lite_ppo.research.stats.contrast_ci`).
Only seeds that finished in every cell enter; interactions of three or more factors are not reported.

Example:
    >>> values = {("g", "t"): {0: 0.40, 1: 0.44}, ("b", "t"): {0: 0.50, 1: 0.52},
    ...           ("g", "s"): {0: 0.38, 1: 0.40}, ("b", "s"): {0: 0.42, 1: 0.46}}
    >>> result = effects(values, {"norm": ["g", "b"], "agg": ["t", "s"]})
    >>> round(result["main_effects"][0]["estimate"], 3)   # batch - group std, over both aggregations
    0.07
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lite_ppo.research.runs import RunGroup
from lite_ppo.research.stats import contrast_ci, mean_ci

__all__ = ["Design", "effects", "find_designs"]

Cell = tuple[str, ...]


@dataclass
class Design:
    """The groups of one factorial design: ``factors`` (name -> levels, reference first) and one group per cell."""

    base: str  # what the cells share (recipe/model; the cells' labels joined by " | " when a factor sets the model)
    factors: dict[str, list[str]]
    cells: dict[Cell, RunGroup] = field(default_factory=dict)

    def cell_name(self, cell: Cell) -> dict[str, str]:
        return dict(zip(self.factors, cell))


def find_designs(groups: list[RunGroup]) -> tuple[list[Design], list[str]]:
    """The factorial designs among ``groups`` (runs whose ``run.json`` names a cell) and notes on
    designs that cannot be analysed (a cell missing, or two groups in one cell)."""
    designs: dict[str, Design] = {}
    notes: list[str] = []
    clashes: set[str] = set()
    for group in groups:
        run = group.runs[0]
        if not run.cell:
            continue
        factors = run.factors or {name: [] for name in run.cell}
        # A sweep's design is its recipe and its factors; a factor may change the model (init=base,aligned),
        # so the cells of one design can have different recipe/model labels.
        key = json.dumps([run.recipe if run.factors else group.base_label, sorted(factors)])
        design = designs.setdefault(key, Design(group.base_label, {name: list(v) for name, v in factors.items()}))
        if group.base_label not in design.base.split(" | "):
            design.base = f"{design.base} | {group.base_label}"
        for name, level in run.cell.items():  # levels seen but not in the recorded design go last
            if name in design.factors and level not in design.factors[name]:
                design.factors[name].append(level)
        cell = tuple(str(run.cell.get(name)) for name in design.factors)
        if cell in design.cells:
            clashes.add(key)
            notes.append(
                f"{group.base_label}: cell {design.cell_name(cell)} holds two groups ({design.cells[cell].label}, "
                f"{group.label}): another setting varies too; compare them separately"
            )
        design.cells[cell] = group
    complete = []
    for key, design in designs.items():
        missing = [c for c in itertools.product(*design.factors.values()) if c not in design.cells]
        if key in clashes:
            continue
        if missing:
            notes.append(
                f"{design.base}: no finished runs in cell(s) "
                + "; ".join(str(design.cell_name(c)) for c in missing)
                + ": no factorial effects"
            )
            continue
        complete.append(design)
    return complete, notes


def effects(values: dict[Cell, dict[int, float]], factors: dict[str, list[str]]) -> dict[str, Any]:
    """Main effects, two-factor interactions and simple effects from ``values`` (cell -> seed -> value; cells as
    level tuples in ``factors`` order) over the seeds present in every cell."""
    names = list(factors)
    grid = list(itertools.product(*factors.values()))
    all_seeds = sorted({s for cell in grid for s in values.get(cell, {})})
    seeds = [s for s in all_seeds if all(s in values.get(cell, {}) for cell in grid)]
    out: dict[str, Any] = {
        "seeds": seeds,
        "seeds_left_out": [s for s in all_seeds if s not in seeds],
        "cells": [],
        "main_effects": [],
        "interactions": [],
        "simple_effects": [],
    }
    if not seeds:
        return out
    y = {cell: np.array([values[cell][s] for s in seeds], dtype=np.float64) for cell in grid}
    for cell in grid:
        out["cells"].append({"cell": dict(zip(names, cell)), **mean_ci(y[cell])})

    def at(fixed: dict[int, str], rest: Cell, free: list[int]) -> np.ndarray:
        """The per-seed values of the cell with ``fixed`` levels and ``rest`` for the ``free`` factors."""
        levels = dict(fixed) | dict(zip(free, rest))
        return y[tuple(levels[i] for i in range(len(names)))]

    for i, name in enumerate(names):
        ref = factors[name][0]
        free = [j for j in range(len(names)) if j != i]
        combos = list(itertools.product(*(factors[names[j]] for j in free)))
        for level in factors[name][1:]:
            per_seed = np.mean([at({i: level}, c, free) - at({i: ref}, c, free) for c in combos], axis=0)
            out["main_effects"].append(
                {
                    "factor": name,
                    "level": level,
                    "reference": ref,
                    **contrast_ci(per_seed),
                    "per_seed": per_seed.tolist(),
                }
            )
            if len(names) < 2:
                continue  # with one factor the simple effect is the main effect
            for c in combos:
                simple = at({i: level}, c, free) - at({i: ref}, c, free)
                out["simple_effects"].append(
                    {
                        "factor": name,
                        "level": level,
                        "reference": ref,
                        "at": {names[j]: lv for j, lv in zip(free, c)},
                        **contrast_ci(simple),
                        "per_seed": simple.tolist(),
                    }
                )
    for i, j in itertools.combinations(range(len(names)), 2):
        ref_i, ref_j = factors[names[i]][0], factors[names[j]][0]
        free = [k for k in range(len(names)) if k not in (i, j)]
        combos = list(itertools.product(*(factors[names[k]] for k in free)))
        for a, b in itertools.product(factors[names[i]][1:], factors[names[j]][1:]):
            per_seed = np.mean(
                [
                    (at({i: a, j: b}, c, free) - at({i: ref_i, j: b}, c, free))
                    - (at({i: a, j: ref_j}, c, free) - at({i: ref_i, j: ref_j}, c, free))
                    for c in combos
                ],
                axis=0,
            )
            out["interactions"].append(
                {
                    "factors": [names[i], names[j]],
                    "levels": [a, b],
                    "references": [ref_i, ref_j],
                    **contrast_ci(per_seed),
                    "per_seed": per_seed.tolist(),
                }
            )
    return out
