"""What may change between a checkpoint and the run that resumes from it.

A checkpoint stores the module's settings (``hyper_parameters``). Resuming with different
``model.*`` values is either *applied* — the setting is read afresh every step and changing it
mid-run is a legitimate choice — or *refused* with one line listing every difference (old → new).
Nothing is silently dropped.

Applied (:data:`APPLIED_ON_RESUME`):

- ``clip_eps``, ``max_grad_norm``: read at fit start / every optimizer step.
- ``micro_batch_size``, ``micro_batch_tokens``, ``pack_prompts``, ``logprob_chunk_size``,
  ``gradient_checkpointing``: how the forward passes are laid out (memory/speed), the same math.
- ``old_logprobs``, ``engine_logprob_tolerance``: where each step's old log-probs come from, decided
  every step; ``fused_optimizer``: the AdamW kernel (same update, same state).

Refused (everything else, e.g. ``model_path``, ``lr``, ``lr_schedule``, ``warmup_steps``,
``min_lr_ratio``, ``weight_decay``, ``betas``, ``num_mini_batches``, ``mini_batch_split``,
``torch_dtype``): the restored weights, optimizer state, LR schedule and step count were built
with the old values; continuing with new ones would mix two runs. Start a new run from the checkpoint's weights instead
(``lite-ppo export-hf`` and ``model.model_path``).

Techniques (the ``Technique`` callbacks under ``trainer.callbacks``) are applied as given: the
checkpoint records each one's class and settings (:func:`technique_settings`), and a resumed run
that adds, removes or re-configures one lists the changes (:func:`technique_differences`) rather
than changing the objective without notice. Rollout and data settings live in the config: the
resumed run uses the values it is given.

Example:
    >>> resume_differences({"lr": 1e-6, "clip_eps": 0.2}, {"lr": 1e-6, "clip_eps": 0.28})
    ([('clip_eps', 0.2, 0.28)], [])
    >>> check_resume({"lr": 1e-6}, {"lr": 1e-5}, "last.ckpt")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    lite_ppo.errors.UserError: cannot resume from last.ckpt with changed settings: model.lr 1e-06 → 1e-05; ...
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from lite_ppo.errors import UserError

__all__ = [
    "APPLIED_ON_RESUME",
    "check_resume",
    "format_differences",
    "resume_differences",
    "saved_hyperparameters",
    "technique_differences",
    "technique_settings",
]

APPLIED_ON_RESUME = frozenset(
    {
        "clip_eps",
        "max_grad_norm",
        "micro_batch_size",
        "micro_batch_tokens",
        "pack_prompts",
        "logprob_chunk_size",
        "gradient_checkpointing",
        "old_logprobs",
        "engine_logprob_tolerance",
        "fused_optimizer",
    }
)

Difference = tuple[str, Any, Any]


def resume_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[list[Difference], list[Difference]]:
    """``(applied, refused)``: the settings whose value differs, each ``(name, old, new)``.

    Keys starting with ``_`` (Lightning's bookkeeping) are ignored, and so are keys on one side only
    (a setting added to or removed from the module since the checkpoint was written: it did not change).
    """
    applied: list[Difference] = []
    refused: list[Difference] = []
    for name in sorted(set(saved) & set(current)):
        if name.startswith("_"):
            continue
        old, new = saved[name], current[name]
        if _normalized(old) == _normalized(new):
            continue
        (applied if name in APPLIED_ON_RESUME else refused).append((name, old, new))
    return applied, refused


def format_differences(differences: list[Difference]) -> str:
    """``model.lr 1e-06 → 1e-05, model.num_mini_batches 4 → 2``."""
    return ", ".join(f"model.{name} {_show(old)} → {_show(new)}" for name, old, new in differences)


def check_resume(saved: Mapping[str, Any], current: Mapping[str, Any], checkpoint: str) -> list[Difference]:
    """Raise a one-line :class:`UserError` listing the refused differences; return the applied ones."""
    applied, refused = resume_differences(saved, current)
    if refused:
        raise UserError(
            f"cannot resume from {checkpoint} with changed settings: {format_differences(refused)} (the restored "
            "weights, optimizer and LR schedule were built with the old values); resume with the old values, "
            "or start a new run from the checkpoint's weights (lite-ppo export-hf, then model.model_path)"
        )
    return applied


def saved_hyperparameters(path: str) -> dict[str, Any] | None:
    """The ``hyper_parameters`` of a checkpoint file (memory-mapped: the weights are not read), or
    None when ``path`` is not a file (e.g. a DeepSpeed checkpoint folder) or holds none."""
    import os

    import torch

    if not os.path.isfile(path):
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 (unreadable: the checkpoint restore itself reports it, with its checks)
        return None
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, Mapping) else None
    return dict(hparams) if hparams else None


def technique_settings(techniques: Sequence[Any]) -> list[dict[str, Any]]:
    """``[{"class": "lite_ppo.callbacks.clip_higher.ClipHigher", "settings": {"eps_high": 0.28, ...}}]``: each
    technique's class and the values of its constructor's arguments (the attributes of the same name,
    when they hold plain values), what a checkpoint stores to compare with at resume."""
    out = []
    for technique in techniques:
        cls = type(technique)
        names = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
        settings = {n: getattr(technique, n) for n in names if _plain(getattr(technique, n, _MISSING))}
        out.append({"class": f"{cls.__module__}.{cls.__qualname__}", "settings": settings})
    return out


def technique_differences(saved: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]) -> list[str]:
    """What changed between the techniques a checkpoint recorded and those of the resumed run, one
    phrase each: ``added ClipHigher(eps_high=0.28)``, ``removed KLPenalty(coef=0.001)``,
    ``AdvantageNormalization.std_scope batch → group``. Techniques are matched by class, in order."""
    changes: list[str] = []
    classes = list(dict.fromkeys([t["class"] for t in saved] + [t["class"] for t in current]))
    for name in classes:
        before = [dict(t.get("settings") or {}) for t in saved if t["class"] == name]
        after = [dict(t.get("settings") or {}) for t in current if t["class"] == name]
        short = name.rsplit(".", 1)[-1]
        for old, new in zip(before, after):
            for key in sorted(set(old) & set(new)):
                if _normalized(old[key]) != _normalized(new[key]):
                    changes.append(f"{short}.{key} {_show(old[key])} → {_show(new[key])}")
        changes += [f"removed {_call(short, old)}" for old in before[len(after) :]]
        changes += [f"added {_call(short, new)}" for new in after[len(before) :]]
    return changes


_MISSING = object()


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _call(name: str, settings: Mapping[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={_show(v)}' for k, v in settings.items())})"


def _normalized(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def _show(value: Any) -> str:
    return "null" if value is None else str(list(value) if isinstance(value, tuple) else value)
