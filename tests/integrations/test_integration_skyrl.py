"""SkyRL adapter against the real ``skyrl-gym`` 0.4 package: register, make by id (string entry point), play whole
episodes; per-turn rewards in each step's reward and metadata."""

from __future__ import annotations

import subprocess
import sys

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

import agentgym  # noqa: E402,F401
from agentgym.envs.search_qa.agents import DemoAgent  # noqa: E402
from agentgym.integrations.skyrl import class_name, dataset_rows, env_class, register_envs  # noqa: E402

ENV_ID = "agentgym/SearchQA-v0"


@pytest.fixture(scope="module")
def registered():
    register_envs([ENV_ID])
    return ENV_ID


def test_register_and_make_by_id(registered):
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    spec = skyrl_gym.registry[ENV_ID]
    assert spec.entry_point == f"agentgym.integrations.skyrl:{class_name(ENV_ID)}"
    row = dataset_rows(ENV_ID, [0], env_kwargs={"dataset": "tiny"})[0]
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)
    assert isinstance(env, BaseTextEnv) and type(env) is env_class(ENV_ID)
    assert register_envs([ENV_ID]) == []  # already there: left alone


def test_oracle_episode_rewards_per_turn(registered):
    row = dataset_rows(ENV_ID, [4], env_kwargs={"dataset": "tiny", "max_turns": 8})[0]
    env = skyrl_gym.make(ENV_ID, env_config={}, extras=row)
    prompt, meta = env.init(row["prompt"])
    assert prompt == row["prompt"] and meta["task_id"] == row["extra_info"]["task_id"]
    actions = DemoAgent.actions(env.last_info["gold"])  # gold search queries, then the gold answer
    outs = [env.step(a) for a in actions]
    assert [o["done"] for o in outs] == [False] * (len(actions) - 1) + [True]
    assert all(o["observations"] and o["observations"][0]["role"] == "user" for o in outs[:-1])
    assert outs[-1]["observations"] == []
    assert [o["reward"] for o in outs] == outs[-1]["metadata"]["turn_rewards"]
    assert outs[-1]["reward"] == 1.0 and outs[-1]["metadata"]["success"] is True
    assert outs[-1]["metadata"]["reward_components"] == {"outcome": 1.0}
    metrics = env.get_metrics()
    assert metrics["success"] == 1.0 and metrics["return"] == 1.0 and metrics["turns"] == len(actions)
    assert metrics["em"] == 1.0
    env.close()


def test_invalid_and_truncated_episode(registered):
    row = dataset_rows(ENV_ID, [1], env_kwargs={"dataset": "tiny", "max_turns": 2, "invalid_action_penalty": 0.25})[0]
    env = skyrl_gym.make(ENV_ID, env_config={}, extras=row)
    env.init(row["prompt"])
    first = env.step("no tags at all")
    assert first["reward"] == -0.25 and first["metadata"]["action_valid"] is False and not first["done"]
    assert first["metadata"]["parse_error"]
    last = env.step("<search> anything </search>")
    assert last["done"] and last["metadata"]["truncated"] and last["metadata"]["success"] is False
    assert last["metadata"]["turn_rewards"] == [-0.25, 0.0]


def test_env_config_kwargs_and_row_mismatch(registered):
    row = dataset_rows(ENV_ID, [0], env_kwargs={"dataset": "tiny"})[0]
    env = skyrl_gym.make(ENV_ID, env_config={"env_kwargs": {"max_turns": 1}}, extras=row)
    assert env.max_turns == 1
    other = dict(row, extra_info={"agentgym": {**row["extra_info"]["agentgym"], "env_id": "agentgym/Household-v0"}})
    with pytest.raises(ValueError, match="plays"):
        skyrl_gym.make(ENV_ID, env_config={}, extras=other)


def test_string_entry_point_resolves_in_a_fresh_process():
    """What a SkyRL worker does: register, then make by id; the class is found through the module's entry point."""
    code = (
        "import skyrl_gym\n"
        "from agentgym.integrations.skyrl import dataset_rows, register_envs\n"
        "ids = register_envs()\n"
        "assert 'agentgym/Household-v0' in ids and 'agentgym/SearchQA-v0' in ids, ids\n"
        "row = dataset_rows('agentgym/Household-v0', [0])[0]\n"
        "env = skyrl_gym.make(row['env_class'], env_config={}, extras=row)\n"
        "obs, _ = env.init(row['prompt'])\n"
        "out = env.step('look')\n"
        "assert set(out) == {'observations', 'reward', 'done', 'metadata'}, out\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)  # hang guard
    assert out.returncode == 0, out.stderr
