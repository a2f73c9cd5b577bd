"""Majority vote (maj@k): is the most frequent answer among a problem's k samples the right one?

The field quotes maj@k beside mean@n and pass@k for AIME-style sets. Here, per problem, from its
first k samples (the samples are independent draws, so the first k are a draw of k):

- **votes**: every response math-verify judged (status ``correct`` or ``wrong``) votes for its
  answer; a response without a judged answer (no box, unparsed, hedged, a time-out) abstains;
- **classes**: the correct responses form one class (each is equivalent to the gold answer); the
  wrong answers are grouped by math-verify equivalence among themselves (``1/2`` and ``0.5`` are one
  answer), identical strings first;
- **tie rule**: when the correct class ties with ``t - 1`` other classes for the most votes, the
  problem counts ``1 / t`` (the expected score of a uniformly random tie-break); no votes count 0.

Example:
    >>> majority_score(["correct", "wrong", "wrong", "correct", "no_box"], ["7", "5", "5.0", "7", None], 5)
    0.5
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import lru_cache

__all__ = ["VOTING_STATUSES", "majority_score", "math_equivalent"]

VOTING_STATUSES = ("correct", "wrong")


def _seconds() -> int | None:
    """math-verify's own time limit works by a signal, in the main thread only; elsewhere none."""
    return 5 if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=4096)
def _parsed(text: str) -> tuple:
    from math_verify import parse

    try:
        return tuple(parse(f"${text}$", parsing_timeout=_seconds()))
    except Exception:  # noqa: BLE001 - an answer math-verify cannot read is compared as text
        return ()


def math_equivalent(a: str, b: str) -> bool:
    """Whether math-verify takes two extracted answers for the same value (text equality otherwise)."""
    if a == b:
        return True
    from math_verify import verify

    pa, pb = _parsed(a), _parsed(b)
    if not pa or not pb:
        return False
    try:
        return bool(verify(list(pa), list(pb), timeout_seconds=_seconds()))
    except Exception:  # noqa: BLE001 - a comparison that fails counts as different answers
        return False


def majority_score(
    statuses: Sequence[str],
    answers: Sequence[str | None],
    k: int,
    equivalent: Callable[[str, str], bool] = math_equivalent,
) -> float:
    """maj@k of one problem from its responses' ``statuses`` and extracted ``answers`` (see the module)."""
    if not 1 <= k <= len(statuses) or len(answers) != len(statuses):
        raise ValueError(f"majority_score needs 1 <= k <= {len(statuses)} and one answer per status, got k={k}")
    correct = 0
    wrong_classes: list[list[str]] = []  # representatives first
    for status, answer in zip(statuses[:k], answers[:k]):
        if status == "correct":
            correct += 1
        elif status == "wrong" and answer is not None:
            for members in wrong_classes:
                if equivalent(members[0], answer):
                    members.append(answer)
                    break
            else:
                wrong_classes.append([answer])
    top = max([correct, *(len(m) for m in wrong_classes)])
    if top == 0 or correct < top:
        return 0.0
    return 1.0 / (1 + sum(len(m) == top for m in wrong_classes))
