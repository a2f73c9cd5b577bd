"""What a LoRA run's checkpoint stores: the adapters, and the identity of the frozen base they belong to.

The base is frozen, so writing it into every checkpoint only repeats the model folder the run started
from (for a 4B model, 8 GB per checkpoint for a few MB of adapters). A LoRA checkpoint keeps the
trainable tensors (the adapters; the optimizer already holds only theirs) and, under ``lora_base``, the
base's ``model_path`` and a SHA-256 over its frozen tensors. Loading it (resume, ``evaluate``,
``export-hf``) builds the base from ``model_path`` as the run did, checks the checksum, and fills the
base tensors in from it: adapters put on another base are refused with one line, not trained or
evaluated on silently.

Example:
    >>> kept = adapter_state(policy, state_dict)                               # doctest: +SKIP
    >>> full = with_base_weights(policy, kept, base_identity(policy, path), "x.ckpt")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

from lite_ppo.errors import UserError

__all__ = ["BASE_KEY", "adapter_state", "base_digest", "base_identity", "with_base_weights"]

BASE_KEY = "lora_base"  # the checkpoint field: {"model_path", "sha256", "dtype"}


def _dtype(name: str | None) -> torch.dtype | None:
    value = getattr(torch, str(name), None) if name else None
    return value if isinstance(value, torch.dtype) else None


@torch.no_grad()
def base_digest(model: torch.nn.Module, dtype: torch.dtype | None = None) -> str:
    """SHA-256 over the frozen tensors of ``model`` (names sorted, with dtype and shape), each cast to
    ``dtype`` first when given: a base loaded in float32 to export a bfloat16 run's adapters hashes as
    the run's bfloat16 base did."""
    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        if param.requires_grad:
            continue
        tensor = param.detach().to(dtype or param.dtype).contiguous().cpu()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def base_identity(model: torch.nn.Module, model_path: str) -> dict[str, Any]:
    """What a LoRA checkpoint stores of its base: where it came from, its dtype and :func:`base_digest`."""
    dtype = next((p.dtype for p in model.parameters() if not p.requires_grad), None)
    return {"model_path": model_path, "sha256": base_digest(model), "dtype": str(dtype).removeprefix("torch.")}


def adapter_state(
    model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], prefix: str = ""
) -> dict[str, torch.Tensor]:
    """``state_dict`` without ``model``'s frozen tensors (its names are ``prefix`` + ``model``'s); entries
    of other modules stay."""
    # Every name of a tied tensor (lm_head.weight shares embed_tokens.weight): the state dict has both.
    frozen = {
        prefix + name for name, param in model.named_parameters(remove_duplicate=False) if not param.requires_grad
    }
    return {name: tensor for name, tensor in state_dict.items() if name not in frozen}


def with_base_weights(
    model: torch.nn.Module,
    weights: Mapping[str, torch.Tensor],
    identity: Mapping[str, Any] | None,
    source: str,
    prefix: str = "",
) -> dict[str, torch.Tensor]:
    """``weights`` (a checkpoint's adapters) completed with ``model``'s frozen base tensors, after
    checking that ``model``'s base is the one the adapters were trained on (``identity``). A
    checkpoint that holds the base itself (written before adapters-only checkpoints) passes through."""
    frozen = {
        prefix + name: param
        for name, param in model.named_parameters(remove_duplicate=False)
        if not param.requires_grad
    }
    if not frozen or all(name in weights for name in frozen):
        return dict(weights)
    if not identity:
        raise UserError(f"{source}: holds adapters without a base model's identity; it cannot be loaded")
    dtype = _dtype(identity.get("dtype"))
    found = base_digest(model, dtype)
    if found != identity.get("sha256"):
        raise UserError(
            f"{source}: its adapters were trained on {identity.get('model_path')} (in {identity.get('dtype')}, "
            f"base sha256 {str(identity.get('sha256'))[:12]}...), but the base loaded here differs "
            f"(sha256 {found[:12]}...): "
            "load the base model the run trained on (model.model_path / --base-model)"
        )
    # In the run's dtype: loaded into a wider copy of the base, the values are the ones the adapters trained on.
    return {**{name: param.detach().to(dtype or param.dtype) for name, param in frozen.items()}, **weights}
