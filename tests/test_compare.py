"""``lite-ppo compare`` on event files written here with known values: seed grouping, unequal
lengths, a scalar one recipe never logs, a run still being written; summary numbers checked against
hand-computed ones, figures checked to be real images with the plotted lines on them."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from scipy import stats

from helpers import pilot_runs
from helpers.compare_runs import RUNS, write_run
from lite_ppo import metric_names as m
from lite_ppo.errors import UserError
from lite_ppo.research.compare import main as compare_main
from lite_ppo.research.compute_axis import AXES, cumulative, x_at
from lite_ppo.research.factorial import effects
from lite_ppo.research.scalars import Series
from lite_ppo.research.stats import contrast_ci, mean_ci, welch_difference

ALPHA_BLUE = (0x1F, 0x77, 0xB4)  # tab10[0]: the first recipe in sorted order ("alpha")
BETA_ORANGE = (0xFF, 0x7F, 0x0E)  # tab10[1]: "beta"


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    for recipe, seeds in RUNS.items():
        for seed, (steps, final, offset) in seeds.items():
            write_run(root, recipe, seed, steps, final, offset, clip=recipe == "alpha")  # beta has no clip-higher curve
    return root


def _colour_pixels(png: Path, rgb: tuple[int, int, int], tol: int = 12) -> int:
    pixels = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int((np.abs(pixels - np.array(rgb)).max(axis=-1) <= tol).sum())


def test_summary_matches_hand_computed_statistics(runs, tmp_path):
    out = tmp_path / "cmp"
    assert compare_main([str(runs / "*" / "tiny" / "seed*"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    groups = {g["label"]: g for g in summary["groups"]}
    assert sorted(groups) == ["alpha/tiny", "beta/tiny"], "runs differing only in seed must form one group per recipe"
    alpha, beta = groups["alpha/tiny"], groups["beta/tiny"]
    assert alpha["seeds"] == [0, 1, 2] and beta["seeds"] == [0, 1]

    acc = alpha["quantities"][m.REWARD_ACCURACY]
    assert acc["final"]["n"] == 3
    assert acc["final"]["mean"] == pytest.approx(0.6, abs=1e-6)
    assert acc["final"]["std"] == pytest.approx(0.1, abs=1e-6)  # sample std of 0.5, 0.6, 0.7
    assert acc["best"]["mean"] == pytest.approx(0.6, abs=1e-6)  # a rising ramp peaks at its end
    assert acc["final_step"]["mean"] == pytest.approx((9 + 7 + 9) / 3)

    # Entropy falls, so "final" is the last value, different per run length: 1 + off - 0.05 * (steps - 1).
    finals = [1.0 - 0.45, 1.1 - 0.35, 1.2 - 0.45]
    ent = alpha["quantities"][m.ENTROPY]
    assert ent["final"]["mean"] == pytest.approx(statistics.mean(finals), abs=1e-6)
    assert ent["final"]["std"] == pytest.approx(statistics.stdev(finals), abs=1e-6)
    assert ent["best"]["mean"] == pytest.approx(statistics.mean([1.0, 1.1, 1.2]), abs=1e-6)  # no direction: max
    # Truncation: lower is better, so best is the minimum (the last step of each run).
    trunc = beta["quantities"][m.TRUNCATION_RATE]
    assert trunc["best_rule"] == "min"
    assert trunc["best"]["mean"] == pytest.approx(0.1 - 0.05, abs=1e-6)
    assert trunc["best"]["std"] == pytest.approx(0.0, abs=1e-6)

    # Missing scalar: beta never logged the upper clip fraction -> no row; alpha has one.
    assert m.CLIP_UPPER_POSITIVE in alpha["quantities"]
    assert m.CLIP_UPPER_POSITIVE not in beta["quantities"]
    assert m.EVAL_AVERAGE_ACCURACY not in alpha["quantities"]
    held_out = alpha["quantities"][m.val_accuracy("easy")]
    assert held_out["final"]["mean"] == pytest.approx(0.4, abs=1e-6) and held_out["final"]["std"] == pytest.approx(
        0.1, abs=1e-6
    )
    assert m.val_accuracy("easy") not in beta["quantities"]

    # 50 % / 90 % of the final accuracy on a ramp t / (L - 1): L = 10 -> steps 5 and 9; L = 8 -> 4 and 7.
    assert alpha["milestones"]["reward_50"]["mean"] == pytest.approx((5 + 4 + 5) / 3)
    assert alpha["milestones"]["reward_50"]["std"] == pytest.approx(statistics.stdev([5, 4, 5]))
    assert alpha["milestones"]["reward_90"]["mean"] == pytest.approx((9 + 7 + 9) / 3)
    assert beta["milestones"]["reward_50"]["mean"] == pytest.approx(3.0)  # L = 6: 3/5 >= 0.5

    md = (out / "summary.md").read_text()
    assert "alpha/tiny" in md and "0.6 ± 0.1 (n=3)" in md
    # Entropy has no better direction: its table calls the extreme a "max", accuracy's a "best".
    sections = {s.split("\n", 1)[0]: s for s in md.split("\n## ")[1:]}
    entropy = next(s for title, s in sections.items() if f"`{m.ENTROPY}`" in title)
    accuracy = next(s for title, s in sections.items() if f"`{m.REWARD_ACCURACY}`" in title)
    assert "| final | max | max is |" in entropy and "best" not in entropy
    assert "| final | best | best is |" in accuracy


def test_figures_are_images_with_lines(runs, tmp_path):
    out = tmp_path / "cmp"
    assert compare_main([str(runs), "--out", str(out)]) == 0  # a folder of runs works like a glob
    summary = json.loads((out / "summary.json").read_text())
    for name in summary["figures"]:
        with Image.open(out / name) as image:
            image.verify()  # a valid PNG
    assert summary["figures"][0] == "overview.png"
    # Panels only for what was logged: no eval panel, a clip panel (alpha has it).
    slugs = {p.name for p in out.glob("*.png")}
    assert "clip_upper_of_positive.png" in slugs or any("clip" in s for s in slugs)
    assert not any(s.startswith("eval") for s in slugs)
    assert "val_easy_accuracy.png" in slugs
    acc_png = out / "reward_accuracy.png"
    assert acc_png.is_file()
    # Both recipes' mean lines are drawn in their colours (a blank canvas has neither).
    assert _colour_pixels(acc_png, ALPHA_BLUE) > 100
    assert _colour_pixels(acc_png, BETA_ORANGE) > 100
    # Consistent colours: in the clip panel only alpha appears, still in alpha's blue.
    clip_png = next(out.glob("clip_upper*.png"))
    assert _colour_pixels(clip_png, ALPHA_BLUE) > 100
    assert _colour_pixels(clip_png, BETA_ORANGE) == 0


def test_std_band_and_variant_groups(runs, tmp_path):
    # A third recipe-alpha group that differs in lr must not merge with the seeds of the first.
    write_run(runs, "alpha_lr", 0, 5, 0.3, 0.0, clip=True, lr=1e-5)
    run_dir = runs / "alpha_lr" / "tiny" / "seed0"
    record = json.loads((run_dir / "run.json").read_text())
    record["recipe"] = "alpha"
    (run_dir / "run.json").write_text(json.dumps(record))
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["recipe"] = "alpha"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "cmp"
    assert compare_main([str(runs / "alpha*" / "tiny" / "seed*"), "--out", str(out), "--band", "std"]) == 0
    labels = sorted(g["label"] for g in json.loads((out / "summary.json").read_text())["groups"])
    assert labels == ["alpha/tiny (model.lr=1e-05)", "alpha/tiny (model.lr=1e-06)"]


def test_run_still_being_written(runs, tmp_path):
    # A run whose event file ends in half a record (the writer is mid-flush).
    from torch.utils.tensorboard import SummaryWriter

    run_dir = runs / "gamma" / "tiny" / "seed0"
    run_dir.mkdir(parents=True)
    writer = SummaryWriter(str(run_dir))
    for t in range(4):
        writer.add_scalar(m.REWARD_ACCURACY, 0.1 * t, t)
    writer.add_scalar("zz/last_record", 1.0, 3)
    writer.close()
    events = next(run_dir.glob("*tfevents*"))
    events.write_bytes(events.read_bytes()[:-7])
    out = tmp_path / "cmp"
    assert compare_main([str(runs / "gamma" / "tiny" / "seed*"), "--out", str(out)]) == 0
    group = json.loads((out / "summary.json").read_text())["groups"][0]
    assert group["quantities"][m.REWARD_ACCURACY]["final"]["mean"] == pytest.approx(0.3, abs=1e-6)
    assert group["quantities"][m.REWARD_ACCURACY]["final_step"]["mean"] == 3


def test_no_match_is_a_user_error(tmp_path, capsys):
    assert compare_main([str(tmp_path / "nothing*"), "--out", str(tmp_path / "cmp")]) == 2
    assert "no run directory" in capsys.readouterr().err


def test_unreadable_event_files_are_named_and_fail_when_nothing_is_readable(tmp_path, capsys):
    garbage = tmp_path / "runs" / "gamma" / "tiny" / "seed0"
    garbage.mkdir(parents=True)
    (garbage / "events.out.tfevents.1.host").write_bytes(bytes(range(256)) * 8)  # not TensorBoard records
    assert compare_main([str(garbage), "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert "none of the 1 runs has a readable TensorBoard event file" in err and str(garbage) in err
    good = write_run(tmp_path / "runs", "alpha", 0, 3, 0.5, 0.0, clip=False)
    assert compare_main([str(tmp_path / "runs"), "--out", str(tmp_path / "cmp")]) == 0
    captured = capsys.readouterr()
    assert "left out 1 runs" in captured.err and str(garbage) in captured.err
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["unreadable"] == [str(garbage)]
    assert [run for group in summary["groups"] for run in group["runs"]] == [str(good)]


def test_a_runs_validate_and_test_folders_are_part_of_it(tmp_path):
    """`validate`/`test` of a run's checkpoint log into <run>/validate and <run>/test: a folder of runs
    lists the run once, not its subfolders as runs of their own."""
    from torch.utils.tensorboard import SummaryWriter

    from lite_ppo.research.runs import find_runs

    run = write_run(tmp_path / "runs", "alpha", 0, 3, 0.5, 0.0, clip=False)
    for sub in ("validate", "test"):
        with SummaryWriter(str(run / sub)) as writer:
            writer.add_scalar(m.val_accuracy("easy"), 0.5, 2)
    assert [r.path for r in find_runs([str(tmp_path / "runs")])] == [run.resolve()]


# -- statistics: confidence intervals, Welch's test, factorial effects ---------------------------------
# The t quantile 0.975 at 2 degrees of freedom in closed form: at 2 df the quantile of p is
# (2p - 1) / sqrt(2p(1 - p)) (the t(2) CDF is 1/2 + t / (2 sqrt(2 + t^2))); 4.3027 in the tables.
T_975_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)


def welch_by_hand(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """(difference, CI low, CI high, two-sided p) from the textbook formulas: standard error
    sqrt(s_a²/n_a + s_b²/n_b), Welch-Satterthwaite degrees of freedom, Student's t distribution."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    diff = a.mean() - b.mean()
    q = stats.t.ppf(0.975, df)
    return diff, diff - q * se, diff + q * se, 2 * stats.t.sf(abs(diff) / se, df)


def test_mean_ci_is_the_t_interval():
    out = mean_ci([0.5, 0.6, 0.7])
    # By hand: mean 0.6, s = 0.1, s/sqrt(3) = 0.0577..., t(0.975, 2) from the table.
    half = T_975_DF2 * 0.1 / math.sqrt(3)
    assert out["mean"] == pytest.approx(0.6) and out["std"] == pytest.approx(0.1) and out["n"] == 3
    assert out["ci"] == pytest.approx([0.6 - half, 0.6 + half], abs=1e-12)
    # Against scipy's distribution API (not the one-sample test the code uses) on other vectors.
    for values in ([1.0, 2.0, 4.0, 8.0], [0.31, 0.29], [-3.5, 0.25, 0.5, 7.0, 11.0]):
        x = np.asarray(values)
        expected = stats.t.interval(0.95, x.size - 1, loc=x.mean(), scale=stats.sem(x))
        assert mean_ci(values)["ci"] == pytest.approx(list(expected), rel=1e-12)
    assert mean_ci([0.4]) == {"mean": 0.4, "std": None, "n": 1, "ci": None}  # one seed: no interval
    assert mean_ci([0.3, 0.3])["ci"] == [0.3, 0.3]  # no spread: the interval is the point
    assert mean_ci([])["mean"] is None


def test_welch_difference_matches_the_textbook_and_scipy():
    for a, b in (([0.5, 0.6, 0.7], [0.2, 0.4]), ([1.0, 1.5, 0.9, 1.2], [0.1, 0.4, 0.2]), ([3.0, 5.0], [4.0, 4.5])):
        diff, low, high, p = welch_by_hand(a, b)
        out = welch_difference(a, b)
        assert out["diff"] == pytest.approx(diff, abs=1e-12)
        assert out["ci"] == pytest.approx([low, high], rel=1e-9)
        assert out["p"] == pytest.approx(p, rel=1e-9)
        assert out["p"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)
        assert (out["n_a"], out["n_b"]) == (len(a), len(b))
    # A single run in a group: the difference, but no interval and no test.
    assert welch_difference([0.5], [0.2, 0.4]) == {
        "diff": pytest.approx(0.2),
        "ci": None,
        "p": None,
        "n_a": 1,
        "n_b": 2,
    }


def test_contrast_ci_is_a_one_sample_t_test():
    contrasts = [0.065, 0.115, 0.04]
    out = contrast_ci(contrasts)
    mean = sum(contrasts) / 3
    se = statistics.stdev(contrasts) / math.sqrt(3)
    assert out["estimate"] == pytest.approx(mean, abs=1e-12)
    assert out["ci"] == pytest.approx([mean - T_975_DF2 * se, mean + T_975_DF2 * se], rel=1e-9)
    assert out["p"] == pytest.approx(2 * stats.t.sf(mean / se, 2), rel=1e-9)
    assert contrast_ci([0.1, 0.1])["p"] is None  # equal contrasts: no test


# Cell values of a 2 x 2 (norm: g = reference, b; agg: t = reference, s) over seeds 0, 1, 2.
CELLS = {
    ("g", "t"): [0.40, 0.42, 0.47],
    ("b", "t"): [0.50, 0.55, 0.52],
    ("g", "s"): [0.38, 0.37, 0.42],
    ("b", "s"): [0.41, 0.47, 0.45],
}
# Per seed, by hand: norm b - g averaged over agg: ((b,t) - (g,t) + (b,s) - (g,s)) / 2.
NORM_CONTRASTS = [(0.10 + 0.03) / 2, (0.13 + 0.10) / 2, (0.05 + 0.03) / 2]
# agg s - t averaged over norm: ((g,s) - (g,t) + (b,s) - (b,t)) / 2.
AGG_CONTRASTS = [(-0.02 - 0.09) / 2, (-0.05 - 0.08) / 2, (-0.05 - 0.07) / 2]
# Interaction, the difference of differences: ((b,s) - (g,s)) - ((b,t) - (g,t)).
INTERACTION_CONTRASTS = [0.03 - 0.10, 0.10 - 0.13, 0.03 - 0.05]


def _t_interval(contrasts: list[float]) -> list[float]:
    x = np.asarray(contrasts)
    return list(stats.t.interval(0.95, x.size - 1, loc=x.mean(), scale=stats.sem(x)))


def test_factorial_effects_by_hand():
    values = {cell: dict(enumerate(ys)) for cell, ys in CELLS.items()}
    values[("g", "t")][3] = 0.9  # a seed that finished in one cell only: left out of every contrast
    out = effects(values, {"norm": ["g", "b"], "agg": ["t", "s"]})
    assert out["seeds"] == [0, 1, 2] and out["seeds_left_out"] == [3]
    (norm, agg), (inter,) = out["main_effects"], out["interactions"]
    assert (norm["factor"], norm["level"], norm["reference"]) == ("norm", "b", "g")
    assert norm["estimate"] == pytest.approx(0.22 / 3, abs=1e-12)  # (0.065 + 0.115 + 0.04) / 3
    assert norm["per_seed"] == pytest.approx(NORM_CONTRASTS, abs=1e-12)
    assert norm["ci"] == pytest.approx(_t_interval(NORM_CONTRASTS), rel=1e-9)
    assert agg["estimate"] == pytest.approx(-0.06, abs=1e-12)
    assert agg["ci"] == pytest.approx(_t_interval(AGG_CONTRASTS), rel=1e-9)
    assert inter["factors"] == ["norm", "agg"] and inter["levels"] == ["b", "s"]
    assert inter["estimate"] == pytest.approx(-0.04, abs=1e-12)
    assert inter["ci"] == pytest.approx(_t_interval(INTERACTION_CONTRASTS), rel=1e-9)
    assert inter["p"] == pytest.approx(stats.ttest_1samp(INTERACTION_CONTRASTS, 0).pvalue, rel=1e-9)
    cell_gt = next(c for c in out["cells"] if c["cell"] == {"norm": "g", "agg": "t"})
    assert cell_gt["mean"] == pytest.approx(statistics.mean(CELLS[("g", "t")]))  # seed 3 left out here too
    # Simple effects, by hand: norm b - g within each agg level, agg s - t within each norm level.
    simple = {(e["factor"], tuple(e["at"].items())): e for e in out["simple_effects"]}
    assert len(simple) == 4
    norm_at_s = simple[("norm", (("agg", "s"),))]
    assert norm_at_s["per_seed"] == pytest.approx([0.03, 0.10, 0.03], abs=1e-12)
    assert norm_at_s["ci"] == pytest.approx(_t_interval([0.03, 0.10, 0.03]), rel=1e-9)
    assert norm_at_s["p"] == pytest.approx(stats.ttest_1samp([0.03, 0.10, 0.03], 0).pvalue, rel=1e-9)
    assert simple[("norm", (("agg", "t"),))]["per_seed"] == pytest.approx([0.10, 0.13, 0.05], abs=1e-12)
    assert simple[("agg", (("norm", "b"),))]["per_seed"] == pytest.approx([-0.09, -0.08, -0.07], abs=1e-12)
    # The interaction is the difference of the two simple effects of norm.
    assert inter["estimate"] == pytest.approx(norm_at_s["estimate"] - simple[("norm", (("agg", "t"),))]["estimate"])


def test_three_level_factor_uses_the_first_level_as_reference():
    # y = level index of a (0, 1, 2) + 10 x level of b (0, 1), the same on both seeds: no interaction.
    values = {(a, b): {0: i + 10 * j, 1: i + 10 * j} for i, a in enumerate("xyz") for j, b in enumerate("uv")}
    out = effects(values, {"a": ["x", "y", "z"], "b": ["u", "v"]})
    assert [(e["factor"], e["level"], e["estimate"]) for e in out["main_effects"]] == [
        ("a", "y", 1.0),
        ("a", "z", 2.0),
        ("b", "v", 10.0),
    ]
    assert [e["estimate"] for e in out["interactions"]] == [0.0, 0.0]


def test_compute_axis_is_the_running_sum_before_each_step():
    table = {m.GENERATED_TOKENS: Series(np.arange(3), np.array([10.0, 20.0, 30.0]))}
    cum = cumulative(table, AXES["tokens"])
    assert cum.tolist() == [0.0, 10.0, 30.0, 60.0]
    # Step k (the policy after k updates) sits at the tokens of steps 0 .. k-1; past the run: no x.
    assert x_at(np.array([0, 1, 3, 4]), cum)[:3].tolist() == [0.0, 10.0, 60.0]
    assert np.isnan(x_at(np.array([4]), cum)[0])
    assert cumulative(table, AXES["step"]) is None and x_at(np.array([2, 5]), None).tolist() == [2.0, 5.0]
    gappy = {m.GENERATED_TOKENS: Series(np.array([0, 2]), np.array([10.0, 30.0]))}
    with pytest.raises(UserError, match="not at every step"):
        cumulative(gappy, AXES["tokens"], "runA")
    with pytest.raises(UserError, match="never logged time/step_s"):
        cumulative(table, AXES["seconds"], "runA")


# -- held-out score, checkpoint rule and pairwise tests through compare, on event files ----------------
def write_events(run_dir: Path, scalars: dict[str, dict[int, float]], record: dict) -> Path:
    """A run folder with ``scalars`` (tag -> step -> value) in an event file and ``record`` as run.json."""
    return pilot_runs.write_run(run_dir, scalars, **record)


# recipe -> seed -> (eval/average at steps 0, 2, 4; pooled-val deciding step; tokens per step)
SCORED = {
    "lite": {0: ((0.2, 0.5, 0.40), 4, 100), 1: ((0.2, 0.6, 0.50), 2, 100), 2: ((0.2, 0.4, 0.45), 4, 120)},
    "grpo": {0: ((0.2, 0.3, 0.30), 2, 300), 1: ((0.2, 0.5, 0.35), 2, 300), 2: ((0.2, 0.3, 0.20), 4, 260)},
}


def _scored_run(root: Path, recipe: str, seed: int) -> Path:
    evals, best_step, tokens = SCORED[recipe][seed]
    # Held-out tiers: easy (10 problems) and hard (30). Pooled = (10 easy + 30 hard) / 40. The pooled
    # maximum is at best_step although the unweighted tier mean ties there with the other step.
    other = 2 if best_step == 4 else 4
    easy = {0: 0.0, best_step: 0.6, other: 0.9}  # unweighted means: 0.45 and 0.45 (a tie)
    hard = {0: 0.0, best_step: 0.3, other: 0.0}  # pooled: (6 + 9) / 40 = 0.375 > (9 + 0) / 40 = 0.225
    scalars = {
        m.REWARD_ACCURACY: {k: 0.1 * k for k in range(4)},
        m.GENERATED_TOKENS: dict.fromkeys(range(4), float(tokens)),
        m.STEP_SECONDS: dict.fromkeys(range(4), 2.5),
        m.EVAL_AVERAGE_ACCURACY: dict(zip((0, 2, 4), evals)),
        m.val_accuracy("easy"): easy,
        m.val_accuracy("hard"): hard,
        "val/easy/num_problems": dict.fromkeys((0, 2, 4), 10.0),
        "val/hard/num_problems": dict.fromkeys((0, 2, 4), 30.0),
    }
    return write_events(root / recipe / "tiny" / f"seed{seed}", scalars, {"recipe": recipe, "seed": seed})


@pytest.fixture
def scored_runs(tmp_path) -> Path:
    root = tmp_path / "scored"
    for recipe, seeds in SCORED.items():
        for seed in seeds:
            _scored_run(root, recipe, seed)
    return root


def test_scores_pairs_and_checkpoint_rules(scored_runs, tmp_path):
    out = tmp_path / "cmp"
    assert compare_main([str(scored_runs), "--out", str(out), "--x", "tokens"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    score = summary["score"]
    assert score["tag"] == m.EVAL_AVERAGE_ACCURACY and score["checkpoint"] == "last"
    assert score["select_on"] == "val/*/accuracy"
    # Values go through float32 event files: 1e-6 is far above their rounding (~3e-8 at 0.5).
    lite_final, grpo_final = [0.40, 0.50, 0.45], [0.30, 0.35, 0.20]
    lite = score["groups"]["grpo/tiny"], score["groups"]["lite/tiny"]
    assert lite[1]["final"]["mean"] == pytest.approx(0.45, abs=1e-6)
    assert lite[1]["final"]["ci"] == pytest.approx(_t_interval(lite_final), abs=1e-6)
    # best: the eval score at the step where the problem-weighted pooled val accuracy peaks.
    lite_best, grpo_best = [0.40, 0.60, 0.45], [0.30, 0.50, 0.20]
    assert [r["best_step"] for r in lite[1]["runs"]] == [4, 2, 4]
    assert lite[1]["best"]["mean"] == pytest.approx(statistics.mean(lite_best), abs=1e-6)
    (pair,) = score["pairs"]
    assert (pair["a"], pair["b"]) == ("grpo/tiny", "lite/tiny")
    diff, low, high, p = welch_by_hand(grpo_final, lite_final)
    assert pair["final"]["diff"] == pytest.approx(diff, abs=1e-6)
    assert pair["final"]["ci"] == pytest.approx([low, high], abs=1e-5)
    assert pair["final"]["p"] == pytest.approx(p, abs=1e-5)
    diff, low, high, p = welch_by_hand(grpo_best, lite_best)
    assert pair["best"]["diff"] == pytest.approx(diff, abs=1e-6) and pair["best"]["p"] == pytest.approx(p, abs=1e-5)
    # Compute per run: 4 steps x tokens per step; 4 x 2.5 s.
    groups = {g["label"]: g for g in summary["groups"]}
    assert groups["lite/tiny"]["compute"]["tokens"]["mean"] == pytest.approx(4 * (100 + 100 + 120) / 3)
    assert groups["grpo/tiny"]["compute"]["seconds"]["mean"] == pytest.approx(10.0)
    assert summary["x"] == "tokens"
    md = (out / "summary.md").read_text()
    assert "Checkpoint rule `last`" in md and "Welch" in md and "| grpo/tiny | lite/tiny |" in md

    # --checkpoint best: selected on the pooled held-out tiers, reported on the benchmarks.
    best_out = tmp_path / "best"
    assert compare_main([str(scored_runs), "--out", str(best_out), "--checkpoint", "best"]) == 0
    rule = json.loads((best_out / "summary.json").read_text())["score"]["rule"]
    assert rule.startswith("Checkpoint rule `best`") and "val/*/accuracy" in rule


def test_selecting_and_reporting_on_the_same_problems_is_refused(scored_runs, tmp_path, capsys):
    args = [str(scored_runs), "--out", str(tmp_path / "cmp"), "--checkpoint", "best"]
    assert compare_main([*args, "--score", "val/easy/accuracy"]) == 2  # easy is part of the pooled selection split
    assert "share problems" in capsys.readouterr().err
    assert compare_main([*args, "--score", "val/hard/accuracy", "--select-on", "val/easy/accuracy"]) == 0
    assert compare_main([*args[:3], "--score", "eval/nothing/accuracy"]) == 2
    assert "no run logged it" in capsys.readouterr().err


def test_compute_axis_needs_the_per_step_scalar(runs, tmp_path, capsys):
    assert compare_main([str(runs), "--out", str(tmp_path / "cmp"), "--x", "tokens"]) == 2
    assert f"never logged {m.GENERATED_TOKENS}" in capsys.readouterr().err


def test_held_out_points_span_the_run_not_the_middle_of_the_axis(tmp_path):
    # One evaluation after training (step 15), as real runs have: the point sits at the right end of
    # an axis from 0, with a CI error bar, instead of alone in the middle of an axis 14.2-15.8.
    root = tmp_path / "runs"
    for seed, acc in ((0, 0.4), (1, 0.5), (2, 0.6)):
        scalars = {
            m.REWARD_ACCURACY: {k: 0.02 * k for k in range(15)},
            m.GENERATED_TOKENS: dict.fromkeys(range(15), 50.0),
            m.val_accuracy("easy"): {15: acc},
        }
        write_events(root / "alpha" / "tiny" / f"seed{seed}", scalars, {"recipe": "alpha", "seed": seed})
    for x in ("step", "tokens"):
        out = tmp_path / f"cmp_{x}"
        assert compare_main([str(root), "--out", str(out), "--x", x]) == 0
        pixels = np.asarray(Image.open(out / "val_easy_accuracy.png").convert("RGB")).astype(int)
        # Alpha's blue and its anti-aliased shades on white (grey grid lines have b ~ r).
        blue = pixels[..., 2] - pixels[..., 0] > 40
        # The error bar is the tallest blue column (the legend's marker is a few pixels high).
        bar = int(blue.sum(axis=0).argmax())
        assert bar > 0.75 * pixels.shape[1], f"--x {x}: held-out point at column {bar}, not at the axis end"
        assert blue[:, bar].sum() > 40, f"--x {x}: no error bar (3 seeds, CI 0.5 ± 0.25)"


def _factorial_run(root: Path, cell: tuple[str, str], seed: int, value: float) -> None:
    norm, agg = cell
    record = {
        "recipe": "lite",
        "seed": seed,
        "cell": {"norm": norm, "agg": agg},
        "factors": {"norm": ["g", "b"], "agg": ["t", "s"]},
    }
    scalars = {m.REWARD_ACCURACY: {0: 0.1, 1: 0.2}, m.EVAL_AVERAGE_ACCURACY: {0: 0.1, 2: value}}
    write_events(root / f"norm={norm}_agg={agg}" / "lite" / "tiny" / f"seed{seed}", scalars, record)


def test_factorial_effects_through_compare(tmp_path):
    root = tmp_path / "runs"
    for cell, ys in CELLS.items():
        for seed, y in enumerate(ys):
            _factorial_run(root, cell, seed, y)
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(g["label"] for g in summary["groups"]) == [
        "lite/tiny [norm=b, agg=s]",
        "lite/tiny [norm=b, agg=t]",
        "lite/tiny [norm=g, agg=s]",
        "lite/tiny [norm=g, agg=t]",
    ]
    (design,) = summary["factorial"]
    assert design["factors"] == {"norm": ["g", "b"], "agg": ["t", "s"]} and design["seeds"] == [0, 1, 2]
    assert "eval/average/accuracy" in design["response"]
    norm, agg = design["main_effects"]
    # float32 event values: contrasts of four values, each off by < 3e-8.
    assert norm["estimate"] == pytest.approx(0.22 / 3, abs=1e-6)
    assert agg["estimate"] == pytest.approx(-0.06, abs=1e-6)
    assert norm["ci"] == pytest.approx(_t_interval(NORM_CONTRASTS), abs=1e-5)
    (inter,) = design["interactions"]
    assert inter["estimate"] == pytest.approx(-0.04, abs=1e-6)
    assert inter["ci"] == pytest.approx(_t_interval(INTERACTION_CONTRASTS), abs=1e-5)
    md = (out / "summary.md").read_text()
    assert "## Factorial: lite/tiny, norm {g, b} × agg {t, s}" in md
    assert "| main: norm b − g | 0.07333 |" in md and "| interaction: norm b − g × agg s − t | -0.04 |" in md
    assert "| simple: norm b − g at agg=s | 0.05333 |" in md
    simple = next(e for e in design["simple_effects"] if e["at"] == {"agg": "s"} and e["factor"] == "norm")
    assert simple["mde"] > 0 and simple["verdict"]

    # A missing cell: no effects, and a note saying which.
    shutil.rmtree(root / "norm=b_agg=s")
    assert compare_main([str(root), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["factorial"] == [] and "no finished runs in cell" in summary["notes"][0]


def test_diverged_and_short_runs_are_left_out_and_said(tmp_path, capsys):
    """The issue's case: a group whose seeds ran 6 and 2 steps, a seed ending in NaN, one NaN throughout.
    Such runs leave every score and test by the stated rule; the console and summary.md name each."""
    nan = float("nan")
    root = tmp_path / "runs"

    def run(
        recipe: str,
        seed: int,
        steps: int,
        score: float,
        loss_end: float = 0.1,
        score_nan: bool = False,
        loss_nan_throughout: bool = False,
    ):
        loss = {k: (loss_end if k == steps - 1 else 0.1) for k in range(steps)}
        scalars = {
            m.REWARD_ACCURACY: {k: 0.5 for k in range(steps)},
            m.POLICY_LOSS: {k: nan for k in range(steps)} if loss_nan_throughout else loss,
            m.EVAL_AVERAGE_ACCURACY: {0: 0.2, steps: nan if score_nan else score},
        }
        write_events(root / recipe / "tiny" / f"seed{seed}", scalars, {"recipe": recipe, "seed": seed})

    # "short": seeds 0, 1 ran 6 steps, seed 2 only 2; "broke": seed 0 ends in NaN loss, seed 1's final
    # score is NaN (the last finite one, 0.2 at step 0, would be reported otherwise).
    run("short", 0, 6, 0.50)
    run("short", 1, 6, 0.54)
    run("short", 2, 2, 0.10)
    run("broke", 0, 6, 0.95, loss_end=nan)
    run("broke", 1, 6, 0.0, score_nan=True)
    run("broke", 2, 6, 0.40)
    run("broke", 3, 6, 0.44)
    run("broke", 4, 6, 0.99, loss_nan_throughout=True)  # its score would read best; it never trained
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    console = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    groups = {g["label"]: g for g in summary["groups"]}
    left = {(label, x["seed"]): x["why"] for label, g in groups.items() for x in g["left_out"]}
    assert set(left) == {("short/tiny", 2), ("broke/tiny", 0), ("broke/tiny", 1), ("broke/tiny", 4)}
    assert left[("broke/tiny", 4)] == "diverged: loss/policy is nan at step 5, never finite"
    assert left[("short/tiny", 2)].startswith("short: 2 training steps")
    assert left[("broke/tiny", 0)].startswith("diverged: loss/policy is nan")
    assert left[("broke/tiny", 1)].startswith("diverged: eval/average/accuracy is nan at step 6")
    # The scores are the kept seeds' only (float32 event values).
    scores = summary["score"]["groups"]
    assert scores["short/tiny"]["final"]["mean"] == pytest.approx(0.52, abs=1e-6)
    assert scores["broke/tiny"]["final"]["mean"] == pytest.approx(0.42, abs=1e-6)
    (pair,) = summary["score"]["pairs"]
    expected = stats.ttest_ind([0.40, 0.44], [0.50, 0.54], equal_var=False)
    sign = 1 if pair["a"] == "broke/tiny" else -1
    assert pair["final"]["diff"] == pytest.approx(sign * -0.10, abs=1e-6)
    assert pair["final"]["p"] == pytest.approx(expected.pvalue, rel=1e-4)
    for label, seed in left:
        assert f"group {label}: seed {seed} left out" in console
    md = (out / "summary.md").read_text()
    assert "seed 2: short: 2 training steps" in md and "Rule: runs left out" in md


def test_a_factor_that_sets_the_model_keeps_one_design(tmp_path):
    """``--factor init=base:models/a.yaml,aligned:models/b.yaml``: the cells' run folders and labels name
    different models, yet they are one 2 x 2 with its effects (the factor "norm" standing in for init)."""
    root = tmp_path / "runs"
    for (norm, agg), ys in CELLS.items():
        model = {"g": "base-model", "b": "aligned-model"}[norm]
        for seed, y in enumerate(ys):
            record = {
                "recipe": "lite",
                "seed": seed,
                "model": f"builtin:{model}",
                "model_name": model,
                "cell": {"norm": norm, "agg": agg},
                "factors": {"norm": ["g", "b"], "agg": ["t", "s"]},
            }
            scalars = {m.REWARD_ACCURACY: {0: 0.1, 1: 0.2}, m.EVAL_AVERAGE_ACCURACY: {0: 0.1, 2: y}}
            write_events(root / f"norm={norm}_agg={agg}" / "lite" / model / f"seed{seed}", scalars, record)
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert not [n for n in summary["notes"] if "no factorial effects" in n], summary["notes"]
    (design,) = summary["factorial"]
    assert "base-model" in design["base"] and "aligned-model" in design["base"]
    norm, _ = design["main_effects"]
    assert norm["estimate"] == pytest.approx(0.22 / 3, abs=1e-6)
    (inter,) = design["interactions"]
    assert inter["estimate"] == pytest.approx(-0.04, abs=1e-6)


def test_intervals_are_cut_at_each_quantitys_range(tmp_path, monkeypatch):
    """Two seeds far apart: the 95 % t-interval (t = 12.7) of an accuracy reaches below 0 % and above
    100 %, and of an entropy below 0; summary.md and the figures' bands stop at the quantity's range, and
    the last step gets no interval."""
    import matplotlib.axes

    root = tmp_path / "runs"
    for seed, (acc, ent) in enumerate([(0.05, 0.01), (0.95, 0.5)]):
        scalars = {
            m.REWARD_ACCURACY: {k: acc for k in range(3)},
            m.ENTROPY: {k: ent for k in range(3)},
            m.STEP_SECONDS: dict.fromkeys(range(3), 1.0 + 40 * seed),
        }
        write_events(root / "lite" / "tiny" / f"seed{seed}", scalars, {"recipe": "lite", "seed": seed})
    bands: list[tuple[float, float]] = []
    original = matplotlib.axes.Axes.fill_between

    def spy(self, x, low, high, *args, **kwargs):
        bands.append((float(np.min(low)), float(np.max(high))))
        return original(self, x, low, high, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between", spy)
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    group = json.loads((out / "summary.json").read_text())["groups"][0]
    raw = group["quantities"][m.REWARD_ACCURACY]["final"]["ci"]
    assert raw[0] < 0 and raw[1] > 1  # the interval itself, as computed
    md = (out / "summary.md").read_text()
    accuracy = next(line for line in md.splitlines() if line.startswith("| lite/tiny | 0.5 "))
    assert "[0, 1]" in accuracy and accuracy.rstrip(" |").endswith("(n=2)")  # last step: no interval
    entropy_row = [line for line in md.splitlines() if line.startswith("| lite/tiny | 0.255")][0]
    assert "[0, " in entropy_row
    compute = md.split("## Compute per run", 1)[1].splitlines()
    seconds = next(line for line in compute if line.startswith("| lite/tiny |")).split("|")[3]
    assert seconds.strip().startswith("63 ") and "[0, " in seconds  # 3 s and 123 s: the t-interval dips below 0
    assert bands and all(low >= 0 for low, _ in bands)  # percent for shares, nats for entropy: never below 0
    assert all(high <= 100.0 + 1e-9 for _, high in bands)  # the accuracy band stops at 100 %


def test_runs_that_share_a_seed_count_once_as_their_mean(scored_runs, tmp_path, capsys):
    """A resumed run and its uninterrupted twin (same seed) are not two samples: the group's n counts
    seeds, the seed's value is the mean of its runs, and the console says so."""
    twin = scored_runs / "lite" / "tiny" / "seed0-1"
    shutil.copytree(scored_runs / "lite" / "tiny" / "seed0", twin)
    for events in twin.glob("events.out.tfevents.*"):
        events.unlink()
    write_events(
        twin / "tb",
        {m.EVAL_AVERAGE_ACCURACY: {0: 0.2, 2: 0.5, 4: 0.60}, m.REWARD_ACCURACY: {k: 0.1 * k for k in range(4)}},
        {},
    )
    for events in (twin / "tb").glob("events.out.tfevents.*"):
        events.rename(twin / events.name)
    shutil.rmtree(twin / "tb")
    out = tmp_path / "cmp"
    assert compare_main([str(scored_runs), "--out", str(out)]) == 0
    assert "holds several runs with the same seed (counted once" in capsys.readouterr().out
    score = json.loads((out / "summary.json").read_text())["score"]
    lite = score["groups"]["lite/tiny"]
    per_seed = [(0.40 + 0.60) / 2, 0.50, 0.45]  # seed 0: the mean of its two runs
    assert lite["final"]["n"] == 3 and len(lite["runs"]) == 4
    assert lite["final"]["mean"] == pytest.approx(statistics.mean(per_seed), abs=1e-6)
    assert lite["final"]["ci"] == pytest.approx(_t_interval(per_seed), abs=1e-6)
    (pair,) = score["pairs"]
    diff, low, high, p = welch_by_hand([0.30, 0.35, 0.20], per_seed)
    assert pair["final"]["p"] == pytest.approx(p, abs=1e-5) and pair["final"]["ci"] == pytest.approx(
        [low, high], abs=1e-5
    )


def test_group_labels_name_the_technique_and_the_setting_that_differ(tmp_path):
    """Two groups of one recipe and model, one with ClipHigher added at the front of the callback list and
    a different lr: the label names the technique and the lr, not the shifted list indices of every
    callback after it (which took the first three places and cut the rest off)."""
    from lite_ppo.research.runs import Run, group_runs

    def config(callbacks, lr):
        return {
            "recipe": "lite_ppo",
            "model": {"model_path": "builtin:tiny", "lr": lr, "clip_eps": 0.2},
            "trainer": {"max_steps": 8, "callbacks": callbacks},
        }

    norm = {"class_path": "lite_ppo.callbacks.AdvantageNormalization", "init_args": {"std_scope": "batch"}}
    agg = {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}}
    higher = {"class_path": "lite_ppo.callbacks.ClipHigher", "init_args": {"eps_high": 0.28}}
    runs = [
        Run(tmp_path / "a" / "seed0", {"recipe": "lite_ppo", "model": "tiny", "seed": 0}, config([norm, agg], 1e-6)),
        Run(
            tmp_path / "b" / "seed0",
            {"recipe": "lite_ppo", "model": "tiny", "seed": 0},
            config([higher, norm, agg], 1e-5),
        ),
    ]
    labels = sorted(group.label for group in group_runs(runs))
    assert labels == [
        "lite_ppo/tiny (ClipHigher=-, model.lr=1e-06)",
        "lite_ppo/tiny (ClipHigher=on, model.lr=1e-05)",
    ]
    # An argument of a technique both have: named by the technique.
    runs[1].config = config([norm, {**agg, "init_args": {"mode": "seq-mean-token-mean"}}], 1e-6)
    labels = sorted(group.label for group in group_runs(runs))
    assert labels == [
        "lite_ppo/tiny (LossAggregation.mode=seq-mean-token-mean)",
        "lite_ppo/tiny (LossAggregation.mode=token-mean)",
    ]


def test_group_labels_show_a_section_that_is_set_in_one_group_and_not_in_the_other(tmp_path):
    """A section that is a mapping in one group and null in the other (adapters on one, none on the
    other) reads as its entries there, not as absent; values are shown whole, so two paths that share a
    long prefix stay apart."""
    from lite_ppo.research.runs import Run, group_runs

    record = {"recipe": "lite_ppo", "model": "tiny", "seed": 0}
    base = "/data/problems/a-long-common-prefix"
    runs = [
        Run(
            tmp_path / "a" / "seed0",
            record,
            {"model": {"model_path": "builtin:tiny", "lora": None}, "data": {"file": f"{base}-1.jsonl"}},
        ),
        Run(
            tmp_path / "b" / "seed0",
            record,
            {"model": {"model_path": "builtin:tiny", "lora": {"r": 8}}, "data": {"file": f"{base}-2.jsonl"}},
        ),
    ]
    assert sorted(group.label for group in group_runs(runs)) == [
        f"lite_ppo/tiny (data.file={base}-1.jsonl, model.lora=null)",
        f'lite_ppo/tiny (data.file={base}-2.jsonl, model.lora={{"r": 8}})',
    ]
