"""Bounded tool worlds: whatever an agent does, each step's output, each world and each step's work stay within the
documented limits (``agentgym.envs.tool_use.limits``, BFCL's ``MAX_CALLS_PER_STEP``, ``MAX_STATE_DEPTH`` and
``HANG_GUARDS``, ``agentgym.envs.user_sim.base.MAX_USER_MESSAGE_CHARS``), with a message to the agent instead of an
exception. The attacks are those of issue 31; a fuzz test drives every tool of every tool world at its output cap."""

from __future__ import annotations

import json
import multiprocessing
import pickle
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.env import MAX_ACTION_CHARS
from agentgym.contract.spaces import Chat, ChatSharedMemory
from agentgym.envs.bfcl import data as bfcl_data
from agentgym.envs.bfcl.env import HANG_GUARDS, MAX_CALLS_PER_STEP, MAX_STATE_DEPTH, BFCLEnv, state_digest
from agentgym.envs.tool_use import limits
from agentgym.envs.tool_use.env import ToolUseEnv
from agentgym.envs.tool_use.limits import (
    JSON_BYTES_PER_CHAR,
    MAX_FILE_CHARS,
    MAX_OBSERVATION_CHARS,
    MAX_RESULT_CHARS,
    MAX_WORLD_CHARS,
    cap_observation,
    json_chars,
)
from agentgym.envs.tool_use.worlds import WORLDS
from agentgym.envs.user_sim.base import MAX_USER_MESSAGE_CHARS
from agentgym.envs.user_sim.customer_service import CustomerServiceEnv
from agentgym.envs.user_sim.service_world import RetailStore

BFCL_MISSING = bfcl_data.unavailable_reason()
needs_bfcl = pytest.mark.skipif(BFCL_MISSING is not None, reason=str(BFCL_MISSING))


def assert_bounded(env: Any, obs: list[dict[str, Any]]) -> None:
    """An observation the env's space holds, within the character budget, that fits a vector env's shared memory."""
    space = env.observation_space
    assert space.contains(obs)
    assert sum(len(m["content"]) for m in obs) <= MAX_OBSERVATION_CHARS
    ChatSharedMemory(1, space.shared_memory_bytes, multiprocessing).write(0, obs)  # raises when it does not fit


def test_the_limits_fit_the_chat_space():
    space = Chat()
    worst = MAX_OBSERVATION_CHARS * JSON_BYTES_PER_CHAR + 6 * 16_384  # contents plus names and ids from the action
    assert worst < space.shared_memory_bytes
    assert MAX_RESULT_CHARS * space.max_messages <= MAX_OBSERVATION_CHARS
    msgs = [{"role": "tool", "content": "\x1b" * 50_000} for _ in range(space.max_messages)]
    assert_bounded(ToolUseEnv(world="bank"), cap_observation(msgs))


# -- ToolUse: the append-then-cat attack ---------------------------------------------------------------------------
def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def hermes(calls: list[dict[str, Any]]) -> str:
    """Calls as compact Hermes blocks (many fit one action)."""
    return "".join(f"<tool_call>{json.dumps(c, separators=(',', ':'))}</tool_call>" for c in calls)


def test_tool_use_files_and_observations_are_bounded():
    env = ToolUseEnv(world="filesystem", max_turns=100)
    env.reset(options={"task_index": 0})
    chunk = "A" * 4_000
    refusals = []
    for _ in range(70):
        obs, _, _, _, info = env.step(hermes([_call("write", path="/big.txt", content=chunk, append=True)]))
        assert_bounded(env, obs)
        if not info["action_valid"]:
            refusals.append(obs[0]["content"])
    assert refusals and all(f"at most {MAX_FILE_CHARS:,}" in r for r in refusals)  # an invalid call, named limit
    assert len(env.world.files["/big.txt"]) <= MAX_FILE_CHARS
    for _ in range(10):
        obs, *_ = env.step(hermes([_call("cat", path="/big.txt")] * 16))
        assert_bounded(env, obs)
        assert len(obs) == 16 and all(json.loads(m["content"]) == env.world.files["/big.txt"] for m in obs)
    assert env.turn == 80


def test_tool_use_world_size_is_bounded_and_a_refused_call_changes_nothing():
    env = ToolUseEnv(world="filesystem", max_turns=200)
    env.reset(options={"task_index": 0})
    refused = None
    for i in range(60):
        calls = [_call("write", path=f"/f{i}_{k}.txt", content="B" * 4_000) for k in range(3)]  # fits one action
        before = env.world.state()
        obs, _, _, _, info = env.step(hermes(calls))
        assert_bounded(env, obs)
        assert json_chars(vars(env.world)) <= MAX_WORLD_CHARS
        if not info["action_valid"]:
            refused = (obs, before)
            break
    assert refused is not None, "the world never reached its limit"
    obs, before = refused
    errors = [m["content"] for m in obs if m["content"].startswith("Error:")]
    assert errors and all(f"limit of {MAX_WORLD_CHARS:,}" in e for e in errors)
    for k, message in enumerate(obs):  # each refused call changed nothing; the others ran
        assert (f"/f{i}_{k}.txt" in env.world.files) == (not message["content"].startswith("Error:"))


# -- BFCL: calls per step, nesting, precision ----------------------------------------------------------------------
@needs_bfcl
def test_bfcl_too_many_calls_in_one_step_run_none():
    env = BFCLEnv(category="base")
    env.reset(options={"task_index": 0})
    before = state_digest(env.instances)
    calls = [c for i in range(110) for c in (_call("mkdir", dir_name=f"d{i}"), _call("cd", folder=f"d{i}"))]
    obs, _, terminated, _, info = env.step(hermes(calls))
    assert not info["action_truncated"]
    assert_bounded(env, obs)
    assert not info["action_valid"] and f"at most {MAX_CALLS_PER_STEP}" in obs[0]["content"] and not terminated
    assert state_digest(env.instances) == before and env.turn == 1
    env.step(hermes([_call("ls")]))
    pickle.dumps(env.snapshot())


@needs_bfcl
def test_bfcl_results_share_the_observation_budget():
    env = BFCLEnv(category="base")
    env.reset(options={"task_index": 0})
    env.step(hermes([_call("touch", file_name="g.txt"), _call("echo", content="\x1b" * 2_000, file_name="g.txt")]))
    obs, _, _, _, info = env.step(hermes([_call("cat", file_name="g.txt")] * MAX_CALLS_PER_STEP))
    assert_bounded(env, obs)
    assert info["action_valid"] and len(obs) == MAX_CALLS_PER_STEP and all("[... cut:" in m["content"] for m in obs)


@needs_bfcl
def test_bfcl_deep_nesting_is_undone_and_the_env_keeps_working():
    env = BFCLEnv(category="base", max_steps_per_turn=100, max_turns=100)
    env.reset(options={"task_index": 0})
    pairs = MAX_CALLS_PER_STEP // 2
    undone = None
    for step in range(1, 12):
        before, anchor = state_digest(env.instances), env.anchor()
        calls = [
            c
            for i in range(pairs)
            for c in (_call("mkdir", dir_name=f"s{step}d{i}"), _call("cd", folder=f"s{step}d{i}"))
        ]
        obs, _, _, _, info = env.step(hermes(calls))
        assert_bounded(env, obs)
        assert env.turn == step
        if not info["action_valid"]:
            undone = (obs, before, anchor)
            break
        pairs = max(1, pairs // 4)
    assert undone is not None, "the nesting never reached its limit"
    obs, before, anchor = undone
    assert all(f"{MAX_STATE_DEPTH} levels" in m["content"] and "undone" in m["content"] for m in obs)
    assert state_digest(env.instances) == before and env.anchor() != anchor  # the state as before; the step counted
    snap = env.snapshot()
    pickle.loads(pickle.dumps(snap))
    obs, _, _, _, info = env.step(hermes([_call("pwd")]))
    assert info["action_valid"] and "current_working_directory" in obs[0]["content"]
    env.restore(snap)
    assert state_digest(env.instances) == before


@needs_bfcl
def test_bfcl_precision_over_the_guard_is_refused_and_at_the_guard_runs():
    env = BFCLEnv(category="base")
    index = next(i for i in range(env.num_tasks) if "MathAPI" in env._task(i).involved_classes)
    env.reset(options={"task_index": index})
    limit = HANG_GUARDS["precision"]
    # the attack: 167 such calls took 17.8 s of CPU; now a step's calls can take at most a precision of 1,000
    calls = [_call("logarithm", value=2.0 + i, base=10.0, precision=10_000) for i in range(MAX_CALLS_PER_STEP)]
    obs, _, _, _, info = env.step(hermes(calls))
    assert not info["action_valid"] and len(obs) == MAX_CALLS_PER_STEP
    assert all(f"must be at most {limit}" in m["content"] for m in obs)
    obs, _, _, _, info = env.step(hermes([_call("logarithm", value=2.0, base=10.0, precision=limit)]))
    assert info["action_valid"] and "result" in obs[0]["content"]


# -- user simulators ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["Clarify-v0", "Preference-v0", "TwentyQuestions-v0", "CustomerService-v0"])
@pytest.mark.parametrize("prefix", ["[action] ", "[answer] "])
def test_a_message_over_the_limit_reaches_no_one(name, prefix):
    env = gym.make(f"agentgym/{name}").unwrapped
    env.reset(options={"task_index": 4})
    snap = env.snapshot()
    obs, _, terminated, truncated, info = env.step(prefix + "Is it one of these? " * 1_000)
    assert not info["action_valid"] and f"at most {MAX_USER_MESSAGE_CHARS:,}" in obs[0]["content"]
    assert not terminated and not truncated and env._ep["dialogue"] == snap.state[1]["dialogue"]
    obs, _, _, _, info = env.step("[action] " + "x" * (MAX_USER_MESSAGE_CHARS - 10))
    assert info["action_valid"]


def test_customer_service_anchor_reads_running_digests_not_the_history():
    env = CustomerServiceEnv()
    env.reset(options={"task_index": 0})
    env.step("[action] Hello, how can I help you today?")
    anchor, ep = env.anchor(), env._ep
    dialogue, world = ep["dialogue"], ep["world"]
    ep["dialogue"] = dialogue * 10_000  # what the anchor would re-read each step if it were O(dialogue)
    ep["world"] = RetailStore({}, {}, {}, "2026-01-01")
    assert env.anchor() == anchor
    ep["dialogue"], ep["world"] = dialogue, world
    other = CustomerServiceEnv()
    other.reset(options={"task_index": 0})
    assert other.anchor() != anchor
    other.step("[action] Hello, how can I help you today?")
    assert other.anchor() == anchor  # the same history, the same anchor


# -- fuzz: every tool of every tool world at its output cap -------------------------------------------------------
def _value(schema: dict[str, Any], names: list[str]) -> st.SearchStrategy[Any]:
    """Arguments for one parameter: names the world knows, big texts and numbers, and values of the wrong type."""
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    text = st.one_of(
        st.sampled_from(names),
        st.text(max_size=8),
        st.builds(lambda c, n: c * n, st.sampled_from('x\n"'), st.integers(100, 900)),
    )
    if kind == "string":
        return text
    if kind == "integer":
        return st.one_of(st.integers(-5, 40), st.sampled_from([10**6, 2**62, -(2**62)]))
    if kind == "number":
        return st.one_of(st.floats(-1e6, 1e6), st.sampled_from([1e300, 3.0, 0.01]))
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(text, max_size=12)
    return st.one_of(text, st.integers(), st.dictionaries(st.sampled_from(names), text, max_size=3))


def _calls(schema: dict[str, Any], names: list[str], cap: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    """One step: a tool called ``cap`` times (as many as fit one action) with arguments drawn from its schema."""

    @st.composite
    def build(draw: Any) -> list[dict[str, Any]]:
        params = schema["function"]["parameters"]
        required = params.get("required", [])
        props = params.get("properties", {})
        args = {k: draw(_value(p, names)) for k, p in props.items() if k in required or draw(st.booleans())}
        call = {"name": schema["function"]["name"], "arguments": args}
        return [call] * max(1, min(cap, MAX_ACTION_CHARS // len(hermes([call]))))

    return build()


def _play(env: Any, steps: list[list[dict[str, Any]]]) -> None:
    for calls in steps:
        obs, _, terminated, truncated, info = env.step(hermes(calls))
        assert not info["action_truncated"]
        json.dumps(info)
        assert_bounded(env, obs)
        if terminated or truncated:
            return


FILE_NAMES = ["/", "/home", "/g.txt", "g.txt", "notes.txt", "x", ".."]
TOOL_USE_TOOLS = [(w, t) for w in sorted(WORLDS) for t in WORLDS[w].tool_names()]


@pytest.mark.parametrize(("world", "tool"), TOOL_USE_TOOLS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 50), data=st.data())
def test_fuzz_every_tool_use_tool_at_its_cap(world, tool, index, data):
    env = ToolUseEnv(world=world, max_turns=10)
    env.reset(options={"task_index": index})
    schemas = type(env.world).schemas()
    half = [_call("write", path="/g.txt", content="\x1b" * (MAX_FILE_CHARS // 2), append=True)]  # 6 JSON chars each
    steps = [half, half] if world == "filesystem" else []
    names = {"filesystem": ["/g.txt", "/", ".."], "bank": ["checking", "savings"], "calendar": ["2026-03-03", "ev"]}
    calls = _calls(schemas[tool], names[world], limits.MAX_CALLS_PER_STEP)
    steps += data.draw(st.lists(calls, min_size=1, max_size=3))
    _play(env, steps)
    assert json_chars(vars(env.world)) <= MAX_WORLD_CHARS


@pytest.mark.parametrize("tool", RetailStore.tool_names())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 60), data=st.data())
def test_fuzz_every_customer_service_tool_at_its_cap(tool, index, data):
    env = CustomerServiceEnv(max_turns=10)
    env.reset(options={"task_index": index})
    store = env.world
    names = [*[*store.users, *store.orders, *store.products][:20], "#W0000001", "x"]
    steps = data.draw(
        st.lists(_calls(RetailStore.schemas()[tool], names, limits.MAX_CALLS_PER_STEP), min_size=1, max_size=3)
    )
    _play(env, steps)
    assert json_chars(vars(env.world)) <= MAX_WORLD_CHARS


def _bfcl_tools() -> list[tuple[int, str]]:
    """Every function of every BFCL class, with a base task that involves its class."""
    if BFCL_MISSING is not None:
        return []
    env, out = BFCLEnv(category="base"), []
    seen: set[str] = set()
    for index in range(env.num_tasks):
        for cls in env._task(index).involved_classes:
            for doc in bfcl_data.function_docs(cls):
                if doc["name"] not in seen:
                    seen.add(doc["name"])
                    out.append((index, doc["name"]))
    return out


@pytest.mark.slow
@needs_bfcl
@pytest.mark.parametrize(("index", "tool"), _bfcl_tools())
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_every_bfcl_tool_at_its_cap(index, tool, data):
    env = BFCLEnv(category="base", max_steps_per_turn=10, max_turns=10)
    env.reset(options={"task_index": index})
    schema = env._all_schemas(env.task.involved_classes)[tool]
    names = [*FILE_NAMES, "final_report.pdf", "document", "AAPL", "USR001", "1", "alpha"]
    grow = [[_call("touch", file_name="g.txt")], [_call("echo", content="\x1b" * 2_000, file_name="g.txt")]]
    steps = grow if "GorillaFileSystem" in env.task.involved_classes else []
    cap = data.draw(st.sampled_from([16, MAX_CALLS_PER_STEP]))
    steps += data.draw(st.lists(_calls(schema, names, cap), min_size=1, max_size=3))
    _play(env, steps)
    pickle.dumps(env.snapshot())
