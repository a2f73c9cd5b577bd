"""MathDataModule: batches of prompts drawn from difficulty tiers, deterministic and resumable."""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from typing import Any

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from lite_ppo.data.loader import BatchDataset, ResumableDataLoader, shard_bounds
from lite_ppo.data.mixture import TierMixture
from lite_ppo.data.pools import TierPool, build_pool
from lite_ppo.data.problem import Problem
from lite_ppo.data.seeding import run_seed
from lite_ppo.data.validation import items_loader, problem_set_batches
from lite_ppo.errors import UserError

DEFAULT_SOURCES = {"easy": "synthetic:easy", "medium": "synthetic:medium", "hard": "synthetic:hard"}


_REFILL_BASE = 10**12
_MAX_REFILL_ROUNDS = 1024


class MathDataModule(LightningDataModule):
    """Global batches of ``prompts_per_step`` problems mixed from tiers; each rank gets its slice.

    Batch ``k`` (global index, ``k = epoch * steps_per_epoch + i``) is a pure function of
    ``(seed, k)`` and the configuration: the tier of each prompt is drawn from the mixture
    weights in force at ``k``, then the tier's pool gives the problem at position
    ``k * prompts_per_step + j``. Rank ``r`` of ``R`` gets the contiguous block ``r`` of ``R``
    equal blocks, so gathering ranks in order rebuilds the global batch.

    Every loader item is a dict::

        {"problems": list[Problem],  # this rank's share of the batch
         "index": int,               # k, the global batch index (validation: the val batch number)
         "offset": int}              # position of problems[0] within the global batch

    Validation: the held-out problems of every tier (``val_size``), and the named problem sets
    (benchmarks) given to :meth:`configure_validation` (the ``Evaluation`` callback does, in its
    ``setup``), in one loader whose items say what they hold (see
    :mod:`lite_ppo.data.validation`).

    Resume: :meth:`on_after_batch_transfer` (called right before each training step) records
    that batch ``k`` was consumed; :meth:`state_dict` saves the count into checkpoints, and
    Lightning restores it before it builds the train loader, so a resumed run continues with
    batch ``k + 1``.

    Args:
        sources: tier name -> ``"synthetic:easy" | "synthetic:medium" | "synthetic:hard"``, a
            registered dataset name (``"paper:easy"``, ``"paper:medium"``, ``"paper:hard"``, ...;
            ``lite-ppo data list``) or the path of a JSONL (``.jsonl.gz``, Parquet) file in the
            project's schema. Default: the three synthetic tiers named easy, medium and hard.
        weights: relative tier weights (missing tiers weigh 0; not all zero). Default
            ``{"easy": 1.0}``.
        schedule: optional curriculum, entries ``{"step": k0, "weights": {...}}``; at batch ``k``
            the weights of the last entry with ``step <= k`` apply (``weights`` before the first).
        prompts_per_step: prompts in one global batch (the paper: 128); must divide by the
            number of ranks.
        steps_per_epoch: batches per epoch (an epoch is only a logging/checkpoint rhythm here).
        seed: selects the batches, the synthetic problems and (unless ``heldout_seed`` is set) the
            held-out split. Default: the run's ``seed_everything``
            (``lite_ppo.data.seeding.run_seed``), read when first needed.
        val_size: problems held out per tier for validation (0: no validation loader). They are
            never used for training: a training draw whose text is held out is redrawn (synthetic
            and testbed tiers), a file row with a held-out text is dropped.
        heldout_seed: selects the held-out split on its own, so that every training seed is
            evaluated on the same problems (the testbed configs set 0); None (default): the split
            follows ``seed``, as before this option existed.
        val_batch_size: problems per validation batch (default: ``prompts_per_step``).
        data_dir: a folder of data files in the schema named like the registry's files
            (``easy.jsonl``, ``medium.jsonl``, ``hard.jsonl``); for dataset names it wins over the
            shipped and cached copies (offline clusters).

    Example (YAML for LightningCLI)::

        data:
          sources: {easy: paper:easy, medium: /data/train/medium.jsonl, hard: synthetic:hard}
          weights: {easy: 1.0}
          schedule: [{step: 200, weights: {easy: 0.5, hard: 0.5}}]
          prompts_per_step: 128
          val_size: 64
    """

    def __init__(
        self,
        sources: dict[str, str] | None = None,
        weights: dict[str, float] | None = None,
        schedule: list[dict[str, Any]] | None = None,
        prompts_per_step: int = 128,
        steps_per_epoch: int = 100,
        seed: int | None = None,
        val_size: int = 0,
        val_batch_size: int | None = None,
        data_dir: str | None = None,
        heldout_seed: int | None = None,
    ) -> None:
        super().__init__()
        self.sources = dict(DEFAULT_SOURCES if sources is None else sources)
        for name, value in (("prompts_per_step", prompts_per_step), ("steps_per_epoch", steps_per_epoch)):
            if value < 1:
                raise UserError(f"data.{name} must be >= 1, got {value}")
        if val_size < 0:
            raise UserError(f"data.val_size must be >= 0 (0: no held-out problems), got {val_size}")
        if val_batch_size is not None and val_batch_size < 1:
            raise UserError(
                f"data.val_batch_size must be >= 1 or null (null: data.prompts_per_step), got {val_batch_size}"
            )
        # Validated here, before any file is read, so a bad YAML fails at start with its message.
        self.mixture = TierMixture(list(self.sources), {"easy": 1.0} if weights is None else weights, schedule)
        self.prompts_per_step, self.steps_per_epoch = prompts_per_step, steps_per_epoch
        self._seed = seed
        self.val_size = val_size
        self.heldout_seed = heldout_seed
        self.val_batch_size = val_batch_size or prompts_per_step
        self.data_dir = data_dir
        self.consumed_batches = 0
        self._pools: dict[str, TierPool] | None = None
        self._problem_sets: list[tuple[str, list[Problem]]] | None = None  # see configure_validation
        self._problem_set_batch_size = 0
        self._validate_held_out = True

    @property
    def seed(self) -> int:
        """The seed in use: ``seed``, else the run's global seed, fixed at first use."""
        if self._seed is None:
            self._seed = run_seed(None)
        return self._seed

    # ------------------------------------------------------------------ batches
    def setup(self, stage: str | None = None) -> None:
        self.pools  # noqa: B018 (load files once, in setup, where Lightning expects I/O)

    @property
    def pools(self) -> dict[str, TierPool]:
        """The tier pools, built on first use (files are read then)."""
        if self._pools is None:
            self._pools = {
                tier: build_pool(tier, spec, self.seed, self.val_size, self.data_dir, self.heldout_seed)
                for tier, spec in self.sources.items()
            }
        return self._pools

    def weights_at(self, k: int) -> dict[str, float]:
        """The tier weights in force at batch index ``k``."""
        return self.mixture.weights_at(k)

    def global_batch(self, k: int) -> list[Problem]:
        """All ``prompts_per_step`` problems of batch ``k`` (every rank's share, in rank order).

        Example:
            >>> dm = MathDataModule(prompts_per_step=4)
            >>> [p.tier for p in dm.global_batch(0)]
            ['easy', 'easy', 'easy', 'easy']
        """
        if k < 0:
            raise ValueError(f"batch index must be >= 0, got {k}")
        tiers = self.mixture.draw(random.Random(f"lite-ppo:mixture:{self.seed}:{k}"), k, self.prompts_per_step)
        first = k * self.prompts_per_step
        return [self.pools[tier].train_problem(first + j) for j, tier in enumerate(tiers)]

    def rank_batch(self, k: int, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
        """The loader item of batch ``k`` for ``rank``: ``{"problems", "index", "offset"}``."""
        if self.prompts_per_step % world_size:
            raise UserError(
                f"prompts_per_step={self.prompts_per_step} is not divisible by the world size {world_size}; "
                "every rank must generate for an equal share of the global batch"
            )
        start, end = shard_bounds(self.prompts_per_step, rank, world_size)
        return {"problems": self.global_batch(k)[start:end], "index": k, "offset": start}

    def refill_batch(self, k: int, round_index: int, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
        """Extra problems for batch ``k`` (dynamic sampling's refill round ``round_index``), same
        shape as :meth:`rank_batch`, drawn from positions no regular batch uses, deterministically."""
        if self.prompts_per_step % world_size:
            raise ValueError(
                f"prompts_per_step={self.prompts_per_step} is not divisible by the world size {world_size}"
            )
        tiers = self.mixture.draw(
            random.Random(f"lite-ppo:refill:{self.seed}:{k}:{round_index}"), k, self.prompts_per_step
        )
        # Regular batches use positions [k * P, (k + 1) * P); refills live far beyond any run's reach.
        first = _REFILL_BASE + (k * _MAX_REFILL_ROUNDS + round_index) * self.prompts_per_step
        problems = [self.pools[tier].train_problem(first + j) for j, tier in enumerate(tiers)]
        start, end = shard_bounds(self.prompts_per_step, rank, world_size)
        return {"problems": problems[start:end], "index": k, "offset": start}

    def held_out(self) -> list[Problem]:
        """Every held-out problem, tier by tier in ``sources`` order."""
        return [problem for pool in self.pools.values() for problem in pool.held_out]

    def _rank_and_world(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is None:
            return 0, 1
        return trainer.global_rank, trainer.world_size

    # ------------------------------------------------------------------ loaders
    def train_dataloader(self) -> DataLoader:
        """Batches from the resume position (``consumed_batches``) to the end of each epoch."""
        rank, world_size = self._rank_and_world()
        self.rank_batch(0, rank, world_size)  # fail here, with the message, on a bad world size
        dataset = BatchDataset(lambda k: self.rank_batch(k, rank, world_size), self.steps_per_epoch)
        # The start is read each time an epoch's iteration begins, so one loader serves all epochs.
        return ResumableDataLoader(dataset, lambda: self.consumed_batches, self._set_consumed)

    def _set_consumed(self, consumed_batches: int) -> None:
        self.consumed_batches = consumed_batches

    def configure_validation(
        self, problem_sets: Sequence[tuple[str, list[Problem]]], batch_size: int, held_out: bool = True
    ) -> None:
        """Validate on named problem sets too: ``(name, problems)`` pairs, in global batches of
        ``batch_size`` problems sliced across ranks, after the held-out tiers (``held_out=False``:
        instead of them). Every later :meth:`val_dataloader` serves them.

        Example:
            >>> dm = MathDataModule(prompts_per_step=8, val_size=2)  # 3 tiers x 2 held out: one batch
            >>> dm.configure_validation([("mini", [Problem("m1", "1 + 1?", "2", "mini")])], batch_size=8)
            >>> [item.get("benchmark", "held-out") for item in dm.val_dataloader()]
            ['held-out', 'mini']
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._problem_sets = [(name, list(problems)) for name, problems in problem_sets]
        self._problem_set_batch_size = batch_size
        self._validate_held_out = held_out

    @property
    def validation_sets(self) -> list[str]:
        """The names of the problem sets given to :meth:`configure_validation` (none: [])."""
        return [name for name, _ in self._problem_sets or []]

    def val_dataloader(self) -> DataLoader | list:
        """The held-out problems in batches of ``val_batch_size``, each sliced across ranks, then
        the batches of the sets given to :meth:`configure_validation`.

        Returns an empty list (Lightning: no validation) when ``val_size == 0`` and no set was given.
        """
        rank, world_size = self._rank_and_world()
        items = self._held_out_batches(rank, world_size) if self._validate_held_out else []
        if self._problem_sets is None:
            return items_loader(items) if items else []
        return items_loader(
            items + problem_set_batches(self._problem_sets, self._problem_set_batch_size, rank, world_size)
        )

    def _held_out_batches(self, rank: int, world_size: int) -> list[dict[str, Any]]:
        problems, size = self.held_out(), self.val_batch_size
        batches = []
        for i in range(-(-len(problems) // size)):
            chunk = problems[i * size : (i + 1) * size]
            start, end = shard_bounds(len(chunk), rank, world_size)
            batches.append({"problems": chunk[start:end], "index": i, "offset": start})
        return batches

    # ------------------------------------------------------------------ resume
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Record a training batch as consumed (Lightning calls this right before the step)."""
        trainer = self.trainer
        # Validation and sanity-check batches pass through this hook too (other trainer stages);
        # only training batches advance the stream.
        is_training = trainer is None or trainer.training
        if is_training and isinstance(batch, dict) and "index" in batch:
            # Set, not increment: the count stays right even if a hook runs twice for one batch.
            self.consumed_batches = int(batch["index"]) + 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        """``{"consumed_batches", "seed", "prompts_per_step"}``; Lightning stores it in checkpoints."""
        return {"consumed_batches": self.consumed_batches, "seed": self.seed, "prompts_per_step": self.prompts_per_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue after the batches a checkpoint consumed (the next batch is ``consumed_batches``)."""
        for key in ("seed", "prompts_per_step"):
            if key in state_dict and state_dict[key] != getattr(self, key):
                warnings.warn(
                    f"resuming with {key}={getattr(self, key)} but the checkpoint used {state_dict[key]}: "
                    "the batches after the resume point differ from the original run's",
                    stacklevel=2,
                )
        self.consumed_batches = int(state_dict["consumed_batches"])
