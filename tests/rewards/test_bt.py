"""The Bradley-Terry reward transform (docs/rewards.md, 'BT reward transform'): U = sum_k log sigmoid(r_k - ref_k) by
hand, its stated properties (U <= 0, the slope sigmoid(ref - r) in (0, 1) and decreasing, exp(U) = the product of the
sigmoids, no property buys off another), numerical stability, fixed and group references, and finiteness; BT over K
judge properties with a rule judge on a loopback server."""

import math

import pytest
from hypothesis import given, settings, strategies as st
from rule_judge import serve_rule_judge

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.bt import BTScorer, LogSigmoidCentered, bt_judge, bt_utility, log_sigmoid
from agentgym.rewards.par import sigmoid

SETTINGS = settings(max_examples=200, deadline=None)
FLOATS = st.floats(-50, 50, allow_nan=False, allow_infinity=False)


def traj(components):
    turns = [Turn("a", [], sum(c.values()), False, False, {"reward_components": c}) for c in components]
    return Trajectory("e", 0, "q", "x", [], {}, turns=turns)


def test_worked_example():
    # sigmoid(2) = 1 / (1 + e^-2) = 0.880797, log = -0.126928; sigmoid(-1) = 1 / (1 + e) = 0.268941, log = -1.313262
    assert log_sigmoid(2.0) == pytest.approx(-0.126928, abs=1e-6)
    assert log_sigmoid(-1.0) == pytest.approx(-1.313262, abs=1e-6)
    assert bt_utility({"a": 2.0, "b": -1.0}, {"a": 0.0, "b": 0.0}) == pytest.approx(-1.440190, abs=1e-6)
    # group references: component a over the group's turns is (3, 1) -> mean 2; b is (0, 2) -> mean 1
    group = [traj([{"a": 3.0, "b": 0.0}]), traj([{"a": 1.0, "b": 2.0}])]
    scores = BTScorer(("a", "b"))(group)
    # rollout 1: log sigmoid(3 - 2) + log sigmoid(0 - 1) = -0.313262 - 1.313262 = -1.626523; rollout 2 the same
    assert [s.rewards[0] for s in scores] == pytest.approx([-1.626523, -1.626523], abs=1e-6)
    assert scores[0].extras["references"] == {"a": 2.0, "b": 1.0}


@SETTINGS
@given(rs=st.lists(FLOATS, min_size=1, max_size=5), refs=st.lists(FLOATS, min_size=5, max_size=5))
def test_utility_is_at_most_zero_and_is_the_log_of_the_product(rs, refs):
    names = [f"p{k}" for k in range(len(rs))]
    u = bt_utility(dict(zip(names, rs, strict=False)), dict(zip(names, refs, strict=False)))
    assert u <= 0.0
    product = math.prod(sigmoid(r - ref) for r, ref in zip(rs, refs, strict=False))
    assert math.exp(u) == pytest.approx(product, rel=1e-9, abs=1e-300)


@SETTINGS
@given(r=FLOATS, ref=FLOATS, dr=st.floats(1e-3, 1.0))
def test_slope_is_sigmoid_of_minus_the_centred_reward_and_decreases(r, ref, dr):
    t = LogSigmoidCentered(ref)
    h = 1e-6
    slope = (t([r + h])[0] - t([r - h])[0]) / (2 * h)
    assert slope == pytest.approx(sigmoid(ref - r), abs=1e-5)
    assert -1e-6 <= slope <= 1.0 + 1e-6  # in (0, 1) up to the finite difference's rounding
    assert sigmoid(ref - (r + dr)) <= sigmoid(ref - r)  # diminishing returns: the slope falls as r grows


def test_a_huge_property_cannot_offset_another_going_to_minus_infinity():
    refs = {"a": 0.0, "b": 0.0}
    assert bt_utility({"a": 1e300, "b": -math.inf}, refs) == -math.inf
    lows = [bt_utility({"a": 1e6, "b": -x}, refs) for x in (10.0, 1e3, 1e6)]
    assert lows == sorted(lows, reverse=True) and lows[-1] < -1e5  # U -> -inf with r_2 whatever r_1 is
    assert bt_utility({"a": 1e6, "b": 0.0}, refs) <= math.log(0.5)  # capped by the other property's log(1/2)


def test_log_sigmoid_is_stable():
    assert log_sigmoid(-800.0) == -800.0 and log_sigmoid(800.0) == 0.0  # no exp overflow at either end
    assert math.isfinite(log_sigmoid(-1e300)) and log_sigmoid(-math.inf) == -math.inf
    assert log_sigmoid(0.0) == pytest.approx(math.log(0.5))
    assert math.isnan(log_sigmoid(math.nan))
    for x in (-30.0, -1.0, 0.5, 30.0):
        assert log_sigmoid(x) == pytest.approx(math.log(1 / (1 + math.exp(-x))), rel=1e-12)


def test_fixed_reference_outcome_level_and_quantile():
    group = [traj([{"a": 1.0}, {"a": 2.0, "b": 4.0}]), traj([{"a": 0.0, "b": 0.0}])]
    # outcome level, fixed refs: rollout 1 totals a = 3, b = 4 -> log sigmoid(3 - 3) + log sigmoid(4 - 2), last turn
    fixed = BTScorer(("a", "b"), ref={"a": 3.0, "b": 2.0}, level="outcome")(group)
    assert fixed[0].rewards == pytest.approx([0.0, math.log(0.5) + log_sigmoid(2.0)])
    # the absent b on turn 1 reads 0.0; rollout 2: log sigmoid(-3) + log sigmoid(-2)
    assert fixed[1].rewards == pytest.approx([log_sigmoid(-3.0) + log_sigmoid(-2.0)])
    # group quantile 1.0 = the group's best value per component: a over turns (1, 2, 0) -> 2, b (0, 4, 0) -> 4
    best = BTScorer(("a", "b"), quantile=1.0)(group)
    assert best[0].extras["references"] == {"a": 2.0, "b": 4.0}
    assert best[0].rewards[1] == pytest.approx(2 * math.log(0.5))


def test_components_can_be_scorers_and_nan_marks_the_turn_invalid():
    class Judge(TurnScorer):
        name = "judge"

        def score_group(self, group):
            return [TurnScores(self.name, [math.nan if i else 1.0 for i in range(len(t.turns))]) for t in group]

    group = [traj([{"a": 0.0}, {"a": 0.0}])]
    scores = BTScorer((Judge(), "a"), ref={"judge": 1.0, "a": 0.0})(group)[0]
    assert scores.rewards[0] == pytest.approx(2 * math.log(0.5))
    assert math.isnan(scores.rewards[1]) and scores.valid == [True, False]


def test_empty_group_singleton_and_empty_trajectory_are_finite():
    assert BTScorer(("a",))([]) == []
    single = BTScorer(("a", "b"))([traj([{"a": 5.0, "b": -5.0}])])[0]  # its own mean: 2 * log(1/2)
    assert single.rewards == pytest.approx([2 * math.log(0.5)])
    for level in ("turn", "outcome"):
        assert BTScorer(("a",), level=level)([traj([])])[0].rewards == []


def test_all_unscored_rows_are_invalid_not_an_error():
    group = [traj([{"a": 1.0}, {"a": 2.0}]), traj([{"a": 0.0}])]
    scores = BTScorer(("a",), source="info", missing=math.nan)(group)  # no turn has info["a"]: every value NaN
    assert all(not any(s.valid) and all(math.isnan(x) for x in s.rewards) for s in scores)
    assert math.isnan(scores[0].extras["references"]["a"])  # no valid value to take a group mean of


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        BTScorer(())
    with pytest.raises(ValueError, match="no reference"):
        BTScorer(("a", "b"), ref={"a": 0.0})
    with pytest.raises(ValueError):
        BTScorer(("a",), ref="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        BTScorer(("a", "a"))
    with pytest.raises(ValueError):
        BTScorer(("a",), quantile=2.0)


def test_group_reference_is_order_independent():
    group = [traj([{"a": float(i), "b": float(-i)}, {"a": 0.5, "b": 1.0}]) for i in range(4)]
    first = BTScorer(("a", "b"))(group)
    second = BTScorer(("a", "b"))(list(reversed(group)))
    assert [s.rewards for s in first] == [s.rewards for s in reversed(second)]


# BT over K LLM-judge properties: a rule judge on a real loopback server grading SearchQA rollouts.


def judge_reply(system: str, user: str) -> str:
    """The rule judge grades the whole trajectory on the rubric's property: "Count the searches." gives 5 points a
    search (of 10), "Reward an answer." 10 when the trajectory ends on an answer and 0 otherwise."""
    actions = [s[len("assistant\n") :].split("\n\n---\n")[0] for s in user.split("### ") if s.startswith("assistant\n")]
    if "Count the searches." in system:
        return f"Score: {min(10, 5 * sum('<search>' in a for a in actions))}/10"
    return f"Score: {10 if '<answer>' in actions[-1] else 0}/10"


@pytest.fixture(scope="module")
def judge():
    from agentgym.tools.llm import LLMClient

    with serve_rule_judge(judge_reply) as server:
        client = LLMClient(server.url, api_key_env=None, max_retries=0, timeout=10.0)
        yield client, server
        client.close()


def play(actions):
    """SearchQA (tiny) task 3 played with fixed actions."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.contract.agent import Agent
    from agentgym.running.runner import run_episode

    class Scripted(Agent):
        name = "scripted"

        def act(self, messages, info):
            return actions[int(info["turn"])]

    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    try:
        return run_episode(env, Scripted(), seed=3)
    finally:
        env.close()


RUBRICS = {"searches": "Count the searches.", "answer": "Reward an answer."}


@pytest.mark.slow
def test_bt_judge_by_hand(judge):
    client, state = judge
    search, answer = "<search> Faralder film </search>", "<answer> Nobody </answer>"
    # (searches, answer) grades: A (0, 1), B (0.5, 1), C six searches, truncated without an answer (1, 0)
    group = [play([answer]), play([search, answer]), play([search] * 6)]
    assert [len(t.turns) for t in group] == [1, 2, 6] and group[2].turns[-1].truncated
    before = len(state.requests)
    scores = bt_judge(client, RUBRICS)(group)
    assert len(state.requests) - before == 6  # K = 2 properties x 3 rollouts, each graded once
    # group references: searches (0 + 0.5 + 1) / 3 = 0.5, answer (1 + 1 + 0) / 3 = 2/3
    # sigmoid(-0.5) = 1 / (1 + 1.648721) = 0.377541, log -0.974077; sigmoid(1/3) = 1 / (1 + 0.716531) = 0.582570,
    # log -0.540305; sigmoid(0.5) = 0.622459, log -0.474077; sigmoid(-2/3) = 1 / (1 + 1.947734) = 0.339244,
    # log -1.081036; log sigmoid(0) = -0.693147
    # U_A = -0.974077 - 0.540305 = -1.514382; U_B = -0.693147 - 0.540305 = -1.233452;
    # U_C = -0.474077 - 1.081036 = -1.555113, each on the rollout's last turn
    assert scores[0].rewards == pytest.approx([-1.514382], abs=1e-6)
    assert scores[1].rewards == pytest.approx([0.0, -1.233452], abs=1e-6)
    assert scores[2].rewards == pytest.approx([0.0] * 5 + [-1.555113], abs=1e-6)
    assert scores[0].extras["references"] == pytest.approx({"searches": 0.5, "answer": 2 / 3})
    # no property buys off another: C searches most but never answers and scores lowest
    assert max(s.rewards[-1] for s in scores) == scores[1].rewards[-1] and all(s.rewards[-1] <= 0 for s in scores)
    # a fixed reference of 0 on both: A gets log sigmoid(0) + log sigmoid(1) = -0.693147 - 0.313262 = -1.006409
    fixed = bt_judge(client, RUBRICS, ref={"searches": 0.0, "answer": 0.0})(group[:1])
    assert fixed[0].rewards == pytest.approx([-1.006409], abs=1e-6)
    # the default properties: three judges, one request each
    assert [s.name for s in bt_judge(client).scorers] == ["relevance", "form", "correctness"]
    assert bt_judge(client, RUBRICS)([]) == []
    with pytest.raises(ValueError):
        bt_judge(client, {})
