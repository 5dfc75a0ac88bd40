"""GOPO (rank-only group advantages): worked examples computed by hand from A_i = (rank_i - (G+1)/2) / ((G-1)/2),
the spec's properties (invariance to strictly increasing maps, sum 0, ties and singletons give 0) and edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.rewards.advantages import TurnBatch, get_estimator, gopo_advantages, gopo_turns, mean_ranks

FAST = settings(max_examples=60, deadline=None, derandomize=True)
# a grid on [-3, 3]: distinct values stay distinct under exp(3R) + 7 in floating point (ties are frequent)
values = st.integers(-30, 30).map(lambda k: k / 10)


@st.composite
def groups(draw, max_n=10):
    n = draw(st.integers(0, max_n))
    return np.array(draw(st.lists(values, min_size=n, max_size=n))), draw(st.lists(st.integers(0, 2), min_size=n,
                                                                                    max_size=n))  # fmt: skip


def test_worked_example_from_the_spec():
    # R = [0.1, 5, 2, 2]: ranks 1, 4, and 2.5 for the tie (ranks 2 and 3 shared); G = 4, (G+1)/2 = 2.5,
    # (G-1)/2 = 1.5: A = [(1-2.5)/1.5, (4-2.5)/1.5, 0, 0] = [-1, 1, 0, 0]
    assert gopo_advantages([0.1, 5.0, 2.0, 2.0], [0, 0, 0, 0]).tolist() == [-1.0, 1.0, 0.0, 0.0]
    assert mean_ranks([0.1, 5.0, 2.0, 2.0]).tolist() == [1.0, 4.0, 2.5, 2.5]


def test_worked_example_two_groups_and_zscore_spread():
    # group a: R = [3, 1, 2] -> ranks [3, 1, 2], G = 3: A = (rank - 2) / 1 = [1, -1, 0]
    # group b: R = [7, 7, 9, 0, 7] -> ranks: 0 -> 1; the three 7s share ranks 2, 3, 4 -> 3; 9 -> 5.
    # G = 5: (rank - 3) / 2 -> 7s: 0, 9: 1, 0: -1
    a = gopo_advantages([3.0, 7.0, 1.0, 7.0, 9.0, 2.0, 0.0, 7.0], ["a", "b", "a", "b", "b", "a", "b", "b"])
    assert a.tolist() == [1.0, 0.0, -1.0, 0.0, 1.0, 0.0, -1.0, 0.0]
    # zscore spread, group a: ranks [3, 1, 2], mean 2, population std sqrt(2/3): A = (rank-2)/sqrt(2/3), eps = 0
    z = gopo_advantages([3.0, 1.0, 2.0], [0, 0, 0], spread="zscore", eps=0.0)
    assert z == pytest.approx([1 / math.sqrt(2 / 3), -1 / math.sqrt(2 / 3), 0.0], abs=1e-15)


def test_turn_level_ranks_per_group_and_turn_index():
    # returns (undiscounted reward-to-go): A [1, 2] -> [3, 2]; B [0, 0, 1] -> [1, 1, 1]; C [2] -> [2]
    # turn 0 cell: [3, 1, 2] -> ranks [3, 1, 2], G=3 -> [1, -1, 0]; turn 1 cell: [2, 1] -> [1, -1];
    # turn 2 cell: B alone -> 0
    rows = [[1.0, 2.0], [0.0, 0.0, 1.0], [2.0]]
    got = gopo_turns(rows, ["q", "q", "q"])
    assert [g.tolist() for g in got] == [[1.0, 1.0], [-1.0, -1.0, 0.0], [0.0]]
    est = get_estimator("gopo")(TurnBatch(rows, ["q"] * 3), level="turn")
    assert [g.tolist() for g in est] == [[1.0, 1.0], [-1.0, -1.0, 0.0], [0.0]]


def test_estimator_broadcasts_the_outcome_rank_to_every_turn():
    b = TurnBatch([[0.0, 1.0], [0.0, 0.0], [2.0]], ["g", "g", "g"])  # outcomes 1, 0, 2 -> ranks 2, 1, 3
    assert [x.tolist() for x in get_estimator("gopo")(b)] == [[0.0, 0.0], [-1.0, -1.0], [1.0]]


@FAST
@given(groups())
def test_invariant_to_strictly_increasing_maps_and_sums_to_zero(batch):
    r, g = batch
    a = gopo_advantages(r, g)
    assert np.array_equal(gopo_advantages(np.exp(3 * r) + 7, g), a)  # exp(3R)+7 keeps the order of R on [-3, 3]
    assert np.array_equal(gopo_advantages(r**3 - 2, g), a)
    for k in set(g):
        ix = [i for i, x in enumerate(g) if x == k]
        assert math.fsum(a[ix]) == pytest.approx(0.0, abs=1e-12)
        assert np.all(np.abs(a[ix]) <= 1.0)


@FAST
@given(groups())
def test_zscore_spread_is_a_positive_multiple_of_linear(batch):
    r, g = batch
    lin, z = gopo_advantages(r, g), gopo_advantages(r, g, spread="zscore")
    assert np.array_equal(np.sign(lin), np.sign(z))
    for k in set(g):
        ix = [i for i, x in enumerate(g) if x == k]
        if np.any(lin[ix] != 0):
            ratio = z[ix][lin[ix] != 0] / lin[ix][lin[ix] != 0]
            assert np.allclose(ratio, ratio[0])


def test_ties_singletons_and_empty():
    assert gopo_advantages([2.0, 2.0, 2.0], [0, 0, 0]).tolist() == [0.0, 0.0, 0.0]
    assert gopo_advantages([5.0], ["x"]).tolist() == [0.0]
    assert gopo_advantages([], []).shape == (0,)
    assert gopo_advantages([2.0, 2.0], [0, 0], spread="zscore").tolist() == [0.0, 0.0]
    assert gopo_turns([[], [1.0]], [0, 0])[0].shape == (0,)
    with pytest.raises(ValueError, match="spread"):
        gopo_advantages([1.0, 2.0], [0, 0], spread="log")
    with pytest.raises(ValueError, match="level"):
        get_estimator("gopo")(TurnBatch([[1.0]], [0]), level="token")
    with pytest.raises(ValueError, match="NaN"):
        gopo_advantages([1.0, float("nan")], [0, 0])
