"""Read a checkpoint that ``lite-ppo fit`` wrote: its client state and the policy's weights.

Lightning writes one of two layouts:

- under DeepSpeed (ZeRO-1/2/3) a *folder* ``*.ckpt/`` holding one shard per rank
  (``checkpoint/zero_pp_rank_R_mp_rank_00_{model,optim}_states.pt`` and ``latest``); the fp32 master
  weights are consolidated from the optimizer shards with DeepSpeed's
  ``get_fp32_state_dict_from_zero_checkpoint`` (on the CPU, one process, no GPU needed; memory: the
  full model in fp32 once, or one tensor at a time with ``lazy=True``);
- otherwise (DDP, one device) a single ``*.ckpt`` file with a ``state_dict``.

Used by ``lite-ppo export-hf`` (:mod:`lite_ppo.checkpoints.export`) and ``lite-ppo evaluate`` (a checkpoint as
``--model``). Loading the weights into a model is :func:`lite_ppo.models.loading.load_weights`.

Example:
    >>> from lite_ppo.checkpoints.reader import read_checkpoint
    >>> client_state, weights = read_checkpoint("runs/ckpt/epoch=0-step=200.ckpt")   # doctest: +SKIP
    >>> client_state["hyper_parameters"]["model_path"], weights["lm_head.weight"].dtype  # doctest: +SKIP
    ('builtin:tiny', torch.float32)
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, NamedTuple

import torch

from lite_ppo.errors import MissingFileError, one_line
from lite_ppo.reliability.checkpoint_io import CheckpointCorruptError, checkpoint_problem, previous_good_checkpoint

__all__ = ["CheckpointContents", "is_deepspeed_checkpoint", "read_checkpoint"]

POLICY_PREFIX = "policy."  # LitePPO's attribute holding the HF model: its weights' key prefix
_CHECKPOINT_WRAPPER_PREFIXES = ("_forward_module.", "module.")  # Lightning / DeepSpeed wrappers in saved key names


class CheckpointContents(NamedTuple):
    """What :func:`read_checkpoint` returns (unpacks as ``client_state, policy_weights``)."""

    client_state: dict[str, Any]
    """Lightning's client state: ``hyper_parameters``, ``global_step``, ``policy_version``, ...
    (no weights, no optimizer)."""
    policy_weights: dict[str, torch.Tensor]
    """The policy's weights under Hugging Face names (``policy.`` removed): float32, or DeepSpeed's
    lazy tensors."""


def is_deepspeed_checkpoint(path: str | os.PathLike) -> bool:
    """True for a DeepSpeed checkpoint folder (it holds a ``latest`` file)."""
    path = Path(path)
    return path.is_dir() and (path / "latest").is_file()


def _policy_names(state: dict[str, torch.Tensor], checkpoint: Path) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state.items():
        for prefix in _CHECKPOINT_WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
        if name.startswith(POLICY_PREFIX):
            out[name[len(POLICY_PREFIX) :]] = tensor
    if not out:
        found = f"keys start with {sorted({k.split('.')[0] for k in state})}" if state else "it has no state_dict"
        raise CheckpointCorruptError(
            f"checkpoint {checkpoint}: no `policy.*` weights ({found}): not a checkpoint of lite-ppo fit"
        )
    return out


def read_checkpoint(checkpoint: str | os.PathLike, lazy: bool = False) -> CheckpointContents:
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
            raise MissingFileError(
                f"{path / tag} has no *_model_states.pt: not a DeepSpeed checkpoint written by Lightning"
            )
        state = _load_whole(files[0], path)
        client = {
            k: v for k, v in state.items() if k not in ("module", "optimizer", "param_shapes", "frozen_param_fragments")
        }
        try:
            weights = get_fp32_state_dict_from_zero_checkpoint(str(path), lazy_mode=lazy)
        except (RuntimeError, OSError, EOFError, pickle.UnpicklingError, ValueError, KeyError) as err:
            raise CheckpointCorruptError(
                f"checkpoint {path}: its DeepSpeed shards do not read ({type(err).__name__}: {one_line(str(err))})"
            ) from err
        weights = _policy_names(weights, path)
        return CheckpointContents(client, weights if lazy else {k: v.float() for k, v in weights.items()})
    if not path.is_file():
        raise MissingFileError(
            f"{path} is neither a DeepSpeed checkpoint folder (with a `latest` file) nor a checkpoint file"
        )
    state = _load_whole(path, path)
    client = {k: v for k, v in state.items() if k not in ("state_dict", "optimizer_states")}
    weights = _policy_names(state.get("state_dict") or {}, path)
    return CheckpointContents(client, {k: v.float() for k, v in weights.items()})


def _load_whole(file: Path, checkpoint: Path) -> dict[str, Any]:
    """``torch.load`` of a checkpoint file that was first checked whole (size, the SHA-256 recorded
    beside it, a complete archive): a truncated, changed or foreign file is one line naming it and the
    newest good checkpoint beside it (the checks of ``lite-ppo fit --ckpt_path``), not torch's traceback."""
    problem = checkpoint_problem(file)
    if problem is None:
        try:
            state = torch.load(file, map_location="cpu", weights_only=False)
        except (RuntimeError, OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError) as err:
            problem = f"does not load ({type(err).__name__}: {one_line(str(err))})"
        else:
            if isinstance(state, dict):
                return state
            problem = f"holds a {type(state).__name__}, not a checkpoint dict"
    where = f"checkpoint {file}" if file == checkpoint else f"checkpoint {checkpoint}: {file.name}"
    good = previous_good_checkpoint(file) if file == checkpoint else None
    hint = f"; the newest good checkpoint beside it is {good}" if good is not None else ""
    raise CheckpointCorruptError(f"{where} {problem}{hint}")
