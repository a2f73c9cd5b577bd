"""Built-in arithmetic and short word problems in three difficulty tiers, generated deterministically.

Tiers differ in operand size and in the number of operations, which tests can count from the
text itself (every number in a statement is an operand, so ``operations = numbers - 1``):

========  ===========  ==============================================  ==========================
tier      operations   operands                                        forms
========  ===========  ==============================================  ==========================
easy      1 (+, -)     1-2 digits (1..99)                              ``What is 23 + 48?``
medium    2 (one ×)    2-3 digits (10..999)                            ``What is 37 × 52 - 418?``,
                                                                       two-step word problems
hard      3            3-4 digits (100..9999), small multipliers,       ``What is (1234 + 567) × 8
                       parentheses                                     - 2345?``, three-step word
                                                                       problems
========  ===========  ==============================================  ==========================

Answers are exact non-negative integers written as strings. Problem ``i`` of a tier is a pure
function of ``(tier, seed, stream, i)``: ``random.Random`` is seeded with a string, which Python
hashes with SHA-512, so the result does not depend on ``PYTHONHASHSEED`` or on the process.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from lite_ppo.data import testbed
from lite_ppo.data.generated_item import GeneratedItem
from lite_ppo.data.problem import Problem

TIERS = ("easy", "medium", "hard")

# easy: a + b with a, b in 1..99 (99 * 99) plus a - b with a >= b (99 * 100 / 2)
EASY_CAPACITY = 99 * 99 + 99 * 100 // 2


def _arith(expression: str) -> GeneratedItem:
    # The text shows × for multiplication (what math text and chat models use); Python needs *.
    python = expression.replace("×", "*")
    return GeneratedItem(f"What is {expression}?", eval(python), python, "arithmetic")  # noqa: S307 (own digits only)


def _easy(rng: random.Random) -> GeneratedItem:
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    if rng.random() < 0.5:
        return _arith(f"{a} + {b}")
    a, b = max(a, b), min(a, b)  # keep answers non-negative for small models
    return _arith(f"{a} - {b}")


def _medium(rng: random.Random) -> GeneratedItem:
    a, b = rng.randint(10, 99), rng.randint(10, 99)  # a * b >= 100
    c = rng.randint(100, 999)
    form = rng.randrange(5)
    if form == 0:
        return _arith(f"{a} × {b} + {c}")
    if form == 1:
        c = rng.randint(100, min(999, a * b))
        return _arith(f"{a} × {b} - {c}")
    if form == 2:
        return _arith(f"{c} + {a} × {b}")
    if form == 3:
        c = rng.randint(100, min(999, a * b))
        text = f"A shop has {a} boxes with {b} pencils in each box. It sells {c} pencils. How many pencils are left?"
        return GeneratedItem(text, a * b - c, f"{a} * {b} - {c}", "word")
    text = f"Tom has {c} marbles. He buys {a} bags with {b} marbles in each bag. How many marbles does Tom have now?"
    return GeneratedItem(text, c + a * b, f"{c} + {a} * {b}", "word")


def _hard(rng: random.Random) -> GeneratedItem:
    form = rng.randrange(6)
    if form == 0:
        a, b, c = rng.randint(100, 9999), rng.randint(100, 9999), rng.randint(2, 99)
        d = rng.randint(100, min(9999, (a + b) * c))
        return _arith(f"({a} + {b}) × {c} - {d}")
    if form == 1:
        a, b = rng.randint(2, 99), rng.randint(1000, 9999)
        c, d = rng.randint(100, b - 1), rng.randint(100, 9999)
        return _arith(f"{a} × ({b} - {c}) + {d}")
    if form == 2:
        a = rng.randint(1000, 9999)
        b, c = rng.randint(100, a - 1), rng.randint(2, 99)
        d = rng.randint(100, 9999)
        return _arith(f"({a} - {b}) × {c} + {d}")
    if form == 3:
        a, b = rng.randint(1000, 9999), rng.randint(2, 9)
        c, d = rng.randint(10, min(999, a // b)), rng.randint(100, 9999)
        text = (
            f"A warehouse holds {a} crates. Each day for {b} days, {c} crates are shipped out. "
            f"Then a delivery brings {d} new crates. How many crates are in the warehouse now?"
        )
        return GeneratedItem(text, a - b * c + d, f"{a} - {b} * {c} + {d}", "word")
    if form == 4:
        a, b, c = rng.randint(1000, 9999), rng.randint(2, 99), rng.randint(10, 999)
        d = rng.randint(100, min(9999, a + b * c))
        text = (
            f"A library had {a} books. It bought {b} boxes of {c} books each, then gave {d} books "
            "to a school. How many books does the library have now?"
        )
        return GeneratedItem(text, a + b * c - d, f"{a} + {b} * {c} - {d}", "word")
    a, b = rng.randint(100, 9999), rng.randint(2, 99)
    c = rng.randint(100, min(9999, a * b // 2))  # a * b >= 200, so both ranges are non-empty
    d = rng.randint(100, min(9999, a * b - c))
    text = (
        f"A factory makes {a} toys per day and works for {b} days. Then {c} toys are found broken "
        f"and thrown away, and {d} toys are sold. How many toys are left?"
    )
    return GeneratedItem(text, a * b - c - d, f"{a} * {b} - {c} - {d}", "word")


GENERATORS: dict[str, Callable[[random.Random], GeneratedItem]] = {"easy": _easy, "medium": _medium, "hard": _hard}


# The task families a SyntheticSource draws from: these mixed arithmetic and word problems, and the
# testbed's column additions (lite_ppo.data.testbed), named ``synthetic:<tier>`` / ``testbed:<tier>``.
FAMILIES = ("synthetic", "testbed")


def family_generators(family: str) -> dict[str, Callable[[random.Random], GeneratedItem]]:
    """The tier -> generator table of a task family.

    Example:
        >>> sorted(family_generators("testbed"))
        ['easy', 'hard', 'medium']
    """
    if family == "synthetic":
        return GENERATORS
    if family == "testbed":
        return testbed.GENERATORS
    raise ValueError(f"unknown task family {family!r}; choose one of {', '.join(FAMILIES)}")


def family_capacity(family: str, tier: str) -> int | None:
    """How many distinct problems a tier has when that is small enough to matter (else None)."""
    if tier != "easy":
        return None
    if family == "synthetic":
        return EASY_CAPACITY
    return testbed.EASY_CAPACITY


def family_stratum(family: str, tier: str, problem: Problem) -> tuple[object, int] | None:
    """``(key, distinct problems)`` of the kind of problem ``problem`` is, when a family's tier has
    kinds of very different sizes (the testbed's easy tier: 81 one-digit sums, 8,100 two-digit ones,
    drawn half and half); None otherwise. A held-out split takes at most a quarter of a stratum.

    Example:
        >>> family_stratum("testbed", "easy", SyntheticSource("easy", family="testbed").problem(0))[1] in (81, 8100)
        True
    """
    if family != "testbed":
        return None
    return testbed.stratum(problem)


def generate(tier: str, rng: random.Random, family: str = "synthetic") -> GeneratedItem:
    """Draw one item of ``tier`` of a task family from ``rng``.

    Example:
        >>> generate("easy", random.Random(0)).text
        'What is 98 - 50?'
    """
    generators = family_generators(family)
    if tier not in generators:
        raise ValueError(f"unknown {family} tier {tier!r}; choose one of {', '.join(TIERS)}")
    return generators[tier](rng)


class SyntheticSource:
    """An endless, indexable source of synthetic problems of one tier.

    Args:
        tier: ``"easy"``, ``"medium"`` or ``"hard"``.
        seed: selects the sequence; the same ``(family, tier, seed, stream)`` always gives the same problems.
        stream: a name for an independent sequence under the same seed (the data module draws its
            held-out problems from ``stream="heldout"``); ids outside ``"train"`` carry the name.
        exclude: problem texts never to produce (held-out problems); an excluded draw is redrawn
            from a sub-seed, so the problem at an index stays deterministic.
        family: ``"synthetic"`` (the tiers above; ids ``synthetic-<tier>-<i>``) or ``"testbed"``
            (the testbed's column additions, :mod:`lite_ppo.data.testbed`; ids ``testbed-<tier>-<i>``).

    Example:
        >>> source = SyntheticSource("easy", seed=42)
        >>> p = source.problem(7)
        >>> p.id, p.tier, p.answer == str(eval(p.metadata["expression"]))
        ('synthetic-easy-7', 'easy', True)
    """

    def __init__(
        self,
        tier: str,
        seed: int = 0,
        stream: str = "train",
        exclude: frozenset[str] = frozenset(),
        family: str = "synthetic",
    ) -> None:
        if tier not in family_generators(family):
            raise ValueError(f"unknown {family} tier {tier!r}; choose one of {', '.join(TIERS)}")
        self.tier, self.seed, self.stream, self.exclude = tier, seed, stream, frozenset(exclude)
        self.family = family
        capacity = family_capacity(family, tier)
        if capacity is not None and len(self.exclude) > capacity // 2:
            raise ValueError(f"excluding {len(self.exclude)} texts leaves too few of the {capacity} {tier} problems")

    def _item(self, index: int) -> GeneratedItem:
        for attempt in range(10_000):
            rng = random.Random(f"lite-ppo:{self.family}:{self.tier}:{self.seed}:{self.stream}:{index}:{attempt}")
            item = generate(self.tier, rng, self.family)
            if item.text not in self.exclude:
                return item
        raise RuntimeError(f"{self.family} {self.tier}: every redraw of index {index} is excluded")

    def problem(self, index: int) -> Problem:
        """The problem at ``index`` (any non-negative int), id ``<family>-<tier>-<index>``."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        item = self._item(index)
        name = f"{self.family}-{self.tier}"
        prefix = name if self.stream == "train" else f"{name}-{self.stream}"
        return Problem(
            id=f"{prefix}-{index}",
            problem=item.text,
            answer=str(item.answer),
            tier=self.tier,
            source=self.family,
            metadata={
                "num_operations": len(item.operands) - 1,
                "max_operand": max(item.operands),
                "kind": item.kind,
                "expression": item.expression,
            },
        )

    def sample(self, rng: random.Random) -> Problem:
        """A problem at an index drawn from ``rng`` (for callers that hold their own generator)."""
        return self.problem(rng.randrange(2**31))
