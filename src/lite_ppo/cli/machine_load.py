"""A note at fit start when other jobs already use the cores this run's math threads need.

PyTorch's CPU kernels split each operation over ``torch.get_num_threads()`` threads that wait for each
other at every step; when another process holds some of the cores, the waiting dominates and a step runs
many times slower (docs/benchmarks.md, "A busy machine"). Nothing fails, so without a word a user only
sees a run that crawls.

Example:
    >>> busy_machine_note(load=2.0, cores=2, threads=2) is not None
    True
    >>> busy_machine_note(load=0.1, cores=2, threads=2) is None
    True
"""

from __future__ import annotations

import os

from lite_ppo.rewards.math_verify_reward import available_cores

__all__ = ["busy_machine_note", "machine_load_note"]

#: Load (runnable processes, the 1-minute average) beyond the cores a run may share before it is said: a
#: shell, an editor or a TensorBoard server add a few tenths and slow nothing measurably.
SLACK = 0.5


def busy_machine_note(load: float, cores: int, threads: int) -> str | None:
    """The note when the machine's load plus this run's threads exceed its cores by more than
    :data:`SLACK`; None otherwise. ``load`` is measured before the run's own work starts."""
    if load + threads <= cores + SLACK:
        return None
    fewer = max(1, round(cores - load))  # the cores left free, at least one thread
    advice = (
        f"start it with OMP_NUM_THREADS={fewer} (before lite-ppo) or when the other jobs end"
        if fewer < threads
        else "run it when the other jobs end"
    )
    return (
        f"this machine is busy (load average {load:.1f} on {cores} cores) and this run computes with {threads} "
        f"threads: its steps can be many times slower than on idle cores; {advice}"
    )


def machine_load_note() -> str | None:
    """:func:`busy_machine_note` for this process: the 1-minute load average, the cores it may run on and
    torch's math threads. None where the load average is not available (not Linux or macOS)."""
    import torch

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return busy_machine_note(load, available_cores(), torch.get_num_threads())
