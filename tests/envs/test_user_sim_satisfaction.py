"""The user-simulation envs' per-turn ``info["satisfaction"]``: the share of the goal the user stated in reply to the
turn, and the user's grade of the result on the last turn."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.running.episode import make_agent, run_episode

ENVS = ["Clarify-v0", "Preference-v0", "CustomerService-v0", "TwentyQuestions-v0"]


@pytest.mark.parametrize("env_id", ENVS)
def test_every_step_reports_satisfaction(env_id):
    env = gym.make(f"agentgym/{env_id}")
    traj = run_episode(env, make_agent("oracle", env), seed=1)
    sat = [t.info["satisfaction"] for t in traj.turns]
    assert all(0.0 <= s <= 1.0 for s in sat)
    final = traj.turns[-1].info
    assert sat[-1] == min(1.0, max(0.0, final["reward_components"].get("outcome", 0.0)))
    goal = traj.reset_info["gold"].get("goal") or {}
    opening = list(traj.reset_info["elicited"])
    # the non-final turns' satisfactions sum to the share of the goal stated after the opening message
    drawn = len(traj.turns[-2].info["elicited"]) - len(opening) if len(traj.turns) > 1 else 0
    assert sum(sat[:-1]) == pytest.approx(drawn / len(goal) if goal else 0.0)


def test_clarify_by_hand():
    env = gym.make("agentgym/Clarify-v0")
    _, info = env.reset(seed=1)
    goal = info["gold"]["goal"]
    missing = [k for k in goal if k not in info["elicited"]]
    assert len(goal) == 5 and missing
    # an invalid action and a message that draws nothing satisfy no one
    assert env.step("hello?")[4]["satisfaction"] == 0.0
    assert env.step("[action] Nice weather today.")[4]["satisfaction"] == 0.0
    # a question the user answers with one new detail: 1/5
    info = env.step(f"[action] What is your {missing[0]}?")[4]
    new = len(info["newly_elicited"])
    assert new >= 1 and info["satisfaction"] == new / 5
    # a wrong answer ends the episode with the user's grade 0
    _, _, terminated, _, info = env.step("[answer] nothing")
    assert terminated and info["satisfaction"] == 0.0
