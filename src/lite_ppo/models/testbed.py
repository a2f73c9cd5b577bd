r"""The testbed's two tiny models: a base-like and an aligned-like init that add columns of numbers.

The testbed (docs/testbed.md) is where the paper's techniques have something to act on at laptop
scale: its problems (:mod:`lite_ppo.data.testbed`, ``testbed:easy|medium|hard``) add two numbers
of 1 to 5 digits, and the answer is worked column by column, so the response grows with the problem.
Both inits are the tiny Llama of ``builtin:tiny-arith`` (same tokenizer and shape), taught with plain
next-token loss (:func:`~lite_ppo.models.pretraining.supervised_pretrain`) on worked answers under the
training prompt format, and mirror the paper's base vs aligned split:

- ``builtin:testbed-base`` (**base-like**) starts from the shipped ``builtin:tiny-arith`` weights and
  learns a terse, unformatted working, units column first, each ``digits + carry = two digits``, then
  the boxed result; in part of its examples it then checks the working again, and again, so it
  sometimes keeps going until the token limit ("correct answer, then repeat until truncation")::

      prompt:  What is 4821 + 3075?  (chat format, as in training)
      answer:  1+5+0=06 2+7+0=09 8+0+0=08 4+3+0=07 \boxed{07896} check 1+5+0=06 2+7+0=09 ...

- ``builtin:testbed-aligned`` (**aligned-like**) is the base-like model trained further on a longer,
  formatted working, one line per column and a closing sentence, without the repeated checks; it
  samples with lower entropy and is more accurate on the easy and medium tiers (not on hard, where its
  running result slips)::

      answer:  1+5+0 = 06, result 6
               2+7+0 = 09, result 96
               8+0+0 = 08, result 896
               4+3+0 = 07, result 7896
               The answer is \boxed{7896}.

The trained weights ship with the package (``shipped/testbed-base/``, ``shipped/testbed-aligned/``,
each with its checksum in ``lite_ppo_shipped.json``) and are installed with a checksum check, as for
``builtin:tiny-arith``; the builds stay for provenance (``lite-ppo prepare-model builtin:testbed-base
--rebuild``): deterministic on one machine, other weights on a CPU with other vector units.

Example:
    >>> print(formatted_working("47 + 85"))
    7+5+0 = 12, result 2
    4+8+1 = 13, result 132
    The answer is \boxed{132}.
    >>> terse_working("47 + 85", checks=1)
    '7+5+0=12 4+8+1=13 \\boxed{132} check 7+5+0=12 4+8+1=13'
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from lite_ppo.models import pretraining
from lite_ppo.models.pretraining import deterministic_cpu, install_shipped, supervised_pretrain, weights_digest

__all__ = [
    "DEFAULT_PRETRAIN",
    "INITS",
    "SHIPPED_DIRS",
    "Column",
    "TestbedPretrain",
    "build_testbed_model",
    "column_table",
    "formatted_working",
    "install_testbed_model",
    "shipped_digest",
    "terse_working",
    "testbed_examples",
    "write_shipped_manifest",
]

INITS = ("base", "aligned")
SHIPPED_DIRS = {init: Path(__file__).resolve().parent / "shipped" / f"testbed-{init}" for init in INITS}
# The pre-training problems come from their own stream of the testbed tiers, so they are neither the
# training batches nor the held-out problems of any data seed (the easy tier is small: they overlap
# by chance, as a base model's pre-training overlaps any benchmark of easy sums).
PRETRAIN_STREAM = "testbed-pretrain"


@dataclass(frozen=True)
class TestbedPretrain:
    """The supervised pre-training of one testbed init (changing a value changes the model: bump the
    builtin's version in the registry and re-measure docs/benchmarks.md's Testbed section).

    Args:
        formatted_share: the share of examples worked in the formatted style (:func:`formatted_working`);
            the others are terse (:func:`terse_working`).
        start: the builtin whose shipped weights training starts from (``"tiny-arith"`` or
            ``"testbed-base"``).
        steps: optimizer steps (few on purpose: the model stays imperfect).
        batch_size: examples per step; every example is a new problem.
        lr: peak AdamW learning rate (linear warm-up over ``warmup_steps``, then constant, or with
            ``decay`` falling linearly to 0 at the last step, so the weights settle).
        warmup_steps: warm-up length.
        tier_weights: shares of easy, medium and hard problems among the examples.
        recheck: probability that a terse working is followed by one more check pass (repeated:
            the number of checks is geometric, at most ``max_checks``).
        max_checks: the most check passes in one example.
        seed: example order and the draws of tiers and checks.
        decay: whether the learning rate falls to 0 after the warm-up.
    """

    formatted_share: float
    start: str
    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    tier_weights: tuple[float, float, float]
    recheck: float = 0.0
    max_checks: int = 0
    seed: int = 0
    decay: bool = True


DEFAULT_PRETRAIN: dict[str, TestbedPretrain] = {
    "base": TestbedPretrain(
        formatted_share=0.25,
        start="tiny-arith",
        steps=1200,
        batch_size=32,
        lr=3e-3,
        warmup_steps=20,
        tier_weights=(1.0, 1.5, 1.5),
        recheck=0.3,
        max_checks=6,
    ),
    "aligned": TestbedPretrain(
        formatted_share=1.0,
        start="testbed-base",
        steps=800,
        batch_size=32,
        lr=3e-3,
        warmup_steps=20,
        tier_weights=(1.0, 1.5, 1.5),
    ),
}


class Column(NamedTuple):
    """One column of a column addition: the operands' digits, the carry in and the column's sum."""

    digits: tuple[int, ...]
    carry: int
    total: int


def column_table(expression: str) -> list[Column]:
    """The columns of ``"a + b + ..."``, units first (the last column's sum holds the leading digits).

    Example:
        >>> column_table("47 + 85")
        [Column(digits=(7, 5), carry=0, total=12), Column(digits=(4, 8), carry=1, total=13)]
    """
    numbers = [int(term) for term in expression.split(" + ")]
    width = max(len(str(n)) for n in numbers)
    columns, carry = [], 0
    for place in range(width):
        digits = tuple((n // 10**place) % 10 for n in numbers)
        total = sum(digits) + carry
        columns.append(Column(digits, carry, total))
        carry = total // 10
    return columns


def _result(columns: list[Column]) -> str:
    """The sum as the working reads it off: the last column's two digits, then each lower column's
    written digit (a leading zero stays; math-verify reads ``0132`` as 132)."""
    return f"{columns[-1].total:02d}" + "".join(str(c.total % 10) for c in reversed(columns[:-1]))


def terse_working(expression: str, checks: int = 0) -> str:
    """The base-like working of ``expression``: each column ``digits + carry = two digits``, the boxed
    result, then ``checks`` more passes over the columns, each after the word ``check`` (without a
    box: the answer is given once, so a check cut off by the token limit leaves it standing).

    Example:
        >>> terse_working("5 + 8")
        '5+8+0=13 \\\\boxed{13}'
    """
    columns = column_table(expression)
    steps = " ".join("+".join(map(str, (*c.digits, c.carry))) + f"={c.total:02d}" for c in columns)
    return f"{steps} \\boxed{{{_result(columns)}}}" + f" check {steps}" * checks


def formatted_working(expression: str) -> str:
    """The aligned-like working of ``expression``: one line per column, its sum and the result so far
    (the column's digit in front of the previous result; the last column puts its whole sum there),
    then a sentence with the boxed result.

    Example:
        >>> print(formatted_working("305 + 718 + 264"))
        5+8+4+0 = 17, result 7
        0+1+6+1 = 08, result 87
        3+7+2+0 = 12, result 1287
        The answer is \\boxed{1287}.
    """
    columns = column_table(expression)
    lines, result = [], ""
    for place, c in enumerate(columns):
        result = (str(c.total) if place == len(columns) - 1 else str(c.total % 10)) + result
        lines.append("+".join(map(str, (*c.digits, c.carry))) + f" = {c.total:02d}, result {result}")
    return "\n".join([*lines, f"The answer is \\boxed{{{result}}}."])


def testbed_examples(config: TestbedPretrain) -> list[tuple[str, str]]:
    """The (problem statement, worked answer) pairs of a pre-training, one per example of every step."""
    from lite_ppo.data.synthetic import SyntheticSource  # lazy: keeps `import lite_ppo.models` light
    from lite_ppo.data.testbed import TIERS

    rng = random.Random(f"lite-ppo:testbed-pretrain:{config.start}:{config.seed}")
    sources = {t: SyntheticSource(t, config.seed, stream=PRETRAIN_STREAM, family="testbed") for t in TIERS}
    drawn = dict.fromkeys(TIERS, 0)
    examples = []
    for _ in range(config.steps * config.batch_size):
        tier = rng.choices(TIERS, config.tier_weights)[0]
        problem = sources[tier].problem(drawn[tier])
        drawn[tier] += 1
        expression = problem.metadata["expression"]
        if rng.random() < config.formatted_share:
            examples.append((problem.problem, formatted_working(expression)))
        else:
            checks = 0
            while checks < config.max_checks and rng.random() < config.recheck:
                checks += 1
            examples.append((problem.problem, terse_working(expression, checks)))
    return examples


def _start_folder(start: str) -> Path:
    from lite_ppo.models import tiny_arith

    folders = {"tiny-arith": tiny_arith.SHIPPED_DIR, "testbed-base": SHIPPED_DIRS["base"]}
    if start not in folders:
        raise ValueError(f"unknown testbed start {start!r}; choose one of {', '.join(folders)}")
    return folders[start]


def build_testbed_model(path: str | os.PathLike[str], init: str, config: TestbedPretrain | None = None) -> str:
    """Pre-train one testbed init from its start's shipped weights and save it with its tokenizer.

    Args:
        path: folder to write (created if missing; existing files are overwritten).
        init: ``"base"`` or ``"aligned"``.
        config: the pre-training; default :data:`DEFAULT_PRETRAIN` ``[init]``.

    Returns:
        ``path`` as a string.

    Raises:
        UserError: the start's shipped weights do not match their checksum.

    Example:
        >>> build_testbed_model("/tmp/testbed-base", "base")   # doctest: +SKIP
        '/tmp/testbed-base'
    """
    import tempfile

    from transformers import AutoModelForCausalLM

    from lite_ppo.models.tiny import build_tiny_tokenizer

    config = config or DEFAULT_PRETRAIN[init]
    path = os.fspath(path)
    tokenizer = build_tiny_tokenizer()
    with tempfile.TemporaryDirectory() as start:
        install_shipped(_start_folder(config.start), start, f"builtin:{config.start}")  # checks the checksum
        with deterministic_cpu():
            model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
            supervised_pretrain(
                model,
                tokenizer,
                testbed_examples(config),
                steps=config.steps,
                batch_size=config.batch_size,
                lr=config.lr,
                warmup_steps=config.warmup_steps,
                seed=config.seed,
                decay=config.decay,
            )
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def shipped_digest(init: str) -> str:
    """The checksum recorded for an init's shipped weights."""
    return pretraining.shipped_digest(SHIPPED_DIRS[init])


def write_shipped_manifest(folder: str | os.PathLike[str], init: str) -> None:
    """Record a built folder's checksum and provenance (the pre-training and the start's checksum)
    as an init's shipped manifest (maintainers: after copying a new build into :data:`SHIPPED_DIRS`)."""
    config = DEFAULT_PRETRAIN[init]
    start = _start_folder(config.start)
    recipe = {**asdict(config), "start_weights_sha256": weights_digest(start)}
    pretraining.write_shipped_manifest(folder, recipe)


def install_testbed_model(init: str, path: str | os.PathLike[str]) -> str:
    """Copy an init's shipped folder to ``path`` and check its weights' checksum.

    Raises:
        UserError: the shipped files are missing or damaged (reinstall the package).
    """
    return install_shipped(SHIPPED_DIRS[init], path, f"builtin:testbed-{init}")
