"""A run's TensorBoard scalars as a table of series (tag -> steps, values), read with tensorboard's
own event reader. ``compare`` plots and summarises these tables; the advisor's rules read them.

Example:
    >>> table = read_scalars("runs/lite_ppo/tiny/seed42")  # doctest: +SKIP
    >>> table[REWARD_ACCURACY].last()                         # doctest: +SKIP
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lite_ppo.research.run_folder import RunDir

__all__ = ["ScalarTable", "Series", "has_events", "read_many", "read_scalars"]


@dataclass(frozen=True)
class Series:
    """One scalar over training: ``steps`` strictly increasing (int64), ``values`` (float64), same length."""

    steps: np.ndarray
    values: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: list[tuple[int, float]] | list[tuple[int, float, float]]) -> Series:
        """From (step, value) or (step, value, wall_time) pairs in any order; a step logged twice
        (a resumed run re-logs the steps after its checkpoint) keeps the value written last."""
        if not pairs:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        by_step: dict[int, float] = {}
        ordered = sorted(pairs, key=lambda p: p[2]) if len(pairs[0]) == 3 else list(pairs)
        for pair in ordered:
            by_step[int(pair[0])] = float(pair[1])
        steps = np.array(sorted(by_step), dtype=np.int64)
        return cls(steps, np.array([by_step[int(s)] for s in steps], dtype=np.float64))

    def __len__(self) -> int:
        return int(self.steps.size)

    def last(self) -> float:
        return float(self.values[-1])

    def finite(self) -> Series:
        keep = np.isfinite(self.values)
        return Series(self.steps[keep], self.values[keep])


ScalarTable = Mapping[str, Series]

# Keep every scalar; store one of everything else (histograms, text, images) since nothing here reads them.
_SIZE_GUIDANCE = {"scalars": 0, "tensors": 1, "histograms": 1, "images": 1, "audio": 1, "distributions": 1}


def read_scalars(run_dir: str | Path) -> dict[str, Series]:
    """Every scalar in the event files directly inside ``run_dir`` (all of them, in file order).

    A run still being written is read up to its last complete record (tensorboard's reader stops at a
    truncated one). A folder without event files gives an empty table.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = Path(run_dir)
    if not RunDir(run_dir).events:
        return {}
    accumulator = EventAccumulator(str(run_dir), size_guidance=_SIZE_GUIDANCE)
    accumulator.Reload()
    table: dict[str, Series] = {}
    for tag in accumulator.Tags().get("scalars", []):
        events = accumulator.Scalars(tag)
        table[tag] = Series.from_pairs([(e.step, e.value, e.wall_time) for e in events])
    return table


def has_events(run_dir: str | Path) -> bool:
    """True when an event file directly inside ``run_dir`` yields at least one TensorBoard record
    (every writer starts its file with one); False for a folder without event files, or whose files
    are damaged, empty or not TensorBoard files (tensorboard's reader then yields nothing)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    for path in RunDir(Path(run_dir)).events:
        try:
            if next(iter(EventFileLoader(str(path)).Load()), None) is not None:
                return True
        except Exception:  # noqa: BLE001 (any reader failure means: not readable)
            continue
    return False


def read_many(run_dirs: list[Path], jobs: int | None = None) -> dict[Path, dict[str, Series]]:
    """:func:`read_scalars` of every run, ``jobs`` runs at a time in worker processes.

    Reading is CPU-bound (tensorboard's pure-Python record reader checks a CRC per record: about
    14,000 records, one 200-step run, take a second), so runs are read in parallel; ``jobs=1``
    (or a single run) reads in this process. Default: one worker per CPU, at most 8.
    """
    jobs = jobs if jobs is not None else min(8, os.cpu_count() or 1)
    if jobs <= 1 or len(run_dirs) <= 1:
        return {path: read_scalars(path) for path in run_dirs}
    # fork: the workers inherit the imported modules instead of importing torch again.
    context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=min(jobs, len(run_dirs)), mp_context=context) as pool:
        return dict(zip(run_dirs, pool.map(read_scalars, run_dirs)))
