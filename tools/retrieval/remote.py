"""Client of a Search-R1-compatible retrieval server (``POST /retrieve``), e.g. Search-R1's or ours (server.py).

Request ``{"queries": [...], "topk": k, "return_scores": true}``; response
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}``, or, without scores, lists of documents.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

import httpx

from .base import Document, Hit, Retriever

__all__ = ["RemoteRetriever", "RetrievalServerError"]

# Transport failures worth retrying: the request either never reached the server or the connection broke.
# (A read timeout is not retried: the server is slow, and asking again only adds load.)
_RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ReadError, httpx.WriteError,
              httpx.RemoteProtocolError)  # fmt: skip


class RetrievalServerError(RuntimeError):
    """The retrieval server rejected a request or answered something that is not the Search-R1 format."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class RemoteRetriever(Retriever):
    """``Retriever`` over HTTP.

    Args:
        url: server base URL (``http://host:port``) or the full ``.../retrieve`` endpoint.
        timeout: seconds per HTTP request.
        retries: extra attempts after connection errors and 5xx answers (4xx are raised at once).
        backoff: first retry delay in seconds, doubled each retry.
        return_scores: ask for scores; without them hits have ``score = nan``.
        max_batch: queries per request (larger batches are split).
        headers: extra HTTP headers (e.g. ``{"Authorization": "Bearer ..."}``).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        return_scores: bool = True,
        max_batch: int = 512,
        headers: dict[str, str] | None = None,
    ) -> None:
        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else url + "/retrieve"
        self.retries = max(0, int(retries))
        self.backoff = float(backoff)
        self.return_scores = return_scores
        self.max_batch = max(1, int(max_batch))
        self._client = httpx.Client(timeout=timeout, headers=headers)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        queries = list(queries)
        if topk <= 0:
            return [[] for _ in queries]
        out: list[list[Hit]] = []
        for s in range(0, len(queries), self.max_batch):
            out.extend(self._retrieve(queries[s : s + self.max_batch], int(topk)))
        return out

    def _retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        payload = {"queries": queries, "topk": topk, "return_scores": self.return_scores}
        body = json.dumps(payload).encode()  # ASCII-escaped: lone surrogates in queries survive the trip
        headers = {"content-type": "application/json"}
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                resp = self._client.post(self.url, content=body, headers=headers)
            except _RETRYABLE as e:
                if last:
                    raise RetrievalServerError(
                        f"retrieval server {self.url} unreachable after {attempt + 1} attempts: {e!r}"
                    ) from e
            except httpx.TimeoutException as e:
                raise RetrievalServerError(f"retrieval server {self.url} timed out: {e!r}") from e
            else:
                if resp.status_code < 400:
                    return _parse_response(resp, len(queries), self.url)
                if resp.status_code < 500 or last:
                    raise RetrievalServerError(
                        f"retrieval server {self.url} answered HTTP {resp.status_code}: {resp.text[:2000]}",
                        resp.status_code,
                    )
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._client.close()


def _parse_response(resp: httpx.Response, n_queries: int, url: str) -> list[list[Hit]]:
    try:
        data = resp.json()
        result = data["result"]
        if not isinstance(result, list) or len(result) != n_queries:
            raise ValueError(f"'result' should be a list of {n_queries} lists")
        return [[_parse_item(item) for item in per_query] for per_query in result]
    except (ValueError, KeyError, TypeError) as e:
        raise RetrievalServerError(
            f"retrieval server {url} sent an unexpected response ({e}): {resp.text[:500]}"
        ) from e


def _parse_item(item: Any) -> Hit:
    if isinstance(item, dict) and "document" in item:
        score = item.get("score")
        return Hit(_parse_doc(item["document"]), float(score) if score is not None else math.nan)
    return Hit(_parse_doc(item), math.nan)


def _parse_doc(doc: Any) -> Document:
    if not isinstance(doc, dict):
        raise TypeError(f"a document should be an object, got {type(doc).__name__}")
    if "contents" in doc:
        return Document(str(doc.get("id", "")), str(doc["contents"]))
    if "text" in doc:
        return Document.from_title_text(str(doc.get("id", "")), str(doc.get("title", "")), str(doc["text"]))
    raise KeyError("a document needs 'contents' (or 'title' and 'text')")
