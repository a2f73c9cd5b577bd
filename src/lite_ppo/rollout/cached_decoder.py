"""A Llama-family causal LM decoded with preallocated KV caches: the whole batch, one token a step.

transformers' ``generate`` spends most of a small model's decode step outside the model: it grows
the KV cache by concatenation (every cached token copied every step), rebuilds masks and runs its
processors per call. :class:`CachedDecoder` runs the same layers (their own modules: the norms,
projections and MLP of the policy, LoRA adapters included) around caches allocated once:

- the **prompt cache** holds each prompt once, although ``repeat`` samples continue it: a decode
  step reads it once per prompt, for all of that prompt's samples together (one matrix product
  instead of ``repeat`` matrix-vector ones), where most of a step's memory traffic used to go;
- the **response cache** holds each sample's own tokens, one column per step, and loses the rows of
  finished samples when :meth:`CachedDecoder.keep` drops them.

It reproduces ``generate``'s conventions, so its logits match the policy's own forward to rounding:
left-padded prompts, position ids counted over each row's real tokens (pads masked out of attention),
and the decoded tokens appended in one shared column per step.

Example:
    >>> decoder = CachedDecoder(policy, prompts=4, width=12, new_tokens=80, repeat=8)   # doctest: +SKIP
    >>> logits = decoder.prefill(input_ids, attention_mask)    # [4 * 8, V]              # doctest: +SKIP
    >>> logits = decoder.step(next_tokens)                                                # doctest: +SKIP
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lite_ppo.errors import UserError

__all__ = ["SUPPORTED_MODEL_TYPES", "CachedDecoder", "decoder_stack"]

# Architectures whose decoder layer is Llama's: pre-norm attention with rotary embeddings, then a
# pre-norm MLP (qwen2 adds projection biases, qwen3 per-head q/k norms; both handled below).
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def decoder_stack(policy: torch.nn.Module) -> torch.nn.Module:
    """The causal LM under ``policy`` (a peft wrapper is looked through: its LoRA layers stay in place,
    so calling a projection applies the adapters)."""
    model = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(
            f"BatchedEngine decodes {', '.join(SUPPORTED_MODEL_TYPES)} models, not {model_type!r}: "
            "use rollout.engine: lite_ppo.rollout.HFEngine for this model"
        )
    return model


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _plain(*modules: torch.nn.Module) -> bool:
    """Plain linear layers (not LoRA-wrapped): their weights can be stacked into one matmul."""
    return all(type(m) is torch.nn.Linear for m in modules)


def _fused_qkv(attn: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The q, k and v projections as one weight (and bias), so a step runs one matmul instead of three
    (each output is the same dot product as before); None for adapted layers, which run as they are."""
    parts = (attn.q_proj, attn.k_proj, attn.v_proj)
    if not _plain(*parts):
        return None
    bias = torch.cat([p.bias for p in parts]) if all(p.bias is not None for p in parts) else None
    return torch.cat([p.weight for p in parts]), bias


def _fused_gate_up(mlp: torch.nn.Module) -> torch.Tensor | None:
    """The gated MLP's gate and up projections as one weight (None: the MLP runs as it is)."""
    gate, up = getattr(mlp, "gate_proj", None), getattr(mlp, "up_proj", None)
    if gate is None or up is None or not _plain(gate, up, mlp.down_proj) or gate.bias is not None:
        return None
    return torch.cat([gate.weight, up.weight])


class CachedDecoder:
    """Prefill a left-padded batch of prompts, then decode one token per sample and call.

    Args:
        policy: a Llama-family causal LM (``SUPPORTED_MODEL_TYPES``), or a peft model around one.
        prompts: the prompts of the batch.
        width: the prompt width (left-padded).
        new_tokens: the most tokens to decode after the prompt.
        repeat: samples per prompt; sample ``j`` of prompt ``p`` is row ``p * repeat + j`` (as
            ``generate``'s ``num_return_sequences``) until :meth:`keep` drops rows.
    """

    def __init__(self, policy: torch.nn.Module, prompts: int, width: int, new_tokens: int, repeat: int = 1) -> None:
        model = decoder_stack(policy)
        config = model.config
        window = getattr(config, "sliding_window", None)
        if window is not None and getattr(config, "use_sliding_window", True) and width + new_tokens > window:
            raise UserError(
                f"BatchedEngine: prompt + response ({width + new_tokens}) exceeds the sliding window {window}"
            )
        self.body = model.model
        self.lm_head = model.get_output_embeddings()
        self.layers = list(self.body.layers)
        first = self.layers[0].self_attn
        self.head_dim, self.scaling = first.head_dim, first.scaling
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.group = self.heads // self.kv_heads  # query heads per KV head (repeat_kv's pairing)
        self.prompts, self.width, self.repeat, self.new_tokens = prompts, width, repeat, new_tokens
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device

        def caches(rows: int, columns: int) -> list[torch.Tensor]:
            # uninitialised: a column is written before any step reads it (prefill fills the prompts')
            shape = (rows, self.kv_heads, columns, self.head_dim)
            return [torch.empty(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

        self.prompt_keys, self.prompt_values = caches(prompts, width), caches(prompts, width)
        self.keys, self.values = caches(prompts * repeat, new_tokens), caches(prompts * repeat, new_tokens)
        # cos/sin for every position a row can reach, from the model's own rotary module (any rope type)
        positions = torch.arange(width + new_tokens, device=self.device)[None]
        cos, sin = self.body.rotary_emb(self.keys[0][:1, 0], positions)
        self.cos, self.sin = cos[0], sin[0]  # [positions, head_dim]
        self.fused = [(_fused_qkv(layer.self_attn), _fused_gate_up(layer.mlp)) for layer in self.layers]
        self.qkv_sizes = [self.heads * self.head_dim, *[self.kv_heads * self.head_dim] * 2]
        # the left pads of each live row's prompt [rows, width] (set by prefill)
        self.row_blocked = torch.zeros(prompts * repeat, width, dtype=torch.bool, device=self.device)
        self.slot = torch.arange(prompts * repeat, device=self.device)  # each live row's original row
        self.next_position = torch.zeros(prompts * repeat, dtype=torch.long, device=self.device)
        self.column = 0  # response tokens cached so far

    # -- one layer ---------------------------------------------------------------------------------
    def _project(self, index: int, normed: torch.Tensor, rope: tuple):
        """q [b, H, s, d] and k, v [b, kv heads, s, d], q and k rotated."""
        attn, (qkv, _) = self.layers[index].self_attn, self.fused[index]
        batch, seq, _ = normed.shape
        cos, sin = rope
        if qkv is not None and not hasattr(attn, "q_norm"):
            # q and k rotated in one pass over their heads side by side (the same products per element)
            projected = F.linear(normed, *qkv)
            qk_width = self.qkv_sizes[0] + self.qkv_sizes[1]
            qk = projected[..., :qk_width].view(batch, seq, self.heads + self.kv_heads, self.head_dim)
            qk = qk * cos + _rotate_half(qk) * sin
            q, k = qk.split([self.heads, self.kv_heads], dim=2)
            v = projected[..., qk_width:].view(batch, seq, self.kv_heads, self.head_dim)
            return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if qkv is not None:
            q, k, v = F.linear(normed, *qkv).split(self.qkv_sizes, dim=-1)
        else:
            q, k, v = attn.q_proj(normed), attn.k_proj(normed), attn.v_proj(normed)
        q = q.view(batch, seq, self.heads, self.head_dim)
        k = k.view(batch, seq, self.kv_heads, self.head_dim)
        v = v.view(batch, seq, self.kv_heads, self.head_dim)
        if hasattr(attn, "q_norm"):  # qwen3: RMS norm per head before the rotation
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _layer(self, index: int, hidden: torch.Tensor, rope: tuple, attend) -> torch.Tensor:
        layer, (_, gate_up) = self.layers[index], self.fused[index]
        batch, seq, _ = hidden.shape
        q, k, v = self._project(index, layer.input_layernorm(hidden), rope)
        out = attend(index, q, k, v)  # [b, H, s, d]
        hidden = hidden + layer.self_attn.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))
        normed = layer.post_attention_layernorm(hidden)
        if gate_up is None:
            return hidden + layer.mlp(normed)
        gate, up = F.linear(normed, gate_up).chunk(2, dim=-1)
        return hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:
        """Logits [b, V] after the last column of ``ids`` [b, s], each layer attending with ``attend``."""
        hidden = self.body.embed_tokens(ids)
        rope = self.cos[positions].unsqueeze(2), self.sin[positions].unsqueeze(2)  # [b, s, 1, d], every layer's
        for index in range(len(self.layers)):
            hidden = self._layer(index, hidden, rope, attend)
        logits = self.lm_head(self.body.norm(hidden[:, -1]))
        return logits.to(torch.promote_types(logits.dtype, torch.float32))  # at least float32, as generate

    # -- the prompts -------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Run the prompts [prompts, width] (left-padded; ``attention_mask`` 1 on real tokens), fill the
        prompt cache and return the logits [prompts * repeat, V] of every sample's first token."""
        if tuple(input_ids.shape) != (self.prompts, self.width):
            raise ValueError(f"prefill of {tuple(input_ids.shape)} into a cache for {(self.prompts, self.width)}")
        if self._compacted:
            raise ValueError("prefill after keep() dropped rows: decode a new batch with a new CachedDecoder")
        real = attention_mask.bool()
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(self.width, self.width, dtype=torch.bool, device=self.device).tril()
        # A pad query attends to itself only, so no row of the softmax is empty (its output is never used).
        mask = ((causal & real[:, None, :]) | torch.eye(self.width, dtype=torch.bool, device=self.device))[:, None]

        def attend(index, q, k, v):
            self.prompt_keys[index].copy_(k)
            self.prompt_values[index].copy_(v)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scaling, enable_gqa=self.group > 1
            )

        logits = self._forward(input_ids, positions, attend)
        self.row_blocked = (~real).repeat_interleave(self.repeat, dim=0)
        self.next_position = real.sum(-1).repeat_interleave(self.repeat)
        self.column = 0
        return logits.repeat_interleave(self.repeat, dim=0)

    # -- the responses -----------------------------------------------------------------------------
    def keep(self, rows: torch.Tensor) -> None:
        """Drop the rows whose ``rows`` entry is False (finished samples): later steps compute only the
        rest, in their order. One copy of the kept rows' response cache, so call it when many ended."""
        kept = rows.nonzero().squeeze(-1)
        self.keys = [self._kept_rows(cache, kept) for cache in self.keys]
        self.values = [self._kept_rows(cache, kept) for cache in self.values]
        self.slot = self.slot.index_select(0, kept)
        self.row_blocked = self.row_blocked.index_select(0, kept)
        self.next_position = self.next_position.index_select(0, kept)

    @property
    def _compacted(self) -> bool:
        """Whether :meth:`keep` dropped rows (until then row ``i`` is slot ``i``, every row live)."""
        return len(self.slot) < self.prompts * self.repeat

    def _kept_rows(self, cache: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        """A response cache of the ``kept`` rows, as large as before: only the columns written so far move."""
        fresh = torch.empty((len(kept), *cache.shape[1:]), dtype=cache.dtype, device=cache.device)
        fresh[:, :, : self.column] = cache[:, :, : self.column].index_select(0, kept)
        return fresh

    def _attend_step(self, index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """One query per row [b, H, 1, d] over its prompt and its own response so far.

        The prompt part runs per prompt: the queries of all its samples (a dropped sample's slot holds
        zeros) as the rows of one matrix product with the prompt's keys, then each live row takes its
        slot back. The response part is a matrix-vector product per row. Both score blocks share one
        softmax, so the result is the attention over the concatenated keys."""
        rows, end = q.shape[0], self.column + 1
        self.keys[index][:, :, self.column] = k[:, :, 0]
        self.values[index][:, :, self.column] = v[:, :, 0]
        grouped = q.view(rows, self.kv_heads, self.group, self.head_dim) * self.scaling
        per_prompt = (self.prompts, self.repeat, self.kv_heads, self.group)
        # prompt scores: [prompts, kv heads, width, repeat * group] -> each row's [kv heads, group, width]
        queries = (
            self._to_slots(grouped)
            .reshape(*per_prompt, self.head_dim)
            .permute(0, 2, 4, 1, 3)
            .reshape(self.prompts, self.kv_heads, self.head_dim, self.repeat * self.group)
        )
        prompt_scores = torch.matmul(self.prompt_keys[index], queries)
        prompt_scores = prompt_scores.view(self.prompts, self.kv_heads, self.width, self.repeat, self.group)
        prompt_scores = prompt_scores.permute(0, 3, 1, 4, 2).reshape(-1, self.kv_heads, self.group, self.width)
        prompt_scores = self._from_slots(prompt_scores).masked_fill(self.row_blocked[:, None, None], float("-inf"))
        # response scores: keys @ q^T is faster on the strided column slice than q @ keys^T (measured)
        own_keys, own_values = self.keys[index][:, :, :end], self.values[index][:, :, :end]
        own_scores = torch.matmul(own_keys, grouped.transpose(-1, -2)).transpose(-1, -2)
        weights = torch.cat([prompt_scores, own_scores], dim=-1).softmax(dim=-1)
        prompt_weights, own_weights = weights.split([self.width, end], dim=-1)
        out = torch.matmul(own_weights, own_values)  # [b, kv heads, group, d]
        spread = self._to_slots(prompt_weights).reshape(*per_prompt, self.width)
        spread = spread.permute(0, 2, 1, 3, 4).reshape(
            self.prompts, self.kv_heads, self.repeat * self.group, self.width
        )
        from_prompt = torch.matmul(spread, self.prompt_values[index])  # [prompts, kv heads, repeat * group, d]
        from_prompt = from_prompt.view(self.prompts, self.kv_heads, self.repeat, self.group, self.head_dim)
        from_prompt = from_prompt.permute(0, 2, 1, 3, 4).reshape(-1, self.kv_heads, self.group, self.head_dim)
        return (out + self._from_slots(from_prompt)).view(rows, self.heads, 1, self.head_dim)

    def _to_slots(self, rows: torch.Tensor) -> torch.Tensor:
        """Per live row [b, ...] -> per original row [prompts * repeat, ...], zeros where a row was dropped."""
        if not self._compacted:  # every row is live, in its own slot
            return rows
        slots = rows.new_zeros(self.prompts * self.repeat, *rows.shape[1:])
        return slots.index_copy_(0, self.slot, rows)

    def _from_slots(self, slots: torch.Tensor) -> torch.Tensor:
        """Per original row [prompts * repeat, ...] -> per live row [b, ...] (the inverse of :meth:`_to_slots`)."""
        return slots.index_select(0, self.slot) if self._compacted else slots

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per live row [b] and return the logits [b, V] of the next one."""
        if self.column >= self.new_tokens:
            raise ValueError("the decoder's cache is full: more steps than new_tokens")
        logits = self._forward(tokens[:, None], self.next_position[:, None], self._attend_step)
        self.next_position += 1
        self.column += 1
        return logits
