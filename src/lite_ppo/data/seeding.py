"""The run's seed, for the pieces that seed their own generators (data order, rollout sampling).

``lite-ppo fit --seed_everything 7`` must change the problems a run sees and the responses it
samples, not only torch's global generator: ``MathDataModule(seed=None)`` and ``Rollout(seed=None)``
(their defaults) take the seed Lightning's ``seed_everything`` set for the run, which it records in
the environment variable ``PL_GLOBAL_SEED`` (its DataLoader workers read it the same way). An
explicit ``data.seed`` / ``rollout.seed`` still wins, to vary one source of randomness alone.

Example:
    >>> from lightning.pytorch import seed_everything
    >>> _ = seed_everything(7, verbose=False)
    >>> run_seed(None), run_seed(3)
    (7, 3)
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_SEED", "run_seed"]

# The seed of a run that set none (seed_everything false, or a script that never seeds).
DEFAULT_SEED = 42


def run_seed(seed: int | None = None) -> int:
    """``seed``; when None, the run's global seed (``PL_GLOBAL_SEED``), else :data:`DEFAULT_SEED`."""
    if seed is not None:
        return int(seed)
    global_seed = os.environ.get("PL_GLOBAL_SEED")
    return int(global_seed) if global_seed is not None else DEFAULT_SEED
