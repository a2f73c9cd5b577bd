"""The testbed's task family: column additions whose working grows with the problem.

A problem adds two numbers of ``d`` digits each (``What is 4821 + 3075?``). Worked column by
column, it takes ``d`` columns of two digits plus a carry, so the length of a worked answer grows
with the digits, and the chance of a slip grows with it: the three tiers differ in size
(``data.sources: {easy: testbed:easy}``; docs/testbed.md says what the testbed is for):

========  ==========  ======  ==================================
tier      operands    digits  example
========  ==========  ======  ==================================
easy      2           1-2     ``What is 47 + 85?``
medium    2           3       ``What is 305 + 718?``
hard      2           4       ``What is 4821 + 3075?``
========  ==========  ======  ==================================

Every operand has exactly ``d`` digits (no leading zero), so a problem's columns line up. Problem
``i`` of a tier is a pure function of ``(tier, seed, stream, i)``, as for the synthetic tiers
(:class:`~lite_ppo.data.synthetic.SyntheticSource` with ``family="testbed"``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from lite_ppo.data.generated_item import GeneratedItem
from lite_ppo.data.problem import Problem

__all__ = ["EASY_CAPACITY", "GENERATORS", "SIZES", "TIERS", "column_sum", "stratum"]

TIERS = ("easy", "medium", "hard")

# tier -> (operand counts, digit counts), each drawn uniformly per problem.
SIZES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "easy": ((2,), (1, 2)),
    "medium": ((2,), (3,)),
    "hard": ((2,), (4,)),
}
# Distinct easy problems (ordered operands): few enough that a held-out split must stay small.
EASY_CAPACITY = sum((9 * 10 ** (d - 1)) ** k for k in SIZES["easy"][0] for d in SIZES["easy"][1])


def stratum(problem: Problem) -> tuple[tuple[int, int], int]:
    """``((operands, digits), distinct problems of that shape)`` of a testbed problem.

    Example:
        >>> from lite_ppo.data.synthetic import SyntheticSource
        >>> [stratum(SyntheticSource("easy", family="testbed").problem(i)) for i in (1, 2)]
        [((2, 1), 81), ((2, 2), 8100)]
    """
    operands = int(problem.metadata["num_operations"]) + 1
    digits = len(str(problem.metadata["max_operand"]))  # every operand has exactly ``digits`` digits
    return (operands, digits), (9 * 10 ** (digits - 1)) ** operands


def column_sum(rng: random.Random, operands: int, digits: int) -> GeneratedItem:
    """``operands`` numbers of exactly ``digits`` digits, added.

    Example:
        >>> column_sum(random.Random(0), 3, 2).text
        'What is 59 + 63 + 15?'
    """
    low, high = 10 ** (digits - 1), 10**digits - 1
    numbers = [rng.randint(low, high) for _ in range(operands)]
    expression = " + ".join(str(n) for n in numbers)
    return GeneratedItem(f"What is {expression}?", sum(numbers), expression, "arithmetic")


def _tier(name: str) -> Callable[[random.Random], GeneratedItem]:
    counts, digits = SIZES[name]

    def generate(rng: random.Random) -> GeneratedItem:
        return column_sum(rng, rng.choice(counts), rng.choice(digits))

    generate.__name__ = f"testbed_{name}"
    return generate


GENERATORS: dict[str, Callable[[random.Random], GeneratedItem]] = {tier: _tier(tier) for tier in TIERS}
