"""One sweep at a time per output folder. The same sweep command started twice (in a second terminal,
or again while the first still runs) would start every unfinished run twice, each into its own folder,
sharing the cores and counting each seed twice; the second is refused in one line instead."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from lite_ppo.errors import UserError

LOCK_FILE = ".sweep.lock"


class SweepLock:
    """An advisory lock on ``<out>/.sweep.lock``, held while a sweep runs; the operating system drops it
    when the process ends, however it ends. Where there are no advisory locks (Windows) it checks nothing.

    Example::

        with SweepLock(Path("runs/r2_dyn")):
            run_sweep(points, Path("runs/r2_dyn"))
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self._fd: int | None = None

    def __enter__(self) -> SweepLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover (not on Linux or macOS)
            return self
        self.out.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 300).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise UserError(
                f"another lite-ppo sweep is running into {self.out} ({holder}); wait for it to end or stop it "
                "(Ctrl-C or kill: its runs save a checkpoint), then run this command again"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None
