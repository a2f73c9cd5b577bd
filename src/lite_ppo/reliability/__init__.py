"""Nothing lost, nothing silently wrong: preemption, checkpoint integrity, divergence guard.

One concept per file:

- ``preemption``: a signal (SIGTERM, SIGUSR1, Ctrl-C) stops the run at a step boundary with a
  resumable ``last.ckpt`` and exit status 128 + signal number;
- ``checkpoint_io``: atomic checkpoint writes with a SHA-256 sidecar, checked after save and on load;
- ``checkpoint_integrity``: installs that IO and checks the checkpoint folders are writable at start;
- ``divergence``: a non-finite loss or gradient norm skips the optimizer step; N in a row stop the run.
"""

from lite_ppo.reliability.checkpoint_integrity import CheckpointIntegrity
from lite_ppo.reliability.checkpoint_io import CheckpointCorruptError, CheckpointSaveError, VerifiedCheckpointIO
from lite_ppo.reliability.divergence import DivergenceGuard, TrainingDiverged, divergence_guard_of
from lite_ppo.reliability.preemption import Preemption

__all__ = [
    "CheckpointCorruptError",
    "CheckpointIntegrity",
    "CheckpointSaveError",
    "DivergenceGuard",
    "Preemption",
    "TrainingDiverged",
    "VerifiedCheckpointIO",
    "divergence_guard_of",
]
