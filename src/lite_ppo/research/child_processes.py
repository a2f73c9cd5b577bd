"""Child processes the research loop starts and must not leave behind: started so that a signal cannot
lose one, stopped by the one rule signal, wait with a bound, kill what is left, wait again.

Why starting needs care: the sweep turns a signal into an exception raised wherever the main thread
is (:func:`lite_ppo.research.sweep._signals_raise`). Raised inside :class:`subprocess.Popen` after
its fork (Popen waits for the exec to succeed, longer on a busy machine), the exception leaves a
running child that its owner never learnt about, so nothing stops it: the sweep exits and the child
trains on alone (issue 66). :func:`start_child` lets no handler run until the child is registered,
then delivers the signal that came in the meantime.

Why not block the signals instead (``pthread_sigmask``): a child inherits its parent's signal mask
across fork and exec, so it would start deaf to SIGTERM.

Example:
    >>> import sys
    >>> children = []
    >>> child = start_child(children, [sys.executable, "-c", "import time; time.sleep(60)"])
    >>> stop_children(children, grace_s=10)
    >>> child.returncode == -signal.SIGTERM
    True
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable, Iterator

__all__ = ["STOP_SIGNALS", "deferred_signals", "signals_to", "start_child", "stop_children"]

# The signals a sweep acts on (SIGTERM from a scheduler, SIGUSR1 before a time limit, Ctrl-C).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


@contextlib.contextmanager
def signals_to(handler: Callable, signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """While it lasts, every signal of ``signals`` goes to ``handler``; the handlers found are put back on the
    way out. Outside the main thread (no handler can be set there) it changes nothing."""
    previous = {}
    try:  # a signal while the handlers are being swapped is handled as it comes, and they are put back
        try:
            for signum in signals:
                previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread
            pass
        yield
    finally:
        for signum, earlier in previous.items():
            signal.signal(signum, earlier)


@contextlib.contextmanager
def deferred_signals(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """While it lasts, ``signals`` are only noted; on the way out the handlers that were in place come
    back and each noted signal is raised again, so that its handler runs after the block, not inside it."""
    noted: list[int] = []
    try:
        with signals_to(lambda signum, frame: noted.append(signum), signals):
            yield
    finally:
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


def start_child(children: list[subprocess.Popen], command: list[str], **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen(command, **popen_kwargs)`` appended to ``children`` before any signal handler
    can run (a signal arriving meanwhile is handled right after)."""
    with deferred_signals():
        child = subprocess.Popen(command, **popen_kwargs)
        children.append(child)
    return child


def stop_children(children: list[subprocess.Popen], grace_s: float, signum: int = signal.SIGTERM) -> None:
    """Stop every child still running: ``signum`` (a fit stops its reward workers on SIGTERM), up to
    ``grace_s`` seconds for each to exit, SIGKILL for those still there, then wait for them too. Every
    child is reaped on return (none left running, none a zombie)."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signum)
    for child in children:
        try:
            child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
