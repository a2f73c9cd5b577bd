"""A second model laid out like the policy, frozen: what a technique scores a reference with.

On one device or under DDP it is a plain copy on the policy's device. Under ZeRO-3 it is partitioned
over the ranks like the policy and wrapped in a DeepSpeed engine without an optimizer
(``strategies.zero.zero3_inference_engine``), whose hooks gather each layer's parameters for its
forward: every rank must then run the same number of forwards with it, as the update's micro-batches
do. The engine lives as long as the returned model.
"""

from __future__ import annotations

from typing import Any

import torch

from lite_ppo.models import load_causal_lm, resolve_model
from lite_ppo.strategies.zero import zero3_inference_engine


def load_frozen_model(path: str, torch_dtype: str, trainer: Any, device: torch.device) -> torch.nn.Module:
    """A frozen, eval-mode causal LM from ``path`` (a folder or ``builtin:...``) in ``torch_dtype``, on
    ``device`` or, under ZeRO-3, partitioned like the policy.

    Under ZeRO-3, transformers' flag registered for the policy (kept alive by the module's token) makes
    ``from_pretrained`` build it partitioned too. Registering a second token here would replace the
    policy's, and the flag would vanish with it (generate then loses synced_gpus and the ranks'
    collectives diverge).
    """
    model = load_causal_lm(resolve_model(path), torch_dtype)
    model.config.use_cache = False
    model.requires_grad_(False)
    model.eval()
    engine = zero3_inference_engine(model, trainer)
    if engine is None:
        return model.to(device)
    # Not a submodule (the engine holds the model: .modules() would loop), only kept alive by
    # it: dropping the engine would remove its hooks and leave the model's parameters empty.
    model.__dict__["_lite_ppo_deepspeed_engine"] = engine
    return model
