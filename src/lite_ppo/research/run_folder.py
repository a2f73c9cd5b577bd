"""What a run folder is: the one definition that ``fit``'s checkpoints, ``compare`` and ``sweep`` share.

``lite-ppo fit`` writes into ``<save_dir>/<recipe>/<model>/seed<S>``: TensorBoard event files, LightningCLI's
``config.yaml``, the run record ``run.json`` and ``checkpoints/``. A folder is a run when it holds
``run.json`` or TensorBoard event files of its own (a plain Lightning run has only those); the logs of
``validate``/``test`` of a run's checkpoints sit in subfolders of the run and are not runs of their own.

Example:
    >>> RunDir.is_run(Path("/nonexistent"))
    False
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"
EVENTS_GLOB = "*tfevents*"  # TensorBoard names them events.out.tfevents.<time>.<host>...


@dataclass(frozen=True)
class RunDir:
    """One run folder: its record, its config, its TensorBoard events."""

    path: Path

    @staticmethod
    def is_run(path: str | Path) -> bool:
        """Whether ``path`` is a run folder: ``run.json`` or TensorBoard event files in it."""
        path = Path(path)
        return path.is_dir() and ((path / RUN_FILE).is_file() or any(path.glob(EVENTS_GLOB)))

    @property
    def written_by_fit(self) -> bool:
        """Whether ``lite-ppo fit`` wrote it: ``run.json``, or ``config.yaml`` beside event files
        (a run from before the record existed)."""
        return (self.path / RUN_FILE).is_file() or ((self.path / CONFIG_FILE).is_file() and bool(self.events))

    @property
    def events(self) -> list[Path]:
        """Its own TensorBoard event files (not those of its validate/test subfolders), by name."""
        return sorted(self.path.glob(EVENTS_GLOB))

    @property
    def record(self) -> dict[str, Any] | None:
        """``run.json`` as a dict; None when absent or unreadable (a run from before the record)."""
        try:
            loaded = json.loads((self.path / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None

    @property
    def config(self) -> dict[str, Any] | None:
        """LightningCLI's ``config.yaml`` as a dict; None when absent, unreadable or not a mapping."""
        try:
            loaded = yaml.safe_load((self.path / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError):  # ValueError: bytes that are not UTF-8, a date like 2001-02-30
            return None
        return loaded if isinstance(loaded, dict) else None

    @classmethod
    def of_checkpoint(cls, ckpt_path: Any) -> RunDir | None:
        """The run ``fit`` wrote that holds ``ckpt_path`` (``<run>/checkpoints/x.ckpt`` or ``<run>/x.ckpt``)."""
        if not ckpt_path or not isinstance(ckpt_path, (str, Path)):
            return None
        for folder in list(Path(ckpt_path).resolve().parents)[:2]:
            if cls(folder).written_by_fit:
                return cls(folder)
        return None

    @classmethod
    def below(cls, root: str | Path) -> list[RunDir]:
        """The runs at or below ``root``, outermost only (a run's validate/test logs are part of it), by path."""
        root = Path(root)
        if cls.is_run(root):
            return [cls(root)]
        if not root.is_dir():
            return []
        found = {p.parent for p in root.rglob(EVENTS_GLOB)} | {p.parent for p in root.rglob(RUN_FILE)}
        return [cls(p) for p in sorted(found) if not any(parent in found for parent in p.parents)]
