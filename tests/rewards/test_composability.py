"""Reward pieces compose: step wrappers stacked on SearchQA, then a post-episode scorer, then an estimator."""

import math

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.rewards.advantages import TurnBatch, get_estimator
from agentgym.rewards.base import annotate
from agentgym.rewards.wrappers import FormatPenalty, PotentialShaping, ProgressReward
from agentgym.running.runner import make_agent, run_episode

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from agentgym.rewards.answer_scoring import LocalAnswerScorer  # noqa: E402
from agentgym.rewards.information import InformationGain  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model  # noqa: E402


def make_stack():
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny", max_turns=4)
    env = FormatPenalty(env, penalty=0.1)
    env = ProgressReward(env, scale=0.5)
    return PotentialShaping(env, potential=lambda obs, info: info["turn"] / 4, gamma=1.0)


def test_wrappers_then_information_gain_then_advantages():
    env = make_stack()
    group = []
    for k, agent_name in enumerate(["oracle", "heuristic", "random", "random"]):
        agent = make_agent(agent_name, env)
        group.append(run_episode(env, agent, seed=10 + k, options={"task_index": 3}, env_id="agentgym/SearchQA-v0"))
    env.close()
    assert len({t.task_id for t in group}) == 1

    expected_names = {"format", "progress", "shaping"}
    for traj in group:
        for turn in traj.turns:
            comps = turn.info["reward_components"]
            assert expected_names <= set(comps), comps
            assert math.isclose(turn.reward, sum(comps.values()), abs_tol=1e-9)
    # the final step of an answered episode carries the env's outcome too
    assert "outcome" in group[0].turns[-1].info["reward_components"]

    scores = InformationGain(LocalAnswerScorer(*build_tiny_model(seed=0)))(group)
    annotate(group, scores)
    for traj, s in zip(group, scores, strict=True):
        assert s.all_valid and len(s.rewards) == len(traj.turns)
        for turn, r in zip(traj.turns, s.rewards, strict=True):
            comps = turn.info["reward_components"]
            assert comps["info_gain"] == pytest.approx(r)
            assert (expected_names | {"info_gain"}) <= set(comps)
            assert math.isclose(turn.reward, sum(comps.values()), abs_tol=1e-9)
        assert math.isclose(traj.total_reward, sum(sum(t.info["reward_components"].values()) for t in traj.turns))

    batch = TurnBatch.from_trajectories(group)
    advantages = get_estimator("gtpo")(batch)
    assert [len(a) for a in advantages] == [len(t.turns) for t in group]
    assert all(np.isfinite(a).all() for a in advantages)
