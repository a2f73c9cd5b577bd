"""Per-tier problem pools: a training stream addressed by prompt position, and a held-out split.

A pool is built from a source spec: ``"synthetic:<easy|medium|hard>"``, the testbed's
``"testbed:<easy|medium|hard>"`` (:mod:`lite_ppo.data.testbed`), a registered dataset name
(``"paper:easy"``, ``"paper:hard"``, ``"gsm8k"``...; :mod:`lite_ppo.data.registry`) or a data file
path. The held-out split is drawn once from its seed (``heldout_seed``, else the data seed), and
training never yields a held-out problem text.
"""

from __future__ import annotations

import dataclasses
import os
import random
from abc import ABC, abstractmethod
from pathlib import Path

from lite_ppo.data import registry
from lite_ppo.data.jsonl import DataFormatError, load_problems
from lite_ppo.data.problem import Problem
from lite_ppo.data.synthetic import FAMILIES, TIERS, SyntheticSource, family_capacity, family_stratum

SYNTHETIC_PREFIX = "synthetic:"
# ``<family>:<tier>`` for every generated task family: synthetic:easy, testbed:hard, ...
FAMILY_PREFIXES = {f"{family}:": family for family in FAMILIES}


class TierPool(ABC):
    """Problems of one tier: ``train_problem(position)`` for training, ``held_out`` for validation."""

    tier: str

    @abstractmethod
    def train_problem(self, position: int) -> Problem:
        """The training problem at a global prompt position (``k * prompts_per_step + j``)."""

    @property
    @abstractmethod
    def held_out(self) -> list[Problem]:
        """The held-out problems, fixed for the pool's seed."""


class FilePool(TierPool):
    """Rows of a data file; ``val_size`` random rows are held out (chosen by ``heldout_seed``, else ``seed``).

    Training visits rows in a seeded random order that is reshuffled every ``n`` positions
    (``n`` = number of training rows), so no row repeats within ``n`` consecutive prompt positions
    (a whole batch, when ``n >= prompts_per_step``) and the problem at a position needs no history.

    Example:
        >>> rows = [Problem(str(i), f"q{i}", "1", "easy") for i in range(10)]
        >>> pool = FilePool("easy", rows, seed=0, val_size=2)
        >>> len(pool.held_out), pool.train_problem(3) in rows
        (2, True)
    """

    def __init__(
        self,
        tier: str,
        problems: list[Problem],
        seed: int,
        val_size: int,
        name: str = "",
        heldout_seed: int | None = None,
    ) -> None:
        self.tier, self.seed = tier, seed
        order = list(range(len(problems)))
        random.Random(f"lite-ppo:heldout:{seed if heldout_seed is None else heldout_seed}:{tier}").shuffle(order)
        held_rows = sorted(order[:val_size])
        self._held = [problems[row] for row in held_rows]
        held_texts = {p.problem for p in self._held}
        # Rows whose text equals a held-out text (duplicates in a file) would leak; drop them too.
        self._train = [p for p in problems if p.problem not in held_texts]
        if not self._train:
            raise ValueError(
                f"sources[{tier!r}] {name}: val_size={val_size} leaves no training rows of {len(problems)}"
            )
        self._orders: dict[int, list[int]] = {}

    def _order(self, cycle: int) -> list[int]:
        if cycle not in self._orders:
            if len(self._orders) >= 4:  # only the cycles around the current batch are ever needed
                self._orders.pop(next(iter(self._orders)))
            order = list(range(len(self._train)))
            random.Random(f"lite-ppo:order:{self.seed}:{self.tier}:{cycle}").shuffle(order)
            self._orders[cycle] = order
        return self._orders[cycle]

    def train_problem(self, position: int) -> Problem:
        cycle, offset = divmod(position, len(self._train))
        return self._train[self._order(cycle)[offset]]

    @property
    def held_out(self) -> list[Problem]:
        return list(self._held)


class SyntheticPool(TierPool):
    """Generated problems: held out from the ``"heldout"`` stream, trained on the ``"train"`` stream.

    The held-out stream is seeded by ``heldout_seed`` (None: by ``seed``, the training seed), so a
    fixed ``heldout_seed`` gives every training seed the same held-out problems. The training stream
    (seeded by ``seed``) excludes every held-out text; this matters for ``easy``, which has only a
    few thousand distinct problems, so independent streams would overlap. No more than a quarter of
    a small stratum's distinct problems is held out (:func:`~lite_ppo.data.synthetic.family_stratum`:
    the testbed's 81 one-digit sums), so a large held-out split cannot take a whole kind of problem
    away from training. ``family`` is the task family (``"synthetic"`` or ``"testbed"``, see
    :class:`~lite_ppo.data.synthetic.SyntheticSource`).

    Example:
        >>> pool = SyntheticPool("easy", "easy", seed=42, val_size=3)
        >>> pool.train_problem(0).id, len(pool.held_out)
        ('synthetic-easy-0', 3)
    """

    def __init__(
        self,
        tier: str,
        difficulty: str,
        seed: int,
        val_size: int,
        family: str = "synthetic",
        heldout_seed: int | None = None,
    ) -> None:
        self.tier = tier
        capacity = family_capacity(family, difficulty)
        if capacity is not None and val_size > capacity // 4:
            limit = capacity // 4  # keep most of the few distinct easy problems for training
            raise ValueError(
                f"sources[{tier!r}]: val_size={val_size} is too large for {family} {difficulty} (at most {limit})"
            )
        heldout_source = SyntheticSource(
            difficulty, seed if heldout_seed is None else heldout_seed, stream="heldout", family=family
        )
        self._held: list[Problem] = []
        texts: set[str] = set()
        per_stratum: dict[object, int] = {}
        index = 0
        while len(self._held) < val_size:  # distinct texts, so validation counts each problem once
            problem = heldout_source.problem(index)
            index += 1
            if problem.problem in texts:
                continue
            stratum = family_stratum(family, difficulty, problem)
            if stratum is not None:
                key, size = stratum
                if per_stratum.get(key, 0) >= size // 4:  # keep most of a small stratum for training
                    continue
                per_stratum[key] = per_stratum.get(key, 0) + 1
            texts.add(problem.problem)
            self._held.append(self._retier(problem))
        self._train = SyntheticSource(difficulty, seed, stream="train", exclude=frozenset(texts), family=family)

    def _retier(self, problem: Problem) -> Problem:
        # The tier is the data module's name for the source ("warmup" may be synthetic:easy).
        return problem if problem.tier == self.tier else dataclasses.replace(problem, tier=self.tier)

    def train_problem(self, position: int) -> Problem:
        return self._retier(self._train.problem(position))

    @property
    def held_out(self) -> list[Problem]:
        return list(self._held)


def build_pool(
    tier: str,
    spec: str,
    seed: int,
    val_size: int,
    data_dir: str | os.PathLike[str] | None = None,
    heldout_seed: int | None = None,
) -> TierPool:
    """Make the pool for ``sources[tier] = spec``.

    Args:
        tier: the data module's name for the source.
        spec: ``"synthetic:<tier>"``, ``"testbed:<tier>"``, a registered dataset name (``"paper:hard"``)
            or a file path.
        seed, val_size, heldout_seed: see :class:`FilePool` and :class:`SyntheticPool` (``heldout_seed``
            None: the held-out split follows ``seed``).
        data_dir: a folder of files in the schema that wins over the shipped / cached copies of
            registered datasets (``easy.jsonl``, ``medium.jsonl``, ``hard.jsonl``, ...).

    Example:
        >>> build_pool("easy", "synthetic:easy", seed=1, val_size=0).train_problem(0).tier
        'easy'
        >>> len(build_pool("easy", "paper:easy", seed=1, val_size=0).held_out)
        0
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"sources[{tier!r}]: expected 'synthetic:<tier>', a dataset name or a file path, got {spec!r}")
    for prefix, family in FAMILY_PREFIXES.items():
        if spec.startswith(prefix):
            difficulty = spec[len(prefix) :]
            if difficulty not in TIERS:
                choices = ", ".join(prefix + t for t in TIERS)
                raise ValueError(f"sources[{tier!r}]: unknown {family} tier {difficulty!r}; use one of {choices}")
            return SyntheticPool(tier, difficulty, seed, val_size, family, heldout_seed)
    if registry.is_dataset_name(spec):
        problems = _load_dataset(tier, spec, data_dir)
        return FilePool(tier, problems, seed, val_size, name=spec, heldout_seed=heldout_seed)
    path = Path(os.path.expanduser(spec))
    if not path.is_file():
        raise registry.UserError(
            f"data.sources[{tier!r}]: no such file {spec!r} (and it is not 'synthetic:<tier>', 'testbed:<tier>' "
            f"or a dataset name: {', '.join(registry.DATASETS)})"
        )
    return FilePool(tier, load_problems(path, tier=tier), seed, val_size, name=str(path), heldout_seed=heldout_seed)


def _load_dataset(tier: str, name: str, data_dir: str | os.PathLike[str] | None) -> list[Problem]:
    """The rows of a registered dataset (all parts of a composite, in order), tier set to ``tier``."""
    try:
        paths = registry.locate(name, data_dir)
    except registry.UserError as error:
        raise registry.UserError(f"sources[{tier!r}]: {error}") from None
    problems: list[Problem] = []
    first_file: dict[str, Path] = {}
    for path in paths:
        for problem in load_problems(path, tier=tier):
            # The parts of a composite must not share ids (results and logs are keyed by id).
            if problem.id in first_file:
                raise DataFormatError(f"{path}: field 'id' repeats '{problem.id}' (also in {first_file[problem.id]})")
            first_file[problem.id] = path
            problems.append(problem)
    return problems
