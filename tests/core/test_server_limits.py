"""Issue 31, "a server no single client can take": each attack the issue ran, as a test against real servers on
loopback (``ServerProcess`` runs ``agentgym.serving.server.serve`` as ``agentgym serve`` does; in-process
``BackgroundServer`` where a test env must block). Distinct clients are distinct loopback source addresses
(127.0.0.2-127.0.0.9). Loads are bounded in count and time; assertions are on status codes and counts, with
generous timeouts.

Each test fails on the tree before the fix (7f71c76): there idle connections filled ``limit_concurrency`` (503 to
everyone), one client could open every session, four clients could take every worker while ``/health`` said ``ok``,
snapshots had no byte budget, ``--allow-env-arg dataset=100k`` widened every env's ``dataset``, one OpenEnv client
could hold every WebSocket session, and the bridge's HTTP ``/reset`` built an env on the event loop.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import pytest
from blocking_env import BlockingEnv
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.env import AgentEnv, StepResult
from agentgym.serving.server import ServerProcess, create_app
from agentgym.tools.serving import BackgroundServer, ConnectionLimits

ROOT = Path(__file__).resolve().parents[2]
CHAIN = "agentgym/Chain-v0"
ANSWER = {"action": "<answer> gold </answer>"}


def client_from(address: str, url: str, **kwargs: Any) -> httpx.Client:
    """An HTTP client whose connections come from ``address`` (another peer to the server)."""
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=address), timeout=60, **kwargs)


def idle_connections(url: str, addresses: list[str], per_address: int) -> list[socket.socket]:
    """``per_address`` connections from each address that never send a byte."""
    host, port = url.removeprefix("http://").split(":")
    out = []
    for address in addresses:
        for _ in range(per_address):
            sock = socket.socket()
            sock.bind((address, 0))
            sock.connect((host, int(port)))
            out.append(sock)
    return out


def open_session(http: httpx.Client, env_id: str = CHAIN) -> httpx.Response:
    return http.post("/sessions", json={"env_id": env_id})


def played(http: httpx.Client, env_id: str = CHAIN) -> tuple[int, int, int]:
    """Open a session, reset and step it: the three status codes."""
    made = open_session(http, env_id)
    if made.status_code != 201:
        return made.status_code, 0, 0
    sid = made.json()["session_id"]
    reset = http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code
    step = http.post(f"/sessions/{sid}/step", json=ANSWER).status_code
    return 201, reset, step


BLOCKING = "agentgym_test/LimitsBlocking-v0"
if BLOCKING not in gym.registry:
    gym.register(id=BLOCKING, entry_point=BlockingEnv)


@contextlib.contextmanager
def blocking_gate(gate: threading.Event) -> Iterator[None]:
    """``BlockingEnv`` registered, its steps held until ``gate`` (set on the way out, whatever happens)."""
    BlockingEnv.gate = gate
    try:
        yield
    finally:
        gate.set()


# -- connections ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_flood_of_idle_connections_from_four_addresses_never_fails_a_clients_request():
    """The issue's 1,030 idle connections, from four addresses, against the default server: a client's
    requests are answered (its connection takes the place of an idle one), not 503."""
    with ServerProcess(env_ids=[CHAIN]) as server:
        flood = idle_connections(server.url, [f"127.0.0.{i}" for i in range(2, 6)], 260)
        try:
            time.sleep(1.0)  # let the server accept them all
            with httpx.Client(base_url=server.url, timeout=60) as http:
                assert played(http) == (201, 200, 200)
                assert http.get("/health").status_code == 200
        finally:
            for sock in flood:
                sock.close()


def test_connections_are_capped_per_address_and_idle_ones_make_room():
    """One address's connections beyond its share push out its own idle ones; a request in flight is never cut,
    and a connection arriving while all are busy gets 503 with a message (then closed)."""
    limits = ConnectionLimits(max_connections=8, per_peer=4, reserve=1, max_refused=4)
    gate = threading.Event()
    app = create_app(env_ids=[BLOCKING], workers=16, max_calls_per_client=16, max_sessions_per_client=16)
    with BackgroundServer(app, connection_limits=limits) as server, blocking_gate(gate):
        flood = idle_connections(server.url, ["127.0.0.2"], 12)
        time.sleep(0.5)
        assert len(limits.peers.get("127.0.0.2", {})) <= 4 and limits.total <= 8
        with client_from("127.0.0.3", server.url) as busy:
            sids = [open_session(busy, BLOCKING).json()["session_id"] for _ in range(4)]
            for sid in sids:
                assert busy.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
        answers: list[int] = []

        def block(sid: str) -> None:  # a fresh connection each, held by a request in flight
            with client_from("127.0.0.3", server.url) as http:
                answers.append(http.post(f"/sessions/{sid}/step", json={"action": "block"}).status_code)

        threads = [threading.Thread(target=block, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        wait_for(lambda: app_busy(server.url, "127.0.0.4") >= 4)
        with client_from("127.0.0.3", server.url) as late:  # its fifth connection: the four are in flight
            refused = late.get("/health")
            assert refused.status_code == 503 and refused.json()["error"] == "busy", refused.text
            assert "busy with a request in flight" in refused.json()["detail"]
        with client_from("127.0.0.5", server.url) as other:  # another address still gets in (idle ones give way)
            assert other.get("/health").status_code == 200
        gate.set()
        for t in threads:
            t.join(timeout=60)
        assert answers == [200] * 4
        for sock in flood:
            sock.close()


# -- sessions and workers --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_client_cannot_open_every_session_and_four_cannot_either():
    with ServerProcess(env_ids=[CHAIN], max_sessions=16) as server:
        counts = {}
        for i in range(2, 6):  # four clients, each opening as many as it may
            with client_from(f"127.0.0.{i}", server.url) as http:
                codes = [open_session(http).status_code for _ in range(16)]
                counts[i] = codes.count(201)
                refused = [c for c in codes if c != 201]
                assert set(refused) <= {429}, codes
        assert counts[2] < 16 and max(counts.values()) <= 4, counts
        with client_from("127.0.0.6", server.url) as newcomer:  # the reserve: a client holding none gets one
            assert played(newcomer) == (201, 200, 200)
        with client_from("127.0.0.2", server.url) as again:
            body = open_session(again).json()
            assert body["error"] == "too_many_sessions" and "127.0.0.2" in body["detail"]


def wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def post_from(address: str, url: str, sid: str) -> None:
    """Step session ``sid`` with ``block`` from ``address`` (in a thread)."""
    with client_from(address, url) as http:
        http.post(f"/sessions/{sid}/step", json={"action": "block"})


def app_busy(url: str, address: str) -> int:
    with client_from(address, url) as http:
        return http.get("/health").json()["workers"]["busy"]


@pytest.mark.slow
def test_four_clients_cannot_take_every_worker_and_health_says_when_none_is_free():
    """Four addresses each block their whole share of the workers: another client's step still runs at once (the
    reserve), and /health reports degraded while no worker is free."""
    gate = threading.Event()
    app = create_app(env_ids=[BLOCKING], workers=8, call_timeout=120.0)  # default share: 2 each
    with blocking_gate(gate), BackgroundServer(app) as server:
        threads = []
        for i in range(2, 6):
            with client_from(f"127.0.0.{i}", server.url) as http:
                for _ in range(3):  # one more than its share: it waits
                    sid = open_session(http, BLOCKING).json()["session_id"]
                    assert http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
                    threads.append(threading.Thread(target=post_from, args=(f"127.0.0.{i}", server.url, sid)))
        for t in threads:
            t.start()
        wait_for(lambda: app_busy(server.url, "127.0.0.9") >= 7)
        with client_from("127.0.0.6", server.url) as victim:
            status = victim.get("/health").json()
            assert status["workers"]["busy"] == 7 and status["workers"]["waiting"] == 5, status["workers"]
            assert played(victim, BLOCKING) == (201, 200, 200)  # its calls run on the reserved worker
        with client_from("127.0.0.7", server.url) as hog:  # holds the last worker: none is free now
            sid = open_session(hog, BLOCKING).json()["session_id"]
            assert hog.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
            t = threading.Thread(target=post_from, args=("127.0.0.7", server.url, sid))
            t.start()
            threads.append(t)
            wait_for(lambda: app_busy(server.url, "127.0.0.9") >= 8)
            health = hog.get("/health")
            assert health.status_code == 200 and health.json()["status"] == "degraded"
            assert health.json()["workers"]["free"] == 0
        gate.set()
        for t in threads:
            t.join(timeout=60)
        with client_from("127.0.0.9", server.url) as http:
            wait_for(lambda: http.get("/health").json()["status"] == "ok")


# -- snapshots -----------------------------------------------------------------------------------------------------


class BigStateEnv(AgentEnv):
    """A test env whose episode state (and so each snapshot) holds ``BLOB`` bytes."""

    num_tasks = 1
    public_args = AgentEnv.public_args
    BLOB = (32 << 20) - (64 << 10)  # 16 fit in 512 MiB, pickled

    def __init__(self, *, max_turns: int = 100) -> None:
        super().__init__(max_turns=max_turns)
        self.blob = b""

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list, dict]:
        self.blob = os.urandom(1) * self.BLOB
        return [{"role": "user", "content": "go"}], {"gold": {}}

    def _step(self, action: str) -> StepResult:
        return StepResult([{"role": "user", "content": "ok"}])

    def _snapshot_state(self) -> Any:
        return self.blob

    def _restore_state(self, state: Any) -> None:
        self.blob = state


BIG = "agentgym_test/BigState-v0"
if BIG not in gym.registry:
    gym.register(id=BIG, entry_point=BigStateEnv)


def test_one_clients_snapshots_stay_within_its_byte_budget():
    """Snapshots of 32 MiB each: the default per-client budget (512 MiB) refuses the 17th with a 429 that says
    why, while another client can still take snapshots; a closed session gives its bytes back."""
    with BackgroundServer(create_app(env_ids=[BIG])) as server, client_from("127.0.0.2", server.url) as http:
        sid = open_session(http, BIG).json()["session_id"]
        assert http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
        codes = []
        for _ in range(20):
            resp = http.post(f"/sessions/{sid}/snapshot")
            codes.append(resp.status_code)
            if resp.status_code != 200:
                break
        assert codes[:-1] == [200] * 16 and codes[-1] == 429, codes
        assert resp.json()["error"] == "snapshot_budget" and "budget" in resp.json()["detail"]
        with client_from("127.0.0.3", server.url) as other:
            osid = open_session(other, BIG).json()["session_id"]
            assert other.post(f"/sessions/{osid}/reset", json={"seed": 0}).status_code == 200
            taken = other.post(f"/sessions/{osid}/snapshot")
            assert taken.status_code == 200
            assert other.post(f"/sessions/{osid}/restore", json=taken.json()).status_code == 200
        assert http.delete(f"/sessions/{sid}").status_code == 200
        assert http.get("/health").json()["snapshot_bytes"] < 2 * BigStateEnv.BLOB


def test_a_snapshot_larger_than_a_clients_whole_budget_is_a_413():
    app = create_app(env_ids=[BIG], max_snapshot_bytes_per_client=1 << 20)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        sid = open_session(http, BIG).json()["session_id"]
        assert http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
        resp = http.post(f"/sessions/{sid}/snapshot")
        assert resp.status_code == 413 and resp.json()["error"] == "snapshot_too_large", resp.text
        assert http.get("/health").json()["snapshot_bytes"] == 0


# -- who a client is -----------------------------------------------------------------------------------------------


def test_a_proxy_header_counts_only_when_the_operator_names_it():
    app = create_app(env_ids=[CHAIN], max_sessions=16)  # client_key="peer": the header is ignored
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        codes = [http.post("/sessions", json={"env_id": CHAIN}, headers={"x-forwarded-for": f"10.0.0.{i}"})
                 .status_code for i in range(8)]  # fmt: skip
        assert codes.count(201) == 4, codes
    app = create_app(env_ids=[CHAIN], max_sessions=16, client_key="header:X-Forwarded-For")
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for user in ("10.0.0.1", "10.0.0.2"):
            hdr = {"x-forwarded-for": f"203.0.113.9, {user}"}  # the proxy appends the address it saw
            codes = [http.post("/sessions", json={"env_id": CHAIN}, headers=hdr).status_code for _ in range(6)]
            assert codes == [201] * 4 + [429] * 2, codes
        assert http.get("/health").json()["limits"]["client_key"] == "header:x-forwarded-for"


def test_per_client_tokens_are_clients_of_their_own():
    with pytest.raises(ValueError, match="per-client tokens"):
        create_app(env_ids=[CHAIN], client_key="token")
    app = create_app(env_ids=[CHAIN], max_sessions=8, client_key="token", tokens=["alice-t0ken", "bob-t0ken"])
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.post("/sessions", json={"env_id": CHAIN}).status_code == 401
        for who in ("alice-t0ken", "bob-t0ken"):
            auth = {"authorization": f"Bearer {who}"}
            codes = [http.post("/sessions", json={"env_id": CHAIN}, headers=auth).status_code for _ in range(3)]
            assert codes == [201, 201, 429], codes


# -- --allow-env-arg ---------------------------------------------------------------------------------------------


def test_an_allowed_value_widens_only_the_env_it_names():
    served = ["agentgym/SearchQA-v0", "agentgym/TwentyQuestions-v0"]
    with pytest.raises(ValueError, match="name the one it is for"):
        create_app(env_ids=served, allow_env_args={"dataset": ["100k"]})
    with pytest.raises(ValueError, match="not one of the served envs"):
        create_app(env_ids=served, allow_env_args={"agentgym/Chain-v0:dataset": ["100k"]})
    app = create_app(env_ids=served, allow_env_args={"agentgym/SearchQA-v0:dataset": ["100k"]})
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        other = http.post("/sessions", json={"env_id": served[1], "env_kwargs": {"dataset": "100k"}})
        assert other.status_code == 422 and other.json()["error"] == "untrusted_argument", other.text


@pytest.mark.slow
def test_agentgym_serve_refuses_an_unscoped_allowance_two_envs_take_in_one_line():
    cmd = [sys.executable, "-m", "agentgym.cli", "serve", "--allow-env-arg", "dataset=100k", "--port", "1"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("agentgym serve started serving with an ambiguous --allow-env-arg")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "ENV_ID:dataset=VALUE" in lines[0] and "agentgym/TwentyQuestions-v0" in lines[0]


# -- a property: every limit under any bounded load ----------------------------------------------------------------

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 6)]
ACTIONS = st.lists(st.tuples(st.sampled_from(ADDRESSES), st.sampled_from(["idle", "open", "step", "snapshot"])),
                   min_size=1, max_size=40)  # fmt: skip


@pytest.fixture(scope="module")
def limited_server() -> Iterator[tuple[str, ConnectionLimits]]:
    limits = ConnectionLimits(max_connections=24, per_peer=6, reserve=2)
    app = create_app(env_ids=[CHAIN], max_sessions=12, workers=4, max_snapshots=4, max_snapshot_bytes=40_000,
                     max_snapshot_bytes_per_client=8_000)  # fmt: skip
    with BackgroundServer(app, connection_limits=limits) as server:
        yield server.url, limits


@pytest.mark.slow
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(plan=ACTIONS)
def test_every_limit_holds_under_any_bounded_load_from_several_addresses(limited_server, plan):
    """Any mix of idle connections, sessions, steps and snapshots from four addresses: every answer is a success or
    a 4xx/503 with a one-line detail, no address holds more than its share (sessions 3, connections 6, snapshot
    bytes 8,000), and a client from a fifth address still opens a session, plays a step and takes a snapshot."""
    url, limits = limited_server
    clients = {a: client_from(a, url) for a in ADDRESSES}
    idle: list[socket.socket] = []
    sessions: dict[str, list[str]] = {a: [] for a in ADDRESSES}
    try:
        for address, action in plan:
            http = clients[address]
            if action == "idle":
                idle += idle_connections(url, [address], 3)
                continue
            if action == "open" or not sessions[address]:
                resp = open_session(http)
                if resp.status_code == 201:
                    sid = resp.json()["session_id"]
                    sessions[address].append(sid)
                    assert http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
            elif action == "step":
                resp = http.post(f"/sessions/{sessions[address][-1]}/step", json=ANSWER)
            else:
                resp = http.post(f"/sessions/{sessions[address][0]}/snapshot")
            assert resp.status_code in (200, 201, 409, 413, 429, 503), resp.text
            if resp.status_code >= 400:
                detail = resp.json()["detail"]
                assert detail and "\n" not in detail
            assert len(sessions[address]) <= 3
            assert all(len(conns) <= 6 for conns in limits.peers.values()) and limits.total <= 24
        with client_from("127.0.0.7", url) as newcomer:
            made = open_session(newcomer)
            assert made.status_code == 201, made.text
            sid = made.json()["session_id"]
            assert newcomer.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
            assert newcomer.post(f"/sessions/{sid}/step", json=ANSWER).status_code == 200
            assert newcomer.post(f"/sessions/{sid}/snapshot").status_code == 200
            health = newcomer.get("/health").json()
            assert health["snapshot_bytes"] <= 40_000 and health["sessions"] <= 12
            assert newcomer.delete(f"/sessions/{sid}").status_code == 200
    finally:
        for sock in idle:
            sock.close()
        for address, sids in sessions.items():
            for sid in sids:
                clients[address].delete(f"/sessions/{sid}")
            clients[address].close()
