"""The technique study's figures and table (docs/techniques.md): each technique's recipe against Lite PPO
on the testbed, the same seeds.

Reads a sweep folder (``lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml configs/recipes/gspo.yaml ...``),
writes one PNG per technique into ``--out`` (its own mechanical scalar, the policy entropy and the response
length over training steps; mean over seeds with the 95 % t-interval band, Lite PPO dashed) and prints two
markdown tables: the held-out accuracy (pooled tiers, last evaluation) with the paired difference to Lite
PPO by seed (t-interval and p of the per-seed differences, ``lite_ppo.research.stats.contrast_ci``), and each
technique's mechanical quantity (its mean over steps and seeds).

    .venv/bin/python benchmarks/technique_figures.py runs/techniques --out docs/techniques
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lite_ppo import metric_names as names  # noqa: E402
from lite_ppo.research.runs import find_runs  # noqa: E402
from lite_ppo.research.scalars import read_scalars  # noqa: E402
from lite_ppo.research.scores import POOLED_VAL, score_series  # noqa: E402
from lite_ppo.research.stats import contrast_ci, mean_ci  # noqa: E402

BASELINE = "lite_ppo"
# recipe -> (what it claims to do mechanically, the scalar that shows it, Lite PPO's counterpart or None)
MECHANISMS = {
    "gspo": ("clips whole responses by their sequence ratio", names.GSPO_CLIP_FRACTION, names.CLIP_FRACTION),
    "cispo": ("clips the importance weight, every token keeps its gradient", names.CISPO_CLIPPED_FRACTION, None),
    "sapo": ("a soft gate scales the gradient instead of a hard clip", names.SAPO_GRAD_SCALE_NEGATIVE, None),
    "dr_grpo": ("no std scaling, a constant token-sum normalizer", names.RESPONSE_LENGTH, names.RESPONSE_LENGTH),
    "reinforce_pp": ("whitens the return over the global batch", "reinforce_pp/return_std", None),
    "reinforce_pp_baseline": ("group baseline, then global whitening", "reinforce_pp/return_std", None),
    "lite_ppo_high_entropy": (
        "gradient only on the top 20 % tokens by entropy",
        names.HIGH_ENTROPY_SELECTED_SHARE,
        None,
    ),
    "lite_ppo_entropy_bonus": ("entropy coefficient steered toward a target", names.ENTROPY_BONUS_COEF, None),
    "lite_ppo_clip_cov": ("detaches high-covariance tokens from the gradient", names.CLIP_COV_DETACHED_SHARE, None),
    "lite_ppo_kl_cov": ("KL penalty on the highest-covariance tokens", names.KL_COV_SELECTED_SHARE, None),
}
PANELS = (names.ENTROPY, names.RESPONSE_LENGTH)


def collect(folder: str) -> tuple[dict[str, dict[int, dict]], dict[str, dict[int, float]]]:
    """Per recipe and seed: the scalar table and the held-out score at the last evaluation."""
    tables: dict[str, dict[int, dict]] = defaultdict(dict)
    scores: dict[str, dict[int, float]] = defaultdict(dict)
    for run in find_runs([folder]):
        if (run.record or {}).get("status") != "finished":
            continue  # a run still going (or failed) would compare fewer steps
        seed = int((run.record or {}).get("seed", 0))
        table = read_scalars(run.path)
        tables[run.recipe][seed] = table
        held_out = score_series(table, POOLED_VAL)
        if held_out is not None:
            scores[run.recipe][seed] = float(held_out.values[-1])
    return tables, scores


def band(tables: dict[int, dict], tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean over seeds and the 95 % t-interval half-width at each step (seeds that logged the tag)."""
    series = [t[tag] for t in tables.values() if tag in t]
    if not series:
        return None
    steps = sorted(set.intersection(*(set(s.steps.tolist()) for s in series)))
    rows = np.array([[dict(zip(s.steps.tolist(), s.values.tolist()))[x] for x in steps] for s in series])
    means, lows, highs = [], [], []
    for column in rows.T:
        summary = mean_ci(column)
        means.append(summary["mean"])
        low, high = summary["ci"] or (summary["mean"], summary["mean"])
        lows.append(low)
        highs.append(high)
    return np.array(steps), np.array(means), np.array([lows, highs])


def plot(recipe: str, tables: dict[str, dict[int, dict]], out: Path) -> None:
    claim, own, counterpart = MECHANISMS[recipe]
    tags = [own, *[t for t in PANELS if t != own]]
    fig, axes = plt.subplots(1, len(tags), figsize=(4.2 * len(tags), 3.2))
    for ax, tag in zip(axes, tags):
        for name, style in ((recipe, "-"), (BASELINE, "--")):
            baseline_tag = counterpart if (tag == own and name == BASELINE) else tag
            if baseline_tag is None:
                continue
            drawn = band(tables[name], baseline_tag)
            if drawn is None:
                continue
            steps, mean, (low, high) = drawn
            label = name if baseline_tag == tag else f"{name} ({baseline_tag})"
            ax.plot(steps, mean, style, label=label)
            ax.fill_between(steps, low, high, alpha=0.2)
        ax.set_title(tag, fontsize=9)
        ax.set_xlabel("training step")
        ax.legend(fontsize=7)
    seeds = len(tables[recipe])
    fig.suptitle(f"{recipe}: {claim} (testbed-base, {seeds} seeds, 95 % CI)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{recipe}.png", dpi=110)
    plt.close(fig)


def run_means(tables: dict[int, dict], tag: str) -> list[float]:
    """Each seed's mean of ``tag`` over its training steps."""
    return [float(np.mean(t[tag].values)) for t in tables.values() if tag in t]


def fmt(summary: dict, digits: int = 3) -> str:
    if summary.get("ci") is None:
        return f"{summary['mean']:.{digits}f}"
    low, high = summary["ci"]
    return f"{summary['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the sweep folder of the technique study")
    parser.add_argument("--out", required=True, help="folder for one PNG per technique")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables, scores = collect(args.folder)
    recipes = [r for r in MECHANISMS if r in tables]
    base = scores[BASELINE]
    print("| recipe | seeds | held-out accuracy | minus Lite PPO (paired by seed) | p |")
    print("|---|---|---|---|---|")
    print(f"| {BASELINE} | {len(base)} | {fmt(mean_ci(list(base.values())))} | | |")
    for recipe in recipes:
        seeds = sorted(set(scores[recipe]) & set(base))
        diff = contrast_ci([scores[recipe][s] - base[s] for s in seeds])
        ci = f"[{diff['ci'][0]:+.3f}, {diff['ci'][1]:+.3f}]" if diff["ci"] else ""
        p = f"{diff['p']:.2f}" if diff["p"] is not None else "-"
        held_out = fmt(mean_ci([scores[recipe][s] for s in seeds]))
        print(f"| {recipe} | {len(seeds)} | {held_out} | {diff['estimate']:+.3f} {ci} | {p} |")
    print("\n| recipe | claim | scalar | mean over steps and seeds | Lite PPO | entropy | response length |")
    print("|---|---|---|---|---|---|---|")
    for recipe in recipes:
        claim, own, counterpart = MECHANISMS[recipe]
        baseline = fmt(mean_ci(run_means(tables[BASELINE], counterpart)), 4) if counterpart else "-"
        cells = [fmt(mean_ci(run_means(tables[recipe], tag)), 4) for tag in (own, *PANELS)]
        print(f"| {recipe} | {claim} | `{own}` | {cells[0]} | {baseline} | {cells[1]} | {cells[2]} |")
        plot(recipe, tables, out)
    lite = [fmt(mean_ci(run_means(tables[BASELINE], tag)), 4) for tag in PANELS]
    print(f"| {BASELINE} | | | | | {lite[0]} | {lite[1]} |")
    print(f"\nwrote {len(recipes)} figures to {out}")


if __name__ == "__main__":
    main()
