"""The judge interface (agentgym.rewards.verdicts): questions are checked when made, check_value reads each kind's
answers (bools, numbers in [0, 1], rank tuples) and refuses the rest, RuleJudge answers from rules and turns a
missing or failing rule into an error verdict, and both judges satisfy the Judge protocol."""

import math

import pytest

from agentgym.rewards.judge import LLMJudge
from agentgym.rewards.verdicts import QUESTION_KINDS, Judge, Question, RuleJudge, Verdict, check_value
from agentgym.tools.llm import LLMClient


def test_questions_are_checked_when_made():
    assert QUESTION_KINDS == ("yesno", "score", "compare", "rank")
    with pytest.raises(ValueError, match="question kind must be one of"):
        Question("grade", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank question needs items > 0"):
        Question("rank", "x")
    with pytest.raises(ValueError, match="only a rank question has items"):
        Question("yesno", "x", items=2)
    assert Question("rank", "x", items=2).items == 2


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [("yesno", True, 1.0), ("yesno", False, 0.0), ("yesno", 1, 1.0), ("score", 0.25, 0.25), ("score", 1, 1.0),
     ("compare", 0.5, 0.5), ("rank", [0.1, 1], (0.1, 1.0))],
)  # fmt: skip
def test_check_value_reads_each_kind(kind, value, expected):
    question = Question(kind, "x", items=2 if kind == "rank" else 0)
    assert check_value(question, value) == expected


@pytest.mark.parametrize(
    ("kind", "value", "match"),
    [("yesno", 0.5, "0 or 1"), ("score", 1.5, r"lie in \[0, 1\]"), ("score", math.nan, r"lie in \[0, 1\]"),
     ("compare", -0.1, r"lie in \[0, 1\]"), ("rank", [0.5], "a rank of 2 items got 1 scores"),
     ("rank", [0.5, 2.0], r"must lie in \[0, 1\]")],
)  # fmt: skip
def test_check_value_refuses_the_rest(kind, value, match):
    with pytest.raises(ValueError, match=match):
        check_value(Question(kind, "x", items=2 if kind == "rank" else 0), value)


def test_rule_judge_answers_from_rules_and_marks_what_it_cannot():
    def broken():
        raise KeyError("gold")

    judge = RuleJudge()
    verdicts = judge.ask([
        Question("yesno", "a", rule=lambda: True), Question("score", "b", rule=lambda: 0.75),
        Question("yesno", "c"), Question("score", "d", rule=broken), Question("score", "e", rule=lambda: 7),
    ])  # fmt: skip
    assert [v.value for v in verdicts] == [1.0, 0.75, None, None, None]
    assert [v.ok for v in verdicts] == [True, True, False, False, False]
    assert verdicts[2].error == "the rule judge needs a rule for every question: this one has none"
    assert verdicts[3].error == "rule failed: KeyError: 'gold'"
    assert verdicts[4].error.startswith("rule failed: ValueError: a score verdict must lie in [0, 1]")
    assert all(v.reply is None for v in verdicts) and judge.ask([]) == []


def test_both_judges_are_judges():
    assert isinstance(RuleJudge(), Judge)
    with LLMClient("http://127.0.0.1:9/v1", api_key_env=None) as client:
        assert isinstance(LLMJudge(client), Judge)
    assert Verdict(0.0).ok and not Verdict(None, error="x").ok  # a 0 is an answer; None is none
