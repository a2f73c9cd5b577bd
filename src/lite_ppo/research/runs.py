"""Find run directories and group the runs that differ only in their seed.

A run directory holds TensorBoard event files and, when written by ``lite-ppo fit``, ``run.json``
and LightningCLI's ``config.yaml`` (see :mod:`lite_ppo.research.run_naming`). Two runs belong to one
group when their merged configs are equal after removing what does not change the experiment: the
seed, where files go (logger, checkpoint and output folders) and the run record itself. Runs
without ``config.yaml`` fall back to ``run.json`` (recipe, model, data), and runs with neither to
their folder layout (``.../<group>/seed<S>`` -> ``<group>``). A group is labelled ``<recipe>/<model>``,
followed by its factorial cell for runs of ``lite-ppo sweep --factor`` (``lite_ppo/tiny [norm=batch_std,
agg=token]``) and by the settings that tell apart groups that would otherwise share a label.

Example:
    >>> runs = find_runs(["runs/*/tiny/seed*"])         # doctest: +SKIP
    >>> [g.label for g in group_runs(runs)]              # doctest: +SKIP
    ['dapo/tiny', 'lite_ppo/tiny']
"""

from __future__ import annotations

import glob
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lite_ppo.errors import UserError
from lite_ppo.research.run_folder import RunDir

__all__ = ["Run", "RunGroup", "find_runs", "group_runs", "is_run_dir"]

_SEED_DIR = re.compile(r"^seed(-?\d+)(?:-\d+)?$")
# Config entries that say where things go or who ran it, not what was run.
_IGNORED_TOP = {"seed_everything", "run_record", "config", "ckpt_path", "console"}
# Seeds below the top level that follow the run's seed (the data order, the sampling).
_IGNORED_PATHS = {("data", "seed"), ("rollout", "seed")}
_IGNORED_ANYWHERE = {"dirpath", "output_dir", "default_root_dir", "save_dir", "logger"}


@dataclass
class Run:
    """One run directory with what it says about itself."""

    path: Path
    record: dict[str, Any] | None = None
    config: dict[str, Any] | None = None

    @property
    def recipe(self) -> str:
        for source in (self.record or {}, self.config or {}):
            if source.get("recipe"):
                return str(source["recipe"])
        return self.path.parent.parent.name if _SEED_DIR.match(self.path.name) else self.path.parent.name

    @property
    def model(self) -> str:
        if self.record and self.record.get("model_name"):
            return str(self.record["model_name"])
        model_path = ((self.config or {}).get("model") or {}).get("model_path")
        if model_path:
            from lite_ppo.research.run_naming import model_name

            return model_name(model_path)
        return self.path.parent.name if _SEED_DIR.match(self.path.name) else ""

    @property
    def seed(self) -> int | None:
        for value in ((self.record or {}).get("seed"), (self.config or {}).get("seed_everything")):
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        match = _SEED_DIR.match(self.path.name)
        return int(match.group(1)) if match else None

    @property
    def status(self) -> str | None:
        return (self.record or {}).get("status")

    @property
    def cell(self) -> dict[str, str]:
        """The factorial cell of a ``lite-ppo sweep --factor`` run (factor -> level), {} otherwise."""
        cell = (self.record or {}).get("cell")
        return {str(k): str(v) for k, v in cell.items()} if isinstance(cell, dict) else {}

    @property
    def factors(self) -> dict[str, list[str]]:
        """The sweep's design (factor -> levels, reference first) when ``run.json`` records it, {} otherwise."""
        design = (self.record or {}).get("factors")
        if not isinstance(design, dict):
            return {}
        return {str(k): [str(v) for v in levels] for k, levels in design.items() if isinstance(levels, list)}

    def experiment(self) -> dict[str, Any]:
        """What defines the experiment apart from the seed (the grouping key's content)."""
        if self.config is not None:
            return experiment_config(self.config) | ({"cell": self.cell} if self.cell else {})
        if self.record is not None:
            found = {"recipe": self.recipe, "model": self.record.get("model"), "data": self.record.get("data")}
            return found | ({"cell": self.cell} if self.cell else {})
        parent = self.path.parent if _SEED_DIR.match(self.path.name) else self.path
        return {"folder": str(parent.resolve())}

    def group_key(self) -> str:
        return json.dumps(self.experiment(), sort_keys=True, default=str)


@dataclass
class RunGroup:
    """Runs of one experiment over several seeds; ``label`` names it in figures and tables."""

    label: str
    recipe: str
    runs: list[Run] = field(default_factory=list)
    base_label: str = ""  # recipe/model, without the factorial cell and the disambiguating settings

    @property
    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.runs]


is_run_dir = RunDir.is_run  # the one definition (lite_ppo.research.run_folder)


def load_run(path: Path) -> Run:
    folder = RunDir(path)
    return Run(path=path, record=folder.record, config=folder.config)


def find_runs(patterns: list[str]) -> list[Run]:
    """Runs named by paths or glob patterns; a folder that is not a run itself stands for every run
    below it. Raises :class:`UserError` for a pattern that matches no run."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        # An existing path is taken literally (it may hold glob characters such as "[").
        matches = [pattern] if Path(pattern).exists() else sorted(glob.glob(pattern, recursive=True))
        # A folder that is not a run stands for the runs below it (not their validate/test subfolders).
        hits = [run.path for match in map(Path, matches) for run in RunDir.below(match)]
        if not hits:
            raise UserError(f"{pattern}: no run directory (a folder with TensorBoard event files or run.json) matches")
        for hit in hits:
            found[hit.resolve()] = None
    return [load_run(path) for path in found]


def group_runs(runs: list[Run]) -> list[RunGroup]:
    """Runs grouped by :meth:`Run.group_key`, groups sorted by label, runs by seed."""
    by_key: dict[str, list[Run]] = {}
    for run in runs:
        by_key.setdefault(run.group_key(), []).append(run)
    groups = []
    for members in by_key.values():
        first = members[0]
        base = f"{first.recipe}/{first.model}" if first.model else first.recipe
        cell = ", ".join(f"{k}={v}" for k, v in first.cell.items())
        groups.append(
            RunGroup(
                label=f"{base} [{cell}]" if cell else base,
                recipe=first.recipe,
                runs=sorted(members, key=lambda r: (r.seed is None, r.seed or 0, str(r.path))),
                base_label=base,
            )
        )
    _disambiguate(groups)
    return sorted(groups, key=lambda g: g.label)


def _disambiguate(groups: list[RunGroup]) -> None:
    """Groups that share a label get the config entries that tell them apart appended to it:
    ``(ClipHigher=on, model.lr=1e-05)``, ``(LossAggregation.mode=token-mean)``. The entries that tell every
    two of them apart come first (:func:`label_keys`), so ``+N more`` never hides the only difference of
    two groups; then other differing entries, shallowest first, up to :data:`_LABEL_KEYS` in all."""
    by_label: dict[str, list[RunGroup]] = {}
    for group in groups:
        by_label.setdefault(group.label, []).append(group)
    for same in by_label.values():
        if len(same) < 2:
            continue
        flats = [flatten_config(g.runs[0].experiment()) for g in same]
        shown, more = label_keys(flats)
        for group, flat in zip(same, flats):
            parts = [f"{_short_key(k)}={label_value(flat, k)}" for k in shown]
            tail = f", +{more} more" if more else ""
            group.label += f" ({', '.join(parts)}{tail})" if parts else f" ({group.runs[0].path.name})"


_LABEL_KEYS = 4  # config entries at most in a disambiguated group label (more only where needed to tell groups apart)
_ABSENT = "-"  # how a group label shows an entry its config does not have (a technique not in the list)
_CALLBACKS = "trainer.callbacks."


def _short_key(key: str) -> str:
    """``trainer.callbacks.ClipHigher.eps_high`` reads ``ClipHigher.eps_high``: techniques are known by name."""
    return key[len(_CALLBACKS) :] if key.startswith(_CALLBACKS) else key


def _key_order(key: str) -> tuple[int, str]:
    """Shallowest first, then by name (as a label shows it)."""
    return _short_key(key).count("."), _short_key(key)


def differing_keys(flats: list[dict[str, Any]]) -> list[str]:
    """The keys whose values differ among flattened configs (:func:`flatten_config`; compared as JSON, a
    missing key as ``-``), shallowest first, then by name. Under a key that differs nothing more is listed:
    a technique that only some configs have is its own entry, its arguments follow from it."""
    keys = set().union(*flats)
    differing = [
        k for k in keys if len({json.dumps(f.get(k, _ABSENT), sort_keys=True, default=str) for f in flats}) > 1
    ]
    return sorted((k for k in differing if not any(k.startswith(f"{d}.") for d in differing)), key=_key_order)


def telling_keys(flats: list[dict[str, Any]]) -> list[str]:
    """Keys whose shown values (:func:`label_value`) tell every two of the flattened configs apart that
    differ at all: picked one at a time, each the key that tells apart the most pairs not yet told apart
    (the shallowest such key on a tie), in the order picked. Keys at any depth count: with one group
    without ClipHigher and two with it at different ``eps_high``, ``ClipHigher`` alone (on in both) would
    leave the two alike; ``ClipHigher.eps_high`` tells all three apart."""
    keys = sorted(set().union(*flats), key=_key_order)
    shown = {k: [label_value(f, k) for f in flats] for k in keys}
    pairs = {
        (i, j)
        for i in range(len(flats))
        for j in range(i + 1, len(flats))
        if any(shown[k][i] != shown[k][j] for k in keys)
    }
    picked: list[str] = []
    while pairs:
        told = {k: {(i, j) for i, j in pairs if shown[k][i] != shown[k][j]} for k in keys if k not in picked}
        best = max(told, key=lambda k: len(told[k]), default=None)  # max keeps the first (shallowest) on a tie
        if best is None or not told[best]:
            break
        picked.append(best)
        pairs -= told[best]
    return picked


def label_keys(flats: list[dict[str, Any]], limit: int = _LABEL_KEYS) -> tuple[list[str], int]:
    """The keys a label shows for each of the flattened configs, and how many differing keys it leaves to
    ``+N more``: first the keys that tell them apart (:func:`telling_keys`, shallowest first; all of them,
    past ``limit`` if need be: a cut one could be the only difference of two groups), then the other
    :func:`differing_keys` up to ``limit`` keys in all."""
    telling = sorted(telling_keys(flats), key=_key_order)
    rest = [k for k in differing_keys(flats) if k not in telling]
    room = max(0, limit - len(telling))
    return telling + rest[:room], len(rest[room:])


def label_value(flat: dict[str, Any], key: str) -> str:
    """``key``'s value in a group's flattened config, whole (a cut value could hide the difference): a
    section that is a mapping in this group and a scalar in another reads as its entries (``{"r": 8}``), an
    entry the group does not have as ``-``."""
    if key in flat:
        value = flat[key]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    below = {k[len(key) + 1 :]: v for k, v in flat.items() if k.startswith(f"{key}.")}
    return json.dumps(below, sort_keys=True, default=str) if below else _ABSENT


def experiment_config(config: dict[str, Any]) -> dict[str, Any]:
    """A saved run config without what differs from run to run of one experiment: its seeds, where it
    writes, what it resumes from."""
    config = _strip({k: v for k, v in config.items() if k not in _IGNORED_TOP})
    for parent, key in _IGNORED_PATHS:
        if isinstance(config.get(parent), dict):
            config[parent] = {k: v for k, v in config[parent].items() if k != key}
    return config


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in _IGNORED_ANYWHERE}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def flatten_config(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys -> leaf values; a callback list keyed by technique name (``trainer.callbacks.ClipHigher``
    reads ``on``, its init_args below it), so an added technique shifts no other's key."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten_config(value, f"{prefix}{key}."))
        return out
    if isinstance(node, list) and node and all(isinstance(v, dict) and "class_path" in v for v in node):
        # A callback list: each entry by its class's name (an added technique shifts no other's key),
        # "on" where it is listed, its init_args below it.
        out = {}
        for entry in node:
            name = f"{prefix}{str(entry['class_path']).rsplit('.', 1)[-1]}"
            out[name] = "on"
            out.update(flatten_config(entry.get("init_args") or {}, f"{name}."))
        return out
    if isinstance(node, list) and node and all(isinstance(v, dict) for v in node):
        out = {}
        for i, value in enumerate(node):
            out.update(flatten_config(value, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): node}
