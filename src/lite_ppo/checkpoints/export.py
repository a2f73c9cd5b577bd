"""Export a trained policy as a Hugging Face folder (``save_pretrained`` layout plus the tokenizer).

    lite-ppo export-hf runs/ckpt/epoch=0-step=200.ckpt exported/ [--model builtin:tiny] [--dtype bfloat16] [--adapter]

The checkpoint is what Lightning wrote during ``fit`` (a DeepSpeed ZeRO folder or a single file),
read by :mod:`lite_ppo.checkpoints.reader`; the weights go into a model built from the base model's
config by :func:`lite_ppo.models.loading.load_causal_lm` (tied ``lm_head`` handled there).

The base model (config, tokenizer, generation config) comes from ``--model`` or, by default, from
the ``model_path`` hyper-parameter stored in the checkpoint. The result loads with
``AutoModelForCausalLM.from_pretrained`` and in vLLM (``LLM(model=OUT_DIR)``).

A LoRA run (``model.lora`` in the checkpoint's hyper-parameters) is exported merged by default: the
adapters are folded into the base weights (``W + scale * B @ A`` in float32, then ``--dtype``), a
plain model of the base architecture. ``--adapter`` writes peft's adapter folder instead
(``adapter_config.json`` + ``adapter_model.safetensors``, float32 unless ``--dtype`` says otherwise,
and the tokenizer): it loads with ``PeftModel.from_pretrained(base, OUT_DIR)``, or with
``AutoModelForCausalLM.from_pretrained(OUT_DIR)`` when peft is installed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lite_ppo.errors import OneLineParser

# The keys of lite_ppo.models.loading.DTYPES, spelled here so that `export-hf --help` imports no torch.
DTYPE_NAMES = ("float32", "bfloat16", "float16")
EXPORT_RECORD = "lite_ppo_export.json"  # what the folder was exported from; marks it as an export


@dataclass(frozen=True)
class _Source:
    """What an export reads: the checkpoint, its stored state and the base model it was trained from."""

    checkpoint: Path
    client: dict  # the checkpoint's non-weight state (hyper-parameters, global_step, ...)
    weights: Any  # the policy's weights, read lazily
    model: str  # the base model as given (``--model`` or the stored ``model_path``)
    base: str  # its resolved local folder
    lora: Any  # LoraSettings of a LoRA run, else None


def export_hf(
    checkpoint: str | os.PathLike,
    out_dir: str | os.PathLike,
    model: str | None = None,
    dtype: str = "auto",
    adapter: bool = False,
) -> Path:
    """Write ``out_dir`` (config, safetensors weights, tokenizer, generation config) from ``checkpoint``.

    Args:
        checkpoint: a Lightning checkpoint (DeepSpeed folder or single file).
        out_dir: the folder to write: new, empty or an earlier export (replaced whole, once the new
            one is complete; a kill or a full disk before then leaves it as it was).
        model: the base model (local HF folder or ``builtin:*``) for config and tokenizer; default:
            the ``model_path`` stored in the checkpoint.
        dtype: ``auto`` (the base model's config dtype, else float32), ``float32``, ``bfloat16``, ``float16``.
        adapter: for a LoRA run, write peft's adapter folder rather than the merged model
            (``auto`` keeps the adapters in float32).

    Returns:
        ``out_dir`` as a Path.
    """
    import torch
    from transformers import AutoConfig

    from lite_ppo.checkpoints.reader import read_checkpoint
    from lite_ppo.errors import UserError
    from lite_ppo.models import resolve_model
    from lite_ppo.models.loading import DTYPES
    from lite_ppo.models.lora import LoraSettings

    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    client, weights = read_checkpoint(checkpoint, lazy=True)
    hparams = client.get("hyper_parameters") or {}
    model = model or hparams.get("model_path")
    if not model:
        raise UserError(
            f"checkpoint {checkpoint} stores no model_path: pass --model (the base model the run started from)"
        )
    base = resolve_model(model)
    lora = LoraSettings.from_config(hparams.get("lora"))
    if adapter and lora is None:
        raise UserError(f"export-hf --adapter: {checkpoint} trained the full weights (no model.lora); drop --adapter")
    if dtype == "auto":
        config = AutoConfig.from_pretrained(base)
        torch_dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        torch_dtype = DTYPES.get(torch_dtype, torch.float32) if isinstance(torch_dtype, str) else torch_dtype
    else:
        torch_dtype = DTYPES[dtype]
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / EXPORT_RECORD).is_file():
        raise UserError(f"export-hf: {out_dir} holds files that are not an earlier export; give a new or empty folder")
    final_dir, out_dir = out_dir, out_dir.parent / f".{out_dir.name}.export-{os.getpid()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        _write_export(out_dir, _Source(checkpoint, client, weights, model, base, lora), adapter, dtype, torch_dtype)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    _replace_dir(final_dir, out_dir)
    return final_dir


def _write_export(out_dir: Path, src: _Source, adapter: bool, dtype: str, torch_dtype) -> None:
    import torch
    from transformers import AutoTokenizer, GenerationConfig

    from lite_ppo.models.adapter_checkpoint import BASE_KEY
    from lite_ppo.models.loading import load_causal_lm
    from lite_ppo.models.lora import lora_policy

    source = f"checkpoint {src.checkpoint}"
    base_identity = src.client.get(BASE_KEY)
    if src.lora is None:
        load_causal_lm(src.model, torch_dtype, weights=src.weights, source=source).save_pretrained(out_dir)
    elif adapter:
        peft_model = lora_policy(src.model, src.lora, src.weights, torch.float32, source=source, base=base_identity)
        if dtype != "auto":
            peft_model.to(torch_dtype)
        else:
            torch_dtype = torch.float32
        peft_model.save_pretrained(out_dir)  # the adapters only, with the base model's folder in its config
    else:
        # Merged in float32 (peft's merge_and_unload: W += scale * B @ A), then cast once.
        merged = lora_policy(
            src.model, src.lora, src.weights, torch.float32, source=source, base=base_identity
        ).merge_and_unload()
        merged.to(torch_dtype).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(src.base).save_pretrained(out_dir)  # the base tokenizer's files as they are
    try:
        GenerationConfig.from_pretrained(src.base).save_pretrained(out_dir)
    except OSError:  # the base model has no generation_config.json: save_pretrained wrote the default one
        pass
    info = {
        "source_checkpoint": str(src.checkpoint.resolve()),
        "base_model": str(src.model),
        "global_step": src.client.get("global_step"),
        "policy_version": src.client.get("policy_version"),
        "dtype": str(torch_dtype).removeprefix("torch."),
        "kind": "full" if src.lora is None else "lora-adapter" if adapter else "lora-merged",
    }
    if src.lora is not None:
        info["lora"] = src.lora.as_config()
    (out_dir / EXPORT_RECORD).write_text(json.dumps(info, indent=2) + "\n")


def _replace_dir(final: Path, staged: Path) -> None:
    """``staged`` becomes ``final``; an earlier ``final`` is moved aside first and removed after."""
    old = final.parent / f".{final.name}.replaced-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="lite-ppo export-hf",
        description="Write a Hugging Face folder (save_pretrained + tokenizer) from a lite-ppo checkpoint "
        "(DeepSpeed ZeRO folder or single file).",
    )
    parser.add_argument("checkpoint", help="the checkpoint Lightning wrote (a *.ckpt folder under DeepSpeed)")
    parser.add_argument(
        "out_dir", help="the folder to write: new, empty or an earlier export (replaced once the new one is complete)"
    )
    parser.add_argument(
        "--model", default=None, help="base model (HF folder or builtin:NAME); default: the checkpoint's model_path"
    )
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", *DTYPE_NAMES], help="weights dtype (auto: the base model's)"
    )
    parser.add_argument(
        "--adapter",
        action="store_true",
        help="for a LoRA run (model.lora): write the peft adapter folder instead of the merged model",
    )
    args = parser.parse_args(argv)
    if not Path(args.checkpoint).exists():
        from lite_ppo.errors import UserError

        raise UserError(
            f"checkpoint {args.checkpoint}: no such file or folder (a .ckpt file or a DeepSpeed checkpoint folder)"
        )
    from lite_ppo.models.streams import stdout_to_stderr

    # stdout is the folder alone (`$(lite-ppo export-hf ...)`); what libraries print meanwhile goes to stderr.
    with stdout_to_stderr():
        out = export_hf(args.checkpoint, args.out_dir, model=args.model, dtype=args.dtype, adapter=args.adapter)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
