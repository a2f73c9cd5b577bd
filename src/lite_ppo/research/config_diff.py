"""What sets two runs of one name apart: the settings in which their saved configs differ.

A second run of a recipe, model and seed lands in ``seed<S>-1`` (:mod:`lite_ppo.research.run_dir`),
whatever it changed. ``lite-ppo fit`` then says at start how its config differs from the newest earlier
run of that name, so a run with ``--model.lr 1e-5`` is told apart from a plain repeat.

Example:
    >>> earlier = {"model": {"lr": 1e-4}, "trainer": {"callbacks": [{"class_path": "a.ClipHigher",
    ...     "init_args": {"eps_high": 0.28}}]}}
    >>> now = {"model": {"lr": 1e-5}, "trainer": {"callbacks": []}}
    >>> describe_differences(config_differences(earlier, now))
    'model.lr 0.0001 -> 1e-05, trainer.callbacks.ClipHigher.eps_high 0.28 -> (unset)'
"""

from __future__ import annotations

from typing import Any

__all__ = ["IGNORED", "config_differences", "describe_differences", "flatten_config"]

# Where a run writes and what it resumes from: different for every run, no setting of the experiment.
IGNORED = ("trainer.logger", "trainer.default_root_dir", "ckpt_path", "run_record", "config")
_UNSET = "(unset)"


def flatten_config(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys -> leaf values. A callback list (entries with ``class_path``; an empty ``...callbacks``
    too) is keyed by class name, so reordered callbacks compare equal and a changed ``init_args`` value is
    named by its technique."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten_config(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if (
        isinstance(tree, list)
        and all(isinstance(x, dict) and "class_path" in x for x in tree)
        and (tree or prefix.endswith("callbacks"))
    ):
        out = {}
        for entry in tree:
            name = f"{prefix}.{str(entry['class_path']).rsplit('.', 1)[-1]}"
            args = entry.get("init_args") or {}
            out.update(flatten_config(args, name) if args else {name: "(on)"})
        return out
    return {prefix: tree}


def config_differences(earlier: dict, now: dict, ignore: tuple[str, ...] = IGNORED) -> list[tuple[str, Any, Any]]:
    """``(key, earlier value, value now)`` for every setting that differs, sorted by key; a setting only one
    side has reads ``(unset)`` on the other."""
    a, b = flatten_config(earlier), flatten_config(now)

    def ignored(key: str) -> bool:
        return any(key == i or key.startswith(i + ".") for i in ignore)

    keys = sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k, _UNSET) != b.get(k, _UNSET))
    return [(k, a.get(k, _UNSET), b.get(k, _UNSET)) for k in keys]


def describe_differences(differences: list[tuple[str, Any, Any]], limit: int = 5) -> str:
    """``key old -> new, ...``: the first ``limit`` of them, then how many more."""
    parts = [f"{key} {old} -> {new}" for key, old, new in differences[:limit]]
    more = len(differences) - limit
    return ", ".join(parts) + (f" and {more} more (diff the two config.yaml files)" if more > 0 else "")
