"""agentgym serve --mcp: a real MCP client (the SDK's ClientSession) drives a ToolUse episode over stdio and HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import agentgym  # noqa: F401 - registers the envs
from agentgym.serving.mcp import EnvMCPServer

ROOT = Path(__file__).resolve().parents[2]
TRANSFER = {"source": "savings", "target": "checking", "amount": 302.5}


def _serve_argv(*extra: str) -> list[str]:
    return ["-m", "agentgym.cli", "serve", "--mcp", "agentgym/ToolUse-v0", "--env-arg", "world=bank", *extra]


async def _episode(session: ClientSession, changed: list[Any]) -> None:
    """Play bank task 3 to the end through MCP tool calls, checking what a client relies on."""
    await session.initialize()
    before = [t.name for t in (await session.list_tools()).tools]
    assert before == ["reset", "reply"]  # no episode yet: only the control tools
    first = await session.call_tool("reset", {"task_index": 3})
    assert not first.is_error and first.structured_content["task_id"] == "bank/3"
    assert "Transfer 302.50 from savings to checking" in first.content[0].text
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"transfer", "get_balance", "reset", "reply"} <= set(tools)
    assert tools["transfer"].input_schema["required"] == ["source", "target", "amount"]
    balance = await session.call_tool("get_balance", {"account": "checking"})
    moved = await session.call_tool("transfer", TRANSFER)
    assert moved.content[0].text == '"moved 302.50 from savings to checking"'
    after = await session.call_tool("get_balance", {"account": "checking"})
    assert float(after.content[0].text) == pytest.approx(float(balance.content[0].text) + 302.5)  # the env's state
    assert after.structured_content["turn"] == 3 and after.structured_content["reward"] == 0.0
    bad = await session.call_tool("transfer", {"source": "savings"})  # a missing argument: the env's message
    assert bad.structured_content["action_valid"] is False and "amount" in bad.content[0].text
    unknown = await session.call_tool("rm_rf", {})
    assert unknown.is_error and "unknown tool" in unknown.content[0].text
    # The rest of the task by its gold calls, each instruction ended with a reply stating its facts.
    srv = EnvMCPServer("agentgym/ToolUse-v0", {"world": "bank"})
    srv.call("reset", {"task_index": 3})
    gold = srv.env.unwrapped._gold["task"]["instructions"]
    srv.close()
    end = None
    for k, ins in enumerate(gold):
        for step in ins["steps"] if k else ins["steps"][1:]:  # the first transfer is done
            for call in step:
                await session.call_tool(call["name"], call["arguments"])
        end = await session.call_tool("reply", {"text": "Done. " + " ".join(ins["facts"])})
    assert end is not None and end.structured_content["terminated"] is True
    assert end.structured_content["success"] is True and end.structured_content["reward"] == 1.0
    late = await session.call_tool("get_balance", {"account": "checking"})
    assert late.is_error and "reset" in late.content[0].text
    await anyio.sleep(0.1)
    assert any("tools/list_changed" in str(getattr(m, "method", "")) for m in changed)


@pytest.mark.slow
def test_stdio_client_plays_an_episode() -> None:
    changed: list[Any] = []

    async def record(message: Any) -> None:
        changed.append(message)

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=_serve_argv(), cwd=str(ROOT))
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w, message_handler=record) as s:
                await _episode(s, changed)

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"no server on port {port}")


@pytest.mark.slow
def test_http_client_plays_an_episode_and_needs_the_token() -> None:
    port = _free_port()
    env = {**os.environ, "AGENTGYM_TOKEN": "s3cret-token"}
    proc = subprocess.Popen([sys.executable, *_serve_argv("--transport", "http", "--port", str(port))], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        no_token = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert no_token.status_code == 401 and "bearer token" in no_token.text
        big = httpx2.post(url, content=b"x" * (2 << 20), headers={"authorization": "Bearer s3cret-token"})
        assert big.status_code == 413
        changed: list[Any] = []

        async def record(message: Any) -> None:
            changed.append(message)

        async def main() -> None:
            headers = {"authorization": "Bearer s3cret-token"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                streamable_http_client(url, http_client=http) as streams,
                ClientSession(*streams, message_handler=record) as s,
            ):
                await _episode(s, changed)

        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(10)


def test_http_beyond_loopback_needs_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_TOKEN"}
    out = subprocess.run([sys.executable, *_serve_argv("--transport", "http", "--host", "0.0.0.0")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "beyond loopback" in out.stderr and "token" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_mcp_needs_one_env() -> None:
    out = subprocess.run([sys.executable, "-m", "agentgym.cli", "serve", "--mcp"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "exactly one ENV_ID" in out.stderr


@pytest.mark.parametrize(
    ("name", "arguments", "says"),
    [
        ("transfer", "not an object", "must be a JSON object"),
        ("transfer", ["a"], "must be a JSON object"),
        (7, {}, "tool name"),
        ("x" * 10_000, {}, "tool name"),
        ("reset", {"task_index": 10**9}, "out of range"),
        ("reset", {"task_index": "3"}, "task_index must be an int"),
        ("reset", {"seed": -1}, "seed"),
        ("reset", {"options": {"variant": "nope"}}, "variant"),
        ("reset", {"options": {"path": "/etc/passwd"}}, "unknown reset option"),
        ("reset", {"evil": 1}, "unknown reset argument"),
        ("reply", {"text": 5}, "text (a string)"),
        ("transfer", {"source": "s" * 40_000, "target": "t", "amount": 1}, "at most"),
    ],
)
def test_hostile_calls_are_error_results(name: Any, arguments: Any, says: str) -> None:
    srv = EnvMCPServer("agentgym/ToolUse-v0", {"world": "bank"}, max_result_chars=500)
    try:
        assert not srv.call("reset", {"task_index": 3}).error
        out = srv.call(name, arguments)
        assert out.error and says in out.text
        assert len(srv.call("list_accounts", {}).text) <= 500  # results are capped; the episode goes on
    finally:
        srv.close()


def test_tools_follow_the_env_and_change_with_bfcl_like_withheld_functions() -> None:
    srv = EnvMCPServer("agentgym/ToolUse-v0", {"world": "bank", "variant": "miss_func"})
    try:
        srv.call("reset", {"task_index": 3})
        held = srv.env.unwrapped._ep["hold"]["function"]
        before = srv.tools_digest()
        assert held not in {t["name"] for t in srv.tools()}
        srv.call("reply", {"text": "I do not have the function I need; could you enable it?"})
        assert held in {t["name"] for t in srv.tools()} and srv.tools_digest() != before
    finally:
        srv.close()


@pytest.mark.parametrize("env_id", ["agentgym/SQL-v0", "agentgym/CodeExec-v0"])
def test_finishing_tools_are_the_envs_own(env_id: str) -> None:
    srv = EnvMCPServer(env_id)
    try:
        srv.call("reset", {"task_index": 0})
        names = {t["name"] for t in srv.tools()}
        assert {"reset", "reply"} <= names and ({"submit_query", "submit_answer"} & names)
        out = srv.call("submit_query" if "submit_query" in names else "submit_answer",
                       {"sql": "SELECT 1"} if "submit_query" in names else {"answer": "0"})  # fmt: skip
        assert out.data["terminated"] is True and "success" in out.data
    finally:
        srv.close()


def test_bfcl_tools_change_at_the_user_turn_that_brings_a_missed_function() -> None:
    srv = EnvMCPServer("agentgym/BFCL-v0", {"category": "miss_func"})
    try:
        if srv.base.unavailable_reason:
            pytest.skip(srv.base.unavailable_reason)
        srv.call("reset", {"task_index": 0})
        offered = [len(srv.tools())]
        while not srv.call("reply", {"text": "ok"}).data["terminated"]:
            offered.append(len(srv.tools()))
        assert offered[0] < offered[-1]  # the withheld function joined the tools (and list_changed would be sent)
        assert {t["name"] for t in srv.tools()} >= {"reset", "reply"}
    finally:
        srv.close()
