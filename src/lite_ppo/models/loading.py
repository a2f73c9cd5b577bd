"""Loading a causal LM and its tokenizer: the one place the project builds a model from a folder.

Every model the project uses comes through here: the policy (``LitePPO.configure_model``), the KL
reference (``KLPenalty``), the policy that ``lite-ppo evaluate`` scores and the one ``lite-ppo
export-hf`` writes. A model is named as in a config: a local Hugging Face folder or ``builtin:NAME``
(:func:`lite_ppo.models.resolve_model`).

Tied embeddings. Small Llama-style models (the tiny builtins, SmolLM2, Qwen3 up to 4B) set
``tie_word_embeddings``: ``lm_head.weight`` *is* ``model.embed_tokens.weight``. A checkpoint may hold
that tensor under one name or under both (DeepSpeed's consolidated weights repeat it);
:func:`load_weights` accepts either and leaves both names on one tensor.

What callers add themselves (it differs per use): ``config.use_cache = False`` and train mode for
the policy, ``requires_grad_(False)`` and eval mode for a reference; nothing for an export, whose
config is written out as loaded.

Example:
    >>> from lite_ppo.models.loading import load_causal_lm, load_tokenizer
    >>> model = load_causal_lm("builtin:tiny", "float32")          # doctest: +SKIP
    >>> tokenizer = load_tokenizer("builtin:tiny")                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lite_ppo.errors import UserError
from lite_ppo.models.registry import resolve_model

__all__ = ["DTYPES", "load_causal_lm", "load_tokenizer", "load_weights", "resolve_dtype"]

# The dtypes a config may name (model.torch_dtype, --dtype of evaluate and export-hf).
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` / ``"float16"`` (or a ``torch.dtype``) as a ``torch.dtype``.

    Example:
        >>> resolve_dtype("bfloat16")
        torch.bfloat16
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise UserError(f"dtype {dtype!r}: allowed are {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer of the model ``path`` (folder or ``builtin:NAME``), with a pad token.

    A tokenizer without one (Llama's) pads with its EOS token: batched rollouts need a pad id,
    and padded positions are masked out everywhere, so which token fills them does not matter.
    """
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(
    path: str,
    dtype: str | torch.dtype = torch.float32,
    weights: Mapping[str, torch.Tensor] | None = None,
    source: str = "the checkpoint",
) -> PreTrainedModel:
    """The causal LM of ``path`` (folder or ``builtin:NAME``) in ``dtype``, on the CPU.

    Args:
        path: a local Hugging Face folder or ``builtin:NAME``.
        dtype: the weights' dtype (``float32``, ``bfloat16``, ``float16`` or a ``torch.dtype``).
        weights: ``None``: the folder's own weights (``from_pretrained``; under ZeRO-3, see
            :func:`lite_ppo.strategies.zero.hf_zero3_loading`, straight into the partitions).
            Otherwise weights with Hugging Face names (e.g. a training checkpoint's, from
            :func:`lite_ppo.checkpoints.reader.read_checkpoint`): the model is built from the
            folder's config without initialising it and filled by :func:`load_weights`.
        source: what ``weights`` are, for error messages.

    Returns:
        The model, in eval mode (as ``from_pretrained`` returns it).
    """
    folder = resolve_model(path)
    dtype = resolve_dtype(dtype)
    if weights is None:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(folder)
    with torch.device("cpu"), no_init_weights():  # every weight is overwritten by load_weights
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    load_weights(model, weights, source=source, model_name=path)
    return model.eval()


@torch.no_grad()
def load_weights(
    model: torch.nn.Module,
    weights: Mapping[str, torch.Tensor],
    source: str = "the checkpoint",
    model_name: str = "the model",
) -> None:
    """Copy ``weights`` (Hugging Face names) into ``model``'s parameters and buffers in place.

    Each value is converted to its target's dtype. Values may be DeepSpeed's lazy tensors
    (``read_checkpoint(..., lazy=True)``): each is materialised on its own, so at most one full
    tensor is held beside the model. A tensor that ``model`` holds under several names (a tied
    ``lm_head.weight``) needs only one of them in ``weights``; with tied embeddings the names are
    tied first, so they share one tensor whatever the checkpoint held.

    Raises:
        UserError: a tensor of ``model`` that no name in ``weights`` fills, a name ``model`` does
            not have, or a shape that differs (each: the wrong base model for these weights).
    """
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
        # First, so that both names reach one tensor: transformers 5 ties in its weight
        # initialisation, which ``from_config`` under ``no_init_weights`` skips.
        model.tie_weights()
    params = model.state_dict(keep_vars=True)
    names_of: dict[int, list[str]] = {}
    for name, tensor in params.items():
        names_of.setdefault(id(tensor), []).append(name)
    hint = f"is {model_name} the run's base model?"
    missing = [names[0] for names in names_of.values() if not any(n in weights for n in names)]
    if missing:
        raise UserError(f"{source} lacks {len(missing)} weights of {model_name}, e.g. {missing[:3]}: {hint}")
    unexpected = [k for k in weights if k not in params]
    if unexpected:
        raise UserError(
            f"{source} has {len(unexpected)} weights that {model_name} does not, e.g. {unexpected[:3]}: {hint}"
        )
    for name, stored in weights.items():
        value = stored.contiguous()  # materialises a DeepSpeed lazy tensor; a no-op on a plain one
        target = params[name]
        if tuple(value.shape) != tuple(target.shape):
            shapes = f"{tuple(value.shape)}, in {model_name} {tuple(target.shape)}"
            raise UserError(f"{source}: {name} has shape {shapes}: {hint}")
        target.copy_(value.to(target.dtype))
        del value
