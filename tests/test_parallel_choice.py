"""``lite-ppo sweep --parallel auto``: the layout chosen from a measurement of the sweep's own first run
(lite_ppo.research.parallel_choice), kept for the same command later."""

from __future__ import annotations

import json

import pytest

from helpers.paths import REPO
from lite_ppo.errors import UserError
from lite_ppo.research import parallel_choice
from lite_ppo.research.grid import expand_grid
from lite_ppo.research.parallel_choice import CHOICE_FILE, MARGIN, ParallelChoice, choose_parallel, decide
from lite_ppo.research.sweep import main as sweep_main

TINY = str(REPO / "configs/models/tiny.yaml")
LITE_PPO = str(REPO / "configs/recipes/lite_ppo.yaml")


@pytest.mark.parametrize(
    "alone_s, together_s, cores, parallel, threads",
    [
        (2.0, 3.0, 2, 2, 1),  # 2 / 3 = 0.667 steps/s side by side against 0.5: 33 % more
        (2.0, 4.0, 2, 1, 2),  # 0.5 against 0.5: no gain, one run on both cores
        (2.0, 2.0 * 2 / MARGIN + 1e-9, 2, 1, 2),  # just under the margin
        (2.0, 2.0 * 2 / MARGIN - 1e-9, 2, 2, 1),  # just over it
        (1.0, 3.0, 4, 4, 1),  # 4 cores: 4 / 3 = 1.33 steps/s against 1
    ],
)
def test_the_layout_that_finishes_more_steps_per_second_wins(alone_s, together_s, cores, parallel, threads):
    choice = decide(alone_s, together_s, cores)
    assert (choice.parallel, choice.threads) == (parallel, threads)
    assert choice.alone_steps_per_s == pytest.approx(1 / alone_s)
    assert choice.side_by_side_steps_per_s == pytest.approx(cores / together_s)


def test_a_kept_choice_is_used_without_measuring(tmp_path, monkeypatch):
    (tmp_path / CHOICE_FILE).write_text(
        json.dumps(ParallelChoice(2, 1, "side by side finishes more", 0.5, 0.6).__dict__)
    )
    monkeypatch.setattr(parallel_choice, "_mean_step_seconds", lambda *a, **k: pytest.fail("measured again"))
    said = []
    point = expand_grid([LITE_PPO], [0], [TINY], [], [], [], [])[0]
    choice = choose_parallel(tmp_path, None, [point], echo=said.append)
    assert (choice.parallel, choice.threads) == (2, 1)
    assert said == [
        "sweep --parallel auto: 2 runs of 1 thread side by side: 0.60 steps/s against 0.50 with 1 run of 2 "
        f"threads (measured before; kept in {tmp_path / CHOICE_FILE})"
    ]


def test_nothing_to_run_or_a_damaged_choice_file(tmp_path):
    said = []
    assert choose_parallel(tmp_path, None, [], echo=said.append) == ParallelChoice(1, None, "nothing to run")
    assert said == ["sweep --parallel auto: one run at a time (nothing to run; nothing measured)"]
    (tmp_path / CHOICE_FILE).write_text("{not json")
    with pytest.raises(UserError, match="parallel_choice.json: not a parallel choice this sweep wrote"):
        choose_parallel(tmp_path, None, [], echo=said.append)


def test_the_choice_is_the_layout_the_sweep_runs_with(tmp_path, monkeypatch):
    """What ``--parallel auto`` chose (here a kept choice) is what the sweep's runs get: 2 side by side
    on one thread each, not the command line's defaults."""
    from lite_ppo.research import sweep

    out = tmp_path / "o"
    out.mkdir()
    (out / CHOICE_FILE).write_text(json.dumps(ParallelChoice(2, 1, "side by side finishes more", 0.5, 0.6).__dict__))
    started = {}

    def run_sweep(points, out, python, parallel, threads, launch, start_until):
        started.update(points=len(points), parallel=parallel, threads=threads)
        return [], [], [], []

    monkeypatch.setattr(sweep, "run_sweep", run_sweep)
    args = ["--recipe", LITE_PPO, "--seed", "0", "1", "--config", TINY, "--out", str(out), "--parallel", "auto"]
    assert sweep_main([*args, "--no-compare"]) == 0
    assert started == {"points": 2, "parallel": 2, "threads": 1}


def test_a_probe_runs_its_steps_once_whatever_epochs_the_config_sets(tmp_path, tiny_model_path):
    """A point whose config trains 5 epochs: each probe run still stops after its 3 steps (it took
    ``max_epochs`` from the config, 15 steps here, and with no epoch limit Lightning's 1000)."""
    from lite_ppo.research.run_folder import RunDir
    from lite_ppo.research.scalars import read_scalars

    epochs = tmp_path / "epochs.yaml"
    epochs.write_text("trainer:\n  max_epochs: 5\n")
    point = expand_grid([LITE_PPO], [0], [TINY, str(epochs)], [], [], [], [])[0]
    seconds = parallel_choice._mean_step_seconds(point, tmp_path / "probe", None, copies=1, threads=1)
    (run,) = RunDir.below(tmp_path / "probe" / "copy0")
    steps = read_scalars(run.path)["time/step_s"]
    assert list(steps.steps) == [0, 1, 2]
    assert seconds == pytest.approx(sum(steps.values[1:]) / 2)


def test_parallel_auto_refuses_threads_and_a_bad_value(tmp_path, capsys):
    base = ["--recipe", LITE_PPO, "--seed", "0", "--config", TINY, "--out", str(tmp_path / "o")]
    assert sweep_main([*base, "--parallel", "auto", "--threads", "2"]) == 2
    assert "--parallel auto chooses the threads too" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sweep_main([*base, "--parallel", "some"])
    assert "'some': give a number of runs or auto" in capsys.readouterr().err


@pytest.mark.extended
@pytest.mark.slow
def test_parallel_auto_measures_the_first_run_then_keeps_its_choice(tmp_path, tiny_model_path, monkeypatch, capsys):
    """A real sweep of the smoke model with ``--parallel auto`` on 2 cores: the probe runs its first point
    alone on 2 threads and twice side by side on 1, writes the choice with both throughputs, removes its
    runs, then the sweep runs every point; the same command later uses the kept choice."""
    monkeypatch.setattr(parallel_choice, "available_cores", lambda: 2)
    monkeypatch.setattr(parallel_choice, "_has_gpu", lambda: False)
    out = tmp_path / "sweep"
    args = [
        "--recipe", LITE_PPO, "--seed", "0", "1", "--config", TINY, "--out", str(out),
        "--parallel", "auto", "--no-compare", "--", "--data.steps_per_epoch=2",
    ]  # fmt: skip
    assert sweep_main(args) == 0
    said = capsys.readouterr().out
    kept = json.loads((out / CHOICE_FILE).read_text())
    assert kept["parallel"] in (1, 2) and kept["threads"] == (1 if kept["parallel"] == 2 else 2)
    assert kept["alone_steps_per_s"] > 0 and kept["side_by_side_steps_per_s"] > 0
    expected = decide(1 / kept["alone_steps_per_s"], 2 / kept["side_by_side_steps_per_s"], 2)
    assert (expected.parallel, expected.threads) == (kept["parallel"], kept["threads"])
    assert "sweep --parallel auto: measuring lite_ppo_seed0 for 3 steps" in said
    assert not (out / ".parallel_probe").exists()
    records = sorted(out.rglob("run.json"))
    assert [json.loads(p.read_text())["status"] for p in records] == ["finished", "finished"], said
    assert all(json.loads(p.read_text())["steps"] == 2 for p in records)  # the probe's 3 steps stayed in the probe
    # The same command again: nothing left to run, the kept choice is used, nothing measured.
    assert sweep_main(args) == 0
    again = capsys.readouterr().out
    assert "(measured before; kept in" in again and "measuring" not in again


@pytest.mark.extended
@pytest.mark.slow
def test_sigterm_while_measuring_stops_the_probe_and_leaves_nothing(tmp_path, tiny_model_path):
    """SIGTERM to a sweep while ``--parallel auto`` measures: the probe's fit is stopped (it was left
    training on its own, the sweep gone), its folder removed, no run started; exit 143 with one line."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    out = tmp_path / "sweep"
    command = [
        sys.executable, "-m", "lite_ppo.research.sweep", "--recipe", LITE_PPO, "--seed", "0", "--config", TINY,
        "--out", str(out), "--parallel", "auto", "--no-compare", "--", "--data.steps_per_epoch=2",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe_log = out / ".parallel_probe" / "alone" / "copy0" / "probe.log"
    deadline = time.monotonic() + 120
    while not probe_log.exists() and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    children = psutil.Process(sweep.pid).children(recursive=True)
    assert children, sweep.communicate(timeout=60)[0][-3000:]  # the probe's fit
    sweep.send_signal(signal.SIGTERM)
    output = sweep.communicate(timeout=180)[0]
    assert sweep.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert (
        output.strip().splitlines()[-1] == "sweep --parallel auto: stopped by SIGTERM while measuring; no run started"
    )
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (out / ".parallel_probe").exists() and not (out / CHOICE_FILE).exists()
    assert not list(out.rglob("run.json"))
