"""``lite-ppo compare`` on event files written here with known values: seed grouping, unequal
lengths, a scalar one recipe never logs, a run still being written; summary numbers checked against
hand-computed ones, figures checked to be real images with the plotted lines on them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from lite_ppo import metric_names as m
from lite_ppo.research.compare import main as compare_main

ALPHA_BLUE = (0x1F, 0x77, 0xB4)  # tab10[0]: the first recipe in sorted order ("alpha")
BETA_ORANGE = (0xFF, 0x7F, 0x0E)  # tab10[1]: "beta"

# recipe -> seed -> (steps, final training accuracy, entropy offset)
RUNS = {
    "alpha": {0: (10, 0.5, 0.0), 1: (8, 0.6, 0.1), 2: (10, 0.7, 0.2)},
    "beta": {0: (6, 0.2, 0.0), 1: (6, 0.4, 0.3)},
}


def accuracy(step: int, steps: int, final: float) -> float:
    """A linear ramp from 0 to ``final`` over the run (first step 0, last step ``steps - 1``)."""
    return final * step / (steps - 1)


def write_run(
    root: Path, recipe: str, seed: int, steps: int, final: float, offset: float, *, clip: bool, lr: float = 1e-6
) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    run_dir = root / recipe / "tiny" / f"seed{seed}"
    run_dir.mkdir(parents=True)
    writer = SummaryWriter(str(run_dir))
    for t in range(steps):
        writer.add_scalar(m.REWARD_ACCURACY, accuracy(t, steps, final), t)
        writer.add_scalar(m.ENTROPY, 1.0 + offset - 0.05 * t, t)
        writer.add_scalar(m.RESPONSE_LENGTH, 100.0 + 10 * t + seed, t)
        writer.add_scalar(m.TRUNCATION_RATE, 0.1 - 0.01 * t, t)
        if clip:
            writer.add_scalar(m.CLIP_UPPER_POSITIVE, 0.02, t)
    if clip:  # held-out accuracy before training and at the end (alpha only)
        writer.add_scalar(m.val_accuracy("easy"), 0.2, 0)
        writer.add_scalar(m.val_accuracy("easy"), 0.3 + 0.1 * seed, steps - 1)
    writer.close()
    (run_dir / "run.json").write_text(
        json.dumps(
            {"recipe": recipe, "model": "builtin:tiny", "model_name": "tiny", "seed": seed, "status": "finished"}
        )
    )
    config = {
        "seed_everything": seed,
        "recipe": recipe,
        "model": {"model_path": "builtin:tiny", "lr": lr},
        "data": {"seed": seed},
    }
    config["trainer"] = {"logger": {"init_args": {"version": f"seed{seed}"}}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


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
