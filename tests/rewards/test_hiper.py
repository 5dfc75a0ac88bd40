"""HiPER's hierarchical advantage (segment returns G^H_k = sum_{t in k} r_t + gamma G^H_{k+1}, every turn's return
measured against the group's segment returns): worked examples computed by hand, the spec's reductions (one segment
per trajectory is GRPO, one turn per segment is GTPO), the segment helper and finiteness on empty segments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.rewards.advantages import TurnBatch, get_estimator, grpo, gtpo, hiper_advantages, subgoal_segments
from agentgym.rewards.advantages.hiper import subgoal_achieved

FAST = settings(max_examples=60, deadline=None, derandomize=True)
reward = st.sampled_from([0.0, 1.0, 0.5, -1.0, 2.0])


@st.composite
def batches(draw, max_n=8, min_t=0, max_t=5):
    n = draw(st.integers(0, max_n))
    rows = [np.array(draw(st.lists(reward, min_size=min_t, max_size=max_t))) for _ in range(n)]
    return rows, draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))


# rollout A: rewards [1, 0, 0, 2], segments [0, 0, 1, 1]; rollout B: rewards [0, 0, 1], segments [0, 1, 1]; gamma 1.
# A: G^H_1 = 0 + 2 = 2, G^L = [.., .., 2, 2]; G^H_0 = 1 + 0 + G^H_1 = 3, G^L at turn 1 = 0 + G^H_1 = 2 -> [3, 2, 2, 2]
# B: G^H_1 = 0 + 1 = 1 -> G^L [.., 1, 1]; G^H_0 = 0 + G^H_1 = 1 -> [1, 1, 1]
ROWS, SEGS = [[1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 1.0]], [[0, 0, 1, 1], [0, 1, 1]]


def test_worked_example_pooled_over_the_group():
    # population: G^H = [3, 2, 1, 1], mean 7/4, deviations [5/4, 1/4, -3/4, -3/4], variance (25+1+9+9)/16/4 = 11/16
    # std sqrt(11)/4: A = (G^L - 7/4) * 4/sqrt(11) -> A: [5, 1, 1, 1]/sqrt(11), B: [-3, -3, -3]/sqrt(11)
    a = hiper_advantages(ROWS, SEGS, ["q", "q"], eps=0.0)
    s = math.sqrt(11.0)
    assert a[0] == pytest.approx([5 / s, 1 / s, 1 / s, 1 / s], abs=1e-12)
    assert a[1] == pytest.approx([-3 / s] * 3, abs=1e-12)


def test_worked_example_per_segment_index():
    # segment 0: G^H A = 3, B = 1 -> mean 2, std 1: A's turns [3, 2] -> [1, 0]; B's turn [1] -> -1
    # segment 1: G^H A = 2, B = 1 -> mean 1.5, std 0.5: A's [2, 2] -> [1, 1]; B's [1, 1] -> [-1, -1]
    b = TurnBatch(ROWS, ["q", "q"], segments=SEGS)
    a = get_estimator("hiper")(b, by="segment", eps=0.0)
    assert [x.tolist() for x in a] == [[1.0, 0.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]


def test_worked_example_discount_between_segments_and_a_skipped_index():
    # A: rewards [0, 1] in segments [0, 2] (segment 1 empty, passed over), gamma 0.5:
    #    G^H_2 = 1, G^H_0 = 0 + 0.5 * 1 = 0.5;  B: rewards [0, 0] in [0, 0]: G^H_0 = 0
    # population [0.5, 1, 0], mean 0.5, variance (0 + 0.25 + 0.25)/3 = 1/6: A = [0, 0.5 * sqrt(6)], B = [-0.5 sqrt6]*2
    a = hiper_advantages([[0.0, 1.0], [0.0, 0.0]], [[0, 2], [0, 0]], [0, 0], gamma=0.5, eps=0.0)
    r6 = math.sqrt(6.0)
    assert a[0] == pytest.approx([0.0, 0.5 * r6], abs=1e-12) and a[1] == pytest.approx([-0.5 * r6] * 2, abs=1e-12)


@FAST
@given(batches(min_t=1))
def test_one_segment_per_trajectory_is_grpo(batch):
    # (a rollout without turns has no segment, so it is in no population; GRPO would count its outcome 0)
    rows, gids = batch
    outcome_only = [np.append(np.zeros(max(r.size - 1, 0)), r[-1:]) for r in rows]  # the reward on the last turn
    a = hiper_advantages(outcome_only, [np.zeros(r.size) for r in rows], gids)
    want = grpo([math.fsum(r) for r in outcome_only], gids)
    assert all(np.array_equal(x, np.full(r.size, w)) for x, r, w in zip(a, rows, want, strict=True))


@FAST
@given(batches(), st.sampled_from([1.0, 0.9, 0.5, 0.0]))
def test_one_turn_per_segment_is_gtpo(batch, gamma):
    rows, gids = batch
    a = hiper_advantages(rows, [np.arange(r.size) for r in rows], gids, gamma=gamma)
    assert all(np.array_equal(x, y) for x, y in zip(a, gtpo(rows, gids, gamma=gamma), strict=True))


@FAST
@given(batches(), st.data())
def test_finite_with_empty_segments_and_the_planner_turn_leads_its_segment(batch, data):
    rows, gids = batch
    segs = [np.cumsum(data.draw(st.lists(st.integers(0, 3), min_size=r.size, max_size=r.size))) for r in rows]
    for by in ("group", "segment"):
        a = hiper_advantages(rows, segs, gids, by=by)
        assert [x.size for x in a] == [r.size for r in rows] and all(np.isfinite(x).all() for x in a)
    # with rewards >= 0 the return-to-go shrinks along a segment: its planner turn has the largest advantage
    a = hiper_advantages([np.abs(r) for r in rows], segs, gids)
    for x, s in zip(a, segs, strict=True):
        for k in set(s.tolist()):
            seg = x[s == k]
            assert np.all(np.diff(seg) <= 1e-12)


def test_subgoal_segments_from_turn_texts():
    texts = ["<subgoal>find the key</subgoal> go north", "go east", "take key",
             "<subgoal>open\nthe door</subgoal>open door", "<subgoal>leave</subgoal>", "go west"]  # fmt: skip
    assert subgoal_segments(texts) == [0, 0, 0, 1, 2, 2]
    assert subgoal_segments(["look", "<subgoal>x</subgoal>"]) == [0, 1]  # an untagged first turn is segment 0
    assert subgoal_segments(["<subgoal>unclosed", "<plan>a</plan>"]) == [0, 0]
    assert subgoal_segments(["a", "<plan>b</plan>"], tag="plan") == [0, 1]
    assert subgoal_segments([]) == []


def test_edge_cases():
    assert hiper_advantages([], [], []) == []
    out = hiper_advantages([[], [1.0], [2.0, 0.0]], [[], [0], [0, 1]], ["a", "a", "b"])
    assert out[0].shape == (0,) and all(np.isfinite(x).all() for x in out)
    assert hiper_advantages([[1.0, 1.0]], [[0, 1]], [0], by="segment")[0].tolist() == [0.0, 0.0]  # singleton cells
    with pytest.raises(ValueError, match="nondecreasing"):
        TurnBatch([[1.0, 0.0]], [0], segments=[[1, 0]])
    with pytest.raises(ValueError, match="nondecreasing"):
        hiper_advantages([[1.0, 0.0]], [[1, 0]], [0])
    with pytest.raises(ValueError, match="segments"):
        get_estimator("hiper")(TurnBatch([[1.0]], [0]))
    with pytest.raises(ValueError, match="by"):
        hiper_advantages([[1.0]], [[0]], [0], by="turn")


def test_subgoal_achieved_from_the_plan_length():
    # segments [0, 0, 1, 1, 2]; plan length 5 at reset, then 4, 4 | 6, 5 | 5.
    # segment 0: 5 -> 4 (shorter: achieved, on its last turn 1); segment 1: 4 -> 5 (longer: a detour, not);
    # segment 2: 5 -> 5 (unchanged: not)
    infos = [{"plan_length": 4}, {"plan_length": 4}, {"plan_length": 6}, {"plan_length": 5}, {"plan_length": 5}]
    assert subgoal_achieved([0, 0, 1, 1, 2], {"plan_length": 5}, infos) == [0.0, 1.0, 0.0, 0.0, 0.0]
    # a net gain counts even after a detour inside the segment: 5 -> 6 -> 3
    assert subgoal_achieved([0, 0], {"plan_length": 5}, [{"plan_length": 6}, {"plan_length": 3}]) == [0.0, 1.0]
    # an unknown distance at either end is not achieved; no key anywhere is None (the env does not know)
    assert subgoal_achieved([0, 1], {}, [{"plan_length": 3}, {"plan_length": 1}]) == [0.0, 1.0]
    assert subgoal_achieved([0], {"plan_length": 2}, [{}]) is None
    assert subgoal_achieved([], {}, []) is None
    with pytest.raises(ValueError, match="segment indices"):
        subgoal_achieved([0, 0], {}, [{}])


def test_achieved_bonus_is_a_segment_end_reward():
    # ROWS/SEGS with A's segment 0 (turns 0-1) verified achieved, bonus 2: A's rewards become [1, 2, 0, 2], B's
    # unchanged. A: G^H_1 = 2, G^H_0 = 1 + 2 + 2 = 5, G^L = [5, 4, 2, 2]; B: G^H = [1, 1], G^L = [1, 1, 1].
    # population [5, 2, 1, 1]: mean 9/4, deviations [11, -1, -5, -5]/4, variance (121+1+25+25)/16/4 = 43/16.
    # A = (G^L - 9/4) * 4/sqrt(43): A: [11, 7, -1, -1]/sqrt(43); B: [-5, -5, -5]/sqrt(43)
    b = TurnBatch(ROWS, ["q", "q"], segments=SEGS, subgoal_achieved=[[0, 1, 0, 0], [0, 0, 0]])
    a = get_estimator("hiper")(b, eps=0.0, achieved_bonus=2.0)
    s = math.sqrt(43.0)
    assert a[0] == pytest.approx([11 / s, 7 / s, -1 / s, -1 / s], abs=1e-12)
    assert a[1] == pytest.approx([-5 / s] * 3, abs=1e-12)
    # bonus 0 reads nothing: the same as without the field
    plain = get_estimator("hiper")(TurnBatch(ROWS, ["q", "q"], segments=SEGS), eps=0.0)
    assert all(np.array_equal(x, y) for x, y in zip(get_estimator("hiper")(b, eps=0.0), plain, strict=True))
    with pytest.raises(ValueError, match="subgoal_achieved"):
        get_estimator("hiper")(TurnBatch(ROWS, ["q", "q"], segments=SEGS), achieved_bonus=1.0)
    with pytest.raises(ValueError, match="one entry per turn"):
        TurnBatch(ROWS, ["q", "q"], segments=SEGS, subgoal_achieved=[[0, 1], [0, 0, 0]])


def _noise_variance(means: list[float], sigma: float, draws: int = 400, g: int = 8) -> tuple[np.ndarray, ...]:
    """Per turn, the variance over reward-noise draws of the advantage of two-segment rollouts (three turns each;
    rewards ``means + sigma * N(0, 1)``, one group of ``g``) under hiper and under the flat turn-level estimate
    (every turn its own segment: GTPO, i.e. critic-free turn GAE with gamma = lam = 1, z-scored over the group's
    turns), averaged over the group; and each one's variance over all draws, turns and rollouts."""
    rng = np.random.default_rng(0)
    t = len(means)
    hier, flat = [], []
    for _ in range(draws):
        r = list(np.asarray(means) + sigma * rng.standard_normal((g, t)))
        hier.append(hiper_advantages(r, [[0] * (t // 2) + [1] * (t // 2)] * g, [0] * g, eps=0.0))
        flat.append(hiper_advantages(r, [list(range(t))] * g, [0] * g, eps=0.0))
    h, f = np.asarray(hier), np.asarray(flat)
    return h.var(axis=0).mean(axis=0), f.var(axis=0).mean(axis=0), h.var(), f.var()


def test_variance_two_segment_toy_subgoal_rewards():
    """The spec's claim on the toy it fits: each subgoal pays 1 at its segment's end (means [0, 0, 1, 0, 0, 1])
    with noise sigma = 0.5. Measured (seed 0, 400 draws, group of 8): per turn hiper
    [1.009, 0.866, 0.719, 0.540, 0.397, 0.271] against flat [1.246, 1.018, 0.831, 0.645, 0.437, 0.270]: at most
    flat's on every turn but the last, where the two tie within 0.01 (0.271 against 0.270), and 0.853 against 1.0
    overall (the flat estimate is z-scored over exactly the turns it is measured on, so
    its overall variance is 1 by construction)."""
    per_h, per_f, all_h, all_f = _noise_variance([0.0, 0.0, 1.0, 0.0, 0.0, 1.0], 0.5)
    assert per_h == pytest.approx([1.009, 0.866, 0.719, 0.540, 0.397, 0.271], abs=2e-3)
    assert per_f == pytest.approx([1.246, 1.018, 0.831, 0.645, 0.437, 0.270], abs=2e-3)
    assert np.all(per_h[:-1] < per_f[:-1]) and per_h[-1] <= per_f[-1] + 0.01
    assert all_h == pytest.approx(0.853, abs=2e-3) and all_f == pytest.approx(1.0)


def test_variance_claim_fails_with_rewards_at_segment_starts():
    """Where the claim does not hold: rewards at each segment's start (means [1, 0, 0, 1, 0, 0]) with little noise
    (sigma = 0.1). The executor turns' returns-to-go then sit below every segment return of the population, far
    from its mean in units of its small std: hiper's overall variance is 1.745 against flat's 1.0, and its last
    turns vary more than flat's (0.080 and 0.056 against 0.035 and 0.019)."""
    per_h, per_f, all_h, all_f = _noise_variance([1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 0.1)
    assert all_h == pytest.approx(1.745, abs=2e-3) and all_f == pytest.approx(1.0)
    assert per_h[-2:] == pytest.approx([0.080, 0.056], abs=2e-3)
    assert per_f[-2:] == pytest.approx([0.035, 0.019], abs=2e-3)
