"""Export a trained policy as a Hugging Face folder (``save_pretrained`` layout plus the tokenizer).

    lite-ppo export-hf runs/ckpt/epoch=0-step=200.ckpt exported/ [--model builtin:tiny] [--dtype bfloat16]

The checkpoint is what Lightning wrote during ``fit``:

- under DeepSpeed (ZeRO-1/2/3) a *folder* ``*.ckpt/`` holding one shard per rank
  (``checkpoint/zero_pp_rank_R_mp_rank_00_{model,optim}_states.pt`` and ``latest``); the fp32 master
  weights are consolidated from the optimizer shards with DeepSpeed's
  ``get_fp32_state_dict_from_zero_checkpoint`` (on the CPU, one process, no GPU needed; memory: the
  full model in fp32 once, plus the exported model);
- otherwise (DDP, one device) a single ``*.ckpt`` file with a ``state_dict``.

The base model (config, tokenizer, generation config) comes from ``--model`` or, by default, from
the ``model_path`` hyper-parameter stored in the checkpoint. The result loads with
``AutoModelForCausalLM.from_pretrained`` and in vLLM (``LLM(model=OUT_DIR)``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import torch

POLICY_PREFIX = "policy."
_CHECKPOINT_WRAPPER_PREFIXES = ("_forward_module.", "module.")  # Lightning / DeepSpeed wrappers in saved key names
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def is_deepspeed_checkpoint(path: str | os.PathLike) -> bool:
    path = Path(path)
    return path.is_dir() and (path / "latest").is_file()


def _policy_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state.items():
        for prefix in _CHECKPOINT_WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
        if name.startswith(POLICY_PREFIX):
            out[name[len(POLICY_PREFIX) :]] = tensor
    if not out:
        raise ValueError(f"no `policy.*` weights in the checkpoint (keys start with {sorted({k.split('.')[0] for k in state})})")
    return out


def read_checkpoint(checkpoint: str | os.PathLike, lazy: bool = False) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A Lightning checkpoint (DeepSpeed folder or single file), read once: Lightning's client state
    (hyper-parameters, ``policy_version``, ...; no weights, no optimizer) and the policy's float32
    weights with Hugging Face names (``policy.`` removed).

    For a DeepSpeed checkpoint the weights are the consolidated fp32 master weights (tied weights
    appear under every name); ``lazy=True`` returns DeepSpeed's lazy tensors (materialize each with
    ``.contiguous()``) so that at most one consolidated tensor is in memory at a time.
    """
    path = Path(checkpoint)
    if is_deepspeed_checkpoint(path):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        tag = (path / "latest").read_text().strip()
        files = sorted((path / tag).glob("*mp_rank_00_model_states.pt"))
        if not files:
            raise FileNotFoundError(f"{path / tag} has no *_model_states.pt: not a DeepSpeed checkpoint written by Lightning")
        state = torch.load(files[0], map_location="cpu", weights_only=False)
        client = {k: v for k, v in state.items() if k not in ("module", "optimizer", "param_shapes", "frozen_param_fragments")}
        weights = _policy_names(get_fp32_state_dict_from_zero_checkpoint(str(path), lazy_mode=lazy))
        return client, (weights if lazy else {k: v.float() for k, v in weights.items()})
    if not path.is_file():
        raise FileNotFoundError(f"{path} is neither a DeepSpeed checkpoint folder (with a `latest` file) nor a checkpoint file")
    state = torch.load(path, map_location="cpu", weights_only=False)
    client = {k: v for k, v in state.items() if k not in ("state_dict", "optimizer_states")}
    return client, {k: v.float() for k, v in _policy_names(state.get("state_dict", {})).items()}


def fp32_policy_state_dict(checkpoint: str | os.PathLike, lazy: bool = False) -> dict[str, torch.Tensor]:
    """The policy's weights of :func:`read_checkpoint`."""
    return read_checkpoint(checkpoint, lazy)[1]


def export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, model: str | None = None, dtype: str = "auto") -> Path:
    """Write ``out_dir`` (config, safetensors weights, tokenizer, generation config) from ``checkpoint``.

    Args:
        checkpoint: a Lightning checkpoint (DeepSpeed folder or single file).
        out_dir: the folder to write (created).
        model: the base model (local HF folder or ``builtin:*``) for config and tokenizer; default:
            the ``model_path`` stored in the checkpoint.
        dtype: ``auto`` (the base model's config dtype, else float32), ``float32``, ``bfloat16``, ``float16``.

    Returns:
        ``out_dir`` as a Path.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from lite_ppo.models import resolve_model

    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    client, weights = read_checkpoint(checkpoint, lazy=True)
    hparams = client.get("hyper_parameters") or {}
    model = model or hparams.get("model_path")
    if not model:
        raise ValueError("the checkpoint stores no model_path: pass --model (the base model the run started from)")
    base = resolve_model(model)
    config = AutoConfig.from_pretrained(base)
    if dtype == "auto":
        torch_dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        torch_dtype = DTYPES.get(torch_dtype, torch.float32) if isinstance(torch_dtype, str) else torch_dtype
    else:
        torch_dtype = DTYPES[dtype]

    from transformers.initialization import no_init_weights

    with torch.device("cpu"), no_init_weights():  # every weight is overwritten below
        policy = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    params = policy.state_dict(keep_vars=True)
    # a tied name (lm_head.weight = the embedding) may be absent: its tensor is filled under the other name
    names_per_tensor = Counter(id(t) for t in params.values())
    missing = [k for k in params if k not in weights and names_per_tensor[id(params[k])] == 1]
    if missing:
        raise ValueError(f"the checkpoint lacks {len(missing)} weights of {model}, e.g. {missing[:3]}: wrong --model?")
    unexpected = [k for k in weights if k not in params]
    if unexpected:
        raise ValueError(f"the checkpoint has {len(unexpected)} weights {model} does not, e.g. {unexpected[:3]}: wrong --model?")
    with torch.no_grad():
        for name, lazy in weights.items():
            value = lazy.contiguous() if hasattr(lazy, "contiguous") else lazy
            target = params[name]
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(f"{name}: checkpoint shape {tuple(value.shape)} != model shape {tuple(target.shape)}")
            target.copy_(value.to(target.dtype))
            del value
    if getattr(config, "tie_word_embeddings", False):
        policy.tie_weights()

    out_dir.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(out_dir)
    try:
        GenerationConfig.from_pretrained(base).save_pretrained(out_dir)
    except OSError:  # the base model has no generation_config.json: save_pretrained wrote the default one
        pass
    info = {
        "source_checkpoint": str(checkpoint.resolve()),
        "base_model": str(model),
        "global_step": client.get("global_step"),
        "policy_version": client.get("policy_version"),
        "dtype": str(torch_dtype).removeprefix("torch."),
    }
    (out_dir / "lite_ppo_export.json").write_text(json.dumps(info, indent=2) + "\n")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lite-ppo export-hf",
        description="Write a Hugging Face folder (save_pretrained + tokenizer) from a lite-ppo checkpoint "
        "(DeepSpeed ZeRO folder or single file).",
    )
    parser.add_argument("checkpoint", help="the checkpoint Lightning wrote (a *.ckpt folder under DeepSpeed)")
    parser.add_argument("out_dir", help="the folder to write")
    parser.add_argument("--model", default=None, help="base model (HF folder or builtin:NAME); default: the checkpoint's model_path")
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES], help="weights dtype (auto: the base model's)")
    args = parser.parse_args(argv)
    out = export_hf(args.checkpoint, args.out_dir, model=args.model, dtype=args.dtype)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
