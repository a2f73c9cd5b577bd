"""Checkpoints that are written where the user expects, whole, or the run says so at once.

:class:`CheckpointIntegrity` is the callback the ``lite-ppo`` CLI adds by default. At ``setup``
(before the model loads and before ``--ckpt_path`` is read) it

- installs :class:`~lite_ppo.reliability.checkpoint_io.VerifiedCheckpointIO` (atomic writes, a
  SHA-256 beside each file, checks after save and on load) unless the trainer was given another
  ``CheckpointIO`` plugin;
- checks that every ``ModelCheckpoint`` folder can be created and written (a probe file is
  created, fsync'ed and removed), so an unwritable folder fails the run in the first seconds
  with one line instead of after hours with no checkpoint.

How many checkpoints are kept is ``ModelCheckpoint``'s business: ``monitor: step, mode: max,
save_top_k: K`` keeps the K newest; the older ones are deleted only after the new one was
written and verified (a failed save raises before Lightning removes anything).

Example::

    checkpoint_integrity:
      verify_on_load: true   # check size, checksum and archive of --ckpt_path before loading
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from lite_ppo.errors import UserError
from lite_ppo.reliability.checkpoint_io import VerifiedCheckpointIO


class CheckpointIntegrity(Callback):
    """Install verified checkpoint IO and fail fast on an unwritable checkpoint folder.

    Args:
        verify_on_load: check size, checksum and archive of the checkpoint given as ``--ckpt_path``
            before loading it; a damaged file fails with one line naming the newest good one.
        check_writable: probe every ``ModelCheckpoint`` folder at setup.
    """

    def __init__(self, verify_on_load: bool = True, check_writable: bool = True) -> None:
        self.verify_on_load = verify_on_load
        self.check_writable = check_writable

    @override
    def setup(self, trainer, pl_module, stage: str) -> None:
        strategy = trainer.strategy
        if type(strategy.checkpoint_io) is TorchCheckpointIO:  # Lightning's default, not a user's plugin
            strategy.checkpoint_io = VerifiedCheckpointIO(verify_on_load=self.verify_on_load)
        if stage == "fit" and self.check_writable and trainer.is_global_zero:
            for folder in checkpoint_folders(trainer):
                ensure_writable(folder)


def checkpoint_folders(trainer) -> list[str]:
    """The folder each ``ModelCheckpoint`` will write to, resolved as ``ModelCheckpoint`` does at
    setup (``dirpath``, else ``<logger save_dir>/<name>/<version>/checkpoints``, else
    ``<default_root_dir>/checkpoints``)."""
    folders = []
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint):
            continue
        if callback.dirpath is not None:
            folders.append(str(callback.dirpath))
        elif trainer.loggers:
            logger = trainer.loggers[0]
            save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
            version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
            folders.append(os.path.join(save_dir, str(logger.name), version, "checkpoints"))
        else:
            folders.append(os.path.join(trainer.default_root_dir, "checkpoints"))
    return [f for f in dict.fromkeys(folders) if "://" not in f]


def ensure_writable(folder: str | os.PathLike) -> None:
    """Create ``folder`` if needed and write, fsync and remove a probe file in it; a failure is a
    :class:`UserError` naming the folder and the reason."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".lite-ppo-write-probe-", dir=folder)
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise UserError(
            f"checkpoint folder {folder} is not writable ({reason}); choose another with the ModelCheckpoint dirpath "
            "or trainer.default_root_dir"
        ) from err
