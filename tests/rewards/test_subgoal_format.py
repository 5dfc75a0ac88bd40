"""HiPER's planner/executor format wrapper: the format rule on hand-written turns, the env playing the turn without
the subgoal block, a malformed turn marked invalid (the env's own verdict kept), the penalty in the components, the
note at reset and the wrapper resolved from its card name."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.components import wrapper_specs
from agentgym.contract.branching import restore, snapshot
from agentgym.rewards.advantages import subgoal_segments
from agentgym.rewards.subgoal_format import SUBGOAL_NOTE, SubgoalFormat, strip_subgoal, subgoal_format_error


@pytest.mark.parametrize(
    ("text", "first", "error"),
    [
        ("<subgoal>find the key</subgoal> go to desk 1", True, None),
        ("  <subgoal>find the key</subgoal>\ngo to desk 1", False, None),
        ("go to desk 1", False, None),  # an executor turn: the action alone
        ("go to desk 1", True, "The first turn must open a subgoal"),
        ("go to desk 1 <subgoal>find the key</subgoal>", False, "must open the turn"),
        ("<subgoal>a</subgoal><subgoal>b</subgoal> go", False, "at most one subgoal"),
        ("<subgoal>find the key go to desk 1", False, "Unpaired"),
        ("find the key</subgoal> go", False, "Unpaired"),
        ("<subgoal> </subgoal> go to desk 1", True, "empty"),
    ],
)
def test_format_rule(text, first, error):
    got = subgoal_format_error(text, first)
    assert got is None if error is None else error in got


def test_strip_keeps_the_action_and_segments_read_the_same_tags():
    turns = ["<subgoal>find the key</subgoal> go to desk 1", "open drawer 1", "<subgoal>use it</subgoal>\nopen door"]
    assert [strip_subgoal(t) for t in turns] == ["go to desk 1", "open drawer 1", "open door"]
    assert subgoal_segments(turns) == [0, 0, 1]


def household() -> gym.Env:
    return gym.make("agentgym/Household-v0", split="train", expert_plan=True)


def test_the_env_plays_the_turn_without_the_block():
    env = SubgoalFormat(household(), penalty=0.5)
    obs, info = env.reset(seed=0, options={"task_index": 3})
    assert obs[0]["content"].startswith(SUBGOAL_NOTE + "\n\n")
    first = info["expert_plan"][0]  # 'go to cabinet 10'
    obs, reward, _, _, info = env.step(f"<subgoal>get the object</subgoal> {first}")
    # the env parsed "go to cabinet 10" (the raw turn would be "not a valid command"): valid, plan one shorter
    assert info["action_valid"] and info["parse_error"] is None and info["plan_length"] == 6
    assert reward == 0.0 and info["reward_components"]["format"] == 0.0
    # an executor turn without a block is well formed; the env's own verdict on it is kept
    obs, reward, _, _, info = env.step("dance")
    assert info["action_valid"] is False and "not a valid command" in info["parse_error"]
    assert "subgoal" not in info["parse_error"]


def test_a_malformed_turn_is_invalid_and_penalised():
    env = SubgoalFormat(household(), penalty=0.5, note=False)
    obs, info = env.reset(seed=0, options={"task_index": 3})
    assert not obs[0]["content"].startswith(SUBGOAL_NOTE)
    plan = info["expert_plan"]
    # a valid command without the first subgoal: the env moves (plan 7 -> 6) but the turn is invalid, -0.5
    _, reward, _, _, info = env.step(plan[0])
    assert info["action_valid"] is False and info["parse_error"].startswith("The first turn must open a subgoal")
    assert info["plan_length"] == 6 and reward == -0.5
    assert sum(info["reward_components"].values()) == reward
    # an invalid command with a misplaced block: both messages, the env's first
    _, reward, _, _, info = env.step("dance <subgoal>x</subgoal>")
    assert info["parse_error"].index("not a valid command") < info["parse_error"].index("must open the turn")
    # Household charges nothing for an invalid command (its invalid_action_penalty is 0): the reward is the -0.5
    assert reward == -0.5 and info["reward_components"] == {"format": -0.5}


def test_the_first_turn_rule_follows_snapshots():
    env = SubgoalFormat(household(), note=False)
    env.reset(seed=0, options={"task_index": 3})
    snap = snapshot(env)
    env.step("<subgoal>a</subgoal> look")
    assert env.step("look")[-1]["action_valid"]  # not the first turn any more
    restore(env, snap)
    assert env.step("look")[-1]["action_valid"] is False  # back at the first turn


def test_resolved_from_its_card_name():
    (spec,) = wrapper_specs([{"name": "subgoal_format", "penalty": 0.2}])
    assert spec.cls is SubgoalFormat and spec.component == "format" and dict(spec.kwargs) == {"penalty": 0.2}
    with pytest.raises(ValueError, match="penalty"):
        SubgoalFormat(household(), penalty=float("nan"))
