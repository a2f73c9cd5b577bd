"""The math-verify reward: right, wrong, unparseable, format option, time limits, big integers,
settings, copies, threads and the TensorBoard status rates."""

from __future__ import annotations

import copy
import pickle
import threading
import time

import pytest

from lite_ppo.errors import UserError
from lite_ppo.rewards import STATUSES, MathVerifyReward, status_counts

TOWER = "\\boxed{9^{9^{9^{9^{9}}}}}"  # sympy tries to evaluate an astronomically large integer


@pytest.fixture(scope="module")
def reward():
    reward = MathVerifyReward(timeout_seconds=1, workers=2)
    reward.start()
    yield reward
    reward.close()


@pytest.mark.parametrize(
    "response, gold",
    [
        ("23 + 48 = 71, so the answer is \\boxed{71}.", "71"),
        ("Half of it: \\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
        ("The final answer is $x = 3$", "3"),
        ("so the result is \\boxed{-12}", "-12"),
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
    strict = MathVerifyReward(timeout_seconds=1, require_boxed=True, workers=0)
    assert strict.score("The answer is 71", "71").status == "no_box"
    assert strict.score("The answer is \\boxed{71}", "71").score == 1.0


@pytest.mark.parametrize("workers", [0, 2])
def test_5000_digit_answer_scores_one(reward, workers):
    # Python refuses int <-> str conversions beyond 4300 digits by default (the old status: error).
    gold = "9" + "1234567890" * 500  # 5001 digits
    scorer = reward if workers else MathVerifyReward(timeout_seconds=5, workers=0)
    right, wrong = scorer.score_batch([f"so \\boxed{{{gold}}}", f"so \\boxed{{{gold[:-1]}8}}"], [gold, gold])
    assert (right.score, right.status) == (1.0, "correct")
    assert (wrong.score, wrong.status) == (0.0, "wrong")


def test_pathological_input_hits_the_time_limit(reward):
    start = time.perf_counter()
    result = reward.score(TOWER, "2")
    elapsed = time.perf_counter() - start
    assert (result.score, result.status) == (0.0, "timeout")
    assert elapsed < 4.0  # a 1 s limit (+1 s before a stuck worker is killed), slack for a loaded machine


def test_time_limit_holds_when_scoring_from_a_thread(reward):
    # The old signal-based limit was off outside the main thread: this call never returned.
    out = {}
    thread = threading.Thread(target=lambda: out.update(result=reward.score(TOWER, "2")), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "scoring from a thread hung"
    assert (out["result"].score, out["result"].status) == (0.0, "timeout")


def test_in_process_scoring_warns_off_the_main_thread():
    serial = MathVerifyReward(workers=0)
    caught = []

    def run():
        with pytest.warns(RuntimeWarning, match="no time budget") as record:
            caught.append(serial.score("\\boxed{3}", "3"))
        caught.append(record)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert caught and caught[0].status == "correct"


def test_in_process_batch_budget_in_the_main_thread():
    serial = MathVerifyReward(timeout_seconds=1, batch_timeout_seconds=1.5, workers=0)
    results = serial.score_batch([TOWER, TOWER, TOWER, "\\boxed{2}"], ["2"] * 4)
    assert [r.score for r in results] == [0.0] * 4
    assert results[0].status == "timeout"
    assert results[-1].status == "batch_timeout"
    assert {r.status for r in results} <= {"timeout", "batch_timeout"}


def test_score_batch_and_counts(reward):
    results = reward.score_batch(["\\boxed{1}", "\\boxed{2}", "nothing"], ["1", "1", "1"])
    assert [r.score for r in results] == [1.0, 0.0, 0.0]
    counts = status_counts(results)
    assert counts["correct"] == 1 and counts["wrong"] == 1 and counts["unparsed"] == 1
    assert sum(counts.values()) == 3 and set(counts) == set(STATUSES)


def test_pool_and_in_process_agree(reward):
    responses = ["\\boxed{1}", "\\boxed{)} 1", "\\boxed{2} \\boxed{1}", "the answer is 1", "\\b\u043exed{1}", "nothing"]
    serial = MathVerifyReward(timeout_seconds=1, workers=0)
    assert reward.score_batch(responses, ["1"] * 6) == serial.score_batch(responses, ["1"] * 6)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": -1.5}, "timeout_seconds"),
        ({"batch_timeout_seconds": 0}, "batch_timeout_seconds"),
        ({"workers": -1}, "workers"),
        ({"workers": 1.5}, "workers"),
    ],
)
def test_bad_settings_are_one_line_user_errors(kwargs, field):
    with pytest.raises(UserError, match=f"MathVerifyReward.{field}") as error:
        MathVerifyReward(**kwargs)
    assert "\n" not in str(error.value)


def test_fractional_timeouts_and_no_batch_budget_are_allowed():
    reward = MathVerifyReward(timeout_seconds=0.5, batch_timeout_seconds=None, workers=0)
    assert reward.timeout_seconds == 0.5 and reward.batch_timeout_seconds is None


def test_copies_carry_settings_not_processes(reward):
    for twin in (copy.deepcopy(reward), pickle.loads(pickle.dumps(reward))):
        assert (twin.timeout_seconds, twin.workers, twin._pool) == (1.0, 2, None)
        assert twin.score_batch(["\\boxed{4}"], ["4"])[0].status == "correct"
        twin.close()
    assert reward.score("\\boxed{5}", "5").status == "correct"  # the original's pool is untouched


def test_built_from_a_config_like_lightning_cli_does():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--reward", type=MathVerifyReward)
    config = parser.parse_args(
        [
            '--reward={"class_path": "lite_ppo.rewards.MathVerifyReward", "init_args": {"timeout_seconds": 2.5, '
            '"workers": 0, "batch_timeout_seconds": null}}'
        ]
    )
    reward = parser.instantiate_classes(config).reward
    assert (reward.timeout_seconds, reward.workers, reward.batch_timeout_seconds) == (2.5, 0, None)


def test_every_status_has_a_tensorboard_rate():
    """The Diagnostics callback logs ``reward/<status>_rate`` for every status, new ones included."""
    from lite_ppo import metric_names
    from lite_ppo.callbacks.diagnostics import Diagnostics
    from lite_ppo.rollout import Generation
    from lite_ppo.rollout.producer import build_rollout_batch

    generations = [[Generation([5, 6], True), Generation([7], True)], [Generation([8], False), Generation([9], True)]]
    rollout = build_rollout_batch([[1, 2], [3]], generations, [0.0, 0.0, 0.0, 1.0], 0, 1.0)
    rollout.reward_status = ["batch_timeout", "hedged", "spoofed", "correct"]
    diagnostics = Diagnostics()
    metrics = diagnostics.generation_metrics(diagnostics.generation_record(rollout))
    assert {metric_names.reward_status_rate(s) for s in STATUSES if s != "correct"} <= set(metrics)
    for status in ("batch_timeout", "hedged", "spoofed"):
        assert metrics[metric_names.reward_status_rate(status)] == 0.25


class _Flipped(MathVerifyReward):
    """A custom reward built on the stock one: right answers score 0, wrong ones 1."""

    def score(self, response, gold):
        result = super().score(response, gold)
        return type(result)(1.0 - result.score, result.status, result.extracted)


def test_a_subclass_that_overrides_score_is_used_by_score_batch():
    flipped = _Flipped(timeout_seconds=5, workers=1)
    assert [r.score for r in flipped.score_batch(["\\boxed{1}", "\\boxed{2}"], ["1", "1"])] == [0.0, 1.0]
    flipped.close()
