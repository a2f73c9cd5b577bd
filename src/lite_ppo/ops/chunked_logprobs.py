"""Per-token log-probs and entropy from hidden states, one chunk of tokens at a time.

The usual path materialises logits [b, R, V] in float32 (plus their softmax for the entropy) and
autograd keeps them until backward: 147 MiB for 16 x 48 tokens of a 49k vocabulary, and far more
at long response lengths. Here the lm_head projection, log-softmax and entropy run over ``chunk_size``
tokens at a time and only the [N] results are kept; backward recomputes each chunk's logits, so
peak memory holds one chunk's [chunk_size, V] logits and the gradient of the lm_head weight. The
last chunk's log-softmax is the exception: it is kept from forward to backward (no more memory
than a recomputed chunk takes there), so a forward whose tokens fit in one chunk -- the common
case for short responses -- computes the lm_head projection once instead of twice. Under autocast
(mixed precision), backward recomputes with the forward's autocast state, so the recomputed
log-softmax matches the log-sum-exp kept from forward.

Gradients (z = h W^T / T, p = softmax(z), l = z_y - logsumexp(z), H = logsumexp(z) - sum p z):

    dl/dz = onehot(y) - p            dH/dz = -p * (log p + H)  (= -p * (z - sum p z))

Example:
    >>> import torch
    >>> hidden, weight = torch.randn(5, 8), torch.randn(11, 8)
    >>> targets = torch.randint(0, 11, (5,))
    >>> logprobs, entropy = chunked_logprobs_and_entropy(hidden, weight, targets, temperature=0.7, chunk_size=2)
    >>> full = torch.log_softmax(hidden @ weight.T / 0.7, dim=-1)
    >>> torch.allclose(logprobs, full.gather(-1, targets[:, None]).squeeze(-1), atol=1e-5)
    True
"""

from __future__ import annotations

import torch

__all__ = ["chunked_logprobs_and_entropy", "masked_chunked_logprobs_and_entropy"]


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    # Same arithmetic as lm_head followed by `.float() / T` on the full logits: the matmul in the
    # model's dtype, then float32.
    return (hidden @ weight.T).float() / temperature


class _ChunkedLogprobsEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk_size, with_entropy):
        n = hidden.shape[0]
        logprobs = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n, dtype=torch.float32)
        lse = hidden.new_empty(n, dtype=torch.float32)  # kept for backward: p = exp(z - lse), no new reduction
        log_p = None
        for start in range(0, n, chunk_size):
            sl = slice(start, start + chunk_size)
            z = _chunk_logits(hidden[sl], weight, temperature)
            lse[sl] = torch.logsumexp(z, dim=-1)
            logprobs[sl] = z.gather(-1, targets[sl, None]).squeeze(-1) - lse[sl]
            log_p = z.sub_(lse[sl, None])  # z is not needed any more: log-softmax in place
            if with_entropy:
                entropy[sl] = -(log_p.exp() * log_p).sum(-1)  # -sum p log p: no cancellation of large terms
        ctx.save_for_backward(hidden, weight, targets, lse)
        # Backward starts with the last chunk: hand it this log-softmax instead of recomputing it
        # (released there; a second backward, with retain_graph, recomputes). Without a graph
        # (no_grad) the context, and this tensor with it, is dropped when forward returns.
        ctx.last_chunk = (n - 1) // chunk_size * chunk_size if n else 0
        ctx.last_log_p = log_p
        ctx.temperature, ctx.chunk_size, ctx.with_entropy = temperature, chunk_size, with_entropy
        # Backward recomputes logits: under the same autocast as this forward (mixed precision runs
        # the lm_head matmul in bf16 here), or the recomputed log-softmax would not match the lse
        # kept from it (an fp32 recompute against a bf16 lse gave visibly wrong gradients).
        device = hidden.device.type
        ctx.autocast = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        # An output nobody differentiates (usually the entropy, a statistic) arrives as None in
        # backward instead of zeros, so its gradient term is skipped rather than computed as 0.
        ctx.set_materialize_grads(False)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        device, enabled, dtype = ctx.autocast
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            return _ChunkedLogprobsEntropy._backward(ctx, grad_logprobs, grad_entropy)

    @staticmethod
    def _backward(ctx, grad_logprobs, grad_entropy):
        hidden, weight, targets, lse = ctx.saved_tensors
        t = ctx.temperature
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        entropy_grad = ctx.with_entropy and grad_entropy is not None
        if grad_logprobs is None and not entropy_grad:
            return None, None, None, None, None, None
        grad_hidden = torch.empty_like(hidden) if need_h else None
        grad_weight = None
        kept, ctx.last_log_p = ctx.last_log_p, None
        starts = range(0, hidden.shape[0], ctx.chunk_size)
        for start in reversed(starts):  # the kept last chunk first, so its memory is freed first
            sl = slice(start, start + ctx.chunk_size)
            h = hidden[sl]
            if start == ctx.last_chunk and kept is not None:
                log_p, kept = kept, None
            else:
                log_p = _chunk_logits(h, weight, t).sub_(lse[sl, None])  # log-softmax of the recomputed logits
            p = log_p.exp()
            entropy_term = None
            if entropy_grad:
                # dH/dz = -p (log p + H): the same as -p (z - sum p z), without subtracting large terms.
                entropy = -(p * log_p).sum(-1, keepdim=True)
                entropy_term = log_p.add_(entropy).mul_(p).mul_(grad_entropy[sl, None])  # reuses log_p's memory
            # d(logprob)/dz = onehot - p, scaled by the incoming gradient; built in p's memory.
            g = grad_logprobs[sl, None] if grad_logprobs is not None else torch.zeros_like(lse[sl, None])
            grad_z = p.mul_(-g)
            grad_z.scatter_add_(-1, targets[sl, None], g)
            if entropy_term is not None:
                grad_z.sub_(entropy_term)
            grad_z = grad_z.div_(t).to(hidden.dtype)  # through z = (h W^T) / T
            if need_h:
                grad_hidden[sl] = grad_z @ weight
            if need_w:
                part = (grad_z.T @ h).float()
                grad_weight = part if grad_weight is None else grad_weight.add_(part)
        if need_w:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def chunked_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(h W^T / T)[y] and the entropy of softmax(h W^T / T), per token, in chunks.

    Args:
        hidden: [N, H] final hidden states (after the model's last norm) of the N scored positions.
        weight: [V, H] the lm_head weight (the embedding matrix when embeddings are tied).
        targets: [N] long, the token each position predicts.
        temperature: the sampling temperature T.
        chunk_size: tokens per chunk; peak memory is about ``chunk_size x V`` float32 values (x3 in
            backward: logits, softmax, their gradient).
        with_entropy: False skips the entropy (returned as zeros, no gradient).

    Returns:
        ``(logprobs [N], entropy [N])`` float32; both differentiable w.r.t. ``hidden`` and ``weight``.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return _ChunkedLogprobsEntropy.apply(
        hidden, weight, targets.long(), float(temperature), int(chunk_size), bool(with_entropy)
    )


def masked_chunked_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`chunked_logprobs_and_entropy` on the positions where ``mask`` is set only.

    Args:
        hidden: [b, R, H]; targets: [b, R] long; mask: [b, R] (1 on real response tokens).

    Returns:
        ``(logprobs [b, R], entropy [b, R])`` float32, 0 where ``mask`` is 0 (no logits are
        computed there at all).
    """
    keep = mask.bool()
    logprobs, entropy = chunked_logprobs_and_entropy(
        hidden[keep], weight, targets[keep], temperature, chunk_size, with_entropy
    )
    out_lp = hidden.new_zeros(mask.shape, dtype=torch.float32).masked_scatter(keep, logprobs)
    out_h = hidden.new_zeros(mask.shape, dtype=torch.float32).masked_scatter(keep, entropy)
    return out_lp, out_h
