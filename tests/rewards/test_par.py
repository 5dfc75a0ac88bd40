"""PAR (docs/rewards.md, 'PAR: preference as reward'): the sigmoid transform by hand, its stated properties (bounded,
1/2 at the reference, shift invariance, slope <= 1/4, monotone), the per-task scorer, reference rewards from
reference trajectories, and finiteness on empty and one-turn inputs; PAR over a rule judge on a loopback server with
SearchQA's demonstration agent (or the group) as the reference."""

import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st
from rule_judge import serve_rule_judge

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import TurnScores
from agentgym.rewards.judge import JudgeScorer
from agentgym.rewards.par import DemoReferences, PARScorer, PreferenceAsReward, par_judge, reference_rewards, sigmoid
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


# PAR over an LLM judge: a rule judge on a real loopback server, reference trajectories from SearchQA's
# demonstration agent replaying the task.


def judge_reply(system: str, user: str) -> str:
    """The rule judge: a trajectory earns 2 points per search and 4 for ending on an answer (of 10); a turn earns
    5 for a search, 9 for an answer; anything with GARBLE gets a reply without a score."""
    actions = [s[len("assistant\n") :].split("\n\n---\n")[0] for s in user.split("### ") if s.startswith("assistant\n")]
    if any("GARBLE" in a for a in actions):
        return "I cannot tell."
    if "whole trajectory" in user:
        points = 2 * sum("<search>" in a for a in actions) + 4 * ("<answer>" in actions[-1])
        return f"Score: {min(points, 10)}/10"
    return "Score: 9/10" if "<answer>" in actions[-1] else "Score: 5/10" if "<search>" in actions[-1] else "Score: 0"


@pytest.fixture(scope="module")
def judge():
    from agentgym.tools.llm import LLMClient

    with serve_rule_judge(judge_reply) as server:
        client = LLMClient(server.url, api_key_env=None, max_retries=0, timeout=10.0)
        yield client, server
        client.close()


def play(actions, seed=3):
    """SearchQA (tiny) task ``seed`` played with fixed actions, recorded as the trainer's scorers see it."""
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
        return run_episode(env, Scripted(), seed=seed, env_kwargs={"dataset": "tiny"})
    finally:
        env.close()


@pytest.fixture(scope="module")
def group():
    """One task, two rollouts: an answer at once (judge 4/10), a search then an answer (2 + 4 = 6/10)."""
    return [
        play(["<answer> Nobody </answer>"]),
        play(["<search> Faralder film </search>", "<answer> Nobody </answer>"]),
    ]


def test_demo_references_replay_the_task(group):
    ref = DemoReferences()(group)  # one replay for the one task of the group
    assert len(ref) == 1 and ref[0].task_id == group[0].task_id and ref[0].success
    # the demonstration agent searches twice, then answers: the rule judge's 2 + 2 + 4 = 8/10
    assert [t.action.split()[0] for t in ref[0].turns] == ["<search>", "<search>", "<answer>"]
    assert len(DemoReferences(n=2, max_turns=1)(group[:1])[0].turns) == 1
    with pytest.raises(ValueError, match="not 'other'"):  # the settings do not recreate the trajectory's task
        DemoReferences()([dataclasses.replace(group[0], task_id="other")])
    with pytest.raises(ValueError, match="no demonstration agent"):
        DemoReferences()([dataclasses.replace(group[0], env_id="CartPole-v1", env_kwargs={})])
    with pytest.raises(ValueError):
        DemoReferences(n=0)


def test_par_judge_against_the_demonstration(judge, group):
    client, state = judge
    before = len(state.requests)
    scores = par_judge(client)(group)
    assert len(state.requests) - before == 3  # the two rollouts and one reference, each graded once
    # r_ref = 0.8 (the demonstration); sigmoid(0.4 - 0.8) = 1 / (1 + e^0.4) = 1 / 2.491825 = 0.401312,
    # sigmoid(0.6 - 0.8) = 1 / (1 + e^0.2) = 1 / 2.221403 = 0.450166, each on the rollout's last turn
    assert scores[0].rewards == pytest.approx([0.401312], abs=1e-6)
    assert scores[1].rewards == pytest.approx([0.0, 0.450166], abs=1e-6)
    assert all(s.all_valid and s.name == "par" and s.extras["references"] == [0.8] for s in scores)
    # per turn: the demonstration's mean turn grade (0.5 + 0.5 + 0.9) / 3 = 0.633333; the answer 0.9 gives
    # sigmoid(0.266667) = 1 / (1 + e^-0.266667) = 1 / 1.765928 = 0.566274; a search 0.5 gives
    # sigmoid(-0.133333) = 1 / (1 + e^0.133333) = 1 / 2.142631 = 0.466716
    turn = par_judge(client, level="turn")(group)
    assert turn[0].rewards == pytest.approx([0.566274], abs=1e-6)
    assert turn[1].rewards == pytest.approx([0.466716, 0.566274], abs=1e-6)


def test_par_judge_against_the_group(judge, group):
    client, _ = judge
    scores = par_judge(client, reference="group")(group)
    # references 0.4 and 0.6: (sigmoid(0) + sigmoid(-0.2)) / 2 = (0.5 + 0.450166) / 2 = 0.475083 and
    # (sigmoid(0.2) + sigmoid(0)) / 2 = (0.549834 + 0.5) / 2 = 0.524917: a mean win probability, so they sum to 1
    assert scores[0].rewards == pytest.approx([0.475083], abs=1e-6)
    assert scores[1].rewards == pytest.approx([0.0, 0.524917], abs=1e-6)
    assert scores[0].rewards[-1] + scores[1].rewards[-1] == pytest.approx(1.0)
    assert par_judge(client, reference="group")(group[:1])[0].rewards == [0.5]  # a singleton ties with itself
    assert par_judge(client)([]) == []
    with pytest.raises(ValueError):
        par_judge(client, reference="oracle")  # type: ignore[arg-type]


def test_an_unscorable_reference_leaves_the_rollouts_unscored(judge, group):
    client, _ = judge
    garbled = [dataclasses.replace(group[0], turns=[Turn("GARBLE", [], 0.0, True, False, {})])]
    scorer = PARScorer(JudgeScorer(client, mode="trajectory"), lambda g: garbled, level="outcome")
    scores = scorer(group)
    assert all(not any(s.valid) and all(math.isnan(x) for x in s.rewards) for s in scores)  # never a made-up centre
    assert "references" in scores[0].extras["errors"]
