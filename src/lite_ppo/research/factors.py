"""The factors of a factorial sweep: ``--factor NAME=LEVEL:FRAGMENT.yaml,LEVEL:FRAGMENT.yaml``.

A factor is one technique setting with named levels; each level is a YAML config fragment (or
nothing: ``LEVEL`` alone runs the recipe as it is). A cell of the grid takes one level of every
factor; its fragments are merged into one config that follows the recipe and the ``--config`` files:

- mappings merge key by key (later factors win on a clash);
- ``trainer.callbacks`` entries merge *by class* into the callback list the recipe and configs
  define: an entry whose class (the last part of ``class_path``) is already there updates that
  callback's ``init_args``, any other entry is appended. LightningCLI would replace the whole list
  with a fragment's, dropping the recipe's other techniques, so a fragment names only its technique.

A level takes a callback of the recipe out with a ``remove`` entry
(``- remove: lite_ppo.callbacks.AdvantageNormalization``; :func:`lite_ppo.config_merge.merge_callbacks`).

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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lite_ppo.config_merge import callbacks_of, class_name, load_mapping, merge_callbacks, merge_mappings
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
        if fragment is None and level.lower().endswith((".yaml", ".yml")):  # a fragment without its level name
            raise UserError(
                f"--factor {text!r}: level {level!r} names a file, not a level (write LEVEL:{level}); {usage}"
            )
        if fragment is not None and not Path(fragment).is_file():
            raise UserError(f"--factor {text!r}: config fragment {fragment!r} does not exist")
        levels.append(Level(level, fragment))
    names = [level.name for level in levels]
    if len(levels) < 2 or len(set(names)) != len(names):
        raise UserError(f"--factor {text!r}: give two or more levels with distinct names; {usage}")
    return Factor(name, tuple(levels))


def cell_config(base_configs: list[str], fragments: list[str]) -> dict[str, Any]:
    """The one config a cell adds after ``base_configs`` (the recipe, then the ``--config`` files):
    its ``fragments`` merged (see the module docstring); ``{}`` when the cell changes nothing. Two
    fragments of one cell that set the same callback class are refused: the cell's name would claim
    both levels while the later one's settings win."""
    merged: dict[str, Any] = {}
    callbacks: list[Any] | None = None
    base_classes: list[str] = []
    set_by: dict[str, str] = {}
    for fragment in fragments:
        content = load_mapping(fragment)
        entries = callbacks_of(content, fragment)
        if entries is not None:
            for entry in entries:
                name = class_name(entry)
                if name in set_by:
                    raise UserError(
                        f"--factor: the fragments {set_by[name]!r} and {fragment!r} both set {name}; "
                        "a cell takes one level of each factor, so each technique belongs to one factor"
                    )
                set_by[name] = fragment
            if callbacks is None:  # the recipe's and configs' list, merged by class as the CLI does
                callbacks = []
                for path in base_configs:
                    listed = callbacks_of(load_mapping(path), path)
                    if listed is not None:
                        callbacks = merge_callbacks(callbacks, listed, path)
                base_classes = [class_name(cb) for cb in callbacks]
            callbacks = merge_callbacks(callbacks, entries, fragment)
            content = {**content, "trainer": {k: v for k, v in content["trainer"].items() if k != "callbacks"}}
        merged = merge_mappings(merged, content)
    if callbacks is not None:
        # The CLI merges this list by class into the recipe's again (lite_ppo.cli.compose): a callback
        # a fragment removed is named in a ``remove`` entry, or the recipe's copy would come back.
        kept = {class_name(cb) for cb in callbacks}
        removed = [{"remove": name} for name in dict.fromkeys(base_classes) if name not in kept]
        merged.setdefault("trainer", {})["callbacks"] = [*removed, *callbacks]
    return {k: v for k, v in merged.items() if v != {}}
