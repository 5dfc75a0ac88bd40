"""TRUST-SQL's Dual-Track GRPO on synthetic phases: worked examples computed by hand (exploration turns get
z_group(R^exp), execution turns z_group(R^out), lam mixes the outcome into exploration turns), the spec's invariances
(each track ignores the other's rewards; lam = 1 or R^exp = R^out is GRPO), the phase helpers and edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.rewards.advantages import (
    TurnBatch,
    dual_track_advantages,
    exploration_reward,
    get_estimator,
    grpo,
    turn_phases,
)

FAST = settings(max_examples=60, deadline=None, derandomize=True)
reward = st.sampled_from([0.0, 1.0, 0.5, 0.25])
EXP, EXE = "exploration", "execution"


@st.composite
def batches(draw, max_n=8):
    n = draw(st.integers(0, max_n))
    phases = [draw(st.lists(st.sampled_from([EXP, EXE]), max_size=5)) for _ in range(n)]
    r_out = draw(st.lists(reward, min_size=n, max_size=n))
    r_exp = draw(st.lists(reward, min_size=n, max_size=n))
    return np.array(r_out), np.array(r_exp), phases, draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))


def test_worked_example():
    # one group of 3, eps = 0. R^out = [1, 0, 0]: mean 1/3, std sqrt(2)/3 -> A^out = [sqrt2, -1/sqrt2, -1/sqrt2]
    # R^exp = [0, 1, 1]: mean 2/3, the same std -> A^exp = [-sqrt2, 1/sqrt2, 1/sqrt2]
    # rollout 0 (found the answer without verifying the schema): exploration -sqrt2, execution sqrt2
    s2 = np.sqrt(2.0)
    phases = [[EXP, EXP, EXE], [EXP, EXE], [EXE]]
    a = dual_track_advantages([1.0, 0.0, 0.0], [0.0, 1.0, 1.0], phases, ["q"] * 3, eps=0.0)
    assert a[0] == pytest.approx([-s2, -s2, s2], abs=1e-12)
    assert a[1] == pytest.approx([1 / s2, -1 / s2], abs=1e-12)
    assert a[2] == pytest.approx([-1 / s2], abs=1e-12)
    # lam = 0.25 on exploration turns: 0.75 * A^exp + 0.25 * A^out -> rollout 0: 0.75*(-s2) + 0.25*s2 = -s2/2
    b = TurnBatch([[0.0, 0.0, 1.0], [0.0, 0.0], [0.0]], ["q"] * 3, phases=phases, exploration_rewards=[0.0, 1.0, 1.0])
    got = get_estimator("dual_track")(b, lam=0.25, eps=0.0)
    assert got[0] == pytest.approx([-s2 / 2, -s2 / 2, s2], abs=1e-12)
    assert got[1] == pytest.approx([0.5 / s2, -1 / s2], abs=1e-12)


@FAST
@given(batches(), st.data())
def test_each_track_ignores_the_other_tracks_rewards(batch, data):
    r_out, r_exp, phases, g = batch
    a = dual_track_advantages(r_out, r_exp, phases, g)
    # permuting the outcomes within each group moves no exploration-turn advantage (lam = 0) ...
    shuffled = r_out.copy()
    for k in set(g):
        ix = np.array([i for i, x in enumerate(g) if x == k])
        shuffled[ix] = r_out[data.draw(st.permutations(ix.tolist()))]
    # ... and new exploration rewards move no execution-turn advantage
    other = np.array(data.draw(st.lists(reward, min_size=len(g), max_size=len(g))))
    b = dual_track_advantages(shuffled, r_exp, phases, g)
    c = dual_track_advantages(r_out, other, phases, g)
    for p, x, y, z in zip(phases, a, b, c, strict=True):
        explore = np.array([q == EXP for q in p], dtype=bool)
        assert np.array_equal(x[explore], y[explore]) and np.array_equal(x[~explore], z[~explore])


@FAST
@given(batches())
def test_lam_one_or_equal_rewards_is_grpo(batch):
    r_out, r_exp, phases, g = batch
    want = grpo(r_out, g)
    for a in (dual_track_advantages(r_out, r_exp, phases, g, lam=1.0), dual_track_advantages(r_out, r_out, phases, g)):
        assert all(np.array_equal(x, np.full(len(p), w)) for x, p, w in zip(a, phases, want, strict=True))


def test_phase_and_exploration_reward_helpers():
    assert turn_phases([{}, {}, {}]) == [EXP, EXP, EXE]  # absent: the final turn executes
    assert turn_phases([{"phase": EXE}, {"phase": EXP}]) == [EXE, EXP]
    assert turn_phases([{"stage": EXE}, {}], key="stage") == [EXE, EXE]
    assert turn_phases([]) == []
    with pytest.raises(ValueError, match="unknown phase"):
        turn_phases([{"phase": "probe"}])
    assert exploration_reward([{"exploration_reward": 0.5}, {}]) == 0.5
    assert exploration_reward([{"exploration_reward": True}, {"exploration_reward": float("nan")}]) == 0.0
    assert exploration_reward([]) == 0.0


def test_edge_cases():
    assert dual_track_advantages([], [], [], []) == []
    out = dual_track_advantages([1.0, 0.0, 2.0], [0.0, 1.0, 3.0], [[], [EXP], [EXP, EXE]], ["a", "a", "b"])
    assert out[0].shape == (0,) and out[2].tolist() == [0.0, 0.0]  # zero turns; singleton group b
    with pytest.raises(ValueError, match="lam"):
        dual_track_advantages([1.0], [1.0], [[EXE]], [0], lam=1.5)
    with pytest.raises(ValueError, match="unknown phase"):
        TurnBatch([[1.0]], [0], phases=[["answer"]])
    with pytest.raises(ValueError, match="phases"):
        TurnBatch([[1.0]], [0], phases=[[EXP, EXE]])
    with pytest.raises(ValueError, match="exploration_rewards"):
        get_estimator("dual_track")(TurnBatch([[1.0]], [0], phases=[[EXE]]))
