"""LamPO (pairwise decomposed advantage, confidence-weighted): worked examples computed by hand from
A_i = 1/(G-1) sum_{j != i} w_ij (R_i - R_j), w_ij = 2 sigmoid(beta (l_worse - l_better)); the spec's properties
(beta = 0 is RLOO scaled by G/(G-1), sum 0, ties give 0) and edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.rewards.advantages import TurnBatch, get_estimator, lampo_advantages, rloo
from agentgym.rewards.advantages.lampo import reference_score, rouge_l

FAST = settings(max_examples=60, deadline=None, derandomize=True)
LN3 = math.log(3.0)  # sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4


@st.composite
def groups(draw, max_n=10):
    n = draw(st.integers(0, max_n))
    r = draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, -2.0, 3.0]), min_size=n, max_size=n))
    lp = draw(st.lists(st.floats(-6, 0, allow_subnormal=False), min_size=n, max_size=n))
    return np.array(r), np.array(lp), draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))


def test_worked_example_a_likelier_winner_gets_less_push():
    # G = 3, R = [1, 0, 0], l = [-1, -2, -1], beta = ln 3.
    # pair (0, 1): better 0 (l = -1), worse 1 (l = -2): w = 2 sigmoid(ln3 * (-2 - -1)) = 2 * 1/4 = 0.5
    # pair (0, 2): equal log-probs: w = 2 sigmoid(0) = 1;  pair (1, 2): R ties, the term is 0
    # A_0 = (0.5 * 1 + 1 * 1) / 2 = 0.75;  A_1 = 0.5 * (0 - 1) / 2 = -0.25;  A_2 = 1 * (0 - 1) / 2 = -0.5
    a = lampo_advantages([1.0, 0.0, 0.0], [-1.0, -2.0, -1.0], [0, 0, 0], beta=LN3)
    assert a == pytest.approx([0.75, -0.25, -0.5], abs=1e-15)


def test_worked_example_a_less_likely_winner_gets_more_push():
    # G = 2, R = [0, 1], l = [-1, -2], beta = ln 3: better 1 (l = -2), worse 0 (l = -1):
    # w = 2 sigmoid(ln3 * (-1 - -2)) = 2 * 3/4 = 1.5;  A_0 = 1.5 * (0 - 1) / 1 = -1.5, A_1 = 1.5
    a = lampo_advantages([0.0, 1.0], [-1.0, -2.0], ["q", "q"], beta=LN3)
    assert a == pytest.approx([-1.5, 1.5], abs=1e-15)


def test_estimator_reads_seq_logprobs_and_broadcasts():
    b = TurnBatch([[0.0, 1.0], [0.0]], ["q", "q"], seq_logprobs=[-2.0, -1.0])
    a = get_estimator("lampo")(b, beta=LN3)  # as above with the rollouts swapped: [1.5, 1.5], [-1.5]
    assert a[0] == pytest.approx([1.5, 1.5], abs=1e-15) and a[1] == pytest.approx([-1.5], abs=1e-15)
    with pytest.raises(ValueError, match="seq_logprobs"):
        get_estimator("lampo")(TurnBatch([[1.0]], [0]))
    with pytest.raises(ValueError, match="seq_logprobs"):
        TurnBatch([[1.0], [0.0]], [0, 0], seq_logprobs=[-1.0])


@FAST
@given(groups())
def test_beta_zero_is_scaled_rloo(batch):
    r, lp, g = batch
    a = lampo_advantages(r, lp, g, beta=0.0)
    # RLOO: R_i - mean_{j != i} R_j = (G R_i - sum R) / (G - 1), which is the beta = 0 LamPO exactly
    assert np.allclose(a, rloo(r, g), atol=1e-12)


@FAST
@given(groups(), st.floats(0, 20))
def test_sums_to_zero_per_group_and_orders_the_extremes(batch, beta):
    r, lp, g = batch
    a = lampo_advantages(r, lp, g, beta=beta)
    assert np.isfinite(a).all()
    for k in set(g):
        ix = np.array([i for i, x in enumerate(g) if x == k])
        assert math.fsum(a[ix]) == pytest.approx(0.0, abs=1e-9)
        assert np.all(a[ix][r[ix] == r[ix].max()] >= 0) and np.all(a[ix][r[ix] == r[ix].min()] <= 0)
        if np.all(r[ix] == r[ix][0]):
            assert np.all(a[ix] == 0)


@FAST
@given(groups(), st.floats(-3, 3))
def test_only_log_prob_differences_matter(batch, shift):
    r, lp, g = batch
    assert np.allclose(lampo_advantages(r, lp + shift, g), lampo_advantages(r, lp, g), atol=1e-9)


def test_edge_cases():
    assert lampo_advantages([], [], []).shape == (0,)
    assert lampo_advantages([1.0], [-1.0], [0]).tolist() == [0.0]
    assert lampo_advantages([1.0, 0.0], [0.0, -1e6], [0, 0], beta=1e6).tolist() == pytest.approx([0.0, 0.0])
    with pytest.raises(ValueError, match="beta"):
        lampo_advantages([1.0, 0.0], [0.0, 0.0], [0, 0], beta=float("inf"))


def test_rouge_l_by_hand():
    # "the cat sat on the mat" vs "the cat is on the mat": LCS "the cat on the mat" = 5 of 6 and 6 tokens:
    # P = R = 5/6 -> F = 5/6
    assert rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6, abs=1e-15)
    # "Barack Obama" vs "President Barack H. Obama" (tokens: barack obama / president barack h obama): LCS 2,
    # P = 2/2, R = 2/4 -> F = 2 * 1 * 0.5 / 1.5 = 2/3 (= 2 L / (m + n) = 4/6); case and punctuation ignored
    assert rouge_l("Barack Obama", "President Barack H. Obama") == pytest.approx(2 / 3, abs=1e-15)
    # order matters (a subsequence, not a bag): "b a" vs "a b": LCS 1 -> F = 2/4
    assert rouge_l("b a", "a b") == 0.5
    assert rouge_l("Paris", "paris.") == 1.0 and rouge_l("", "x") == 0.0 and rouge_l("x", "y") == 0.0
    # the best alias; no answer scores 0
    assert reference_score("in Paris", ["Lyon", "Paris"]) == pytest.approx(2 / 3, abs=1e-15)  # L 1, m 2, n 1
    assert reference_score(None, ["Paris"]) == 0.0 and reference_score("Paris", []) == 0.0


def test_reference_term_worked_example():
    # R = [1, 0], s = [0.5, 1] (reference scores), lam = 0.5, beta = 0: R' = [1.25, 0.5];
    # G = 2, w = 1: A_0 = 1.25 - 0.5 = 0.75, A_1 = -0.75, on every turn
    b = TurnBatch([[0.0, 1.0], [0.0]], ["q", "q"], seq_logprobs=[-1.0, -1.0], reference_scores=[0.5, 1.0])
    a = get_estimator("lampo")(b, beta=0.0, lam=0.5)
    assert a[0].tolist() == [0.75, 0.75] and a[1].tolist() == [-0.75]
    with pytest.raises(ValueError, match="reference_scores"):
        get_estimator("lampo")(TurnBatch([[1.0]], [0], seq_logprobs=[0.0]), lam=1.0)
    with pytest.raises(ValueError, match="lam"):
        get_estimator("lampo")(b, lam=-1.0)


@FAST
@given(groups(), st.floats(0, 3))
def test_lam_zero_is_bit_identical(batch, beta):
    r, lp, g = batch
    rows = [[x] for x in r]
    want = [np.full(1, x) for x in lampo_advantages(r, lp, g, beta)]  # today's lampo, broadcast
    scores = np.linspace(0, 1, r.size)
    for b in (TurnBatch(rows, g, seq_logprobs=lp), TurnBatch(rows, g, seq_logprobs=lp, reference_scores=scores)):
        got = get_estimator("lampo")(b, beta=beta, lam=0.0)
        assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
