"""CodeExec-v0: the checker, the oracle on every family and template, answer checks, malformed calls, timeouts,
back-ends, determinism and the generator's own cross-checks."""

from __future__ import annotations

import json
import math
import pickle
import random
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.code_exec import tasks as T
from agentgym.envs.code_exec.agents import OracleAgent, RandomAgent
from agentgym.envs.code_exec.env import MAX_OUTPUT_CHARS, CodeExecEnv
from agentgym.envs.code_exec.tasks import FAMILIES, answer_text, check_answer, make_task, template_names
from agentgym.rewards.matching import ToolCallMatching
from agentgym.running.checker import check
from agentgym.running.runner import run
from agentgym.tools.sandbox import PoolKey
from agentgym.tools.sandbox.local import SHARED

ENV_ID = "agentgym/CodeExec-v0"


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def play(env: CodeExecEnv, agent, index: int, seed: int = 0) -> tuple[float, dict, list[dict]]:
    """One episode of task ``index``: total reward, last info and the whole transcript."""
    agent.reset(seed=seed)
    obs, info = env.reset(options={"task_index": index})
    messages, total, done = list(obs), 0.0, False
    while not done:
        action = agent.act(messages, info)
        obs, reward, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        total += reward
        done = terminated or truncated
    return total, info, messages


@pytest.fixture(scope="module")
def envs():
    """One env per family (pool back-end), closed at the end of the module."""
    made = {family: CodeExecEnv(family=family) for family in FAMILIES}
    yield made
    for env in made.values():
        env.close()


def first_index_per_template(family: str, limit: int = 400) -> dict[str, int]:
    found: dict[str, int] = {}
    for i in range(limit):
        found.setdefault(make_task(family, i)["template"], i)
    return found


# -- the contract ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_checker_passes():
    for kwargs in ({}, {"family": "logs", "backend": "subprocess"}):
        report = check(ENV_ID, env_kwargs=kwargs)
        assert report.ok, str(report)
        assert not report.notes, report.notes


def test_task_ids_and_options():
    env = gym.make(ENV_ID)
    _, info = env.reset(options={"task_id": "logs/17"})
    assert info["task_id"] == "logs/17" and info["family"] == "logs" and env.unwrapped.task["index"] == 17
    assert env.unwrapped.num_tasks == 3 * T.TASKS_PER_FAMILY
    _, info = env.reset(options={"task_index": 3 * 17 + 1})  # families interleave
    assert info["task_id"] == "logs/17"
    assert [env.reset(options={"task_index": i})[1]["family"] for i in range(4)] == [*FAMILIES, FAMILIES[0]]
    for bad in ("moon/1", "logs/x", f"logs/{T.TASKS_PER_FAMILY}"):
        with pytest.raises(ValueError):
            env.reset(options={"task_id": bad})
    with pytest.raises(ValueError):
        CodeExecEnv(family="moon")
    with pytest.raises(ValueError):
        CodeExecEnv(backend="docker-in-docker")
    env.close()


# -- the oracle -----------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_solves_every_template(envs, family):
    """Every template of the family (its first task) plus the first 8 tasks, through the real sandbox."""
    indices = sorted({*first_index_per_template(family).values(), *range(8)})
    assert {make_task(family, i)["template"] for i in indices} == set(template_names(family))
    for i in indices:
        reward, info, messages = play(envs[family], OracleAgent(), i)
        assert reward == 1.0 and info["success"], (family, i, messages[-3:])
        assert info["submitted"] == answer_text(envs[family].task)  # the solution prints exactly the gold text
        assert info["metrics"] == {"success": 1.0, "python_calls": 1.0, "invalid_calls": 0.0, "runs_ok": 1.0,
                                   "runs_error": 0.0, "runs_timeout": 0.0, "runs_memory": 0.0,
                                   "runs_killed": 0.0}  # fmt: skip


def test_gold_calls_match_the_oracle_for_tool_call_matching():
    trajs = run(ENV_ID, "oracle", episodes=6, seed=0, progress=False)
    assert [t.task_id for t in trajs] == ["table/0", "logs/0", "numbers/0", "table/1", "logs/1", "numbers/1"]
    for traj in trajs:
        assert traj.success and len(traj.turns) == 2
        assert ToolCallMatching()([traj])[0].rewards == [1.0, 1.0]


@pytest.mark.slow
def test_oracle_solves_500_tasks_per_family():
    """1,500 episodes through the pool: two threads, each with its own env per family (about 15 s on 2 cores).
    This checks the tasks, not the time limit (its own tests are below): a run gets 60 s, so a CI machine busy with
    other tests cannot time an oracle program out, and a failure shows what the oracle's program got back."""

    def solve(job: tuple[str, range]) -> list[str]:
        family, indices = job
        env = CodeExecEnv(family=family, timeout=60.0)
        try:
            failed = []
            for i in indices:
                total, _, messages = play(env, OracleAgent(), i)
                if total != 1.0:
                    failed.append(f"{i}: {[m['content'][:300] for m in messages if m['role'] == 'tool']}")
            return failed
        finally:
            env.close()

    jobs = [(family, range(start, 500, 2)) for family in FAMILIES for start in (0, 1)]
    with ThreadPoolExecutor(2) as pool:
        failed = dict(zip(jobs, pool.map(solve, jobs), strict=True))
    assert not any(failed.values()), {f"{family}:{r.start}": v for (family, r), v in failed.items() if v}


@pytest.mark.slow
def test_random_is_far_below_the_oracle(envs):
    wins = Counter()
    for family in FAMILIES:
        for i in range(15):
            wins[family] += play(envs[family], RandomAgent(), i, seed=i)[1]["success"]
    assert sum(wins.values()) <= 3, wins


# -- answers --------------------------------------------------------------------------------------------------
def test_wrong_answers_give_zero(envs):
    env = envs["table"]
    for wrong in (call("submit_answer", answer="-1"), "<answer>-1</answer>", "<answer>Nowhere</answer>"):
        env.reset(options={"task_index": 2})
        _, reward, terminated, truncated, info = env.step(wrong)
        assert terminated and not truncated and reward == 0.0 and info["success"] is False
        assert info["reward_components"] == {"outcome": 0.0} and info["metrics"]["success"] == 0.0
    env.reset(options={"task_index": 2})
    _, reward, terminated, _, info = env.step(f"Done: <answer> {answer_text(env.task)} </answer>")
    assert terminated and reward == 1.0 and info["success"]


def test_answer_checking():
    as_int = {"answer": 1234, "answer_kind": "int", "decimals": None, "exact": None}
    assert [check_answer(as_int, s) for s in ("1234", "1,234", " 1234.0 ", "1234.", "`1234`", "1.234e3")] == [True] * 6
    assert [check_answer(as_int, s) for s in ("1235", "1234.5", "", "abc", "1e999999999", "1" * 5000)] == [False] * 6
    as_float = {"answer": 2.35, "answer_kind": "float", "decimals": 2, "exact": 2.3466}
    assert [check_answer(as_float, s) for s in ("2.35", "2.3466", "2.346", "$2.35", "2.35%")] == [True] * 5
    assert [check_answer(as_float, s) for s in ("2.34", "2.36", "2.4", "2", "nan", "inf")] == [False] * 6
    as_str = {"answer": "/api/orders", "answer_kind": "str", "decimals": None, "exact": None}
    assert [check_answer(as_str, s) for s in ("/api/orders", " '/API/orders'. ", "`/api/orders`")] == [True] * 3
    assert [check_answer(as_str, s) for s in ("/api/order", "/api/orders?id=1", "")] == [False] * 3


@pytest.mark.slow
def test_generated_answers_cross_check():
    """The fast generators agree with brute force, and every task's answer checks against its own text."""
    rng = random.Random(0)
    for _ in range(200):
        (low, high), k = sorted((rng.randint(0, 3000), rng.randint(0, 3000))), rng.randint(0, 30)
        brute = sum(1 for n in range(low, high + 1) if sum(map(int, str(n))) == k)
        assert T.count_digit_sum(high, k) - T.count_digit_sum(low - 1, k) == brute
        n, m = rng.randint(0, 300), rng.randint(2, 10**9)
        a0, a1, p, q, r = (rng.randint(0, m - 1), rng.randint(0, m - 1), *(rng.randint(0, 99) for _ in range(3)))
        seq = [a0 % m, a1 % m]
        while len(seq) <= n:
            seq.append((p * seq[-1] + q * seq[-2] + r) % m)
        assert T.recurrence_term(a0, a1, p, q, r, m, n) == seq[n]
        n = rng.randint(1, 3000)
        assert T.gcd_sum(n) == sum(math.gcd(i, n) for i in range(1, n + 1))
        divisors = rng.sample(range(2, 40), 3)
        assert T.count_exactly_one(n, divisors) == sum(1 for i in range(1, n + 1)
                                                       if sum(i % d == 0 for d in divisors) == 1)  # fmt: skip
        assert T.prime_sum_below(n) == sum(i for i in range(2, n) if all(i % d for d in range(2, math.isqrt(i) + 1)))
    for family in FAMILIES:
        for i in range(150):
            task = make_task(family, i)
            assert task == make_task(family, i)  # from the index alone
            assert check_answer(task, answer_text(task)) and task["answer_kind"] in T.ANSWER_KINDS
            assert json.loads(json.dumps(task)) == task
            if task["answer_kind"] == "float":  # never close to a rounding tie
                assert not T._near_boundary(T.Fraction(task["exact"]), task["decimals"], 1e-7)
    table = make_task("table", 0)["files"]["orders.csv"].splitlines()
    logs = make_task("logs", 0)["files"]["access.log"].splitlines()
    assert 40 <= len(table) - 1 <= 200 and 200 <= len(logs) <= 500


# -- calls and messages ---------------------------------------------------------------------------------------
def test_python_tool_messages(envs):
    env = envs["table"]
    env.reset(options={"task_index": 0})
    obs, _, _, _, info = env.step(call("python", code="import os\nprint(sorted(os.listdir('.')))"))
    assert obs == [{"role": "tool", "name": "python", "content": "['main.py', 'orders.csv']\n"}]
    assert info["action_valid"] and info["run_statuses"] == ["ok"]
    obs, *_ = env.step(call("python", code="def f():\n    return 1 / 0\n\nf()"))
    text = obs[0]["content"]
    assert text.startswith('[stderr]\nTraceback (most recent call last):\n  File "main.py", line 4, in <module>')
    assert "ZeroDivisionError" in text and "_child" not in text and text.endswith("[the program exited with status 1]")
    obs, *_ = env.step(call("python", code="print('x' * 50_000)"))
    assert len(obs[0]["content"]) < MAX_OUTPUT_CHARS + 100 and "characters cut" in obs[0]["content"]
    obs, *_ = env.step(call("python", code=""))
    assert obs[0]["content"] == "[no output: print() what you want to see]"
    calls = [("c1", "python", {"code": "print(7)"}), ("c2", "submit_answer", {"answer": "7"}),
             ("c3", "python", {"code": "print(8)"})]  # fmt: skip
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, name, args in calls]}  # fmt: skip
    obs, _, terminated, _, info = env.step(message)  # calls after submit_answer do not run
    assert [(m["tool_call_id"], m["content"]) for m in obs] == [("c1", "7\n"), ("c2", "Answer submitted.")]
    assert terminated and info["metrics"]["python_calls"] == 5.0 and info["submitted"] == "7"


def test_timeout_and_memory_do_not_end_the_episode():
    env = CodeExecEnv(family="numbers", timeout=1.0)
    try:
        env.reset(options={"task_index": 0})
        obs, _, terminated, truncated, info = env.step(
            call("python", code="print('start', flush=True)\nwhile True:\n    pass")
        )
        assert obs[0]["content"] == "start\n[the program was stopped: it ran past its 1 s time limit]"
        assert info["action_valid"] and info["run_statuses"] == ["timeout"] and not (terminated or truncated)
        obs, _, _, _, info = env.step(call("python", code="x = bytearray(4 << 30)"))
        assert info["run_statuses"] == ["memory"] and obs[0]["content"].endswith("[the program ran out of memory]")
        obs, *_ = env.step(call("python", code=env.task["solution"]))
        _, reward, terminated, _, info = env.step(call("submit_answer", answer=obs[0]["content"]))
        assert terminated and reward == 1.0
        assert info["metrics"]["runs_timeout"] == 1.0 and info["metrics"]["runs_memory"] == 1.0
    finally:
        env.close()


def test_plain_text_without_answer_and_empty_answers_are_invalid(envs):
    env = envs["numbers"]
    env.reset(options={"task_index": 1})
    invalid = (
        "Let me think.",
        "<answer>  </answer>",
        call("submit_answer", answer=" "),
        call("python"),
        call("python", code=1),
        call("run", code="print(1)"),
        call("submit_answer", answer="1", extra=2),
    )
    for action in invalid:
        obs, reward, terminated, _, info = env.step(action)
        assert not terminated and not info["action_valid"] and info["parse_error"] and obs[0]["content"]
        assert reward == 0.0
    _, _, terminated, _, info = env.step("<answer>5")  # lenient parsing: an unclosed final tag runs to the end
    assert terminated and info["submitted"] == "5" and info["metrics"]["invalid_calls"] == len(invalid)


def test_truncation_reports_metrics():
    env = CodeExecEnv(family="numbers", max_turns=2)
    env.reset(options={"task_index": 0})
    env.step(call("python", code="print(1)"))
    _, _, terminated, truncated, info = env.step("no answer here")
    assert truncated and not terminated and info["success"] is False
    assert info["metrics"]["python_calls"] == 1.0 and info["metrics"]["invalid_calls"] == 1.0
    env.close()


# -- fuzz: malformed calls in both formats ---------------------------------------------------------------------
NAMES = st.sampled_from(["python", "submit_answer", "run", "exec", ""])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
ARGS = st.dictionaries(st.sampled_from(["code", "answer", "x"]), JSON, max_size=3) | JSON


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
        return json.dumps(
            {"tool_calls": [{"id": "x", "type": draw(st.sampled_from(["function", "f"])), "function": fn}]}
        )
    junk = draw(st.text(max_size=30))
    return f"<tool_call>{junk}" if style == "raw-hermes" else "{" + junk


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])  # fmt: skip
@given(action=malformed_turn(), index=st.integers(0, 30))
def test_fuzz_malformed_calls(envs, action, index):
    env = envs["numbers"]
    env.reset(options={"task_index": index})
    obs, reward, terminated, _, info = env.step(action)
    json.dumps(info)
    assert obs or terminated
    assert all(isinstance(m["content"], str) and m["content"] for m in obs)
    assert math.isfinite(reward)
    if not info["action_valid"]:
        assert info["parse_error"] and obs
        assert any(m["content"].startswith("Error") for m in obs)


# -- back-ends, determinism, branching -----------------------------------------------------------------------------
SCRIPTED = [
    call("python", code="import os\nprint(sorted(os.listdir('.')))"),
    call("python", code="print(open('access.log').readline())\nprint(1 / 0)"),
    call("python", code="print(("),
    call("python", code="import sys\nprint('partial')\nsys.exit(3)"),
    "no tool call here",
]


def transcript(env: CodeExecEnv, seed: int) -> list[str]:
    """Scripted calls, three turns of the random agent, then the oracle's two turns: each step as canonical JSON."""
    obs, info = env.reset(seed=seed)
    gold = info["gold"]
    record = [json.dumps([obs, info], sort_keys=True)]
    messages = list(obs)
    agent = RandomAgent()
    agent.reset(seed=seed)
    for t in range(env.max_turns):
        if t < len(SCRIPTED):
            action = SCRIPTED[t]
        elif t < len(SCRIPTED) + 3:
            action = agent.act(messages, info)
        elif t == len(SCRIPTED) + 3:
            action = call("python", code=gold["solution"])
        else:
            action = OracleAgent().act(messages, {"gold": gold})  # submits what the solution printed
        obs, *rest = out = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        record.append(json.dumps(list(out), sort_keys=True))
        if rest[1] or rest[2]:
            break
    return record


@pytest.mark.slow
def test_backends_give_identical_observations_and_runs_are_deterministic():
    pool = CodeExecEnv(family="logs", max_turns=12)
    sub = CodeExecEnv(family="logs", max_turns=12, backend="subprocess")
    try:
        first = transcript(pool, seed=2)  # seed 2: the random turns do not answer, the oracle's turns succeed
        assert len(first) == len(SCRIPTED) + 3 + 2 + 1 and json.loads(first[-1])[1] == 1.0
        assert transcript(sub, seed=2) == first
        assert transcript(pool, seed=2) == first
    finally:
        pool.close()
        sub.close()


def test_snapshot_pickle_and_close():
    env = CodeExecEnv(family="table")
    env.reset(options={"task_index": 4})
    env.step(call("python", code="print(len(open('orders.csv').readlines()))"))
    snap = env.snapshot()
    clone = pickle.loads(pickle.dumps(env))
    anchor = env.anchor()
    env.step(call("python", code="print(2)"))
    assert env.anchor() != anchor
    env.step(call("python", code="print(2)"))  # the same program again: the same state
    again = env.anchor()
    env.restore(snap)
    assert env.anchor() == anchor and clone.anchor() == anchor
    answer = answer_text(env.task)
    for e in (env, clone):
        _, reward, terminated, _, info = e.step(call("submit_answer", answer=answer))
        assert terminated and reward == 1.0 and info["metrics"]["python_calls"] == 1.0
    assert again != anchor
    users = SHARED.users(PoolKey())
    assert env.sandbox is SHARED.acquire(PoolKey())  # the env holds a share of the process's pool
    SHARED.release(PoolKey(), env.sandbox)
    env.close()
    assert SHARED.users(PoolKey()) == users - 1  # ... and gives it back (tests/envs/test_code_exec_shared.py)
    env.reset(options={"task_index": 4})  # a closed env starts a new sandbox when it needs one
    obs, *_ = env.step(call("python", code="print(3)"))
    assert obs[0]["content"] == "3\n"
    env.close()
    clone.close()


# -- hostile calls (the issue's inputs) ------------------------------------------------------------------------
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["pool", "subprocess"])
def test_escaped_lone_surrogate_in_code_runs_as_replacement_character(backend):
    """``print(1) # \\ud800`` in a JSON call (both formats) used to break writing the program into the work dir."""
    env = CodeExecEnv(family="numbers", backend=backend)
    try:
        env.reset(options={"task_index": 0})
        hermes = '<tool_call>{"name": "python", "arguments": {"code": "print(1) # \\ud800\\nprint(\'\\udfff\')"}}'
        openai = json.dumps(
            {"tool_calls": [{"function": {"name": "python", "arguments": '{"code": "print(1) # \\ud800"}'}}]}
        )
        for action in (hermes + "</tool_call>", openai):
            obs, _, terminated, _, info = env.step(action)
            assert info["action_valid"] and info["run_statuses"] == ["ok"] and not terminated
            assert obs[0]["content"].startswith("1\n")
        assert obs[0]["content"] == "1\n"
        assert env.run_code("print(len('\ud800x'))").stdout == "2\n"  # direct callers too
    finally:
        env.close()


@pytest.mark.parametrize(
    ("action", "phrase"),
    [
        (f'<tool_call>{{"name": "python", "arguments": {json.dumps("[" * 1000)}}}</tool_call>', "nested more than 64"),
        (
            '<tool_call>{"name": "submit_answer", "arguments": {"answer": ' + "4" * 4301 + "}}</tool_call>",
            "4,301 digits",
        ),
        ('<tool_call>{"name": "submit_answer", "arguments": {"answer": ' + "4" * 400 + "}}</tool_call>", "400 digits"),
        ('<tool_call>{"name": "submit_answer", "arguments": {"answer": NaN}}</tool_call>', "NaN"),
    ],
)
def test_hostile_calls_are_invalid_and_do_not_end_the_episode(envs, action, phrase):
    env = envs["numbers"]
    env.reset(options={"task_index": 0})
    obs, _, terminated, truncated, info = env.step(action)
    assert info["action_valid"] is False and phrase in info["parse_error"] and phrase in obs[0]["content"]
    assert (info["turn"], terminated, truncated) == (1, False, False) and env.transcript[-2]["content"] == action


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(text=st.text(st.characters(codec=None, categories=["Cs", "Ll", "Nd", "So"]), max_size=12))
def test_any_surrogates_in_code_reach_the_program_as_replacement_characters(envs, text):
    env = envs["numbers"]
    env.reset(options={"task_index": 0})
    code = f"print(ascii('{text}'))"  # the characters themselves in the source (no quotes or backslashes drawn)
    obs, _, _, _, info = env.step(call("python", code=code))  # json.dumps writes each surrogate as an escape
    # a high surrogate escaped just before a low one is a pair: JSON reads the two escapes as one character
    expected = ascii(re.sub("[\ud800-\udfff]", "\ufffd", json.loads(json.dumps(text))))
    assert info["action_valid"] and info["run_statuses"] == ["ok"], obs
    assert obs[0]["content"] == expected + "\n"


# -- answers written the ways people write them (issue 20) ---------------------------------------------------
UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]  # fmt: skip
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _word(n: int) -> str:
    return UNITS[n] if n < 20 else TENS[n // 10 - 2] + (f"-{UNITS[n % 10]}" if n % 10 else "")


def _int_forms(n: int) -> list[str]:
    grouped = f"{n:,}"
    forms = [str(n), f"**{n}**", f"The answer is {n}", f"The answer is **{grouped}**.", f"`{n}`", f"```\n{n}\n```",
             f"Answer: {grouped}", f"{n}.0", f"Final answer: {n}.", f"{n:_}", grouped]  # fmt: skip
    return [*forms, _word(n)] if 0 <= n < 100 else forms


def _hour_forms(h: int) -> list[str]:
    twelve = f"{h % 12 or 12} {'am' if h < 12 else 'pm'}"
    return [str(h), f"{h:02d}:00", f"{h}:00", f"**{h:02d}:00**", twelve, f"The busiest hour is {h:02d}:00.",
            f"{h:02d}:00-{h:02d}:59", f"{h:02d}:00:00-{h:02d}:59:59", f"Answer: {h}"]  # fmt: skip


def _float_forms(task: dict) -> list[str]:
    text = answer_text(task)
    grouped = f"{float(text):,.{task['decimals']}f}"
    forms = [text, f"**{text}**", f"The answer is {text}", f"The answer is **{grouped}**.", f"`{text}`",
             f"```\n{text}\n```", f"{text}0", f"Answer: {grouped}"]  # fmt: skip
    if task["template"] == "error_rate_hour":
        forms += [f"{text}%", f"{text} percent", f"The answer is **{text}%**."]
    if task["template"] in ("revenue_region_month", "avg_order_value"):
        forms += [f"${grouped}", f"The answer is ${text}."]
    if task["template"] == "median_latency":
        forms += [f"{text} ms"]
    return forms


def _str_forms(task: dict) -> list[str]:
    a = str(task["answer"])
    forms = [a, f"**{a}**", f"The answer is {a}.", f"`{a}`", f"```\n{a}\n```", f'"{a}"', f"Answer: {a}", a.upper()]
    if task["template"] == "top_region_quarter":
        forms += [f"the {a} region", f"The answer is the **{a}** region."]
    return forms


def _forms(task: dict, answer: int | float | str) -> list[str]:
    """Renderings of ``answer`` (the task's own, or a wrong one) in the forms of the task's answer kind."""
    fake = {**task, "answer": answer}
    if task["answer_kind"] == "float":
        return _float_forms(fake)
    if task["answer_kind"] == "str":
        return _str_forms(fake)
    return _hour_forms(answer) if task["template"] in T.HOUR_TEMPLATES else _int_forms(answer)


def _wrong(task: dict) -> int | float | str:
    """A value next to the task's answer: the next integer or hour, one more unit of the last decimal place,
    another name of the same kind."""
    answer = task["answer"]
    if task["answer_kind"] == "int":
        return (answer + 1) % 24 if task["template"] in T.HOUR_TEMPLATES else answer + 1
    if task["answer_kind"] == "float":
        return round(answer + 10 ** -task["decimals"], task["decimals"])
    others = {"top_region_quarter": T.REGIONS, "top_mean_quantity": T.PRODUCTS}.get(task["template"])
    if others:
        return next(o for o in others if o != answer)
    return answer + "x" if task["template"] == "slowest_path" else answer[:-1] + ("8" if answer[-1] == "9" else "9")


def tasks_per_template(family: str, per: int = 3, limit: int = 600) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for i in range(limit):
        task = make_task(family, i)
        if len(found.setdefault(task["template"], [])) < per:
            found[task["template"]].append(task)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_template_accepts_correct_answers_in_every_form_and_rejects_wrong_ones(family):
    """Each template's answer kind, written the ways people write it, scores 1; the neighbouring wrong value in the
    same forms scores 0 (issue 20: ``**3464999702**``, ``The answer is 3464999702`` and ``17:00`` for an hour
    were rejected)."""
    found = tasks_per_template(family)
    assert sorted(found) == sorted(template_names(family))
    for template, tasks in found.items():
        for task in tasks:
            for form in _forms(task, task["answer"]):
                assert check_answer(task, form), (template, form)
            for form in _forms(task, _wrong(task)):
                assert not check_answer(task, form), (template, task["answer"], form)


def test_issue_cases_on_the_env(envs):
    """The issue's CodeExec answers, submitted both ways, end the episode with success; a wrong value in the same
    form does not."""
    env = envs["numbers"]
    env.reset(options={"task_index": 20})
    n = env.task["answer"]
    for form, ok in ((f"**{n}**", True), (f"The answer is {n}", True), (f"**{n + 1}**", False),
                     (f"The answer is {n + 1}", False)):  # fmt: skip
        for action in (f"<answer>{form}</answer>", call("submit_answer", answer=form)):
            env.reset(options={"task_index": 20})
            _, reward, terminated, _, info = env.step(action)
            assert terminated and info["success"] is ok and reward == float(ok), (action, info)
    logs = envs["logs"]
    index = next(i for i in range(600) if make_task("logs", i)["template"] == "busiest_hour")
    logs.reset(options={"task_index": index})
    hour = logs.task["answer"]
    for form, ok in ((f"{hour:02d}:00", True), (f"{hour}:00", True), (f"{(hour + 1) % 24:02d}:00", False),
                     (f"{hour:02d}:30", False)):  # fmt: skip
        logs.reset(options={"task_index": index})
        _, _, terminated, _, info = logs.step(f"<answer>{form}</answer>")
        assert terminated and info["success"] is ok, (form, hour)


@pytest.mark.parametrize(
    "text",
    ["12,34", "1 2 3 4", "1,234 or 1,235", "not 1234", "about 1234?", "1234 1234", "12:34"],
)
def test_malformed_or_hedged_numbers_are_rejected(text):
    task = {"answer": 1234, "answer_kind": "int", "decimals": None, "exact": None, "template": "count_5xx"}
    assert not check_answer(task, text)


@pytest.mark.parametrize("text", ["5 o'clock", "17:00-19:00", "5", "17:30", "16:00-16:59", "5 am", "17:00 or 18:00"])
def test_hours_that_do_not_say_the_hour_are_rejected(text):
    task = {"answer": 17, "answer_kind": "int", "decimals": None, "exact": None, "template": "busiest_hour"}
    assert not check_answer(task, text)


LEADS = ["", "The answer is ", "Answer: ", "Final answer: ", "So the final answer is ", "Here you go: "]
MARKUP = [("", ""), ("**", "**"), ("`", "`"), ("*", "*"), ('"', '"')]


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), index=st.integers(0, 9_999), data=st.data())
def test_any_wrapping_of_a_correct_answer_counts_and_of_a_wrong_one_does_not(family, index, data):
    task = make_task(family, index)
    for answer, ok in ((task["answer"], True), (_wrong(task), False)):
        form = data.draw(st.sampled_from([f for f in _forms(task, answer) if "`" not in f and "*" not in f]))
        left, right = data.draw(st.sampled_from(MARKUP))
        text = data.draw(st.sampled_from(LEADS)) + left + form + right + data.draw(st.sampled_from(["", ".", "!"]))
        if data.draw(st.booleans()):
            text = f"```\n{left}{form}{right}\n```"
        assert check_answer(task, text) is ok, (text, task["answer"])
