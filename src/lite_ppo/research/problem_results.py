"""Per-problem held-out results of a run: ``<run_dir>/heldout/step_<global_step>.json``.

Each evaluation writes which held-out problems the policy solved, ``{"step": int, "problems": [{"id": str,
"tier": str, "correct": bool}, ...]}``; every run of a study evaluates the same problem ids, so two groups
can be compared problem by problem (:func:`lite_ppo.research.bootstrap.paired_bootstrap`).

Which file scores a run: under the checkpoint rule ``last``, the run's last file (the highest step); under
``best``, the file of the selected evaluation's step (its ``step`` field, else its file name), or none. A
file that cannot be read as that format counts as absent (a run may be writing it).

Example:
    >>> read_problem_results(Path("runs/lite_ppo/testbed/seed0"))      # doctest: +SKIP
    {'easy/add-17': True, 'easy/add-18': False, ...}
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

__all__ = ["HELDOUT_DIR", "correctness_matrix", "read_problem_results"]

HELDOUT_DIR = "heldout"
_FILE = re.compile(r"^step_(\d+)\.json$")


def _load(path: Path) -> tuple[int, dict[str, bool]] | None:
    try:
        data = json.loads(path.read_text())
        # Keyed by tier and id: an id need only be unique within its tier.
        problems = {f"{p.get('tier', '')}/{p['id']}": bool(p["correct"]) for p in data["problems"]}
        step = int(data.get("step", _FILE.match(path.name).group(1)))  # type: ignore[union-attr]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return step, problems


def read_problem_results(run_dir: Path, step: int | None = None, tier: str = "*") -> dict[str, bool] | None:
    """``"<tier>/<id>"`` -> solved, from the run's last per-problem file, or the one of ``step``, for every
    tier (``"*"``) or one; None if none."""
    found = _read(run_dir, step)
    if found is None or tier == "*":
        return found
    return {key: correct for key, correct in found.items() if key.split("/", 1)[0] == tier} or None


def _read(run_dir: Path, step: int | None) -> dict[str, bool] | None:
    folder = Path(run_dir) / HELDOUT_DIR
    if not folder.is_dir():
        return None
    files = sorted(
        (int(m.group(1)), p) for p in folder.iterdir() if (m := _FILE.match(p.name)) is not None and p.is_file()
    )
    if step is None:
        loaded = _load(files[-1][1]) if files else None
        return loaded[1] if loaded else None
    for _, path in reversed(files):
        loaded = _load(path)
        if loaded is not None and loaded[0] == step:
            return loaded[1]
    return None


def correctness_matrix(results: list[dict[str, bool]], ids: list[str]) -> np.ndarray:
    """Runs x problems as 0/1 floats, problems in the order of ``ids`` (each run must have them all)."""
    return np.array([[float(r[i]) for i in ids] for r in results], dtype=np.float64).reshape(len(results), len(ids))
