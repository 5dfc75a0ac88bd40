"""The OpenEnv bridge (agentgym/serving/openenv.py): agentgym envs served with openenv-core's own server, played by
openenv-core's own clients.

A real server (``create_openenv_app`` under uvicorn with ``env_uvicorn_config``, as ``serve_openenv`` runs it, in a
thread: a second process would import openenv-core again, ~5 s) is played over OpenEnv's WebSocket session by
``GenericEnvClient`` (OpenEnv's client for any env, plain dicts) and by ``AgentGymEnvClient`` (an ``EnvClient``
subclass): a multi-turn SearchQA episode, compared with the same episode played in-process. The HTTP routes, the
token check, the body limit and the session limit are checked in-process (Starlette's TestClient).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("openenv.core", reason="openenv-core is not installed (pip install 'agentgym-suite[openenv]')")

import socket
import threading
import time

import httpx
import uvicorn
from fastapi.testclient import TestClient
from openenv.core.generic_client import GenericEnvClient
from starlette.websockets import WebSocketDisconnect

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.env import AgentEnv, StepResult
from agentgym.running.runner import make_agent
from agentgym.serving.openenv import AgentGymEnvClient, create_openenv_app
from agentgym.serving.server import env_uvicorn_config

SEARCHQA = "agentgym/SearchQA-v0"
TINY = {"dataset": "tiny"}


@pytest.fixture(scope="module")
def server():
    """The bridge under uvicorn on loopback; ``header_timeout=0.5``: WebSocket sessions must outlive it."""
    with running(create_openenv_app(SEARCHQA, TINY, max_sessions=4), header_timeout=0.5) as url:
        yield url


def local_episode(seed: int, task_index: int) -> list[tuple[list, float | None, bool, dict]]:
    """The oracle's episode played in-process: (messages, reward, done, info) per reset and step."""
    env = gym.make(SEARCHQA, **TINY)
    agent = make_agent("oracle", env)
    agent.reset(seed=seed)
    obs, info = env.reset(seed=seed, options={"task_index": task_index})
    out, messages = [(obs, None, False, info)], list(obs)
    while True:
        action = agent.act(messages, info)
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated or truncated, info))
        messages += [{"role": "assistant", "content": action}, *obs]
        if terminated or truncated:
            return out


def test_openenv_generic_client_plays_a_multi_turn_episode(server):
    expected = local_episode(seed=0, task_index=7)  # a multi-hop question: several searches, then the answer
    assert len(expected) >= 3
    agent = make_agent("oracle", gym.make(SEARCHQA, **TINY))
    agent.reset(seed=0)
    got = []
    with GenericEnvClient(base_url=server).sync() as client:  # OpenEnv's own client, plain dicts
        result = client.reset(seed=0, options={"task_index": 7})
        time.sleep(0.7)  # longer than the server's header_timeout: the WebSocket session is not cut
        messages = list(result.observation["messages"])
        got.append((result.observation["messages"], result.reward, result.done, result.observation["info"]))
        while not result.done:
            action = agent.act(messages, result.observation["info"])
            result = client.step({"text": action})
            messages += [{"role": "assistant", "content": action}, *result.observation["messages"]]
            got.append((result.observation["messages"], result.reward, result.done, result.observation["info"]))
        state = client.state()
    assert json.dumps(got) == json.dumps(expected)
    assert got[-1][1] == 1.0 and got[-1][3]["success"] is True
    assert state["turn"] == len(expected) - 1 and state["done"] is True and state["task_id"] == got[0][3]["task_id"]


def test_agentgym_env_client(server):
    with AgentGymEnvClient(base_url=server).sync() as client:
        result = client.reset(seed=3, episode_id="ep-1")
        assert result.observation.messages[0]["role"] == "user" and not result.done
        result = client.step("<search> founder </search>")  # the text itself, or an AgentGymAction
        assert result.observation.info["turn"] == 1 and result.reward == 0.0
        assert "<information>" in result.observation.messages[0]["content"]
        result = client.step("<answer> nobody </answer>")
        assert result.done and result.observation.terminated and result.reward == 0.0
        state = client.state()
        assert (state.episode_id, state.step_count, state.env_id) == ("ep-1", 2, SEARCHQA)
        with pytest.raises(RuntimeError, match="no episode in progress"):  # OpenEnv reports env errors this way
            client.step("<answer> again </answer>")


def test_openenv_http_routes():
    client = TestClient(create_openenv_app(SEARCHQA, TINY, max_body_bytes=4096))
    assert client.get("/health").json()["status"] == "healthy"
    schema = client.get("/schema").json()
    assert "text" in schema["action"]["properties"] and "messages" in schema["observation"]["properties"]
    reset = client.post("/reset", json={"seed": 0, "options": {"task_index": 2}}).json()
    assert reset["observation"]["info"]["turn"] == 0 and reset["done"] is False and reset["reward"] is None
    step = client.post("/step", json={"action": {"text": "<answer> x </answer>"}})  # a fresh env per request
    assert step.status_code == 409 and "WebSocket" in step.json()["detail"]
    assert client.post("/step", json={"action": {"txt": "x"}}).status_code == 422  # not an AgentGymAction
    assert client.post("/reset", content=b"{", headers={"content-type": "application/json"}).status_code == 422
    big = client.post("/step", json={"action": {"text": "x" * 5000}})
    assert big.status_code == 413 and big.json()["error"] == "too_large"


def test_openenv_token_and_session_limit():
    client = TestClient(create_openenv_app(SEARCHQA, TINY, token="s3cret", max_sessions=1, max_sessions_per_client=2))
    assert client.get("/health").status_code == 401
    assert client.post("/reset", json={}).status_code == 401
    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/ws") as ws:  # refused at the handshake
        ws.receive_text()
    auth = {"authorization": "Bearer s3cret"}
    assert client.get("/health", headers=auth).status_code == 200
    with client.websocket_connect("/ws", headers=auth) as first:
        first.send_text(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert first.receive_json()["type"] == "observation"
        with client.websocket_connect("/ws", headers=auth) as second:  # over max_sessions
            reply = second.receive_json()
            assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED"


# -- issue 31: no single client takes the bridge ---------------------------------------------------------------


@contextlib.contextmanager
def running(app, **config: Any) -> Iterator[str]:
    """``app`` under uvicorn (``env_uvicorn_config``, as ``serve_openenv`` runs it, with ``config``) on a free loopback
    port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uv = uvicorn.Server(env_uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning", **config))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the OpenEnv bridge did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)


def ws_from(address: str, url: str):
    """An OpenEnv WebSocket session (``/ws``) whose connection comes from ``address`` (another peer)."""
    from websockets.sync.client import connect

    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30, source_address=(address, 0))
    return connect(f"ws://{host}:{port}/ws", sock=sock, open_timeout=30)


def test_one_client_cannot_hold_every_websocket_session():
    """max_sessions=8: one address gets its share (2), its next handshake is refused, another address still plays."""
    from websockets.exceptions import InvalidStatus

    with running(create_openenv_app(SEARCHQA, TINY, max_sessions=8)) as url, contextlib.ExitStack() as held:
        opened, refused = 0, 0
        for _ in range(8):
            try:
                ws = held.enter_context(ws_from("127.0.0.2", url))
            except InvalidStatus:
                refused += 1
                continue
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"
            opened += 1
        assert (opened, refused) == (2, 6)
        with ws_from("127.0.0.3", url) as other:
            other.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(other.recv(timeout=60))["type"] == "observation"


class SlowBuildEnv(AgentEnv):
    """A test env whose constructor waits for ``gate`` once ``armed`` (an env that takes long to build)."""

    num_tasks = 1
    public_args = AgentEnv.public_args
    armed = False
    building = 0
    gate = threading.Event()

    def __init__(self, *, max_turns: int = 10) -> None:
        if SlowBuildEnv.armed:
            SlowBuildEnv.building += 1
            SlowBuildEnv.gate.wait(timeout=60)  # a hang guard only
        super().__init__(max_turns=max_turns)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list, dict]:
        return [{"role": "user", "content": "go"}], {"gold": {}}

    def _step(self, action: str) -> StepResult:
        return StepResult([{"role": "user", "content": "ok"}], terminated=True)


SLOW = "agentgym_test/SlowBuild-v0"


def test_openenv_http_reset_builds_its_env_off_the_event_loop():
    """While an HTTP /reset's env is being built, the server still answers /health."""
    if SLOW not in gym.registry:
        gym.register(id=SLOW, entry_point=SlowBuildEnv)
    SlowBuildEnv.armed, SlowBuildEnv.building = False, 0
    SlowBuildEnv.gate.clear()
    with running(create_openenv_app(SLOW)) as url:
        SlowBuildEnv.armed = True
        results: list[int] = []
        reset = threading.Thread(target=lambda: results.append(httpx.post(url + "/reset", json={}, timeout=90)
                                                               .status_code))  # fmt: skip
        reset.start()
        try:
            deadline = time.monotonic() + 60
            while SlowBuildEnv.building < 1:
                assert time.monotonic() < deadline, "the /reset never started building its env"
                time.sleep(0.02)
            health = httpx.get(url + "/health", timeout=20)  # the event loop is free
            assert health.status_code == 200
        finally:
            SlowBuildEnv.gate.set()
            reset.join(timeout=90)
            SlowBuildEnv.armed = False
        assert results == [200]
