"""The context a prompt and its response share: one rule for the settings check at start and for the
prompt-length limit of every step.

The model's context is its config's ``max_position_embeddings`` (``n_positions`` for GPT-2-style
configs); an engine with a ``max_model_len`` (vLLM) bounds it further when smaller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CONTEXT_FIELDS = ("max_position_embeddings", "n_positions")


@dataclass(frozen=True)
class ContextLimit:
    """How many tokens a prompt and its response share, and which setting says so.

    Example:
        >>> from types import SimpleNamespace
        >>> context_limit(SimpleNamespace(max_position_embeddings=2048), SimpleNamespace(max_model_len=1024))
        ContextLimit(tokens=1024, source='rollout.engine max_model_len')
    """

    tokens: int
    source: str  # "max_position_embeddings" or "rollout.engine max_model_len"


def model_context(config: Any) -> int | None:
    """The model's context from its config (None when the config names none)."""
    for name in CONTEXT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def context_limit(config: Any, engine: Any = None) -> ContextLimit | None:
    """The model's context, or the engine's ``max_model_len`` when that is smaller; None when neither
    is known."""
    limit = None
    context = model_context(config)
    if context is not None:
        limit = ContextLimit(context, "max_position_embeddings")
    engine_limit = getattr(engine, "max_model_len", None)
    if isinstance(engine_limit, int) and engine_limit > 0 and (limit is None or engine_limit < limit.tokens):
        limit = ContextLimit(engine_limit, "rollout.engine max_model_len")
    return limit


def prompt_budget(context: int | None, max_new_tokens: int) -> int | None:
    """How many tokens a prompt may have when ``max_prompt_tokens`` is not set: the context less the
    response budget (None when the context is not known). The settings check at start refuses a budget
    below 1 and a ``max_prompt_tokens`` above it; each step drops or refuses prompts over the limit.

    Example:
        >>> prompt_budget(2048, 512), prompt_budget(None, 512)
        (1536, None)
    """
    return context - max_new_tokens if context is not None else None
