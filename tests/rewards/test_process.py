"""G-RA, PRM Clip and PRM Delta (docs/rewards.md, 'G-RA, PRM Clip and PRM Delta'), their scorer adapters on real
SearchQA trajectories, and the batch properties (empty and T=1 inputs, determinism, permutation equivariance)."""

import math

import gymnasium as gym
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.rewards.base import ScorerError, TurnScorer, TurnScores, annotate
from agentgym.rewards.process import (
    Chain,
    ComponentScorer,
    GatedAccumulation,
    PRMClip,
    PRMDelta,
    TransformedScorer,
    gated_return,
    outcome_of,
)
from agentgym.rewards.wrappers import ProgressReward
from agentgym.running.runner import make_agent, run_episode

SETTINGS = settings(max_examples=200, deadline=None)
FLOATS = st.floats(-10, 10, allow_nan=False, allow_infinity=False)
REWARDS = st.lists(FLOATS, max_size=12)


@SETTINGS
@given(rewards=REWARDS, outcome=FLOATS, delta=FLOATS)
def test_gra_gate(rewards, outcome, delta):
    gated = GatedAccumulation(delta)(rewards, outcome=outcome)
    if outcome < delta:
        assert gated == [0.0] * len(rewards)
        assert gated_return(rewards, outcome, delta) == outcome  # exactly the outcome
    else:
        assert gated == rewards
        assert gated_return(rewards, outcome, delta) == pytest.approx(outcome + sum(rewards))


@SETTINGS
@given(rewards=REWARDS, eta=FLOATS)
def test_prm_clip_is_never_positive(rewards, eta):
    clipped = PRMClip(eta)(rewards)
    assert len(clipped) == len(rewards)
    assert all(c <= 0.0 for c in clipped)
    assert all(c == min(r - eta, 0.0) for c, r in zip(clipped, rewards, strict=True))


@SETTINGS
@given(rewards=REWARDS)
def test_prm_delta_telescopes_to_the_first_reward(rewards):
    delta = PRMDelta()(rewards)
    assert len(delta) == len(rewards)
    assert sum(delta) == pytest.approx(rewards[0] if rewards else 0.0, abs=1e-9)
    if rewards:
        assert delta[-1] == rewards[-1]


@SETTINGS
@given(rewards=REWARDS, eta=FLOATS, outcome=FLOATS)
def test_transforms_handle_empty_and_single_turns_without_nan(rewards, eta, outcome):
    for transform in (GatedAccumulation(0.0), PRMClip(eta), PRMDelta(), Chain((PRMClip(eta), PRMDelta()))):
        for rs in ([], rewards[:1], rewards):
            out = transform(rs, outcome=outcome)
            assert len(out) == len(rs) and not any(math.isnan(x) for x in out)
            assert out == transform(rs, outcome=outcome)  # deterministic


def test_chain_and_turn_scores():
    chain = Chain((GatedAccumulation(delta=0.5), PRMClip(eta=0.2), PRMDelta()))
    assert chain([0.5, 0.1, 0.3], outcome=1.0) == pytest.approx([0.1, -0.1, 0.0])  # clip: [0, -0.1, 0]
    assert chain([0.5, 0.1, 0.3], outcome=0.0) == pytest.approx([0.0, 0.0, -0.2])  # gate, then clip: all -0.2
    scores = TurnScores("prm", [0.4, math.nan, 0.9])
    assert scores.valid == [True, False, True]
    clipped = PRMClip(eta=0.5)(scores)
    assert isinstance(clipped, TurnScores) and clipped.name == "prm"
    assert clipped.valid == [True, False, True] and clipped.rewards[0] == pytest.approx(-0.1)
    delta = PRMDelta()(scores)
    assert delta.valid == [False, False, True]  # r_1 - r_2 is unknown when r_2 is
    closed = GatedAccumulation(delta=1.0)(scores, outcome=0.0)
    assert closed.rewards == [0.0, 0.0, 0.0] and closed.all_valid  # a closed gate discards every turn
    opened = GatedAccumulation(delta=1.0)(scores, outcome=1.0)
    assert opened.valid == [True, False, True]
    with pytest.raises(ValueError, match="outcome"):
        GatedAccumulation()([1.0])


# ---------------------------------------------------------------- adapters on real SearchQA trajectories


@pytest.fixture(scope="module")
def trajs():
    env = ProgressReward(gym.make("agentgym/SearchQA-v0", dataset="tiny"))
    agents = [make_agent(name, env) for name in ("oracle", "heuristic", "random")]
    out = [run_episode(env, agent, seed=i, options={"task_index": i}) for i in range(8) for agent in agents]
    env.close()
    assert any(t.success for t in out) and any(not t.success for t in out)
    assert any(len(t.turns) == 1 for t in out)  # T = 1 episodes are in the mix
    return out


def fresh(trajs):
    from agentgym.contract.trajectory import Trajectory

    return [Trajectory.from_dict(t.to_dict()) for t in trajs]


def test_component_scorer_gra_on_searchqa(trajs):
    group = fresh(trajs)
    scores = ComponentScorer("progress", GatedAccumulation(delta=1.0), name="progress_gra")(group)
    for traj, s in zip(group, scores, strict=True):
        raw = [t.reward_components["progress"] for t in traj.turns]
        assert s.rewards == (raw if outcome_of(traj) >= 1.0 else [0.0] * len(raw))
    before = [[t.reward for t in traj.turns] for traj in group]
    annotate(group, scores)
    for traj, old in zip(group, before, strict=True):
        for turn, r in zip(traj.turns, old, strict=True):
            assert sum(turn.reward_components.values()) == pytest.approx(turn.reward)
            assert turn.reward == pytest.approx(r + turn.reward_components["progress_gra"])
        if not traj.success:  # the gate is closed: the gated term adds nothing to the return
            assert sum(t.reward_components["progress_gra"] for t in traj.turns) == 0.0


def test_component_scorer_clip_and_delta_on_searchqa(trajs):
    clip = ComponentScorer("progress", PRMClip(eta=0.3), name="clip")(trajs)
    delta = ComponentScorer("progress", PRMDelta(), name="delta")(trajs)
    for traj, c, d in zip(trajs, clip, delta, strict=True):
        raw = [t.reward_components["progress"] for t in traj.turns]
        assert all(x <= 0 for x in c.rewards)
        assert sum(d.rewards) == pytest.approx(raw[0])
    # info source: the raw progress level, as a PRM score
    levels = ComponentScorer("progress", source="info", name="level")(trajs)
    assert [s.rewards for s in levels] == [[t.info["progress"] for t in traj.turns] for traj in trajs]


def test_scorers_are_permutation_equivariant_and_deterministic(trajs):
    scorer = ComponentScorer("progress", Chain((GatedAccumulation(1.0), PRMDelta())), name="x")
    perm = list(range(len(trajs)))[::-1][1::2] + list(range(len(trajs)))[::2]
    a = scorer(trajs)
    b = scorer([trajs[i] for i in perm])
    assert [s.rewards for s in b] == [a[i].rewards for i in perm]
    assert [s.rewards for s in scorer(trajs)] == [s.rewards for s in a]
    assert scorer([]) == []


def test_missing_component_is_invalid_not_zero(trajs):
    group = fresh(trajs[:3])
    scores = ComponentScorer("no_such_component")(group)
    assert all(not ok for s in scores for ok in s.valid)
    with pytest.raises(ScorerError):
        annotate(group, scores)
    assert ComponentScorer("no_such_component", missing=0.0)(group)[0].all_valid


def test_transformed_scorer(trajs):
    class Constant(TurnScorer):
        name = "const"

        def score_group(self, group):
            return [TurnScores(self.name, [0.7] * len(t.turns)) for t in group]

    scores = TransformedScorer(Constant(), GatedAccumulation(1.0), name="const_gra")(trajs)
    for traj, s in zip(trajs, scores, strict=True):
        assert s.name == "const_gra"
        assert s.rewards == [0.7 if traj.success else 0.0] * len(traj.turns)
    assert TransformedScorer(Constant(), PRMClip(0.5)).name == "const"
    custom = TransformedScorer(Constant(), GatedAccumulation(0.5), outcome=lambda t: float(len(t.turns) == 1))
    assert [s.rewards[0] for s in custom(trajs)] == [0.7 if len(t.turns) == 1 else 0.0 for t in trajs]
