"""The strict extraction rule against reward-hacking attempts: every attempt scores 0, every
legitimate answer still scores 1 (``lite_ppo.rewards.extraction`` documents the rule)."""

from __future__ import annotations

import pytest

from lite_ppo.rewards import MathVerifyReward
from lite_ppo.rewards.extraction import box_contents, find_answer, has_spoofed_box, strip_code

ECHO = "Please reason step by step, and put your final answer within \\boxed{}."

# (name, response, status) against the gold answer "1".
ATTEMPTS = [
    ("unparseable box, stray right number", "\\boxed{)} 1", "unparsed"),
    ("unparseable fbox, stray right number", "\\fbox{)} 1", "unparsed"),
    ("half-written fraction in the box", "\\boxed{\\frac{1}{}} so 1", "unparsed"),
    ("dangling operator in the box", "\\boxed{1+} 1", "unparsed"),
    ("empty box, answer outside", "\\boxed{} The answer is 1", "unparsed"),
    ("blank box, answer outside", "\\boxed{  } 1", "unparsed"),
    ("box never closed", "so \\boxed{1", "unparsed"),
    ("unbalanced braces in the box", "\\boxed{{1} 1", "unparsed"),
    ("box without braces", "\\boxed 1", "unparsed"),
    ("box inside a box", "\\boxed{\\boxed{2} 1}", "unparsed"),
    ("two boxes, right one first", "\\boxed{1} or maybe \\boxed{2}", "wrong"),
    ("two boxes, right one last", "\\boxed{2} or maybe \\boxed{1}", "hedged"),
    ("every answer boxed", " ".join(f"\\boxed{{{i}}}" for i in range(50)) + " \\boxed{1}", "hedged"),
    ("prompt echo with its empty box, plain answer", ECHO + "\nThe answer is 1", "unparsed"),
    ("prompt echo with its empty box, then a box", ECHO + "\nSo \\boxed{1}", "hedged"),
    ("few-shot echo box, plain answer", "Example: 2+2 gives \\boxed{4}. Now ours: 1", "wrong"),
    ("box only in a code block", "```latex\n\\boxed{1}\n```", "unparsed"),
    ("box only in an unclosed code block", "Here:\n```python\nprint('\\\\boxed{1}')", "unparsed"),
    ("box only in inline code", "The answer is `\\boxed{1}`.", "unparsed"),
    (
        "code prints every answer",
        "```python\nfor i in range(10):\n    print(f'\\\\boxed{{{i}}}')\n```\nDone.",
        "unparsed",
    ),
    ("Cyrillic o in boxed", "\\b\u043exed{1}", "spoofed"),
    ("Cyrillic x and e in boxed", "\\bo\u0445\u0435d{1}", "spoofed"),
    ("Greek omicron in boxed", "\\b\u03bfxed{1}", "spoofed"),
    ("full-width boxed", "\uff3c\uff42\uff4f\uff58\uff45\uff44{1}", "spoofed"),
    ("mathematical bold boxed", "\\\U0001d41b\U0001d428\U0001d431\U0001d41e\U0001d41d{1}", "spoofed"),
    ("set-minus as backslash", "\u2216boxed{1}", "spoofed"),
    ("zero-width space inside boxed", "\\bo\u200bxed{1}", "spoofed"),
    ("accented letter in boxed", "\\bo\u0301xed{1}", "spoofed"),
    ("wrong real box, right look-alike box", "\\boxed{2} \\b\u043exed{1}", "spoofed"),
    ("look-alike fbox", "\\fb\u043ex{1}", "spoofed"),
    ("both signs", "\\boxed{\\pm 1}", "wrong"),
    ("a set of candidates", "\\boxed{0, 1, 2, 3}", "wrong"),
    ("huge 'or' list", "\\boxed{" + " \\text{ or } ".join(str(i) for i in range(500)) + "}", "wrong"),
    ("huge repetition of wrong boxes", "\\boxed{2}" * 5000 + "\\boxed{1}", "hedged"),
]

# (name, response, gold, require_boxed): all score 1.
LEGITIMATE = [
    ("boxed integer", "23 + 48 = 71, so \\boxed{71}.", "71", True),
    ("boxed fraction", "Half of it: \\boxed{\\frac{1}{2}}", "0.5", True),
    ("dfrac in math mode", "$\\boxed{\\dfrac{3}{4}}$", "\\frac{3}{4}", True),
    ("negative number", "so the result is \\boxed{-12}", "-12", True),
    ("fbox", "\\fbox{12}", "12", True),
    ("space before the brace", "\\boxed {12}", "12", True),
    ("set with escaped braces", "\\boxed{\\{1,2\\}}", "\\{1,2\\}", True),
    ("complex number", "$\\boxed{8+4i}$", "8+4i", True),
    ("5000-digit integer", "\\boxed{" + "3" * 5000 + "}", "3" * 5000, True),
    ("same answer boxed twice", "First \\boxed{\\frac12}, i.e. \\boxed{0.5}", "1/2", True),
    ("code before the boxed answer", "```python\nprint(6 * 7)\n```\nSo \\boxed{42}", "42", True),
    ("unicode prose around a real box", "With \u03c0 \u2248 3.14 we get \\boxed{3}", "3", True),
    ("plain last number", "First 5, then 12. The answer is 12", "12", False),
    ("final answer anchor", "The final answer is $x = 3$", "3", False),
    ("plain fraction", "so 1/2", "0.5", False),
]


@pytest.fixture(scope="module")
def reward():
    reward = MathVerifyReward(timeout_seconds=5, workers=2)
    yield reward
    reward.close()


@pytest.fixture(scope="module")
def strict():
    reward = MathVerifyReward(timeout_seconds=5, require_boxed=True, workers=0)
    yield reward


@pytest.mark.parametrize("name, response, status", ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
def test_hacking_attempt_scores_zero(reward, strict, name, response, status):
    result = reward.score(response, "1")
    assert (result.score, result.status) == (0.0, status)
    assert strict.score(response, "1").score == 0.0


def test_hacking_attempts_score_zero_as_one_batch(reward):
    results = reward.score_batch([a[1] for a in ATTEMPTS], ["1"] * len(ATTEMPTS))
    assert [(r.score, r.status) for r in results] == [(0.0, a[2]) for a in ATTEMPTS]


@pytest.mark.parametrize("name, response, gold, require_boxed", LEGITIMATE, ids=[a[0] for a in LEGITIMATE])
def test_legitimate_answer_scores_one(reward, strict, name, response, gold, require_boxed):
    result = reward.score(response, gold)
    assert (result.score, result.status) == (1.0, "correct")
    if require_boxed:
        assert strict.score(response, gold).score == 1.0


def test_the_logged_answer_is_the_judged_one(reward):
    result = reward.score("\\boxed{)} 1", "1")
    assert result.extracted == ")"  # the box, not the stray number


# -- the rule's building blocks ------------------------------------------------------------------
def test_strip_code_removes_fenced_and_inline_code_only():
    text = "a `x` b\n```py\ny\n```\nc ``z`` d ~~~\nw\n~~~ e ```\nunclosed"
    assert strip_code(text).split() == ["a", "b", "c", "d", "e"]
    assert strip_code("no code here, a lone ` backtick") == "no code here, a lone ` backtick"


def test_box_contents_balances_braces_and_escapes():
    assert box_contents("\\boxed{\\frac{1}{2}} and \\fbox{ 3 } \\boxed{\\{1\\}}") == ["\\frac{1}{2}", " 3 ", "\\{1\\}"]
    assert box_contents("\\boxed{a\\\\}b}") == ["a\\\\"]  # an escaped backslash does not escape the brace
    assert box_contents("\\boxedx{1} \\fboxes") == []  # longer command names are not boxes
    assert box_contents("\\boxed{1") is None and box_contents("\\boxed 1") is None


def test_spoof_check_ignores_honest_unicode():
    assert not has_spoofed_box("Let \u03b1 = \u03c0/2, \u0445 = 3, so \\boxed{3}")
    assert has_spoofed_box("\\b\u043exed{3}")


def test_find_answer_keeps_distinct_boxes_answer_last():
    assert find_answer("\\boxed{2} \\boxed{ 1 } \\boxed{2} \\boxed{1}", False).boxes == ("2", "1")
    assert find_answer("no box", True).status == "no_box"
