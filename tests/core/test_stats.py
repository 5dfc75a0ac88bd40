"""agentgym.running.stats: the exact paired sign-flip test and Holm's correction on hand-derived cases, then properties
(brute-force enumeration agrees, symmetry, scale invariance, the Monte-Carlo path agrees with the exact one, Holm
is monotone and never below the raw p)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.running.stats import holm, sign_flip_test


def test_three_positive_differences_give_a_quarter():
    # 8 patterns; |sum| >= 0.6 only for (+,+,+) and (-,-,-): 2/8
    test = sign_flip_test([0.1, 0.2, 0.3])
    assert test.p == pytest.approx(0.25) and test.exact and test.n == 3 and test.p_min == 0.25
    assert test.mean == pytest.approx(0.2) and test.sd == pytest.approx(0.1)


def test_eight_positive_differences_give_two_in_256():
    assert sign_flip_test([0.03, 0.1, 0.02, 0.2, 0.05, 0.01, 0.07, 0.4]).p == 2 / 256


def test_hand_derived_mixed_signs():
    # d = (1, 2, -3): observed |sum| = 0. Every pattern's |sum| >= 0: p = 1.
    assert sign_flip_test([1.0, 2.0, -3.0]).p == 1.0
    # d = (1, 1, 1, -1): |sum| = 2. Sums over the 16 patterns: the number of + among the four +-1 terms is k,
    # sum = 2k - 4; |sum| >= 2 for k in {0, 1, 3, 4}: 1 + 4 + 4 + 1 = 10 of 16.
    assert sign_flip_test([1.0, 1.0, 1.0, -1.0]).p == 10 / 16
    # d = (3, 1): sums 4, 2, -2, -4; |sum| >= 4 in two of four.
    assert sign_flip_test([3.0, 1.0]).p == 0.5


def test_ties_in_floating_point_count_as_equal():
    # 0.1 + 0.2 and 0.3 are the same difference of sums up to rounding: the mirrored patterns tie with the observed.
    assert sign_flip_test([0.1, 0.2, -0.3, 0.3]).p == sign_flip_test([1.0, 2.0, -3.0, 3.0]).p


def test_zero_differences_and_single_pairs():
    assert sign_flip_test([0.0, 0.0, 0.0]).p == 1.0
    one = sign_flip_test([0.5])
    assert one.p == 1.0 and math.isnan(one.sd)


def test_many_pairs_use_a_seeded_monte_carlo_and_say_so():
    d = [0.1] * 25
    test = sign_flip_test(d, samples=20_000, seed=3)
    assert not test.exact and test.samples == 20_000
    # exact p is 2 / 2^25 (~6e-8): the Monte-Carlo estimate is (1 + hits) / (1 + samples), hits almost surely 0
    assert test.p == pytest.approx(1 / 20_001)
    assert sign_flip_test(d, samples=20_000, seed=3) == test  # seeded


def test_exact_above_sixteen_pairs_enumerates_in_blocks():
    d = [0.2] * 17 + [-0.1]
    # brute force over 2^18 patterns by the count of flipped entries: sum = 0.2 * (17 - 2a) - 0.1 * s
    hits = sum(math.comb(17, a) for a in range(18) for s in (1, -1) if abs(0.2 * (17 - 2 * a) - 0.1 * s) >= 3.3 - 1e-9)
    assert sign_flip_test(d).p == pytest.approx(hits / 2**18)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="non-empty"):
        sign_flip_test([])
    with pytest.raises(ValueError, match="non-finite"):
        sign_flip_test([0.1, float("nan")])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.1, 1.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([float("nan")])


def test_holm_hand_made():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> made monotone: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert holm([0.02]) == [0.02]  # a family of one is not adjusted
    assert holm([]) == []


diffs = st.lists(st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 3)), min_size=1, max_size=9)


@settings(max_examples=60, deadline=None)
@given(diffs)
def test_sign_flip_matches_brute_force_and_its_symmetries(d):
    observed = abs(sum(d))
    brute = sum(abs(sum(s * x for s, x in zip(signs, d, strict=True))) >= observed - 1e-9
                for signs in itertools.product((1, -1), repeat=len(d))) / 2 ** len(d)  # fmt: skip
    p = sign_flip_test(d).p
    assert p == pytest.approx(brute)
    assert 2 / 2 ** len(d) - 1e-12 <= p <= 1.0
    assert sign_flip_test([-x for x in d]).p == pytest.approx(p)
    assert sign_flip_test([3.5 * x for x in d]).p == pytest.approx(p)
    assert sign_flip_test(list(reversed(d))).p == pytest.approx(p)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 2)), min_size=6, max_size=10))
def test_monte_carlo_agrees_with_exact(d):
    exact = sign_flip_test(d).p
    mc = sign_flip_test(d, max_exact=0, samples=40_000, seed=1).p
    assert abs(mc - exact) < 0.02  # 4.5 standard errors at p = 0.5


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), max_size=12))
def test_holm_properties(p):
    adj = holm(p)
    assert len(adj) == len(p)
    assert all(a >= x - 1e-15 and a <= 1.0 for a, x in zip(adj, p, strict=True))
    order = np.argsort(p, kind="stable")
    assert all(adj[i] <= adj[j] + 1e-15 for i, j in itertools.pairwise(order))  # the raw order is kept
    if p:
        assert min(adj) == pytest.approx(min(1.0, len(p) * min(p)))
