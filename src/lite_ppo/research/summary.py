"""Numbers behind the figures: per group of seeds, each quantity's final and best value as mean with
its 95 % confidence interval over seeds, the compute the runs spent, the held-out score under a
checkpoint rule with every pair of groups compared, and the effects of a factorial sweep.

Definitions (per run, then aggregated over the group's runs that logged the quantity):

- final: the last logged value (runs of different length each contribute their own last step);
- best: the max over steps, or the min for quantities where lower is better (truncation rate): a
  description of the curve; for held-out accuracies it is selected and reported on the same problems
  (optimistic), which the score section below avoids;
- mean ± std (sample std, ddof = 1) and the 95 % CI of the mean, a t-interval over seeds
  (:func:`lite_ppo.research.stats.mean_ci`); std and CI are null with a single run;
- compute: generated tokens (sum of ``response/generated_tokens``) and training seconds (sum of
  ``time/step_s``) per run;
- score: the held-out score under the checkpoint rule (:mod:`lite_ppo.research.scores`); for each
  pair of groups the difference of their mean final and best scores, with Welch's CI and p-value
  (:func:`lite_ppo.research.stats.welch_difference`);
- factorial: main effects and interactions of a sweep's factors on the score of the checkpoint rule
  (:mod:`lite_ppo.research.factorial`), or on the final training accuracy when no held-out score was logged;
- power: every pair and factorial effect gets ``mde``, the minimum detectable effect at 80 % power and
  α = 0.05 (:mod:`lite_ppo.research.power`), and ``verdict``, one sentence ("detected: ..." or "not detected:
  no effect larger than ..."); a pair whose runs all wrote per-problem held-out results
  (:mod:`lite_ppo.research.problem_results`) also gets ``paired``, a two-level bootstrap over seeds and
  problems paired by problem (:mod:`lite_ppo.research.bootstrap`), with its own MDE and verdict, on the
  problems the score is the accuracy of (every held-out tier for ``val/*/accuracy``, one tier for
  ``val/<tier>/accuracy``; none for another score, e.g. a benchmark's); below
  :data:`~lite_ppo.research.bootstrap.BOOTSTRAP_CALIBRATED_SEEDS` seeds per cell its verdict gives the interval
  only (``calibrated`` false), no "detected" and no "no effect larger than";
- primary verdict: every verdict has a ``role``, ``primary`` or ``secondary``, and its ``method``, one primary
  per contrast (:data:`PRIMARY_RULE`): a pair's Welch test under the checkpoint rule, unless the pair is two
  cells of a factorial design that differ in one factor, whose effect (per-seed contrasts) is then primary
  (the pair's ``primary`` names it); the other checkpoint's Welch test and the bootstrap are secondary;
- milestone ``reward_50``/``reward_90``: the first step at which training accuracy reached 50 % /
  90 % of that run's final value; runs whose final accuracy is 0 have none.

Example:
    >>> summary = summarize(groups, tables, quantities)        # doctest: +SKIP
    >>> summary["groups"][0]["quantities"]["reward/accuracy"]["final"]  # doctest: +SKIP
    {'mean': 0.41, 'std': 0.03, 'n': 3, 'ci': [0.34, 0.48]}
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from lite_ppo import metric_names as names
from lite_ppo.metric_names import REWARD_ACCURACY
from lite_ppo.research.bootstrap import BOOTSTRAP_CALIBRATED_SEEDS, paired_bootstrap
from lite_ppo.research.factorial import effects, find_designs
from lite_ppo.research.power import POWER_METHOD, mde_contrast, mde_normal, mde_two_groups, pooled_sd, verdict
from lite_ppo.research.problem_results import correctness_matrix, read_problem_results
from lite_ppo.research.quantities import Quantity
from lite_ppo.research.run_health import LEFT_OUT_RULE
from lite_ppo.research.run_set import Counted, RunSet, counted_runs
from lite_ppo.research.runs import Run, RunGroup
from lite_ppo.research.scalars import ScalarTable, Series
from lite_ppo.research.scores import CheckpointRule, run_scores, val_tier
from lite_ppo.research.stats import CONFIDENCE, mean_ci, welch_difference

__all__ = [
    "CONTRAST_METHOD",
    "MILESTONES",
    "PRIMARY_RULE",
    "WELCH_METHOD",
    "first_step_reaching",
    "summarize",
    "summary_markdown",
    "verdict_lines",
]

MILESTONES = (0.5, 0.9)
CI_METHOD = (
    f"{CONFIDENCE:.0%} confidence intervals: the mean over seeds ± t(n-1) · s/√n (scipy.stats t-interval); "
    "differences of two groups: Welch's t-test and its Welch-Satterthwaite interval "
    "(scipy.stats.ttest_ind, equal_var=False); factorial effects: the per-seed contrasts' t-interval "
    "and one-sample t-test against 0"
)
VERDICTS_HEADER = (
    "verdicts, one primary per contrast (a secondary one looks at the same contrast another way and decides "
    "nothing; the rule: summary.md):"
)
WELCH_METHOD = "Welch t-test over seeds"
CONTRAST_METHOD = "t-test of the per-seed contrasts"
PRIMARY_RULE = (
    "one primary verdict per contrast, the others secondary (they look at the same contrast another way and "
    "decide nothing): for a pair of groups the Welch t-test over seeds under the checkpoint rule; for a "
    "factorial effect the t-test of its per-seed contrasts, also when the effect is a pair of cells (a "
    "one-factor design's main effect, a simple effect), since the design runs every cell on the same seeds; "
    "secondary: the other checkpoint's Welch test, the bootstrap by problem"
)


def first_step_reaching(series: Series, fraction: float) -> int | None:
    """The first step whose value is >= ``fraction`` x the final value (None when the final is <= 0)."""
    series = series.finite()
    if not len(series) or series.last() <= 0:
        return None
    hit = np.flatnonzero(series.values >= fraction * series.last())
    return int(series.steps[hit[0]])


def _total(table: ScalarTable, tag: str) -> float | None:
    series = table.get(tag)
    return float(series.finite().values.sum()) if series is not None and len(series.finite()) else None


def _with_power(difference: dict[str, Any], a: list[float], b: list[float]) -> dict[str, Any]:
    """A Welch difference with its ``mde`` (from the SD pooled within the two groups) and ``verdict``."""
    sd, _ = pooled_sd([a, b])
    mde = mde_two_groups(len(a), len(b), sd)
    return {**difference, "mde": mde, "verdict": verdict(difference["diff"], difference["ci"], difference["p"], mde)}


def one_per_seed(seeds: list[int | None], values: list[Any]) -> list[Any]:
    """One value per seed, in first-seen order: runs that share a seed (a resumed run and its
    uninterrupted twin, a run repeated by hand) are one sample, their mean; runs without a seed count
    one each. Two runs of one seed are not independent, so counting both would narrow every interval.

    Example:
        >>> one_per_seed([1, 2, 1, None], [0.5, 0.7, 0.7, 0.9])
        [0.6, 0.7, 0.9]
    """
    order: list[Any] = []
    by_seed: dict[int, list[Any]] = {}
    for i, (seed, value) in enumerate(zip(seeds, values)):
        key = ("run", i) if seed is None else ("seed", seed)
        if key not in by_seed:
            order.append(key)
            by_seed[key] = []
        by_seed[key].append(value)
    means = [by_seed[key][0] if len(by_seed[key]) == 1 else np.mean(by_seed[key], axis=0) for key in order]
    return [float(m) if np.ndim(m) == 0 else m for m in means]


def mean_by_seed(seeds: list[int], values: list[float]) -> dict[int, float]:
    """``one_per_seed`` keyed by seed, for pairing two groups seed by seed (every run has a seed).

    Example:
        >>> mean_by_seed([1, 2, 1], [0.5, 0.7, 0.7])
        {1: 0.6, 2: 0.7}
    """
    return dict(zip(dict.fromkeys(seeds), one_per_seed(list(seeds), values)))


def _paired(
    runs_a: list[tuple[Run, dict[str, Any]]], runs_b: list[tuple[Run, dict[str, Any]]], rule: CheckpointRule
) -> dict[str, Any] | None:
    """The two-level bootstrap of a pair when every scored run of both groups wrote per-problem results
    (under ``last`` its last file, under ``best`` the file of the selected step), on the problems of the
    score's tier (:func:`~lite_ppo.research.scores.val_tier`; none for another score); None otherwise."""
    tier = val_tier(rule.score)
    if tier is None:
        return None
    results = []
    for run, scores in [*runs_a, *runs_b]:
        step = scores["best_step"] if rule.checkpoint == "best" else None
        if rule.checkpoint == "best" and step is None:
            return None
        found = read_problem_results(run.path, step, tier)
        if not found:
            return None
        results.append(found)
    ids = sorted(set.intersection(*(set(r) for r in results)))
    matrix = correctness_matrix(results, ids) if ids else None
    if matrix is None:
        return None
    # A seed's runs are one row, their mean per problem (see one_per_seed).
    a = np.array(one_per_seed([run.seed for run, _ in runs_a], list(matrix[: len(runs_a)])))
    b = np.array(one_per_seed([run.seed for run, _ in runs_b], list(matrix[len(runs_a) :])))
    if len(a) < 2 or len(b) < 2:
        return None
    out = paired_bootstrap(a, b)
    out["problems_left_out"] = len(set.union(*(set(r) for r in results))) - len(ids)  # not evaluated by every run
    out["file"] = "each run's last heldout/step_*.json" if rule.checkpoint == "last" else "heldout/step_<best step>"
    out["mde"] = mde_normal(out["se"])
    # Resampling few seeds cannot show the spread between seeds: below the seeds where the bootstrap was
    # calibrated, its interval is shown and neither "detected" nor "no effect larger than" is claimed.
    out["calibrated_from"] = BOOTSTRAP_CALIBRATED_SEEDS
    out["calibrated"] = min(len(a), len(b)) >= BOOTSTRAP_CALIBRATED_SEEDS
    uncalibrated = (
        None
        if out["calibrated"]
        else f"not calibrated below {BOOTSTRAP_CALIBRATED_SEEDS} seeds per cell ({len(a)} and {len(b)} here)"
    )
    out["verdict"] = verdict(out["diff"], out["ci"], out["p"], out["mde"], uncalibrated=uncalibrated)
    if uncalibrated:  # its MDE would be the bound the verdict withholds
        out["mde"] = None
    return out


def _score_section(groups: list[RunGroup], tables: dict[Path, ScalarTable], rule: CheckpointRule) -> dict[str, Any]:
    """Per group the runs' scores (final, best) and for each pair of groups their differences."""
    section: dict[str, Any] = {
        "tag": rule.score,
        "checkpoint": rule.checkpoint,
        "select_on": rule.select_on if rule.can_select else None,
        "rule": rule.describe(),
        "groups": {},
        "pairs": [],
    }
    if rule.score is None:
        return section
    values: dict[str, dict[str, list[float]]] = {}
    scored_runs: dict[str, list[tuple[Run, dict[str, Any]]]] = {}
    for group in groups:
        runs = [{"run": str(r.path), "seed": r.seed, **run_scores(tables[r.path], rule)} for r in group.runs]
        key = "best" if rule.checkpoint == "best" else "final"
        scored_runs[group.label] = [(r, x) for r, x in zip(group.runs, runs) if x[key] is not None]
        final = one_per_seed(
            [x["seed"] for x in runs if x["final"] is not None], [x["final"] for x in runs if x["final"] is not None]
        )
        best = one_per_seed(
            [x["seed"] for x in runs if x["best"] is not None], [x["best"] for x in runs if x["best"] is not None]
        )
        values[group.label] = {"final": final, "best": best}
        if final:
            section["groups"][group.label] = {
                "final": mean_ci(final),
                "best": mean_ci(best) if rule.can_select else None,
                "runs": runs,
            }
    scored = [g.label for g in groups if g.label in section["groups"]]
    for a, b in itertools.combinations(scored, 2):
        final = welch_difference(values[a]["final"], values[b]["final"])
        pair = {"a": a, "b": b, "final": _with_power(final, values[a]["final"], values[b]["final"]), "best": None}
        if rule.can_select and values[a]["best"] and values[b]["best"]:
            best = welch_difference(values[a]["best"], values[b]["best"])
            pair["best"] = _with_power(best, values[a]["best"], values[b]["best"])
        pair["paired"] = _paired(scored_runs[a], scored_runs[b], rule)
        section["pairs"].append(pair)
    return section


def _factorial_section(
    groups: list[RunGroup], tables: dict[Path, ScalarTable], rule: CheckpointRule
) -> tuple[list[dict[str, Any]], list[str]]:
    designs, notes = find_designs(groups)
    key = "best" if rule.checkpoint == "best" else "final"
    out = []
    for design in designs:
        runs = [r for group in design.cells.values() for r in group.runs]
        use_score = rule.score is not None and any(run_scores(tables[r.path], rule)[key] is not None for r in runs)
        response = (
            f"`{rule.score}`, checkpoint rule `{rule.checkpoint}`"
            if use_score
            else f"final `{REWARD_ACCURACY}` (no held-out score logged)"
        )
        values: dict[tuple[str, ...], dict[int, float]] = {}
        for cell, group in design.cells.items():
            seeds, scores = [], []
            for run in group.runs:
                if run.seed is None:
                    continue
                if use_score:
                    value = run_scores(tables[run.path], rule)[key]
                else:
                    series = tables[run.path].get(REWARD_ACCURACY)
                    value = series.finite().last() if series is not None and len(series.finite()) else None
                if value is not None:
                    seeds.append(run.seed)
                    scores.append(value)
            values[cell] = mean_by_seed(seeds, scores)
        result = effects(values, design.factors)
        for effect in [*result["main_effects"], *result["interactions"], *result["simple_effects"]]:
            per_seed = effect["per_seed"]
            sd = float(np.std(per_seed, ddof=1)) if len(per_seed) >= 2 else None
            effect["mde"] = mde_contrast(effect["n"], sd)
            effect["verdict"] = verdict(effect["estimate"], effect["ci"], effect["p"], effect["mde"])
            effect["method"], effect["role"] = CONTRAST_METHOD, "primary"
        for entry, cell in zip(result["cells"], itertools.product(*design.factors.values())):
            entry["group"] = design.cells[cell].label
        design_out = {"base": design.base, "factors": design.factors, "response": response, "on_score": use_score}
        out.append(design_out | result)
    return out, notes


def _same_contrast(design: dict[str, Any], a: str, b: str) -> tuple[dict[str, Any], str] | None:
    """The factorial effect that is the contrast of groups ``a`` and ``b`` (``(effect, name)``), when both are
    cells of ``design`` that differ in one factor, one of them at its reference level: the main effect of a
    one-factor design, else the simple effect at the other factors' levels. None otherwise."""
    cells = {entry["group"]: entry["cell"] for entry in design["cells"]}
    if a not in cells or b not in cells:
        return None
    differing = [f for f in design["factors"] if cells[a][f] != cells[b][f]]
    if len(differing) != 1:
        return None
    (factor,) = differing
    reference = design["factors"][factor][0]
    if reference not in (cells[a][factor], cells[b][factor]):
        return None  # two levels besides the reference: no effect compares them
    level = cells[b][factor] if cells[a][factor] == reference else cells[a][factor]
    at = {f: v for f, v in cells[a].items() if f != factor}
    candidates = design["simple_effects"] if at else design["main_effects"]
    for effect in candidates:
        if effect["factor"] == factor and effect["level"] == level and effect.get("at", {}) == at:
            return effect, f"{design['base']}: {_effect_name(effect)}"
    return None


def _name_primaries(score: dict[str, Any], factorial: list[dict[str, Any]], key: str) -> None:
    """Mark every verdict ``primary`` or ``secondary`` (``role``, with its ``method``) by :data:`PRIMARY_RULE`;
    each pair gets ``primary``, the verdict that decides it, and ``primary_effect``, the factorial effect's name
    when that is it (else None)."""
    for pair in score["pairs"]:
        # An effect without a verdict (one shared seed: no spread to test) decides nothing: Welch stays primary.
        effect = next(
            (
                found
                for d in factorial
                if d["on_score"] and (found := _same_contrast(d, pair["a"], pair["b"])) and found[0].get("verdict")
            ),
            None,
        )
        pair["primary_effect"] = effect[1] if effect else None
        pair["primary"] = f"factorial effect {effect[1]}" if effect else f"{key} ({WELCH_METHOD})"
        for which in ("final", "best"):
            if pair.get(which):
                pair[which]["method"] = WELCH_METHOD
                pair[which]["role"] = "primary" if which == key and effect is None else "secondary"
        if pair.get("paired"):
            pair["paired"]["role"] = "secondary"


def summarize(
    groups: list[RunGroup],
    tables: dict[Path, ScalarTable],
    quantities: list[Quantity],
    rule: CheckpointRule | None = None,
    counted: Counted | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` content for ``groups`` (``tables`` maps each run's path to its scalars);
    ``counted``: the runs that count and the notes (:func:`lite_ppo.research.run_set.counted_runs`, computed
    here when not given)."""
    rule = rule or CheckpointRule()
    # Diverged runs and runs shorter than their group: out of every score and test, said why.
    counted = counted if counted is not None else counted_runs(RunSet(groups, tables), rule.score)
    left_out = counted.left_out
    every_run = {group.label: group.runs for group in groups}
    # The per-quantity tables describe every run that did not diverge (their final_step shows a short
    # one); the scores, tests and effects use the runs kept by the rule only.
    described = [
        dataclasses.replace(g, runs=[r for r in g.runs if not left_out.get(r.path, "").startswith("diverged")])
        for g in groups
    ]
    groups = [dataclasses.replace(g, runs=[r for r in g.runs if r.path not in left_out]) for g in groups]
    out_groups = []
    for group, described_group in zip(groups, described):
        entry: dict[str, Any] = {
            "label": group.label,
            "recipe": group.recipe,
            "cell": every_run[group.label][0].cell or None,
            "seeds": described_group.seeds,
            "runs": [str(r.path) for r in described_group.runs],
            "status": [r.status for r in described_group.runs],
            "left_out": [
                {"run": str(r.path), "seed": r.seed, "why": left_out[r.path]}
                for r in every_run[group.label]
                if r.path in left_out
            ],
            "quantities": {},
        }
        for quantity in quantities:
            logged = [
                (r.seed, s.finite())
                for r, s in ((r, tables[r.path].get(quantity.tag)) for r in described_group.runs)
                if s is not None and len(s.finite())
            ]
            if not logged:
                continue  # not logged by this group (e.g. no clip-higher curve): no row
            seeds, series = [seed for seed, _ in logged], [s for _, s in logged]
            pick = np.min if quantity.best_rule == "min" else np.max
            entry["quantities"][quantity.tag] = {
                "title": quantity.title,
                "final": mean_ci(one_per_seed(seeds, [s.last() for s in series])),
                "best": mean_ci(one_per_seed(seeds, [float(pick(s.values)) for s in series])),
                "best_rule": quantity.best_rule,
                "final_step": mean_ci(one_per_seed(seeds, [float(s.steps[-1]) for s in series])),
            }
        entry["compute"] = {}
        for name, tag in (("tokens", names.GENERATED_TOKENS), ("seconds", names.STEP_SECONDS)):
            totals = [(r.seed, _total(tables[r.path], tag)) for r in described_group.runs]
            totals = [(seed, t) for seed, t in totals if t is not None]
            entry["compute"][name] = mean_ci(one_per_seed([x for x, _ in totals], [t for _, t in totals]))
        milestones = {}
        reward = [tables[r.path].get(REWARD_ACCURACY) for r in described_group.runs]
        reward = [s for s in reward if s is not None]
        for fraction in MILESTONES:
            steps = [first_step_reaching(s, fraction) for s in reward]
            milestones[f"reward_{round(fraction * 100)}"] = mean_ci([float(s) for s in steps if s is not None])
        entry["milestones"] = milestones
        out_groups.append(entry)
    factorial, notes = _factorial_section([g for g in groups if g.runs], tables, rule)
    score = _score_section(groups, tables, rule)
    _name_primaries(score, factorial, "best" if rule.checkpoint == "best" else "final")
    return {
        "confidence": CONFIDENCE,
        "ci_method": CI_METHOD,
        "power_method": POWER_METHOD,
        "primary_rule": PRIMARY_RULE,
        "groups": out_groups,
        # better: None where no direction is an improvement (response length, entropy): "best" is only the max.
        "quantities": {
            q.tag: {"title": q.title, "unit": q.unit, "share": q.share, "better": q.better, "range": q.value_range}
            for q in quantities
        },
        "score": score,
        "factorial": factorial,
        "notes": counted.notes + notes,
        "left_out_rule": LEFT_OUT_RULE,
    }


# -- summary.md -------------------------------------------------------------------------------------
def _num(value: float | None, digits: int = 4) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def _ci(ci: list[float] | None) -> str:
    return f"[{_num(ci[0], 3)}, {_num(ci[1], 3)}]" if ci else "–"


def _p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.2g}" if p >= 1e-4 else "< 1e-4")


def _fmt(
    stat: dict[str, Any] | None, ci: bool = True, value_range: tuple[float | None, float | None] = (None, None)
) -> str:
    """``mean ± std (n=N) [low, high]``; ``–`` when nothing was logged. The interval is cut at the
    quantity's ``value_range`` (a t-interval of few seeds can reach below 0 seconds or above 100 %);
    ``ci=False`` leaves it out (a step count is not an estimate)."""
    if not stat or stat["mean"] is None:
        return "–"
    text = f"{stat['mean']:.4g}"
    if stat["std"] is not None and not math.isnan(stat["std"]):
        text += f" ± {stat['std']:.2g}"
    text += f" (n={stat['n']})"
    if not ci or not stat.get("ci"):
        return text
    low, high = stat["ci"]
    floor, ceiling = value_range
    low = max(low, floor) if floor is not None and low is not None else low
    high = min(high, ceiling) if ceiling is not None and high is not None else high
    return f"{text} {_ci([low, high])}"


def _diff(stat: dict[str, Any] | None) -> tuple[str, str, str]:
    if not stat or stat["diff"] is None:
        return "–", "–", "–"
    return f"{stat['diff']:+.4g}", _ci(stat["ci"]), _p(stat["p"])


def _score_markdown(score: dict[str, Any]) -> list[str]:
    lines = ["", "## Held-out score", "", score["rule"]]
    if not score["groups"]:
        return lines
    best = bool(score["select_on"])  # a best column only where a separate selection split exists
    header = "| group | final |" + (f" best (selected on `{score['select_on']}`) |" if best else "")
    lines += ["", header, "|---|---|" + ("---|" if best else "")]
    for label, g in score["groups"].items():
        lines.append(f"| {label} | {_fmt(g['final'])} |" + (f" {_fmt(g['best'])} |" if best else ""))
    if score["pairs"]:
        lines += [
            "",
            "Differences a − b of the mean scores, Welch's 95 % CI and two-sided p-value:",
            "",
            "| a | b | final a − b | CI | p |" + (" best a − b | CI | p |" if best else ""),
            "|---|---|---|---|---|" + ("---|---|---|" if best else ""),
        ]
        for pair in score["pairs"]:
            cells = [*_diff(pair["final"]), *(_diff(pair["best"]) if best else ())]
            lines.append(f"| {pair['a']} | {pair['b']} | " + " | ".join(cells) + " |")
        pair_lines = _pair_verdicts(score)
        if pair_lines:
            lines += [
                "",
                "Verdicts (minimum detectable effect at 80 % power, α = 0.05, two-sided; one primary per contrast, "
                "by the rule at the top):",
                "",
            ]
            lines += [f"- {line}" for line in pair_lines]
    return lines


def _role(stat: dict[str, Any], effect: str | None = None) -> str:
    """``[primary: <method>]`` or ``[secondary: <method>]``; a secondary one names the factorial ``effect`` that
    is the primary verdict on its contrast, if one is."""
    elsewhere = f"; primary: factorial effect {effect}" if effect and stat["role"] == "secondary" else ""
    return f"[{stat['role']}: {stat['method']}{elsewhere}]"


def _pair_verdicts(score: dict[str, Any]) -> list[str]:
    lines = []
    for pair in score["pairs"]:
        effect = pair.get("primary_effect")
        for key in ("final", "best"):
            stat = pair.get(key)
            if stat and stat.get("verdict"):
                lines.append(f"{_role(stat, effect)} {pair['a']} − {pair['b']}, {key}: {stat['verdict']}")
        paired = pair.get("paired")
        if paired and paired.get("verdict"):
            lines.append(
                f"{_role(paired, effect)} {pair['a']} − {pair['b']}, held-out accuracy per problem "
                f"({paired['n_problems']} problems, {paired['rounds']} rounds; {paired['file']}): {paired['verdict']}"
            )
    return lines


def _effect_name(eff: dict[str, Any]) -> str:
    if "at" in eff:
        where = ", ".join(f"{k}={v}" for k, v in eff["at"].items())
        return f"simple: {eff['factor']} {eff['level']} − {eff['reference']} at {where}"
    if "factor" in eff:
        return f"main: {eff['factor']} {eff['level']} − {eff['reference']}"
    (f1, f2), (a, b), (ra, rb) = eff["factors"], eff["levels"], eff["references"]
    return f"interaction: {f1} {a} − {ra} × {f2} {b} − {rb}"


def _factorial_verdicts(design: dict[str, Any], prefix: str = "") -> list[str]:
    return [
        f"{_role(eff)} {prefix}{_effect_name(eff)}: {eff['verdict']}"
        for eff in [*design["main_effects"], *design["interactions"], *design.get("simple_effects", [])]
        if eff.get("verdict")
    ]


def verdict_lines(summary: dict[str, Any]) -> list[str]:
    """Every verdict sentence of a summary, one line each (what ``compare`` prints): pairs, then factorial
    effects, each labelled ``[primary: ...]`` or ``[secondary: ...]`` (:data:`PRIMARY_RULE`)."""
    lines = _pair_verdicts(summary["score"])
    for design in summary["factorial"]:
        lines += _factorial_verdicts(design, prefix=f"{design['base']}: ")
    if lines:
        lines.insert(0, VERDICTS_HEADER)
    return lines


def _factorial_markdown(factorial: list[dict[str, Any]], notes: list[str]) -> list[str]:
    lines: list[str] = []
    for design in factorial:
        factors = " × ".join(f"{name} {{{', '.join(levels)}}}" for name, levels in design["factors"].items())
        lines += ["", f"## Factorial: {design['base']}, {factors}", ""]
        lines.append(
            f"Response: {design['response']}. Seeds in every cell: {design['seeds'] or 'none'}"
            + (f" (left out: {design['seeds_left_out']})" if design["seeds_left_out"] else "")
            + ". Effects are per-seed contrasts averaged over the other factors (reference level first); "
            "interaction = difference of differences; simple = the contrast at one level of the other factors; "
            "95 % t-interval over seeds, p from the one-sample t-test."
        )
        lines += ["", "| cell | mean over seeds |", "|---|---|"]
        for cell in design["cells"]:
            lines.append(f"| {', '.join(f'{k}={v}' for k, v in cell['cell'].items())} | {_fmt(cell)} |")
        lines += ["", "| effect | estimate | CI | p | n | MDE (80 % power) |", "|---|---|---|---|---|---|"]
        for eff in [*design["main_effects"], *design["interactions"], *design.get("simple_effects", [])]:
            lines.append(
                f"| {_effect_name(eff)} | {_num(eff['estimate'])} | {_ci(eff['ci'])} | {_p(eff['p'])} | {eff['n']} "
                f"| {_num(eff.get('mde'), 3)} |"
            )
        effect_lines = _factorial_verdicts(design)
        if effect_lines:
            lines += ["", *[f"- {line}" for line in effect_lines]]
    if notes:
        lines += ["", *[f"Note: {note}" for note in notes]]
    return lines


def summary_markdown(summary: dict[str, Any]) -> str:
    """``summary.md``: groups, the held-out score and pairwise differences, factorial effects, compute,
    one table per quantity (rows: groups), then the reward milestones."""
    lines = [
        "# Run comparison",
        "",
        "Mean ± sample std over seeds (n = seeds that logged the quantity; runs that share a seed count once, "
        "as their mean) [95 % confidence interval of the mean].",
        f"Method: {summary['ci_method']}.",
        *([f"Power: {summary['power_method']}."] if summary.get("power_method") else []),
        *([f"Verdicts: {summary['primary_rule']}."] if summary.get("primary_rule") else []),
        "",
    ]
    if summary.get("x_label"):
        lines += [f"Figures over: {summary['x_label']}; bands and bars: {summary.get('band_text', '')}.", ""]
    lines += ["| group | seeds | runs | left out |", "|---|---|---|---|"]
    for g in summary["groups"]:
        out = "; ".join(f"seed {x['seed']}: {x['why']}" for x in g.get("left_out", [])) or "–"
        lines.append(f"| {g['label']} | {', '.join(str(s) for s in g['seeds'])} | {len(g['runs'])} | {out} |")
    if summary.get("left_out_rule"):
        lines += ["", f"Rule: {summary['left_out_rule']}."]
    lines += _score_markdown(summary["score"])
    lines += _factorial_markdown(summary["factorial"], summary["notes"])
    lines += ["", "## Compute per run", "", "| group | generated tokens | training seconds |", "|---|---|---|"]
    for g in summary["groups"]:
        tokens, seconds = (_fmt(g["compute"][k], value_range=(0.0, None)) for k in ("tokens", "seconds"))
        lines.append(f"| {g['label']} | {tokens} | {seconds} |")
    for tag, meta in summary["quantities"].items():
        rows = [(g["label"], g["quantities"][tag]) for g in summary["groups"] if tag in g["quantities"]]
        if not rows:
            continue
        lines += ["", f"## {meta['title']} (`{tag}`, {'share' if meta['share'] else meta['unit']})", ""]
        # Response length or entropy has no better direction: its extreme is a "max", not a "best".
        extreme = "best" if meta.get("better") else "max"
        lines += [f"| group | final | {extreme} | {extreme} is | last step |", "|---|---|---|---|---|"]
        value_range = tuple(meta.get("range") or (None, None))
        for label, q in rows:
            final, best = _fmt(q["final"], value_range=value_range), _fmt(q["best"], value_range=value_range)
            lines.append(f"| {label} | {final} | {best} | {q['best_rule']} | {_fmt(q['final_step'], ci=False)} |")
    lines += [
        "",
        f"## Steps until training accuracy (`{REWARD_ACCURACY}`) first reached 50 % / 90 % of its final value",
        "",
    ]
    lines += ["| group | 50 % | 90 % |", "|---|---|---|"]
    for g in summary["groups"]:
        lines.append(f"| {g['label']} | {_fmt(g['milestones']['reward_50'])} | {_fmt(g['milestones']['reward_90'])} |")
    return "\n".join(lines) + "\n"
