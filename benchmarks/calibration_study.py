"""The instrument calibrated on real testbed runs (protocol: docs/research.md, "Calibration of the instrument
on the testbed"; results: docs/benchmarks.md).

    python benchmarks/calibration_study.py runs/calibration            # the runs of the protocol's sweep
    python benchmarks/calibration_study.py runs/calibration --json out.json
    python benchmarks/calibration_study.py runs/r2_agg_headroom/agg=token --control-steps 120 40 --half 16

Reads every run under the folder (one cell, many seeds) and prints:

1. each seed's pooled held-out accuracy at the last evaluation and at the middle one (step 10 of 20);
2. **A/A**: random 16-vs-16 splits of the last scores, the share with Welch p < 0.05 (Clopper-Pearson 95 %
   interval); the same with the two-level bootstrap paired by problem on fewer splits;
3. **positive control**: splits with one half of the seeds scored at the middle evaluation and the other
   half at the last (``--control-steps LATE EARLY``: at those steps; ``--half N``: N seeds per group, the
   rest sit the split out), the share detected, against the power statsmodels predicts for the observed
   difference and SD at that n; ``--simulate SETS``: the same on fresh normal seed sets like the runs, the gap
   between detected and predicted to expect;
4. **resolution**: the SD over seeds, the MDE at 16 against 16 seeds, the seeds per cell for an MDE of
   0.02, and the wall time of the runs (``run.json`` start to end; the sweep ran them two at a time).
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import datetime
from pathlib import Path

import numpy as np

from lite_ppo.research.bootstrap import paired_bootstrap
from lite_ppo.research.calibration import aa_split_rate, predicted_power, simulated_split_gap, split_detection_rate
from lite_ppo.research.power import mde_two_groups, seeds_for_two_groups
from lite_ppo.research.problem_results import correctness_matrix, read_problem_results
from lite_ppo.research.run_record import read_run_record
from lite_ppo.research.scalars import read_scalars
from lite_ppo.research.scores import POOLED_VAL, score_series

SPLITS = 2000
SIMULATED_SPLITS = 500  # per fresh set: the gap's SD over sets is what matters, not each set's precision
BOOTSTRAP_SPLITS = 200  # the default of --bootstrap-splits: each split is a 1,000-round bootstrap


def _runs(root: Path) -> list[Path]:
    return sorted(
        p.parent for p in root.rglob("run.json") if (read_run_record(p.parent) or {}).get("status") == "finished"
    )


def _seconds(run: Path) -> float | None:
    record = read_run_record(run) or {}
    try:
        return (datetime.fromisoformat(record["ended"]) - datetime.fromisoformat(record["started"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def _fmt_rate(result: dict) -> str:
    low, high = result["ci"]
    return f"{result['rate']:.3f} (95 % CI {low:.3f}-{high:.3f}; {result['detected']} of {result['n_splits']})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--first", type=int, default=None, help="A/A and positive control on the seeds below this (default: all)"
    )
    parser.add_argument(
        "--control-steps", type=int, nargs=2, metavar=("LATE", "EARLY"), default=None,
        help="the positive control's two evaluations (default: the last and the one before it)",
    )  # fmt: skip
    parser.add_argument("--half", type=int, default=None, help="seeds per group in a control split (default: half)")
    parser.add_argument(
        "--bootstrap-splits", type=int, default=BOOTSTRAP_SPLITS, metavar="N",
        help=f"A/A splits for the two-level bootstrap (default: {BOOTSTRAP_SPLITS})",
    )  # fmt: skip
    parser.add_argument(
        "--simulate", type=int, default=0, metavar="SETS",
        help="the gap to expect: the control on this many fresh normal seed sets like the runs (default: off)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    runs = _runs(args.root)
    rows = []
    for run in runs:
        series = score_series(read_scalars(run), POOLED_VAL)
        if series is None or len(series.values) < 2:
            continue
        seed = (read_run_record(run) or {}).get("seed")
        at = dict(zip(series.steps.tolist(), series.values.tolist()))
        late_step, early_step = args.control_steps or series.steps.tolist()[-1:-3:-1]
        if late_step not in at or early_step not in at:
            raise SystemExit(
                f"calibration_study: {run} has evaluations at steps {sorted(at)}, not at {late_step} and {early_step}"
            )
        rows.append((seed, at[late_step], at[early_step], read_problem_results(run), run))
    rows.sort(key=lambda row: row[0])
    everything = np.array([row[1] for row in rows])
    if args.first:  # the protocol's seeds for A/A and the positive control; the resolution uses all
        rows = [row for row in rows if row[0] < args.first]
    last, middle, problems = [row[1] for row in rows], [row[2] for row in rows], [row[3] for row in rows]
    last_a, middle_a = np.array(last), np.array(middle)
    n, half = len(last), len(last) // 2
    if args.half is not None and not 2 <= args.half <= half:
        raise SystemExit(f"calibration_study: --half must be 2 .. {half} (half of the {n} seeds), got {args.half}")
    print(f"{n} runs with two held-out evaluations under {args.root} (A/A and positive control)")
    late, early = (f"step {s}" for s in args.control_steps) if args.control_steps else ("last", "middle")
    print(
        f"pooled held-out accuracy, {late} evaluation: mean {last_a.mean():.4f}, SD over seeds {last_a.std(ddof=1):.4f}"
    )
    print(f"pooled held-out accuracy, {early} evaluation: mean {middle_a.mean():.4f}, SD {middle_a.std(ddof=1):.4f}")
    rng = np.random.default_rng(0)
    aa = aa_split_rate(last_a, SPLITS, rng)
    print(f"A/A, Welch, {half} vs {half} seeds: share with p < 0.05 = {_fmt_rate(aa)}")
    report = {"runs": n, "last": last, "middle": middle, "aa_welch": aa}
    if all(p is not None for p in problems):
        ids = sorted(set.intersection(*(set(p) for p in problems)))
        matrix = correctness_matrix(problems, ids)
        detected = 0
        for _ in range(args.bootstrap_splits):
            order = rng.permutation(n)
            result = paired_bootstrap(matrix[order[:half]], matrix[order[half : 2 * half]], rng=rng, rounds=1000)
            detected += result["p"] < 0.05
        from scipy import stats

        ci = stats.binomtest(detected, args.bootstrap_splits).proportion_ci(method="exact")
        boot = {"rate": detected / args.bootstrap_splits, "ci": [ci.low, ci.high], "detected": detected,
                "n_splits": args.bootstrap_splits}  # fmt: skip
        print(f"A/A, two-level bootstrap paired by problem ({len(ids)} problems): {_fmt_rate(boot)}")
        report["aa_bootstrap"] = boot
    group = args.half or half
    positive = split_detection_rate(last_a, middle_a, SPLITS, rng, half=group)
    effect = float(last_a.mean() - middle_a.mean())
    sd = float(np.sqrt((last_a.var(ddof=1) + middle_a.var(ddof=1)) / 2))
    predicted = predicted_power(last_a, middle_a, group)
    print(
        f"positive control ({late} against {early} evaluation, {group} vs {group} disjoint seeds of {n}): "
        f"difference {effect:+.4f}, SD {sd:.4f} (MDE at that n {mde_two_groups(group, group, sd):.4f}), "
        f"detected in {_fmt_rate(positive)}; predicted power {predicted:.3f}; "
        f"gap {positive['rate'] - predicted:+.3f}"
    )
    if args.simulate:
        expected = simulated_split_gap(last_a, middle_a, group, args.simulate, SIMULATED_SPLITS, rng)
        print(
            f"the same on {args.simulate} fresh sets of {n} seeds from a normal with these means, SDs and "
            f"correlation ({np.corrcoef(last_a, middle_a)[0, 1]:+.2f}): power {expected['power']:.3f}, "
            f"detected {expected['rate']:.3f}, predicted {expected['predicted']:.3f}, "
            f"gap {expected['gap']:+.3f} (SD {expected['gap_sd']:.3f} over the sets)"
        )
        report["simulated"] = expected
    sd_all, n_all = float(everything.std(ddof=1)), len(everything)
    mde = mde_two_groups(n_all // 2, n_all // 2, sd_all)
    seeds = seeds_for_two_groups(0.02, sd_all)
    walls = [s for s in map(_seconds, runs) if s is not None]
    print(
        f"resolution ({n_all} runs): SD over seeds {sd_all:.4f}; MDE at {n_all // 2} vs {n_all // 2} seeds {mde:.4f}; "
        f"seeds per cell for an MDE of 0.02: {seeds}; run wall time median {statistics.median(walls):.0f} s "
        f"(run.json start to end), {len(walls)} runs"
    )
    report.update(positive=positive, effect=effect, predicted_power=predicted, sd_all=sd_all, runs_all=n_all,
                  mde_half=mde, seeds_for_002=seeds, run_seconds_median=statistics.median(walls))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
