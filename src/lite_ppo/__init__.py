"""lite-ppo: critic-free PPO for LLM reasoning on verifiable math, on PyTorch Lightning."""

__version__ = "0.1.0"

__all__ = ["LitePPO", "__version__"]


def __getattr__(name: str):
    # Lazy, so that `import lite_ppo.ops` stays a pure-torch import (no Lightning, no transformers).
    if name == "LitePPO":
        from lite_ppo.module import LitePPO

        return LitePPO
    raise AttributeError(f"module 'lite_ppo' has no attribute {name!r}")
