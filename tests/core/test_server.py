"""The env server (agentgym/serving/server.py) and RemoteEnv (agentgym/serving/remote.py).

The 4xx answers, idle eviction and the session limit are checked in-process (Starlette's TestClient drives the ASGI
app, and is also an ``httpx.Client`` that RemoteEnv can use); RemoteEnv against the local env, snapshots, pickling,
a server restart and a bounded load test (100 sessions from 2 client processes, episodes checked against in-process
replays) run against real servers on loopback (``ServerProcess``).
"""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
from fastapi.testclient import TestClient

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.branching import restore, snapshot
from agentgym.contract.env import EnvUnavailableError
from agentgym.running.checker import check
from agentgym.running.runner import make_agent
from agentgym.serving.remote import EnvServerError, RemoteEnv
from agentgym.serving.server import SERVER_HEADER, ServerProcess, create_app, serve

ROOT = Path(__file__).resolve().parents[2]
HOUSEHOLD = "agentgym/Household-v0"
SEARCHQA = "agentgym/SearchQA-v0"
TINY = {"dataset": "tiny"}


@pytest.fixture(scope="module")
def server():
    with ServerProcess(env_ids=[HOUSEHOLD, SEARCHQA, "agentgym/TextWorld-v0"]) as s:
        yield s


def http(**app_kwargs) -> TestClient:
    return TestClient(create_app(env_ids=[HOUSEHOLD, SEARCHQA, "agentgym/TextWorld-v0"], **app_kwargs))


def open_session(client: TestClient, env_id: str = HOUSEHOLD, **env_kwargs) -> str:
    resp = client.post("/sessions", json={"env_id": env_id, "env_kwargs": env_kwargs})
    assert resp.status_code == 201, resp.text
    return resp.json()["session_id"]


def episode(env: gym.Env, seed: int, agent_name: str = "random", options: dict | None = None) -> list[str]:
    """A scripted episode (a built-in agent, seeded) as JSON lines: reset, then every step."""
    local_twin = env if not isinstance(env, RemoteEnv) else gym.make(env.env_id, **env.env_kwargs)
    agent = make_agent(agent_name, local_twin)
    agent.reset(seed=seed)
    obs, info = env.reset(seed=seed, options=options)
    messages, record = list(obs), [json.dumps([obs, info])]
    while True:
        action = agent.act(messages, info)
        out = env.step(action)
        record.append(json.dumps(list(out)))
        messages += [{"role": "assistant", "content": action}, *out[0]]
        info = out[4]
        if out[2] or out[3]:
            return record


# -- the HTTP API, in-process ------------------------------------------------------------------------------


def test_session_lifecycle():
    client = http()
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["sessions"] == 0 and HOUSEHOLD in health["env_ids"]
    sid = open_session(client)
    reset = client.post(f"/sessions/{sid}/reset", json={"seed": 0}).json()
    assert reset["info"]["turn"] == 0 and reset["status"]["done"] is False and reset["observation"][0]["role"] == "user"
    step = client.post(f"/sessions/{sid}/step", json={"action": "look"})
    assert step.headers[SERVER_HEADER] == health["server"]
    assert step.json()["info"]["turn"] == 1 and step.json()["reward"] == 0.0
    snap = client.post(f"/sessions/{sid}/snapshot").json()["snapshot_id"]
    client.post(f"/sessions/{sid}/step", json={"action": "inventory"})
    assert client.get(f"/sessions/{sid}").json()["status"]["turn"] == 2
    assert client.post(f"/sessions/{sid}/restore", json={"snapshot_id": snap}).json()["status"]["turn"] == 1
    assert len(client.get(f"/sessions/{sid}/transcript").json()["transcript"]) == 3  # prompt, action, answer
    assert client.delete(f"/sessions/{sid}").status_code == 200
    assert client.get("/health").json()["sessions"] == 0
    assert client.post(f"/sessions/{sid}/step", json={"action": "look"}).json()["error"] == "unknown_session"


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/sessions", b"{", 400, "bad_json"),  # malformed JSON
        ("/sessions", b"\xff\xfe", 400, "bad_json"),  # not UTF-8
        ("/sessions", b"[1, 2]", 400, "bad_json"),  # JSON, not an object
        ("/sessions", b'{"env_id": 3}', 422, "invalid_request"),
        ("/sessions", b'{"env_id": "agentgym/Household-v0", "env_kwarg": {}}', 422, "invalid_request"),  # a typo
        ("/sessions", b'{"env_id": "agentgym/Nope-v0"}', 404, "unknown_env"),
        ("/sessions", b'{"env_id": "CartPole-v1"}', 404, "unknown_env"),  # registered, but not served
        ("/sessions", b'{"env_id": "agentgym/Household-v0", "env_kwargs": {"bogus": 1}}', 422, "untrusted_argument"),
        ("/sessions/nope/step", b'{"action": "look"}', 404, "unknown_session"),
        ("/sessions/nope/step", b"{", 400, "bad_json"),
    ],
)
def test_bad_requests_get_4xx(path, body, status, code):
    resp = http().post(path, content=body)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"] == code and resp.json()["detail"]


def test_env_errors_get_4xx():
    client = http()
    sid = open_session(client, SEARCHQA, **TINY)
    resp = client.post(f"/sessions/{sid}/step", json={"action": "x"})  # never reset
    assert resp.status_code == 409 and resp.json()["exception"] == "ResetNeeded"  # Gymnasium's OrderEnforcing
    client.post(f"/sessions/{sid}/reset", json={"seed": 0})
    resp = client.post(f"/sessions/{sid}/reset", json={"options": {"level": 3}})
    assert resp.status_code == 422 and "unknown reset option" in resp.json()["detail"]
    assert resp.json()["exception"] == "ValueError"
    assert client.post(f"/sessions/{sid}/step", json={"action": "<answer>x</answer>"}).json()["terminated"]
    resp = client.post(f"/sessions/{sid}/step", json={"action": "x"})  # the episode ended
    assert resp.status_code == 409 and resp.json()["exception"] == "RuntimeError"
    resp = client.post(f"/sessions/{sid}/restore", json={"snapshot_id": "nope"})
    assert resp.status_code == 404 and resp.json()["error"] == "unknown_snapshot"
    other = open_session(client, HOUSEHOLD)
    snap = client.post(f"/sessions/{other}/snapshot").json()["snapshot_id"]
    resp = client.post(f"/sessions/{sid}/restore", json={"snapshot_id": snap})  # another env's snapshot
    assert resp.status_code == 422 and resp.json()["exception"] == "ValueError"
    textworld = open_session(client, "agentgym/TextWorld-v0")  # no game file: the env cannot run here
    resp = client.post(f"/sessions/{textworld}/reset", json={})
    assert resp.status_code == 503 and resp.json()["error"] == "env_unavailable"


def test_oversize_bodies_get_413():
    client = http(max_body_bytes=1000)
    sid = open_session(client)
    resp = client.post(f"/sessions/{sid}/step", json={"action": "x" * 2000})  # refused from Content-Length
    assert resp.status_code == 413 and resp.json()["error"] == "too_large"

    def chunks():  # no Content-Length: refused once the stream passes the limit
        for _ in range(10):
            yield b" " * 200

    resp = client.post(f"/sessions/{sid}/step", content=chunks())
    assert resp.status_code == 413 and resp.json()["error"] == "too_large"
    assert client.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200  # small bodies still pass


def test_token_required_when_configured():
    client = http(token="s3cret")
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
        resp = client.get("/health", headers=headers)
        assert resp.status_code == 401 and resp.json()["error"] == "unauthorized"
        assert resp.headers["www-authenticate"] == "Bearer"
        assert client.post("/sessions", json={"env_id": HOUSEHOLD}, headers=headers).status_code == 401
    ok = {"authorization": "Bearer s3cret"}
    assert client.get("/health", headers=ok).status_code == 200
    env = RemoteEnv("http://testserver", HOUSEHOLD, token="s3cret", client=client)
    assert env.reset(seed=0)[1]["turn"] == 0
    with pytest.raises(EnvServerError, match="HTTP 401"):
        RemoteEnv("http://testserver", HOUSEHOLD, client=client)
    # `serve` refuses to bind beyond loopback without a token (before anything is built or bound)
    with pytest.raises(ValueError, match="beyond loopback"):
        serve(host="0.0.0.0", port=1)


def test_idle_sessions_are_evicted():
    now = [1000.0]  # the server's clock, driven here: eviction depends on no scheduling of this machine
    client = http(idle_timeout=0.3, clock=lambda: now[0])
    idle, busy = open_session(client), open_session(client)
    for _ in range(4):  # `busy` is used every 0.15 s; `idle` is not
        now[0] += 0.15
        assert client.post(f"/sessions/{busy}/reset", json={}).status_code == 200
    resp = client.post(f"/sessions/{idle}/step", json={"action": "look"})
    assert resp.status_code == 410 and resp.json()["error"] == "session_expired"
    assert "idle timeout" in resp.json()["detail"]
    assert client.get("/health").json()["sessions"] == 1
    env = RemoteEnv("http://testserver", HOUSEHOLD, client=client)
    now[0] += 0.4
    with pytest.raises(EnvServerError, match="unused"):
        env.reset(seed=0)


def test_session_limit():
    client = http(max_sessions=2, max_sessions_per_client=2)  # one client may take them all: the global cap
    first, _ = open_session(client), open_session(client)
    resp = client.post("/sessions", json={"env_id": HOUSEHOLD})
    assert resp.status_code == 429 and resp.json()["error"] == "too_many_sessions"
    with pytest.raises(EnvServerError, match="maximum of 2 sessions"):
        RemoteEnv("http://testserver", HOUSEHOLD, client=client)
    client.delete(f"/sessions/{first}")
    open_session(client)


def test_remote_errors_mirror_local_ones():
    env = RemoteEnv("http://testserver", SEARCHQA, TINY, client=http())
    with pytest.raises(gym.error.ResetNeeded, match=r"before calling env\.reset"):
        env.step("x")
    env.reset(seed=0)  # (Gymnasium's passive checker breaks if the very first reset raises: here as locally)
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"level": 3})
    with pytest.raises(ValueError, match="task_index 99999 is out of range"):
        env.reset(options={"task_index": 99999})
    textworld = RemoteEnv("http://testserver", "agentgym/TextWorld-v0", client=env._http)
    with pytest.raises(EnvUnavailableError, match="game_file"):
        textworld.reset(seed=0)
    local = gym.make(SEARCHQA, **TINY)
    long = "<answer>" + "\ud800" * 20_000  # over max_action_chars, lone surrogates: cut and repaired the same way
    actions = (None, 3, b"<answer>bytes</answer>", {"role": "assistant", "content": "hi"}, ["a"], object(), long)
    for action in actions:
        local.reset(seed=0)
        env.reset(seed=0)
        assert json.dumps(env.step(action)) == json.dumps(local.step(action)), action
    env.step("<answer>x</answer>") if not env._done else None
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("x")


# -- RemoteEnv against real servers on loopback ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "kwargs"), [(HOUSEHOLD, {}), (SEARCHQA, TINY)])
def test_remote_env_is_byte_identical_to_local(server, env_id, kwargs):
    local, remote = gym.make(env_id, **kwargs), RemoteEnv(server.url, env_id, kwargs)
    for seed in range(3):
        assert episode(remote, seed) == episode(local, seed)
    oracle = {"options": {"task_index": 5}, "agent_name": "oracle"}
    assert episode(remote, 1, **oracle) == episode(local, 1, **oracle)
    assert remote.transcript == local.unwrapped.transcript
    assert remote.spec_kwargs() == {"env_id": env_id, **local.unwrapped.spec_kwargs()}
    assert remote.num_tasks == local.unwrapped.num_tasks and remote.max_turns == local.unwrapped.max_turns
    remote.close()


def test_agentgym_check_passes_on_remote_env(server):
    report = check(SEARCHQA, make_env=lambda: RemoteEnv(server.url, SEARCHQA, TINY))
    assert report.ok, str(report)


def test_snapshot_restore_and_pickle_over_http(server):
    env = RemoteEnv(server.url, HOUSEHOLD)
    env.reset(seed=4)
    for action in ("look", "inventory"):
        env.step(action)
    snap = snapshot(env)  # through agentgym.contract.branching, like any env
    reference = [json.dumps(env.step(a)) for a in ("look", "go to countertop 1", "look")]
    restore(env, snap)
    assert env.turn == 2
    assert [json.dumps(env.step(a)) for a in ("look", "go to countertop 1", "look")] == reference
    other = RemoteEnv(server.url, HOUSEHOLD)  # another session restores it too
    restore(other, pickle.loads(pickle.dumps(snap)))
    assert [json.dumps(other.step(a)) for a in ("look", "go to countertop 1", "look")] == reference
    restore(env, snap)
    clone = pickle.loads(pickle.dumps(env))  # a new session, with the episode restored into it
    assert clone.session_id != env.session_id and clone.turn == 2
    assert [json.dumps(clone.step(a)) for a in ("look", "go to countertop 1", "look")] == reference
    with pytest.raises(ValueError, match="other arguments"):
        RemoteEnv(server.url, HOUSEHOLD, {"max_turns": 7}).restore(snap)
    for e in (env, other, clone):
        e.close()


@pytest.mark.slow
def test_server_restart_is_a_clear_error():
    first = ServerProcess(env_ids=[HOUSEHOLD]).start()
    env = RemoteEnv(first.url, HOUSEHOLD, timeout=5.0)
    env.reset(seed=0)
    env.step("look")
    first.stop()
    start = time.monotonic()
    with pytest.raises(EnvServerError, match="cannot reach the env server") as down:
        env.step("look")
    assert isinstance(down.value, ConnectionError) and "\n" not in str(down.value)
    with ServerProcess(port=first.port, env_ids=[HOUSEHOLD]):
        with pytest.raises(EnvServerError, match="restarted") as restarted:
            env.step("look")
        assert "make a new RemoteEnv" in str(restarted.value) and "\n" not in str(restarted.value)
        assert RemoteEnv(first.url, HOUSEHOLD).reset(seed=0)[1]["turn"] == 0  # a new session works
    assert time.monotonic() - start < 60


def test_a_silent_server_times_out():
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(EnvServerError, match="did not answer"):
            RemoteEnv(url, HOUSEHOLD, timeout=0.5)
        assert time.monotonic() - start < 60  # a hang guard: it gave up instead of waiting for an answer


@pytest.mark.slow
def test_bounded_load_100_sessions_from_2_processes():
    """100 sessions open at once from 2 client processes (bench/bench_server.py's load test, bounded in count and
    time): no errors, and every episode identical to its in-process replay."""
    args = ["load", "--sessions", "100", "--processes", "2", "--threads", "4", "--episodes", "2",
            "--env-kwargs", '{"max_turns": 10}', "--time-limit", "30", "--json"]  # fmt: skip
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_server.py"), *args], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    load = json.loads(out.stdout.strip().splitlines()[-1])["load"]
    assert load["sessions"] == 100 and load["errors"] == 0, load["error_messages"]
    assert load["episodes"] == 200 and load["mismatched"] == 0
    assert load["requests"] == load["steps"] + load["episodes"]
    assert 0 < load["p50_ms"] <= load["p99_ms"]
