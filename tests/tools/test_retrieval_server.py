"""The Search-R1-compatible retrieval server (real uvicorn on a loopback port) and the RemoteRetriever client."""

from __future__ import annotations

import json
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
import uvicorn

from agentgym.tools.retrieval import (
    Document,
    Hit,
    RemoteRetriever,
    RetrievalServerError,
    Retriever,
    create_app,
    make_retriever,
    write_corpus_jsonl,
)
from agentgym.tools.retrieval.bm25 import BM25Retriever


def corpus(n: int = 300, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    words = [f"term{i}" for i in range(80)] + ["lake", "ovra", "river", "müller", "湖"]
    return [
        Document.from_title_text(str(i), " ".join(rng.choices(words, k=2)), " ".join(rng.choices(words, k=30)))
        for i in range(n)
    ]


class ServerThread:
    """uvicorn serving ``app`` on a free loopback port in a background thread."""

    def __init__(self, app: object) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture(scope="module")
def local() -> BM25Retriever:
    return BM25Retriever(corpus())


@pytest.fixture(scope="module")
def server(local: BM25Retriever) -> Iterator[ServerThread]:
    app = create_app(local, max_queries=64, max_topk=50, max_query_chars=2000, max_body_bytes=200_000)
    with ServerThread(app) as s:
        yield s


@pytest.fixture()
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


QUERIES = ["ovra lake", "term1 term2 term3", "", "the of", "river müller 湖", "\ud800 lake", "x" * 1500]


def test_remote_agrees_with_local(server: ServerThread, local: BM25Retriever) -> None:
    remote = make_retriever(f"remote:{server.url}")
    assert isinstance(remote, RemoteRetriever)
    for topk in (1, 3, 50):
        assert remote.batch_search(QUERIES, topk) == local.batch_search(QUERIES, topk)
    assert remote.search("ovra", 2) == local.search("ovra", 2)
    # More queries than one request may carry: the client splits them.
    many = [f"term{i} lake" for i in range(150)]
    small_batches = RemoteRetriever(server.url + "/retrieve/", max_batch=64)
    assert small_batches.batch_search(many, 3) == local.batch_search(many, 3)
    no_scores = RemoteRetriever(server.url, return_scores=False).batch_search(QUERIES, 3)
    for got, want in zip(no_scores, local.batch_search(QUERIES, 3), strict=True):
        assert [h.doc for h in got] == [h.doc for h in want] and all(math.isnan(h.score) for h in got)
    for r in (remote, small_batches):
        r.close()


def test_wire_format_matches_search_r1(http: httpx.Client, local: BM25Retriever) -> None:
    resp = http.post("/retrieve", json={"queries": ["ovra lake", "zzz"], "topk": 2, "return_scores": True})
    assert resp.status_code == 200
    result = resp.json()["result"]
    assert len(result) == 2 and result[1] == []
    hit = result[0][0]
    assert set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"}
    assert hit["document"]["id"] == local.search("ovra lake", 1)[0].doc.id
    plain = http.post("/retrieve", json={"queries": ["ovra lake"], "topk": 2}).json()["result"]
    assert plain[0] == [h["document"] for h in result[0]]  # return_scores defaults to false: lists of documents
    default_topk = http.post("/retrieve", json={"queries": ["term1 term2"]}).json()["result"]
    assert len(default_topk[0]) == 3
    assert http.post("/retrieve", json={"queries": [], "topk": 3}).json() == {"result": []}
    health = http.get("/health").json()
    assert health["status"] == "ok" and health["documents"] == len(local.corpus)


BAD_REQUESTS = [
    # (description, body bytes, expected status, fragment of the message)
    ("not json", b"{queries: [}", 400, "not valid JSON"),
    ("empty body", b"", 400, "not valid JSON"),
    ("invalid utf-8", b'{"queries": ["\xff\xfe"]}', 400, "not valid JSON"),
    ("deep nesting", b"[" * 150_000 + b"]" * 150_000, 413, "too large"),
    ("deep nesting under the size limit", b"[" * 50_000 + b"]" * 50_000, 400, "not valid JSON"),
    ("a list, not an object", b'["ovra"]', 422, "invalid request"),
    ("missing queries", b'{"topk": 3}', 422, "queries"),
    ("queries not a list", b'{"queries": "ovra lake"}', 422, "queries"),
    ("query not a string", b'{"queries": ["ok", 5]}', 422, "queries.1"),
    ("topk a string", b'{"queries": ["ovra"], "topk": "3"}', 422, "topk"),
    ("topk a float", b'{"queries": ["ovra"], "topk": 2.5}', 422, "topk"),
    ("topk a bool", b'{"queries": ["ovra"], "topk": true}', 422, "topk"),
    ("topk zero", b'{"queries": ["ovra"], "topk": 0}', 422, "topk must be between 1 and 50"),
    ("topk negative", b'{"queries": ["ovra"], "topk": -4}', 422, "topk"),
    ("topk huge", b'{"queries": ["ovra"], "topk": 100000000000000000000000}', 422, "topk"),
    ("return_scores not a bool", b'{"queries": ["ovra"], "return_scores": "yes"}', 422, "return_scores"),
    ("too many queries", json.dumps({"queries": ["q"] * 65}).encode(), 413, "too many queries"),
    ("query too long", json.dumps({"queries": ["lake " * 500]}).encode(), 413, "too long"),
    ("body too large", json.dumps({"queries": ["a" * 300_000]}).encode(), 413, "too large"),
]


@pytest.mark.parametrize(("what", "body", "status", "message"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_malformed_requests_get_4xx_with_a_message(
    http: httpx.Client, what: str, body: bytes, status: int, message: str
) -> None:
    resp = http.post("/retrieve", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == status, (what, resp.text[:300])
    assert message in resp.json()["detail"]


def test_streamed_body_over_the_limit_is_refused(http: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:  # no content-length: chunked transfer encoding
        yield b'{"queries": ["'
        for _ in range(100):
            yield b"a" * 10_000
        yield b'"]}'

    resp = http.post("/retrieve", content=chunks())
    assert resp.status_code == 413 and "too large" in resp.json()["detail"]
    assert http.get("/health").status_code == 200  # and the server is fine afterwards


def test_client_raises_the_server_message_on_4xx(server: ServerThread) -> None:
    remote = RemoteRetriever(server.url, retries=3, backoff=60.0)  # 4xx must not be retried (no sleeping here)
    t0 = time.monotonic()
    with pytest.raises(RetrievalServerError, match=r"HTTP 422.*topk must be between 1 and 50") as info:
        remote.search("ovra", 51)
    assert info.value.status_code == 422 and time.monotonic() - t0 < 30
    assert remote.search("ovra", 0) == [] and remote.batch_search([], 3) == []
    remote.close()


def test_concurrent_clients(server: ServerThread, local: BM25Retriever) -> None:
    queries = [f"term{i} term{(i * 7) % 80} lake" for i in range(120)]
    want = local.batch_search(queries, 5)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            with RemoteRetriever(server.url) as r:
                for i in range(t, len(queries), 6):
                    assert r.search(queries[i], 5) == want[i]
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


class FlakyRetriever(Retriever):
    """Fails its first ``failures`` calls (the server answers 500), then delegates."""

    def __init__(self, inner: Retriever, failures: int) -> None:
        self.inner, self.failures, self.calls = inner, failures, 0

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("index shard offline")
        return self.inner.batch_search(queries, topk)


def test_client_retries_5xx_then_succeeds_or_reports(local: BM25Retriever) -> None:
    flaky = FlakyRetriever(local, failures=2)
    with ServerThread(create_app(flaky)) as s:
        remote = RemoteRetriever(s.url, retries=2, backoff=0.01)
        assert remote.search("ovra lake", 3) == local.search("ovra lake", 3) and flaky.calls == 3
        flaky.calls, flaky.failures = 0, 10
        with pytest.raises(RetrievalServerError, match=r"HTTP 500.*index shard offline"):
            remote.search("ovra lake", 3)
        assert flaky.calls == 3
        remote.close()


def test_client_reports_unreachable_server() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    remote = RemoteRetriever(f"http://127.0.0.1:{port}", retries=2, backoff=0.01)
    with pytest.raises(RetrievalServerError, match="unreachable after 3 attempts"):
        remote.search("ovra")
    remote.close()


def test_bearer_token(local: BM25Retriever) -> None:
    with ServerThread(create_app(local, token="s3cret")) as s:
        with pytest.raises(RetrievalServerError, match="HTTP 401"):
            RemoteRetriever(s.url).search("ovra")
        authed = RemoteRetriever(s.url, headers={"Authorization": "Bearer s3cret"})
        assert authed.search("ovra lake", 2) == local.search("ovra lake", 2)
        authed.close()
        for scheme in ("bearer", "BEARER"):  # the scheme is case-insensitive (RFC 9110); the token is not
            lower = RemoteRetriever(s.url, headers={"Authorization": f"{scheme} s3cret"})
            assert lower.search("ovra lake", 2) == local.search("ovra lake", 2)
            lower.close()
        with pytest.raises(RetrievalServerError, match="HTTP 401"):
            RemoteRetriever(s.url, headers={"Authorization": "bearer S3CRET"}).search("ovra")


@pytest.mark.slow
def test_serve_retriever_subprocess(tmp_path: Path) -> None:
    docs = corpus(50, seed=3)
    write_corpus_jsonl(tmp_path / "corpus.jsonl", docs)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "from agentgym.tools.retrieval import serve_retriever; "
        f"serve_retriever({str(tmp_path / 'corpus.jsonl')!r}, port={port}, cache_dir={str(tmp_path)!r}, "
        "log_level='warning')"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 180  # a cold numba cache compiles for ~30 s; a busy CI
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "serve_retriever did not come up"
            time.sleep(0.1)
        remote = RemoteRetriever(f"http://127.0.0.1:{port}")
        assert remote.search("term3 lake", 3) == BM25Retriever(docs).search("term3 lake", 3)
        remote.close()
        assert list(tmp_path.glob("bm25-*.npz"))
    finally:
        proc.terminate()
        proc.wait(10)


# ---------------------------------------------------------------------------- exposure and connection limits


def test_check_bind_refuses_beyond_loopback_without_a_token() -> None:
    from agentgym.tools.retrieval.server import check_bind

    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        check_bind(host, None)  # loopback: no token needed
    for host in ("0.0.0.0", "::", "10.1.2.3", "example.org", ""):
        for token in (None, ""):
            with pytest.raises(ValueError, match=r"without a bearer token.*AGENTGYM_TOKEN"):
                check_bind(host, token)
        check_bind(host, "s3cret")


def test_serve_retriever_refuses_a_public_bind_without_a_token(tmp_path: Path) -> None:
    from agentgym.tools.retrieval import serve_retriever

    # Raised before the corpus is read (the file does not exist), so nothing is ever bound.
    with pytest.raises(ValueError, match=r"refusing to serve on '0\.0\.0\.0'"):
        serve_retriever(tmp_path / "missing.jsonl", host="0.0.0.0")


def test_cli_public_bind_without_a_token_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentgym import cli

    monkeypatch.delenv("AGENTGYM_TOKEN", raising=False)
    assert cli.main(["serve-retriever", str(tmp_path / "missing.jsonl"), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgym serve-retriever: error: refusing to serve on '0.0.0.0'") and err.count("\n") == 1
    assert "AGENTGYM_TOKEN" in err and "--token" in err


def test_cli_token_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym import cli
    from agentgym.tools.retrieval import server as server_module

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(server_module, "serve_retriever", lambda corpus, **kw: calls.append(kw))
    monkeypatch.delenv("AGENTGYM_TOKEN", raising=False)
    assert cli.main(["serve-retriever", "c.jsonl", "--host", "0.0.0.0", "--token", "from-flag"]) == 0
    monkeypatch.setenv("AGENTGYM_TOKEN", "from-env")
    assert cli.main(["serve-retriever", "c.jsonl", "--host", "::", "--header-timeout", "2.5"]) == 0
    assert cli.main(["serve-retriever", "c.jsonl", "--token", "flag-wins"]) == 0
    assert [(c["host"], c["token"]) for c in calls] == [
        ("0.0.0.0", "from-flag"),
        ("::", "from-env"),
        ("127.0.0.1", "flag-wins"),
    ]
    assert calls[1]["header_timeout"] == 2.5 and calls[0]["header_timeout"] == 10.0


def partial_request(url: str, data: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    if data:
        sock.sendall(data)
    return sock


def closed_after(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closes ``sock`` (reading and discarding whatever it answers first)."""
    t0 = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return math.inf
    finally:
        sock.close()
    return time.monotonic() - t0


PARTIAL_HEADERS = b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: "


def test_connections_that_do_not_send_their_request_in_time_are_closed(local: BM25Retriever) -> None:
    from agentgym.tools.serving import BackgroundServer

    with BackgroundServer(create_app(local), header_timeout=0.5, body_timeout=0.5) as s:
        t0 = time.monotonic()
        slow = [partial_request(s.url, PARTIAL_HEADERS) for _ in range(100)]  # slowloris: headers never finish
        idle = [partial_request(s.url, b"") for _ in range(5)]  # connect and say nothing
        body = partial_request(s.url, b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        # A kept-alive connection gets the same deadline for its next request (not uvicorn's 5 s keep-alive).
        second = partial_request(s.url, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + PARTIAL_HEADERS)
        trickle = partial_request(s.url, b"P")
        stop = threading.Event()

        def drip() -> None:  # a byte every 0.1 s must not extend the header deadline
            for byte in b"OST /retrieve HTTP/1.1\r\nX-Drip: " + b"a" * 100:
                if stop.wait(0.1):
                    return
                try:
                    trickle.send(bytes([byte]))
                except OSError:
                    return

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:  # one 5 s budget for all of them (each waits only for what is left of it)
            waits = [
                closed_after(c, max(0.01, t0 + 5.0 - time.monotonic())) for c in [*slow, *idle, body, second, trickle]
            ]
        finally:
            stop.set()
            dripper.join(5)
        assert max(waits) < 3.0, sorted(waits)[-5:]
        assert time.monotonic() - t0 < 5.0
        with httpx.Client(base_url=s.url, timeout=5) as http:
            assert http.post("/retrieve", json={"queries": ["ovra lake"]}).status_code == 200


@pytest.mark.slow
def test_cli_serves_with_the_env_token_and_header_deadline(tmp_path: Path) -> None:
    docs = corpus(50, seed=4)
    write_corpus_jsonl(tmp_path / "corpus.jsonl", docs)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    argv = ["serve-retriever", str(tmp_path / "corpus.jsonl"), "--port", str(port), "--cache-dir", str(tmp_path)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGENTGYM_TOKEN": "s3cret"}  # the token is not in argv (ps)
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", *argv, "--header-timeout", "1"], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                resp = httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "serve-retriever did not come up"
            time.sleep(0.1)
        assert resp.status_code == 401 and "bearer token" in resp.json()["detail"]
        wrong = httpx.post(f"{url}/retrieve", json={"queries": ["x"]}, headers={"Authorization": "Bearer s3cre"})
        assert wrong.status_code == 401 and "bearer token" in wrong.json()["detail"]
        with pytest.raises(RetrievalServerError, match="HTTP 401"):
            RemoteRetriever(url).search("term3 lake")
        with RemoteRetriever(url, headers={"Authorization": "Bearer s3cret"}) as remote:
            assert remote.search("term3 lake", 3) == BM25Retriever(docs).search("term3 lake", 3)
        assert closed_after(partial_request(url, PARTIAL_HEADERS), 5.0) < 3.0
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_idle_connections_from_four_addresses_never_fail_a_query(tmp_path: Path) -> None:
    """Issue 31: 280 connections that send nothing (70 from each of 127.0.0.2-127.0.0.5) against serve_retriever's
    defaults (256 connections, 64 per address): a client's query takes an idle connection's place, not a 503."""
    write_corpus_jsonl(tmp_path / "corpus.jsonl", corpus(50, seed=5))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    argv = ["serve-retriever", str(tmp_path / "corpus.jsonl"), "--port", str(port), "--cache-dir", str(tmp_path)]
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", *argv, "--log-level", "warning"])
    flood: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"{url}/health", timeout=1).status_code == 200
                break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "serve-retriever did not come up"
            time.sleep(0.1)
        for i in range(2, 6):
            for _ in range(70):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(f"127.0.0.{i}", 0))
                flood.append(sock)
        time.sleep(1.0)  # let the server accept them all
        with httpx.Client(base_url=url, timeout=30) as http:
            for _ in range(3):
                assert http.post("/retrieve", json={"queries": ["lake"]}).status_code == 200
    finally:
        for sock in flood:
            sock.close()
        proc.terminate()
        proc.wait(10)
