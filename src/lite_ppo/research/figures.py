"""Paper-style comparison figures: one panel per quantity over training steps (or over the compute
spent: cumulative generated tokens or training seconds), per group of seeds a mean line with a band
(95 % confidence interval of the mean by default, or min–max, or ±std), each group in a style of its own
(:func:`group_styles`: its own colour up to ten groups, then colours x line styles, never two groups alike)
and the same in every panel. The legend sits below the panels, inside the image, however long the labels.

The look follows the training-curve figures of Liu et al., "Tricks or Traps? A Deep Dive into RL
for LLM Reasoning" (arXiv 2508.08221): thin mean lines, shaded spread across seeds, light grid,
legend naming the recipes. Runs of different lengths are averaged over the runs that reached each
step (the band narrows to the surviving runs); a group that never logged a quantity has no line in
its panel, and a quantity no group logged has no panel.

Aggregation is per step: at each step, the mean over the seeds that logged it, drawn at the seeds'
mean x (the same step, or their mean compute at that step). Held-out accuracies, logged only at
validations, are points with vertical error bars (the band's interval) and, on a compute axis,
horizontal bars spanning the seeds' x; every panel spans the whole run (0 to the largest x), so an
evaluation after training sits at the end of the axis, not alone in the middle of it.

Example:
    >>> paths = plot_comparison(groups, tables, quantities, Path("cmp"))  # doctest: +SKIP
    >>> [p.name for p in paths]                                            # doctest: +SKIP
    ['overview.png', 'reward_accuracy.png', ...]
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")  # files only; no display on clusters or CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from scipy import stats  # noqa: E402

from lite_ppo.reliability.checkpoint_io import atomic_write_bytes  # noqa: E402
from lite_ppo.research.compute_axis import AXES, Axis, x_at  # noqa: E402
from lite_ppo.research.quantities import Quantity  # noqa: E402
from lite_ppo.research.runs import RunGroup  # noqa: E402
from lite_ppo.research.scalars import ScalarTable, Series  # noqa: E402
from lite_ppo.research.stats import CONFIDENCE  # noqa: E402

__all__ = ["BAND_TEXT", "OVERVIEW_FILE", "GroupStyle", "aggregate", "aggregate_xy", "group_styles", "plot_comparison"]

OVERVIEW_FILE = "overview.png"
_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D")  # with the line style: single evaluation points (no line) stay apart too
Band = Literal["ci", "minmax", "std"]
BAND_TEXT = {"ci": f"{CONFIDENCE:.0%} CI of the mean (t)", "minmax": "min–max", "std": "±1 std"}


@dataclass(frozen=True)
class GroupStyle:
    """How one group is drawn in every panel."""

    colour: tuple[float, float, float, float]  # RGBA
    linestyle: str
    marker: str


def group_styles(groups: list[RunGroup]) -> list[GroupStyle]:
    """A style per group, in the groups' order (sorted by label, so a recipe's variants sit together), no
    two with the same colour and line style: up to 10 groups a colour each (tab10), solid; up to 40 the
    ten colours again with the next line style (and marker); past that ``ceil(n / 4)`` hues spread evenly
    around the colour wheel, each with the four line styles. (One colour per recipe drew five variants of
    one recipe in one colour, and with four line styles the fifth like the first.)"""
    n = len(groups)
    palette = [matplotlib.colors.to_rgba(c) for c in plt.get_cmap("tab10").colors]
    if n > len(palette) * len(_LINESTYLES):
        hues = math.ceil(n / len(_LINESTYLES))
        palette = [matplotlib.colors.to_rgba(matplotlib.colors.hsv_to_rgb((h / hues, 0.8, 0.85))) for h in range(hues)]
    return [
        GroupStyle(palette[i % len(palette)], _LINESTYLES[i // len(palette)], _MARKERS[i // len(palette)])
        for i in range(n)
    ]


def _grid(series: list[Series], steps: np.ndarray, values: list[np.ndarray]) -> np.ndarray:
    """Runs x steps, NaN where a run did not log a step."""
    grid = np.full((len(series), steps.size), np.nan)
    for i, (s, v) in enumerate(zip(series, values)):
        grid[i, np.searchsorted(steps, s.steps)] = v
    return grid


def _band(grid: np.ndarray, band: Band) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column (step): mean over the runs present, and the band's low and high."""
    present = np.isfinite(grid)
    count = present.sum(axis=0)
    mean = np.where(count > 0, np.nansum(grid, axis=0) / np.maximum(count, 1), np.nan)
    if band == "minmax":
        return mean, np.where(present, grid, np.inf).min(axis=0), np.where(present, grid, -np.inf).max(axis=0)
    sq = np.nansum((grid - mean) ** 2, axis=0)
    std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), 0.0)
    if band == "std":
        return mean, mean - std, mean + std
    # ci: mean ± t(1 - (1 - c) / 2, n - 1) · s / √n, the interval of lite_ppo.research.stats.mean_ci
    t = stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(count - 1, 1))
    half = np.where(count > 1, t * std / np.sqrt(np.maximum(count, 1)), 0.0)
    return mean, mean - half, mean + half


def aggregate(series: list[Series], band: Band = "minmax") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over the union of steps: (steps, mean, low, high) across the runs that logged each step;
    the band is min–max, mean ± sample std, or the 95 % t-interval of the mean (zero width where one
    run remains)."""
    steps = np.unique(np.concatenate([s.steps for s in series]))
    mean, low, high = _band(_grid(series, steps, [s.values for s in series]), band)
    return steps, mean, low, high


def aggregate_xy(
    series: list[Series], xs: list[np.ndarray], band: Band = "ci"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Like :func:`aggregate`, with each run's x per logged step (``xs``): (x mean, x min, x max, mean,
    low, high) per step, over the runs that logged it; steps with no finite x are left out."""
    steps = np.unique(np.concatenate([s.steps for s in series]))
    grid = _grid(series, steps, [s.values for s in series])
    xgrid = _grid(series, steps, xs)
    grid[~np.isfinite(xgrid)] = np.nan  # a point past the run's compute record has no x
    xgrid[~np.isfinite(grid)] = np.nan
    keep = np.isfinite(grid).any(axis=0)
    grid, xgrid = grid[:, keep], xgrid[:, keep]
    mean, low, high = _band(grid, band)
    x_mean, x_low, x_high = _band(xgrid, "minmax")
    return x_mean, x_low, x_high, mean, low, high


def _draw(
    ax,
    quantity: Quantity,
    groups: list[RunGroup],
    tables: dict[Path, ScalarTable],
    styles: list[GroupStyle],
    band: Band,
    axis: Axis,
    cums: dict[Path, np.ndarray | None],
) -> bool:
    """Draw one panel; False when no group logged the quantity."""
    drawn = False
    scale = 100.0 if quantity.share else 1.0
    for group, style in zip(groups, styles):
        logged = [(r.path, tables[r.path].get(quantity.tag)) for r in group.runs]
        logged = [(path, s.finite()) for path, s in logged if s is not None and len(s.finite())]
        if not logged:
            continue
        series = [s for _, s in logged]
        xs = [x_at(s.steps, cums.get(path)) for path, s in logged]
        x, x_low, x_high, mean, low, high = aggregate_xy(series, xs, band)
        if not x.size:
            continue
        # A t-interval from few seeds can reach past what the quantity can be (accuracy below 0 % or
        # above 100 %, negative lengths): the band is cut at the quantity's range (the caption says so).
        floor, ceiling = quantity.value_range
        low = np.clip(low, floor, ceiling) if floor is not None or ceiling is not None else low
        high = np.clip(high, floor, ceiling) if floor is not None or ceiling is not None else high
        label = f"{group.label} (n={len(series)})"
        if quantity.evaluation or x.size == 1:
            xerr = [x - x_low, x_high - x] if axis.per_step_tag is not None and np.any(x_high > x_low) else None
            ax.errorbar(
                x,
                mean * scale,
                yerr=[(mean - low) * scale, (high - mean) * scale],
                xerr=xerr,
                marker=style.marker,
                markersize=4,
                linestyle=style.linestyle if x.size > 1 else "none",
                linewidth=0.9,
                color=style.colour,
                label=label,
                capsize=3,
            )
        else:
            ax.plot(x, mean * scale, color=style.colour, linestyle=style.linestyle, linewidth=1.6, label=label)
            if len(series) > 1:
                ax.fill_between(x, low * scale, high * scale, color=style.colour, alpha=0.2, linewidth=0)
        drawn = True
    if drawn:
        ax.set_title(quantity.title, fontsize=10)
        ax.set_xlabel(axis.label)
        if axis.per_step_tag is None:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(quantity.axis_label)
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.tick_params(labelsize=8)
    return drawn


def _x_range(groups: list[RunGroup], tables: dict[Path, ScalarTable], quantities: list[Quantity], cums) -> float:
    """The largest x any drawn point has (every panel spans 0 to it)."""
    top = 0.0
    for group in groups:
        for run in group.runs:
            for q in quantities:
                s = tables[run.path].get(q.tag)
                if s is not None and len(s.finite()):
                    x = x_at(s.finite().steps, cums.get(run.path))
                    if np.isfinite(x).any():
                        top = max(top, float(np.nanmax(x)))
    return top


def _span_axis(ax, top: float) -> None:
    if top > 0:
        margin = 0.03 * top
        ax.set_xlim(-margin, top + margin)


def plot_comparison(
    groups: list[RunGroup],
    tables: dict[Path, ScalarTable],
    quantities: list[Quantity],
    out_dir: Path,
    band: Band = "ci",
    dpi: int = 120,
    axis: Axis = AXES["step"],
    cums: dict[Path, np.ndarray | None] | None = None,
) -> list[Path]:
    """Write ``overview.png`` (all panels) and one ``<tag>.png`` per quantity that some group logged;
    return the written paths (overview first). ``cums``: each run's cumulative compute per step
    (:func:`lite_ppo.research.compute_axis.cumulative`), needed for a compute ``axis``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cums = cums or {}
    styles = group_styles(groups)
    present = [
        q
        for q in quantities
        if any(q.tag in tables[r.path] and len(tables[r.path][q.tag].finite()) for g in groups for r in g.runs)
    ]
    written: list[Path] = []
    if not present:
        return written
    top = _x_range(groups, tables, present, cums)
    cols = min(4, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows + 0.4), squeeze=False, layout="constrained")
    for ax, quantity in zip(axes.flat, present):
        if _draw(ax, quantity, groups, tables, styles, band, axis, cums):
            _span_axis(ax, top)
    for ax in list(axes.flat)[len(present) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat:  # the first panel may lack a group; collect every group's entry once
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    # wrap: one panel is narrower than the caption
    fig.suptitle(
        f"Mean over seeds, shaded / bars: {BAND_TEXT[band]}, cut at each quantity's range", fontsize=10, wrap=True
    )
    _legend_below(fig, handles, labels, fontsize=8)
    overview = out_dir / OVERVIEW_FILE
    _save(fig, overview, dpi)
    written.append(overview)
    for quantity in present:
        fig, ax = plt.subplots(figsize=(5.0, 3.6), layout="constrained")
        _draw(ax, quantity, groups, tables, styles, band, axis, cums)
        _span_axis(ax, top)
        _legend_below(fig, *ax.get_legend_handles_labels(), fontsize=7)  # below: inside, it hid the curves
        path = out_dir / f"{quantity.slug}.png"
        _save(fig, path, dpi)
        written.append(path)
    return written


def _legend_below(fig, handles: list, labels: list[str], fontsize: float) -> None:
    """The legend under the panels, inside the image: in as many columns (up to four) as fit the figure's
    width, the figure widened where even one column is wider, and made taller by the legend's height so
    the panels keep theirs (the constrained layout places it). A legend placed in a figure of fixed size
    ran past both edges with long group labels, and one inside the axes hid the curves."""
    if not labels:
        return
    renderer = fig.canvas.get_renderer()
    for ncol in range(min(4, len(labels)), 0, -1):
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=fontsize, frameon=False)
        box = legend.get_window_extent(renderer)
        if box.width <= 0.95 * fig.bbox.width or ncol == 1:
            break
        legend.remove()
    width, height = fig.get_size_inches()
    fig.set_size_inches(max(width, box.width / fig.dpi + 0.4), height + box.height / fig.dpi)


def _save(fig, path: Path, dpi: int) -> None:
    """Render to memory, then replace ``path`` whole: a kill mid-write leaves the earlier figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
