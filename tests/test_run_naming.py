"""Named runs: ``runs/<recipe>/<model>/seed<S>``, never overwritten, with config.yaml and run.json."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from helpers.paths import REPO
from lite_ppo.errors import UserError
from lite_ppo.research.run_naming import claim_version, configure_run_dir, model_name, prepare_fit_run, unique_version
from lite_ppo.research.run_record import RunRecord

TB = "lightning.pytorch.loggers.TensorBoardLogger"


def _config(save_dir: Path, **logger_args) -> dict:
    return {
        "recipe": "lite_ppo",
        "seed_everything": 7,
        "model": {"model_path": "builtin:tiny"},
        "data": {"sources": {"easy": "synthetic:easy"}, "weights": {"easy": 1.0}, "schedule": None},
        "trainer": {
            "logger": {
                "class_path": TB,
                "init_args": {"save_dir": str(save_dir), "name": None, "version": None, **logger_args},
            }
        },
        "run_record": {
            "recipe": None,
            "model": None,
            "model_name": None,
            "seed": None,
            "data": None,
            "sweep_key": None,
            "enabled": True,
        },
    }


def test_model_names():
    assert model_name("builtin:tiny") == "tiny"
    assert model_name("builtin:smollm2-135m-instruct") == "smollm2-135m-instruct"
    assert model_name("/data/models/Qwen3-4B-Base/") == "Qwen3-4B-Base"
    assert model_name("runs/x/checkpoints/last.ckpt") == "last"


def test_unique_version_suffixes(tmp_path):
    assert unique_version(tmp_path, "seed0") == "seed0"
    (tmp_path / "seed0").mkdir()
    assert unique_version(tmp_path, "seed0") == "seed0-1"
    (tmp_path / "seed0-1").mkdir()
    assert unique_version(tmp_path, "seed0") == "seed0-2"


def test_configure_fills_only_what_is_unset(tmp_path):
    config = _config(tmp_path)
    assert configure_run_dir(config)[0] == tmp_path / "lite_ppo" / "tiny" / "seed7"
    assert config["trainer"]["logger"]["init_args"]["name"] == "lite_ppo/tiny"
    (tmp_path / "lite_ppo/tiny/seed7").mkdir(parents=True)
    assert configure_run_dir(_config(tmp_path))[0] == tmp_path / "lite_ppo" / "tiny" / "seed7-1"
    # Explicit name / version win; an explicit version is used as given.
    assert configure_run_dir(_config(tmp_path, name="mine"))[0] == tmp_path / "mine" / "seed7"
    assert configure_run_dir(_config(tmp_path, version="seed7"))[0] == tmp_path / "lite_ppo" / "tiny" / "seed7"
    # Resuming from a checkpoint inside an existing run continues that run's folder.
    config = _config(tmp_path)
    config["ckpt_path"] = str(tmp_path / "lite_ppo/tiny/seed7/checkpoints/last.ckpt")
    assert configure_run_dir(config)[0] == tmp_path / "lite_ppo" / "tiny" / "seed7"
    # A LoRA run says so in its name.
    config = _config(tmp_path)
    config["model"]["lora"] = {"r": 8}
    assert configure_run_dir(config)[0] == tmp_path / "lite_ppo" / "tiny+lora" / "seed7"
    # No recipe field: "custom"; no TensorBoard logger: nothing to do.
    config = _config(tmp_path)
    del config["recipe"]
    assert configure_run_dir(config)[0] == tmp_path / "custom" / "tiny" / "seed7"
    config["trainer"]["logger"] = False
    assert configure_run_dir(config) == (None, False)


def test_validate_and_test_of_a_run_checkpoint_log_into_the_run(tmp_path):
    from lite_ppo.research.run_naming import configure_evaluation_dir

    run = tmp_path / "runs" / "lite_ppo" / "tiny" / "seed7"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    ckpt = run / "checkpoints" / "last.ckpt"
    for subcommand in ("validate", "test"):
        config = {**_config(tmp_path / "elsewhere"), "ckpt_path": str(ckpt)}
        assert configure_evaluation_dir(config, subcommand) == run.resolve() / subcommand
        args = config["trainer"]["logger"]["init_args"]
        # TensorBoardLogger's log_dir is save_dir/name/version
        assert Path(args["save_dir"]) / args["name"] / args["version"] == run.resolve() / subcommand
    # A name the user chose, or a checkpoint outside any run folder, keeps the logger as configured.
    chosen = {**_config(tmp_path / "elsewhere", name="mine"), "ckpt_path": str(ckpt)}
    assert configure_evaluation_dir(chosen, "test") is None
    assert chosen["trainer"]["logger"]["init_args"]["name"] == "mine"
    (tmp_path / "loose.ckpt").write_bytes(b"")
    assert configure_evaluation_dir({**_config(tmp_path), "ckpt_path": str(tmp_path / "loose.ckpt")}, "test") is None


def _claim_in_a_process(args: tuple[str, str]) -> str:
    parent, base = args
    return claim_version(Path(parent), base)


def test_runs_started_together_claim_different_folders(tmp_path):
    # Two fits of the same name, both named before either wrote anything: each claims its own folder.
    first, second = _config(tmp_path), _config(tmp_path)
    assert prepare_fit_run(first, claim=True) == (tmp_path / "lite_ppo/tiny/seed7", True)
    assert prepare_fit_run(second, claim=True) == (tmp_path / "lite_ppo/tiny/seed7-1", True)
    assert (tmp_path / "lite_ppo/tiny/seed7").is_dir() and (tmp_path / "lite_ppo/tiny/seed7-1").is_dir()
    # An explicit version and a resume are used as given, never created or claimed.
    assert prepare_fit_run(_config(tmp_path, version="seed7"), claim=True) == (tmp_path / "lite_ppo/tiny/seed7", False)
    # Six processes asking at the same moment: six folders.
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(6) as pool:
        names = pool.map(_claim_in_a_process, [(str(tmp_path / "race"), "seed0")] * 6)
    assert sorted(names) == ["seed0", *(f"seed0-{k}" for k in range(1, 6))]


def test_an_unwritable_save_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the folder should go: mkdir fails as on a read-only disk
    with pytest.raises(UserError, match=r"run folder .*file/lite_ppo/tiny/seed7: cannot create it .*save_dir"):
        prepare_fit_run(_config(blocker), claim=True)


def test_prepare_fit_run_tells_the_record(tmp_path):
    config = _config(tmp_path)
    assert prepare_fit_run(config) == (tmp_path / "lite_ppo/tiny/seed7", False)  # named, not created
    record = config["run_record"]
    assert (record["recipe"], record["model"], record["model_name"], record["seed"]) == (
        "lite_ppo",
        "builtin:tiny",
        "tiny",
        7,
    )
    assert record["data"]["weights"] == {"easy": 1.0}


def test_run_record_lifecycle(tmp_path):
    class FakeTrainer:
        log_dir = str(tmp_path)
        global_step = 0
        estimated_stepping_batches = 3
        num_training_batches, max_epochs, max_steps = 3, 1, -1
        is_global_zero = True

    trainer = FakeTrainer()
    callback = RunRecord(recipe="grpo", model="builtin:tiny", model_name="tiny", seed=1)
    callback.on_fit_start(trainer, None)
    first = json.loads((tmp_path / "run.json").read_text())
    assert (
        first["status"] == "running" and first["steps"] == 0 and first["ended"] is None and first["steps_planned"] == 3
    )
    for _ in range(3):
        trainer.global_step += 2
        callback.on_train_batch_end(trainer, None, None, None, 0)
    callback.on_fit_end(trainer, None)
    done = json.loads((tmp_path / "run.json").read_text())
    assert done["status"] == "finished" and done["steps"] == 3 and done["global_step"] == 6 and done["ended"]
    callback.on_exception(trainer, None, RuntimeError("boom"))
    failed = json.loads((tmp_path / "run.json").read_text())
    assert failed["status"] == "failed" and "boom" in failed["error"]
    assert failed["pid"] == os.getpid() and failed["host"] == socket.gethostname()
    # A stop on purpose: interrupted, with the signal and the checkpoint the ModelCheckpoint wrote.
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    last = tmp_path / "checkpoints" / "last.ckpt"
    last.parent.mkdir()
    last.write_bytes(b"x")
    trainer.checkpoint_callback = type("Checkpoint", (), {"last_model_path": str(last), "best_model_path": ""})()
    stop = SIGTERMException()
    stop.code = 128 + 10  # what Preemption sets for SIGUSR1
    callback.on_exception(trainer, None, stop)
    stopped = json.loads((tmp_path / "run.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["error"] == "stopped by SIGUSR1"
    assert stopped["checkpoint"] == str(last.resolve())
    last.unlink()  # a second Ctrl-C before any checkpoint: interrupted, nothing to resume from
    callback.on_exception(trainer, None, KeyboardInterrupt())
    stopped = json.loads((tmp_path / "run.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["error"] == "stopped by Ctrl-C"
    assert stopped["checkpoint"] is None


def _quick_grpo_fit(*extra: str) -> list[str]:
    """argv of a seconds-long GRPO fit of the smoke model, seed 3, into ``runs/grpo/tiny-arith/seed3...``."""
    return [
        "fit",
        "--config", str(REPO / "configs/recipes/grpo.yaml"),
        "--config", str(REPO / "configs/models/tiny.yaml"),
        "--seed_everything=3",
        "--data.prompts_per_step=2", "--rollout.sampling.max_new_tokens=4",
        *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_fit_twice_gets_two_named_run_dirs(tmp_path, tiny_model_path, monkeypatch, capsys):
    from lite_ppo.cli import main

    monkeypatch.chdir(tmp_path)
    args = _quick_grpo_fit("--data.steps_per_epoch=1")
    # A start that fails (two advantage estimators: refused in setup, after the folder was made)
    # leaves no folder, so the next real run is seed3, not seed3-1.
    with pytest.raises(SystemExit):
        main([*args, "--trainer.callbacks+=lite_ppo.callbacks.AdvantageNormalization"])
    assert not (tmp_path / "runs/grpo").exists()
    capsys.readouterr()
    main(list(args))
    # The run folder is printed when the run starts and when it ends.
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("lite-ppo fit: run folder")]
    assert len(said) == 2 and all("runs/grpo/tiny-arith/seed3" in line for line in said), said
    capsys.readouterr()
    main(list(args))
    assert "note: seed3-1 repeats seed3 (the same settings" in capsys.readouterr().err  # told apart: it is not
    first, second = tmp_path / "runs/grpo/tiny-arith/seed3", tmp_path / "runs/grpo/tiny-arith/seed3-1"
    for run_dir in (first, second):
        assert (run_dir / "config.yaml").is_file(), sorted(p.name for p in run_dir.iterdir())
        assert any(run_dir.glob("events.out.tfevents.*"))
        record = json.loads((run_dir / "run.json").read_text())
        assert (
            record["recipe"] == "grpo"
            and record["seed"] == 3
            and record["status"] == "finished"
            and record["steps"] == 1
        )
    # Resuming from the first run's checkpoint continues in its folder (no seed3-2).
    main([*args, "--ckpt_path", str(first / "checkpoints" / "last.ckpt")])
    assert not (tmp_path / "runs/grpo/tiny-arith/seed3-2").exists()
    record = json.loads((first / "run.json").read_text())
    assert record["status"] == "finished" and len(record["resumed"]) == 1 and record["steps"] == 1
    # A third run of the name with another learning rate says so at start (its folder is seed3-2).
    capsys.readouterr()
    main([*args, "--model.lr=3e-5"])
    notes = [line for line in capsys.readouterr().err.splitlines() if "note: seed3-2" in line]
    assert notes == [
        "lite-ppo fit: note: seed3-2 has the recipe, model and seed of seed3-1 and differs from it in "
        "model.lr 0.0001 -> 3e-05"
    ], notes


@pytest.mark.slow
def test_a_fit_into_another_runs_folder_is_refused_and_touches_nothing(tmp_path, tiny_model_path, monkeypatch, capsys):
    """A second fit named into the folder of a run that is training or done (an explicit version, the one way
    left to share a folder) replaced that run's config.yaml and added its event file beside the other's; and
    had it failed before its first step it would have been its folder to remove. It is refused in one line,
    before anything is written; with --ckpt_path it resumes there as before (test_fit_twice_gets_two_named_run_dirs)."""
    from lite_ppo.cli import main

    monkeypatch.chdir(tmp_path)
    live = tmp_path / "runs/grpo/tiny-arith/seed3"
    live.mkdir(parents=True)
    (live / "run.json").write_text('{"status": "running"}\n')
    (live / "config.yaml").write_text("the live run's\n")
    before = {p.name: p.read_bytes() for p in live.iterdir()}
    args = _quick_grpo_fit("--trainer.logger.init_args.version=seed3", "--data.steps_per_epoch=1")
    # A checkpoint of another run does not resume this one: refused the same (it was let through).
    other = tmp_path / "runs/grpo/tiny-arith/seed9/checkpoints/last.ckpt"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"not read: refused before")
    for extra in ([], [f"--ckpt_path={other}"]):
        with pytest.raises(SystemExit) as stop:
            main([*args, *extra])
        assert stop.value.code != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith(
            "holds another run: give another --trainer.logger.init_args.version (or leave it unset "
            "for a new seed<S>-N folder), or --ckpt_path to resume that run"
        ), (extra, err)
        assert {p.name: p.read_bytes() for p in live.iterdir()} == before


@pytest.mark.slow
def test_a_run_that_fails_beside_a_live_namesake_removes_only_its_own_folder(tmp_path, tiny_model_path, monkeypatch):
    """Two live fits of one name: the first (its own process) holds after its first step inside seed3; a
    second that fails before its first step claimed seed3-1 and removes that folder only (it used to
    remove the live run's folder); a third trains into its own folder beside it. The first then ends
    normally with everything it wrote, and every folder holds exactly one run's events."""
    import subprocess
    import sys
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lite_ppo.cli import main

    monkeypatch.chdir(tmp_path)
    args = _quick_grpo_fit()
    marker, release = tmp_path / "held", tmp_path / "release"
    hold = json.dumps(
        {"class_path": "helpers.reliability_faults.HoldAfterStep",
         "init_args": {"marker": str(marker), "release": str(release)}}
    )  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "lite_ppo.cli", *args, "--data.steps_per_epoch=2", f"--trainer.callbacks+={hold}"]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while not marker.exists():
                assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the first run did not reach its first step"
                time.sleep(0.05)
            live = tmp_path / "runs/grpo/tiny-arith/seed3"
            before = sorted(p.relative_to(live) for p in live.rglob("*"))
            assert json.loads((live / "run.json").read_text())["status"] == "running"
            # A namesake that fails in setup (two advantage estimators), after it claimed a folder.
            with pytest.raises(SystemExit):
                main(
                    [
                        *args,
                        "--data.steps_per_epoch=1",
                        "--trainer.callbacks+=lite_ppo.callbacks.AdvantageNormalization",
                    ]
                )
            assert not (tmp_path / "runs/grpo/tiny-arith/seed3-1").exists()
            assert sorted(p.relative_to(live) for p in live.rglob("*")) == before
            # A namesake that trains while the first is held: its own folder.
            main([*args, "--data.steps_per_epoch=1"])
        finally:
            release.touch()
        assert first.wait(timeout=300) == 0, (tmp_path / "first.log").read_text()[-3000:]
    for folder, steps in (("seed3", 2), ("seed3-1", 1)):
        run_dir = tmp_path / "runs/grpo/tiny-arith" / folder
        record = json.loads((run_dir / "run.json").read_text())
        assert record["status"] == "finished" and record["steps"] == steps, record
        events = list(run_dir.glob("events.out.tfevents.*"))
        assert len(events) == 1, events
        accumulator = EventAccumulator(str(events[0]))
        accumulator.Reload()
        lr_steps = [event.step for event in accumulator.Scalars("update/lr")]
        assert len(lr_steps) == len(set(lr_steps)) == steps, lr_steps  # one point a rollout step, none twice
