"""A Llama-family causal LM decoded with a preallocated KV cache: the whole batch, one token a step.

transformers' ``generate`` spends most of a small model's decode step outside the model: it grows
the KV cache by concatenation (every cached token copied every step), rebuilds masks and runs its
processors per call. :class:`CachedDecoder` runs the same layers (their own modules: the norms,
projections and MLP of the policy, LoRA adapters included) around a cache allocated once for the
prompt width plus the token budget, so a decode step writes one column and attends over a view.

It reproduces ``generate``'s conventions, so its logits match the policy's own forward to rounding:
left-padded prompts, position ids counted over each row's real tokens (pads masked out of attention),
and the decoded tokens appended in one shared column per step.

Example:
    >>> decoder = CachedDecoder(policy, batch=8, width=12, new_tokens=80)      # doctest: +SKIP
    >>> logits = decoder.prefill(input_ids, attention_mask)                     # doctest: +SKIP
    >>> logits = decoder.step(next_tokens)                                      # doctest: +SKIP
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


class CachedDecoder:
    """Prefill a left-padded batch of prompts, then decode one token per row and call.

    Args:
        policy: a Llama-family causal LM (``SUPPORTED_MODEL_TYPES``), or a peft model around one.
        batch: rows the cache holds (prompts are expanded to it with ``prefill(..., repeat=n)``).
        width: the prompt width (left-padded).
        new_tokens: the most tokens to decode after the prompt.
    """

    def __init__(self, policy: torch.nn.Module, batch: int, width: int, new_tokens: int) -> None:
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
        self.head_dim = first.head_dim
        self.scaling = first.scaling
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.width = width
        length = width + new_tokens
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        shape = (batch, self.kv_heads, length, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        # cos/sin for every position a row can reach, from the model's own rotary module (any rope type)
        positions = torch.arange(length, device=self.device)[None]
        cos, sin = self.body.rotary_emb(self.keys[0][:1, 0], positions)
        self.cos, self.sin = cos[0], sin[0]  # [length, head_dim]
        self.key_valid = torch.zeros(batch, length, dtype=torch.bool, device=self.device)
        self.next_position = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.column = 0

    def _layer(self, index: int, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, rows: slice):
        layer = self.layers[index]
        attn = layer.self_attn
        batch, seq, _ = hidden.shape
        normed = layer.input_layernorm(hidden)
        q = attn.q_proj(normed).view(batch, seq, self.heads, self.head_dim)
        k = attn.k_proj(normed).view(batch, seq, self.kv_heads, self.head_dim)
        v = attn.v_proj(normed).view(batch, seq, self.kv_heads, self.head_dim)
        if hasattr(attn, "q_norm"):  # qwen3: RMS norm per head before the rotation
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [b, 1, s, d]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        end = self.column + seq
        self.keys[index][rows, :, self.column : end] = k
        self.values[index][rows, :, self.column : end] = v
        keys, values = self.keys[index][rows, :, :end], self.values[index][rows, :, :end]
        if seq == 1:
            out = self._attend_one(q, keys, values, mask)
        else:
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self.scaling, enable_gqa=self.heads != self.kv_heads
            )
        hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def _attend_one(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor):
        """Attention of one query per row [b, H, 1, d] over the cached columns: two batched matmuls.
        (CPU's fused attention kernel is tuned for long queries; for one it costs several times this.)
        The query heads that share a KV head are stacked as that head's rows, as ``repeat_kv`` pairs
        them, so the cache is never copied per head."""
        batch = q.shape[0]
        grouped = q.view(batch, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
        scores = torch.matmul(grouped, keys.transpose(-1, -2)) * self.scaling
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.matmul(scores.softmax(dim=-1), values)  # [b, kv heads, group, d]
        return out.view(batch, self.heads, 1, self.head_dim)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, rows: slice) -> torch.Tensor:
        hidden = self.body.embed_tokens(ids)
        for index in range(len(self.layers)):
            hidden = self._layer(index, hidden, positions, mask, rows)
        return self.lm_head(self.body.norm(hidden[:, -1])).float()

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, repeat: int = 1) -> torch.Tensor:
        """Run the prompts [P, width] (left-padded; ``attention_mask`` 1 on real tokens), fill the cache
        and return the logits [P * repeat, V] of the first response token; row ``p * repeat + j`` is
        the ``j``-th copy of prompt ``p`` (as ``generate``'s ``num_return_sequences``)."""
        prompts, width = input_ids.shape
        if width != self.width or prompts * repeat != self.keys[0].shape[0]:
            raise ValueError(f"prefill of {prompts} x {repeat} rows of width {width} into a cache for {self.width}")
        real = attention_mask.bool()
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(width, width, dtype=torch.bool, device=self.device).tril()
        # A pad query attends to itself only, so no row of the softmax is empty (its output is never used).
        mask = (causal & real[:, None, :]) | torch.eye(width, dtype=torch.bool, device=self.device)
        logits = self._forward(input_ids, positions, mask[:, None], slice(0, prompts))
        if repeat > 1:  # the copies share the prompt's cache: expand it in place, last row first
            for cache in (*self.keys, *self.values):
                cache[:] = cache[:prompts].repeat_interleave(repeat, dim=0)
            logits = logits.repeat_interleave(repeat, dim=0)
            real = real.repeat_interleave(repeat, dim=0)
        self.key_valid[:, :width] = real
        self.next_position[:] = real.sum(-1)
        self.column = width
        return logits

    def keep(self, rows: torch.Tensor) -> None:
        """Drop the rows whose ``rows`` entry is False (finished sequences): later steps compute only
        the rest, in their order. One copy of the cache's kept rows, so call it when many have ended."""
        self.keys = [cache[rows] for cache in self.keys]
        self.values = [cache[rows] for cache in self.values]
        self.key_valid = self.key_valid[rows]
        self.next_position = self.next_position[rows]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row [B] and return the logits [B, V] of the next one."""
        if self.column >= self.keys[0].shape[2]:
            raise ValueError("the decoder's cache is full: more steps than new_tokens")
        self.key_valid[:, self.column] = True
        mask = self.key_valid[:, None, None, : self.column + 1]
        logits = self._forward(tokens[:, None], self.next_position[:, None], mask, slice(None))
        self.next_position += 1
        self.column += 1
        return logits
