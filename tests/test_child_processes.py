"""Children of the research loop: a signal whose handler raises (the sweep's) while a child starts cannot
lose it, and stopping children reaps every one, also one that ignores SIGTERM (issue 66)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from lite_ppo.research.child_processes import deferred_signals, start_child, stop_children

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


class Interrupted(Exception):
    pass


def _raise(signum, frame):
    raise Interrupted(signum)


def _slow_start():
    time.sleep(1.0)  # in the child, before its exec: Popen in the parent waits for the exec all this time


def test_a_signal_while_a_child_starts_is_raised_after_it_is_registered():
    """SIGUSR1 arrives 0.3 s into a start that takes 1 s (the parent is inside Popen, after the fork):
    the handler's exception comes out of start_child with the child in the list, so its owner can stop
    it. With a plain Popen the exception fired inside Popen and the started child was nobody's."""
    children: list[subprocess.Popen] = []
    previous = signal.signal(signal.SIGUSR1, _raise)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(Interrupted):
            start_child(children, SLEEPER, preexec_fn=_slow_start)
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
    assert len(children) == 1 and children[0].poll() is None
    stop_children(children, grace_s=10)
    assert children[0].returncode == -signal.SIGTERM


def test_a_plain_popen_loses_its_child_to_the_same_signal():
    """The failure start_child exists for, shown with the same timing: the exception leaves Popen, so
    nothing returns the child that is running (found here by its marker file)."""
    import tempfile
    from pathlib import Path

    marker = Path(tempfile.mkdtemp()) / "pid"
    script = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    previous = signal.signal(signal.SIGUSR1, _raise)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
    returned = None
    try:
        timer.start()
        with pytest.raises(Interrupted):
            returned = subprocess.Popen([sys.executable, "-c", script], preexec_fn=_slow_start)
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
    assert returned is None
    deadline = time.monotonic() + 60
    while not (marker.is_file() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(marker.read_text())
    os.kill(pid, signal.SIGKILL)  # the orphan: the test's own clean-up
    os.waitpid(pid, 0)


def test_deferred_signals_note_a_signal_and_deliver_it_after_the_block():
    previous = signal.signal(signal.SIGUSR1, _raise)
    reached_end = False
    try:
        with pytest.raises(Interrupted):
            with deferred_signals():
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.1)  # a handler would have run by now
                reached_end = True
        assert signal.getsignal(signal.SIGUSR1) is _raise  # the handler is back
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert reached_end


def test_stop_children_kills_one_that_ignores_sigterm_and_reaps_all():
    ignoring = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(120)"]  # fmt: skip
    children: list[subprocess.Popen] = []
    start_child(children, SLEEPER)
    stubborn = start_child(children, ignoring, stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline().strip() == "ready"  # its SIGTERM handler is in place
    start = time.monotonic()
    stop_children(children, grace_s=1)
    assert time.monotonic() - start < 30
    assert [child.returncode for child in children] == [-signal.SIGTERM, -signal.SIGKILL]
    for child in children:  # reaped: no zombie left under this process
        with pytest.raises(ChildProcessError):
            os.waitpid(child.pid, os.WNOHANG)
    stubborn.stdout.close()
