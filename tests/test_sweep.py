"""``lite-ppo sweep``: a 2 x 2 factorial (Lite PPO's normalization x aggregation) x 2 seeds of 2-step
runs on the testbed, each in its own process and named run directory, compared over generated tokens
with factorial effects checked by hand from the event files; a re-run after deleting one run re-runs only
that one; ``--emit-slurm`` writes scripts naming every run; factor levels merge into the recipe's
callbacks by class."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from helpers.fits import read_scalars
from helpers.paths import REPO
from lite_ppo import metric_names as names
from lite_ppo.research.factors import cell_config
from lite_ppo.research.grid import expand_grid
from lite_ppo.research.sweep import main as sweep_main

RECIPES = [str(REPO / "configs/recipes/lite_ppo.yaml"), str(REPO / "configs/recipes/grpo.yaml")]
TINY = str(REPO / "configs/models/tiny.yaml")
# Keep every run tiny: 2 steps of 2 prompts x 4 samples, 4 new tokens, 4 held-out problems per tier,
# no periodic checkpoints.
SMALL = [
    "--data.steps_per_epoch=2",
    "--data.prompts_per_step=2",
    "--rollout.sampling.max_new_tokens=4",
    "--rollout.eval_sampling.max_new_tokens=4",
    "--data.val_size=4",
]
TESTBED = str(REPO / "configs/models/testbed_base.yaml")
# The testbed as shipped (80 new tokens: lengths spread, some truncated), 2 steps of 4 prompts x 8
# samples, 4 held-out problems per tier.
TESTBED_SMALL = ["--data.steps_per_epoch=2", "--data.prompts_per_step=4", "--data.val_size=4"]
FACTORS = REPO / "configs/factors"
NORM = f"norm=group_std:{FACTORS / 'norm_group_std.yaml'},batch_std:{FACTORS / 'norm_batch_std.yaml'}"
AGG = f"agg=token:{FACTORS / 'agg_token.yaml'},seq:{FACTORS / 'agg_seq.yaml'}"
# The settings each level stands for, read back from a run's config.yaml.
LEVELS = {
    ("norm", "group_std"): ("AdvantageNormalization", {"mean_scope": "group", "std_scope": "group"}),
    ("norm", "batch_std"): ("AdvantageNormalization", {"mean_scope": "group", "std_scope": "batch"}),
    ("agg", "token"): ("LossAggregation", {"mode": "token-mean"}),
    ("agg", "seq"): ("LossAggregation", {"mode": "seq-mean-token-mean"}),
}
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


def _factorial_args(out: Path, *extra: str) -> list[str]:
    return [
        *("--recipe", RECIPES[0], "--seed", "0", "1", "--config", TESTBED, "--factor", NORM, "--factor", AGG),
        *("--out", str(out), "--compare-args=--x tokens", *extra, "--", *TESTBED_SMALL),
    ]


def _last(scalars: dict, tag: str) -> float:
    return scalars[tag][-1][1]


def _pooled_held_out(scalars: dict) -> float:
    """The accuracy over all held-out problems at the last validation, from the tiers' own tags."""
    tiers = [tag.split("/")[1] for tag in scalars if tag.startswith("val/") and tag.endswith("/accuracy")]
    problems = {t: _last(scalars, f"val/{t}/num_problems") for t in tiers}
    return sum(_last(scalars, f"val/{t}/accuracy") * problems[t] for t in tiers) / sum(problems.values())


def _callbacks(config: dict) -> dict[str, dict]:
    return {cb["class_path"].rsplit(".", 1)[-1]: cb.get("init_args") or {} for cb in config["trainer"]["callbacks"]}


@pytest.mark.extended
@pytest.mark.slow
def test_factorial_sweep_runs_resumes_and_compares(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert sweep_main(_factorial_args(out)) == 0
    run_dirs = {p.parent.relative_to(out).as_posix() for p in out.rglob("run.json")}
    cells = [(n, a) for n in ("group_std", "batch_std") for a in ("token", "seq")]
    assert run_dirs == {f"norm={n}_agg={a}/lite_ppo/testbed-base/seed{s}" for n, a in cells for s in (0, 1)}
    held_out, tokens = {}, {}  # (norm, agg) -> seed -> the run's value, read from its event file
    for rel in run_dirs:
        run_dir = out / rel
        record = json.loads((run_dir / "run.json").read_text())
        assert RUN_JSON_FIELDS <= set(record), f"{rel}: run.json lacks {RUN_JSON_FIELDS - set(record)}"
        assert record["status"] == "finished"
        assert record["steps"] == 2
        assert record["recipe"] == "lite_ppo" and record["model_name"] == "testbed-base"
        assert record["seed"] == int(rel[-1])
        assert record["ended"] >= record["started"]
        assert record["versions"]["torch"] and record["versions"]["lightning"] and record["versions"]["lite-ppo"]
        assert (run_dir / "config.yaml").is_file() and any(run_dir.glob("events.out.tfevents.*"))
        # The cell is named in the folder and in run.json, and its settings reached the run's config.
        assert f"norm={record['cell']['norm']}_agg={record['cell']['agg']}" == rel.split("/")[0]
        assert record["factors"] == {"norm": ["group_std", "batch_std"], "agg": ["token", "seq"]}
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        callbacks = _callbacks(config)
        for factor, level in record["cell"].items():
            name, settings = LEVELS[(factor, level)]
            assert settings.items() <= callbacks[name].items(), f"{rel}: {name} is {callbacks[name]}"
        assert "ModelCheckpoint" in callbacks  # the recipe's other callbacks stay
        # The seed reaches the data order and the sampling, not only torch's global RNG.
        assert config["seed_everything"] == config["data"]["seed"] == config["rollout"]["seed"] == record["seed"]
        scalars = read_scalars(run_dir)
        cell = (record["cell"]["norm"], record["cell"]["agg"])
        held_out.setdefault(cell, {})[record["seed"]] = _pooled_held_out(scalars)
        tokens.setdefault(cell, {})[record["seed"]] = sum(v for _, v in scalars[names.GENERATED_TOKENS])
        # The testbed's responses vary in length (at most 80 tokens each, 2 steps x 4 prompts x 8 samples).
        assert 2 * 32 <= tokens[cell][record["seed"]] < 2 * 32 * 80
    summary = json.loads((out / "compare" / "summary.json").read_text())
    assert summary["x"] == "tokens" and summary["figures"][0] == "overview.png"
    assert all((out / "compare" / name).is_file() for name in summary["figures"])
    label = "lite_ppo/testbed-base [norm={}, agg={}]"
    assert sorted(g["label"] for g in summary["groups"]) == sorted(label.format(n, a) for n, a in cells)
    for group in summary["groups"]:
        assert group["seeds"] == [0, 1]
        cell = tuple(group["label"].split("[")[1].rstrip("]").replace("norm=", "").replace("agg=", "").split(", "))
        # The compute axis: the tokens the run generated, its mean over the seeds (and its CI).
        assert group["compute"]["tokens"]["mean"] == pytest.approx((tokens[cell][0] + tokens[cell][1]) / 2)
        assert group["compute"]["tokens"]["ci"] is not None
        final = summary["score"]["groups"][group["label"]]["final"]
        assert final["mean"] == pytest.approx((held_out[cell][0] + held_out[cell][1]) / 2)
        assert final["ci"] is not None
    assert any(v > 0 for seeds in held_out.values() for v in seeds.values())  # the testbed answers some right
    # Main effects and interaction against the same contrasts computed here, seed by seed.
    (design,) = summary["factorial"]
    assert design["seeds"] == [0, 1] and "val/*/accuracy" in design["response"]
    y = {cell: [held_out[cell][s] for s in (0, 1)] for cell in held_out}
    norm_effect = [
        (
            (y["batch_std", "token"][s] - y["group_std", "token"][s])
            + (y["batch_std", "seq"][s] - y["group_std", "seq"][s])
        )
        / 2
        for s in (0, 1)
    ]
    agg_effect = [
        (
            (y["group_std", "seq"][s] - y["group_std", "token"][s])
            + (y["batch_std", "seq"][s] - y["batch_std", "token"][s])
        )
        / 2
        for s in (0, 1)
    ]
    interaction = [
        (y["batch_std", "seq"][s] - y["group_std", "seq"][s])
        - (y["batch_std", "token"][s] - y["group_std", "token"][s])
        for s in (0, 1)
    ]
    effects = {(e["factor"], e["level"]): e for e in design["main_effects"]}
    assert set(effects) == {("norm", "batch_std"), ("agg", "seq")}
    assert effects["norm", "batch_std"]["per_seed"] == pytest.approx(norm_effect)
    assert effects["agg", "seq"]["per_seed"] == pytest.approx(agg_effect)
    assert effects["norm", "batch_std"]["estimate"] == pytest.approx(sum(norm_effect) / 2)
    (inter,) = design["interactions"]
    assert inter["estimate"] == pytest.approx(sum(interaction) / 2)
    assert all(e["ci"] is not None for e in design["main_effects"])
    assert len(summary["score"]["pairs"]) == 6  # every pair of the 4 cells

    # Interrupted sweep: one run is gone; only that one runs again, into the same name.
    gone = "norm=batch_std_agg=seq/lite_ppo/testbed-base/seed1"
    shutil.rmtree(out / gone)
    mtimes = {rel: (out / rel / "run.json").stat().st_mtime_ns for rel in run_dirs if rel != gone}
    capsys.readouterr()
    assert sweep_main(_factorial_args(out)) == 0
    log = capsys.readouterr().out
    assert "1 run now, 7 skipped" in log
    assert json.loads((out / gone / "run.json").read_text())["status"] == "finished"
    for rel, mtime in mtimes.items():
        assert (out / rel / "run.json").stat().st_mtime_ns == mtime, f"{rel} was run again"

    # Everything finished: --emit-slurm has nothing left to write.
    assert sweep_main(_factorial_args(out, "--emit-slurm", str(tmp_path / "slurm"))) == 0
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


@pytest.mark.extended
@pytest.mark.slow
def test_sigterm_to_a_sweep_stops_its_running_fit_and_a_rerun_resumes_it(tmp_path, tiny_model_path):
    """SIGTERM to the sweep reaches the running fit, which saves last.ckpt and exits; the sweep
    waits for it, starts no other point (a second seed waits) and exits 143, and no process of the sweep
    is left running. The run records ``interrupted`` with its checkpoint, and the same sweep command again
    continues that run from it, in its folder, to the end, then runs the second seed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil
    import torch

    from lite_ppo.reliability.checkpoint_io import checkpoint_problem

    marker = tmp_path / "steps_done"
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable, "-m", "lite_ppo.research.sweep", "--recipe", RECIPES[0], "--seed", "0", "1", "--config",
        TINY, "--out", str(out), "--no-compare", "--", *SMALL, "--data.steps_per_epoch=12",
        "--trainer.callbacks+=helpers.reliability_faults.StepMarker", f"--trainer.callbacks.path={marker}",
    ]  # fmt: skip
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not marker.exists() and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), sweep.communicate(timeout=60)[0][-3000:]
    children = psutil.Process(sweep.pid).children(recursive=True)
    assert children  # the fit of the grid point
    sweep.send_signal(signal.SIGTERM)
    try:
        output = sweep.communicate(timeout=180)[0]
    finally:
        if sweep.poll() is None:  # it hung waiting for the second seed (issue 62): end it, report below
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped by SIGTERM" in output and "_seed1" not in output  # the second seed never started
    assert "its checkpoint and log" in output
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    (last,) = out.rglob("last.ckpt")
    assert checkpoint_problem(last) is None
    assert int(marker.read_text()) >= 1
    # At least the rollout step the marker counted (2 optimizer steps) is in it.
    stopped_at = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    assert 2 <= stopped_at < 12 * 2
    run_dir = last.parent.parent
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and record["error"] == "stopped by SIGTERM", record
    assert Path(record["checkpoint"]) == last.resolve()

    # The same command again: the run continues from its checkpoint, in its folder.
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert f"resuming from {last.resolve()}" in again.stdout
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["seed0", "seed1"]  # no seed0-1
    assert json.loads((run_dir.parent / "seed1" / "run.json").read_text())["status"] == "finished"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished" and len(record["resumed"]) == 1 and record["steps"] == 12, record
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 12 * 2


_HOLDING_FIT = """\
import os, pathlib, signal, sys, time
# A stand-in for `python -m lite_ppo.cli fit ...`: says it started, then trains until a signal stops it
# (a real fit saves its checkpoint and exits 128 + the signal number).
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
pathlib.Path(os.environ["STARTED"], str(os.getpid())).write_text(" ".join(sys.argv[1:]))
time.sleep(300)
"""


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_signalled_sweep_with_points_still_to_start_exits_143(tmp_path, parallel):
    """SIGTERM while the first point(s) of three run: the running ones get it and stop, none of the
    others starts and the sweep exits 143 within seconds (it waited forever for the points still to start,
    ignoring further signals: issue 62). The runs are stand-ins started as processes (``--python``)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!{sys.executable}\n{_HOLDING_FIT}")
    fake_python.chmod(0o755)
    started = tmp_path / "started"
    started.mkdir()
    command = [
        sys.executable, "-m", "lite_ppo.research.sweep", "--recipe", RECIPES[0], "--seed", "1", "2", "3",
        "--config", TINY, "--out", str(tmp_path / "out"), "--no-compare", "--python", str(fake_python),
        "--launch", "process", "--parallel", str(parallel), *(["--threads", "1"] if parallel > 1 else []),
    ]  # fmt: skip
    env = {**os.environ, "STARTED": str(started)}
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < parallel and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(started.iterdir())) == parallel, sweep.communicate(timeout=60)[0][-3000:]
        children = psutil.Process(sweep.pid).children(recursive=True)
        sweep.send_signal(signal.SIGTERM)
        output = sweep.communicate(timeout=60)[0]
    finally:
        if sweep.poll() is None:  # the hang: end it, so the failure below is reported, not a stuck suite
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert output.count("stopped by SIGTERM") == parallel, output[-3000:]
    assert output.count("no checkpoint yet") == parallel  # the stand-ins save none: not said to have one
    assert len(list(started.iterdir())) == parallel  # no point started after the signal
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_stopped_run_resumes_and_a_failed_one_starts_over(tmp_path):
    """Which earlier run of a point the sweep continues: an interrupted one (its recorded checkpoint),
    a "running" one whose process is gone from this host (its last.ckpt); never a failed one, a live
    one, or one without a checkpoint."""
    import subprocess
    import sys

    from lite_ppo.research.sweep import resumable_run

    point = expand_grid(RECIPES[:1], [0], [TINY])[0]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs (reaped)

    def run(name: str, has_last: bool = True, **record) -> tuple[Path, Path]:
        folder = tmp_path / "lite_ppo/tiny" / name
        (folder / "checkpoints").mkdir(parents=True)
        ckpt = folder / "checkpoints/last.ckpt"
        if has_last:
            ckpt.write_bytes(b"x")
        (folder / "run.json").write_text(json.dumps({"sweep_key": point.sweep_key, **record}))
        return folder, ckpt

    host = __import__("socket").gethostname()
    run("seed0", status="failed", started="2026-01-01", error="RuntimeError: boom")
    assert resumable_run(point, tmp_path) is None
    live, _ = run("seed0-1", status="running", started="2026-01-02", host=host, pid=__import__("os").getpid())
    assert resumable_run(point, tmp_path) is None  # this very process: alive
    other_host, _ = run("seed0-2", status="running", started="2026-01-03", host=host + "-elsewhere", pid=dead.pid)
    assert resumable_run(point, tmp_path) is None  # another machine's run: not known to be gone
    gone, gone_ckpt = run("seed0-3", status="running", started="2026-01-04", host=host, pid=dead.pid)
    assert resumable_run(point, tmp_path) == (gone, gone_ckpt)
    recorded = tmp_path / "elsewhere.ckpt"
    recorded.write_bytes(b"x")
    stopped, _ = run("seed0-4", status="interrupted", started="2026-01-05", checkpoint=str(recorded))
    assert resumable_run(point, tmp_path) == (stopped, recorded)  # the newest, by its recorded checkpoint
    run("seed0-5", has_last=False, status="interrupted", started="2026-01-06", checkpoint=None)
    assert resumable_run(point, tmp_path) == (stopped, recorded)  # nothing to resume from: the older one
    run("seed0-6", status="finished", started="2026-01-07")
    assert resumable_run(point, tmp_path) is None  # done


def test_factor_levels_merge_into_the_recipes_callbacks_by_class(tmp_path):
    points = expand_grid(RECIPES[:1], [0, 1], [TINY], factors=[NORM, AGG], grid_overrides=["model.lr=1e-4,1e-5"])
    assert len(points) == 2 * 2 * 2 * 2 and len({p.sweep_key for p in points}) == 16
    assert points[0].variant == "norm=group_std_agg=token_model.lr=1e-4"
    assert points[0].save_dir(tmp_path) == tmp_path / "norm=group_std_agg=token_model.lr=1e-4"
    args = points[0].fit_args(tmp_path)
    assert '--run_record.cell={"norm": "group_std", "agg": "token"}' in args
    assert '--run_record.factors={"norm": ["group_std", "batch_std"], "agg": ["token", "seq"]}' in args
    # The cell's config follows the recipe and --config: the recipe's callback list with the two levels'
    # settings merged in by class (LightningCLI alone would replace the list with the last fragment's).
    inline_text = points[0].configs[-1]
    assert args[args.index(inline_text) - 1] == "--config" and args.index(inline_text) < args.index("--model.lr=1e-4")
    inline = json.loads(inline_text)
    callbacks = _callbacks(inline)
    assert callbacks["AdvantageNormalization"] == {"mean_scope": "group", "std_scope": "group"}
    assert callbacks["LossAggregation"] == {"mode": "token-mean"}
    recipe = yaml.safe_load(Path(RECIPES[0]).read_text())
    assert [c["class_path"] for c in inline["trainer"]["callbacks"]] == [
        c["class_path"] for c in recipe["trainer"]["callbacks"]
    ]
    assert callbacks["ModelCheckpoint"] == recipe["trainer"]["callbacks"][-1]["init_args"]


def test_cell_config_appends_a_new_technique_and_keeps_other_settings(tmp_path):
    fragment = tmp_path / "filter.yaml"
    fragment.write_text(
        "model: {clip_eps: 0.28}\n"
        "trainer:\n  callbacks:\n    - class_path: lite_ppo.callbacks.OverlongFilter\n"
        "    - class_path: AdvantageNormalization\n      init_args: {std_scope: none}\n"
    )
    merged = cell_config([RECIPES[0], TINY], [str(fragment)])
    assert merged["model"] == {"clip_eps": 0.28}
    classes = [c["class_path"] for c in merged["trainer"]["callbacks"]]
    assert classes[-1] == "lite_ppo.callbacks.OverlongFilter" and len(classes) == 4
    # A short class name matches the recipe's entry, and only the named argument changes.
    norm = merged["trainer"]["callbacks"][0]
    assert norm["class_path"] == "lite_ppo.callbacks.AdvantageNormalization"
    assert norm["init_args"] == {"mean_scope": "group", "std_scope": "none"}
    assert cell_config([RECIPES[0]], []) == {}


@pytest.mark.parametrize(
    "factor, message",
    [
        ("norm", "expected NAME=LEVEL"),
        ("norm=a:missing.yaml,b", "does not exist"),
        ("norm=a", "two or more levels"),
        ("norm=a,a", "two or more levels"),
        ("norm=a b,c", "level name"),
        # the colon forgotten: two levels named after files would both run the recipe unchanged
        ("norm=configs/factors/norm_group_std.yaml,configs/factors/norm_batch_std.yaml", "level name"),
        ("norm=norm_group_std.yaml,norm_batch_std.yaml", "names a file, not a level"),
        ("norm=a:BAD_YAML,b", "cannot read it as YAML"),
    ],
)
def test_bad_factor_is_a_user_error(tmp_path, capsys, factor, message):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("trainer:\n  callbacks: [\n    - {class_path: x\n")
    factor = factor.replace("BAD_YAML", str(bad_yaml))
    code = sweep_main(
        ["--recipe", RECIPES[0], "--factor", factor, "--out", str(tmp_path), "--emit-slurm", str(tmp_path / "x")]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_recipe_is_one_line_with_one_prefix(tmp_path, capsys):
    assert (
        sweep_main(
            ["--recipe", str(tmp_path / "missing.yaml"), "--out", str(tmp_path), "--emit-slurm", str(tmp_path / "x")]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("lite-ppo sweep:") == 1 and "missing.yaml" in err and "does not exist" in err


def test_bad_compare_args_fail_before_any_run(tmp_path, capsys):
    out = tmp_path / "runs"
    assert sweep_main(["--recipe", RECIPES[0], "--out", str(out), "--compare-args=--x furlongs"]) == 2
    assert "--compare-args" in capsys.readouterr().err and not out.exists()


class _StubPoint:
    """A grid point whose "fit" is a short Python process that records its thread setting and its
    start and end times, then writes a finished run.json with the point's key (as fit would)."""

    def __init__(self, point, record: Path, seconds: float) -> None:
        self._point, self._record, self._seconds = point, record, seconds
        self.label, self.sweep_key = point.label, point.sweep_key

    def save_dir(self, out):
        return self._point.save_dir(out)

    def command(self, out, python=None, ckpt_path=None):
        import sys

        run = self._point.save_dir(out) / f"seed_{self.label}"
        script = (
            "import json, os, pathlib, sys, time\n"
            "start = time.time(); time.sleep(float(sys.argv[3]))\n"
            "run = pathlib.Path(sys.argv[1]); run.mkdir(parents=True, exist_ok=True)\n"
            "(run / 'run.json').write_text(json.dumps({'sweep_key': sys.argv[2], 'status': 'finished'}))\n"
            "row = [os.environ.get('OMP_NUM_THREADS'), start, time.time(), sys.argv[5]]\n"
            "with open(sys.argv[4], 'a') as f: f.write(json.dumps(row) + '\\n')\n"
        )  # fmt: skip
        return [
            sys.executable,
            "-c",
            script,
            str(run),
            self.sweep_key,
            str(self._seconds),
            str(self._record),
            self.label,
        ]


def test_parallel_sweep_runs_points_side_by_side_with_their_thread_count(tmp_path):
    """--parallel 2 --threads 1: two points at a time, each told to use one thread; all finish, and a
    third point waits for a free slot."""
    from lite_ppo.research.sweep import run_sweep

    record = tmp_path / "record.jsonl"
    points = [_StubPoint(p, record, 1.5) for p in expand_grid(RECIPES[:1], [0, 1, 2], [TINY])]
    finished, ran, failed, _ = run_sweep(
        points, tmp_path / "out", echo=lambda line: None, parallel=2, threads=1, launch="process"
    )
    assert len(finished) == len(ran) == 3 and not failed
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [threads for threads, _, _, _ in rows] == ["1", "1", "1"]
    spans = sorted((start, end) for _, start, end, _ in rows)
    assert spans[1][0] < spans[0][1]  # the first two overlapped
    assert spans[2][0] >= min(spans[0][1], spans[1][1]) - 0.05  # the third started once one had ended
    # Run again: everything finished before, nothing runs.
    finished, ran, failed, _ = run_sweep(points, tmp_path / "out", echo=lambda line: None, parallel=2, launch="process")
    assert len(finished) == 3 and not ran


def test_bad_parallel_is_a_user_error(tmp_path, capsys):
    assert sweep_main(_args(tmp_path / "runs", "--parallel", "0")) == 2
    assert "--parallel" in capsys.readouterr().err


def test_only_runs_some_cells_of_the_design_with_its_names(tmp_path, capsys):
    """``--only init=aligned`` tops up some cells: the points are those cells' (same sweep keys, cell
    names and recorded design as in the full grid), the others are not run."""
    from lite_ppo.research.sweep import only_points

    init = f"init=base:{TESTBED},aligned:{REPO / 'configs/models/testbed_aligned.yaml'}"
    clip = f"clip=symmetric,higher:{FACTORS / 'clip_higher.yaml'}"
    full = expand_grid(RECIPES[:1], [16, 17], factors=[init, clip])
    some = only_points(full, ["init=aligned"])
    assert len(full) == 8 and len(some) == 4
    assert {dict(p.cell)["init"] for p in some} == {"aligned"}
    assert {p.sweep_key for p in some} <= {p.sweep_key for p in full}
    assert all(dict(p.design) == {"init": ("base", "aligned"), "clip": ("symmetric", "higher")} for p in some)
    emit = tmp_path / "slurm"
    args = [
        "--recipe",
        RECIPES[0],
        "--seed",
        "16",
        "17",
        "--factor",
        init,
        "--factor",
        clip,
        "--out",
        str(tmp_path / "o"),
    ]
    assert sweep_main([*args, "--only", "init=aligned", "--emit-slurm", str(emit)]) == 0
    assert len(list(emit.glob("*.sh"))) == 4 and all("init=aligned" in p.name for p in emit.glob("*.sh"))
    capsys.readouterr()
    assert sweep_main([*args, "--only", "init=tuned", "--emit-slurm", str(emit)]) == 2
    assert "init has the levels base, aligned" in capsys.readouterr().err
    assert sweep_main([*args, "--only", "lr=1", "--emit-slurm", str(emit)]) == 2


def _started(record: Path) -> list[str]:
    """The labels of the stub runs, in the order they started."""
    rows = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return [label for _, _, _, label in sorted(rows, key=lambda row: row[1])]


def test_a_sweep_runs_seed_by_seed(tmp_path):
    """Two recipes x three seeds run every recipe of seed 0, then of seed 1, then of seed 2: a sweep
    stopped anywhere leaves whole seeds for the per-seed contrasts (recipe-major, a stop after half the
    runs left seeds of one recipe only)."""
    from lite_ppo.research.sweep import run_sweep

    record = tmp_path / "record.jsonl"
    points = [_StubPoint(p, record, 0.0) for p in expand_grid(RECIPES, [5, 3, 9], [TINY])]
    run_sweep(points, tmp_path / "out", echo=lambda line: None, launch="process")
    started = _started(record)
    assert [label.rsplit("_seed", 1)[1] for label in started] == ["5", "5", "3", "3", "9", "9"]
    for seed in ("5", "3", "9"):
        assert {label.split("_")[0] for label in started if label.endswith(f"_seed{seed}")} == {"lite", "grpo"}


def test_no_run_starts_after_the_deadline_and_the_same_sweep_runs_the_rest_later(tmp_path):
    """start_until half a second away and runs of 1.5 s, one at a time: the first starts, the others
    do not (reported as not started, not as failed); the sweep again without a deadline runs only those."""
    import time

    from lite_ppo.research.sweep import run_sweep

    record, lines = tmp_path / "record.jsonl", []
    points = [_StubPoint(p, record, 1.5) for p in expand_grid(RECIPES[:1], [0, 1, 2], [TINY])]
    outcome = run_sweep(points, tmp_path / "out", echo=lines.append, launch="process", start_until=time.time() + 0.5)
    assert [p.label for p in outcome.ran] == [points[0].label] and not outcome.failed
    assert [p.label for p in outcome.not_started] == [p.label for p in points[1:]]
    assert len(outcome.finished) == 1 and _started(record) == [points[0].label]
    assert any("2 of 3 not started" in line for line in lines)
    outcome = run_sweep(points, tmp_path / "out", echo=lambda line: None, launch="process")
    assert [p.label for p in outcome.ran] == [p.label for p in points[1:]] and not outcome.not_started
    assert len(outcome.finished) == 3


def test_no_start_after_from_the_command_line(tmp_path, capsys):
    """+0m: nothing starts, exit 0, the summary says the run was not started; a bad value is one line, exit 2."""
    args = ["--recipe", RECIPES[0], "--seed", "0", "--config", TINY, "--out", str(tmp_path / "out")]
    assert sweep_main([*args, "--no-start-after", "+0m"]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 not started" in out and "0 run now" in out and "1 not started" in out
    assert sweep_main([*args, "--no-start-after", "25:00"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "25:00" in err and "HH:MM" in err
    # SLURM starts the runs of --emit-slurm: a start deadline here would time nothing, so it is refused.
    assert sweep_main([*args, "--no-start-after", "+5m", "--emit-slurm", str(tmp_path / "slurm")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--emit-slurm" in err and not (tmp_path / "slurm").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("01:00", "2026-12-07 01:00"),  # already past today: tomorrow
        ("23:45", "2026-12-06 23:45"),  # still ahead today
        ("+90m", "2026-12-07 00:50"),
        ("+1.5h", "2026-12-07 00:50"),
        ("2026-12-08T06:30", "2026-12-08 06:30"),
    ],
)
def test_no_start_after_reads_a_time_of_day_a_delay_or_a_date(text, expected):
    from datetime import datetime

    from lite_ppo.research.start_deadline import no_start_after

    assert f"{no_start_after(text, now=datetime(2026, 12, 6, 23, 20)):%Y-%m-%d %H:%M}" == expected


@pytest.mark.parametrize("text", ["24:00", "7pm", "+5d", "tomorrow", "", "+99999999999h"])
def test_a_bad_no_start_after_is_a_user_error(text):
    from lite_ppo.errors import UserError
    from lite_ppo.research.start_deadline import no_start_after

    with pytest.raises(UserError, match="HH:MM"):
        no_start_after(text)


def test_dry_run_says_what_each_point_would_do_and_runs_nothing(tmp_path, capsys):
    """--dry-run: per point in the grid's order, finished (skipped), to resume (from its checkpoint) or to
    run (its folder and fit command); nothing is started or written."""
    out = tmp_path / "out"
    args = ["--recipe", RECIPES[0], "--seed", "0", "1", "2", "--config", TINY, "--out", str(out)]
    finished, interrupted, fresh = expand_grid(RECIPES[:1], [0, 1, 2], [TINY])
    for point, record in ((finished, {"status": "finished"}), (interrupted, {"status": "interrupted"})):
        folder = point.save_dir(out) / f"seed{point.seed}"
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "checkpoints/last.ckpt").write_bytes(b"x")
        (folder / "run.json").write_text(json.dumps({"sweep_key": point.sweep_key, **record}))
    before = sorted(out.rglob("*"))
    assert sweep_main([*args, "--dry-run", "--no-start-after", "+90m"]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert f"{finished.label}: finished, skipped" in lines[0]
    assert f"{interrupted.label}: resume from {interrupted.save_dir(out) / 'seed1/checkpoints/last.ckpt'}" in lines[1]
    assert "--ckpt_path" in lines[2] and "fit" in lines[2]
    assert f"{fresh.label}: to run, under {fresh.save_dir(out)}" in lines[3] and "--seed_everything" in lines[4]
    assert "3 runs in the grid: 1 finished, 1 to resume, 1 to run; none would start after" in lines[-1]
    assert sorted(out.rglob("*")) == before  # no run folder, no sweep_logs
    assert sweep_main([*args, "--dry-run", "--emit-slurm", str(tmp_path / "slurm")]) == 2


class _FailingPoint(_StubPoint):
    """A point whose run fails at once with a line naming its attempt (no finished run.json): as a
    process, a script; forked, ``lite-ppo fit`` with a config that does not exist."""

    def command(self, out, python=None, ckpt_path=None):
        import sys

        script = "import sys; print('attempt-' + sys.argv[1], 'boom', flush=True); sys.exit(1)"
        return [sys.executable, "-c", script, self._record.read_text().strip()]

    def fit_args(self, out, ckpt_path=None):
        return ["fit", "--config", f"/nonexistent/attempt-{self._record.read_text().strip()}.yaml"]


@pytest.mark.parametrize("launch", ["process", "fork"])
def test_a_point_that_starts_over_keeps_the_earlier_attempts_log(tmp_path, launch):
    """A failed point runs again from scratch when the sweep is run again; its log keeps the first
    attempt's output (its traceback) above the second's, each under a header line (it was truncated)."""
    from lite_ppo.research.sweep import run_sweep

    attempt = tmp_path / "attempt"
    point = _FailingPoint(expand_grid(RECIPES[:1], [0], [TINY])[0], attempt, 0)
    for n in ("one", "two"):
        attempt.write_text(n)
        _, ran, failed, _ = run_sweep([point], tmp_path / "out", echo=lambda line: None, launch=launch)
        assert len(ran) == len(failed) == 1
    log = (tmp_path / "out/sweep_logs" / f"{point.label}.log").read_text()
    assert 0 < log.index("attempt-one") < log.index("attempt-two")
    assert log.count("=== lite-ppo sweep, ") == 2 and log.startswith("=== lite-ppo sweep, ")


def test_a_second_sweep_into_the_same_folder_is_refused_while_the_first_runs(tmp_path, capsys):
    """The same sweep started again while one runs into its folder would start every unfinished run a
    second time: refused in one line naming the holder; once the first ends, the command runs."""
    import os

    from lite_ppo.research.sweep_lock import SweepLock

    out = tmp_path / "out"
    args = ["--recipe", RECIPES[0], "--seed", "0", "--config", TINY, "--out", str(out), "--no-start-after", "+0m"]
    with SweepLock(out):  # the first sweep, still running
        assert sweep_main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another lite-ppo sweep is running into" in err[0] and f"pid {os.getpid()}" in err[0]
    assert sweep_main(args) == 0  # the first ended: its lock went with it
    assert "1 not started" in capsys.readouterr().out


def test_a_killed_sweep_leaves_no_lock_behind(tmp_path, capsys):
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from lite_ppo.research.sweep_lock import SweepLock\nimport time\n"
         f"with SweepLock({str(out)!r}): time.sleep(60)"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ((out / ".sweep.lock").is_file() and (out / ".sweep.lock").read_text()):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        args = ["--recipe", RECIPES[0], "--seed", "0", "--config", TINY, "--out", str(out), "--no-start-after", "+0m"]
        assert sweep_main(args) == 2 and f"pid {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()  # SIGKILL: no clean-up code runs
        holder.wait()
    assert sweep_main(args) == 0
