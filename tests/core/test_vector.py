"""Vector envs out of the box: ``gym.make_vec`` sync and async (shared memory by default) agree step for step, and
groups of sub-envs reset with one seed stay on a common task across automatic resets."""

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from agentgym.contract.spaces import Chat, ChatSharedMemory
from agentgym.envs.example import GuessNumberEnv
from agentgym.running.runner import group_seeds

HOUSEHOLD = {"split": "train", "difficulty": "easy", "expert_plan": True, "max_turns": 12}


class TinySlot(GuessNumberEnv):
    """The example env with a 64-byte shared-memory slot: its prompt does not fit."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.observation_space = Chat(shared_memory_bytes=64)


@pytest.fixture(scope="module", autouse=True)
def tiny_slot_registered():
    gym.register("test/TinySlot-v0", entry_point=TinySlot)
    yield
    del gym.registry["test/TinySlot-v0"]


KEYS = ("task_id", "anchor", "turn")


def policy(i: int, step: int, info: dict[str, Any]) -> str:
    """Sub-env 0 of each group of 3 follows the expert plan; the others pick admissible commands by a formula."""
    if i % 3 == 0:
        plan = info["expert_plan"][i]
        return plan[0] if len(plan) else "look"
    commands = info["admissible_commands"][i]
    return commands[(7 * step + 3 * i) % len(commands)]


def rollout(mode: str, steps: int = 40, **vector_kwargs: Any) -> list[str]:
    envs = gym.make_vec("agentgym/Household-v0", num_envs=6, vectorization_mode=mode, vector_kwargs=vector_kwargs,
                        **HOUSEHOLD)  # fmt: skip
    obs, info = envs.reset(seed=group_seeds(11, 2, 3))
    record = [json.dumps([list(obs), info["task_id"].tolist(), info["anchor"].tolist()])]
    for step in range(steps):
        obs, reward, terminated, truncated, info = envs.step([policy(i, step, info) for i in range(6)])
        flags = [terminated.tolist(), truncated.tolist()]
        record.append(json.dumps([list(obs), reward.tolist(), *flags, *(info[k].tolist() for k in KEYS)]))
    envs.close()
    return record


@pytest.mark.slow
def test_sync_and_async_vector_envs_give_the_same_trajectories():
    sync = rollout("sync")
    assert rollout("async") == sync  # shared memory (Gymnasium's default)
    assert rollout("async", shared_memory=False) == sync
    assert sum(any(json.loads(r)[2]) or any(json.loads(r)[3]) for r in sync[1:]) >= 3  # autoresets happened


def test_groups_stay_on_one_task_across_automatic_resets():
    envs = gym.make_vec("agentgym/Household-v0", num_envs=6, vectorization_mode="sync", **HOUSEHOLD)
    _, info = envs.reset(seed=group_seeds(3, 2, 3))
    tasks: list[list[str]] = [[t] for t in info["task_id"]]
    ended = np.zeros(6, dtype=bool)
    for step in range(80):
        actions = [policy(i, step, info) for i in range(6)]
        _, _, terminated, truncated, info = envs.step(actions)
        for i in np.flatnonzero(ended):  # next-step autoreset: this step reset sub-env i
            assert info["turn"][i] == 0
            tasks[i].append(info["task_id"][i])
        ended = terminated | truncated
    envs.close()
    episodes = [len(t) for t in tasks]
    assert len(set(episodes)) > 1  # members finish at different times ...
    for g in range(2):
        members = tasks[3 * g : 3 * g + 3]
        shortest = min(len(m) for m in members)
        assert shortest >= 2 and all(m[:shortest] == members[0][:shortest] for m in members)  # ... on the same tasks
    assert tasks[0][0] != tasks[3][0]  # and the two groups play different tasks


@pytest.mark.filterwarnings("ignore:.*(Worker|Traceback|exception back).*:UserWarning")
def test_an_observation_larger_than_the_shared_memory_slot_stops_with_what_to_do():
    envs = gym.make_vec("test/TinySlot-v0", num_envs=2, vectorization_mode="async")
    with pytest.raises(ValueError, match=r"does not fit the 64-byte shared-memory slot.*'shared_memory': False"):
        envs.reset(seed=0)
    envs.close(terminate=True)
    envs = gym.make_vec(
        "test/TinySlot-v0", num_envs=2, vectorization_mode="async", vector_kwargs={"shared_memory": False}
    )
    obs, _ = envs.reset(seed=0)
    assert obs[0][0]["content"].startswith("I picked a number")
    envs.close()


def test_chat_shared_memory_round_trips_any_messages():
    import multiprocessing

    memory = ChatSharedMemory(3, 256, multiprocessing)
    messages = [{"role": "user", "content": "héllo 世界 🙂 \x00"}, {"role": "tool", "content": "", "name": "f"}]
    memory.write(1, messages)
    memory.write(2, [])
    assert memory.read(1) == messages and memory.read(2) == [] and memory.read(0) == []
    memory.write(1, [{"role": "user", "content": "short"}])
    assert memory.read(1) == [{"role": "user", "content": "short"}]  # a shorter write leaves no tail behind
    with pytest.raises(ValueError, match=r"an observation of 3\d\d bytes does not fit the 256-byte"):
        memory.write(0, [{"role": "user", "content": "x" * 300}])


def test_without_copies_async_observations_are_a_live_view_of_shared_memory():
    envs = gym.make_vec("agentgym/SearchQA-v0", num_envs=3, vectorization_mode="async", dataset="tiny",
                        vector_kwargs={"copy": False})  # fmt: skip
    obs, _ = envs.reset(seed=[0, 0, 1])
    first = list(obs)
    assert len(obs) == 3 and obs[0] == obs[1] == obs[-3] and obs[0:2] == (obs[0], obs[1]) and obs[2] != obs[0]
    envs.step(["<search> a </search>"] * 3)
    assert list(obs) != first and obs[0][0]["content"].lstrip().startswith("<information>")  # the view followed
    envs.close()
