"""Preemption, end to end: a real signal sent to a running ``lite-ppo fit`` on the tiny model.

The run must finish the step it is in, write a resumable ``last.ckpt`` and exit with 128 + signal
number; resuming from that checkpoint must give bit for bit the weights and optimizer state of a run
that was never interrupted (the advantages come from a test technique that moves the weights).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers.paths import REPO

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
STEPS = 6  # rollout steps of the run; 2 optimizer steps each (tiny.yaml: num_mini_batches 2)


def _config(tmp: Path, ckpt_dir: Path, marker: Path) -> Path:
    """The same callbacks for every run of a test (a resumed run restores callback states by their
    configuration), with the test's advantage estimator and a step marker."""
    callbacks = [
        {"remove": "lite_ppo.callbacks.AdvantageNormalization"},  # the recipe's estimator, replaced by:
        {"class_path": "helpers.reliability_faults.SignedAdvantages"},
        {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}},
        # The shipped cadence: a periodic checkpoint every 50 optimizer steps, i.e. none in this run.
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(ckpt_dir), "save_last": True, "every_n_train_steps": 50, "save_top_k": -1},
        },
    ]
    callbacks.append({"class_path": "helpers.reliability_faults.StepMarker", "init_args": {"path": str(marker)}})
    path = tmp / "faults.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "trainer": {"callbacks": callbacks, "enable_progress_bar": False, "enable_model_summary": False},
                "data": {"steps_per_epoch": STEPS},
            }
        )
    )
    return path


def _command(tmp: Path, config: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from lite_ppo.cli.commands import main; sys.exit(main())",
        "fit",
        "--config",
        str(REPO / "configs/recipes/lite_ppo.yaml"),
        "--config",
        str(REPO / "configs/models/tiny.yaml"),
        "--config",
        str(config),
        "--trainer.default_root_dir",
        str(tmp),
        "--trainer.logger.init_args.save_dir",
        str(tmp / "tb"),
        *extra,
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(HERE), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(cmd: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _state(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def _assert_same_training_state(a: dict, b: dict) -> None:
    assert a["global_step"] == b["global_step"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for name in a["state_dict"]:
        assert torch.equal(a["state_dict"][name], b["state_dict"][name]), f"weight {name} differs"
    opt_a, opt_b = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    assert opt_a.keys() == opt_b.keys()
    for index in opt_a:
        for key in opt_a[index]:
            assert torch.equal(torch.as_tensor(opt_a[index][key]), torch.as_tensor(opt_b[index][key])), (
                f"optimizer state {index}/{key} differs"
            )
    assert a["lr_schedulers"] == b["lr_schedulers"]
    assert a["policy_version"] == b["policy_version"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_path) -> dict:
    """The final training state of the run that is never interrupted."""
    full_dir = tmp_path_factory.mktemp("uninterrupted")
    full = _run(_command(full_dir, _config(full_dir, full_dir / "ckpt", full_dir / "steps_done")))
    assert full.returncode == 0, full.stderr[-3000:]
    reference = _state(full_dir / "ckpt" / "last.ckpt")
    assert reference["global_step"] == 2 * STEPS
    return reference


def _signal_after_step(tmp: Path, signum: signal.Signals, after: int = 2) -> tuple[int, str, Path, Path]:
    """Start the run, send ``signum`` once ``after`` training steps are logged; (status, stderr, last.ckpt, marker)."""
    tmp.mkdir(exist_ok=True)
    marker = tmp / "steps_done"
    log = tmp / "stderr.txt"  # a file, not a pipe: a full pipe would block the run while we wait
    with open(log, "w") as err, open(tmp / "stdout.txt", "w") as out:
        proc = subprocess.Popen(
            _command(tmp, _config(tmp, tmp / "ckpt", marker)), env=_env(), cwd=REPO, stdout=out, stderr=err
        )
        deadline = time.monotonic() + 600
        while not (marker.exists() and int(marker.read_text() or 0) >= after):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"the run did not reach step {after}"
            time.sleep(0.05)
        proc.send_signal(signum)
        proc.wait(timeout=600)
    return proc.returncode, log.read_text(), tmp / "ckpt" / "last.ckpt", marker


@pytest.mark.extended
def test_sigterm_mid_run_exits_143_and_resume_equals_the_uninterrupted_run(tmp_path, uninterrupted):
    status, stderr, last, marker = _signal_after_step(tmp_path, signal.SIGTERM)
    assert status == 143, stderr[-3000:]
    assert last.is_file(), "no checkpoint after SIGTERM"
    done = int(marker.read_text())
    assert 2 <= done < STEPS  # it stopped early, after the step it was in
    assert _state(last)["global_step"] == 2 * done  # every finished step, nothing half-done
    assert "stopped by SIGTERM" in stderr and f"--ckpt_path {last}" in stderr

    # Resume to the end: the same weights, Adam moments, schedule and policy version as never stopping.
    resumed = _run(_command(tmp_path, _config(tmp_path, tmp_path / "ckpt", marker), f"--ckpt_path={last}"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(p.name for p in last.parent.glob("*.ckpt")) == ["last.ckpt"]  # overwritten in place, no last-v1
    _assert_same_training_state(_state(last), uninterrupted)


@pytest.mark.parametrize("signum, status", [(signal.SIGUSR1, 138), (signal.SIGINT, 130)])
def test_sigusr1_and_ctrl_c_also_stop_with_a_checkpoint(tmp_path, tiny_model_path, signum, status):
    status_seen, stderr, last, marker = _signal_after_step(tmp_path, signum)
    assert status_seen == status, stderr[-3000:]
    assert _state(last)["global_step"] == 2 * int(marker.read_text())
    assert f"stopped by {signum.name}" in stderr
    if signum == signal.SIGINT:
        assert "Ctrl-C: finishing the current step" in stderr


@pytest.mark.parametrize("hook", ["setup", "on_fit_start", "on_train_start"])
def test_sigterm_during_start_up_stops_at_once_with_143_and_one_line(tmp_path, tiny_model_path, hook):
    """SIGTERM before the first training step (the model loading, an engine starting; before and after
    Lightning installs its handlers): fit stops within seconds, not after the start-up and a first step,
    with exit status 143, one line on stderr and no traceback; the unstarted run's folder is removed."""
    marker = tmp_path / "starting"
    config = tmp_path / "slow.yaml"
    slow = {"class_path": "helpers.slow_startup.SlowStartup", "init_args": {"marker": str(marker), "hook": hook}}
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [slow], "enable_progress_bar": False}}))
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err, open(tmp_path / "stdout.txt", "w") as out:
        proc = subprocess.Popen(_command(tmp_path, config), env=_env(), cwd=REPO, stdout=out, stderr=err)
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the run did not reach its start-up hook"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=20)  # the hook sleeps 60 s: only a prompt stop ends before
        finally:
            proc.kill()
    waited = time.monotonic() - sent
    stderr = log.read_text()
    assert status == 143 and waited < 15, (status, waited, stderr[-3000:])
    assert "Traceback" not in stderr
    stopped = [line for line in stderr.splitlines() if "SIGTERM" in line]
    assert len(stopped) == 1 and stopped[0].startswith("lite-ppo fit: stopped by SIGTERM"), stderr[-3000:]
    assert not list((tmp_path / "tb").rglob("seed*")), "the folder of a run that never started is left behind"
