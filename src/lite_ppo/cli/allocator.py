"""Keep freed heap memory in the process for the next tensor instead of handing it back to the OS.

glibc's malloc serves every allocation above its mmap threshold (128 KiB at start, raised up to
32 MiB as such blocks are freed) with fresh pages from ``mmap`` and returns them with ``munmap`` on
free; blocks below it come from the heap, whose free top is trimmed back to the OS too. A training
step allocates and frees the same large tensors over and over (activations, the [tokens, vocabulary]
logits of a log-prob chunk, the tied embedding's [V, H] gradient, vLLM's per-step buffers), and each
new one page-faults its memory in again: the kernel zeroes every 4 KiB page on first touch, one page
fault at a time, on the thread that touches it. With freed memory kept those faults stop once the heap
holds blocks of the sizes a step asks for (after a step or two); the measured page faults, system time
and step times are in docs/benchmarks.md ("Speed per RL step", freed memory kept).

:func:`retain_freed_memory` tells glibc to serve every block from the heap (``M_MMAP_MAX`` 0) and to
keep its free top (``M_TRIM_THRESHOLD`` INT_MAX), as tcmalloc and jemalloc (what vLLM's CPU docs
preload for the same reason) do by design. Results are bit-for-bit the same; only where memory comes
from changes. Freed memory then stays in the process, available to it but not to other processes: its
resident size stays near its peak. ``lite-ppo`` applies it at start (``lite_ppo.cli.commands``) unless
``LITE_PPO_RETAIN_FREED_MEMORY=0``; it does nothing where the C library has no ``mallopt`` (macOS,
Windows, musl) or another allocator is preloaded (``LD_PRELOAD``), which then decides.

Example:
    >>> from lite_ppo.cli.allocator import retain_freed_memory
    >>> retain_freed_memory()  # doctest: +SKIP
    True
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from collections.abc import Mapping

from lite_ppo.errors import UserError

__all__ = ["DISABLE_ENV", "retain_freed_memory", "retention_enabled"]

DISABLE_ENV = "LITE_PPO_RETAIN_FREED_MEMORY"

# mallopt parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1


_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")


def retention_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :func:`retain_freed_memory` applies here: not turned off by ``LITE_PPO_RETAIN_FREED_MEMORY``
    (0/false/no/off), no allocator preloaded, and glibc's ``mallopt`` available. Changes nothing.

    Raises:
        UserError: the variable holds anything else than those values or 1/true/yes/on (or nothing).
    """
    environ = os.environ if environ is None else environ
    setting = environ.get(DISABLE_ENV, "").strip().lower()
    if setting not in _OFF + _ON:
        raise UserError(f"{DISABLE_ENV}={environ[DISABLE_ENV]!r}: expected 0/false/no/off or 1/true/yes/on")
    if setting in _OFF:
        return False
    if "malloc" in environ.get("LD_PRELOAD", ""):  # tcmalloc, jemalloc, mimalloc: they keep freed memory already
        return False
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and _mallopt() is not None


def retain_freed_memory(environ: Mapping[str, str] | None = None) -> bool:
    """Make glibc malloc keep freed memory for reuse (see the module docstring); returns whether it
    was applied (:func:`retention_enabled`)."""
    if not retention_enabled(environ):
        return False
    mallopt = _mallopt()
    # mallopt returns 1 on success.
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _INT_MAX))


@functools.cache
def _mallopt():
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt
