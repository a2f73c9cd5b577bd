"""maj@k: the most frequent answer among a problem's first k samples, answers grouped by math-verify
equivalence, ties split; checked by hand and through the metrics of the evaluate path."""

from __future__ import annotations

import pytest

from lite_ppo.evaluation.majority import majority_score, math_equivalent
from lite_ppo.evaluation.results import GroupMetrics


def test_equivalent_answers_vote_together():
    assert math_equivalent("1/2", "0.5") and math_equivalent("x+1", "1+x")
    assert not math_equivalent("3", "4")
    # Two wrong answers written differently (4 and 4.0) outvote two correct ones with three votes.
    assert majority_score(["wrong", "wrong", "correct", "wrong", "correct"], ["4", "4.0", "7", "4", "7"], 5) == 0.0
    # Compared as text, the same votes split "4" x2, "4.0" x1, correct x2: a 2-way tie, counted 1/2.
    text_only = majority_score(
        ["wrong", "wrong", "correct", "wrong", "correct"], ["4", "4.0", "7", "4", "7"], 5, equivalent=str.__eq__
    )
    assert text_only == 0.5


@pytest.mark.parametrize(
    ("statuses", "answers", "k", "expected"),
    [
        (["correct", "correct", "wrong"], ["7", "7", "5"], 3, 1.0),  # a clear majority
        (["correct", "wrong", "wrong"], ["7", "5", "5"], 3, 0.0),  # a wrong majority
        (["correct", "wrong", "wrong", "no_box"], ["7", "5", "6", None], 4, 1 / 3),  # 3-way tie
        (["no_box", "unparsed"], [None, "x"], 2, 0.0),  # nobody votes
        (["hedged", "wrong"], ["7", "5"], 2, 0.0),  # a hedged answer abstains
        (["wrong", "correct", "correct"], ["5", "7", "7"], 1, 0.0),  # the first k samples only
        (["wrong", "correct", "correct"], ["5", "7", "7"], 2, 0.5),
    ],
)
def test_majority_by_hand(statuses, answers, k, expected):
    assert majority_score(statuses, answers, k, equivalent=str.__eq__) == pytest.approx(expected)


def test_maj_at_k_reaches_the_metrics_and_the_report():
    """Two problems of 4 samples: maj@2 and maj@4 by hand, averaged over problems."""
    metrics = GroupMetrics(["set"], num_samples=4)
    records = []
    for statuses, answers in (
        (["correct", "wrong", "correct", "wrong"], ["7", "5", "7", "5"]),  # maj@2: tie 1/2; maj@4: tie 1/2
        (["wrong", "wrong", "correct", "no_box"], ["5", "5", "7", None]),  # maj@2: 0; maj@4: 0
    ):
        records += [{"status": s, "extracted": a, "length": 3, "truncated": False} for s, a in zip(statuses, answers)]
    metrics.update_records("set", records)
    out = metrics.compute()["groups"]["set"]
    assert out["maj@2"] == pytest.approx((0.5 + 0.0) / 2) and out["maj@4"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["pass@4"] == pytest.approx(1.0)  # both problems have a correct sample
    from lite_ppo.evaluation.report import table_columns

    assert table_columns(out)[-5:-3] == ["maj@2", "maj@4"]
