"""agentgym.answers: SQuAD normalisation, EM, substring EM, token F1."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.answers import exact_match, f1_score, normalize_answer, score_answer, sub_exact_match

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
