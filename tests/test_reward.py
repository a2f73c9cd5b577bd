"""The math-verify reward: right, wrong, unparseable, format option, and the time limit."""

from __future__ import annotations

import time

import pytest

from lite_ppo.rewards import MathVerifyReward, status_counts


@pytest.fixture(scope="module")
def reward():
    return MathVerifyReward(timeout_seconds=1)


@pytest.mark.parametrize(
    "response, gold",
    [
        ("23 + 48 = 71, so the answer is \\boxed{71}.", "71"),
        ("Half of it: \\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
        ("The final answer is $x = 3$", "3"),
    ],
)
def test_right_answers_score_one(reward, response, gold):
    result = reward.score(response, gold)
    assert (result.score, result.status) == (1.0, "correct")


@pytest.mark.parametrize("response, gold", [("so \\boxed{70}", "71"), ("\\boxed{\\frac{1}{3}}", "0.5")])
def test_wrong_answers_score_zero(reward, response, gold):
    result = reward.score(response, gold)
    assert (result.score, result.status) == (0.0, "wrong")
    assert result.extracted is not None


def test_unparseable_response_scores_zero_and_is_counted(reward):
    result = reward.score("I do not know.", "71")
    assert (result.score, result.status) == (0.0, "unparsed")


def test_require_boxed_rejects_unboxed_right_answer():
    strict = MathVerifyReward(timeout_seconds=1, require_boxed=True)
    assert strict.score("The answer is 71", "71").status == "no_box"
    assert strict.score("The answer is \\boxed{71}", "71").score == 1.0


def test_pathological_input_hits_the_time_limit(reward):
    # A tower of powers makes sympy try to evaluate an astronomically large integer.
    start = time.perf_counter()
    result = reward.score("\\boxed{9^{9^{9^{9^{9}}}}}", "2")
    elapsed = time.perf_counter() - start
    assert (result.score, result.status) == (0.0, "timeout")
    assert elapsed < 4.0  # parse + verify limits of 1 s each, plus slack on a loaded machine


def test_score_batch_and_counts(reward):
    results = reward.score_batch(["\\boxed{1}", "\\boxed{2}", "nothing"], ["1", "1", "1"])
    assert [r.score for r in results] == [1.0, 0.0, 0.0]
    counts = status_counts(results)
    assert counts["correct"] == 1 and counts["wrong"] == 1 and counts["unparsed"] == 1
    assert sum(counts.values()) == 3


def test_timeout_must_be_whole_seconds():
    with pytest.raises(ValueError, match="timeout_seconds"):
        MathVerifyReward(timeout_seconds=0)
