"""Scoring one response: the extraction rule, math-verify, a time limit and big integers.

Everything here runs in whichever process scores (a reward worker, or the caller for
``workers=0``); :mod:`lite_ppo.rewards.pool` runs it in worker processes.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import math_verify.grader
import math_verify.parser
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from lite_ppo.rewards.extraction import find_answer

# Reward statuses, counted per batch so that parse failures and time-outs are visible, never fatal.
CORRECT, WRONG, UNPARSED, NO_BOX, TIMEOUT, ERROR = "correct", "wrong", "unparsed", "no_box", "timeout", "error"
HEDGED, SPOOFED, BATCH_TIMEOUT = "hedged", "spoofed", "batch_timeout"
# New statuses go at the end: evaluation stores status indices into this tuple.
STATUSES = (CORRECT, WRONG, UNPARSED, NO_BOX, TIMEOUT, ERROR, HEDGED, SPOOFED, BATCH_TIMEOUT)

# An extracted answer that did not parse is kept for the logs, cut to this many characters.
_MAX_LOGGED_CHARS = 1000
# No box in the response: LaTeX and plain expressions, as math-verify does by default.
_TEXT_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
# The content of one box, wrapped back into ``\boxed{}``: only math-verify's box patterns apply.
_BOX_CONFIG = (LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False),)

# The time limit is ours (one for the whole call, see ``time_limit``); math-verify's own
# signal.alarm would cancel it, so its limits are off and its warning about that is silenced.
math_verify.parser.TIMEOUT_WARNING_SHOWN = True
math_verify.grader.TIMEOUT_WARNING_SHOWN = True


@dataclass(frozen=True)
class RewardResult:
    """``score`` is 1.0 or 0.0; ``status`` one of STATUSES; ``extracted`` the answer as judged."""

    score: float
    status: str
    extracted: str | None = None


class CallTimeout(BaseException):
    """Raised by ``time_limit``'s alarm. A BaseException, so that the ``except Exception`` blocks
    inside math-verify and sympy cannot swallow it and carry on."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[bool]:
    """Raise :class:`CallTimeout` in the body after ``seconds`` (a SIGALRM interval timer).

    Signals reach only the main thread: elsewhere (or with ``seconds=None``) the body runs without
    a limit and the context yields False. A time limit that must hold from any thread is the
    worker pool's (:mod:`lite_ppo.rewards.pool`), which kills a worker that overruns.
    """
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield False
        return

    def on_alarm(signum, frame):
        raise CallTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def unlimited_int_digits() -> Iterator[None]:
    """Lift Python's int <-> str digit limit (4300 digits) in the body: a correct 5,000-digit answer
    must score 1. The limit guards against slow conversions, which the time limit already bounds."""
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(previous)


def _parse(text: str, config: tuple) -> list:
    """math-verify's best-ranked candidate of ``text`` only (``first_match``): its sympy form when it
    parses, and its own string (compared as a string, as math-verify does) -- never another one."""
    return parse(
        text, extraction_config=config, extraction_mode="first_match", parsing_timeout=None, raise_on_error=True
    )


def _parse_box(content: str) -> list:
    return _parse("\\boxed{" + content + "}", _BOX_CONFIG)


def _verify(gold: list, answer: list) -> bool:
    return bool(verify(gold, answer, timeout_seconds=None, raise_on_error=True))


def _judge(gold: list, answer: list) -> RewardResult:
    """Correct, wrong, or unparsed when the answer is only a string that differs from the gold's."""
    extracted = _clip(str(answer[0]))
    if _verify(gold, answer):
        return RewardResult(1.0, CORRECT, extracted)
    parsed = any(not isinstance(a, str) for a in answer)
    return RewardResult(0.0, WRONG if parsed else UNPARSED, extracted)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_LOGGED_CHARS else text[:_MAX_LOGGED_CHARS] + "..."


def score_response(response: str, gold: str, require_boxed: bool) -> RewardResult:
    """Score one response without any time limit (see :mod:`lite_ppo.rewards.extraction` for
    which text is the answer). Raises whatever math-verify raises."""
    found = find_answer(response, require_boxed)
    if found.kind == "none":
        return RewardResult(0.0, found.status)
    gold_parsed = parse(f"${gold}$", parsing_timeout=None, raise_on_error=True)
    if found.kind == "text":
        answer = _parse(found.text, _TEXT_CONFIG)
        if not answer:
            return RewardResult(0.0, UNPARSED)
        return _judge(gold_parsed, answer)
    *others, last = found.boxes
    answer = _parse_box(last)
    if not answer:
        return RewardResult(0.0, UNPARSED, _clip(last))
    result = _judge(gold_parsed, answer)
    if result.status != CORRECT:
        return result
    extracted = result.extracted
    for other in others:  # the last box is right: every other box must be right too
        other_answer = _parse_box(other)
        if not other_answer or not _verify(gold_parsed, other_answer):
            return RewardResult(0.0, HEDGED, extracted)
    return RewardResult(1.0, CORRECT, extracted)


def score_within(response: str, gold: str, require_boxed: bool, seconds: float | None) -> RewardResult:
    """``score_response`` within ``seconds`` (main thread only, see ``time_limit``); a time-out
    scores 0 with status ``timeout`` and any other failure 0 with status ``error``."""
    try:
        with unlimited_int_digits(), time_limit(seconds):
            return score_response(response, gold, require_boxed)
    except CallTimeout:
        return RewardResult(0.0, TIMEOUT)
    except Exception:  # a verifier bug must cost one sample its reward, never the training step
        logging.getLogger(__name__).debug("reward scoring failed", exc_info=True)
        return RewardResult(0.0, ERROR)
