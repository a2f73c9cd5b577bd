"""``lite-ppo sweep``: a 2 recipes x 2 seeds grid of 2-step tiny runs, each in its own process and
named run directory; a re-run after deleting one run re-runs only that one; ``--emit-slurm`` writes
scripts naming every run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from lite_ppo.research.grid import expand_grid
from lite_ppo.research.sweep import main as sweep_main

RECIPES = [str(REPO / "configs/recipes/lite_ppo.yaml"), str(REPO / "configs/recipes/grpo.yaml")]
TINY = str(REPO / "configs/models/tiny.yaml")
# Keep every run tiny: 2 steps of 2 prompts x 4 samples, 4 new tokens, no periodic checkpoints.
SMALL = [
    "--data.steps_per_epoch=2",
    "--data.prompts_per_step=2",
    "--rollout.sampling.max_new_tokens=4",
    "--rollout.eval_sampling.max_new_tokens=4",
]
RUN_JSON_FIELDS = {
    "recipe",
    "model",
    "model_name",
    "seed",
    "data",
    "sweep_key",
    "status",
    "started",
    "ended",
    "steps",
    "global_step",
    "versions",
    "git_commit",
}


def _args(out: Path, *extra: str) -> list[str]:
    return ["--recipe", *RECIPES, "--seed", "0", "1", "--config", TINY, "--out", str(out), *extra, "--", *SMALL]


@pytest.mark.slow
def test_sweep_runs_grid_resumes_and_compares(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "sweep"
    assert sweep_main(_args(out)) == 0
    run_dirs = {p.parent.relative_to(out).as_posix() for p in out.rglob("run.json")}
    assert run_dirs == {
        "lite_ppo/tiny-arith/seed0",
        "lite_ppo/tiny-arith/seed1",
        "grpo/tiny-arith/seed0",
        "grpo/tiny-arith/seed1",
    }
    for rel in run_dirs:
        run_dir = out / rel
        record = json.loads((run_dir / "run.json").read_text())
        assert RUN_JSON_FIELDS <= set(record), f"{rel}: run.json lacks {RUN_JSON_FIELDS - set(record)}"
        assert record["status"] == "finished"
        assert record["steps"] == 2
        assert record["recipe"] == rel.split("/")[0] and record["model_name"] == "tiny-arith"
        assert record["seed"] == int(rel[-1])
        assert record["ended"] >= record["started"]
        assert record["versions"]["torch"] and record["versions"]["lightning"] and record["versions"]["lite-ppo"]
        assert (run_dir / "config.yaml").is_file() and any(run_dir.glob("events.out.tfevents.*"))
        # The seed reaches the data order and the sampling, not only torch's global RNG.
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["seed_everything"] == config["data"]["seed"] == config["rollout"]["seed"] == record["seed"]
    summary = json.loads((out / "compare" / "summary.json").read_text())
    assert sorted(g["label"] for g in summary["groups"]) == ["grpo/tiny-arith", "lite_ppo/tiny-arith"]
    assert all(g["seeds"] == [0, 1] for g in summary["groups"])

    # Interrupted sweep: one run is gone; only that one runs again, into the same name.
    shutil.rmtree(out / "grpo/tiny-arith/seed1")
    mtimes = {rel: (out / rel / "run.json").stat().st_mtime_ns for rel in run_dirs if rel != "grpo/tiny-arith/seed1"}
    capsys.readouterr()
    assert sweep_main(_args(out)) == 0
    log = capsys.readouterr().out
    assert "1 run now, 3 skipped" in log
    assert json.loads((out / "grpo/tiny-arith/seed1/run.json").read_text())["status"] == "finished"
    for rel, mtime in mtimes.items():
        assert (out / rel / "run.json").stat().st_mtime_ns == mtime, f"{rel} was run again"

    # Everything finished: --emit-slurm has nothing left to write.
    assert sweep_main(_args(out, "--emit-slurm", str(tmp_path / "slurm"))) == 0
    assert "nothing to emit" in capsys.readouterr().out


def test_unfinished_run_is_rerun_into_a_fresh_folder(tmp_path):
    # A run.json left "running" by a killed process does not count as done.
    from lite_ppo.research.sweep import finished_run

    point = expand_grid(RECIPES[:1], [0], [TINY])[0]
    stale = tmp_path / "lite_ppo/tiny/seed0"
    stale.mkdir(parents=True)
    (stale / "run.json").write_text(
        json.dumps({"sweep_key": point.sweep_key, "status": "running", "started": "2026-01-01T00:00:00+00:00"})
    )
    assert finished_run(point, tmp_path) is None
    done = tmp_path / "lite_ppo/tiny/seed0-1"
    done.mkdir(parents=True)
    (done / "run.json").write_text(
        json.dumps({"sweep_key": point.sweep_key, "status": "finished", "started": "2026-01-02T00:00:00+00:00"})
    )
    assert finished_run(point, tmp_path) == done
    other = expand_grid(RECIPES[:1], [1], [TINY])[0]
    assert finished_run(other, tmp_path) is None  # another seed's key does not match


def test_emit_slurm_names_every_run(tmp_path, capsys):
    slurm = tmp_path / "slurm"
    out = tmp_path / "runs"
    assert sweep_main(_args(out, "--emit-slurm", str(slurm), "--sbatch-option=--gres=gpu:8")) == 0
    scripts = sorted(slurm.glob("*.sh"))
    assert len(scripts) == 4
    texts = [s.read_text() for s in scripts]
    for recipe in RECIPES:
        for seed in (0, 1):
            matching = [t for t in texts if f"--config {recipe} " in t and f"--seed_everything={seed} " in t]
            assert len(matching) == 1, f"no single script runs {recipe} seed {seed}"
    for text in texts:
        assert "-m lite_ppo.cli fit" in text and f"--trainer.logger.init_args.save_dir={out}" in text
        assert all(arg in text for arg in SMALL)
    array = (slurm / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-3" in array and "#SBATCH --gres=gpu:8" in array
    assert all(s.name in array for s in scripts)
    assert not out.exists(), "--emit-slurm must not run anything"


def test_grid_axes_multiply_and_name_variants(tmp_path):
    points = expand_grid(RECIPES, [0, 1], [TINY], grid_overrides=["model.lr=1e-4,1e-5"])
    assert len(points) == 2 * 2 * 2
    assert len({p.sweep_key for p in points}) == 8
    assert {p.variant for p in points} == {"model.lr=1e-4", "model.lr=1e-5"}
    assert points[0].save_dir(tmp_path) == tmp_path / "model.lr=1e-4"
    assert "--model.lr=1e-4" in points[0].fit_args(tmp_path)


def test_missing_recipe_is_a_user_error(tmp_path, capsys):
    assert sweep_main(["--recipe", str(tmp_path / "nope.yaml"), "--out", str(tmp_path)]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_a_seed_sets_the_data_and_sampling_seeds_unless_overridden(tmp_path):
    """Seed 1 and seed 2 of a pretrained model differ only through the data order and the sampling:
    a sweep whose seed reached only ``seed_everything`` ran the same run twice."""
    point = expand_grid(RECIPES[:1], [7], [TINY])[0]
    args = point.fit_args(tmp_path)
    assert {"--seed_everything=7", "--data.seed=7", "--rollout.seed=7"} <= set(args)
    overridden = expand_grid(RECIPES[:1], [7], [TINY], overrides=["--data.seed=3"])[0].fit_args(tmp_path)
    assert overridden.index("--data.seed=3") > overridden.index("--data.seed=7")  # the later value wins in jsonargparse
