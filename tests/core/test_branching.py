"""Branching: snapshot at any turn, then any continuation, restore, the same continuation -> the same episode;
also into a fresh env, another process, and through wrappers."""

import json
import pickle
import subprocess
import sys
from functools import cache

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.contract.branching import branch, restore, snapshot
from agentgym.contract.env import SnapshotError
from agentgym.rewards.wrappers import CountTable, NoveltyBonus, PotentialShaping, ProgressReward, StepCost

HOUSEHOLD = ("agentgym/Household-v0", {"split": "train", "expert_plan": True, "max_turns": 30})
SEARCH_QA = ("agentgym/SearchQA-v0", {"dataset": "tiny", "split": "train", "invalid_action_penalty": 0.1})
JUNK = ("fly to the moon", "", "<action>", "go to", "take")


@cache
def make(which: str) -> gym.Env:
    env_id, kwargs = HOUSEHOLD if which == "household" else SEARCH_QA
    return gym.make(env_id, **kwargs)


def action(env: gym.Env, info: dict, choice: int) -> str:
    """An action picked by ``choice`` from what makes sense in the current state (plus junk)."""
    if choice < 0:
        return JUNK[-choice % len(JUNK)]
    if "admissible_commands" in info:
        return info["admissible_commands"][choice % len(info["admissible_commands"])]
    gold = info["gold"]
    vocab = [f"<search> {q} </search>" for q in gold["oracle_queries"]]
    vocab += ["<search> river delta </search>", f"<answer> {gold['answers'][0]} </answer>", "<answer> no </answer>"]
    return vocab[choice % len(vocab)]


def play(env: gym.Env, info: dict, choices: list[int]) -> tuple[list[str], dict]:
    """Step through ``choices`` until the episode ends; each step recorded as canonical JSON."""
    record = []
    for c in choices:
        out = env.step(action(env, info, c))
        record.append(json.dumps(list(out), sort_keys=True))
        info = out[4]
        if out[2] or out[3]:
            break
    return record, info


def start(env: gym.Env, task: int, prefix: list[int]) -> dict:
    _, info = env.reset(seed=task, options={"task_index": task})
    for c in prefix:
        out = env.step(action(env, info, c))
        if out[2] or out[3]:
            return env.reset(seed=task, options={"task_index": task})[1]
        info = out[4]
    return info


choices = st.lists(st.integers(-5, 60), max_size=12)


@pytest.mark.parametrize("which", ["household", "searchqa"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=st.integers(0, 39), prefix=choices, continuation=choices, other=choices)
def test_restore_then_the_same_continuation_gives_the_same_episode(which, task, prefix, continuation, other):
    env = make(which)
    info = start(env, task, prefix)
    snap = snapshot(env)
    first, _ = play(env, info, continuation)
    restore(env, snap)
    play(env, info, other)  # any other continuation in between changes nothing
    restore(env, snap)
    again, _ = play(env, info, continuation)
    assert again == first
    twin = gym.make(*(HOUSEHOLD if which == "household" else SEARCH_QA)[:1], **env.unwrapped.spec_kwargs())
    restore(twin, pickle.loads(pickle.dumps(snap)))
    assert play(twin, info, continuation)[0] == first  # a fresh env of the same spec continues identically


CHILD = """
import json, pickle, sys
import gymnasium as gym
import agentgym
from agentgym.contract.branching import restore
env_id, kwargs, actions = json.loads(sys.argv[1])
env = gym.make(env_id, **kwargs)
with open(sys.argv[2], "rb") as f:
    restore(env, pickle.load(f))
print(json.dumps([json.dumps(list(env.step(a)), sort_keys=True) for a in actions]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("which", ["household", "searchqa"])
def test_a_snapshot_continues_identically_in_another_process(which, tmp_path):
    env_id, kwargs = HOUSEHOLD if which == "household" else SEARCH_QA
    env = gym.make(env_id, **kwargs)
    info = start(env, 5, [3, 1, 4, 1] if which == "household" else [0])
    (tmp_path / "snap.pkl").write_bytes(pickle.dumps(snapshot(env)))
    actions, here = [], []
    for c in [5, 9, 2, -1, 6] if which == "household" else [1, -2, 0]:
        actions.append(action(env, info, c))
        out = env.step(actions[-1])
        here.append(json.dumps(list(out), sort_keys=True))
        info = out[4]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([env_id, kwargs, actions]), str(tmp_path / "snap.pkl")],
        capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "123", "PATH": ""},
    )  # fmt: skip
    assert json.loads(done.stdout) == here


def test_branch_gives_k_independent_continuations_through_reward_wrappers():
    def stack() -> gym.Env:
        env = gym.make("agentgym/Household-v0", split="train", expert_plan=True)
        env = ProgressReward(env)
        env = PotentialShaping(env, lambda obs, info: -0.1 * info["plan_length"], gamma=1.0)
        return NoveltyBonus(StepCost(env, 0.01), CountTable(), episodic=0.05)

    env = stack()
    _, info = env.reset(seed=0, options={"task_index": 7})
    plan = info["expert_plan"]
    env.step(plan[0])
    env.step("look")
    kids = branch(env, 3, make_env=stack)
    assert [k.unwrapped.turn for k in kids] == [2, 2, 2]
    outs = [k.step(plan[1]) for k in kids]
    assert outs[0] == outs[1] == outs[2]
    assert env.step(plan[1]) == outs[0]  # the original continues the same way, untouched by its branches
    kids[0].step("look")
    assert kids[1].unwrapped.turn == 3 and kids[0].unwrapped.turn == 4
    comps = outs[0][4]["reward_components"]
    assert set(comps) == {"progress", "shaping", "step_cost", "novelty"}
    assert comps["novelty"] == pytest.approx(0.1 + 0.05)  # unseen state, first visit in the episode


def test_branching_refuses_what_it_cannot_copy_faithfully():
    class Opaque(gym.Wrapper):  # keeps episode state without declaring it
        pass

    env = Opaque(gym.make(*SEARCH_QA[:1], **SEARCH_QA[1]))
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="Opaque does not declare its episode state"):
        snapshot(env)
    plain = gym.make(*SEARCH_QA[:1], **SEARCH_QA[1])
    plain.reset(seed=0)
    with pytest.raises(ValueError, match=r"through wrappers \['OrderEnforcing', 'PassiveEnvChecker'\], not \[\]"):
        restore(plain.unwrapped, snapshot(plain))
    other = gym.make("agentgym/SearchQA-v0", dataset="tiny", split="test")
    with pytest.raises(
        ValueError, match=r"built with other arguments \(differing: \['invalid_action_penalty', 'split'\]"
    ):
        restore(other, snapshot(plain))
    household = gym.make("agentgym/Household-v0")
    with pytest.raises(ValueError, match="cannot restore into"):
        restore(household, snapshot(plain))


@pytest.mark.parametrize("which", ["household", "searchqa"])
def test_envs_pickle_mid_episode_and_the_copy_continues_identically(which):
    env_id, kwargs = HOUSEHOLD if which == "household" else SEARCH_QA
    env = gym.make(env_id, **kwargs)
    info = start(env, 3, [2, 0])
    clone = pickle.loads(pickle.dumps(env))
    assert type(clone) is type(env) and clone.unwrapped.turn == env.unwrapped.turn
    assert play(clone, info, [1, 2, 3, -1, 4])[0] == play(env, info, [1, 2, 3, -1, 4])[0]
