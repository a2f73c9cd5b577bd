"""The CLI's default logger: Lightning's TensorBoard logger without Lightning's ``epoch`` scalar."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger as LightningTensorBoardLogger
from typing_extensions import override


class TensorBoardLogger(LightningTensorBoardLogger):
    """Lightning's ``TensorBoardLogger``, less the ``epoch`` value Lightning adds to every logging call.

    An RL run is one long epoch, so ``epoch`` is a flat line; TensorBoard's TIME SERIES tab sorts its
    groups by name and opens the first two, and ``epoch`` took one of those two places. Everything
    else is Lightning's logger unchanged.

    Example (the CLI's default; the same in a config)::

        trainer:
          logger:
            class_path: lite_ppo.cli.tensorboard_logger.TensorBoardLogger
            init_args: {save_dir: runs}
    """

    @override
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        super().log_metrics({name: value for name, value in metrics.items() if name != "epoch"}, step)
