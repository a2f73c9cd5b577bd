"""Merging YAML configs whose ``trainer.callbacks`` lists name techniques: by class, never by replacing.

LightningCLI (jsonargparse) gives a list from a later config file in place of an earlier one, so a
recipe followed by a file that names one technique would lose the recipe's other techniques without a
word. Here a callback list merges into another *by class* (the last part of ``class_path``): an entry
whose class is already there updates that callback's ``init_args``; any other entry is appended.
``lite-ppo fit --config A --config B`` and ``lite-ppo sweep --factor`` both merge this way. To take a
callback of an earlier file out, a later list names it in a ``remove`` entry
(``- remove: lite_ppo.callbacks.AdvantageNormalization``): dropping is then said, never silent.

Example:
    >>> merge_callbacks(
    ...     [{"class_path": "lite_ppo.callbacks.AdvantageNormalization", "init_args": {"std_scope": "batch"}},
    ...      {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}}],
    ...     [{"class_path": "lite_ppo.callbacks.AdvantageNormalization", "init_args": {"std_scope": "group"}}],
    ...     "norm_group_std.yaml")[0]["init_args"]
    {'std_scope': 'group'}
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from lite_ppo.errors import UserError

__all__ = ["callbacks_of", "class_name", "load_mapping", "merge_callbacks", "merge_mappings"]


def load_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML config file's top-level mapping (``{}`` for an empty file); one line when unreadable."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"config {str(path)!r}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"config {str(path)!r}: cannot read it as YAML ({err})") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(f"config {str(path)!r}: expected a mapping at the top level")
    return loaded


def callbacks_of(config: dict[str, Any], source: str) -> list[Any] | None:
    """``trainer.callbacks`` of a loaded config (None when it sets none); one line when not a list."""
    trainer = config.get("trainer")
    entries = trainer.get("callbacks") if isinstance(trainer, dict) else None
    if entries is not None and not isinstance(entries, list):
        raise UserError(f"config {source!r}: trainer.callbacks must be a list")
    return entries


def class_name(entry: Any) -> str:
    """``lite_ppo.callbacks.ClipHigher`` -> ``ClipHigher`` (an entry is a mapping with ``class_path``, or a string)."""
    path = entry.get("class_path", "") if isinstance(entry, dict) else str(entry)
    return str(path).rsplit(".", 1)[-1]


def merge_mappings(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``extra`` key by key, recursively (a copy; later wins on a clash)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_mappings(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def merge_callbacks(callbacks: list[Any], entries: list[Any], source: str) -> list[Any]:
    """``callbacks`` with each of ``entries`` (from the config ``source``) merged in by class."""
    out = copy.deepcopy(callbacks)
    for entry in entries:
        if isinstance(entry, dict) and set(entry) == {"remove"}:
            gone = [i for i, cb in enumerate(out) if class_name(cb) == class_name(str(entry["remove"]))]
            if not gone:
                raise UserError(
                    f"config {source!r}: remove {entry['remove']!r}: no such callback in the configs before it "
                    f"({', '.join(class_name(cb) for cb in out) or 'none'})"
                )
            out = [cb for i, cb in enumerate(out) if i not in gone]
            continue
        if not (isinstance(entry, dict) and "class_path" in entry) and not isinstance(entry, str):
            raise UserError(f"config {source!r}: trainer.callbacks entries need a class_path")
        match = [i for i, cb in enumerate(out) if class_name(cb) == class_name(entry)]
        if len(match) > 1:
            raise UserError(
                f"config {source!r}: the configs before it have {len(match)} {class_name(entry)} callbacks; "
                "which one to change is ambiguous"
            )
        entry = entry if isinstance(entry, dict) else {"class_path": entry}
        if match:
            current = out[match[0]] if isinstance(out[match[0]], dict) else {"class_path": out[match[0]]}
            init_args = merge_mappings(current.get("init_args") or {}, entry.get("init_args") or {})
            out[match[0]] = {**current, "init_args": init_args}
        else:
            out.append(copy.deepcopy(entry))
    return out
