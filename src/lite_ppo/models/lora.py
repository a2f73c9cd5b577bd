"""LoRA adapters on the policy (``model.lora``), through peft: settings, wrapping, merged weights.

With ``model.lora`` set, :class:`lite_ppo.LitePPO` wraps the loaded policy with
``peft.get_peft_model``: the base weights are frozen and only the adapters (``lora_A``, ``lora_B``)
train and sit in the optimizer. Everything else reads the wrapped model as before (peft forwards
``config``, ``get_decoder``, ``generate``, ...). Three consumers need more:

- the KL reference is the same model with the adapters off (``disable_adapter``), no second copy
  (``KLPenalty``);
- an engine holding its own weights (vLLM) receives merged weights ``W + scale * B @ A`` under the
  base model's Hugging Face names (:func:`iter_merged_buckets`);
- ``lite-ppo export-hf`` writes a merged folder or peft's adapter folder (:func:`lora_policy`).

Settings are checked before any weights load: the values when the module is built
(:meth:`LoraSettings.from_config`), the module names against the architecture built on the meta
device from its config alone (:meth:`LoraSettings.check_targets`).

Example::

    model:
      lora: {r: 16, alpha: 32, dropout: 0.0, target_modules: [q_proj, k_proj, v_proj, o_proj]}
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from lite_ppo.errors import UserError

__all__ = ["DEFAULT_TARGETS", "LoraSettings", "is_lora_model", "iter_merged_buckets", "lora_policy"]

# The attention and MLP projections of Llama-style models (SmolLM2, Qwen, the tiny builtins).
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """``model.lora``: rank ``r``, scale ``alpha / r``, dropout on the adapters' input, and the
    linear layers to adapt (names as in the model, matched like peft: a module whose name is the
    entry or ends with ``.<entry>``).

    The output head and the embeddings are not allowed as targets: the head stays a plain linear
    layer, so tokens are still scored from hidden states in chunks, and a tied head would need its
    merged weight under two names.

    Example:
        >>> LoraSettings.from_config({"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]})
        LoraSettings(r=8, alpha=16, dropout=0.0, target_modules=('q_proj', 'v_proj'))
        >>> LoraSettings.from_config(None) is None
        True
    """

    r: int = 16
    alpha: float = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = DEFAULT_TARGETS

    def __post_init__(self) -> None:
        if not _is_number(self.r) or self.r != int(self.r) or self.r < 1:
            raise UserError(f"model.lora.r={self.r!r}: must be an integer >= 1 (the adapters' rank)")
        object.__setattr__(self, "r", int(self.r))
        if not _is_number(self.alpha) or self.alpha <= 0:
            raise UserError(f"model.lora.alpha={self.alpha!r}: must be a number > 0 (the adapters scale by alpha / r)")
        if not _is_number(self.dropout) or not 0 <= self.dropout < 1:
            raise UserError(f"model.lora.dropout={self.dropout!r}: must be in [0, 1)")
        targets = self.target_modules
        if isinstance(targets, str) or not isinstance(targets, Sequence) or not targets:
            raise UserError(
                f"model.lora.target_modules={targets!r}: must be a non-empty list of module names "
                "(e.g. [q_proj, v_proj])"
            )
        if not all(isinstance(t, str) and t for t in targets):
            raise UserError(f"model.lora.target_modules={list(targets)!r}: every entry must be a module name")
        object.__setattr__(self, "target_modules", tuple(targets))

    @classmethod
    def from_config(cls, value: Mapping[str, Any] | LoraSettings | None) -> LoraSettings | None:
        """The settings of a ``model.lora`` mapping (None: full fine-tuning), checked; unknown keys refused."""
        if value is None or isinstance(value, LoraSettings):
            return value
        if not isinstance(value, Mapping):
            raise UserError(f"model.lora={value!r}: must be a mapping {{r, alpha, dropout, target_modules}} or null")
        allowed = [f.name for f in fields(cls)]
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise UserError(f"model.lora: unknown setting {unknown[0]!r}; allowed: {', '.join(allowed)}")
        return cls(**dict(value))

    def as_config(self) -> dict[str, Any]:
        """The plain mapping (what ``model.lora`` and the checkpoint's hyper-parameters hold)."""
        return {"r": self.r, "alpha": self.alpha, "dropout": self.dropout, "target_modules": list(self.target_modules)}

    def check_targets(self, model_path: str) -> None:
        """Refuse a target that matches no linear layer of ``model_path``'s architecture, in one line.

        The model is built from its config on the meta device: no weights are read or allocated.
        """
        from transformers import AutoConfig, AutoModelForCausalLM

        from lite_ppo.models.registry import resolve_model

        config = AutoConfig.from_pretrained(resolve_model(model_path))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        allowed = _adaptable_names(model)
        short = list(dict.fromkeys(name.rsplit(".", 1)[-1] for name in allowed))
        arch = (getattr(config, "architectures", None) or [type(model).__name__])[0]
        for target in self.target_modules:
            if not any(name == target or name.endswith(f".{target}") for name in allowed):
                raise UserError(
                    f"model.lora.target_modules: {target!r} matches no module of {arch} ({model_path}); "
                    f"modules: {', '.join(short)}"
                )

    def peft_config(self):
        """The ``peft.LoraConfig`` of these settings (a causal LM, no bias training)."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` with adapters (peft's ``PeftModelForCausalLM``): base frozen, adapters trainable.

        The adapters start as peft initialises them (``B = 0``), so the wrapped model computes
        exactly the base model's outputs until the first optimizer step.
        """
        from peft import get_peft_model

        return get_peft_model(model, self.peft_config())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _adaptable_names(model: torch.nn.Module) -> list[str]:
    """Names of the linear layers LoRA may adapt: every ``nn.Linear`` but the output head."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [
        name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear) and module is not head
    ]


def is_lora_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model (a policy with adapters). peft is never imported here:
    a model can only be one if peft was imported already."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


@torch.no_grad()
def iter_merged_buckets(
    model: torch.nn.Module,
    bucket_bytes: int,
    stats: Any = None,
    group_by: Callable[[str], str] | None = None,
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The merged weights of a peft model under the base model's Hugging Face names, in buckets.

    Like :func:`lite_ppo.strategies.weight_gather.iter_gathered_buckets` for a plain model (same order, tied
    ``lm_head.weight`` included, same bucket bound), with peft's names mapped back
    (``base_model.model.`` and ``.base_layer`` dropped, the adapters' own tensors left out) and each
    adapted weight replaced by ``W + scale * B @ A`` (what peft's ``merge`` adds), computed in the
    adapters' dtype (float32 when the base is half precision) one bucket at a time. The
    policy's own tensors are never changed. Not for ZeRO-3 partitioned models (refused with LoRA).
    """
    from peft.tuners.lora import LoraLayer

    from lite_ppo.strategies.weight_gather import checkpoint_items, plan_buckets

    base = model.get_base_model()
    layers = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    adapted: dict[str, Any] = {}
    items: list[tuple[str, torch.Tensor]] = []
    for name, tensor in checkpoint_items(base):
        if ".lora_" in name:  # lora_A / lora_B / lora_embedding_* / lora_magnitude_vector: not in the base model
            continue
        owner, infix, leaf = name.rpartition(".base_layer.")
        if infix:
            name = f"{owner}.{leaf}"
            if leaf == "weight":
                adapted[name] = layers[owner]
        items.append((name, tensor))
    for bucket in plan_buckets(items, bucket_bytes, group_by):
        if stats is not None:
            unique = {id(t): t for _, t in bucket}.values()
            stats.record(bucket[0][0], sum(t.numel() * t.element_size() for t in unique), bucket_bytes)
        yield [(name, _merged(tensor, adapted.get(name))) for name, tensor in bucket]


def _merged(weight: torch.Tensor, layer: Any) -> torch.Tensor:
    """``weight`` plus the active adapters' ``scale * B @ A`` (a new tensor), or ``weight`` itself.

    A plain adapter is merged by an in-place ``addmm_`` on a copy of ``W`` (no full-size delta
    tensor); peft's own ``get_delta_weight`` only for variants and transposed layouts.
    """
    if layer is None or layer.disable_adapters or layer.merged:
        return weight.detach()
    merged = weight.detach()
    copied = False
    for name in layer.active_adapters:
        if name not in layer.lora_A:
            continue
        if name in getattr(layer, "lora_variant", {}) or getattr(layer, "fan_in_fan_out", False):
            delta = layer.get_delta_weight(name)
            dtype = torch.promote_types(merged.dtype, delta.dtype)
            merged, copied = merged.to(dtype) + delta.to(dtype), True
            continue
        a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
        dtype = torch.promote_types(merged.dtype, a.dtype)
        if not copied:  # never write into the policy's own weight
            merged, copied = merged.to(dtype, copy=True), True
        merged = merged.to(dtype).addmm_(b.to(dtype), a.to(dtype), alpha=layer.scaling[name])
    return merged


def lora_policy(
    model_path: str,
    settings: LoraSettings,
    weights: Mapping[str, torch.Tensor],
    dtype: str | torch.dtype = torch.float32,
    source: str = "the checkpoint",
    base: Mapping[str, Any] | None = None,
) -> torch.nn.Module:
    """The peft policy a LoRA run trained, rebuilt from a checkpoint's weights (peft's names, as
    :func:`lite_ppo.checkpoints.reader.read_checkpoint` returns them): base model from ``model_path``,
    adapters from ``settings``, every tensor from ``weights`` (a missing or extra one: ``UserError``);
    an adapters-only checkpoint's base tensors from ``model_path``, checked against ``base`` (its
    ``lora_base`` identity). In eval mode."""
    from lite_ppo.models.adapter_checkpoint import with_base_weights
    from lite_ppo.models.loading import load_causal_lm, load_weights

    settings.check_targets(model_path)
    model = settings.wrap(load_causal_lm(model_path, dtype))
    weights = with_base_weights(model, weights, base, source)
    load_weights(model, weights, source=source, model_name=f"{model_path} with model.lora {settings.as_config()}")
    return model.eval()
