"""BFCL-v0: the oracle on every category, BFCL's checks, miss_func withholding, calls run as BFCL runs them, malformed
turns, call formats, the checkers, determinism. Needs the bfcl-eval wheel (pip install --no-deps bfcl-eval==2026.3.23
mpmath). tests/envs/test_bfcl_verdict.py holds the env's verdict to BFCL's checker."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.bfcl import data

if data.unavailable_reason() is not None:
    pytest.skip(data.unavailable_reason(), allow_module_level=True)

from gymnasium.utils.env_checker import check_env

from agentgym.contract.env import EnvUnavailableError
from agentgym.envs.bfcl.agents import OracleAgent, RandomAgent, hermes
from agentgym.envs.bfcl.env import HANG_GUARDS, BFCLEnv, gold_replay, make_instances, state_digest
from agentgym.envs.bfcl.reference import bfcl_execute, call_string
from agentgym.envs.tool_use.tools import ArgumentError
from agentgym.rewards.matching import ToolCallMatching
from agentgym.running.checker import check
from agentgym.running.runner import run

ENV_ID = "agentgym/BFCL-v0"


def play(env: BFCLEnv, agent, options: dict, fmt=lambda action: action) -> tuple[list[str], dict]:
    """Play one episode; return every step's JSON record and the last info."""
    agent.reset(seed=0)
    obs, info = env.reset(options=options)
    messages, record, done = list(obs), [json.dumps([obs, info], sort_keys=True)], False
    while not done:
        action = agent.act(messages, info)
        obs, reward, terminated, truncated, info = env.step(fmt(action))
        messages += [{"role": "assistant", "content": action}, *obs]
        record.append(json.dumps([obs, reward, terminated, truncated, info], sort_keys=True))
        done = terminated or truncated
    return record, info


def call(name: str, **arguments) -> str:
    return hermes([{"name": name, "arguments": arguments}])


def openai_format(action: str) -> str:
    """An oracle action in the OpenAI assistant-message format (plain replies stay text)."""
    if "<tool_call>" not in action:
        return action
    calls = [json.loads(b.split("</tool_call>")[0]) for b in action.split("<tool_call>")[1:]]
    tool_calls = [{"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                  for c in calls]  # fmt: skip
    return json.dumps({"role": "assistant", "content": None, "tool_calls": tool_calls})


@pytest.mark.parametrize("category", data.CATEGORIES)
def test_oracle_passes_a_sample_of_every_category(category):
    env = BFCLEnv(category=category)
    assert env.num_tasks == 200
    for i in [*range(0, 200, 9), 173, 49]:  # 173: close_ticket('ticket_001'); miss_func_49: tail before its turn
        _, info = play(env, OracleAgent(), {"task_index": i})
        assert info["success"] and info["metrics"]["bfcl_success"] == 1.0, (info["task_id"], info.get("turn_check"))
        assert info["metrics"]["turns_passed"] == 1.0 and all(info["turn_checks"])


@pytest.mark.slow
def test_oracle_passes_every_task():
    env = BFCLEnv(category="all")
    infos = [play(env, OracleAgent(), {"task_index": i})[1] for i in range(env.num_tasks)]
    assert [info["task_id"] for info in infos if not info["success"]] == []
    assert sum(info["metrics"]["bfcl_success"] for info in infos) == env.num_tasks == 800


def test_schemas_convert_and_gold_calls_fit_them_but_for_ticket_001():
    for name in ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
                 "VehicleControlAPI"):  # fmt: skip
        for doc in data.function_docs(name):
            fn = data.tool_schema(doc)["function"]
            kinds = {p.get("type") for p in fn["parameters"]["properties"].values()}
            assert kinds <= {"string", "integer", "number", "boolean", "array", "object"}, (doc["name"], kinds)
            assert set(fn["parameters"]["required"]) <= set(fn["parameters"]["properties"])
    bad = set()
    for category in data.CATEGORIES:
        for task in data.load_tasks(category):
            owners = data.method_owners(task.involved_classes)
            schemas = {d["name"]: data.tool_schema(d)["function"] for c in task.involved_classes
                       for d in data.function_docs(c)}  # fmt: skip
            for turn in task.ground_truth:
                for text in turn:
                    gold = data.call_dict(text, owners)
                    try:
                        data.check_arguments(schemas[gold["name"]], gold["arguments"])
                    except ArgumentError:
                        bad.add(task.id)
    assert bad == {f"multi_turn_{c}_173" for c in data.CATEGORIES}


def test_a_wrong_call_breaks_the_state_check_and_a_missing_one_the_response_check():
    env = BFCLEnv(category="base")
    _, info = env.reset(options={"task_id": "multi_turn_base_0"})
    gold = info["gold"]["turns"][0]["calls"]  # cd document, mkdir temp, mv final_report.pdf temp
    wrong = copy.deepcopy(gold)
    wrong[1]["arguments"]["dir_name"] = "tmp"
    wrong[2]["arguments"]["destination"] = "tmp"
    _, _, _, _, info = env.step(hermes(wrong))
    assert info["action_valid"]
    _, _, terminated, _, info = env.step("Done.")
    check = info["turn_check"]
    assert not terminated and not check["passed"] and not check["bfcl_passed"]
    assert not check["state_match"] and check["mismatched"] == ["GorillaFileSystem.root"]

    env.reset(options={"task_id": "multi_turn_base_0"})
    env.step(hermes(gold))
    _, _, _, _, info = env.step("Done.")
    assert info["turn_check"]["passed"] and info["turn_check"]["mismatched"] == []
    env.step(call("cd", folder="temp"))  # turn 1's gold also greps the file: its result is missing
    _, _, _, _, info = env.step("Done.")
    check = info["turn_check"]
    assert check["state_match"] and not check["response_match"] and not check["passed"]
    assert len(check["missing_results"]) == 1 and "budget analysis" in check["missing_results"][0]

    env.reset(options={"task_id": "multi_turn_base_0"})
    _, _, _, _, info = env.step("Sure, done!")  # no call at all on a turn whose gold has calls
    assert info["turn_check"]["calls"] == 0 and not info["turn_check"]["passed"]


def test_miss_func_withholds_functions_until_their_turn():
    env = BFCLEnv(category="miss_func")
    obs, info = env.reset(options={"task_id": "multi_turn_miss_func_0"})  # sort withheld until user turn 3
    assert '"name": "sort"' not in obs[0]["content"] and '"name": "grep"' in obs[0]["content"]
    assert "sort" not in env.offered_tools()
    obs, _, _, _, info = env.step(call("sort", file_name="final_report.pdf"))  # BFCL runs it: only the prompt lacks it
    assert info["action_valid"] and info["doc_mismatches"] == ["sort is not offered at this turn"]
    assert obs[0]["content"].startswith("{")  # the function's own result (no such file in the root folder)
    _, info = env.reset(options={"task_id": "multi_turn_miss_func_0"})
    turns = info["gold"]["turns"]
    for turn in turns[:5]:  # user turns 0 and 1 (calls, reply); user turn 2 has no gold call: ask
        obs, _, _, _, info = env.step(hermes(turn["calls"]) if turn["calls"] else turn["reply"])
    assert info["turn_check"] == {**info["turn_check"], "turn": 2, "passed": True, "gold_calls": 0}
    assert obs[0]["role"] == "user" and '"name": "sort"' in obs[0]["content"]  # user turn 3 gives sort back
    assert "sort" in env.offered_tools()
    obs, _, _, _, info = env.step(call("sort", file_name="final_report.pdf"))
    assert info["action_valid"] and "sorted_content" in obs[0]["content"] and info["doc_mismatches"] == []


@pytest.mark.parametrize("irrelevance_check", [False, True])
def test_calling_on_a_turn_without_gold_calls_fails_only_the_opt_in_irrelevance_check(irrelevance_check):
    env = BFCLEnv(category="miss_param", irrelevance_check=irrelevance_check)
    _, info = env.reset(options={"task_id": "multi_turn_miss_param_0"})
    turns = info["gold"]["turns"]
    empty = next(i for i, t in enumerate(turns) if t["reply"] and not t["reply"].startswith("Done"))
    for turn in turns[:empty]:
        env.step(hermes(turn["calls"]) if turn["calls"] else turn["reply"])
    env.step(call("pwd"))
    _, _, _, _, info = env.step("Which file do you mean?")
    check = info["turn_check"]
    assert check["gold_calls"] == 0 and check["calls"] == 1
    assert check["bfcl_passed"] and not check["irrelevance_passed"] and check["passed"] == (not irrelevance_check)
    for turn in turns[empty + 1 :]:  # the rest as the oracle plays it
        _, reward, terminated, _, info = env.step(hermes(turn["calls"]) if turn["calls"] else turn["reply"])
    assert terminated
    assert info["metrics"]["bfcl_success"] == 1.0 and info["metrics"]["irrelevance"] == 0.0
    assert info["success"] == (not irrelevance_check) and reward == float(not irrelevance_check)


def test_step_limit_force_quits_the_task():
    env = BFCLEnv(category="base", max_steps_per_turn=2)
    env.reset(options={"task_index": 0})
    for _ in range(2):
        _, _, terminated, _, _ = env.step(call("pwd"))
        assert not terminated
    obs, reward, terminated, truncated, info = env.step(call("pwd"))
    assert terminated and not truncated and not info["success"] and reward == 0.0
    assert obs[0]["role"] == "tool" and info["turn_check"]["forced_quit"] and not info["turn_check"]["passed"]


def test_a_raising_call_keeps_what_it_changed_as_in_bfcl():
    """VehicleControlAPI.set_navigation sets the destination, then fails to build its message from None."""
    env = BFCLEnv(category="base")
    env.reset(options={"task_id": "multi_turn_base_50"})
    obs, _, _, _, info = env.step(call("set_navigation", destination=None))
    assert obs[0]["content"] == 'Error during execution: can only concatenate str (not "NoneType") to str'
    assert info["action_valid"] and info["doc_mismatches"] == [
        "Argument 'destination' of set_navigation must be a string, got null."
    ]
    task = env.task
    results, instances = bfcl_execute(task, [["set_navigation(destination=None)"]])
    assert results == [obs[0]["content"]] and env.instances["VehicleControlAPI"].destination is None
    assert data.bfcl_module(data.CHECKER).state_checker(env.instances, instances)["valid"]


def test_tool_call_ids_come_back():
    env = BFCLEnv(category="base")
    env.reset(options={"task_index": 0})
    action = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
              "function": {"name": "pwd", "arguments": "{}"}}]}  # fmt: skip
    obs, _, _, _, info = env.step(action)
    assert info["action_valid"] and obs == [{"role": "tool", "name": "pwd", "tool_call_id": "c1",
                                             "content": obs[0]["content"]}]  # fmt: skip
    assert "current_working_directory" in obs[0]["content"]


# -- fuzz: any call, in both formats, runs as BFCL's executor runs it (results and state) ---------------------------
NAMES = st.sampled_from(["cd", "mkdir", "mv", "echo", "post_tweet", "logarithm", "power", "edit_ticket", "place_order",
                         "book_flight", "lockDoors", "send_message", "sort", "close_ticket", "set_navigation", "nope",
                         "round_number", "square_root"])  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8) | st.sampled_from(["document", "temp", "final_report.pdf", "..", "AAPL", "1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
KEYS = st.sampled_from(
    [
        "folder",
        "dir_name",
        "source",
        "destination",
        "content",
        "value",
        "base",
        "precision",
        "exponent",
        "ticket_id",
        "updates",
        "door",
        "x",
        "file_name",
        "number",
        "decimal_places",
    ]
)
ARGS = st.dictionaries(KEYS, JSON, max_size=4)
TASKS = [0, 2, 14, 15, 50, 100, 150]  # together they involve every API class
GUARDED = f"at most {HANG_GUARDS['precision']}"  # the hang guard's message


@st.composite
def call_turn(draw) -> tuple[str, list[tuple[str, dict]]]:
    calls = draw(st.lists(st.tuples(NAMES, ARGS), min_size=1, max_size=3))
    if draw(st.booleans()):
        return hermes([{"name": n, "arguments": a} for n, a in calls]), calls
    fns = [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls]
    return json.dumps({"tool_calls": fns}), calls


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.sampled_from(TASKS), turn=call_turn())
def test_fuzz_calls_run_as_bfcls_executor_runs_them(index, turn):
    action, calls = turn
    env = BFCLEnv(category="base")
    env.reset(options={"task_index": index})
    obs, reward, terminated, _, info = env.step(action)
    json.dumps(info)
    assert len(obs) == len(calls) and reward == 0.0 and not terminated
    refused = [m["content"] for m in obs if m["content"].startswith("Error: ")]
    assert info["action_valid"] == (not refused)
    assert all("precision" in m and GUARDED in m for m in refused)  # the one guard: BFCL would run for long
    results, instances = bfcl_execute(env.task, [[call_string(n, a) for n, a in calls]])
    if not refused:
        assert [m["content"] for m in obs] == results
        assert data.bfcl_module(data.CHECKER).state_checker(env.instances, instances)["valid"]


@pytest.mark.parametrize("action", ["<tool_call>{nope</tool_call>", '{"tool_calls": 3}', "{broken",
                                    '<tool_call>{"arguments": {}}</tool_call>', "</tool_call>"])  # fmt: skip
def test_a_turn_that_does_not_parse_is_invalid_and_runs_nothing(action):
    env = BFCLEnv(category="base")
    env.reset(options={"task_index": 0})
    before = state_digest(env.instances)
    obs, _, terminated, _, info = env.step(action)
    assert not info["action_valid"] and info["parse_error"] and len(obs) == 1 and not terminated
    assert state_digest(env.instances) == before and env._ep["results"] == []


def test_both_call_formats_give_identical_trajectories():
    env = BFCLEnv(category="all")
    for task_id in ["multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_base_150", "multi_turn_long_context_60"]:
        hermes_run, info = play(env, OracleAgent(), {"task_id": task_id})
        assert info["success"]
        openai_run, _ = play(env, OracleAgent(), {"task_id": task_id}, fmt=openai_format)
        assert openai_run == hermes_run


def test_same_task_gives_byte_identical_episodes():
    for agent in (OracleAgent, RandomAgent):
        for task_id in ["multi_turn_base_150", "multi_turn_long_context_2", "multi_turn_miss_param_14"]:
            first, _ = play(BFCLEnv(), agent(), {"task_id": task_id})
            second, _ = play(BFCLEnv(), agent(), {"task_id": task_id})
            assert first == second, (agent.name, task_id)


@pytest.mark.slow
def test_episodes_do_not_depend_on_the_hash_seed():
    code = (
        "import hashlib, json; from agentgym.envs.bfcl.env import BFCLEnv; from agentgym.envs.bfcl.agents import "
        "RandomAgent\nenv, h = BFCLEnv(), hashlib.sha256()\nfor i in (14, 150, 250, 700):\n"
        " a = RandomAgent(); a.reset(seed=i); obs, info = env.reset(options={'task_index': i}); m = list(obs)\n"
        " for _ in range(12):\n  act = a.act(m, info); obs, r, t, tr, info = env.step(act)\n"
        "  m += [{'role': 'assistant', 'content': act}, *obs]; h.update(json.dumps([obs, info]).encode())\n"
        "  if t or tr: break\nprint(h.hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code], env={"PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True
        ).stdout
        for seed in ("1", "2")
    }
    assert len(digests) == 1


def test_gymnasium_and_agentgym_checkers_pass():
    for category in ("all", "miss_func", "long_context"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(BFCLEnv(category=category), skip_render_check=True)
        report = check(ENV_ID, env_kwargs={"category": category})
        assert report.ok and not report.notes, str(report)


def test_gold_calls_match_the_oracle_for_tool_call_matching():
    trajs = run(ENV_ID, "oracle", episodes=4, seed=0, env_kwargs={"category": "miss_func"}, progress=False)
    for traj in trajs:
        assert traj.success
        assert ToolCallMatching()([traj])[0].rewards == [1.0] * len(traj.turns)


def test_gold_replay_matches_bfcls_own_executor():
    utils = data.bfcl_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    checker = data.bfcl_module(data.CHECKER)
    for category in data.CATEGORIES:
        for index in (0, 57, 113, 160):
            task = data.load_tasks(category)[index]
            for k, (turn, gold) in enumerate(zip(task.ground_truth, gold_replay(category, index), strict=True)):
                results, instances = utils.execute_multi_turn_func_call(
                    list(turn), task.initial_config, list(task.involved_classes), "agentgym_test_replay", task.id,
                    long_context=task.long_context, is_evaL_run=True,
                )  # fmt: skip
                assert list(gold.results) == results, (task.id, k)
                assert checker.state_checker(gold.instances, instances)["valid"], (task.id, k)
    assert make_instances(data.load_tasks("long_context")[0])["GorillaFileSystem"].long_context


def test_task_ids_options_and_arguments():
    env = gym.make(ENV_ID)
    _, info = env.reset(options={"task_id": "multi_turn_long_context_7"})
    assert env.unwrapped.task_index == 7 * 4 + 3 and info["category"] == "long_context"  # categories interleave
    assert info["gold"]["ground_truth"] == [list(t) for t in data.load_tasks("long_context")[7].ground_truth]
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "multi_turn_base_0x"})
    with pytest.raises(ValueError, match="category"):
        BFCLEnv(category="parallel")
    assert BFCLEnv(category="base").spec_kwargs() == {
        "category": "base", "max_steps_per_turn": 20, "irrelevance_check": False, "invalid_action_penalty": 0.0
    }  # fmt: skip
    # the longest task has 8 user turns; each ends by its 21st step (a reply or BFCL's force-quit)
    assert BFCLEnv().max_turns == 8 * 21 and BFCLEnv(max_steps_per_turn=5).max_turns == 8 * 6
    assert BFCLEnv(max_turns=7).max_turns == 7


def test_unavailable_env_constructs_and_explains_itself(monkeypatch):
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name, *a: None)
    data.unavailable_reason.cache_clear()
    try:
        reason = data.unavailable_reason()
        assert reason is not None and "pip install --no-deps bfcl-eval==2026.3.23 mpmath" in reason
        env = BFCLEnv()
        assert env.unavailable_reason == reason and env.num_tasks == 0 and env.spec_kwargs()["category"] == "all"
        with pytest.raises(EnvUnavailableError, match="--no-deps"):
            env.reset(seed=0)
    finally:
        monkeypatch.undo()
        data.unavailable_reason.cache_clear()
    assert data.unavailable_reason() is None


# -- hostile calls (the inputs): each was an exception out of env.step ---------------------------------------
MATH_TASK = "multi_turn_base_15"  # GorillaFileSystem and MathAPI: integer and number parameters


def _raw(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


@pytest.mark.parametrize(
    ("action", "phrase"),
    [
        (_raw("add", json.dumps('{"a": ' + "[" * 1000 + "]" * 1000 + ', "b": 1}')), "nested more than 64"),
        (_raw("add", '{"a": ' + "9" * 4301 + ', "b": 1}'), "4,301 digits"),
        (_raw("add", '{"a": ' + "9" * 400 + ', "b": 1}'), "400 digits"),
        (_raw("add", '{"a": 1e400, "b": 1}'), "out of range"),
        (_raw("add", '{"a": Infinity, "b": 1}'), "Infinity"),
        (_raw("logarithm", '{"value": 3, "base": 2, "precision": 100000}'), GUARDED),  # seconds in mpmath
        (_raw("logarithm", '{"value": 3, "base": 2, "precision": "1e9"}'), GUARDED),  # mpmath reads strings
        (_raw("square_root", '{"number": 2, "precision": 1e7}'), GUARDED),
        (json.dumps({"tool_calls": [{"function": {"name": "add", "arguments": '{"a": NaN, "b": 1}'}}]}), "NaN"),
    ],
)
def test_hostile_calls_are_invalid_change_nothing_and_are_recorded(action, phrase):
    env = BFCLEnv(category="base")
    env.reset(options={"task_id": MATH_TASK})
    before = state_digest(env.instances)
    obs, _, terminated, _, info = env.step(action)
    assert info["action_valid"] is False and phrase in info["parse_error"] and phrase in obs[0]["content"]
    assert info["turn"] == 1 and not terminated and env.transcript[-2]["content"] == action
    assert state_digest(env.instances) == before
    _, _, _, _, info = env.step(call("add", a=1, b=2))  # the episode goes on
    assert info["action_valid"] and info["turn"] == 2


def test_a_big_but_printable_power_still_runs():
    env = BFCLEnv(category="base")
    env.reset(options={"task_id": MATH_TASK})
    obs, _, _, _, info = env.step(call("power", base=10**50, exponent=80))  # 4,001 digits
    assert info["action_valid"] and obs[0]["content"].startswith('{"result": 1000')


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("power", {"base": int("9" * 99), "exponent": 10_000}),  # 0.5 s to compute, then it cannot be printed
        ("power", {"base": 2, "exponent": 10**18}),  # BFCL would run out of memory
        ("round_number", {"number": 5, "decimal_places": -(2**63)}),  # builds 10**(2**63): BFCL hangs
        ("tail", {"file_name": "a", "lines": 2**63}),  # not an int64, but BFCL runs it (and so does the env)
    ],
)
def test_calls_bfcl_would_hang_on_get_bfcls_result(name, arguments):
    env = BFCLEnv(category="base")
    env.reset(options={"task_id": MATH_TASK})
    obs, _, _, _, info = env.step(call(name, **arguments))
    assert info["action_valid"] and obs[0]["content"].startswith(
        ("Error during execution: Exceeds", '{"result": 0}', '{"error"')
    )


@settings(max_examples=200, deadline=None)
@given(
    base=st.integers(-(10**6), 10**6), exponent=st.integers(-5, 6000),
    number=st.integers(-(10**40), 10**40), places=st.integers(-60, 5),
)  # fmt: skip
def test_shortcut_results_equal_bfcls_executor(base, exponent, number, places):
    """Where the env gives a MathAPI result without computing it, BFCL's executor (which computes it: these sizes
    are fast) gives the same text; elsewhere the env runs the call."""
    task = data.load_tasks("base")[15]
    calls = [
        ("power", {"base": base, "exponent": exponent}),
        ("round_number", {"number": number, "decimal_places": places}),
    ]
    env = BFCLEnv(category="base")
    env.reset(options={"task_index": 15})
    obs, *_ = env.step(hermes([{"name": n, "arguments": a} for n, a in calls]))
    results, _ = bfcl_execute(task, [[call_string(n, a) for n, a in calls]])
    assert [m["content"] for m in obs] == results
