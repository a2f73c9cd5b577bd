"""Which responses of a rollout batch go into each of its ``m`` optimizer steps (mini-batches).

Two splits, both deterministic and both "the same PPO" (every response is used once per epoch),
but different partitions, hence different runs:

- ``"row"``: response i to mini-batch ``i % m``, so each mini-batch holds a slice of every group.
- ``"group"``: whole groups, group k (in the order of first appearance) to mini-batch ``k % m``.
  Every mini-batch holds all G responses of its prompts, so a group's advantages keep their
  zero-mean baseline inside the optimizer step, and with shared-prompt packing each prompt is
  computed once per update instead of once per mini-batch (verl's split, whose mini-batch size
  counts prompts).

Both keep multi-process runs equal to a single process on the whole batch: when each rank holds an
equal, contiguous share of the global batch, the union over ranks of each rank's mini-batch j is
mini-batch j of one process on everything, provided the share divides evenly (``m`` divides the
rank's groups for ``"group"``, its responses for ``"row"``). ``"group"`` falls back to ``"row"`` when
the groups do not divide, which keeps that property as long as the responses do.

Example:
    >>> import torch
    >>> groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    >>> [rows.tolist() for rows in mini_batch_rows(groups, 2, split="group")]
    [[0, 1, 4, 5], [2, 3, 6, 7]]
    >>> [rows.tolist() for rows in mini_batch_rows(groups, 2, split="row")]
    [[0, 2, 4, 6], [1, 3, 5, 7]]
"""

from __future__ import annotations

import torch

from lite_ppo.ops.packing import group_rows

__all__ = ["MINI_BATCH_SPLITS", "mini_batch_rows"]

MINI_BATCH_SPLITS = ("group", "row")


def mini_batch_rows(group_ids: torch.Tensor, num_mini_batches: int, split: str = "row") -> list[torch.Tensor]:
    """Row indices (ascending) of each of ``num_mini_batches`` mini-batches.

    Args:
        group_ids: [B] the prompt each response answers (rows of a group need not be adjacent).
        num_mini_batches: m, which must divide B.
        split: ``"row"`` or ``"group"`` (whole groups, falling back to ``"row"`` when m does not
            divide the number of groups).

    Raises:
        ValueError: m does not divide B, or an unknown ``split``.
    """
    if split not in MINI_BATCH_SPLITS:
        raise ValueError(f"split must be one of {MINI_BATCH_SPLITS}, got {split!r}")
    m, n = num_mini_batches, group_ids.shape[0]
    if n % m:
        raise ValueError(f"the rollout batch has {n} responses, not divisible by num_mini_batches={m}")
    if split == "group" and n:
        groups = group_rows(group_ids)  # in the order of their first row
        if len(groups) % m == 0:
            return [torch.cat(groups[j::m]).sort().values.to(group_ids.device) for j in range(m)]
    rows = torch.arange(n, device=group_ids.device)
    return [rows[j::m] for j in range(m)]
