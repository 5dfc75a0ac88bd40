"""Hostile actions against every registered env: JSON nested 1,000-100,000 deep (raw and as an ``arguments`` string),
integers of 400 / 4,301 / 100,000 digits, NaN / Infinity / 1e400, huge arrays and lone surrogates (raw and escaped) in
every parameter of every tool, in both call formats. No step raises; the turn is counted and recorded in the
transcript; a call that breaks a JSON limit is invalid with a message naming the limit; the episode goes on; every
observation is valid Unicode and JSON data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym
from agentgym.agents.tool_calls import listed_tools
from agentgym.contract.env import sanitize_action
from agentgym.contract.parsing import MAX_INT_DIGITS, MAX_JSON_DEPTH, JSONLimitError, ParseError, parse_tool_turn
from agentgym.contract.registry import BUILTIN_ENVS, unavailable_reason

ENV_IDS = [env.id for env in BUILTIN_ENVS]  # not list_envs(): other test modules register test-only envs
RESET_EVERY = 10

#: Hostile JSON values by name, and the phrase the parse error must hold when the value reaches a parser intact
#: (None: the value is legal JSON data; the tool must reject it or run it, without raising).
PAYLOADS: dict[str, tuple[str, str | None]] = {
    "int 400 digits": ("9" * 400, "400 digits"),
    "int 4,301 digits": ("9" * 4301, "4,301 digits"),
    "int 100,000 digits": ("-" + "7" * 100_000, "100,000 digits"),
    "NaN": ("NaN", "NaN"),
    "Infinity": ("-Infinity", "-Infinity"),
    "1e400": ("1e400", "out of range"),
    "array 1,000 deep": ("[" * 1000 + "]" * 1000, "nested more than 64"),
    "array 100,000 deep": ("[" * 100_000 + "]" * 100_000, "nested more than 64"),
    "object 1,000 deep": ('{"a": ' * 1000 + "1" + "}" * 1000, "nested more than 64"),
    "array 65 deep": ("[" * 65 + "]" * 65, "nested more than 64"),
    "huge array": ("[" + ", ".join(["0"] * 3000) + "]", None),
    "escaped lone surrogate": ('"a\\ud800b"', None),
    "escaped reversed pair": ('"\\udc00\\ud800"', None),
    "raw lone surrogate": ('"a\ud800b"', None),
    "int 64 bits + 1": (str(2**63), None),
    "int 100 digits": ("9" * MAX_INT_DIGITS, None),
    "float max": ("1.7976931348623157e308", None),
}


def _plain(prop: dict[str, Any]) -> str:
    """A well-typed JSON value for a parameter, so that the hostile one is what the call is judged on."""
    if "enum" in prop:
        return json.dumps(prop["enum"][0])
    return {"string": '"x"', "integer": "1", "number": "1.5", "boolean": "true", "array": "[]", "object": "{}"}.get(
        prop.get("type"), '"x"'
    )


def _arguments(fn: dict[str, Any], param: str | None, value: str) -> str:
    """The JSON text of a call's arguments: every required parameter well typed, ``param`` set to ``value``."""
    params = fn.get("parameters", {})
    props = params.get("properties", {})
    fields = {k: _plain(props[k]) for k in params.get("required", []) if k in props}
    if param is not None:
        fields[param] = value
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"


def actions(name: str, arguments: str) -> Iterator[tuple[str, str]]:
    """One call in each format: Hermes with an arguments object, Hermes and OpenAI with an arguments string."""
    as_string = json.dumps(arguments)  # escapes a raw surrogate as \ud800
    yield "hermes", f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments}}}</tool_call>'
    yield "hermes, arguments string", f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {as_string}}}</tool_call>'
    call = f'{{"type": "function", "id": "c1", "function": {{"name": {json.dumps(name)}, "arguments": {as_string}}}}}'
    yield "openai", f'{{"role": "assistant", "tool_calls": [{call}]}}'


def raw_actions() -> Iterator[tuple[str, str, str | None]]:
    """Whole turns that are hostile JSON themselves (not inside a call's arguments)."""
    for label, (value, phrase) in PAYLOADS.items():
        yield f"tool_call holding {label}", f"<tool_call>{value}</tool_call>", phrase
    deep = "[" * 100_000 + "]" * 100_000
    yield "openai message 100,000 deep", '{"tool_calls": ' + deep + "}", "nested more than 64"
    yield (
        "openai arguments 100,000 deep",
        ('{"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ' + json.dumps(deep) + "}}]}"),
        "nested more than 64",
    )


class Player:
    """Steps one env through many hostile actions, resetting when an episode ends, checking each step."""

    def __init__(self, env_id: str):
        self.env = gym.make(env_id)
        self.reason = unavailable_reason(self.env)
        self.core = self.env.unwrapped
        self.tools: list[dict[str, Any]] = []
        if self.reason is None:
            self.reset()

    def reset(self) -> None:
        obs, _ = self.env.reset(seed=0)
        self.tools = [t["function"] for t in listed_tools(obs)]

    def step(self, label: str, action: str, phrase: str | None) -> dict[str, Any]:
        # a new episode every few steps: BFCL force-quits a user turn after 20 steps (by design)
        if self.core._done or self.core.turn >= RESET_EVERY:
            self.reset()
        turn, before = self.core.turn, len(self.core.transcript)
        try:
            obs, reward, terminated, _, info = self.env.step(action)
        except Exception as e:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{label}: step raised {type(e).__name__}: {str(e)[:300]}") from None
        assert info["turn"] == turn + 1, label
        transcript = self.core.transcript
        recorded = transcript[before]
        assert recorded == {"role": "assistant", "content": sanitize_action(action)[0]}, label
        assert transcript[before + 1 :] == obs, label
        text = json.dumps([obs, info, reward], ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # no lone surrogate anywhere in what the step returned
        if self.tools and phrase is not None and not info["action_truncated"]:
            assert info["action_valid"] is False, label
            assert phrase in info["parse_error"], (label, info["parse_error"][:300])
            assert not terminated, label
        if not info["action_valid"]:
            assert info["parse_error"] and obs, label
            assert not terminated or info["turn"] >= self.core.max_turns, f"{label}: an invalid action ended it"
        return info


@pytest.fixture(scope="module")
def players() -> Iterator[dict[str, Player]]:
    made = {env_id: Player(env_id) for env_id in ENV_IDS}
    yield made
    for p in made.values():
        p.env.close()


def _player(players: dict[str, Player], env_id: str) -> Player:
    player = players[env_id]
    if player.reason is not None:
        pytest.skip(player.reason)
    return player


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_hostile_json_turns_never_raise(players, env_id):
    player = _player(players, env_id)
    for label, action, phrase in raw_actions():
        player.step(label, action, phrase)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_payload_in_every_parameter_of_every_tool(players, env_id):
    player = _player(players, env_id)
    if not player.tools:
        pytest.skip("no tools: the raw JSON turns cover it")
    steps = 0
    for fn in list(player.tools):
        props = fn.get("parameters", {}).get("properties", {})
        for param in [*props] or [None]:
            for label, (value, phrase) in PAYLOADS.items():
                for fmt, action in actions(fn["name"], _arguments(fn, param, value)):
                    player.step(f"{fn['name']}({param}={label}) as {fmt}", action, phrase if param else None)
                    steps += 1
    assert steps >= len(PAYLOADS) * 3


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_fuzzed_hostile_calls(players, env_id, data):
    """Random tools, parameters, payloads nested inside arrays and objects, and random wrappers of the value."""
    player = _player(players, env_id)
    name = data.draw(st.sampled_from([fn["name"] for fn in player.tools] or ["f"]), label="tool")
    fn = next((f for f in player.tools if f["name"] == name), {"name": name})
    params = [*fn.get("parameters", {}).get("properties", {})] or ["p"]
    param = data.draw(st.sampled_from(params), label="param")
    label = data.draw(st.sampled_from(sorted(PAYLOADS)), label="payload")
    value, phrase = PAYLOADS[label]
    wraps = data.draw(st.integers(0, 3), label="wraps")
    for k in range(wraps):
        value = f"[{value}]" if k % 2 == 0 else f'{{"k": {value}}}'
    noise = data.draw(st.text(max_size=20), label="noise")
    fmt, action = data.draw(st.sampled_from(list(actions(name, _arguments(fn, param, value)))), label="format")
    if fmt != "openai":
        action = noise + action
    player.step(f"{name}({param}={label} wrapped {wraps}) as {fmt}", action, phrase)


@pytest.mark.parametrize(("label", "action", "phrase"), list(raw_actions()), ids=lambda x: str(x)[:30])
def test_parse_tool_turn_names_the_limit_at_full_size(label, action, phrase):
    """The parser itself (no 16 KB action cut): each hostile turn is an ``InvalidJSONError`` naming the limit."""
    if phrase is None:  # legal JSON data: not a call object, which is a ParseError of another kind
        with pytest.raises(ParseError) as error:
            parse_tool_turn(action)
        assert not isinstance(error.value, JSONLimitError)
        return
    with pytest.raises(JSONLimitError, match=phrase):
        parse_tool_turn(action)


def _nesting(value: Any) -> int:
    if isinstance(value, list | dict):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max((_nesting(v) for v in items), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
        max_leaves=20,
    ),
    st.integers(1, 100),
)
def test_arguments_of_any_depth_parse_exactly_or_name_the_depth_limit(value, wraps):
    """Any JSON value under ``wraps`` objects, as a call's arguments string: read back equal when the whole nests at
    most ``MAX_JSON_DEPTH`` levels, else a ``JSONLimitError`` that says so (never another exception)."""
    text = json.dumps(value)
    for _ in range(wraps):
        text = f'{{"a": {text}}}'
    call = f'<tool_call>{{"name": "f", "arguments": {json.dumps(text)}}}</tool_call>'
    if wraps + _nesting(value) > MAX_JSON_DEPTH:
        with pytest.raises(JSONLimitError, match=f"nested more than {MAX_JSON_DEPTH} levels"):
            parse_tool_turn(call)
    else:
        (got,) = parse_tool_turn(call).calls or ()
        assert got.arguments == json.loads(text)


def test_readme_and_docs_state_the_checkers_count_of_malformed_actions():
    from pathlib import Path

    from agentgym.running.checker import MALFORMED_ACTIONS

    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/architecture.md"):
        text = (root / doc).read_text(encoding="utf-8")
        assert f"{len(MALFORMED_ACTIONS)} malformed actions" in text, doc
    labels = {label for label, _ in MALFORMED_ACTIONS}
    hostile = {"deep JSON arguments string", "4,301-digit integer", "NaN and Infinity", "escaped lone surrogates"}
    assert hostile <= labels


class _Buggy(agentgym.AgentEnv):
    """Raises from ``_step`` on the action "bug" (an env bug, not a bad action)."""

    num_tasks = 1

    def __init__(self) -> None:
        super().__init__(max_turns=5)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"role": "user", "content": "go"}], {"gold": {}}

    def _step(self, action: str) -> agentgym.StepResult:
        if action == "bug":
            raise ZeroDivisionError("env bug")
        return agentgym.StepResult([{"role": "user", "content": f"turn {self.turn}"}])


def test_a_step_that_raises_is_undone_and_the_episode_can_go_on():
    env = _Buggy()
    env.reset(seed=0)
    env.step("ok")
    before = (env.turn, env.transcript)
    with pytest.raises(ZeroDivisionError):
        env.step("bug")
    assert (env.turn, env.transcript) == before  # the turn counter did not advance past an unrecorded turn
    obs, *_, info = env.step("ok")
    assert obs == [{"role": "user", "content": "turn 2"}] and info["turn"] == 2


@pytest.mark.parametrize(
    "block",
    ["[" * 100_000, '{"type": "function", "function": {"name": "f", "x": ' + "9" * 5000 + "}}", '{"a": NaN}'],
)
def test_tool_listings_and_native_conversion_skip_hostile_json(block):
    """An agent reads ``<tools>`` listings out of user messages (which a user or env may echo) and turns past
    assistant turns into native messages: hostile JSON there is skipped, never raised (RecursionError before)."""
    from agentgym.agents.tool_calls import to_openai_messages

    good = '{"type": "function", "function": {"name": "ls", "parameters": {}}}'
    messages = [
        {"role": "user", "content": f"<tools>\n{block}\n{good}\n</tools>"},
        {
            "role": "assistant",
            "content": '{"tool_calls": [{"function": {"name": "ls", "arguments": "{\\"p\\": \\"\\\\ud800\\"}"}}]}',
        },
        {
            "role": "assistant",
            "content": '{"tool_calls": [{"function": {"name": "ls", "arguments": "' + "[" * 5000 + '"}}]}',
        },
    ]
    assert [t["function"]["name"] for t in listed_tools(messages)] == ["ls"]
    native = to_openai_messages(messages)
    assert json.loads(native[1]["tool_calls"][0]["function"]["arguments"]) == {"p": "\ufffd"}
    assert native[2] == messages[2]  # not a parseable call: left as it was
