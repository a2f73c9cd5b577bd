"""Scoring in worker processes: the per-batch budget on a pathological batch, hung and dead
workers, closing and restarting."""

from __future__ import annotations

import os
import signal
import time

import pytest

from lite_ppo.rewards import MathVerifyReward

# Each of these keeps sympy busy for more than 15 s on this machine (16 such responses once took
# 80.7 s at a 5 s limit); faster-failing ones (deep \frac/\sqrt nesting, long sums) are left
# out so that a faster machine cannot turn a time-out into "unparsed".
PATHOLOGICAL = [
    "\\boxed{9^{9^{9^{9^{9}}}}}",
    "\\boxed{(10^{100})!}",
    "\\boxed{7^{7^{7}}!}",
    "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}",
    "\\boxed{8^{8^{8^{8}}}}",
    "\\boxed{(10^{50})!}",
    "\\boxed{3^{3^{3^{3^{3}}}}}",
    "The answer is \\boxed{99^{99^{99}}}",
] * 2


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_pathological_batch_finishes_within_the_batch_budget():
    reward = MathVerifyReward(timeout_seconds=1, batch_timeout_seconds=3, workers=2)
    reward.start()
    good = ["so \\boxed{2}", "\\boxed{\\frac{4}{2}}", "The answer is \\boxed{2}.", "\\fbox{2}"]
    # Good responses early in the batch, between pathological ones.
    responses = [good[0], PATHOLOGICAL[0], good[1], PATHOLOGICAL[1], good[2], good[3], *PATHOLOGICAL[2:]]
    start = time.perf_counter()
    results = reward.score_batch(responses, ["2"] * len(responses))
    elapsed = time.perf_counter() - start
    bad = [r for resp, r in zip(responses, results) if resp not in good]
    assert [r.status for resp, r in zip(responses, results) if resp in good] == ["correct"] * 4
    assert all(r.score == 0.0 and r.status in ("timeout", "batch_timeout") for r in bad)
    assert sum(r.status == "batch_timeout" for r in bad) >= len(bad) // 2  # 16 x 1 s on 2 workers > 3 s
    assert elapsed < 15  # 3 s budget + at most 1 s to stop the workers; serial scoring takes 16 s or more
    # The pool serves the next batch at once and in full.
    assert [r.status for r in reward.score_batch(good, ["2"] * 4)] == ["correct"] * 4
    reward.close()


def test_a_hung_worker_is_killed_and_replaced():
    reward = MathVerifyReward(timeout_seconds=1, batch_timeout_seconds=60, workers=2)
    reward.start()
    frozen = reward._pool.worker_pids()[0]
    os.kill(frozen, signal.SIGSTOP)  # deaf to its own alarm, like a worker stuck in C code
    try:
        results = reward.score_batch([f"\\boxed{{{i}}}" for i in range(6)], [str(i) for i in range(6)])
    finally:
        if not _gone(frozen):
            os.kill(frozen, signal.SIGCONT)
    statuses = [r.status for r in results]
    assert statuses.count("timeout") == 1 and statuses.count("correct") == 5
    assert frozen not in reward._pool.worker_pids() and _gone(frozen)
    assert [r.status for r in reward.score_batch(["\\boxed{7}"] * 4, ["7"] * 4)] == ["correct"] * 4
    assert len(reward._pool.worker_pids()) == 2
    reward.close()


def test_a_dead_worker_costs_no_response():
    reward = MathVerifyReward(timeout_seconds=5, workers=2)
    reward.start()
    victim = reward._pool._workers.items[0]
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait(timeout=10)
    results = reward.score_batch(["\\boxed{3}"] * 5, ["3"] * 5)
    assert [r.status for r in results] == ["correct"] * 5
    assert victim.process.pid not in reward._pool.worker_pids()
    reward.close()


def test_close_stops_the_workers_and_the_next_batch_restarts_them():
    reward = MathVerifyReward(timeout_seconds=5, workers=2)
    assert reward.score("\\boxed{1}", "1").status == "correct"
    pids = reward._pool.worker_pids()
    assert len(pids) == 2
    reward.close()
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids)
    assert reward.score("\\boxed{1}", "1").status == "correct"
    assert not set(pids) & set(reward._pool.worker_pids())
    reward.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_results_keep_the_batch_order(workers):
    reward = MathVerifyReward(timeout_seconds=5, workers=workers)
    golds = [str(i) for i in range(40)]
    results = reward.score_batch([f"\\boxed{{{i % 7}}}" for i in range(40)], golds)
    assert [r.score for r in results] == [1.0 if i % 7 == i else 0.0 for i in range(40)]
    assert [r.extracted for r in results] == [str(i % 7) for i in range(40)]
    reward.close()
