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
:func:`agentgym.tools.serving.uvicorn_config` (header and body deadlines, header size, concurrency).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from agentgym.tools.serving import TOKEN_ENV, bearer_checker, check_bind, run_uvicorn, uvicorn_config

from .base import Hit, Retriever

_log = logging.getLogger(__name__)

__all__ = ["TOKEN_ENV", "RetrieveRequest", "check_bind", "create_app", "serve_retriever"]


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
    **app_kwargs: Any,
) -> None:
    """Load a Search-R1 corpus JSONL, build ``retriever`` (a :func:`make_retriever` spec) and serve it with uvicorn.

    Binds to loopback by default; any other ``host`` needs a bearer ``token`` (ValueError otherwise, raised before
    the corpus is loaded). ``header_timeout`` / ``body_timeout``: seconds a client has to send its request headers
    / body (see :func:`agentgym.tools.serving.uvicorn_config`). ``app_kwargs`` go to :func:`create_app`.
    """
    from . import make_retriever
    from .base import load_corpus_jsonl

    check_bind(host, token)
    corpus = load_corpus_jsonl(corpus_path)
    kwargs: dict[str, Any] = {"cache_dir": cache_dir} if cache_dir is not None else {}
    r = make_retriever(retriever, corpus, **kwargs)
    try:
        app = create_app(r, token=token, **app_kwargs)
        config = uvicorn_config(
            app, host=host, port=port, log_level=log_level, header_timeout=header_timeout, body_timeout=body_timeout
        )
        run_uvicorn(config)
    finally:
        r.close()
