"""Keep a command's stdout for its result while models are built or loaded: ``$(lite-ppo prepare-model
builtin:tiny)`` and ``$(lite-ppo export-hf ...)`` must be the folder alone.

The model libraries print on stdout: DeepSpeed's logger writes its accelerator line ("Setting accelerator
to CPU ...") to ``sys.stdout`` when transformers first imports it (saving or loading a model), and C
extensions write to file descriptor 1. :func:`stdout_to_stderr` sends all of it to stderr, Python's
``sys.stdout`` and the descriptor both, so that what the command prints after it is all stdout holds.
(Here, below the command line, so that ``lite_ppo.checkpoints.export`` can use it too.)

Example::

    with stdout_to_stderr():
        folder = resolve_model(name, verify=True)
    print(folder)
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["stdout_to_stderr"]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Inside the block, whatever goes to stdout goes to stderr (``sys.stdout`` and descriptor 1)."""
    stdout = sys.stdout
    stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (closed stdout): redirect Python's stream only
        saved = None
    try:
        if saved is not None:
            os.dup2(2, 1)
        # A handler created inside the block (DeepSpeed's, at its import) binds this stream: stderr for good.
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        # What a handler bound earlier wrote into the stdout buffer meanwhile goes out while 1 is stderr.
        stdout.flush()
        sys.stderr.flush()
        _flush_c_stdio()  # C code's buffered printf output, written while 1 was stderr, goes there
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """``fflush(NULL)`` of the C library: its stdout is fully buffered when fd 1 is a pipe (``$(...)``)."""
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to load here: nothing of it buffered
        pass
