"""``lite-ppo sweep``'s fork server: a run forked from it trains exactly as a run started as its own
process; the server hands back each run's exit code (a signal's as a negative one, as ``Popen`` does),
writes or appends its log, gives it a process group of its own and no stdin; a server that cannot start
is one line from the sweep."""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

import pytest
import torch

from helpers.fits import read_scalars
from helpers.paths import REPO
from lite_ppo.research.fork_server import ForkServer
from lite_ppo.research.grid import FIT_ENTRY, FIT_PRELOAD, expand_grid
from lite_ppo.research.sweep import main as sweep_main
from lite_ppo.research.sweep import run_sweep

RECIPE = str(REPO / "configs/recipes/lite_ppo.yaml")
TINY = str(REPO / "configs/models/tiny.yaml")
SMALL = [
    "--data.steps_per_epoch=2",
    "--data.prompts_per_step=2",
    "--rollout.sampling.max_new_tokens=8",
    "--rollout.eval_sampling.max_new_tokens=8",
    "--data.val_size=4",
]
# What may differ between any two runs of one setting (wall-clock times), and by construction between a
# forked run and a fresh one (memory: the forked process starts as a copy of the server's, imports and all).
PROCESS_ONLY = ("time/", "memory/")


def _scalars(run: Path) -> dict:
    return {tag: series for tag, series in read_scalars(run).items() if not tag.startswith(PROCESS_ONLY)}


@pytest.mark.slow
def test_a_forked_run_trains_exactly_as_a_process_run(tmp_path, monkeypatch):
    points = expand_grid([RECIPE], [3], [TINY], overrides=SMALL)
    forked = []  # which launch went through the server: the comparison must be of two different paths
    start = ForkServer.start
    monkeypatch.setattr(ForkServer, "start", lambda self, *a, **k: forked.append(a[0]) or start(self, *a, **k))
    runs = {}
    for launch in ("fork", "process"):
        before = len(forked)
        finished, ran, failed, _ = run_sweep(
            points, tmp_path / launch, echo=lambda line: None, threads=1, launch=launch
        )
        assert len(finished) == len(ran) == 1 and not failed, (tmp_path / launch / "sweep_logs").iterdir()
        assert len(forked) - before == (launch == "fork")
        runs[launch] = finished[0]
    fork, process = (_scalars(runs[launch]) for launch in ("fork", "process"))
    assert "reward/accuracy" in fork and "val/easy/accuracy" in fork
    assert fork.keys() == process.keys()
    for tag in fork:  # every value at every step, exactly
        assert [value for _, value in fork[tag]] == [value for _, value in process[tag]], tag
    weights = {
        launch: torch.load(runs[launch] / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
        for launch in runs
    }
    assert weights["fork"].keys() == weights["process"].keys()
    assert all(torch.equal(weights["fork"][k], weights["process"][k]) for k in weights["fork"])


def _wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
def test_the_server_returns_exit_codes_writes_logs_and_detaches_runs(tmp_path):
    server = ForkServer(FIT_ENTRY, FIT_PRELOAD, title="lite-ppo")
    try:
        log = tmp_path / "run.log"
        log.write_text("earlier\n")
        assert server.start(["no-such-command"], log).wait() == 2
        first = log.read_text()
        assert "earlier" not in first  # a new run's log starts empty
        assert first.startswith("lite-ppo: error: unknown command 'no-such-command'") and len(first.splitlines()) == 1
        assert server.start(["--help"], log, append=True).wait() == 0
        assert log.read_text().startswith(first) and "fit" in log.read_text()[len(first) :]  # appended

        # A fit that would run for minutes: its own process group, stdin from /dev/null; SIGKILL ends it.
        args = ["fit", "--config", RECIPE, "--config", TINY, "--data.steps_per_epoch=1000"]
        run = server.start(args, log)
        try:
            _wait_for(lambda: os.getpgid(run.pid) == run.pid)
            # It shows the command line a process launch would have (ps, top, pkill -f), not the server's.
            cmdline = Path(f"/proc/{run.pid}/cmdline").read_bytes().rstrip(b"\0").decode()
            assert cmdline == shlex.join(["lite-ppo", *args])
            assert os.getpgid(run.pid) != os.getpgid(0)
            assert os.readlink(f"/proc/{run.pid}/fd/0") == os.devnull
            assert run.poll() is None
        finally:  # a failed check must not leave the fit running (the server waits for its runs)
            run.send_signal(signal.SIGKILL)
        assert run.wait() == -signal.SIGKILL
        run.send_signal(signal.SIGTERM)  # an ended run: nothing happens
    finally:
        server.close()
    assert server.process.returncode == 0


def test_a_server_that_cannot_start_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no-python"
    code = sweep_main(
        ["--recipe", RECIPE, "--seed", "0", "--config", TINY, "--out", str(tmp_path), "--python", str(missing)]
    )
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        f"lite-ppo sweep: error: cannot start the sweep's fork server with {missing}: No such file or directory; "
        "--launch process starts each run as its own process"
    )


def test_a_sweep_whose_server_ends_says_so_in_one_line(tmp_path, capsys):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'cannot import' >&2\nexit 3\n")
    broken.chmod(0o755)
    code = sweep_main(
        ["--recipe", RECIPE, "--seed", "0", "--config", TINY, "--out", str(tmp_path / "out"), "--python", str(broken)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "lite-ppo sweep: error: the sweep's fork server ended (exit 3); its error is above; "
        "--launch process starts each run as its own process"
    )


def test_a_run_that_ends_in_the_same_answer_as_its_start_is_not_lost(tmp_path):
    """The server's pid line and exit line for one run can arrive in one read (a run that fails at once
    while the sweep was busy): the run still gets its exit code. A stand-in server answers both at once."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nread request\nprintf \'{"pid": 123}\\n{"exited": 123, "code": 7}\\n\'\n')
    fake.chmod(0o755)
    server = ForkServer(FIT_ENTRY, python=str(fake))
    assert server.start(["fit"], tmp_path / "run.log").wait() == 7
