"""A retrieval server speaking Search-R1's HTTP API, over any :class:`Retriever`.

``POST /retrieve`` with ``{"queries": [str, ...], "topk": int (default 3), "return_scores": bool (default false)}``
answers ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}`` (one list per query), or
``{"result": [[{"id", "contents"}, ...], ...]}`` when ``return_scores`` is false. ``GET /health`` reports status.

Malformed requests get a 4xx answer ``{"detail": message}``, never a 500: 400 for a body that is not JSON,
422 for missing or mistyped fields or ``topk`` outside ``1..max_topk``, 413 for a body over ``max_body_bytes``,
more than ``max_queries`` queries or a query over ``max_query_chars`` characters, 401 for a missing or wrong bearer
token (compared in constant time).

:func:`serve_retriever` (and ``agentgym serve-retriever``) binds to loopback by default and refuses to bind anywhere
else without a token (:func:`check_bind`); its connections are bounded as in
:func:`agentgym.tools.serving.uvicorn_config` (header and body deadlines, header size) and capped as in
:class:`agentgym.tools.serving.ConnectionLimits`: ``max_connections`` (256) in all, ``max_connections_per_peer`` (a
quarter) per client address, idle ones closed first to make room, so connections that send nothing never stop a
client's request (503 only when every connection has a request in flight; each worker process counts its own).

**At scale** (``retriever="bm25:disk"`` or ``"faiss"``, e.g. wiki-18's 21M passages): the parent builds or checks
the on-disk index once (``DiskBM25``, within ``max_memory``; or the user's faiss index file), binds the listening
socket, then starts ``workers`` processes that each open the corpus (``CorpusFile``) and the memory-mapped index
themselves and serve that one socket (the kernel spreads connections): the index sits in the page cache once,
shared by all. ``GET /health`` names the
worker that answered (``pid``). A worker that dies is logged and restarted (three deaths in a row within
``_QUICK_DEATH_S`` of starting stop the server: exit 3); SIGINT / SIGTERM stop the workers (SIGTERM, then SIGKILL
after a grace period) and the parent; a worker whose parent dies is sent SIGTERM by the kernel (Linux
``PR_SET_PDEATHSIG``) and also exits when it sees itself orphaned.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from agentgym.tools.serving import (
    TOKEN_ENV,
    ConnectionLimits,
    bearer_checker,
    check_bind,
    run_uvicorn,
    uvicorn_config,
)

from .base import Hit, Retriever

_log = logging.getLogger(__name__)

__all__ = ["TOKEN_ENV", "RetrieveRequest", "WorkerPool", "check_bind", "create_app", "serve_retriever"]

ON_DISK = ("bm25:disk", "faiss")
"""The specs :func:`serve_retriever` serves from worker processes over on-disk indexes."""
_QUICK_DEATH_S = 10.0  # a worker dying sooner than this after its start counts towards giving up
_MAX_QUICK_DEATHS = 3
_PR_SET_PDEATHSIG = 1


class RetrieveRequest(BaseModel):
    """The body of ``POST /retrieve`` (unknown extra fields are ignored; ``topk`` null means 3)."""

    model_config = ConfigDict(extra="ignore")
    queries: list[StrictStr]
    topk: StrictInt | None = None
    return_scores: StrictBool = False


def create_app(
    retriever: Retriever,
    *,
    max_queries: int = 1024,
    max_topk: int = 100,
    max_query_chars: int = 8192,
    max_body_bytes: int = 8 * 1024 * 1024,
    token: str | None = None,
) -> FastAPI:
    """Build the FastAPI app serving ``retriever``; ``token`` (optional) requires ``Authorization: Bearer token``."""
    app = FastAPI(title="agentgym retrieval server", version="1", docs_url=None, redoc_url=None)
    authorized = bearer_checker(token)

    def check_token(request: Request) -> None:
        if not authorized(request.headers.get("authorization")):
            raise HTTPException(
                401,
                "missing or wrong bearer token: send the header 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @app.get("/health")
    def health(request: Request) -> dict[str, Any]:
        check_token(request)
        corpus = getattr(retriever, "corpus", None)
        return {
            "status": "ok",
            "retriever": type(retriever).__name__,
            "documents": len(corpus) if corpus is not None else None,
            "pid": os.getpid(),  # which worker answered (``serve_retriever(workers=N)``)
            "limits": {"max_queries": max_queries, "max_topk": max_topk, "max_query_chars": max_query_chars},
        }

    schema = {"requestBody": {"content": {"application/json": {"schema": RetrieveRequest.model_json_schema()}}}}

    @app.post("/retrieve", openapi_extra=schema)
    async def retrieve(request: Request) -> Response:
        check_token(request)
        body = await _read_body(request, max_body_bytes)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise HTTPException(400, f"request body is not valid JSON: {e}") from None
        try:
            req = RetrieveRequest.model_validate(payload)
        except ValidationError as e:
            raise HTTPException(422, f"invalid request: {_describe(e)}") from None
        topk = 3 if req.topk is None else req.topk
        if not 1 <= topk <= max_topk:
            raise HTTPException(422, f"invalid request: topk must be between 1 and {max_topk}, got {topk}")
        if len(req.queries) > max_queries:
            raise HTTPException(413, f"too many queries: {len(req.queries)} > {max_queries} per request")
        for i, q in enumerate(req.queries):
            if len(q) > max_query_chars:
                raise HTTPException(413, f"query {i} is too long: {len(q)} > {max_query_chars} characters")

        def search_and_render() -> bytes:  # off the event loop: both can take a while for big batches
            results = retriever.batch_search(req.queries, topk) if req.queries else []
            return _render(results, req.return_scores)

        try:
            answer = await run_in_threadpool(search_and_render)
        except Exception as e:
            _log.exception("retrieval failed")
            raise HTTPException(500, f"retrieval failed: {type(e).__name__}: {e}") from None
        return Response(answer, media_type="application/json")

    return app


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes, whether announced or streamed."""
    close = {"Connection": "close"}  # the rest of a refused body is not read
    announced = request.headers.get("content-length")
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise HTTPException(413, f"request body too large: {announced} > {limit} bytes", headers=close)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPException(413, f"request body too large: over {limit} bytes", headers=close)
            chunks.append(chunk)
    except ClientDisconnect:  # the client left (or missed the body deadline): nobody reads the answer
        raise HTTPException(400, "client disconnected while sending the body") from None
    return b"".join(chunks)


def _describe(error: Any) -> str:
    parts = []
    for err in error.errors(include_url=False):
        loc = ".".join(str(x) for x in err.get("loc", ())) or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts[:10]) + (f"; ... ({len(parts) - 10} more)" if len(parts) > 10 else "")


def _render(results: Sequence[Sequence[Hit]], with_scores: bool) -> bytes:
    def doc(h: Hit) -> dict[str, str]:
        return {"id": h.doc.id, "contents": h.doc.contents}

    if with_scores:
        rows: Any = [
            [{"document": doc(h), "score": h.score if math.isfinite(h.score) else None} for h in hits]
            for hits in results
        ]
    else:
        rows = [[doc(h) for h in hits] for hits in results]
    try:
        return json.dumps({"result": rows}, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates in the corpus: escape everything instead
        return json.dumps({"result": rows}).encode("ascii")


def serve_retriever(
    corpus_path: str | os.PathLike[str],
    *,
    retriever: str = "bm25",
    host: str = "127.0.0.1",
    port: int = 8000,
    cache_dir: str | os.PathLike[str] | None = None,
    token: str | None = None,
    log_level: str = "info",
    header_timeout: float = 10.0,
    body_timeout: float = 60.0,
    workers: int = 1,
    index_dir: str | os.PathLike[str] | None = None,
    max_memory: int | None = None,
    n_threads: int | None = None,
    grace_s: float = 10.0,
    options: dict[str, Any] | None = None,
    max_connections: int = 256,
    max_connections_per_peer: int | None = None,
    **app_kwargs: Any,
) -> None:
    """Load a Search-R1 corpus JSONL, build ``retriever`` (a :func:`make_retriever` spec) and serve it with uvicorn.

    Binds to loopback by default; any other ``host`` needs a bearer ``token`` (ValueError otherwise, raised before
    the corpus is loaded). ``header_timeout`` / ``body_timeout``: seconds a client has to send its request headers
    / body (see :func:`agentgym.tools.serving.uvicorn_config`). ``app_kwargs`` go to :func:`create_app`.

    ``retriever="bm25:disk"`` serves corpora of any size from ``workers`` processes (see the module docstring):
    the index lives in ``index_dir`` (else under ``cache_dir``, else a temporary folder removed at exit), is built
    within ``max_memory`` bytes when missing or stale, and each worker searches with ``n_threads`` threads (default:
    the CPUs shared out among the workers). ``retriever="faiss"`` serves a faiss index file the same way:
    ``options`` are :func:`make_retriever`'s ``faiss`` options (``index_path`` required; ``encoder``, ``nprobe``,
    ``refine_path``, ...; JSON values, sent to the workers). ``grace_s``: how long stopping workers get before
    SIGKILL. The other specs load the corpus and serve from this process (``workers`` must be 1).
    ``max_connections`` / ``max_connections_per_peer``: see :class:`~agentgym.tools.serving.ConnectionLimits`.
    """
    check_bind(host, token)
    connections = [max_connections, max_connections_per_peer]
    ConnectionLimits(*connections)  # bad limits fail before the corpus loads
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    spec = retriever.strip().lower()
    if spec == "faiss" and not (options or {}).get("index_path"):
        raise ValueError("retriever='faiss' needs options={'index_path': FILE, ...} (a faiss index of the corpus)")
    if spec in ON_DISK:
        _serve_disk(
            corpus_path, spec=spec, host=host, port=port, cache_dir=cache_dir, token=token, log_level=log_level,
            header_timeout=header_timeout, body_timeout=body_timeout, workers=workers, index_dir=index_dir,
            max_memory=max_memory, n_threads=n_threads, grace_s=grace_s, options=dict(options or {}),
            app_kwargs=app_kwargs, connections=connections,
        )  # fmt: skip
        return
    if workers != 1 or index_dir is not None or max_memory is not None or options:
        raise ValueError(
            f"workers, index_dir, max_memory and options need retriever='bm25:disk' or 'faiss', not {retriever!r}"
        )
    from .base import load_corpus_jsonl
    from .factory import make_retriever

    corpus = load_corpus_jsonl(corpus_path)
    kwargs: dict[str, Any] = {"cache_dir": cache_dir} if cache_dir is not None else {}
    if n_threads is not None:
        kwargs["n_threads"] = n_threads
    r = make_retriever(retriever, corpus, **kwargs)
    try:
        app = create_app(r, token=token, **app_kwargs)
        config = uvicorn_config(
            app, host=host, port=port, log_level=log_level, header_timeout=header_timeout, body_timeout=body_timeout,
            connection_limits=ConnectionLimits(*connections),
        )  # fmt: skip
        run_uvicorn(config)
    finally:
        r.close()


def _bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The listening socket the workers share (inheritable)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(backlog)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def _serve_disk(
    corpus_path: str | os.PathLike[str],
    *,
    spec: str,
    host: str,
    port: int,
    cache_dir: str | os.PathLike[str] | None,
    token: str | None,
    log_level: str,
    header_timeout: float,
    body_timeout: float,
    workers: int,
    index_dir: str | os.PathLike[str] | None,
    max_memory: int | None,
    n_threads: int | None,
    grace_s: float,
    options: dict[str, Any],
    app_kwargs: dict[str, Any],
    connections: list[int | None],
) -> None:
    from .factory import make_retriever, resolve_disk_dirs

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    scratch = tempfile.mkdtemp(prefix="agentgym-bm25disk-") if index_dir is None and cache_dir is None else None
    try:
        folder, corpus_dir = resolve_disk_dirs(corpus_path, index_dir or scratch, None, cache_dir)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = n_threads or max(1, cpus // workers)
        started = time.monotonic()
        # built or checked once, here; kept open so that its pages stay mapped (and counted shared) while we serve
        if spec == "bm25:disk":
            build_opts: dict[str, Any] = {"index_dir": folder, "corpus_index_dir": corpus_dir}
            if max_memory is not None:
                build_opts["max_memory"] = max_memory
            progress = log_level.lower() in ("info", "debug", "trace")
            parent_index = make_retriever("bm25:disk", corpus_path, n_threads=1, progress=progress, **build_opts)
            worker_opts = {**build_opts, "n_threads": threads, "build": False}
            worker_opts.pop("max_memory", None)
        else:  # faiss: the index file is the user's; opening it here checks it against the corpus once
            worker_opts = {"corpus_index_dir": corpus_dir, **options}
            parent_index = make_retriever(spec, corpus_path, **worker_opts)
        _log.info("index ready in %.1f s: %s (%d documents)", time.monotonic() - started, folder,
                  len(parent_index.corpus))  # type: ignore[attr-defined]  # fmt: skip
        try:
            sock = _bind(host, port)
        except BaseException:
            parent_index.close()
            raise
        config = {
            "spec": spec,
            "corpus": os.fspath(corpus_path),
            "options": {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in worker_opts.items()},
            "n_threads": threads,
            "token": token,
            "log_level": log_level,
            "header_timeout": header_timeout,
            "body_timeout": body_timeout,
            "app": app_kwargs,
            "connections": connections,
        }
        pool = WorkerPool(sock, config, workers, grace_s=grace_s)
        try:
            _log.info("serving on http://%s:%d with %d worker(s)", host, sock.getsockname()[1], workers)
            pool.run()
        finally:
            pool.stop()
            sock.close()
            parent_index.close()
        if pool.failed:
            raise SystemExit(3)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class WorkerPool:
    """``n`` worker processes serving one listening socket (:func:`serve_retriever` with ``bm25:disk``).

    ``run()`` starts them and supervises until SIGINT / SIGTERM (or ``request_stop()``): a worker that exits is
    logged with its code and restarted; ``_MAX_QUICK_DEATHS`` deaths in a row, each within ``_QUICK_DEATH_S`` of
    its start, stop the pool with ``failed`` set. ``stop()`` sends SIGTERM, waits ``grace_s``, then SIGKILLs.
    """

    sock: socket.socket
    config: dict[str, Any]
    n: int
    grace_s: float = 10.0
    failed: bool = False
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _started: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _spawn(self) -> subprocess.Popen[bytes]:
        fd = self.sock.fileno()
        payload = json.dumps({**self.config, "fd": fd, "parent": os.getpid()}).encode()
        code = "from agentgym.tools.retrieval.server import _worker_main; raise SystemExit(_worker_main())"
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, pass_fds=(fd,))
        assert proc.stdin is not None
        try:  # the config (with the token) goes through a pipe: nothing in argv or the environment
            proc.stdin.write(payload)
            proc.stdin.close()
        except OSError:
            pass  # it died at once: the supervisor sees it
        self._started[proc.pid] = time.monotonic()
        _log.info("started worker pid %d", proc.pid)
        return proc

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def run(self) -> None:
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            handlers = {sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.procs = [self._spawn() for _ in range(self.n)]
            quick_deaths = 0
            while not self._stop.wait(0.2):
                for i, proc in enumerate(self.procs):
                    code = proc.poll()
                    if code is None:
                        continue
                    lived = time.monotonic() - self._started.pop(proc.pid, 0.0)
                    _log.error("worker pid %d exited with code %s after %.1f s; restarting it", proc.pid, code, lived)
                    quick_deaths = quick_deaths + 1 if lived < _QUICK_DEATH_S else 0
                    if quick_deaths >= _MAX_QUICK_DEATHS:
                        _log.error("workers keep dying at start (%d in a row): stopping", quick_deaths)
                        self.failed = True
                        return
                    self.procs[i] = self._spawn()
        finally:
            for sig, h in handlers.items():
                signal.signal(sig, h)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log.warning("worker pid %d did not stop within %.0f s: killing it", proc.pid, self.grace_s)
                proc.kill()
                proc.wait()


def _die_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGTERM when its parent dies (Linux), and exit if it already has; a
    watchdog thread checks too (other systems, or a parent that died before the request)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main() -> int:
    """A worker of :class:`WorkerPool`: read the config from stdin, open the index (never build it: the parent
    did), serve the inherited socket until SIGTERM / SIGINT."""
    import uvicorn

    from .factory import make_retriever

    config = json.loads(sys.stdin.buffer.read())
    _die_with_parent(int(config["parent"]))
    sock = socket.socket(fileno=int(config["fd"]))
    if config["spec"] == "faiss":
        import faiss

        faiss.omp_set_num_threads(int(config["n_threads"]))
    r = make_retriever(config["spec"], config["corpus"], **config["options"])
    try:
        app = create_app(r, token=config["token"], **config["app"])
        uv = uvicorn_config(
            app, log_level=config["log_level"], header_timeout=config["header_timeout"],
            body_timeout=config["body_timeout"], connection_limits=ConnectionLimits(*config["connections"]),
        )  # fmt: skip
        server = uvicorn.Server(uv)
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
    finally:
        r.close()
    return 0
