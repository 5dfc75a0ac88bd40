"""PAR (docs/rewards.md, 'PAR: preference as reward'): the sigmoid transform by hand, its stated properties (bounded,
1/2 at the reference, shift invariance, slope <= 1/4, monotone), the per-task scorer, reference rewards from
reference trajectories, and finiteness on empty and one-turn inputs."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import TurnScores
from agentgym.rewards.par import PARScorer, PreferenceAsReward, reference_rewards, sigmoid
from agentgym.rewards.process import ComponentScorer, TransformedScorer

SETTINGS = settings(max_examples=200, deadline=None)
FLOATS = st.floats(-30, 30, allow_nan=False, allow_infinity=False)
REFS = st.lists(FLOATS, min_size=1, max_size=5)


def traj(task, components, agent="x"):
    turns = [Turn("a", [], sum(c.values()), False, False, {"reward_components": c}) for c in components]
    return Trajectory("e", 0, task, agent, [], {}, turns=turns)


def test_worked_example():
    # references (0, 1), r = 1: (sigmoid(1) + sigmoid(0)) / 2 = (0.731059 + 0.5) / 2 = 0.615529
    assert PreferenceAsReward((0.0, 1.0))([1.0]) == pytest.approx([0.615529], abs=1e-6)
    # average="reference": sigmoid(1 - (0 + 1) / 2) = sigmoid(0.5) = 1 / (1 + e^-0.5) = 1 / 1.606531 = 0.622459
    assert PreferenceAsReward((0.0, 1.0), average="reference")([1.0]) == pytest.approx([0.622459], abs=1e-6)
    # outcome level: the total 0.2 + 0.8 = 1 against reference 3: sigmoid(-2) = 1 / (1 + e^2) = 0.119203, last turn
    assert PreferenceAsReward((3.0,), level="outcome")([0.2, 0.8]) == pytest.approx([0.0, 0.119203], abs=1e-6)


@SETTINGS
@given(r=FLOATS, refs=REFS, c=FLOATS, average=st.sampled_from(["sigmoid", "reference"]))
def test_bounded_centred_and_shift_invariant(r, refs, c, average):
    par = PreferenceAsReward(tuple(refs), average=average)
    v = par.value(r)
    assert 0.0 <= v <= 1.0  # in (0, 1) mathematically; float rounding reaches the ends far from the reference
    if abs(r - max(refs)) < 30 and abs(r - min(refs)) < 30:
        assert 0.0 < v < 1.0
    shifted = PreferenceAsReward(tuple(x + c for x in refs), average=average).value(r + c)
    assert shifted == pytest.approx(v, abs=1e-9)
    assert PreferenceAsReward((r,), average=average).value(r) == 0.5


@SETTINGS
@given(r=FLOATS, dr=st.floats(1e-3, 5), refs=REFS, average=st.sampled_from(["sigmoid", "reference"]))
def test_monotone_with_slope_at_most_a_quarter(r, dr, refs, average):
    par = PreferenceAsReward(tuple(refs), average=average)
    lo, hi = par.value(r), par.value(r + dr)
    assert hi >= lo
    assert (hi - lo) / dr <= 0.25 + 1e-12


def test_sigmoid_is_stable_and_nan_stays_nan():
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0 and sigmoid(0.0) == 0.5
    assert math.isnan(sigmoid(math.nan))
    scores = PreferenceAsReward((0.0,))(TurnScores("j", [math.nan, 0.0]))
    assert math.isnan(scores.rewards[0]) and scores.valid == [False, True] and scores.rewards[1] == 0.5


def test_empty_and_one_turn_inputs_are_finite():
    for level in ("turn", "outcome"):
        assert PreferenceAsReward((1.0,), level=level)([]) == []
        assert PreferenceAsReward((1.0,), level=level)([1.0]) == [0.5]


def test_empty_group_and_all_unscored_rows():
    scorer = PARScorer(ComponentScorer("judge"), {"q": [0.0]})
    assert scorer([]) == []
    scores = scorer([traj("q", [{}, {}])])[0]  # no judge score on any turn: NaN, invalid, never a silent 0
    assert scores.valid == [False, False] and all(math.isnan(x) for x in scores.rewards)
    outcome = PARScorer(ComponentScorer("judge"), {"q": [0.0]}, level="outcome")([traj("q", [{}, {}])])[0]
    assert outcome.valid == [False, False]


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        PreferenceAsReward(())
    with pytest.raises(ValueError):
        PreferenceAsReward((math.inf,))
    with pytest.raises(ValueError):
        PreferenceAsReward((0.0,), average="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PARScorer(ComponentScorer("outcome"), {}, m=0)


def test_scorer_uses_each_tasks_references_and_m():
    group = [traj("q1", [{"judge": 1.0}, {"judge": 3.0}]), traj("q2", [{"judge": 1.0}])]
    refs = {"q1": [1.0, 5.0], "q2": [3.0]}
    scores = PARScorer(ComponentScorer("judge"), refs, m=1)(group)
    # q1 against 1.0 only: sigmoid(0) = 0.5, sigmoid(2) = 0.880797; q2 against 3.0: sigmoid(-2) = 0.119203
    assert scores[0].rewards == pytest.approx([0.5, 0.880797], abs=1e-6)
    assert scores[1].rewards == pytest.approx([0.119203], abs=1e-6)
    assert {s.name for s in scores} == {"par"}
    # both references: (sigmoid(0) + sigmoid(-4)) / 2 = (0.5 + 0.017986) / 2 = 0.258993
    assert PARScorer(ComponentScorer("judge"), refs)(group)[0].rewards[0] == pytest.approx(0.258993, abs=1e-6)
    with pytest.raises(KeyError, match="q3"):
        PARScorer(ComponentScorer("judge"), refs)([traj("q3", [{"judge": 0.0}])])


def test_reference_rewards_from_reference_trajectories():
    refs = [traj("q1", [{"judge": 1.0}, {"judge": 3.0}], "oracle"), traj("q1", [{"judge": 0.0}], "oracle"),
            traj("q2", [{"outcome": 1.0}], "oracle"), traj("q2", [{}], "oracle")]  # fmt: skip
    # mean turn score of each reference: (1 + 3) / 2 = 2 and 0; q2's judge is missing (NaN): no reference
    assert reference_rewards(refs, ComponentScorer("judge")) == {"q1": [2.0, 0.0], "q2": []}
    outcome = ComponentScorer("outcome", missing=0.0)
    assert reference_rewards(refs, outcome, level="outcome") == {"q1": [0.0, 0.0], "q2": [1.0, 0.0]}


def test_outcome_level_on_the_outcome_component():
    """PAR on the outcome: the rollout's total outcome against the oracle's, on its last turn."""
    oracle = [traj("q", [{"outcome": 0.0}, {"outcome": 1.0}], "oracle")]
    outcome = ComponentScorer("outcome", missing=0.0)
    refs = reference_rewards(oracle, outcome, level="outcome")
    group = [traj("q", [{}, {"outcome": 1.0}]), traj("q", [{}, {}, {}])]
    scores = PARScorer(outcome, refs, level="outcome")(group)
    # success meets the oracle: sigmoid(0) = 0.5; failure: sigmoid(0 - 1) = 0.268941
    assert scores[0].rewards == [0.0, 0.5]
    assert scores[1].rewards == pytest.approx([0.0, 0.0, 0.268941], abs=1e-6)


def test_fixed_reference_through_transformed_scorer_is_deterministic():
    group = [traj("q", [{"judge": x}, {"judge": -x}]) for x in (0.5, 2.0)]
    scorer = TransformedScorer(ComponentScorer("judge"), PreferenceAsReward((0.0,)), "par")
    first, second = scorer(group), scorer(list(reversed(group)))
    assert [s.rewards for s in first] == [s.rewards for s in reversed(second)]
    assert all(a + b == pytest.approx(1.0) for s in first for a, b in [s.rewards])  # sigmoid(x) + sigmoid(-x) = 1
