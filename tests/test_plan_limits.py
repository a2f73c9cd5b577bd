"""What ``lite-ppo plan`` says where a pilot leaves things open or an input plans nothing: an MDE outside
what can be planned (one-line errors saying what is allowed), per-seed differences without spread, an SD
resting on few degrees of freedom (the seeds at the ends of its chi-square interval, from scipy here), and
the wall time of runs side by side (the sweep's measured rates, by hand here, or an assumption said as one)."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats
from statsmodels.stats.power import TTestIndPower, TTestPower

from helpers.pilot_runs import f32, scored_run, write_run
from lite_ppo import metric_names as m
from lite_ppo.research.plan import main as plan_main
from lite_ppo.research.plan import plan

ALPHA = [0.40, 0.52, 0.47, 0.61]
BETA = [0.42, 0.38, 0.47, 0.44]


def _pilot(root: Path, alpha: list[float] = ALPHA, beta: list[float] = BETA, seeds_beta: int = 0) -> None:
    for seed, value in enumerate(alpha):
        scored_run(root, "alpha", seed, value)
    for seed, value in enumerate(beta):
        scored_run(root, "beta", seeds_beta + seed, value)


def _pooled_sd(a: list[float], b: list[float]) -> float:
    return math.sqrt(
        ((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / (len(a) + len(b) - 2)
    )


@pytest.mark.parametrize(("mde", "allowed"), [("5", "at most 1"), ("1e300", "at most 1"), ("1e-12", "between"),
                                              ("1e-300", "between")])  # fmt: skip
def test_an_mde_that_plans_nothing_is_a_one_line_error_saying_what_is_allowed(tmp_path, capsys, mde, allowed):
    root = tmp_path / "pilot"
    _pilot(root, seeds_beta=10)  # disjoint seeds: no paired plan, the 2-cell plan is the most demanding
    assert plan_main([str(root), "--mde", mde]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"lite-ppo plan: error: --mde {float(mde):g}:") and allowed in err[0]


def test_the_smallest_mde_said_is_allowed_and_below_it_is_not(tmp_path, capsys):
    root = tmp_path / "pilot"
    _pilot(root, seeds_beta=10)
    assert plan_main([str(root), "--mde", "1e-12"]) == 2
    floor = float(capsys.readouterr().err.strip().split("between ")[1].split(" and")[0])
    # The MDE of a million seeds per cell at the pilot's SD, by statsmodels here: the floor is it, rounded up.
    sd = _pooled_sd(f32(ALPHA), f32(BETA))
    exact = TTestIndPower().solve_power(effect_size=None, nobs1=1_000_000, alpha=0.05, power=0.8, ratio=1.0) * sd
    assert exact <= floor <= exact * 1.01
    result = plan([str(root)], floor)
    assert result["two_cell"]["seeds_per_cell"] <= 1_000_000
    assert plan_main([str(root), "--mde", str(exact * 0.99)]) == 2


def test_per_seed_differences_without_spread_give_a_plan_line_not_a_crash(tmp_path, capsys):
    """beta = alpha - 0.03 on every seed: the differences differ only by float32 rounding (SD ~1e-8), which
    made the paired plan divide by almost nothing (a NaN seed count) before."""
    root = tmp_path / "pilot"
    _pilot(root, ALPHA, [a - 0.03 for a in ALPHA])
    assert plan_main([str(root), "--mde", "0.02"]) == 0
    printed = capsys.readouterr().out
    assert "the per-seed differences are all the same" in printed and "no spread" in printed
    assert "2-cell comparison paired by seed:" not in printed  # no seed count from no spread
    result = plan([str(root)], 0.02)
    assert result["paired"]["no_spread"] and result["paired"]["sd"] < 1e-6
    # The unpaired plans stand, from the SD within groups.
    sd = _pooled_sd(f32(ALPHA), f32([a - 0.03 for a in ALPHA]))
    n = math.ceil(TTestIndPower().solve_power(effect_size=0.02 / sd, nobs1=None, alpha=0.05, power=0.8, ratio=1.0))
    assert result["two_cell"]["seeds_per_cell"] == n


def test_plan_gives_the_seeds_at_the_ends_of_the_sds_chi_square_interval(tmp_path, capsys):
    root = tmp_path / "pilot"
    _pilot(root, seeds_beta=10)
    assert plan_main([str(root), "--mde", "0.05"]) == 0
    printed = capsys.readouterr().out
    sd, df = _pooled_sd(f32(ALPHA), f32(BETA)), 6
    # The 95 % interval of a normal SD from df * s² / σ² ~ chi-square(df).
    low = sd * math.sqrt(df / stats.chi2.ppf(0.975, df))
    high = sd * math.sqrt(df / stats.chi2.ppf(0.025, df))
    result = plan([str(root)], 0.05)
    assert result["two_cell"]["sd_interval"] == pytest.approx([low, high], rel=1e-9)

    def two_cell(s: float) -> int:
        return math.ceil(TTestIndPower().solve_power(effect_size=0.05 / s, nobs1=None, alpha=0.05, power=0.8, ratio=1))

    def contrast(s: float) -> int:
        return math.ceil(TTestPower().solve_power(effect_size=0.05 / s, nobs=None, alpha=0.05, power=0.8))

    assert result["two_cell"]["seeds_range"] == [two_cell(low), two_cell(high)]
    assert result["factorial_2x2"]["seeds_range"] == [contrast(low), contrast(high)]
    n = two_cell(sd)
    assert f"2-cell comparison: {n} seeds per cell ({2 * n} runs), {two_cell(low)} to {two_cell(high)}" in printed
    assert f"95 % interval {low:.3g} to {high:.3g}" in printed
    assert "few degrees of freedom: the SD rests on 6" in printed  # 6 < 20: said in words too


def _timed_pilot(root: Path, walls: list[int]) -> None:
    """Two groups of two seeds, each run ``walls[i]`` seconds from start to end."""
    for i, (recipe, seed, value) in enumerate([("a", 0, 0.40), ("a", 1, 0.46), ("b", 0, 0.42), ("b", 1, 0.50)]):
        record = {"started": "2026-01-01T10:00:00+00:00", "ended": f"2026-01-01T10:{walls[i] // 60:02d}:"
                  f"{walls[i] % 60:02d}+00:00", "recipe": recipe, "seed": seed}  # fmt: skip
        scalars = {m.REWARD_ACCURACY: {0: 0.1}, m.EVAL_AVERAGE_ACCURACY: {0: 0.1, 4: value}}
        write_run(root / "study" / recipe / "tiny" / f"seed{seed}", scalars, **record)


@pytest.mark.parametrize(
    ("step_s", "pilot_rate"),
    [
        # 2 s a step alone on 2 threads (0.5 steps/s); side by side 2.5 s a step each: 0.8 steps/s together, 0.4
        # each, more than 5 % faster, so the sweep chose side by side and the pilot ran so.
        ((2.0, 2.5), 0.4),
        # Side by side 3.85 s a step each: 2 / 3.85 = 0.519 steps/s together, under 5 % more than 0.5, so the
        # sweep ran one at a time on 2 threads, 0.5 steps/s.
        ((2.0, 3.85), 0.5),
    ],
)
def test_plan_times_runs_side_by_side_from_the_sweeps_measurement(tmp_path, capsys, step_s, pilot_rate):
    from lite_ppo.research.parallel_choice import decide

    root = tmp_path / "sweep"
    _timed_pilot(root, [100, 120, 110, 130])
    (root / "parallel_choice.json").write_text(json.dumps(dataclasses.asdict(decide(*step_s, 2))))  # as sweep does
    assert plan_main([str(root / "study"), "--mde", "0.05", "--parallel", "2"]) == 0
    printed = capsys.readouterr().out
    result = plan([str(root / "study")], 0.05, parallel=2)
    wall = statistics.mean([100, 120, 110, 130])
    runs = 2 * result["two_cell"]["seeds_per_cell"]
    steps = wall * pilot_rate  # a run's steps, from its wall time and the rate it ran at
    alone, together = 1 / step_s[0], 2 / step_s[1]
    # One after another each run goes alone; two side by side finish the measured rate between them.
    assert result["two_cell"]["serial_s"] == pytest.approx(runs * steps / alone)
    assert result["two_cell"]["parallel_s"] == pytest.approx(runs * steps / together)
    assert str(root / "parallel_choice.json") in printed and "(measured)" in printed
    assert "assume" not in printed


def test_plan_says_side_by_side_is_an_assumption_without_a_measurement(tmp_path, capsys):
    root = tmp_path / "sweep"
    _timed_pilot(root, [100, 120, 110, 130])
    assert plan_main([str(root), "--mde", "0.05", "--parallel", "2"]) == 0
    printed = capsys.readouterr().out
    result = plan([str(root)], 0.05, parallel=2)
    runs = 2 * result["two_cell"]["seeds_per_cell"]
    assert result["two_cell"]["parallel_s"] == pytest.approx(runs * 115 / 2)
    assert "side by side: not measured" in printed and "assumed as fast as alone" in printed
