"""``lite-ppo fit --config A --config B``: the configs' ``trainer.callbacks`` lists merge by class.

jsonargparse gives the list of a later ``--config`` in place of an earlier one: ``--config
recipes/gspo.yaml --config recipes/lite_ppo_clip_cov.yaml`` would drop GSPO, and a recipe followed by
a one-technique file (``configs/factors/norm_group_std.yaml``) would keep only that technique. Before
the parser runs, :func:`compose_callbacks` merges the lists of every config file that sets one *by
class* (:mod:`lite_ppo.config_merge`: a later entry of a class already listed updates its
``init_args``, a new class is appended) and hands the parser the merged list as one more config, right
after the last file that set a list, so options after it (``--trainer.callbacks+=...``) act as before.
A ``- remove: CLASS`` entry takes an earlier file's callback out (that file reaches the parser without
its list, which the merged one stands for).

Example::

    lite-ppo fit --config configs/recipes/lite_ppo.yaml --config configs/factors/norm_group_std.yaml \\
        --config configs/models/tiny.yaml
    # AdvantageNormalization(std_scope=group), LossAggregation and ModelCheckpoint of the recipe
"""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path

import yaml

from lite_ppo.config_merge import callbacks_of, class_name, load_mapping, merge_callbacks

__all__ = ["compose_callbacks", "config_files"]

_CONFIG_OPTIONS = ("--config", "-c")


def config_files(args: list[str]) -> list[tuple[int, str]]:
    """``(index of the last argument that names it, path)`` for every config file in ``args``."""
    found = []
    for i, arg in enumerate(args):
        if arg in _CONFIG_OPTIONS and i + 1 < len(args):
            found.append((i + 1, args[i + 1]))
        elif arg.startswith("--config="):
            found.append((i, arg.split("=", 1)[1]))
    return found


def compose_callbacks(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` with the callback lists of its config files merged by class, and a one-line note
    saying what was merged (None when at most one file sets a list: nothing to merge)."""
    listed = []
    for index, path in config_files(args):
        content = _config_content(path)
        if content is None:
            continue  # the parser says so, naming the option
        entries = callbacks_of(content, _source_name(path))
        if entries is not None:
            listed.append((index, path, entries))
    removes = any(isinstance(e, dict) and set(e) == {"remove"} for _, _, entries in listed for e in entries)
    if len(listed) < 2 and not removes:
        return args, None
    merged: list = []
    for _, path, entries in listed:
        merged = merge_callbacks(merged, entries, _source_name(path))
    args = list(args)
    for index, path, entries in listed:
        if any(isinstance(e, dict) and set(e) == {"remove"} for e in entries):
            # The parser reads every file: one with a ``remove`` entry is given without its list
            # (the merged list below stands for it).
            content = _config_content(path) or {}
            content["trainer"] = {k: v for k, v in content["trainer"].items() if k != "callbacks"}
            replacement = _temporary_config(content, "lite-ppo-config-")
            args[index] = f"--config={replacement}" if args[index].startswith("--config=") else replacement
    merged_path = _temporary_config({"trainer": {"callbacks": merged}}, "lite-ppo-callbacks-")
    last = listed[-1][0]
    files = ", ".join(_source_name(path, short=True) for _, path, _ in listed)
    note = f"trainer.callbacks of {files} merged by class: {', '.join(class_name(cb) for cb in merged)}"
    return [*args[: last + 1], "--config", merged_path, *args[last + 1 :]], note


def _config_content(value: str) -> dict | None:
    """The mapping of a ``--config`` value: a file's, or inline YAML/JSON (``lite-ppo sweep`` gives a
    factorial cell's config inline); None when it is neither (the parser then names the option)."""
    try:
        if Path(value).is_file():
            return load_mapping(value)
    except OSError:  # an inline config longer than a file name may be
        pass
    if not value.lstrip().startswith("{"):
        return None
    try:
        loaded = yaml.safe_load(value)
    except yaml.YAMLError:
        return None
    return loaded if isinstance(loaded, dict) else None


def _source_name(value: str, short: bool = False) -> str:
    """How a ``--config`` value is named in a message: its path (file name with ``short``), or
    ``inline config`` for one given as text."""
    if value.lstrip().startswith("{"):
        return "inline config"
    return Path(value).name if short else value


def _temporary_config(content: dict, prefix: str) -> str:
    """``content`` as a YAML file that lives as long as this process."""
    handle, path = tempfile.mkstemp(prefix=prefix, suffix=".yaml")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        yaml.safe_dump(content, file, sort_keys=False)
    atexit.register(lambda: Path(path).unlink(missing_ok=True))
    return path
