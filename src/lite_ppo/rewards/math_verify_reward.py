"""Binary verifiable reward: math-verify checks a response's final answer against the gold answer."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import Counter

from lite_ppo.errors import UserError
from lite_ppo.rewards.pool import ScoringPool
from lite_ppo.rewards.scoring import BATCH_TIMEOUT, STATUSES, RewardResult, score_within

__all__ = ["STATUSES", "MathVerifyReward", "RewardResult", "status_counts"]


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which SLURM and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class MathVerifyReward:
    """1.0 when the response's answer equals the gold answer under math-verify, else 0.0.

    The same object scores training rollouts and evaluation, so a score means the same in both.
    Which text is the answer follows a strict rule (:mod:`lite_ppo.rewards.extraction`): when the
    response has a ``\\boxed{}``/``\\fbox{}``, the last box alone is the answer, every other box must
    agree with it, and a box that does not parse scores 0 without looking anywhere else.

    Scoring runs in a pool of worker processes (fresh interpreters, started on first use, reused,
    stopped at exit or by :meth:`close`), in parallel, and never stalls the caller beyond the
    budgets, from any thread: a response that overruns ``timeout_seconds`` scores 0 (status
    ``timeout``; a worker that does not stop is killed and replaced), and when a batch overruns
    ``batch_timeout_seconds`` the responses not scored by then score 0 (status ``batch_timeout``).

    Args:
        timeout_seconds: time budget for scoring one response (extraction, parsing, verifying).
        require_boxed: when True a response without ``\\boxed{}`` scores 0 (status ``no_box``)
            even if its last expression is right; when False the best-ranked expression of
            math-verify's extraction (an "answer" anchor, else the rightmost) is the answer.
        batch_timeout_seconds: time budget for one ``score_batch`` call once the workers are
            ready; ``None``: no batch budget.
        workers: scoring processes; ``None``: one per available core (``os.sched_getaffinity``);
            ``0``: score in the calling process, serially (for debugging; the time budgets then
            hold only in the main thread, where a SIGALRM timer can interrupt).

    Example::

        reward = MathVerifyReward(timeout_seconds=2, batch_timeout_seconds=30)
        reward.score("... so the answer is \\\\boxed{42}.", "42")   # RewardResult(1.0, "correct", "42")

    In YAML: ``rollout.reward: {timeout_seconds: 2, batch_timeout_seconds: 30, workers: 4}``.
    """

    def __init__(
        self,
        timeout_seconds: float = 5.0,
        require_boxed: bool = False,
        batch_timeout_seconds: float | None = 60.0,
        workers: int | None = None,
    ) -> None:
        if (
            isinstance(timeout_seconds, bool)
            or not isinstance(timeout_seconds, (int, float))
            or not timeout_seconds > 0
        ):
            raise UserError(
                f"MathVerifyReward.timeout_seconds must be a number of seconds > 0, got {timeout_seconds!r}"
            )
        if batch_timeout_seconds is not None and (
            isinstance(batch_timeout_seconds, bool)
            or not isinstance(batch_timeout_seconds, (int, float))
            or not batch_timeout_seconds > 0
        ):
            raise UserError(
                "MathVerifyReward.batch_timeout_seconds must be a number of seconds > 0 or null, got "
                f"{batch_timeout_seconds!r}"
            )
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
            raise UserError(
                "MathVerifyReward.workers must be a whole number >= 0 (0: score in-process) or null (one per core), "
                f"got {workers!r}"
            )
        self.timeout_seconds = float(timeout_seconds)
        self.require_boxed = bool(require_boxed)
        self.batch_timeout_seconds = None if batch_timeout_seconds is None else float(batch_timeout_seconds)
        self.workers = workers
        self._pool: ScoringPool | None = None
        self._lock = threading.Lock()

    # -- pickling / deep copies carry the settings, never the processes ----------------------------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_pool"], state["_lock"] = None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- scoring -----------------------------------------------------------------------------------
    def score(self, response: str, gold: str) -> RewardResult:
        """Score one response (within ``timeout_seconds``)."""
        return self._score_many([response], [gold])[0]

    def score_batch(self, responses: list[str], golds: list[str]) -> list[RewardResult]:
        """Score responses against their gold answers, in order, within the budgets."""
        responses, golds = list(responses), list(golds)
        if len(responses) != len(golds):
            raise ValueError(f"score_batch got {len(responses)} responses but {len(golds)} gold answers")
        if type(self).score is not MathVerifyReward.score:
            # A subclass scores its own way; its code may not be importable by a worker process.
            return [self.score(r, g) for r, g in zip(responses, golds)]
        return self._score_many(responses, golds)

    def _score_many(self, responses: list[str], golds: list[str]) -> list[RewardResult]:
        with self._lock:
            if self.workers == 0:
                return self._score_in_process(responses, golds)
            return self._get_pool().score(responses, golds, self.batch_timeout_seconds)

    def start(self) -> float:
        """Start the worker processes now rather than on the first batch; returns the seconds it took."""
        if self.workers == 0:
            return 0.0
        with self._lock:
            return self._get_pool().start()

    def close(self) -> None:
        """Stop the worker processes (the next batch starts new ones)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def _get_pool(self) -> ScoringPool:
        if self._pool is None:
            size = available_cores() if self.workers is None else self.workers
            self._pool = ScoringPool(size, self.timeout_seconds, self.require_boxed)
        return self._pool

    def _score_in_process(self, responses: list[str], golds: list[str]) -> list[RewardResult]:
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(
                "MathVerifyReward(workers=0) scores off the main thread: no time budget applies (use workers >= 1)",
                RuntimeWarning,
                stacklevel=3,
            )
        deadline = (
            time.monotonic() + self.batch_timeout_seconds if self.batch_timeout_seconds is not None else float("inf")
        )
        results = []
        for response, gold in zip(responses, golds):
            left = deadline - time.monotonic()
            if left <= 0:
                results.append(RewardResult(0.0, BATCH_TIMEOUT))
                continue
            result = score_within(response, gold, self.require_boxed, min(self.timeout_seconds, left))
            if result.status == "timeout" and left < self.timeout_seconds:
                result = RewardResult(0.0, BATCH_TIMEOUT)  # it was the batch budget that ran out
            results.append(result)
        return results


def status_counts(results: list[RewardResult]) -> dict[str, int]:
    """How many results have each status (every status present, zeros included)."""
    counts = Counter(r.status for r in results)
    return {s: counts.get(s, 0) for s in STATUSES}
