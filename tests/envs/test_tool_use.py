"""ToolUse-v0: the checker, the oracle on every world and variant, random, malformed calls, schemas, state checks."""

from __future__ import annotations

import json
from typing import Literal

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.tool_use.agents import OracleAgent, RandomAgent
from agentgym.envs.tool_use.env import VARIANTS, ToolUseEnv
from agentgym.envs.tool_use.tools import ArgumentError, ToolError, schema_of, validate_arguments
from agentgym.envs.tool_use.worlds import WORLDS, Bank
from agentgym.rewards.matching import ToolCallMatching
from agentgym.running.checker import check
from agentgym.running.runner import run

ENV_ID = "agentgym/ToolUse-v0"


def play(env: ToolUseEnv, agent, index: int, variant: str) -> tuple[float, dict]:
    agent.reset(seed=index)
    obs, info = env.reset(options={"task_index": index, "variant": variant})
    messages, total, done = list(obs), 0.0, False
    while not done:
        action = agent.act(messages, info)
        obs, reward, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        total += reward
        done = terminated or truncated
    return total, info


def test_checker_passes():
    report = check(ENV_ID)
    assert report.ok, str(report)
    assert not report.notes, report.notes
    assert check(ENV_ID, env_kwargs={"world": "bank", "variant": "miss_func"}).ok


@pytest.mark.slow
@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("variant", VARIANTS)
def test_oracle_solves_every_task(world, variant):
    env = ToolUseEnv(world=world)
    for i in range(500):
        reward, info = play(env, OracleAgent(), i, variant)
        assert reward == 1.0 and info["success"], (i, info.get("state_check"))
        assert all(info["state_checks"])


def test_random_is_far_below_the_oracle(capsys):
    rates = {}
    for world in WORLDS:
        env = ToolUseEnv(world=world)
        wins = [play(env, RandomAgent(), i, "base")[1]["success"] for i in range(60)]
        rates[world] = sum(wins) / len(wins)
    with capsys.disabled():
        print(f"\nToolUse random success: {rates}")
    assert all(r < 0.1 for r in rates.values()), rates


def test_gold_calls_match_the_oracle_for_tool_call_matching():
    trajs = run(ENV_ID, "oracle", episodes=4, seed=0, env_kwargs={"variant": "miss_func"}, progress=False)
    for traj in trajs:
        assert traj.success
        scores = ToolCallMatching()([traj])[0]
        assert scores.rewards == [1.0] * len(traj.turns)


def test_schema_generator():
    def book(room: str, nights: int, guests: list[str], view: Literal["sea", "park"] = "sea",
             rate: float | None = None, breakfast: bool = False) -> str:  # fmt: skip
        """Book a hotel room.

        Args:
            room: the room name.
            nights: how many nights
                (at least one).
            guests: who stays.
            view: the view.
        """
        return room

    schema = schema_of(book)
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "book" and fn["description"] == "Book a hotel room."
    params = fn["parameters"]
    assert params["required"] == ["room", "nights", "guests"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["room"] == {"type": "string", "description": "the room name."}
    assert props["nights"] == {"type": "integer", "description": "how many nights (at least one)."}
    assert props["guests"] == {"type": "array", "items": {"type": "string"}, "description": "who stays."}
    assert props["view"] == {"type": "string", "enum": ["sea", "park"], "description": "the view.", "default": "sea"}
    assert props["rate"] == {"type": "number", "default": None}
    assert props["breakfast"] == {"type": "boolean", "default": False}
    assert validate_arguments(fn, {"room": "a", "nights": 2, "guests": ["x"], "rate": 3}) == {
        "room": "a", "nights": 2, "guests": ["x"], "view": "sea", "rate": 3.0, "breakfast": False}  # fmt: skip
    bad = [{"room": "a", "nights": 2}, {"room": "a", "nights": 2.0, "guests": []},
           {"room": "a", "nights": True, "guests": []}, {"room": "a", "nights": 1, "guests": [1]},
           {"room": "a", "nights": 1, "guests": [], "view": "lake"}, {"room": "a", "nights": 1, "guests": [], "x": 1},
           {"room": None, "nights": 1, "guests": []}, []]  # fmt: skip
    for args in bad:
        with pytest.raises(ArgumentError):
            validate_arguments(fn, args)
    assert json.dumps(Bank.schemas())  # every world's schemas are JSON


def test_state_check_fails_on_a_wrong_call():
    env = ToolUseEnv(world="bank")
    env.reset(options={"task_index": 3})  # "Transfer 302.50 from savings to checking. Then tell me ..."
    call = {"name": "transfer", "arguments": {"source": "savings", "target": "checking", "amount": 300}}
    obs, _, _, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert obs[0]["role"] == "tool" and info["action_valid"]
    _, _, terminated, _, info = env.step("Done. The new balance of checking is 2,608.00.")
    assert not terminated
    assert info["state_check"] == {"instruction": 0, "state_match": False, "mismatched": ["balances"],
                                   "facts_told": False}  # fmt: skip
    assert info["state_checks"] == [False]

    env.reset(options={"task_index": 3})
    call["arguments"]["amount"] = 302.5
    env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    _, _, _, _, info = env.step("Done: checking now holds $2,610.50.")
    assert info["state_check"]["state_match"] and info["state_check"]["facts_told"]


def test_domain_error_and_openai_format():
    env = ToolUseEnv(world="bank")
    env.reset(options={"task_index": 3})
    before = env.unwrapped.world.state()
    message = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "withdraw", "arguments": json.dumps({"account": "savings", "amount": 1e6})}}]}  # fmt: skip
    obs, _, _, _, info = env.step(message)  # an action may be the assistant message itself (or its JSON text)
    assert info["action_valid"]  # a well-formed call that the bank refuses
    assert obs == [{"role": "tool", "name": "withdraw", "tool_call_id": "c1", "content": obs[0]["content"]}]
    assert obs[0]["content"].startswith("Error: insufficient funds")
    assert env.world.state() == before


def test_miss_func_withholds_the_function_until_asked():
    env = ToolUseEnv(world="bank", variant="miss_func")
    obs, info = env.reset(options={"task_index": 3})
    held = info["gold"]["hold"]["function"]
    assert f'"name": "{held}"' not in obs[0]["content"]
    call = info["gold"]["turns"][1]["calls"][0]
    before = env.world.state()
    obs, _, _, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert not info["action_valid"] and "unknown function" in obs[0]["content"]
    assert env.world.state() == before
    obs, *_ = env.step("I need the transfer function; could you enable it?")
    assert obs[0]["role"] == "user" and f'"name": "{held}"' in obs[0]["content"]
    _, _, _, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert info["action_valid"] and env.world.state() != before


def test_miss_param_guessing_instead_of_asking_fails():
    env = ToolUseEnv(world="bank", variant="miss_param")
    _, info = env.reset(options={"task_index": 5})
    turns = list(info["gold"]["turns"])
    ask = next(i for i, t in enumerate(turns) if t["reply"] and t["reply"].startswith("Before I can"))
    turns[ask], turns[ask + 1] = turns[ask + 1], turns[ask]  # act on a guessed value, then ask
    for turn in turns:
        action = "\n".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in turn["calls"]) or turn["reply"]
        _, reward, terminated, _, info = env.step(action)
    assert terminated and all(info["state_checks"])  # the guess happened to be right ...
    assert info["asked_first"] is False and not info["success"] and reward == 0.0  # ... but it was a guess


# -- fuzz: malformed calls in both formats never raise and never change the world -----------------------
NAMES = st.sampled_from(["transfer", "deposit", "withdraw", "open_account", "get_balance", "mkdir", "rm", "nope", "",
                         "create_event", "move_event", "add_todo", "complete_todo", "free_slots"])  # fmt: skip
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["checking", "savings", "rent", "/home", "2026-03-02", "09:00", "10:07", "high"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
KEYS = ["account", "amount", "source", "target", "name", "kind", "path", "x", "title", "date", "start", "event_id",
        "duration_minutes", "due", "priority", "todo_id"]  # fmt: skip
ARGS = st.dictionaries(st.sampled_from(KEYS),
                       JSON, max_size=4) | JSON  # fmt: skip


@st.composite
def malformed_turn(draw) -> str:
    name, args = draw(NAMES), draw(ARGS)
    style = draw(st.sampled_from(["hermes", "openai", "openai-string", "raw-hermes", "raw-openai"]))
    if style == "hermes":
        return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"
    if style == "openai":
        return json.dumps({"tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]})
    if style == "openai-string":
        fn = {"name": name, "arguments": draw(st.text(max_size=20) | st.just(json.dumps(args)))}
        kind = draw(st.sampled_from(["function", "f"]))
        return json.dumps({"tool_calls": [{"id": "x", "type": kind, "function": fn}]})
    junk = draw(st.text(max_size=30))
    return f"<tool_call>{junk}" if style == "raw-hermes" else "{" + junk


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=st.sampled_from(list(WORLDS)), index=st.integers(0, 50), action=malformed_turn())
def test_fuzz_malformed_calls(world, index, action):
    env = ToolUseEnv(world=world)
    env.reset(options={"task_index": index})
    before = json.dumps(vars(env.world), sort_keys=True)
    obs, _, _, _, info = env.step(action)
    json.dumps(info)
    assert obs and all(isinstance(m["content"], str) for m in obs)
    if not info["action_valid"]:
        assert info["parse_error"]
    rejected = all(m["role"] == "tool" and m["content"].startswith("Error") for m in obs)
    if rejected:
        assert json.dumps(vars(env.world), sort_keys=True) == before


def test_task_ids_and_options():
    env = gym.make(ENV_ID)
    _, info = env.reset(options={"task_id": "bank/17"})
    assert info["task_id"] == "bank/17" and info["gold"]["task"]["world"] == "bank"
    with pytest.raises(ValueError):
        env.reset(options={"variant": "nope"})
    with pytest.raises(ValueError):
        env.reset(options={"task_id": "moon/1"})


def test_calendar_needs_a_lookup_before_acting_on_an_event():
    env = ToolUseEnv(world="calendar")
    obs, info = env.reset(options={"task_index": 3})
    assert obs[-1]["content"] == "Cancel 'Quarterly planning'."
    assert "Today is" in obs[0]["content"]
    lookup, cancel = info["gold"]["turns"][0]["calls"], info["gold"]["turns"][1]["calls"]
    assert [c["name"] for c in lookup] == ["find_events"] and [c["name"] for c in cancel] == ["cancel_event"]
    before = env.world.state()
    guess = {"name": "cancel_event", "arguments": {"event_id": "parent-meeting"}}  # ids cannot be guessed
    obs, _, _, _, info = env.step(f"<tool_call>{json.dumps(guess)}</tool_call>")
    assert info["action_valid"] and obs[0]["content"].startswith("Error: no event with id")
    obs, *_ = env.step(f"<tool_call>{json.dumps(lookup[0])}</tool_call>")
    (found,) = json.loads(obs[0]["content"])
    assert found["title"] == "Quarterly planning" and found["id"] == cancel[0]["arguments"]["event_id"]
    env.step(f"<tool_call>{json.dumps(cancel[0])}</tool_call>")
    assert env.world.state() != before
    _, _, _, _, info = env.step("Cancelled.")
    assert info["state_check"]["state_match"]


def test_calendar_refuses_overlaps_and_bad_times():
    from agentgym.envs.tool_use.worlds import Calendar, ToolError

    cal = Calendar("2026-03-02", {}, {})
    ev = cal.create_event("Dentist", "2026-03-03", "09:00", 60)
    assert ev["end"] == "10:00" and cal.free_slots("2026-03-03", 60)[:2] == ["08:00", "10:00"]
    for args in [("Gym", "2026-03-03", "09:30"), ("Gym", "2026-03-03", "09:10"), ("Gym", "2026-02-30", "09:00"),
                 ("Gym", "2026-03-03", "19:30"), ("Gym", "2026-03-03", "7:00")]:  # fmt: skip
        before = cal.state()
        with pytest.raises(ToolError):
            cal.create_event(*args)
        assert cal.state() == before


def test_mixed_variant_plays_the_variant_drawn_per_task():
    env = ToolUseEnv(variant="mixed")
    seen = set()
    for i in range(30):
        _, info = env.reset(options={"task_index": i})
        assert info["variant"] == info["gold"]["task"]["mixed_variant"] == info["gold"]["variant"]
        seen.add(info["variant"])
    assert seen == set(VARIANTS)
    for i in range(0, 30_000, 997):
        reward, info = play(env, OracleAgent(), i, "mixed")
        assert reward == 1.0, (i, info)


# -- hostile calls (the inputs): each was an exception out of env.step -----------------------------------
def _call(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


@pytest.mark.parametrize(
    ("world", "action", "phrase"),
    [
        ("filesystem", _call("cat", json.dumps('{"path": ' + "[" * 1000 + "]" * 1000 + "}")), "nested more than 64"),
        ("filesystem", _call("cat", '{"path": ' + "1" * 4301 + "}"), "4,301 digits"),
        ("bank", _call("deposit", '{"account": "checking", "amount": ' + "9" * 400 + "}"), "400 digits"),
        ("bank", _call("deposit", '{"account": "checking", "amount": NaN}'), "NaN"),
        ("bank", _call("deposit", '{"account": "checking", "amount": 1e999}'), "out of range"),
    ],
)
def test_hostile_json_is_an_invalid_call_recorded_in_the_transcript(world, action, phrase):
    env = gym.make(ENV_ID, world=world).unwrapped
    env.reset(options={"task_index": 0})
    state = env.world.state()
    obs, _, terminated, truncated, info = env.step(action)
    assert info["action_valid"] is False and phrase in info["parse_error"] and phrase in obs[0]["content"]
    assert (info["turn"], terminated, truncated) == (1, False, False)
    assert env.transcript[-2:] == [{"role": "assistant", "content": action}, *obs]
    assert env.world.state() == state
    obs, *_, info = env.step(_call(env.world.tool_names()[0], "{}"))  # the episode goes on: pwd, list_accounts
    assert info["action_valid"] and info["turn"] == 2 and not obs[0]["content"].startswith("Error")


def test_out_of_range_numbers_are_rejected_by_the_schema_not_the_tool():
    schema = schema_of(Bank.deposit)["function"]
    for amount in (10**400, 10**5000, float("inf"), float("nan")):  # OverflowError / ValueError before
        with pytest.raises(ArgumentError, match="out of range"):
            validate_arguments(schema, {"account": "checking", "amount": amount})
    statement = schema_of(Bank.get_statement)["function"]
    with pytest.raises(ArgumentError, match="out of range"):
        validate_arguments(statement, {"account": "checking", "limit": 2**63})
    assert validate_arguments(statement, {"account": "checking", "limit": 2**63 - 1})["limit"] == 2**63 - 1
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    free = {"name": "f", "parameters": {"properties": {"a": {"type": "array"}, "o": {"type": "object"}, "u": {}},
                                        "required": []}}  # fmt: skip
    for key, value in (("a", deep), ("o", {"k": deep}), ("u", deep)):  # RecursionError in a printout before
        with pytest.raises(ArgumentError, match="nested more than 64"):
            validate_arguments(free, {key: value})
    assert validate_arguments(free, {"u": [[[1]]], "a": [{"b": [2]}]}) == {"a": [{"b": [2]}], "o": None, "u": [[[1]]]}


def test_bank_amounts_stay_finite():
    bank = Bank({"checking": ("checking", 5.0)})
    with pytest.raises(ToolError, match="at most"):
        bank.deposit("checking", 1.7e308)  # twice would have made the balance infinite
    with pytest.raises(ToolError, match=r"at least 0\.01"):
        bank.deposit("checking", 0.001)
    assert bank.balances == {"checking": 5.0}


def test_escaped_lone_surrogate_in_a_path_is_echoed_as_replacement_character_and_the_episode_is_written(tmp_path):
    from agentgym.contract.trajectory import read_trajectories

    cat = _call("cat", '{"path": "a\\ud800b"}')
    path = tmp_path / "t.jsonl"
    (traj,) = run(ENV_ID, lambda messages, info: cat, 1, env_kwargs={"world": "filesystem", "max_turns": 2},
                  out=path, progress=False)  # fmt: skip
    content = traj.turns[0].observation[0]["content"]
    assert content.startswith("Error: ") and "a\ufffdb" in content
    (back,) = read_trajectories(path)
    assert back.turns[0].observation == traj.turns[0].observation
