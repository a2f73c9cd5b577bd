"""Validation batches of named problem sets (benchmarks), sliced across data-parallel ranks.

Each item is one validation batch::

    {"problems": list[Problem],   # this rank's share (never empty)
     "valid": list[bool],         # False on a padding copy (a rank whose share would be empty)
     "benchmark": str,            # the set's name
     "index": int, "offset": int}

Global batch ``i`` of a set holds its problems ``[i * B, (i + 1) * B)``; rank ``r`` of ``R`` takes
the contiguous block ``r`` (as the training batches do), so every rank runs the same number of
validation batches. When a batch has fewer problems than ranks, a rank whose block is empty gets a
copy of the batch's last problem flagged ``valid=False``: it is generated (ranks stay in step) but
never counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import DataLoader

from lite_ppo.data.loader import BatchDataset, OrderedSampler, keep_objects, shard_bounds
from lite_ppo.data.problem import Problem


def problem_set_batches(
    problem_sets: Sequence[tuple[str, list[Problem]]], batch_size: int, rank: int = 0, world_size: int = 1
) -> list[dict[str, Any]]:
    """This rank's validation batches for every ``(name, problems)`` set, set after set.

    Example:
        >>> probs = [Problem(str(i), "q", "1", "b") for i in range(3)]
        >>> [(len(it["problems"]), it["valid"]) for it in problem_set_batches([("b", probs)], 2, rank=0, world_size=2)]
        [(1, [True]), (1, [False])]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    items = []
    for name, problems in problem_sets:
        for i in range(0, len(problems), batch_size):
            chunk = problems[i : i + batch_size]
            start, end = shard_bounds(len(chunk), rank, world_size)
            mine, valid = chunk[start:end], [True] * (end - start)
            if not mine:
                mine, valid = chunk[-1:], [False]
            items.append(
                {"problems": mine, "valid": valid, "benchmark": name, "index": i // batch_size, "offset": start}
            )
    return items


def items_loader(items: list[dict[str, Any]]) -> DataLoader:
    """A DataLoader over ready-made batch dicts, in order, left alone by Lightning's sampler injection.
    Each pass hands out fresh copies (callbacks add the generated rollout to the batch dict)."""
    dataset = BatchDataset(lambda k: dict(items[k]), len(items))
    return DataLoader(dataset, batch_size=None, sampler=OrderedSampler(dataset), num_workers=0, collate_fn=keep_objects)
