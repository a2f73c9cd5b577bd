"""Paper-style comparison figures: one panel per quantity over training steps, per group of seeds
a mean line with a min–max (or ±std) band, one colour per recipe in every panel.

The look follows the training-curve figures of Liu et al., "Tricks or Traps? A Deep Dive into RL
for LLM Reasoning" (arXiv 2508.08221): thin mean lines over steps, shaded spread across seeds, light
grid, legend naming the recipes. Runs of different lengths are averaged over the runs that reached
each step (the band narrows to the surviving runs); a group that never logged a quantity has no
line in its panel, and a quantity no group logged has no panel.

Example:
    >>> paths = plot_comparison(groups, tables, quantities, Path("cmp"))  # doctest: +SKIP
    >>> [p.name for p in paths]                                            # doctest: +SKIP
    ['overview.png', 'reward_accuracy.png', ...]
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")  # files only; no display on clusters or CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from lite_ppo.research.quantities import Quantity  # noqa: E402
from lite_ppo.research.runs import RunGroup  # noqa: E402
from lite_ppo.research.scalars import ScalarTable, Series  # noqa: E402

__all__ = ["OVERVIEW_FILE", "aggregate", "plot_comparison", "recipe_colours"]

OVERVIEW_FILE = "overview.png"
_LINESTYLES = ("-", "--", ":", "-.")
Band = Literal["minmax", "std"]


def recipe_colours(groups: list[RunGroup]) -> dict[str, str]:
    """One colour per recipe (sorted by name), the same in every panel and figure of a comparison."""
    palette = plt.get_cmap("tab10").colors
    recipes = sorted({g.recipe for g in groups})
    return {r: matplotlib.colors.to_hex(palette[i % len(palette)]) for i, r in enumerate(recipes)}


def aggregate(series: list[Series], band: Band = "minmax") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over the union of steps: (steps, mean, low, high) across the runs that logged each step;
    the band is min–max, or mean ± sample std (zero width where one run remains)."""
    steps = np.unique(np.concatenate([s.steps for s in series]))
    grid = np.full((len(series), steps.size), np.nan)
    for i, s in enumerate(series):
        grid[i, np.searchsorted(steps, s.steps)] = s.values
    present = np.isfinite(grid)
    count = present.sum(axis=0)
    mean = np.where(count > 0, np.nansum(grid, axis=0) / np.maximum(count, 1), np.nan)
    if band == "std":
        sq = np.nansum((grid - mean) ** 2, axis=0)
        std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), 0.0)
        return steps, mean, mean - std, mean + std
    filled_low = np.where(present, grid, np.inf).min(axis=0)
    filled_high = np.where(present, grid, -np.inf).max(axis=0)
    return steps, mean, filled_low, filled_high


def _draw(
    ax, quantity: Quantity, groups: list[RunGroup], tables: dict[Path, ScalarTable], colours: dict[str, str], band: Band
) -> bool:
    """Draw one panel; False when no group logged the quantity."""
    drawn = False
    styles: dict[str, int] = {}
    scale = 100.0 if quantity.share else 1.0
    for group in groups:
        series = [
            t.finite()
            for t in (tables[r.path].get(quantity.tag) for r in group.runs)
            if t is not None and len(t.finite())
        ]
        style = _LINESTYLES[styles.setdefault(group.recipe, 0) % len(_LINESTYLES)]
        styles[group.recipe] += 1
        if not series:
            continue
        steps, mean, low, high = aggregate(series, band)
        colour = colours[group.recipe]
        label = f"{group.label} (n={len(series)})"
        if steps.size == 1:
            ax.errorbar(
                steps,
                mean * scale,
                yerr=[[(mean - low)[0] * scale], [(high - mean)[0] * scale]],
                fmt="o",
                color=colour,
                label=label,
                capsize=3,
            )
        else:
            ax.plot(steps, mean * scale, color=colour, linestyle=style, linewidth=1.6, label=label)
            if len(series) > 1:
                ax.fill_between(steps, low * scale, high * scale, color=colour, alpha=0.2, linewidth=0)
        drawn = True
    if drawn:
        ax.set_title(quantity.title, fontsize=10)
        ax.set_xlabel("training step (rollout batches)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(quantity.axis_label)
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.tick_params(labelsize=8)
    return drawn


def plot_comparison(
    groups: list[RunGroup],
    tables: dict[Path, ScalarTable],
    quantities: list[Quantity],
    out_dir: Path,
    band: Band = "minmax",
    dpi: int = 120,
) -> list[Path]:
    """Write ``overview.png`` (all panels) and one ``<tag>.png`` per quantity that some group logged;
    return the written paths (overview first)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    colours = recipe_colours(groups)
    present = [
        q
        for q in quantities
        if any(q.tag in tables[r.path] and len(tables[r.path][q.tag].finite()) for g in groups for r in g.runs)
    ]
    written: list[Path] = []
    if not present:
        return written
    band_text = "min–max" if band == "minmax" else "±1 std"
    cols = min(4, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows + 0.8), squeeze=False)
    for ax, quantity in zip(axes.flat, present):
        _draw(ax, quantity, groups, tables, colours, band)
    for ax in list(axes.flat)[len(present) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat:  # the first panel may lack a group; collect every group's entry once
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=8, frameon=False)
    fig.suptitle(f"Mean over seeds, shaded: {band_text}", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * math.ceil(len(labels) / 4), 1, 0.97))
    overview = out_dir / OVERVIEW_FILE
    fig.savefig(overview, dpi=dpi)
    plt.close(fig)
    written.append(overview)
    for quantity in present:
        fig, ax = plt.subplots(figsize=(5.0, 3.6))
        _draw(ax, quantity, groups, tables, colours, band)
        ax.legend(fontsize=7, frameon=False)
        fig.tight_layout()
        path = out_dir / f"{quantity.slug}.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        written.append(path)
    return written
