"""Counts the tokens the policy's forward passes compute in each phase of a training step, for
``bench_steps.py`` (which adds it with ``--trainer.callbacks+=step_meter.StepMeter``).

The counting is independent of how the module batches its work (fixed-count or token-budget
micro-batches, shared-prompt packing, chunked log-probs): a forward pre-hook on the policy's
decoder (``policy.get_decoder()``, which every forward of the policy passes through, also one that
computes hidden states and scores them chunk-wise, and with LoRA adapters too) sees each forward's
inputs:

- *processed* tokens: the positions of ``input_ids`` (batch x length, padding included): what the
  matmuls run over;
- *real* tokens: the positions that are not padding: ``attention_mask.sum()`` for a 2-D mask; for
  a 4-D (block) mask the positions that attend to, or are attended by, another position (padding
  attends to itself only); for packed groups run by blocks (a ``shared_prompt_layout`` argument)
  the layout's real positions; all positions without a mask (packed sequences told apart by
  ``position_ids``) or with a mask it cannot read (flex ``BlockMask``).

A forward with gradient counts for the training update; one without gradient outside generation
and scoring counts for the old log-probs; generation forwards (the HF engine shares the policy) are
left out. The phase comes from ``LitePPO.phase`` (``report_phase``).

Per training step it also records what the rollout batch holds: responses, prompt and response
tokens (prompts counted once per response, as an unpacked forward computes them), the prompt
tokens of each group counted once, and the spread of response lengths.

Example::

    trainer:
      callbacks:
        - class_path: step_meter.StepMeter     # benchmarks/ on sys.path; records in step_meter.RECORDS
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback

from lite_ppo.policy_module import rollout_of

# One dict per training step of the latest fit in this process, read by bench_steps.py.
RECORDS: list[dict[str, Any]] = []
# Set at fit start: what the matmuls of one token cost.
MODEL_INFO: dict[str, Any] = {}

_GENERATION_PHASES = ("generating", "scoring", "syncing weights")


class StepMeter(Callback):
    """Token counts per phase of every training step, into :data:`RECORDS` (this process, rank 0 view)."""

    def __init__(self) -> None:
        self._current: dict[str, Any] | None = None
        self._handle = None

    def on_fit_start(self, trainer, pl_module) -> None:
        RECORDS.clear()
        policy = pl_module.policy
        # get_decoder: the transformer stack, also under peft's wrapper (whose base_model is the tuner,
        # which the module's chunked scoring bypasses).
        decoder = policy.get_decoder() if hasattr(policy, "get_decoder") else getattr(policy, "base_model", policy)
        MODEL_INFO.clear()
        MODEL_INFO.update(
            params=sum(
                int(getattr(p, "ds_numel", p.numel())) for p in policy.parameters()
            ),  # tied embeddings once; ZeRO-3: the full size
            hooked=type(decoder).__name__,
            dtype=str(next(policy.parameters()).dtype).replace("torch.", ""),
        )
        self._handle = decoder.register_forward_pre_hook(self._make_hook(pl_module), with_kwargs=True)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        self._current = {
            f"{phase}_{kind}": 0
            for phase in ("update", "old_logprobs")
            for kind in ("tokens_processed", "tokens_real", "forwards")
        }
        self._current["update_threads"] = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch: Any, batch_idx: int) -> None:
        record = self._current or {}
        rollout = rollout_of(outputs)  # LitePPO.training_step's
        if rollout is not None:
            record.update(rollout_counts(rollout))
        RECORDS.append(record)
        self._current = None

    def _make_hook(self, pl_module):
        def count(_module, args, kwargs):
            if self._current is None:
                return None
            phase = getattr(pl_module, "phase", None)
            name = phase[0] if phase else ""
            if torch.is_grad_enabled():
                key = "update"
                if self._current["update_threads"] is None:
                    self._current["update_threads"] = torch.get_num_threads()
            elif name in _GENERATION_PHASES:
                return None
            else:
                key = "old_logprobs"
            processed, real = forward_token_counts(args, kwargs)
            self._current[f"{key}_tokens_processed"] += processed
            self._current[f"{key}_tokens_real"] += real
            self._current[f"{key}_forwards"] += 1
            return None

        return count


def forward_token_counts(args: tuple, kwargs: dict) -> tuple[int, int]:
    """(processed, real) token positions of one decoder forward, from its inputs."""
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if input_ids is not None:
        batch, length = input_ids.shape[0], input_ids.shape[-1]
    else:
        embeds = kwargs["inputs_embeds"]
        batch, length = embeds.shape[0], embeds.shape[1]
    processed = int(batch * length)
    layout = kwargs.get("shared_prompt_layout")  # packed rows run by blocks: the layout lists their real positions
    if layout is not None:
        return processed, int(layout.real_positions.numel())
    return processed, _real_positions(kwargs.get("attention_mask"), processed, length)


def _real_positions(mask: Any, processed: int, length: int) -> int:
    if isinstance(mask, dict):  # transformers accepts one mask per layer type
        mask = next(iter(mask.values()), None)
    if not isinstance(mask, torch.Tensor):
        return processed  # no mask (packed, told apart by position_ids) or a flex BlockMask
    if mask.dim() == 2:
        return int(mask[:, -length:].sum().item())  # a longer mask covers cached positions too
    if mask.dim() == 4 and mask.shape[-1] == mask.shape[-2] == length:
        square = mask[:, 0]
        if square.dtype == torch.bool:
            allowed = square
        elif square.max() <= 0:  # additive: 0 attends, a large negative number does not
            allowed = square == 0
        else:
            allowed = square != 0
        # Padding attends to itself only (no empty softmax row) and nothing attends to it; a real
        # position sees an earlier one or is seen by a later one.
        others = allowed & ~torch.eye(length, dtype=torch.bool, device=allowed.device)
        return int((others.any(-1) | others.any(-2)).sum().item())
    return processed


def rollout_counts(rollout: Any) -> dict[str, Any]:
    """What the rollout batch holds, independent of how the update batches it."""
    response_mask = rollout.response_mask
    prompt_width = rollout.input_ids.shape[1] - response_mask.shape[1]
    prompt_lengths = rollout.attention_mask[:, :prompt_width].sum(-1)
    response_lengths = response_mask.sum(-1)
    groups = rollout.group_ids.tolist()
    first_of_group = {}
    for row, group in enumerate(groups):
        first_of_group.setdefault(group, row)
    unique_prompt_tokens = int(sum(int(prompt_lengths[row]) for row in first_of_group.values()))
    lengths = response_lengths.float()
    return {
        "responses": int(response_mask.shape[0]),
        "groups": len(first_of_group),
        "prompt_tokens": int(prompt_lengths.sum()),
        "response_tokens": int(response_lengths.sum()),
        "rollout_tokens": int(rollout.attention_mask.sum()),  # prompt + response, prompts once per response
        "unique_prompt_tokens": unique_prompt_tokens,
        "padded_width": int(rollout.input_ids.shape[1]),
        "response_length_min": float(lengths.min()),
        "response_length_median": float(lengths.median()),
        "response_length_max": float(lengths.max()),
    }
