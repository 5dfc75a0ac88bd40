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
    remote = RemoteRetriever(server.url, retries=3, backoff=5.0)  # 4xx must not be retried (no sleeping here)
    t0 = time.monotonic()
    with pytest.raises(RetrievalServerError, match=r"HTTP 422.*topk must be between 1 and 50") as info:
        remote.search("ovra", 51)
    assert info.value.status_code == 422 and time.monotonic() - t0 < 4
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
        deadline = time.monotonic() + 60
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
