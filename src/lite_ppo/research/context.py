"""What the technique advisor needs to know about a run besides its scalars: which techniques it
used, with which settings, and whether its model is a base or an aligned (instruct) checkpoint.

Base or aligned is decided from the run's config, in this order (the first that answers wins):

1. an explicit ``model_kind`` (``lite-ppo advise --model-kind``, ``TechniqueAdvisor(model_kind=...)``);
2. the model's name: ``base`` in it -> base; ``instruct``, ``chat``, ``-it``, ``sft``, ``rlhf``,
   ``aligned`` -> aligned (how checkpoints are published: ``Qwen3-4B-Base``, ``SmolLM2-135M-Instruct``);
3. the prompt style: ``chat`` -> aligned (the run talks to the model through its chat template,
   which only an aligned model was trained on), ``plain`` -> base. ``auto`` does not answer: it picks
   the chat template whenever the tokenizer has one, and base checkpoints often ship one too;
4. otherwise ``unknown``, and the rules that depend on it stay silent.

Example:
    >>> ctx = context_from_config({"model": {"model_path": "/m/Qwen3-4B-Base"}})
    >>> ctx.model_kind, ctx.loss_aggregation
    ('base', 'token-mean')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ModelKind", "RunContext", "classify_model", "context_from_config"]

ModelKind = Literal["base", "aligned", "unknown"]
_ALIGNED_WORDS = re.compile(r"(instruct|chat|(^|[-_])it($|[-_])|sft|rlhf|aligned)", re.IGNORECASE)
_BASE_WORDS = re.compile(r"(^|[-_/])base($|[-_/])", re.IGNORECASE)
# The module's own defaults when no technique changes them (lite_ppo.technique.PolicyLossConfig, LitePPO.clip_eps).
_DEFAULT_AGGREGATION = "token-mean"
_DEFAULT_CLIP = 0.2


@dataclass(frozen=True)
class RunContext:
    """The configuration facts the advisor's rules read (all optional: a rule needing an unknown one stays silent)."""

    model_kind: ModelKind = "unknown"
    model_kind_reason: str = "not determined"
    techniques: tuple[str, ...] = ()  # callback class names, in order
    clip_eps_high: float = _DEFAULT_CLIP
    loss_aggregation: str = _DEFAULT_AGGREGATION
    std_scope: str | None = None  # AdvantageNormalization's std scope; None without it
    hard_share: float | None = None  # weight of the "hard" tier in the data mixture (the last schedule stage)
    max_new_tokens: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def has(self, technique: str) -> bool:
        return technique in self.techniques


def classify_model(
    model_path: str | None, prompt_style: str | None, explicit: str | None = None
) -> tuple[ModelKind, str]:
    """(kind, reason) by the order in the module docstring."""
    if explicit in ("base", "aligned"):
        return explicit, "given explicitly"  # type: ignore[return-value]
    name = (model_path or "").rstrip("/").split("/")[-1].split(":")[-1]
    if name and _BASE_WORDS.search(name):
        return "base", f"model name {name!r} says base"
    if name and _ALIGNED_WORDS.search(name):
        return "aligned", f"model name {name!r} says instruct/chat"
    if prompt_style == "chat":
        return "aligned", "prompts use the chat template (rollout.prompt.style: chat)"
    if prompt_style == "plain":
        return "base", "prompts are plain text (rollout.prompt.style: plain)"
    return "unknown", "neither the model name nor an explicit prompt style says base or aligned (use --model-kind)"


def _args(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        return {}
    init = entry.get("init_args")
    return init if isinstance(init, dict) else {k: v for k, v in entry.items() if k != "class_path"}


def _hard_share(data: dict[str, Any]) -> float | None:
    weights = data.get("weights")
    schedule = data.get("schedule")
    if isinstance(schedule, list) and schedule and isinstance(schedule[-1], dict):
        weights = schedule[-1].get("weights", weights)
    if not isinstance(weights, dict) or not weights:
        return None
    total = sum(float(v) for v in weights.values())
    return float(weights.get("hard", 0.0)) / total if total > 0 else None


def context_from_config(config: dict[str, Any] | None, model_kind: str | None = None) -> RunContext:
    """A :class:`RunContext` from a run's merged config (LightningCLI's ``config.yaml`` as a dict)."""
    config = config or {}
    trainer = config.get("trainer") or {}
    callbacks = [c for c in (trainer.get("callbacks") or []) if isinstance(c, dict)]
    names = tuple(str(c.get("class_path", "")).rsplit(".", 1)[-1] for c in callbacks)
    model = config.get("model") or {}
    rollout = config.get("rollout") or {}
    prompt = rollout.get("prompt")
    style = _args(prompt).get("style") if isinstance(prompt, dict) else None
    sampling = rollout.get("sampling") or {}
    clip_high = float(model["clip_eps"]) if model.get("clip_eps") is not None else _DEFAULT_CLIP
    aggregation, std_scope = _DEFAULT_AGGREGATION, None
    for name, entry in zip(names, callbacks):
        args = _args(entry)
        if name == "ClipHigher":
            clip_high = float(args.get("eps_high", 0.28))
        elif name == "LossAggregation":
            aggregation = str(args.get("mode", _DEFAULT_AGGREGATION))
        elif name == "AdvantageNormalization":
            std_scope = str(args.get("std_scope", "batch"))
    kind, reason = classify_model(model.get("model_path"), style, model_kind)
    max_new = _args(sampling).get("max_new_tokens") if isinstance(sampling, dict) else None
    return RunContext(
        model_kind=kind,
        model_kind_reason=reason,
        techniques=names,
        clip_eps_high=clip_high,
        loss_aggregation=aggregation,
        std_scope=std_scope,
        hard_share=_hard_share(config.get("data") or {}),
        max_new_tokens=int(max_new) if isinstance(max_new, (int, float)) else None,
    )
