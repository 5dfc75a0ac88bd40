"""SERL (GRPO reweighted across turns by env feedback): worked examples computed by hand from
A_{i,t} = A^GRPO_i * w_{i,t}, w = (1 + kappa c) / mean_t (1 + kappa c); the criticality helper on hand-built step
infos; the spec's properties (sign kept, kappa = 0 is GRPO, mean over turns is A^GRPO) and edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.rewards.advantages import (
    SERL_FEATURES,
    TurnBatch,
    get_estimator,
    grpo,
    serl_advantages,
    serl_criticality,
)
from agentgym.rewards.advantages.serl import KNOWN_FEATURES, agrees, expert_references

FAST = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def batches(draw, max_n=8):
    n = draw(st.integers(0, max_n))
    r = draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, -1.0]), min_size=n, max_size=n))
    crit = [draw(st.lists(st.floats(0, 1), min_size=0, max_size=5)) for _ in range(n)]
    return np.array(r), crit, draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))


def test_worked_example():
    # R = [1, 0] in one group, eps = 0: A^GRPO = [1, -1]; kappa = 2.
    # rollout 0: c = [1, 0, 0.5] -> 1 + 2c = [3, 1, 2], mean 2 -> w = [1.5, 0.5, 1] -> A = [1.5, 0.5, 1]
    # rollout 1: c = [0, 1] -> [1, 3], mean 2 -> w = [0.5, 1.5] -> A = -1 * w = [-0.5, -1.5]
    a = serl_advantages([1.0, 0.0], [[1.0, 0.0, 0.5], [0.0, 1.0]], [0, 0], kappa=2.0, eps=0.0)
    assert [x.tolist() for x in a] == [[1.5, 0.5, 1.0], [-0.5, -1.5]]
    b = TurnBatch([[0.0, 0.0, 1.0], [0.0, 0.0]], [0, 0], criticality=[[1.0, 0.0, 0.5], [0.0, 1.0]])
    assert [x.tolist() for x in get_estimator("serl")(b, kappa=2.0, eps=0.0)] == [[1.5, 0.5, 1.0], [-0.5, -1.5]]


def test_criticality_from_step_infos():
    reset = {"anchor": "s0", "progress": 0.0}
    infos = [{"anchor": "s1", "progress": 0.25}, {"anchor": "s1", "parse_error": True},
             {"anchor": "s1", "action_valid": False, "progress": 2.0}]  # fmt: skip
    obs = ["You move north.", "Nothing happens.", [{"role": "user", "content": "ok"}]]
    # step 0: invalid 0, no_effect 0, anchor s0 -> s1: 1, progress |0.25 - 0| = 0.25 -> (0+0+1+0.25)/4 = 0.3125
    # step 1: parse_error 1, "Nothing happens." 1, anchor kept 0, no progress key 0 -> 2/4 = 0.5
    # step 2: action_valid False 1, no_effect 0, anchor 0, |2.0 - 0.25| clipped to 1 -> 2/4 = 0.5
    assert serl_criticality(infos, obs, reset) == [0.3125, 0.5, 0.5]
    # only the invalid-action feature: [0, 1, 1]; anchors only: [1, 0, 0]
    assert serl_criticality(infos, reset_info=reset, features=("invalid",)) == [0.0, 1.0, 1.0]
    assert serl_criticality(infos, reset_info=reset, features=("anchor_change",)) == [1.0, 0.0, 0.0]
    # no anchor anywhere is no change
    assert serl_criticality([{}, {}], reset_info={}, features=("anchor_change", "progress")) == [0.0, 0.0]
    assert serl_criticality([], [], {}) == []
    with pytest.raises(ValueError, match="observations"):
        serl_criticality(infos, reset_info=reset)  # no_effect needs the observations
    with pytest.raises(ValueError, match="features"):
        serl_criticality(infos, obs, reset, features=("novelty",))
    assert set(SERL_FEATURES) == {"invalid", "no_effect", "anchor_change", "progress"}


@FAST
@given(batches(), st.floats(0, 10))
def test_sign_kept_and_mean_over_turns_is_grpo(batch, kappa):
    r, crit, g = batch
    a_grpo = grpo(r, g)
    a = serl_advantages(r, crit, g, kappa=kappa)
    for ai, ag in zip(a, a_grpo, strict=True):
        assert np.all(np.sign(ai) == np.sign(ag))
        if ai.size:
            assert math.fsum(ai) / ai.size == pytest.approx(ag, abs=1e-12)


@FAST
@given(batches())
def test_kappa_zero_is_grpo_exactly(batch):
    r, crit, g = batch
    a_grpo = grpo(r, g)
    for ai, ag, c in zip(serl_advantages(r, crit, g, kappa=0.0), a_grpo, crit, strict=True):
        assert np.array_equal(ai, np.full(len(c), ag))


@FAST
@given(batches(), st.floats(0.1, 10))
def test_more_critical_turns_get_more_magnitude(batch, kappa):
    r, crit, g = batch
    for ai, c in zip(serl_advantages(r, crit, g, kappa=kappa), crit, strict=True):
        order = np.argsort(c, kind="stable")
        assert np.all(np.diff(np.abs(ai[order])) >= -1e-12)


def test_edge_cases():
    assert serl_advantages([], [], []) == []
    out = serl_advantages([1.0, 0.0, 3.0], [[], [0.5], [1.0, 0.0]], ["a", "a", "b"])
    assert out[0].shape == (0,) and out[2].tolist() == [0.0, 0.0]  # zero turns; singleton group b
    with pytest.raises(ValueError, match="kappa"):
        serl_advantages([1.0], [[0.5]], [0], kappa=-0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        serl_advantages([1.0], [[1.5]], [0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        TurnBatch([[1.0]], [0], criticality=[[-0.1]])
    with pytest.raises(ValueError, match="criticality"):
        get_estimator("serl")(TurnBatch([[1.0]], [0]))


def test_agreement_with_the_reference_action():
    assert agrees("go to desk 1", "go to desk 1") and agrees(" Go  to DESK 1.", "go to desk 1")
    assert agrees("<action>go to desk 1</action>", "go to desk 1")
    assert agrees("<subgoal>find the key</subgoal> go to desk 1", "go to desk 1")
    assert not agrees("go to desk 2", "go to desk 1") and not agrees("<action>look</action>", "go to desk 1")
    # a one-block reference (SearchQA's demonstration) needs a block of the same tag and content
    assert agrees("<think>who?</think>\n<search> Paris mayor</search>", "<search> paris mayor </search>")
    assert not agrees("<answer> paris mayor </answer>", "<search> paris mayor </search>")
    assert not agrees("<search> paris </search>", "<search> paris mayor </search>")
    # the oracle action of a turn is the first command of the plan of the state it was played in
    reset = {"expert_plan": ["go to desk 1", "open drawer 1"]}
    infos = [{"expert_plan": ["open drawer 1"]}, {"expert_plan": []}, {}]
    assert expert_references(reset, infos) == ["go to desk 1", "open drawer 1", None]


def test_off_reference_feature_by_hand():
    infos = [{"anchor": "s1"}, {"anchor": "s1"}, {"anchor": "s2"}]
    actions = ["go to desk 1", "look", "open drawer 1"]
    refs = ["go to desk 1", "open drawer 1", None]
    # off_reference alone: agrees 0, departs 1, no reference 0 -> [0, 1, 0]
    got = serl_criticality(infos, reset_info={"anchor": "s0"}, features=("off_reference",), actions=actions,
                           references=refs)  # fmt: skip
    assert got == [0.0, 1.0, 0.0]
    # with anchor_change (s0 -> s1: 1, kept: 0, s1 -> s2: 1): means [(1+0)/2, (0+1)/2, (1+0)/2] = [0.5, 0.5, 0.5]
    got = serl_criticality(infos, reset_info={"anchor": "s0"}, features=("anchor_change", "off_reference"),
                           actions=actions, references=refs)  # fmt: skip
    assert got == [0.5, 0.5, 0.5]
    assert "off_reference" in KNOWN_FEATURES and "off_reference" not in SERL_FEATURES  # not a default
    with pytest.raises(ValueError, match="reference"):
        serl_criticality(infos, features=("off_reference",), actions=actions)
    with pytest.raises(ValueError, match="references"):
        serl_criticality(infos, features=("off_reference",), actions=actions, references=refs[:2])


def test_the_features_knob_is_checked_by_the_estimator():
    b = TurnBatch([[0.0], [1.0]], [0, 0], criticality=[[1.0], [0.0]])
    same = get_estimator("serl")(b, features=("invalid", "off_reference"))
    assert [x.tolist() for x in same] == [x.tolist() for x in get_estimator("serl")(b)]
    with pytest.raises(ValueError, match="features"):
        get_estimator("serl")(b, features=("novelty",))
