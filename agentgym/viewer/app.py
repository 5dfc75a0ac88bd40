"""The viewer's HTTP side: a JSON API over the sources of one path, and the page (static files shipped with the
package: no CDN, nothing fetched from elsewhere).

API (GET; every ``source`` is an id from ``/api/sources``, never a path):

- ``/api/sources``: the sources, each with its index's progress (lines found, bytes scanned, done);
- ``/api/page?source=&cursor=&n=&env=&task=&agent=&group=&success=&iteration=&text=``: a page of episode
  summaries from byte ``cursor`` (``index.read_page``), with the cursor of the next page and the line number of each
  item where the index has reached it;
- ``/api/line?source=&line=``: the cursor of line ``line`` (409 while the index has not reached it);
- ``/api/record?source=&offset=&full=``: one record (strings over 100,000 characters cut unless ``full=1``);
- ``/api/siblings?source=&offset=``: the records of the same group (and iteration) near that record: GRPO's
  siblings, branch forks of one snapshot;
- ``/api/metrics?source=``: a ``metrics.jsonl`` as columns over iterations;
- ``/api/match?source=&task=&seed=``: the first record of another source on the same task (and seed), to compare
  two runs on the same tasks (within its first 64 MB).

Every answer carries a Content-Security-Policy that lets the page load and fetch only from its own origin and run
only its own script (``script-src 'self'``: no inline script, no ``eval``), so nothing a record holds can run or
reach beyond the server. On loopback no token is needed; beyond it every request needs the bearer token (an
``Authorization`` header, or the ``agentgym_token`` cookie the page gets by opening ``/?token=...`` once).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.contract.parsing import loads_untrusted
from agentgym.tools.serving import bearer_checker
from agentgym.viewer.index import Filter, Summary, dumps, read_page, read_record
from agentgym.viewer.play_api import MAX_BODY_BYTES, PlayRequestError, PlayRoom, same_origin
from agentgym.viewer.sources import Source, discover

STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")  # fmt: skip
SECURITY_HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "cache-control": "no-store"}  # fmt: skip
COOKIE = "agentgym_token"
#: Most records one page, one sibling set or one metrics file answers.
MAX_PAGE, MAX_SIBLINGS, MAX_METRICS_ROWS = 500, 256, 100_000
SIBLING_WINDOW_BYTES = 8 << 20
#: How much of the other file one comparison lookup reads at most (a bench report's files are far smaller).
MATCH_BUDGET_BYTES = 64 << 20
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}  # fmt: skip


class ViewerError(Exception):
    """A client error: its HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(eq=False)
class Viewer:
    """The sources of one path (see :mod:`agentgym.viewer.sources`) and what the API answers about them."""

    sources: Sequence[Source]

    @classmethod
    def of(cls, path: str | os.PathLike[str] | None) -> Viewer:
        """The viewer over ``path``'s sources (None: none, a page that only plays)."""
        viewer = cls(discover(path) if path is not None else [])
        for s in viewer.sources:
            s.index.start()
        return viewer

    def source(self, sid: str | None) -> Source:
        for s in self.sources:
            if s.id == sid:
                return s
        raise ViewerError(404, f"no source {sid!r}: ask /api/sources for the ids")

    def listing(self) -> dict[str, Any]:
        for s in self.sources:
            s.index.start()  # a growing file (a run still writing) is scanned on
        return {"sources": [s.to_dict() for s in self.sources]}

    def page(self, sid: str, cursor: int, n: int, filt: Filter) -> dict[str, Any]:
        s = self.source(sid)
        if not 1 <= n <= MAX_PAGE:
            raise ViewerError(400, f"n must be in 1..{MAX_PAGE}, got {n}")
        page = read_page(s.path, cursor, n, filt)
        items = [{**i.to_dict(), "line": s.index.line_of(i.offset)} for i in page.items]
        return {"items": items, "next": page.next, "eof": page.eof, "index": s.index.status()}

    def line(self, sid: str, line: int) -> dict[str, Any]:
        s = self.source(sid)
        offset = s.index.offset(line)
        if offset is None:
            status = s.index.status()
            if line < 0 or status["done"]:
                raise ViewerError(404, f"line {line} is not in {s.label} ({status['lines']} lines)")
            raise ViewerError(409, f"line {line} is not indexed yet ({status['lines']} lines found so far)")
        return {"line": line, "cursor": offset}

    def record(self, sid: str, offset: int, full: bool) -> dict[str, Any]:
        s = self.source(sid)
        try:
            out = read_record(s.path, offset, None if full else 100_000)
        except ValueError as e:
            raise ViewerError(404, str(e)) from None
        return {**out, "line": s.index.line_of(offset), "source": s.id}

    def siblings(self, sid: str, offset: int) -> dict[str, Any]:
        """The records of the same group (and iteration) within a window around ``offset``, in file order."""
        s = self.source(sid)
        me = self.page(sid, offset, 1, Filter())["items"]
        if not me or me[0]["offset"] != offset:
            raise ViewerError(404, f"no record starts at byte {offset}")
        group, iteration = me[0]["group"], me[0]["iteration"]
        if group is None:
            return {"group": None, "items": me}
        start = max(0, offset - SIBLING_WINDOW_BYTES)
        found: list[Summary] = []
        cursor: int | None = start
        while cursor is not None and cursor <= offset + SIBLING_WINDOW_BYTES and len(found) < MAX_SIBLINGS:
            page = read_page(s.path, cursor, MAX_SIBLINGS - len(found), Filter(group=group, iteration=iteration),
                             budget_bytes=2 * SIBLING_WINDOW_BYTES)  # fmt: skip
            found += [i for i in page.items if abs(i.offset - offset) <= SIBLING_WINDOW_BYTES]
            cursor = page.next if page.items else None
        return {"group": group, "iteration": iteration, "items": [i.to_dict() for i in found]}

    def metrics(self, sid: str) -> dict[str, Any]:
        s = self.source(sid)
        if s.kind != "metrics":
            raise ViewerError(400, f"{s.label} is not a metrics file")
        rows: list[dict[str, Any]] = []
        cursor: int | None = 0
        while cursor is not None and len(rows) < MAX_METRICS_ROWS:
            page = read_page(s.path, cursor, 1000, Filter())
            for item in page.items:
                rows.append(read_record(s.path, item.offset, 1000)["record"])
            cursor = page.next
        columns = sorted({k for r in rows for k, v in r.items() if isinstance(v, int | float) and
                          not isinstance(v, bool)})  # fmt: skip
        series = {c: [r.get(c) if isinstance(r.get(c), int | float) else None for r in rows] for c in columns}
        return {"source": s.id, "run": s.run, "columns": columns, "series": series, "rows": len(rows)}

    def match(self, sid: str, task: str, seed: int | None) -> dict[str, Any]:
        """The first record of ``sid`` on task ``task`` (and ``seed``) within the first :data:`MATCH_BUDGET_BYTES` of
        the file (``complete``: whether that covered the file, so None means it is not there)."""
        s = self.source(sid)
        cursor: int | None = 0
        while cursor is not None and cursor < MATCH_BUDGET_BYTES:
            page = read_page(s.path, cursor, 50, Filter(task=task), budget_bytes=MATCH_BUDGET_BYTES - cursor)
            for item in page.items:
                if item.task == task and (seed is None or item.seed == seed):
                    return {"item": item.to_dict(), "complete": True}
            cursor = page.next
        return {"item": None, "complete": cursor is None}


def _int(params: dict[str, str], name: str, default: int | None = None, low: int = 0) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ViewerError(400, f"{name} must be an integer, got {raw[:40]!r}") from None
    if value < low:
        raise ViewerError(400, f"{name} must be >= {low}, got {value}")
    return value


def _filter(params: dict[str, str]) -> Filter:
    success = params.get("success") or None
    if success not in (None, "true", "false"):
        raise ViewerError(400, f"success must be true or false, got {success[:40]!r}")

    def text(name: str) -> str | None:
        value = params.get(name) or None
        if value is not None and len(value) > 1000:
            raise ViewerError(400, f"{name} is longer than 1000 characters")
        return value

    return Filter(env=text("env"), task=text("task"), agent=text("agent"), group=text("group"),
                  success=None if success is None else success == "true", iteration=_int(params, "iteration"),
                  text=text("text"))  # fmt: skip


def routes(viewer: Viewer) -> dict[str, Callable[[dict[str, str]], dict[str, Any]]]:
    """Path -> handler of the query parameters."""
    return {
        "/api/sources": lambda p: viewer.listing(),
        "/api/page": lambda p: viewer.page(p.get("source", ""), _int(p, "cursor", 0) or 0,
                                           _int(p, "n", 50, low=1) or 50, _filter(p)),
        "/api/line": lambda p: viewer.line(p.get("source", ""), _int(p, "line", 0) or 0),
        "/api/record": lambda p: viewer.record(p.get("source", ""), _int(p, "offset", 0) or 0, p.get("full") == "1"),
        "/api/siblings": lambda p: viewer.siblings(p.get("source", ""), _int(p, "offset", 0) or 0),
        "/api/metrics": lambda p: viewer.metrics(p.get("source", "")),
        "/api/match": lambda p: viewer.match(p.get("source", ""), p.get("task", ""), _int(p, "seed")),
    }  # fmt: skip


def create_app(path: str | os.PathLike[str] | None, *, token: str | None = None, viewer: Viewer | None = None,
               play: PlayRoom | None = None) -> Any:  # fmt: skip
    """The viewer's ASGI app over ``path`` (a plain ASGI callable: no framework needed). ``token``: required on
    every request (header or cookie) when set. ``play``: the sessions of playing by hand (``/api/play/...``,
    :mod:`agentgym.viewer.play_api`); None: the page cannot play."""
    from urllib.parse import parse_qsl

    viewer = viewer or Viewer.of(path)
    handlers = routes(viewer)
    if play is not None:
        handlers["/api/play/envs"] = lambda p: play.listing()
    posts = play.handlers() if play is not None else {}
    ok = bearer_checker(token)

    async def app(scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                pass
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        route, root = scope.get("path", "/"), scope.get("root_path", "")
        if root and route.startswith(root):  # mounted under a prefix (agentgym serve --web: /web)
            route = route[len(root) :] or "/"
        extra: list[tuple[bytes, bytes]] = []
        if token is not None:
            cookie = dict(p.strip().partition("=")[::2] for p in headers.get("cookie", "").split(";") if "=" in p)
            given = headers.get("authorization") or (f"Bearer {cookie[COOKIE]}" if COOKIE in cookie else None)
            if route == "/" and "token" in params and ok(f"Bearer {params['token']}"):
                cookie_value = f"{COOKIE}={params['token']}; HttpOnly; SameSite=Strict; Path=/"
                home = (root + "/").encode("latin-1")
                await _respond(
                    send, 303, b"", "text/plain", [(b"location", home), (b"set-cookie", cookie_value.encode())]
                )
                return
            if not ok(given):
                await _respond(
                    send,
                    401,
                    dumps(
                        {
                            "error": "missing or wrong bearer token: open /?token=<token> once, "
                            "or send 'Authorization: Bearer <token>'"
                        }
                    ).encode(),
                    "application/json",
                )
                return
        if scope.get("method") == "POST" and route in posts:
            try:
                request = await _json_body(scope, receive, headers)
                answer, status = dumps(await asyncio.to_thread(posts[route], request)).encode(), 200
            except (PlayRequestError, ViewerError) as e:
                answer, status = dumps({"error": str(e)}).encode(), e.status
            await _respond(send, status, answer, "application/json", extra)
            return
        if scope.get("method") not in ("GET", "HEAD"):
            message = "the viewer only reads: use GET" if not posts else "use GET (POST only to /api/play/...)"
            await _respond(send, 405, dumps({"error": message}).encode(), "application/json")
            return
        if route in handlers:
            try:  # file reads in a worker thread: one slow page never stalls the other requests
                body, status = dumps(await asyncio.to_thread(handlers[route], params)).encode(), 200
            except ViewerError as e:
                body, status = dumps({"error": str(e)}).encode(), e.status
            except OSError as e:  # a file removed or unreadable since the listing
                body, status = dumps({"error": f"cannot read the file: {e.strerror or e}"}).encode(), 410
            await _respond(send, status, body, "application/json", extra)
            return
        name = "index.html" if route == "/" else route.lstrip("/")
        target = (STATIC / name).resolve()
        if target.parent != STATIC.resolve() or not target.is_file() or target.suffix not in STATIC_TYPES:
            await _respond(send, 404, dumps({"error": f"no page {route[:100]!r}"}).encode(), "application/json")
            return
        await _respond(send, 200, target.read_bytes(), STATIC_TYPES[target.suffix], extra)

    return app


async def _json_body(scope: dict[str, Any], receive: Callable, headers: Mapping[str, str]) -> dict[str, Any]:
    """A POST's JSON object, refused (4xx) when it is not JSON, comes from another site, or is over the cap."""
    if not headers.get("content-type", "").startswith("application/json"):
        raise ViewerError(415, "send the body as JSON (content-type: application/json)")
    if not same_origin(headers):
        raise ViewerError(403, "a request from another site: play only from the page this server sent")
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ViewerError(413, f"a body over {MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ViewerError(413, f"a body over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    try:
        body = loads_untrusted(b"".join(chunks).decode("utf-8", "replace"), "the body")
    except ValueError as e:
        raise ViewerError(400, str(e)) from None
    if not isinstance(body, dict):
        raise ViewerError(400, f"the body must be a JSON object, got a JSON {type(body).__name__}")
    return body


async def _respond(send: Callable, status: int, body: bytes, content_type: str,
                   extra: Sequence[tuple[bytes, bytes]] = ()) -> None:  # fmt: skip
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
               *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()), *extra]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_viewer(path: str | os.PathLike[str] | None, *, host: str = "127.0.0.1", port: int = 8765,
                 token: str | None = None, announce: Callable[[str], None] = print,
                 play: PlayRoom | None = None) -> None:  # fmt: skip
    """Serve the viewer over ``path`` until interrupted; ``announce`` gets the URL once the port is bound (port 0:
    any free one). Beyond loopback only with a ``token`` (ValueError, one line, before anything is read).
    ``play``: the page's play sessions (None: no playing)."""
    from agentgym.tools.serving import BackgroundServer, check_bind

    check_bind(host, token)
    app = create_app(path, token=token, play=play)
    server = BackgroundServer(app, host=host, port=port, access_log=False).start()
    shown = f"[{host}]" if ":" in host else host
    announce(f"http://{shown}:{server.port}/" + ("?token=<your token>" if token else ""))
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if play is not None:
            play.close()
