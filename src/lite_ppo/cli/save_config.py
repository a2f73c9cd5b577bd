"""The run folder's ``config.yaml``, written whole: Lightning's ``SaveConfigCallback`` opens the file for
writing and fills it, so a resume (which writes it again, into the same folder) killed at that moment, or
on a full disk, leaves a cut-off YAML that still parses and that ``compare`` and ``advise`` would trust."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from typing_extensions import override

from lite_ppo.reliability.checkpoint_io import atomic_write_bytes


class AtomicSaveConfig(SaveConfigCallback):
    """``SaveConfigCallback`` whose file is replaced whole (a temporary file, synced, renamed).

    Example::

        LightningCLI(LitePPO, MathDataModule, save_config_callback=AtomicSaveConfig,
                     save_config_kwargs={"overwrite": True})
    """

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # every rank: it broadcasts the directory
        if trainer.is_global_zero and log_dir is not None:
            path = Path(log_dir) / self.config_filename
            if path.is_file() and not self.overwrite:
                raise RuntimeError(f"{path} exists; {type(self).__name__} does not overwrite it (overwrite=False)")
            path.parent.mkdir(parents=True, exist_ok=True)
            # Lightning's save(..., skip_none=False): the same YAML (skip_none is skip_unset's deprecated name).
            atomic_write_bytes(path, self.parser.dump(self.config, skip_unset=False).encode())
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)
