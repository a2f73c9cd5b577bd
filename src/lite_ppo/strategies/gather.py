"""Full tensors of a (possibly ZeRO-3 partitioned) model, a bounded bucket at a time.

Under ZeRO-3 every rank holds 1/R of each parameter; a rollout engine that keeps its own copy of
the weights (vLLM) needs the full tensors. Gathering the whole model at once would need the memory
ZeRO-3 exists to avoid, so :func:`iter_gathered_state` gathers buckets of at most ``bucket_bytes``
(full-size bytes, in the parameters' dtype) with ``deepspeed.zero.GatheredParameters`` and yields
``(name, tensor)`` pairs in ``state_dict`` order.

**Collective**: every rank must iterate to the end, in the same order, with the same bucket size
(each bucket is an all-gather over all ranks). Ranks that do not need the tensors still iterate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

__all__ = ["GatherStats", "full_numel", "iter_gathered_state", "plan_buckets", "transformer_block"]


_BLOCK = re.compile(r"^(.*?\.layers\.\d+)\.")


def transformer_block(name: str) -> str:
    """Group key for ``group_by``: the transformer block of a parameter name, else the name itself."""
    match = _BLOCK.match(name)
    return match.group(1) if match else name


def full_numel(tensor: torch.Tensor) -> int:
    """Element count of the full tensor (``ds_numel`` of a ZeRO-3 partitioned parameter)."""
    ds_numel = getattr(tensor, "ds_numel", None)
    return int(ds_numel) if ds_numel is not None else tensor.numel()


def _full_bytes(tensor: torch.Tensor) -> int:
    return full_numel(tensor) * tensor.element_size()


@dataclass
class GatherStats:
    """Filled by :func:`iter_gathered_state`: buckets gathered and the largest one (bytes)."""

    buckets: int = 0
    max_bucket_bytes: int = 0
    total_bytes: int = 0
    oversize: list[str] = field(default_factory=list)  # tensors larger than the bucket, gathered alone


def plan_buckets(
    state: list[tuple[str, torch.Tensor]], bucket_bytes: int, group_by: Callable[[str], str] | None = None
) -> list[list[tuple[str, torch.Tensor]]]:
    """Split ``(name, tensor)`` pairs, in order, into buckets of at most ``bucket_bytes`` distinct bytes.

    A tensor that appears under several names (tied embeddings) counts once. ``group_by`` maps a
    name to a group key; consecutive names of one group are never split across buckets (e.g. the
    tensors of one transformer block, which vLLM fuses). A single tensor (or group) larger than
    ``bucket_bytes`` gets a bucket of its own (its size is then the bound).
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    groups: list[list[tuple[str, torch.Tensor]]] = []
    last_key = object()
    for name, tensor in state:
        key = group_by(name) if group_by is not None else name
        if groups and key == last_key:
            groups[-1].append((name, tensor))
        else:
            groups.append([(name, tensor)])
        last_key = key
    buckets: list[list[tuple[str, torch.Tensor]]] = []
    bucket: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    size = 0
    for group in groups:
        new = {id(t): _full_bytes(t) for _, t in group if id(t) not in seen}
        extra = sum(new.values())
        if bucket and extra and size + extra > bucket_bytes:
            buckets.append(bucket)
            bucket, size, seen = [], 0, set()
            extra = sum({id(t): _full_bytes(t) for _, t in group}.values())
        bucket.extend(group)
        seen.update(id(t) for _, t in group)
        size += extra
    if bucket:
        buckets.append(bucket)
    return buckets


def _state_items(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``state_dict`` names -> the live parameters/buffers (not copies), tied names included.

    In ``state_dict`` order, except that a tensor's other names (tied ``lm_head.weight``) follow its
    first name at once, so a tied tensor is gathered once, not again at the end.
    """
    groups: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append((name, tensor))
    return [item for group in groups.values() for item in group]


@torch.no_grad()
def iter_gathered_state(
    module: torch.nn.Module,
    bucket_bytes: int = 256 * 2**20,
    copy: bool = False,
    stats: GatherStats | None = None,
    group_by: Callable[[str], str] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, full tensor)`` for every ``state_dict`` entry of ``module``, gathering ZeRO-3
    partitioned parameters one bucket of at most ``bucket_bytes`` at a time (tied names right after
    the first name of their tensor).

    Args:
        module: the model (e.g. ``LitePPO.policy``); its ``state_dict`` names are used
            (Hugging Face checkpoint names for a transformers model; tied ``lm_head.weight`` included).
        bucket_bytes: the most full-size bytes gathered at once (a larger single tensor is gathered
            alone, see :class:`GatherStats.oversize`).
        copy: ``False`` (default): a yielded tensor aliases the gathered parameter and is valid only
            until the next item is requested (the bucket is re-partitioned when the iteration moves
            past it); consume it at once (copy it into the engine). ``True``: yield detached clones.
        stats: optional :class:`GatherStats` to fill.
        group_by: name -> group key; a group (consecutive names) is never split across buckets,
            e.g. :func:`transformer_block` (``model.layers.3.mlp.up_proj.weight`` -> ``model.layers.3``).

    Without ZeRO-3 (plain or DDP models) it yields the detached tensors and gathers nothing.

    Example::

        for name, tensor in iter_gathered_state(module.policy, bucket_bytes=512 << 20):
            engine_params[name].copy_(tensor)
    """
    items = _state_items(module)
    partitioned_any = any(hasattr(t, "ds_id") for _, t in items)
    if not partitioned_any:
        for name, tensor in items:
            yield name, (tensor.detach().clone() if copy else tensor.detach())
        return

    from deepspeed.runtime.zero.partition_parameters import GatheredParameters

    for bucket in plan_buckets(items, bucket_bytes, group_by):
        unique: dict[int, torch.Tensor] = {}
        for _, tensor in bucket:
            unique.setdefault(id(tensor), tensor)
        partitioned = [t for t in unique.values() if hasattr(t, "ds_id")]
        nbytes = sum(_full_bytes(t) for t in unique.values())
        if stats is not None:
            stats.buckets += 1
            stats.total_bytes += nbytes
            stats.max_bucket_bytes = max(stats.max_bucket_bytes, nbytes)
            if nbytes > bucket_bytes:
                stats.oversize.append(bucket[0][0])
        # modifier_rank=None: read-only, nothing is broadcast back when the block ends.
        with GatheredParameters(partitioned, modifier_rank=None):
            for name, tensor in bucket:
                value = tensor.detach()
                yield name, (value.clone() if copy else value)
