"""Numbers behind the figures: per group of seeds, each quantity's final and best value as
mean ± std over seeds (with n), and how fast training reward got to 50 % / 90 % of its final value.

Definitions (per run, then aggregated over the group's runs that logged the quantity):

- final: the last logged value (runs of different length each contribute their own last step);
- best: the max over steps, or the min for quantities where lower is better (truncation rate);
- std: the sample standard deviation over runs (ddof = 1); null with a single run;
- milestone ``reward_50``/``reward_90``: the first step at which training accuracy reached 50 % /
  90 % of that run's final value; runs whose final accuracy is 0 have none.

Example:
    >>> summary = summarize(groups, tables)        # doctest: +SKIP
    >>> summary["groups"][0]["quantities"]["reward/accuracy"]["final"]  # doctest: +SKIP
    {'mean': 0.41, 'std': 0.03, 'n': 3}
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from lite_ppo.metric_names import REWARD_ACCURACY
from lite_ppo.research.quantities import Quantity
from lite_ppo.research.runs import RunGroup
from lite_ppo.research.scalars import ScalarTable, Series

__all__ = ["MILESTONES", "first_step_reaching", "mean_std", "summarize", "summary_markdown"]

MILESTONES = (0.5, 0.9)


def mean_std(values: list[float]) -> dict[str, Any]:
    """``{"mean", "std", "n"}``; std is the sample std (ddof=1), None for fewer than two values."""
    n = len(values)
    if n == 0:
        return {"mean": None, "std": None, "n": 0}
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if n > 1 else None, "n": n}


def first_step_reaching(series: Series, fraction: float) -> int | None:
    """The first step whose value is >= ``fraction`` x the final value (None when the final is <= 0)."""
    series = series.finite()
    if not len(series) or series.last() <= 0:
        return None
    hit = np.flatnonzero(series.values >= fraction * series.last())
    return int(series.steps[hit[0]])


def summarize(groups: list[RunGroup], tables: dict[Path, ScalarTable], quantities: list[Quantity]) -> dict[str, Any]:
    """The ``summary.json`` content for ``groups`` (``tables`` maps each run's path to its scalars)."""
    out_groups = []
    for group in groups:
        entry: dict[str, Any] = {
            "label": group.label,
            "recipe": group.recipe,
            "seeds": group.seeds,
            "runs": [str(r.path) for r in group.runs],
            "status": [r.status for r in group.runs],
            "quantities": {},
        }
        for quantity in quantities:
            series = [
                s for s in (tables[r.path].get(quantity.tag) for r in group.runs) if s is not None and len(s.finite())
            ]
            if not series:
                continue  # not logged by this group (e.g. no clip-higher curve): no row
            series = [s.finite() for s in series]
            pick = np.min if quantity.best_rule == "min" else np.max
            entry["quantities"][quantity.tag] = {
                "title": quantity.title,
                "final": mean_std([s.last() for s in series]),
                "best": mean_std([float(pick(s.values)) for s in series]),
                "best_rule": quantity.best_rule,
                "final_step": mean_std([float(s.steps[-1]) for s in series]),
            }
        milestones = {}
        reward = [tables[r.path].get(REWARD_ACCURACY) for r in group.runs]
        reward = [s for s in reward if s is not None]
        for fraction in MILESTONES:
            steps = [first_step_reaching(s, fraction) for s in reward]
            milestones[f"reward_{round(fraction * 100)}"] = mean_std([float(s) for s in steps if s is not None])
        entry["milestones"] = milestones
        out_groups.append(entry)
    return {
        "groups": out_groups,
        "quantities": {q.tag: {"title": q.title, "unit": q.unit, "share": q.share} for q in quantities},
    }


def _fmt(stat: dict[str, Any]) -> str:
    if stat["mean"] is None:
        return "–"
    mean = stat["mean"]
    text = f"{mean:.4g}"
    if stat["std"] is not None and not math.isnan(stat["std"]):
        text += f" ± {stat['std']:.2g}"
    return text + f" (n={stat['n']})"


def summary_markdown(summary: dict[str, Any]) -> str:
    """``summary.md``: one table per quantity (rows: groups), then the reward milestones."""
    lines = ["# Run comparison", "", "Mean ± sample std over seeds (n = runs that logged the quantity).", ""]
    lines += ["| group | seeds | runs |", "|---|---|---|"]
    for g in summary["groups"]:
        lines.append(f"| {g['label']} | {', '.join(str(s) for s in g['seeds'])} | {len(g['runs'])} |")
    for tag, meta in summary["quantities"].items():
        rows = [(g["label"], g["quantities"][tag]) for g in summary["groups"] if tag in g["quantities"]]
        if not rows:
            continue
        lines += ["", f"## {meta['title']} (`{tag}`, {'share' if meta['share'] else meta['unit']})", ""]
        lines += ["| group | final | best | best is | last step |", "|---|---|---|---|---|"]
        for label, q in rows:
            lines.append(
                f"| {label} | {_fmt(q['final'])} | {_fmt(q['best'])} | {q['best_rule']} | {_fmt(q['final_step'])} |"
            )
    lines += [
        "",
        f"## Steps until training accuracy (`{REWARD_ACCURACY}`) first reached 50 % / 90 % of its final value",
        "",
    ]
    lines += ["| group | 50 % | 90 % |", "|---|---|---|"]
    for g in summary["groups"]:
        lines.append(f"| {g['label']} | {_fmt(g['milestones']['reward_50'])} | {_fmt(g['milestones']['reward_90'])} |")
    return "\n".join(lines) + "\n"
