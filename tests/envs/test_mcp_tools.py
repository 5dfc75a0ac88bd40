"""MCPTools-v0 against a real MCP server (tests/data/mcp_tool_server.py) started by the test, over stdio and HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401 - registers the envs
from agentgym.contract.trust import UntrustedArgumentError, checked_kwargs
from agentgym.running.checker import check

ROOT = Path(__file__).resolve().parents[2]
SERVER = ["{python}", str(ROOT / "tests" / "data" / "mcp_tool_server.py")]
TASKS = [{"id": "calc", "prompt": "What is 17 * 23 + 4?", "answer": "395"},
         {"id": "note", "prompt": "What does the note 'k' say?", "answer": ["hello", "hi"]}]  # fmt: skip


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture
def env() -> Iterator[gym.Env]:
    e = gym.make("agentgym/MCPTools-v0", command=SERVER, tasks=TASKS, call_timeout=1.0, max_output_chars=300)
    yield e
    e.close()


@pytest.mark.slow
def test_an_episode_to_success_over_stdio(env: gym.Env) -> None:
    obs, info = env.reset(options={"task_id": "calc"})
    assert '"name": "multiply"' in obs[0]["content"] and obs[1]["content"] == TASKS[0]["prompt"]
    assert info["gold"]["answers"] == ["395"]
    obs, *_ = env.step(call("multiply", a=17, b=23))
    assert obs == [{"role": "tool", "name": "multiply", "content": "391.0"}]
    obs, *_ = env.step(call("add", a=391, b=4))
    assert obs[0]["content"] == "395.0"
    obs, reward, terminated, truncated, info = env.step("<answer>395</answer>")
    assert (reward, terminated, truncated, info["success"], info["correct"]) == (1.0, True, False, True, True)
    assert info["metrics"]["calls"] == 2.0
    env.reset(options={"task_id": "calc"})
    *_, info = env.step("The answer is <answer>394</answer>")
    assert info["success"] is False and info["metrics"]["em"] == 0.0


@pytest.mark.slow
def test_server_state_lives_across_calls_and_tool_errors_are_observations(env: gym.Env) -> None:
    env.reset(options={"task_id": "note"})
    env.step(call("save_note", key="k", text="hello"))
    obs, *_ = env.step(call("read_note", key="k"))
    assert obs[0]["content"] == "hello"
    obs, _, _, _, info = env.step(call("read_note", key="missing"))
    assert obs[0]["content"].startswith("Error") and info["action_valid"] is True
    obs, _, _, _, info = env.step(call("add", a="x", b=1))  # the server's own validation
    assert obs[0]["content"].startswith("Error") and "valid number" in obs[0]["content"]
    obs, _, _, _, info = env.step(call("rm", path="/"))  # not a listed tool: nothing runs, an invalid step
    assert info["action_valid"] is False and "unknown function 'rm'" in obs[0]["content"]
    *_, info = env.step("<answer>hi</answer>")
    assert info["success"] is True


@pytest.mark.slow
def test_caps_timeouts_and_crashes_become_observations(env: gym.Env) -> None:
    env.reset(options={"task_id": "calc"})
    obs, *_ = env.step(call("huge", n=100_000))
    assert len(obs[0]["content"]) <= 300 and "output cut: 100000 characters" in obs[0]["content"]
    start = time.monotonic()
    obs, _, terminated, _, info = env.step(call("slow", seconds=30))
    assert time.monotonic() - start < 10 and not terminated
    assert "took longer than 1 s" in obs[0]["content"]
    obs, *_ = env.step(call("add", a=1, b=2))  # the session still answers
    assert obs[0]["content"] == "3.0"
    obs, *_ = env.step(call("crash"))
    assert obs[0]["content"].startswith("Error: the tool server failed during crash")
    obs, *_ = env.step(call("add", a=2, b=2))  # a fresh server on the next call
    assert obs[0]["content"] == "4.0"
    *_, info = env.step("<answer>395</answer>")
    assert info["success"] is True and info["metrics"]["failed_calls"] == 2.0


@pytest.mark.slow
def test_a_server_that_is_not_one_becomes_an_observation() -> None:
    junk = [sys.executable, "-c", "import sys, time; print('not json-rpc', flush=True); time.sleep(60)"]
    env = gym.make("agentgym/MCPTools-v0", command=junk, tasks=TASKS, connect_timeout=2.0, call_timeout=1.0)
    try:
        start = time.monotonic()
        obs, info = env.reset(options={"task_index": 0})
        assert "tool server is unavailable" in obs[0]["content"] and time.monotonic() - start < 15
        obs, _, _, _, info = env.step(call("add", a=1, b=2))
        assert info["action_valid"] is False and "unknown function" in obs[0]["content"]
        *_, info = env.step("<answer>395</answer>")
        assert info["success"] is True
    finally:
        env.close()


def test_the_server_and_tasks_are_the_operators() -> None:
    for name, value in [("command", ["sh", "-c", "id"]), ("url", "http://example.com/mcp"), ("tasks", "/etc/passwd"),
                        ("headers", {"authorization": "x"}), ("call_timeout", 1e9), ("cwd", "/")]:  # fmt: skip
        with pytest.raises(UntrustedArgumentError):
            checked_kwargs("agentgym/MCPTools-v0", {name: value})
    assert checked_kwargs("agentgym/MCPTools-v0", {"max_turns": 5}) == {"max_turns": 5}


def test_bad_operator_arguments_are_value_errors(tmp_path: Path) -> None:
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"prompt": "q", "answer": "a"}\nnot json\n')
    for kwargs in [{"command": SERVER, "tasks": str(bad)}, {"command": SERVER, "tasks": [{"prompt": ""}]},
                   {"command": SERVER, "url": "http://127.0.0.1:1/mcp", "tasks": TASKS},
                   {"url": "file:///etc/passwd", "tasks": TASKS}, {"command": "python server.py", "tasks": TASKS},
                   {"command": SERVER, "tasks": TASKS, "max_output_chars": 10}]:  # fmt: skip
        with pytest.raises(ValueError):
            gym.make("agentgym/MCPTools-v0", **kwargs)
    assert gym.make("agentgym/MCPTools-v0").unwrapped.unavailable_reason  # no server given: says what to give


@pytest.mark.slow
def test_tasks_from_a_jsonl_file_and_agentgym_check(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    report = check("agentgym/MCPTools-v0", env_kwargs={"command": SERVER, "tasks": str(path), "call_timeout": 5.0})
    assert not report.failed, report.failed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_an_episode_over_streamable_http() -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER[1], "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        env = gym.make("agentgym/MCPTools-v0", url=f"http://127.0.0.1:{port}/mcp", tasks=TASKS, call_timeout=5.0)
        try:
            env.reset(options={"task_id": "calc"})
            obs, *_ = env.step(call("multiply", a=17, b=23) + call("add", a=391, b=4))
            assert [m["content"] for m in obs] == ["391.0", "395.0"]
            *_, info = env.step("<answer>395</answer>")
            assert info["success"] is True
        finally:
            env.close()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_served_over_mcp_it_offers_the_servers_tools() -> None:
    from agentgym.serving.mcp import EnvMCPServer

    srv = EnvMCPServer("agentgym/MCPTools-v0", {"command": SERVER, "tasks": TASKS})
    try:
        assert {t["name"] for t in srv.tools()} == {"reset", "reply"}
        srv.call("reset", {"task_id": "calc"})
        assert {"add", "multiply", "slow", "reset", "reply"} <= {t["name"] for t in srv.tools()}
        assert srv.call("add", {"a": 391, "b": 4}).text == "395.0"
        end = srv.call("reply", {"text": "<answer>395</answer>"})
        assert end.data["success"] is True and end.data["reward"] == 1.0
    finally:
        srv.close()
