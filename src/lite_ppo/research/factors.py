"""The factors of a factorial sweep: ``--factor NAME=LEVEL:FRAGMENT.yaml,LEVEL:FRAGMENT.yaml``.

A factor is one technique setting with named levels; each level is a YAML config fragment (or
nothing: ``LEVEL`` alone runs the recipe as it is). A cell of the grid takes one level of every
factor; its fragments are merged into one config that follows the recipe and the ``--config`` files:

- mappings merge key by key (later factors win on a clash);
- ``trainer.callbacks`` entries merge *by class* into the callback list the recipe and configs
  define: an entry whose class (the last part of ``class_path``) is already there updates that
  callback's ``init_args``, any other entry is appended. LightningCLI would replace the whole list
  with a fragment's, dropping the recipe's other techniques, so a fragment names only its technique.

A level cannot remove a callback of the recipe: start from a recipe without the technique and add it
in the level that has it.

Example (Lite PPO's two parts as a 2 x 2, ``configs/factors/``)::

    lite-ppo sweep --recipe configs/recipes/lite_ppo.yaml --seed 0 1 2 --config configs/models/tiny.yaml \\
        --factor norm=group_std:configs/factors/norm_group_std.yaml,batch_std:configs/factors/norm_batch_std.yaml \\
        --factor agg=token:configs/factors/agg_token.yaml,seq:configs/factors/agg_seq.yaml

    # configs/factors/norm_batch_std.yaml
    trainer:
      callbacks:
        - class_path: lite_ppo.callbacks.AdvantageNormalization
          init_args: {mean_scope: group, std_scope: batch}
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lite_ppo.errors import UserError

__all__ = ["Factor", "Level", "cell_config", "parse_factor"]

_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class Level:
    """One level of a factor: its name and its config fragment (None: the recipe as it is)."""

    name: str
    fragment: str | None = None


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[Level, ...]

    @property
    def level_names(self) -> list[str]:
        return [level.name for level in self.levels]


def parse_factor(text: str) -> Factor:
    """``"norm=group_std:a.yaml,batch_std:b.yaml"`` -> a :class:`Factor` (files checked to exist)."""
    usage = "expected NAME=LEVEL:FRAGMENT.yaml,LEVEL:FRAGMENT.yaml (a LEVEL alone: the recipe unchanged)"
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise UserError(f"--factor {text!r}: {usage}")
    levels = []
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        level, _, fragment = item.partition(":")
        level, fragment = level.strip(), fragment.strip() or None
        if not _NAME.match(level):
            raise UserError(f"--factor {text!r}: level name {level!r} (letters, digits, . _ -); {usage}")
        if fragment is not None and not Path(fragment).is_file():
            raise UserError(f"--factor {text!r}: config fragment {fragment!r} does not exist")
        levels.append(Level(level, fragment))
    names = [level.name for level in levels]
    if len(levels) < 2 or len(set(names)) != len(names):
        raise UserError(f"--factor {text!r}: give two or more levels with distinct names; {usage}")
    return Factor(name, tuple(levels))


def _load(path: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"config {path!r}: cannot read it as YAML ({err})") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(f"config {path!r}: expected a mapping at the top level")
    return loaded


def _class_name(entry: Any) -> str:
    path = entry.get("class_path", "") if isinstance(entry, dict) else str(entry)
    return str(path).rsplit(".", 1)[-1]


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_callbacks(callbacks: list[Any], entries: list[Any], fragment: str) -> list[Any]:
    """``callbacks`` with each entry of a fragment merged in by class (updated in place, or appended)."""
    out = copy.deepcopy(callbacks)
    for entry in entries:
        if not isinstance(entry, dict) or "class_path" not in entry:
            raise UserError(f"config fragment {fragment!r}: trainer.callbacks entries need a class_path")
        match = [i for i, cb in enumerate(out) if _class_name(cb) == _class_name(entry)]
        if len(match) > 1:
            raise UserError(
                f"config fragment {fragment!r}: the recipe has {len(match)} {_class_name(entry)} callbacks; "
                "which one to change is ambiguous"
            )
        if match:
            current = out[match[0]] if isinstance(out[match[0]], dict) else {"class_path": out[match[0]]}
            init_args = _merge(current.get("init_args") or {}, entry.get("init_args") or {})
            out[match[0]] = {**current, "init_args": init_args}
        else:
            out.append(copy.deepcopy(entry))
    return out


def cell_config(base_configs: list[str], fragments: list[str]) -> dict[str, Any]:
    """The one config a cell adds after ``base_configs`` (the recipe, then the ``--config`` files):
    its ``fragments`` merged (see the module docstring); ``{}`` when the cell changes nothing."""
    merged: dict[str, Any] = {}
    callbacks: list[Any] | None = None
    for fragment in fragments:
        content = _load(fragment)
        trainer = content.get("trainer") if isinstance(content.get("trainer"), dict) else {}
        entries = trainer.get("callbacks")
        if entries is not None:
            if not isinstance(entries, list):
                raise UserError(f"config fragment {fragment!r}: trainer.callbacks must be a list")
            if callbacks is None:  # the list LightningCLI would use: the last config that sets it
                callbacks = []
                for path in base_configs:
                    listed = (_load(path).get("trainer") or {}).get("callbacks")
                    if isinstance(listed, list):
                        callbacks = listed
            callbacks = _merge_callbacks(callbacks, entries, fragment)
            content = {**content, "trainer": {k: v for k, v in trainer.items() if k != "callbacks"}}
        merged = _merge(merged, content)
    if callbacks is not None:
        merged.setdefault("trainer", {})["callbacks"] = callbacks
    return {k: v for k, v in merged.items() if v != {}}
