"""A fork server for ``lite-ppo sweep``: import the training stack once, fork one process per run.

Every ``lite-ppo fit`` spends its first seconds importing Lightning, transformers, torchmetrics, scipy and
TensorBoard before its first step, a share of a short run that docs/benchmarks.md ("The instrument: speed")
measures. The fork server is one fresh Python process per sweep that imports the modules
it is given and then forks a child per run; the child calls the entry point it is given (the sweep's:
:data:`lite_ppo.research.grid.FIT_ENTRY`, what ``python -m lite_ppo.cli`` runs) with the run's arguments.

Why forking here is safe: the server computes nothing. Importing torch starts no math threads (its
OpenMP pool starts at the first parallel operation), so each child starts its pool as a fresh process
does, with the thread count of the environment the server was started with (the sweep's ``--threads``).
The child gets a process group of its own, stdin from ``/dev/null``, stdout and stderr into its log and
the command line a process launch would have shown (``ps``, ``top`` and ``pkill -f`` see ``lite-ppo fit
...``, not the server's; ``setproctitle``), and ends through the interpreter's normal exit (``atexit``
handlers, threads joined, buffers flushed); Python's ``random`` reseeds itself in a forked child. A run
forked so trains bit-identically to one started as its own process (``tests/test_fork_server.py``).

The protocol, JSON lines: the sweep writes ``{"args": [...], "log": PATH, "append": BOOL, "title": TEXT}``
to the server's stdin (``title`` optional); the server answers ``{"pid": N}`` when it forked the run and
``{"exited": N, "code": C}`` when the run ended (``C`` as :attr:`subprocess.Popen.returncode`: negative for
a signal). The end of its stdin stops the server once its runs have ended. Signals go from the sweep
straight to a run's pid.

Example:
    >>> server = ForkServer("lite_ppo.cli.commands:main", ["lite_ppo.cli.commands"], title="lite-ppo")  # doctest: +SKIP
    >>> run = server.start(["fit", "--config", "configs/quickstart.yaml"], Path("fit.log"))  # doctest: +SKIP
    >>> run.wait()  # doctest: +SKIP
    0
"""

from __future__ import annotations

import importlib
import json
import os
import select
import shlex
import subprocess
import sys
from pathlib import Path

import setproctitle

__all__ = ["ForkServer", "ForkServerGone", "ForkedRun"]


class ForkServerGone(RuntimeError):
    """The server process ended before it answered (it failed to import, or was killed)."""


class ForkedRun:
    """One run the server forked: the part of :class:`subprocess.Popen` that ``sweep`` uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.server.collect(block=False)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self.server.collect(block=True)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # ended just now; its exit line is on its way
                pass


class ForkServer:
    """The sweep's side: starts the server process and asks it for runs."""

    def __init__(
        self,
        entry: str,
        preload: list[str] | tuple[str, ...] = (),
        python: str | None = None,
        env: dict[str, str] | None = None,
        title: str | None = None,
    ) -> None:
        """``entry``: ``"package.module:function"``, called with a run's argument list in each child (its
        return value the exit code, as ``sys.exit`` takes it); ``preload``: modules the server imports first;
        ``title``: the program name a run's command line shows (``TITLE ARGS...``; None: the server's)."""
        self.title = title
        python = python or sys.executable
        try:
            # Its own process group: a Ctrl-C at the terminal reaches the runs through the sweep, not the server.
            self.process = subprocess.Popen(
                [python, "-m", __name__, entry, *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                process_group=0,
            )
        except OSError as err:
            raise ForkServerGone(f"cannot start the sweep's fork server with {python}: {err.strerror}") from None
        self._buffer = b""
        self._runs: dict[int, ForkedRun] = {}
        self._started: list[int] = []
        # Exits read before their run was handed out: a run that ends at once can answer in the same read
        # as its pid.
        self._ended_early: dict[int, int] = {}

    def start(self, args: list[str], log: Path, append: bool = False) -> ForkedRun:
        """Fork a run of ``lite-ppo ARGS`` with its output into ``log``; returns once it runs."""
        request = {"args": list(args), "log": str(log), "append": append}
        if self.title:
            request["title"] = shlex.join([self.title, *args])
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._gone() from None
        while not self._started:
            self.collect(block=True)
        run = ForkedRun(self, self._started.pop(0))
        if run.pid in self._ended_early:
            run.returncode = self._ended_early.pop(run.pid)
        else:
            self._runs[run.pid] = run
        return run

    def collect(self, block: bool) -> None:
        """Read the server's answers that have arrived (with ``block``, wait for at least one line)."""
        fd = self.process.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], None if block else 0)
            if not ready:
                return
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._gone()
            self._buffer += chunk
            lines = self._buffer.split(b"\n")
            self._buffer = lines.pop()
            for line in lines:
                self._answer(json.loads(line))
            if lines:
                return

    def _answer(self, message: dict) -> None:
        if "pid" in message:
            self._started.append(message["pid"])
        elif message["exited"] in self._runs:
            self._runs.pop(message["exited"]).returncode = message["code"]
        else:
            self._ended_early[message["exited"]] = message["code"]

    def _gone(self) -> ForkServerGone:
        code = self.process.wait()
        return ForkServerGone(f"the sweep's fork server ended (exit {code}); its error is above")

    def close(self) -> None:
        """Stop the server (it waits for its runs to end first)."""
        if self.process.stdin and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        self.process.wait()


# The server's side. It writes its answers with os.write (no Python buffer that a child could inherit
# half-written) and uses no threads (a fork copies only the forking thread, and any lock another held).


def serve(preload: list[str], requests: int = 0, answers: int = 1) -> dict | None:
    """Import ``preload``, then answer requests on fd ``requests`` until its end; returns a request only in
    a forked child."""
    for name in preload:
        importlib.import_module(name)
    buffer, children, open_ = b"", set(), True
    while open_ or children:
        ready, _, _ = select.select([requests] if open_ else [], [], [], 0.05)
        if ready:
            chunk = os.read(requests, 65536)
            open_ = bool(chunk)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    return request
                children.add(pid)
                os.write(answers, (json.dumps({"pid": pid}) + "\n").encode())
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            os.write(answers, (json.dumps({"exited": pid, "code": code}) + "\n").encode())
    return None


def become_run(request: dict) -> None:
    """In the forked child: the process a sweep would have started, minus the imports."""
    if request.get("title"):
        setproctitle.setproctitle(request["title"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request["append"] else os.O_TRUNC))
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # Last: a run in its own process group is set up (its title, log and stdin), which is what an
    # observer waiting for the group can rely on.
    os.setpgid(0, 0)
    sys.argv = [sys.argv[0], *request["args"]]


def main(argv: list[str]) -> int | None:
    entry, *preload = argv
    request = serve(preload)
    if request is None:
        return 0
    become_run(request)
    module, _, function = entry.partition(":")
    return getattr(importlib.import_module(module), function)(request["args"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
