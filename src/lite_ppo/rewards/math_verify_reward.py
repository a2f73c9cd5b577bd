"""Binary verifiable reward: math-verify checks a response's final answer against the gold answer."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

# Reward statuses, counted per batch so that parse failures and time-outs are visible, never fatal.
CORRECT, WRONG, UNPARSED, NO_BOX, TIMEOUT, ERROR = "correct", "wrong", "unparsed", "no_box", "timeout", "error"
STATUSES = (CORRECT, WRONG, UNPARSED, NO_BOX, TIMEOUT, ERROR)


@dataclass(frozen=True)
class RewardResult:
    """``score`` is 1.0 or 0.0; ``status`` one of STATUSES; ``extracted`` the parsed answer text."""

    score: float
    status: str
    extracted: str | None = None


class MathVerifyReward:
    """1.0 when the response's answer equals the gold answer under math-verify, else 0.0.

    The same object scores training rollouts and evaluation, so a score means the same in both.

    Args:
        timeout_seconds: limit for parsing and for verifying one response, each (math-verify's own
            signal-based alarm; whole seconds, >= 1). A time-out scores 0 and is counted.
        require_boxed: when True a response without ``\\boxed{}`` scores 0 (status ``no_box``)
            even if its last expression is right; when False math-verify's default extraction
            (boxed first, then the last LaTeX/plain expression) decides.

    Example::

        reward = MathVerifyReward(timeout_seconds=2)
        reward.score("... so the answer is \\\\boxed{42}.", "42")   # RewardResult(1.0, "correct", "42")
    """

    def __init__(self, timeout_seconds: int = 5, require_boxed: bool = False) -> None:
        if timeout_seconds < 1:
            raise ValueError(f"MathVerifyReward.timeout_seconds must be a whole number >= 1, got {timeout_seconds}")
        self.timeout_seconds = int(timeout_seconds)
        self.require_boxed = require_boxed
        self._target_config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]

    def score(self, response: str, gold: str) -> RewardResult:
        if self.require_boxed and "\\boxed" not in response and "\\fbox" not in response:
            return RewardResult(0.0, NO_BOX)
        # math-verify's alarm only works in the main thread; elsewhere run without a limit rather than crash.
        timeout = self.timeout_seconds if threading.current_thread() is threading.main_thread() else None
        try:
            gold_parsed = parse(f"${gold}$", parsing_timeout=timeout, raise_on_error=True)
            answer = parse(response, extraction_config=self._target_config, parsing_timeout=timeout, raise_on_error=True)
            if not answer:
                return RewardResult(0.0, UNPARSED)
            extracted = str(answer[-1])
            ok = verify(gold_parsed, answer, timeout_seconds=timeout, raise_on_error=True)
        except TimeoutException:
            return RewardResult(0.0, TIMEOUT)
        except Exception:  # a verifier bug must cost one sample its reward, never the training step
            return RewardResult(0.0, ERROR)
        return RewardResult(1.0 if ok else 0.0, CORRECT if ok else WRONG, extracted)

    def score_batch(self, responses: list[str], golds: list[str]) -> list[RewardResult]:
        return [self.score(r, g) for r, g in zip(responses, golds, strict=True)]


def status_counts(results: list[RewardResult]) -> dict[str, int]:
    """How many results have each status (every status present, zeros included)."""
    counts = Counter(r.status for r in results)
    return {s: counts.get(s, 0) for s in STATUSES}
