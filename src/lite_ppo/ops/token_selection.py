"""Selecting the tokens that get a policy gradient: the k largest of a per-token statistic, and the
high-entropy ("forking") tokens of Wang et al. 2025.

High-entropy tokens ("Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning", Wang et al. 2025): only the top share rho of the
batch's tokens by entropy H_{i,t} keep their policy gradient. With N loss tokens in the batch,

    k     = ceil(rho * N)                          (at least 1 when N > 0)
    tau   = the k-th largest H_{i,t}               (the entropy threshold)
    s_i,t = I[H_{i,t} >= tau]                      (exactly k tokens: ties at tau go to the earlier ones)

and the surrogate l_{i,t} (the clipped PPO loss) enters the loss only where s = 1. The authors'
released code (verl, ``get_global_entropy_top_mask`` and ``agg_loss(loss_mask=response_mask *
entropy_top_mask)``) averages the surrogate over the *selected* tokens:

    L = sum_{i,t} s_i,t * l_i,t / sum_{i,t} s_i,t                          (token-mean)

TRL's ``top_entropy_quantile`` instead multiplies l by s and keeps the denominator of all tokens
(the same direction, a step about 1 / rho times smaller under token-mean).

Nothing here imports the rest of the project; every function is a plain function of tensors.
"""

from __future__ import annotations

import math

import torch


def share_count(share: float, n: int, rounding: str = "ceil") -> int:
    """How many of ``n`` tokens a ``share`` in (0, 1] selects: ``ceil`` or ``floor`` of share * n,
    at least 1 when n > 0 (0 when n is 0).

    The product is rounded to 9 decimals first, so that 0.2 * 10 (2.0000000000000004 in binary) is 2,
    not 3.
    """
    if n <= 0:
        return 0
    exact = round(share * n, 9)
    count = math.ceil(exact) if rounding == "ceil" else math.floor(exact)
    return min(n, max(1, count))


def top_k_mask(values: torch.Tensor, k: int) -> torch.Tensor:
    """A bool mask [N] of the ``k`` largest ``values`` [N]; among equal values the earlier positions
    are taken first, so the result is the same wherever the values are laid out the same."""
    mask = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    if k <= 0:
        return mask
    order = torch.sort(values, descending=True, stable=True).indices
    mask[order[:k]] = True
    return mask


def high_entropy_mask(entropy: torch.Tensor, share: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """The high-entropy tokens of a batch (module docstring): ``(selected [N] bool, tau)``.

    Args:
        entropy: [N] the entropies of the batch's loss tokens, flattened (any order; ties are broken
            toward the earlier position).
        share: rho, the share of tokens that keep their gradient (0.2 in Wang et al.).

    Returns:
        the mask of the ``ceil(share * N)`` highest-entropy tokens, and the threshold tau (the
        smallest selected entropy; ``-inf`` when N is 0).
    """
    k = share_count(share, entropy.numel(), "ceil")
    selected = top_k_mask(entropy, k)
    tau = entropy[selected].min() if k else entropy.new_tensor(-math.inf)
    return selected, tau
