"""The DataLoader plumbing of the data module: batch-index datasets and an in-order sampler.

Each loader item is already one whole batch (a dict holding a list of :class:`Problem`), so the
DataLoader runs with ``batch_size=None`` and a collate function that passes items through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def keep_objects(item: Any) -> Any:
    """Collate function that returns the item untouched (PyTorch's default would convert it)."""
    return item


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """The contiguous ``[start, end)`` of ``n`` items that ``rank`` of ``world_size`` owns.

    Contiguous blocks (rather than ``r::R``) mean that gathering ranks in order and concatenating
    rebuilds the global order. Shares differ by at most one when ``n % world_size != 0``.

    Example:
        >>> [shard_bounds(10, r, 3) for r in range(3)]
        [(0, 3), (3, 6), (6, 10)]
    """
    return n * rank // world_size, n * (rank + 1) // world_size


class BatchDataset(Dataset):
    """Map-style dataset: item ``k`` is ``make_batch(k)``; ``__len__`` is one epoch's item count.

    For training, ``k`` is a global batch index (it may exceed ``__len__``: the sampler hands out
    the indices of the current epoch).
    """

    def __init__(self, make_batch: Callable[[int], dict[str, Any]], length: int) -> None:
        self.make_batch, self.length = make_batch, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> dict[str, Any]:
        return self.make_batch(k)


# It subclasses DistributedSampler only so that Lightning leaves it alone: under DDP/DeepSpeed
# Lightning wraps every other sampler in a DistributedSampler, which would hand whole batches to
# alternating ranks, while here every rank must see every batch index and take its own slice.
class OrderedSampler(DistributedSampler):
    """Yields batch indices in order, from ``start()`` (read when iteration begins) to the epoch end.

    Args:
        dataset: the dataset (its length is one epoch).
        start: returns the first index to yield; for training that is the number of batches
            already consumed, so a resumed run continues with exactly the next batch, and a new
            epoch (a new ``iter``) continues where the last one stopped.

    ``len()`` is the full epoch length even when starting mid-epoch, because Lightning restores
    its own in-epoch batch counter on resume and ends the epoch when that counter reaches
    ``len(dataloader)``.

    Example:
        >>> sampler = OrderedSampler(BatchDataset(lambda k: {}, 4), start=lambda: 6)
        >>> list(sampler), len(sampler)
        ([6, 7], 4)
    """

    def __init__(self, dataset: BatchDataset, start: Callable[[], int] = lambda: 0) -> None:
        # Explicit replicas/rank: the parent would otherwise query torch.distributed.
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=False, drop_last=False)
        self.length, self.start = len(dataset), start

    def __iter__(self) -> Iterator[int]:
        # A generator: the position is read at the first next(), not when iter() is called. Under
        # DeepSpeed, Lightning builds the iterator (estimated_stepping_batches) before it restores
        # the checkpoint, and an eager read would restart a resumed run at batch 0.
        first = self.start()
        epoch_end = (first // self.length + 1) * self.length
        yield from range(first, epoch_end)

    def __len__(self) -> int:
        return self.length

    def set_epoch(self, epoch: int) -> None:
        # The position comes from the consumed-batch count, not from Lightning's epoch number.
        self.epoch = epoch


class ResumableDataLoader(DataLoader):
    """The training DataLoader; its state is the stream position (batches consumed).

    The data module owns the position and checkpoints it itself. Exposing it here as well makes
    Lightning see a resumable loader (``state_dict``/``load_state_dict``), which it then restores
    with the same value, instead of warning that a mid-epoch resume is unreliable.

    Example:
        >>> box = {"n": 0}
        >>> dataset = BatchDataset(lambda k: {"index": k}, 3)
        >>> loader = ResumableDataLoader(dataset, lambda: box["n"], lambda n: box.update(n=n))
        >>> loader.load_state_dict({"consumed_batches": 2}); [b["index"] for b in loader]
        [2]
    """

    def __init__(
        self, dataset: BatchDataset, get_position: Callable[[], int], set_position: Callable[[int], None]
    ) -> None:
        super().__init__(
            dataset,
            batch_size=None,
            sampler=OrderedSampler(dataset, start=get_position),
            num_workers=0,  # batches are cheap to build; worker processes would copy the pools
            collate_fn=keep_objects,
        )
        self._get_position, self._set_position = get_position, set_position

    def state_dict(self) -> dict[str, int]:
        return {"consumed_batches": self._get_position()}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self._set_position(int(state_dict["consumed_batches"]))
