"""agentgym.grading.answers: SQuAD normalisation, EM, substring EM, token F1, and extracting the answer from text."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from agentgym.grading.answers import (
    exact_match,
    extract_answer,
    f1_score,
    find_call,
    match_choice,
    normalize_answer,
    score_answer,
    sub_exact_match,
)

texts = st.text(max_size=40) | st.sampled_from(["the", "a", "An", "The Hemlo City", "hemlo", "1,234", "", " . "])
gold_lists = st.lists(texts, min_size=1, max_size=4)


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("The Hemlo City", "hemlo city"),
        ("  a   Painter! ", "painter"),
        ("Zarvo-Melkin", "zarvomelkin"),
        ("An apple, the pear and a fig.", "apple pear and fig"),
        ("theatre another", "theatre another"),  # articles only as whole words
        ("4,292,558", "4292558"),
        ("", ""),
        ("¿Qué?", "¿qué"),  # only ASCII punctuation is removed (SQuAD)
    ],
)
def test_normalize_answer_cases(raw, normalised):
    assert normalize_answer(raw) == normalised


@pytest.mark.parametrize(
    ("pred", "golds", "em", "subem", "f1"),
    [
        ("Hemlo City", ["Hemlo City", "Hemlo"], 1.0, 1.0, 1.0),
        ("the hemlo city.", ["Hemlo City"], 1.0, 1.0, 1.0),
        ("It is Hemlo City, I think", ["Hemlo City"], 0.0, 1.0, 2 * (2 / 6) * 1 / (2 / 6 + 1)),
        ("Hemlo", ["Hemlo City"], 0.0, 0.0, 2 * 1 * 0.5 / 1.5),
        ("Port Ulva", ["Hemlo City", "Hemlo"], 0.0, 0.0, 0.0),
        ("1987", "1987", 1.0, 1.0, 1.0),  # a single gold string
        ("4292558", ["4,292,558"], 1.0, 1.0, 1.0),
        ("anything", [], 0.0, 0.0, 0.0),
        ("the", ["a"], 1.0, 1.0, 1.0),  # both normalise to ""
        ("something", ["the"], 0.0, 0.0, 0.0),  # an empty gold is not a substring of everything
    ],
)
def test_scores_by_hand(pred, golds, em, subem, f1):
    assert exact_match(pred, golds) == em
    assert sub_exact_match(pred, golds) == subem
    assert f1_score(pred, golds) == pytest.approx(f1)
    assert score_answer(pred, golds) == pytest.approx({"em": em, "subem": subem, "f1": f1})


def test_f1_counts_repeated_tokens_once_per_match():
    assert f1_score("paris paris paris", ["paris"]) == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert f1_score("zarvo melkin", ["melkin zarvo"]) == 1.0  # bag of tokens


@given(texts)
def test_normalisation_is_idempotent(s):
    once = normalize_answer(s)
    assert normalize_answer(once) == once
    assert once == once.strip() and "  " not in once


@given(texts, gold_lists)
def test_scores_are_bounded_and_ordered(pred, golds):
    em, subem, f1 = exact_match(pred, golds), sub_exact_match(pred, golds), f1_score(pred, golds)
    for v in (em, subem, f1):
        assert 0.0 <= v <= 1.0
    assert em in (0.0, 1.0) and subem in (0.0, 1.0)
    assert em <= subem
    if em == 1.0:
        assert f1 == 1.0


@given(gold_lists)
def test_every_gold_scores_perfectly_against_itself(golds):
    for g in golds:
        assert exact_match(g, golds) == sub_exact_match(g, golds) == f1_score(g, golds) == 1.0


@given(texts, gold_lists, gold_lists)
def test_more_golds_never_lower_a_score(pred, golds, extra):
    for fn in (exact_match, sub_exact_match, f1_score):
        assert fn(pred, golds + extra) >= fn(pred, golds)


@given(texts, texts)
def test_f1_is_symmetric(a, b):
    assert f1_score(a, [b]) == pytest.approx(f1_score(b, [a]))


# -- extract_answer ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("**3464999702**", "3464999702"),  # issue 20: CodeExec rejected these two
        ("The answer is 3464999702", "3464999702"),
        ("The answer is **3464999702**.", "3464999702"),
        ("Final answer: `17:00`", "17:00"),
        ("Answer: 42", "42"),
        ("**Answer:** 42", "42"),
        ("After running the program, the final answer is: 42.", "42"),
        ("My guess: Zed Ka", "Zed Ka"),
        ("Here you go: order_pizza(size='large')", "order_pizza(size='large')"),  # issue 20: Clarify
        ("Here you go:\n```python\norder_pizza(size='large')\n```", "order_pizza(size='large')"),
        ("```\n42\n```", "42"),
        ("```42```", "42"),
        ("Some reasoning.\n```text\nfirst\n```\nthen\n```\nsecond\n```", "second"),  # the last fence counts
        ("It is Oru River.", "Oru River"),  # issue 20: TwentyQuestions
        ("I think it's *The Road to Velkrond*!", "The Road to Velkrond"),
        ("So, it is Zed!", "Zed"),
        ('"North".', "North"),
        ("“North”", "North"),
        ("__bold__ and _it_", "bold and it"),
        ("snake_case_name", "snake_case_name"),  # underscores inside a word are no italics
        ("/static/app_main.js", "/static/app_main.js"),
        ("  42 ", "42"),
        ("Maybe.", "Maybe"),
        ("The answer is", "The answer is"),  # a lead-in with nothing after it is left alone
        ("", ""),
    ],
)
def test_extract_answer_cases(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("text", ["The answer is not 42, it is 43", "42 or 43", "Answer: 4 2"])
def test_extract_answer_keeps_what_is_not_wrapping(text):
    """Only wrapping goes: a hedge or a second value stays in, so a parser sees it and rejects it."""
    assert extract_answer(text) not in ("42", "43")


# Answers as the envs hold them: numbers, times, names, calls, paths (no markup characters of their own).
plain_answers = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.decimals(-1e6, 1e6, places=2, allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["17:00", "North", "Oru River", "The Road to Velkrond", "/api/orders", "10.0.0.7",
                     "order_pizza(size=large, crust=thin)", "book_table(cuisine='thai', people=4)"]),
    st.from_regex(r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}", fullmatch=True),
)  # fmt: skip
LEAD_INS = ["", "The answer is ", "Answer: ", "Final answer: ", "Here you go: ", "It is ", "I think it's ",
            "So the final answer is: ", "My guess is ", "After some work, the answer is "]  # fmt: skip
MARKUP = [("", ""), ("**", "**"), ("*", "*"), ("`", "`"), ("__", "__"), ('"', '"'), ("“", "”"), ("**`", "`**")]
FENCES = [("", ""), ("```\n", "\n```"), ("```python\n", "\n```"), ("```text\n", "\n```"), ("```", "```")]


def wrap(answer: str, data: st.DataObject) -> str:
    """``answer`` as a model might write it: markup, a lead-in, a final period, a code fence, spaces."""
    left, right = data.draw(st.sampled_from(MARKUP))
    text = data.draw(st.sampled_from(LEAD_INS)) + left + answer + right + data.draw(st.sampled_from(["", ".", "!"]))
    fence_left, fence_right = data.draw(st.sampled_from(FENCES))
    if fence_left:  # code holds the value, not a sentence (and no backticks touch a one-line fence's)
        if "\n" not in fence_left and "`" in left + right:
            left = right = ""
        text = fence_left + left + answer + right + fence_right
    return data.draw(st.sampled_from(["", " ", "\n"])) + text + data.draw(st.sampled_from(["", " ", "\n"]))


@given(plain_answers, st.data())
def test_extract_answer_unwraps_any_wrapping(answer, data):
    assert extract_answer(wrap(answer, data)) == answer


@given(plain_answers, plain_answers, st.data())
def test_extract_answer_never_turns_one_answer_into_another(answer, other, data):
    if other != answer:
        assert extract_answer(wrap(other, data)) != answer


@given(st.text(max_size=200))
def test_extract_answer_is_total(text):
    out = extract_answer(text)
    assert isinstance(out, str) and len(out) <= len(text)


# -- find_call and match_choice -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "call"),
    [
        ("order_pizza(size=large)", ("order_pizza", {"size": "large"})),
        ("Here you go: `order_pizza(size='large', delivery=pickup)`.", ("order_pizza", {"size": "large",
                                                                                         "delivery": "pickup"})),
        ("```\norder_pizza(size=large)\n```", ("order_pizza", {"size": "large"})),
        ('book_table({"people": 6, "day": "thu"})', ("book_table", {"people": "6", "day": "thu"})),
        ("book_table(people: 6, day: 'thu')", ("book_table", {"people": "6", "day": "thu"})),
        ("book_table(time=8 o'clock, people=4)", ("book_table", {"time": "8 o'clock", "people": "4"})),  # a lone '
        ("book_table(note='a, b', people=4)", ("book_table", {"note": "a, b", "people": "4"})),
        ("Sure (order_pizza(size=large))", ("order_pizza", {"size": "large"})),
        ("Which crust (thin or thick)? order_pizza(crust=thin)", ("order_pizza", {"crust": "thin"})),
        ("f() then f()", ("f", {})),  # the same call twice is one call
    ],
)  # fmt: skip
def test_find_call_cases(text, call):
    assert find_call(text) == call


@pytest.mark.parametrize(
    "text",
    ["", "no call here", "order_pizza(size=large", "order_pizza(large)", "f(a=1) or g(a=1)", "f(a=1) or f(a=2)",
     "f(" * 8_000, "f(" * 4_000 + ")" * 4_000, "f(a=" * 4_000 + ")" * 4_000, "g(x) " * 3_000, "(" * 16_000],
)  # fmt: skip
@pytest.mark.timeout(60)  # a hang guard: every input is read in a bounded number of passes
def test_find_call_refuses_what_is_no_single_call(text):
    assert find_call(text) is None


@pytest.mark.parametrize(
    ("value", "choices", "expected"),
    [
        ("Thurs.", ("monday", "thursday"), "thursday"),
        ("weds", ("wednesday", "friday"), "wednesday"),
        ("8pm", ("19:00", "20:00"), "20:00"),
        ("8:00 p.m.", ("19:00", "20:00"), "20:00"),
        ("20h", ("19:00", "20:00"), "20:00"),
        ("eight pm", ("19:00", "20:00"), "20:00"),
        ("8 o'clock", ("08:00", "20:00"), None),  # either half is a choice: unclear
        ("8 o'clock", ("19:00", "20:00"), "20:00"),
        ("8", ("19:00", "20:00"), None),  # a bare number is no time
        ("six", ("2", "6"), "6"),
        ("6.0", ("2", "6"), "6"),
        ("6.5", ("2", "6"), None),
        ("seven", ("2", "6"), None),
        ("thin crust", ("thin", "thick"), "thin"),
        ("THE THIN ONE", ("thin", "thick"), None),
        ("thick", ("thin",), None),
    ],
)
def test_match_choice_cases(value, choices, expected):
    assert match_choice(value, choices, noise=["crust"]) == expected


def test_match_choice_synonyms_and_hours():
    minutes = ("15", "30", "60")
    assert match_choice("1 hour", minutes, noise=["minutes"]) == "60"
    assert match_choice("an hour", minutes, noise=["minutes"]) == "60"
    assert match_choice("30 min", minutes, noise=["minutes", "min"]) == "30"
    assert match_choice("2 hours", minutes, noise=["minutes"]) is None
    both = {"a": ["x"], "b": ["x"]}  # a synonym of two choices names neither
    assert match_choice("x", ("a", "b"), both) is None


@given(st.text(max_size=300), st.lists(st.sampled_from(["18:00", "20:30", "2", "6", "monday", "thin", "x y"]),
                                       min_size=1, max_size=4, unique=True))  # fmt: skip
def test_find_call_and_match_choice_are_total(text, choices):
    call = find_call(text)
    assert call is None or (isinstance(call[0], str) and isinstance(call[1], dict))
    assert match_choice(text, choices) in (None, *choices)
