"""A start-up that takes its time, for the test of a signal during ``fit``'s start-up: at one Lightning hook
before the first training step, it writes a marker file and then works (sleeps) for a minute, as a large
model loading or an inference engine starting would."""

from __future__ import annotations

import time
from pathlib import Path

from lightning.pytorch import Callback


class SlowStartup(Callback):
    """At ``hook`` (``setup``, ``on_fit_start``: before Lightning installs its signal handlers;
    ``on_train_start``: after), write ``marker`` and sleep ``seconds``."""

    def __init__(self, marker: str, hook: str = "on_fit_start", seconds: float = 60.0) -> None:
        self.marker = Path(marker)
        self.hook = hook
        self.seconds = seconds

    def _maybe_wait(self, hook: str) -> None:
        if hook == self.hook:
            self.marker.write_text(hook)
            time.sleep(self.seconds)

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._maybe_wait("setup")

    def on_fit_start(self, trainer, pl_module) -> None:
        self._maybe_wait("on_fit_start")

    def on_train_start(self, trainer, pl_module) -> None:
        self._maybe_wait("on_train_start")
