"""Run a Hugging Face causal LM on a rollout batch and score the response tokens.

The thin model-facing side of three pure ops (``lite_ppo.ops``):

- :func:`response_hidden_states`: the decoder's final hidden states at the positions predicting each
  response token, in the rollout layout (left-padded prompt, right-padded response), or packed
  (``pack=True``: each group's prompt once, see ``ops.pack_shared_prompts``). Packed rows run their
  attention by blocks (``ops.shared_prompt_attention``, registered with transformers'
  ``AttentionInterface`` for the duration of the forward), or, under gradient checkpointing (whose
  backward re-runs the layers with the model's own attention), with the dense packed mask.
- :func:`response_logprobs`: per-token log-probs and entropy from those hidden states and the
  lm_head weight, one chunk of tokens at a time (``ops.masked_chunked_logprobs_and_entropy``), so no
  [b, R, V] logits stay alive.

Both equal ``model(...).logits`` followed by ``log_softmax(logits / T)`` to float tolerance, values
and gradients (tests/test_packing.py, tests/test_chunked_logprobs.py).

Example:
    >>> logprobs, entropy = response_logprobs(policy, batch, pack=True)   # doctest: +SKIP
    >>> loss = -(logprobs * batch.loss_mask).sum() / batch.loss_mask.sum()  # doctest: +SKIP
    >>> loss.backward()  # gradients reach every parameter, the prompt's activations once per group  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import fields, replace

import torch
from transformers import AttentionInterface

from lite_ppo.ops.chunked_logprobs import masked_chunked_logprobs_and_entropy
from lite_ppo.ops.logprobs import entropy_from_logits, logprobs_from_logits
from lite_ppo.ops.micro_batches import padded_cost, real_token_span, token_budget_micro_batches
from lite_ppo.ops.packed_attention import SharedPromptLayout, shared_prompt_attention, shared_prompt_layout
from lite_ppo.ops.packing import group_rows, pack_shared_prompts, packed_lengths
from lite_ppo.rollout.batch import RolloutBatch

__all__ = [
    "forward_token_counts",
    "output_head_weight",
    "packs_into_one_row",
    "plan_micro_batches",
    "response_hidden_states",
    "response_logprobs",
    "supports_hidden_state_scoring",
    "trim_padding",
]


def supports_hidden_state_scoring(model: torch.nn.Module) -> bool:
    """Whether logits are exactly ``lm_head(decoder(...).last_hidden_state)`` with a linear lm_head.

    False for heads that post-process the logits (Gemma's soft-capping, Cohere's logit scale):
    callers keep ``model(...).logits`` there.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    config = getattr(model, "config", None)
    return (
        isinstance(head, torch.nn.Linear)
        and getattr(config, "final_logit_softcapping", None) is None
        and getattr(config, "logit_scale", None) is None
        and hasattr(model, "get_decoder")
    )


def output_head_weight(model: torch.nn.Module) -> torch.Tensor | None:
    """The lm_head weight [V, H] when it can be used as a plain tensor, else None.

    With tied embeddings it *is* the input embedding parameter, so gradients through it accumulate
    on the one shared parameter, as in the model's own forward. None when the head has a bias or
    its weight is partitioned (DeepSpeed ZeRO-3 gathers it only inside the head's own forward):
    :func:`response_logprobs` then calls the head module on the scored positions instead.
    """
    if not supports_hidden_state_scoring(model):
        raise ValueError(
            f"{type(model).__name__} post-processes its logits or has no linear lm_head; use model(...).logits"
        )
    head = model.get_output_embeddings()
    if head.bias is not None or hasattr(head.weight, "ds_id"):
        return None
    return head.weight


SHARED_PROMPT_ATTENTION = "lite_ppo_shared_prompt"


def packs_into_one_row(model: torch.nn.Module) -> bool:
    """Whether a packed forward puts all groups in one row without padding (block attention), or
    each group in a row of its own with a dense mask (under gradient checkpointing, whose backward
    re-runs the layers with the model's own attention)."""
    return not getattr(model, "is_gradient_checkpointing", False)


def _dense_packed_mask(allowed: torch.Tensor, attn_implementation: str | None, dtype: torch.dtype) -> torch.Tensor:
    """The 4-D mask in the form the model's attention takes; transformers passes a 4-D mask through unchanged."""
    if attn_implementation == "sdpa":
        return allowed  # sdpa reads a bool mask as "may attend" (a little faster than an additive one)
    # eager adds the mask to the scores: 0 where allowed, the dtype's minimum elsewhere.
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)


def _shared_prompt_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    shared_prompt_layout: SharedPromptLayout | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A transformers attention implementation (``AttentionInterface``) running
    ``ops.shared_prompt_attention`` on the layout the packed forward passes in its kwargs."""
    unsupported = {
        name: setting
        for name, setting in (
            ("dropout", dropout),
            ("sliding_window", kwargs.get("sliding_window")),
            ("softcap", kwargs.get("softcap")),
            ("s_aux", kwargs.get("s_aux")),
        )
        if setting
    }
    if shared_prompt_layout is None or unsupported or getattr(module, "is_causal", True) is False:
        raise ValueError(
            f"{type(module).__name__}: shared-prompt packing supports plain causal attention only "
            f"(got {unsupported or 'no packing layout'}); set model.pack_prompts: false for this model"
        )
    return shared_prompt_attention(query, key, value, shared_prompt_layout, scale=scaling), None


# Registered once, under a name no model uses unless a packed forward selects it.
AttentionInterface.register(SHARED_PROMPT_ATTENTION, _shared_prompt_attention_forward)


@contextlib.contextmanager
def _attention_implementation(model: torch.nn.Module, name: str) -> Iterator[None]:
    """Run ``model``'s attention layers with the registered implementation ``name`` for a while
    (transformers reads ``config._attn_implementation`` at every forward)."""
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def response_hidden_states(
    model: torch.nn.Module, batch: RolloutBatch, pack: bool = False, pad_token_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states predicting each response token: ``(hidden [B, R, H], valid [B, R])``.

    ``hidden[b, t]`` is the decoder output (after its final norm) at the position before response
    token t, the input of the lm_head for the logit of token t. ``valid`` is 1 where the rows hold a
    real token (elsewhere ``hidden`` holds arbitrary finite values).

    Args:
        model: a causal LM (``get_decoder()`` gives the stack that ends with the final norm).
        batch: the rollout layout: prompt left-padded to P, response right-padded to R.
        pack: compute each group's prompt once (``ops.pack_shared_prompts``), each response seeing
            the prompt and its own prefix only.
        pad_token_id: filler of the packed rows beyond their end (never attended to).
    """
    decoder = model.get_decoder()
    width, p_width = batch.response_mask.shape[1], batch.prompt_width
    if not pack:
        # Left-padded prompts: positions count real tokens only, as generate() did.
        position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids, use_cache=False
        )
        hidden = out.last_hidden_state[:, p_width - 1 : p_width + width - 1]
        return hidden, batch.attention_mask[:, p_width:]
    one_row = packs_into_one_row(model)
    packed = pack_shared_prompts(
        batch.input_ids, batch.attention_mask, p_width, batch.group_ids, pad_token_id, one_row=one_row
    )
    attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if attn not in ("sdpa", "eager"):
        raise ValueError(
            f"shared-prompt packing runs in place of the model's 'sdpa' or 'eager' attention, not {attn!r}; "
            "set model.pack_prompts: false"
        )
    if not one_row:
        # Backward re-runs each layer outside this function, with the model's own attention: give
        # it the dense [L, L] mask, which both runs see (one group per row, so that the dense
        # square of each row is no larger than its group).
        dtype = next(decoder.parameters()).dtype
        mask = _dense_packed_mask(packed.attention_mask(), attn, dtype if dtype.is_floating_point else torch.float32)
        out = decoder(
            input_ids=packed.input_ids, attention_mask=mask, position_ids=packed.position_ids, use_cache=False
        )
    else:
        # All groups in one row, no padding; the responses attend to their prompt and to their own
        # prefix by blocks (no [L, L] mask): transformers builds no mask for a registered
        # implementation it has no mask function for.
        with _attention_implementation(model, SHARED_PROMPT_ATTENTION):
            out = decoder(
                input_ids=packed.input_ids,
                position_ids=packed.position_ids,
                use_cache=False,
                shared_prompt_layout=shared_prompt_layout(packed.segment_ids),
            )
    # Backward of this gather sums, on each packed position, the gradients of every response
    # token it predicts; the prompt's own positions get theirs through the attention.
    hidden = out.last_hidden_state[packed.row[:, None], packed.predict_index]  # [B, R, H]
    return hidden, packed.response_valid


def response_logprobs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    pack: bool = False,
    chunk_size: int = 1024,
    with_entropy: bool = True,
    score_mask: torch.Tensor | None = None,
    pad_token_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(o_t | x, o_<t) at temperature ``batch.temperature`` and the entropy, per response token.

    Args:
        model: a causal LM with a linear lm_head (:func:`supports_hidden_state_scoring`); with a
            bias-free, unpartitioned head the scoring is chunked (no [N, V] logits kept alive).
        batch: the rollout layout.
        pack: share each group's prompt (see :func:`response_hidden_states`).
        chunk_size: tokens scored per chunk (peak memory ~ ``chunk_size x V`` float32).
        with_entropy: False returns zero entropy and skips its cost.
        score_mask: [B, R] the tokens to score; defaults to ``batch.response_mask``. Elsewhere both
            outputs are 0 and no logits are computed.

    Returns:
        ``(logprobs [B, R], entropy [B, R])`` float32, differentiable w.r.t. the model's parameters.
    """
    weight = output_head_weight(model)
    hidden, valid = response_hidden_states(model, batch, pack=pack, pad_token_id=pad_token_id)
    mask = batch.response_mask if score_mask is None else score_mask
    mask = mask.bool() & valid.bool()
    if weight is not None:
        return masked_chunked_logprobs_and_entropy(
            hidden, weight, batch.response_ids, mask, batch.temperature, chunk_size, with_entropy
        )
    # The head must run as a module (bias, or ZeRO-3 gathering its weight): full logits, but of the
    # scored tokens only.
    logits = model.get_output_embeddings()(hidden[mask]).float() / batch.temperature
    logprobs = hidden.new_zeros(mask.shape, dtype=torch.float32).masked_scatter(
        mask, logprobs_from_logits(logits, batch.response_ids[mask])
    )
    entropy = hidden.new_zeros(mask.shape, dtype=torch.float32)
    if with_entropy:
        entropy = entropy.masked_scatter(mask, entropy_from_logits(logits))
    return logprobs, entropy


def trim_padding(batch: RolloutBatch) -> RolloutBatch:
    """The batch without the columns that are padding in every row (``ops.real_token_span``).

    A micro-batch selected from a mini-batch keeps the widest prompt and response of the whole
    rollout; trimmed, its forward costs ``rows x (longest prompt + longest response)`` tokens, the
    padded cost that ``ops.token_budget_micro_batches`` budgets. Log-probs of the kept response
    columns are unchanged (positions count real tokens only); callers that need the [B, R] width
    back pad the results with zeros on the right.
    """
    start, end = real_token_span(batch.attention_mask, batch.prompt_width)
    width = end - batch.prompt_width
    response_shape = batch.response_mask.shape
    out = {}
    for f in fields(batch):
        value = getattr(batch, f.name)
        if f.name in ("input_ids", "attention_mask"):
            out[f.name] = value[:, start:end]
        elif isinstance(value, torch.Tensor) and value.shape == response_shape:  # every per-token [B, R] field
            out[f.name] = value[:, :width]
    return replace(batch, **out)


def plan_micro_batches(
    batch: RolloutBatch,
    rows_per_micro_batch: int,
    max_tokens: int | None = None,
    pack: bool = False,
    one_row: bool = False,
) -> list[torch.Tensor]:
    """Row indices of ``batch`` for each forward pass.

    ``max_tokens`` None: ``rows_per_micro_batch`` rows at a time, in order (whole groups stay
    together as long as the count allows). Otherwise token-budget micro-batches
    (``ops.token_budget_micro_batches``) on the cost the forward really pays: with ``pack``, the
    packed groups (a group is never split), in one row without padding when ``one_row``
    (:func:`packs_into_one_row`), else a row each padded to the longest; without ``pack``, each
    row's prompt and response, padded separately (``trim_padding`` cuts a micro-batch to its
    longest prompt + longest response).
    """
    n = batch.num_responses
    if max_tokens is None:
        return list(torch.arange(n).split(rows_per_micro_batch))
    if pack:
        groups = group_rows(batch.group_ids)
        units = token_budget_micro_batches(
            packed_lengths(batch.attention_mask, batch.prompt_width, batch.group_ids), max_tokens, concatenated=one_row
        )
        return [torch.cat([groups[g] for g in unit.tolist()]).sort().values for unit in units]
    return token_budget_micro_batches(_prompt_and_response_lengths(batch), max_tokens)


def forward_token_counts(batch: RolloutBatch, pack: bool = False, one_row: bool = False) -> tuple[int, int]:
    """``(real, processed)`` token positions of one forward over ``trim_padding(batch)``.

    Real: the distinct tokens (a group's prompt once when ``pack``). Processed: what the forward
    pays, padding included: with ``pack``, the packed groups in one row (``one_row``: no padding)
    or in rows padded to the longest one; without, each row padded to the longest prompt plus the
    longest response (``ops.padded_cost``).
    """
    if pack:
        lengths = packed_lengths(batch.attention_mask, batch.prompt_width, batch.group_ids)
    else:
        lengths = _prompt_and_response_lengths(batch)
    return int(lengths.sum()), padded_cost(lengths, concatenated=pack and one_row)


def _prompt_and_response_lengths(batch: RolloutBatch) -> torch.Tensor:
    """[B, 2] real prompt and response tokens per row: the two segments the layout pads separately."""
    real = batch.attention_mask.bool()
    return torch.stack([real[:, : batch.prompt_width].sum(-1), real[:, batch.prompt_width :].sum(-1)], dim=1)
