"""One-release aliases of the modules that moved after 0.1 (most out of the package root).

``import lite_ppo.module`` (a ``class_path``, a pickled reference, a user's import) still works: it
returns the module at its new path (the same object, so classes are identical) and warns once
with the new path. Remove one release after the move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "lite_ppo.commands": "lite_ppo.cli.commands",
    "lite_ppo.help_cache": "lite_ppo.cli.help_cache",
    "lite_ppo.allocator": "lite_ppo.cli.allocator",
    "lite_ppo.module": "lite_ppo.training.module",
    "lite_ppo.policy_forward": "lite_ppo.training.policy_forward",
    "lite_ppo.preflight": "lite_ppo.training.preflight",
    "lite_ppo.resume": "lite_ppo.training.resume",
    "lite_ppo.seeding": "lite_ppo.data.seeding",
    "lite_ppo.checkpoint_reader": "lite_ppo.checkpoints.reader",
    "lite_ppo.export": "lite_ppo.checkpoints.export",
    "lite_ppo.prepare_model": "lite_ppo.cli.prepare_model",
    "lite_ppo.ranks": "lite_ppo.strategies.ranks",
    "lite_ppo.weight_gather": "lite_ppo.strategies.weight_gather",
    "lite_ppo.research.run_dir": "lite_ppo.research.run_naming",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at the new one."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        warnings.warn(
            f"{spec.name} moved to {MOVED[spec.name]}; the old path goes in the next release",
            FutureWarning,
            stacklevel=2,
        )
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:
        pass  # the module at the new path is already executed


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
