"""lite-ppo: critic-free PPO for LLM reasoning on verifiable math, on PyTorch Lightning.

The package by its parts: ``cli/`` (the commands), ``training/`` (the LightningModule and the update),
``rollout/`` (engines), ``data/``, ``rewards/``, ``evaluation/``, ``research/`` (sweep, compare, advise),
``checkpoints/``, ``strategies/`` (ranks, ZeRO-3), ``reliability/``, ``models/``, ``ops/`` (the math,
pure torch) and ``callbacks/`` (the techniques). The extension points are here at the top:
:class:`Technique` (the hook contract), :class:`StepContext` (what every per-step hook receives first),
:class:`RolloutBatch`, :mod:`lite_ppo.metric_names` and :class:`UserError`.
"""

from lite_ppo import _moved
from lite_ppo.errors import UserError

__version__ = "0.1.0"

__all__ = ["LitePPO", "RolloutBatch", "StepContext", "Technique", "UserError", "__version__"]

_moved.install()  # the modules that left the package root still import from their old path, for one release

# Lazy, so that `import lite_ppo.ops` stays a pure-torch import (no Lightning, no transformers).
_LAZY = {
    "LitePPO": "lite_ppo.training.module",
    "Technique": "lite_ppo.technique",
    "RolloutBatch": "lite_ppo.rollout.batch",
    "StepContext": "lite_ppo.step_context",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lite_ppo' has no attribute {name!r}")
