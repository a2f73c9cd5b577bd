"""The busy-machine note at fit start (lite_ppo.cli.machine_load)."""

from __future__ import annotations

import os

import pytest
import torch

from helpers.fits import tiny_fit_args
from lite_ppo.cli import main
from lite_ppo.cli.machine_load import SLACK, busy_machine_note


@pytest.mark.parametrize(
    ("load", "cores", "threads", "said"),
    [
        (0.0, 2, 2, False),  # idle cores
        (0.4, 2, 2, False),  # a shell or a TensorBoard server: within the slack
        (1.0, 2, 1, False),  # a sweep's second single-thread run beside the first: fits
        (1.0, 2, 2, True),  # one busy core, two threads
        (2.0, 2, 1, True),  # both cores busy: even one thread waits
        (3.9, 16, 8, False),  # a larger machine with room
        (12.0, 16, 8, True),
    ],
)
def test_said_exactly_when_the_load_and_the_threads_exceed_the_cores(load, cores, threads, said):
    assert (busy_machine_note(load, cores, threads) is not None) == said == (load + threads > cores + SLACK)


def test_the_note_names_the_load_the_cores_and_what_to_do():
    note = busy_machine_note(1.0, 2, 2)
    assert "load average 1.0 on 2 cores" in note and "with 2 threads" in note
    assert "start it with OMP_NUM_THREADS=1" in note  # one core left free: one thread
    assert "OMP_NUM_THREADS=1" in busy_machine_note(3.0, 2, 2)  # none free: still one thread (fewer waits)
    assert "OMP_NUM_THREADS=6" in busy_machine_note(10.0, 16, 8)
    single = busy_machine_note(2.0, 2, 1)
    assert "OMP_NUM_THREADS" not in single and single.endswith("run it when the other jobs end")


@pytest.mark.parametrize(("load", "said"), [(50.0, True), (0.0, False)])
def test_fit_says_it_at_start(tmp_path, capsys, monkeypatch, load, said):
    """`lite-ppo fit` on a busy machine prints the note before anything runs (here a setting refused at
    setup ends the fit right after); on idle cores it prints nothing of the kind."""
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    with pytest.raises(SystemExit):
        main(tiny_fit_args(tmp_path, "--model.num_mini_batches", "7"))
    err = capsys.readouterr().err
    # The fit got past the point where the note is printed either way: it stopped at the refused setting.
    assert "model.num_mini_batches=7" in err, err
    assert ("lite-ppo fit: note: this machine is busy" in err) == said, err
    if said:
        assert f"computes with {torch.get_num_threads()} threads" in err
