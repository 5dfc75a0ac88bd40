"""The trust model (agentgym.contract.trust): every constructor argument of every registered env is either declared
public, with bounded values, or the operator's; a client of the env server and a trajectory file are refused everything
else, and nothing is touched (no file made, no connection opened). The env server under a hostile client: a
per-call deadline, a per-client share of the workers, and a health check that tells. Real uvicorn servers on
loopback, real httpx, real replay; nothing mocked."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import pytest
from blocking_env import BlockingEnv
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym
from agentgym.cli import main
from agentgym.contract.env import AgentEnv
from agentgym.contract.registry import BUILTIN_ENVS
from agentgym.contract.trajectory import Trajectory
from agentgym.contract.trust import (
    Arg,
    UntrustedArgumentError,
    checked_kwargs,
    constructor_params,
    env_class,
    public_args,
)
from agentgym.running.replay import make_recorded_env
from agentgym.serving.server import ServerProcess, create_app
from agentgym.tools.serving import BackgroundServer

ENVS = [env.id for env in BUILTIN_ENVS]  # not list_envs(): other test modules register test-only envs
DANGEROUS_NAME = re.compile(
    r"path|file|dir|url|uri|key|token|secret|cache|module|class|callable|endpoint|host|llm|game"
)
DANGEROUS_ANNOTATION = re.compile(r"Path|Callable|type\[|Retriever|Client|Module|Dataset")


def operator_only(env_id: str) -> list[str]:
    cls = env_class(env_id)
    return sorted(set(constructor_params(cls)) - set(public_args(cls)))


def arg_leaves(arg: Arg) -> list[Arg]:
    out = [arg]
    if arg.item is not None:
        out += arg_leaves(arg.item)
    for _, sub in arg.fields:
        out += arg_leaves(sub)
    return out


# -- the declarations --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ENVS)
def test_every_env_class_declares_its_public_arguments_itself(env_id):
    cls = env_class(env_id)
    assert cls is not None and issubclass(cls, AgentEnv)
    params = constructor_params(cls)
    for klass in cls.__mro__:
        if klass is AgentEnv or not issubclass(klass, AgentEnv):
            continue
        if klass is cls or "__init__" in klass.__dict__:
            assert "public_args" in klass.__dict__, f"{klass.__name__} must declare public_args on purpose"
    inherited = {name for base in cls.__mro__[1:] for name in getattr(base, "public_args", {})}
    invented = set(cls.public_args) - set(params) - inherited
    assert not invented, f"{env_id} declares public arguments its constructor does not take: {sorted(invented)}"


@pytest.mark.parametrize("env_id", ENVS)
def test_no_public_argument_is_a_path_url_credential_cache_or_code(env_id):
    cls = env_class(env_id)
    params = constructor_params(cls)
    for name, arg in public_args(cls).items():
        assert not DANGEROUS_NAME.search(name), f"{env_id}: {name} looks operator-only"
        assert not DANGEROUS_ANNOTATION.search(str(params[name].annotation)) or name == "dataset", (env_id, name)
        for leaf in arg_leaves(arg):
            assert leaf.kind in ("int", "float", "bool", "choice", "list", "record"), (env_id, name, leaf)
            for choice in leaf.choices:  # free text is never public; choices are fixed, harmless words
                assert choice is None or isinstance(choice, int | float | bool | str), (env_id, name, choice)
                if isinstance(choice, str):
                    assert re.fullmatch(r"[A-Za-z0-9_-]+", choice), (env_id, name, choice)
            if leaf.kind in ("int", "float"):
                assert leaf.low is not None and leaf.high is not None, (env_id, name)
            if leaf.kind == "list":
                assert 0 < leaf.max_items <= 64, (env_id, name)


@pytest.mark.parametrize("env_id", ENVS)
def test_operator_only_arguments_include_every_file_url_and_credential(env_id):
    cls = env_class(env_id)
    for name in constructor_params(cls):
        if DANGEROUS_NAME.search(name):
            assert name in operator_only(env_id), f"{env_id}: {name} must be operator-only"


def sample_values(arg: Arg) -> list[Any]:
    """Values at the edges of what ``arg`` allows."""
    if arg.kind == "choice":
        return list(arg.choices)
    if arg.kind == "bool":
        return [True, False]
    if arg.kind in ("int", "float"):
        cast = int if arg.kind == "int" else float
        return [cast(arg.low), cast(min(arg.high, max(arg.low, 2)))]
    if arg.kind == "list":
        return [[v] for v in sample_values(arg.item)[:2]]
    return [{k: sample_values(a)[0] for k, a in arg.fields}]


BASE = {"agentgym/SearchQA-v0": {"dataset": "tiny"}, "agentgym/TwentyQuestions-v0": {"dataset": "tiny"}}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENVS)
def test_allowed_values_build_the_env_or_are_refused_with_a_value_error(env_id):
    for name, arg in public_args(env_class(env_id)).items():
        for value in sample_values(arg):
            if name == "dataset" and value != "tiny":
                continue  # "small" builds in seconds: covered by the check, not built here
            kwargs = checked_kwargs(env_id, {**BASE.get(env_id, {}), name: value})
            # an inconsistent combination (e.g. a one-item range) is an argument error: a 4xx on the server
            with contextlib.suppress(ValueError, TypeError):
                gym.make(env_id, **kwargs).close()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
ATTACKS = [(e, n) for e in ENVS for n in operator_only(e)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ATTACKS), JSON)
def test_any_value_of_an_operator_only_argument_but_its_default_is_refused(attack, value):
    env_id, name = attack
    default = constructor_params(env_class(env_id))[name].default
    if json.dumps(value, sort_keys=True) == json.dumps(default, sort_keys=True, default=str):
        return
    with pytest.raises(UntrustedArgumentError, match=re.escape(repr(name))):
        checked_kwargs(env_id, {name: value})


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ENVS), st.data())
def test_values_outside_a_public_arguments_rule_are_refused(env_id, data):
    public = public_args(env_class(env_id))
    name = data.draw(st.sampled_from(sorted(public)))
    value = data.draw(JSON)
    default = constructor_params(env_class(env_id))[name].default
    allowed = public[name].problem(value) is None or json.dumps(value) == json.dumps(default, default=str)
    if allowed:
        assert checked_kwargs(env_id, {name: value}) == {name: value}
    else:
        with pytest.raises(UntrustedArgumentError, match=re.escape(repr(name))):
            checked_kwargs(env_id, {name: value})


# -- attacks through the real server and through replay -----------------------------------------------------------


class Listener:
    """A loopback TCP port that counts the connections it gets (none expected)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def attack_values(url: str, tmp: Path) -> list[Any]:
    return [url, f"remote:{url}", str(tmp / "made" / "x.json"), [str(tmp / "made")],
            {"base_url": url, "model": "m", "api_key_env": "AGENTGYM_TOKEN", "max_retries": 0}]  # fmt: skip


def test_the_issues_attacks_through_the_server_are_refused_and_touch_nothing(listener, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_TOKEN", "server-secret")
    url = f"http://127.0.0.1:{listener.port}/v1"
    issue = [
        ("agentgym/Clarify-v0", {"user": "llm", "user_llm": {"base_url": url, "model": "m",
                                                             "api_key_env": "AGENTGYM_TOKEN", "max_retries": 0}}),
        ("agentgym/SearchQA-v0", {"dataset": "tiny", "retriever": f"remote:{url}"}),
        ("agentgym/SearchQA-v0", {"questions_path": "/etc/passwd", "corpus_path": "/etc/passwd"}),
        ("agentgym/SearchQA-v0", {"dataset": "tiny", "cache_dir": str(tmp_path / "made")}),
        ("agentgym/SearchQA-v0", {"dataset": "100k"}),
    ]  # fmt: skip
    attacks = issue + [(e, {n: v}) for e, n in ATTACKS for v in attack_values(url, tmp_path)]
    with BackgroundServer(create_app(token="tok")) as server, httpx.Client(base_url=server.url) as http:
        auth = {"Authorization": "Bearer tok"}
        for env_id, kwargs in attacks:
            resp = http.post("/sessions", json={"env_id": env_id, "env_kwargs": kwargs}, headers=auth, timeout=60)
            assert resp.status_code == 422, (env_id, kwargs, resp.text)
            body = resp.json()
            assert body["error"] == "untrusted_argument" and env_id in body["detail"], body
        assert http.get("/health", headers=auth).json()["sessions"] == 0
    assert listener.connections == 0
    assert list(tmp_path.iterdir()) == []


def test_the_operator_gives_the_rest_and_clients_cannot_change_it(tmp_path):
    cache = str(tmp_path / "cache")
    app = create_app(env_ids=["agentgym/SearchQA-v0", "agentgym/Household-v0"],
                     env_args={"cache_dir": cache, "agentgym/Household-v0:max_turns": 7},
                     allow_env_args={"dataset": ["small"]})  # fmt: skip
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        made = http.post("/sessions", json={"env_id": "agentgym/Household-v0", "env_kwargs": {"split": "train"}})
        assert made.status_code == 201, made.text
        assert made.json()["env"]["max_turns"] == 7
        again = http.post("/sessions", json={"env_id": "agentgym/Household-v0", "env_kwargs": {"max_turns": 7}})
        assert again.status_code == 201  # the operator's own value may be repeated
        changed = http.post("/sessions", json={"env_id": "agentgym/Household-v0", "env_kwargs": {"max_turns": 9}})
        assert changed.status_code == 422 and "fixed by the operator" in changed.json()["detail"]
        other = http.post("/sessions", json={"env_id": "agentgym/SearchQA-v0", "env_kwargs": {"cache_dir": "/x"}})
        assert other.status_code == 422 and "fixed by the operator" in other.json()["detail"]
        big = http.post("/sessions", json={"env_id": "agentgym/SearchQA-v0", "env_kwargs": {"dataset": "100k"}})
        assert big.status_code == 422 and "100k" in big.json()["detail"]
    with pytest.raises(ValueError, match="no served env takes"):
        create_app(env_ids=["agentgym/Household-v0"], env_args={"cache_dir": cache})


def recorded(env_id: str, env_kwargs: dict[str, Any]) -> Trajectory:
    return Trajectory(env_id=env_id, env_kwargs=env_kwargs, seed=0, task_id="t", agent="random",
                      initial_observation=[], reset_info={})  # fmt: skip


def test_a_crafted_record_is_refused_by_replay_and_touches_nothing(listener, tmp_path):
    url = f"http://127.0.0.1:{listener.port}/v1"
    for env_id, name in ATTACKS:
        for value in attack_values(url, tmp_path):
            with pytest.raises(UntrustedArgumentError, match=re.escape(repr(name))):
                make_recorded_env(recorded(env_id, {name: value}))
    assert listener.connections == 0
    assert list(tmp_path.iterdir()) == []


def test_agentgym_replay_refuses_a_crafted_file_in_one_line_and_takes_operator_arguments(tmp_path, capsys):
    from agentgym.running.runner import run

    cache = tmp_path / "cache"
    path = tmp_path / "t.jsonl"
    run("agentgym/SearchQA-v0", "heuristic", 1, env_kwargs={"dataset": "tiny", "cache_dir": str(cache)},
        out=str(path), progress=False)  # fmt: skip
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'cache_dir' is operator-only" in err
    assert main(["replay", str(path), "--env-arg", f"cache_dir={cache}"]) == 0
    crafted = tmp_path / "crafted.jsonl"
    record = json.loads(path.read_text().splitlines()[-1])
    record["env_kwargs"] = {"dataset": "tiny", "cache_dir": str(tmp_path / "made")}
    crafted.write_text(json.dumps(record) + "\n")
    assert main(["replay", str(crafted)]) == 2
    assert not (tmp_path / "made").exists()


# -- a hostile client: stuck calls, shares, health ------------------------------------------------------------------

BLOCKING = "agentgym_test/Blocking-v0"


@pytest.fixture
def blocking_server():
    if BLOCKING not in gym.registry:
        gym.register(id=BLOCKING, entry_point=BlockingEnv)
    BlockingEnv.gate.clear()
    app = create_app(env_ids=[BLOCKING, "agentgym/Household-v0"], workers=4, max_calls_per_client=2,
                     call_timeout=5.0)  # fmt: skip
    with BackgroundServer(app) as server:
        yield server
    BlockingEnv.gate.set()


def client_from(address: str, url: str) -> httpx.Client:
    """A client whose requests come from another loopback address (another peer to the server)."""
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=address), timeout=60)


def session(http: httpx.Client, env_id: str) -> str:
    resp = http.post("/sessions", json={"env_id": env_id})
    assert resp.status_code == 201, resp.text
    sid = resp.json()["session_id"]
    assert http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
    return sid


@pytest.mark.slow
def test_a_hostile_clients_stuck_calls_time_out_and_never_starve_the_others(blocking_server):
    url = blocking_server.url
    with (
        client_from("127.0.0.2", url) as bad,
        client_from("127.0.0.3", url) as worse,
        httpx.Client(base_url=url, timeout=60) as good,
    ):
        stuck = [session(bad, BLOCKING) for _ in range(3)]
        results: list[httpx.Response] = []
        threads = [threading.Thread(target=lambda s=s: results.append(bad.post(f"/sessions/{s}/step",
                                                                            json={"action": "block"})))
                   for s in stuck[:2]]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(r.status_code for r in results) == [504, 504], [r.text for r in results]
        assert all(r.json()["error"] == "call_timeout" for r in results)
        gone = bad.post(f"/sessions/{stuck[0]}/step", json={"action": "x"})
        assert gone.status_code == 410 and gone.json()["error"] == "session_broken"
        refused = bad.post(f"/sessions/{stuck[2]}/step", json={"action": "x"})
        assert refused.status_code == 429 and refused.json()["error"] == "too_busy"
        health = good.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        assert health.json()["workers"]["stuck"] == 2
        mine = session(good, "agentgym/Household-v0")  # another client still plays
        for _ in range(3):
            assert good.post(f"/sessions/{mine}/step", json={"action": "look"}).status_code == 200
        # a second hostile client takes the other two workers: every worker is stuck, and health says so
        more = [session(worse, BLOCKING) for _ in range(2)]
        threads = [threading.Thread(target=lambda s=s: worse.post(f"/sessions/{s}/step", json={"action": "block"}))
                   for s in more]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        starved = good.get("/health")
        assert starved.status_code == 503 and starved.json()["status"] == "starved"
        assert good.post(f"/sessions/{mine}/step", json={"action": "look"}).status_code == 503
        BlockingEnv.gate.set()  # the stuck calls return: their workers come back
        for _ in range(200):
            if good.get("/health").json()["workers"]["stuck"] == 0:
                break
            threading.Event().wait(0.05)
        assert good.get("/health").json()["status"] == "ok"
        assert good.post(f"/sessions/{mine}/step", json={"action": "look"}).status_code == 200


def test_calls_beyond_a_clients_share_wait_for_its_own_workers_instead_of_failing():
    if BLOCKING not in gym.registry:
        gym.register(id=BLOCKING, entry_point=BlockingEnv)
    BlockingEnv.gate.clear()
    app = create_app(env_ids=[BLOCKING], workers=4, max_calls_per_client=2, call_timeout=60.0)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        sids = [session(http, BLOCKING) for _ in range(3)]
        results: list[int] = []
        threads = [threading.Thread(target=lambda s=s: results.append(
            http.post(f"/sessions/{s}/step", json={"action": "block"}).status_code)) for s in sids]  # fmt: skip
        for t in threads:
            t.start()
        for _ in range(400):  # two calls hold the client's two workers, the third waits for one of them
            if http.get("/health").json()["workers"]["busy"] == 2:
                break
            threading.Event().wait(0.05)
        assert http.get("/health").json()["workers"]["busy"] == 2
        BlockingEnv.gate.set()
        for t in threads:
            t.join(timeout=120)
        assert results == [200, 200, 200]


# -- item 7: the smaller ones ---------------------------------------------------------------------------------------


def test_a_negative_or_huge_seed_is_a_422_and_a_lower_case_bearer_scheme_is_accepted():
    with BackgroundServer(create_app(env_ids=["agentgym/Household-v0"], token="s3cret")) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": "bearer s3cret"}, timeout=60) as http:
            sid = http.post("/sessions", json={"env_id": "agentgym/Household-v0"}).json()["session_id"]
            for seed in (-1, 1 << 64, -(10**30)):
                resp = http.post(f"/sessions/{sid}/reset", json={"seed": seed})
                assert resp.status_code == 422 and resp.json()["error"] == "invalid_request", resp.text
            assert http.post(f"/sessions/{sid}/reset", json={"seed": (1 << 64) - 1}).status_code == 200
        for auth in ("BEARER s3cret", "Bearer  s3cret"):
            assert httpx.get(server.url + "/health", headers={"Authorization": auth}).status_code == 200
        for auth in ("bearer S3CRET", "Basic s3cret", "s3cret"):
            assert httpx.get(server.url + "/health", headers={"Authorization": auth}).status_code == 401


@pytest.mark.slow
def test_server_process_keeps_its_token_out_of_the_command_line():
    with ServerProcess(env_ids=["agentgym/Chain-v0"], token="very-secret-token") as server:
        assert server.proc is not None
        cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes()
        assert b"very-secret-token" not in cmdline and b"very-secret-token" not in environ
        assert httpx.get(server.url + "/health", timeout=10).status_code == 401
        ok = httpx.get(server.url + "/health", headers={"Authorization": "Bearer very-secret-token"}, timeout=10)
        assert ok.status_code == 200


def test_searchqa_sessions_share_their_built_dataset():
    import tracemalloc

    from agentgym.envs.search_qa.data import build_dataset

    first = gym.make("agentgym/SearchQA-v0", dataset="tiny", data_seed=3)
    tracemalloc.start()
    try:
        more = [gym.make("agentgym/SearchQA-v0", dataset="tiny", data_seed=3) for _ in range(5)]
        per_session = tracemalloc.get_traced_memory()[0] / 5
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fresh = build_dataset("tiny", seed=3)
        one_build = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert all(e.unwrapped.dataset is first.unwrapped.dataset for e in more)
    assert per_session < one_build, (per_session, one_build)  # a session does not build its own dataset
    assert len(fresh.corpus) == len(first.unwrapped.dataset.corpus)
    assert first.reset(seed=1)[0] == more[0].reset(seed=1)[0]


def test_searchqa_sessions_are_cheap_unless_the_operator_allows_more():
    assert checked_kwargs("agentgym/SearchQA-v0", {"dataset": "small"}) == {"dataset": "small"}
    for bad in ({"dataset": "100k"}, {"data_seed": 7}, {"retriever": "dense"}):
        with pytest.raises(UntrustedArgumentError):
            checked_kwargs("agentgym/SearchQA-v0", bad)
    assert checked_kwargs("agentgym/SearchQA-v0", {"dataset": "100k"}, allow={"dataset": ["100k"]})
    assert os.environ.get("AGENTGYM_TOKEN") != "server-secret"  # the monkeypatched token did not leak out
    assert agentgym.list_envs()


def test_a_dataset_rows_env_kwargs_are_checked_and_the_trainers_config_is_the_operators(listener, tmp_path):
    from agentgym.integrations.tasks import TaskRef, task_rows

    url = f"http://127.0.0.1:{listener.port}/v1"
    hostile = TaskRef.from_dict({"env_id": "agentgym/Clarify-v0", "env_kwargs": {
        "user": "llm", "user_llm": {"base_url": url, "model": "m", "api_key_env": "AGENTGYM_TOKEN"}}})  # fmt: skip
    with pytest.raises(UntrustedArgumentError, match="user_llm"):
        hostile.make_env()
    cache = str(tmp_path / "cache")
    row = task_rows("agentgym/SearchQA-v0", [0], env_kwargs={"dataset": "tiny", "cache_dir": cache})[0]
    ref = TaskRef.from_dict(row["agentgym"])
    with pytest.raises(UntrustedArgumentError, match="cache_dir"):
        ref.make_env()
    env = ref.make_env({"cache_dir": cache})  # the trainer's configuration gives it
    assert env.unwrapped.spec_kwargs()["cache_dir"] == cache
    env.close()
    assert listener.connections == 0


def test_agentgym_serve_refuses_an_operator_argument_no_served_env_takes(capsys):
    assert main(["serve", "agentgym/Household-v0", "--env-arg", "cache_dir=/srv/cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no served env takes an argument 'cache_dir'" in err
    assert main(["serve", "agentgym/Household-v0", "--env-arg", "agentgym/Chain-v0:horizon=3"]) == 2
    assert "not one of the served envs" in capsys.readouterr().err
