"""The env server: agentgym envs played over HTTP, one session per env (``agentgym serve``; the client is
:class:`agentgym.serving.remote.RemoteEnv`).

A session is one env built on the server with ``gymnasium.make(env_id, **env_kwargs)`` (so with the wrappers
``make`` adds); the client resets it, steps it, snapshots and restores it, and closes it. Bodies are JSON:

=============================================  ===================================================================
``GET    /health``                             ``{"status", "server", "sessions", "limits", "env_ids"}``
``POST   /sessions``                           ``{"env_id", "env_kwargs"}`` -> 201 ``{"session_id", "server", "env"}``
``POST   /sessions/{id}/reset``                ``{"seed", "options"}`` -> ``{"observation", "info", "status"}``
``POST   /sessions/{id}/step``                 ``{"action"}`` -> ``{"observation", "reward", "terminated",
                                               "truncated", "info"}``
``POST   /sessions/{id}/snapshot``             -> ``{"snapshot_id"}``: the snapshot stays on the server
``POST   /sessions/{id}/restore``              ``{"snapshot_id"}`` (taken in any session of the same env) ->
                                               ``{"status"}``
``GET    /sessions/{id}``                      ``{"status"}``: env id, turn, task, whether the episode is over
``GET    /sessions/{id}/transcript``           ``{"transcript"}``: the whole conversation so far
``DELETE /sessions/{id}``                      ends the session (and drops its snapshots)
=============================================  ===================================================================

Every answer carries the header ``X-Agentgym-Server``: an id drawn when the app is built, so a client can tell a
restarted server (which has lost every session) from a closed session. Env calls run in worker threads, one at a
time per session (a slow env never blocks the others). Snapshots are pickles and never cross the wire: the
server keeps them (at most ``max_snapshots`` per session, oldest dropped, and within a byte budget per client and in
all) until the session that took them ends. Each client (:class:`ClientKey`: its peer address by default) has a
share of the sessions, workers, snapshot bytes and connections.

Errors are 4xx answers ``{"detail": message, "error": code}`` (plus ``"exception"``, the Python exception the env
raised, which the client raises again): 400 ``bad_json`` (a body that is not a JSON object), 401 ``unauthorized``
(missing or wrong bearer token, compared in constant time), 404 ``unknown_session`` / ``unknown_env`` /
``unknown_snapshot``, 409 ``env_state`` (the env refused the call in its state, e.g. ``step`` after the episode
ended), 410 ``session_expired`` (evicted after ``idle_timeout`` seconds unused), 413 ``too_large`` (a body over
``max_body_bytes``, refused from its ``Content-Length`` or as soon as a streamed body passes it), 422
``invalid_request`` (fields missing or mistyped), ``invalid_argument`` (the env raised ``ValueError`` /
``TypeError``) or ``snapshot_unsupported``, 429 ``too_many_sessions`` (``max_sessions`` open, or the client's share),
``too_busy`` (the client's workers) or ``snapshot_budget`` (the client's snapshot bytes; 413 ``snapshot_too_large``
for one snapshot over it). An env that cannot run here answers 503 ``env_unavailable``; 503 ``busy`` means no
worker (or connection) came free in time; any other exception from the env is a 500 ``env_error``.

:func:`serve` binds to loopback by default and refuses any other address without a bearer token
(:func:`agentgym.tools.serving.check_bind`); connections are bounded as in :func:`env_uvicorn_config`.

>>> from fastapi.testclient import TestClient
>>> import agentgym
>>> http = TestClient(create_app(env_ids=["agentgym/Household-v0"]))
>>> sid = http.post("/sessions", json={"env_id": "agentgym/Household-v0"}).json()["session_id"]
>>> http.post(f"/sessions/{sid}/reset", json={"seed": 0}).json()["info"]["turn"]
0
>>> http.post(f"/sessions/{sid}/step", json={"action": "look"}).json()["info"]["turn"]
1
>>> http.post("/sessions/nope/step", content=b"{").json()["error"]
'bad_json'
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import json
import logging
import math
import pickle
import secrets
import socket
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool

from agentgym.contract.branching import restore, snapshot
from agentgym.contract.env import AgentEnv, EnvUnavailableError, Snapshot, SnapshotError
from agentgym.contract.trust import UntrustedArgumentError, checked_kwargs, split_allowed_args, split_operator_args
from agentgym.tools.serving import (
    TOKEN_ENV,
    ConnectionLimits,
    bearer_checker,
    check_bind,
    fair_share_fits,
    peer_key,
    run_uvicorn,
    uvicorn_config,
)

_log = logging.getLogger(__name__)

__all__ = [
    "SERVER_HEADER",
    "TOKEN_ENV",
    "ApiError",
    "ClientKey",
    "RequestGuard",
    "ServerProcess",
    "create_app",
    "env_uvicorn_config",
    "serve",
]

#: The response header that names the server instance (a new id each time an app is built).
SERVER_HEADER = "x-agentgym-server"


class ApiError(Exception):
    """A request the server refuses: becomes ``{"detail": message, "error": code}`` with HTTP ``status``."""

    def __init__(self, status: int, code: str, message: str, *, exception: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.exception = status, code, message, exception

    def body(self) -> dict[str, Any]:
        out = {"detail": self.message, "error": self.code}
        if self.exception is not None:
            out["exception"] = self.exception
        return out


# -- request bodies ----------------------------------------------------------------------------------


class CreateSessionRequest(BaseModel):
    """``POST /sessions``: the env to build, as ``gymnasium.make(env_id, **env_kwargs)``."""

    model_config = ConfigDict(extra="forbid")
    env_id: StrictStr
    env_kwargs: dict[str, Any] = {}


class ResetRequest(BaseModel):
    """``POST /sessions/{id}/reset``: ``env.reset(seed=seed, options=options)`` (the env checks ``options``)."""

    model_config = ConfigDict(extra="forbid")
    seed: Annotated[StrictInt, Field(ge=0, lt=1 << 64)] | None = None
    options: Any = None


class StepRequest(BaseModel):
    """``POST /sessions/{id}/step``: ``env.step(action)``.

    ``action`` is what the agent produced: text, an assistant-message dict, or any JSON value (non-text actions are
    invalid actions, answered as the env answers them). ``action_type`` stands for an action with no JSON form:
    the env steps an object of a class of that name, so its invalid-action message names the client's type.
    """

    model_config = ConfigDict(extra="forbid")
    action: Any = None
    action_type: StrictStr | None = None


class RestoreRequest(BaseModel):
    """``POST /sessions/{id}/restore``: a snapshot id from ``POST /sessions/{any}/snapshot``."""

    model_config = ConfigDict(extra="forbid")
    snapshot_id: StrictStr


# -- JSON --------------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def dumps(payload: Any) -> bytes:
    """``payload`` as compact JSON bytes; ASCII-escaped, so lone surrogates survive the trip (numpy values become
    plain numbers; NaN stays ``NaN``, which Python's ``json`` reads back)."""
    return json.dumps(payload, default=_json_default, separators=(",", ":")).encode()


def _json_response(payload: Any, status: int = 200) -> Response:
    try:
        body = dumps(payload)
    except (TypeError, ValueError) as e:
        raise ApiError(500, "env_error", f"the env returned a value with no JSON form: {e}") from None
    return Response(body, status_code=status, media_type="application/json")


def _parse(model: type[BaseModel], body: bytes) -> Any:
    """The request body as ``model``: 400 for a body that is not a JSON object, 422 for wrong fields."""
    if not body.strip():
        payload: Any = {}
    else:
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ApiError(400, "bad_json", f"request body is not valid JSON: {e}") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "bad_json", f"request body must be a JSON object, got {type(payload).__name__}")
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        parts = [f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors(include_url=False)]
        raise ApiError(422, "invalid_request", "invalid request: " + "; ".join(parts[:10])) from None


# -- who a client is -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientKey:
    """Whom a request counts against for the per-client shares (sessions, workers, snapshot bytes, WebSockets).

    ``peer`` (the default): the peer address, an IPv6 one by its /64 (:func:`agentgym.tools.serving.peer_key`).
    ``token``: the bearer token the request carries (the server checks it against its ``tokens``, one per client;
    without them a client could pick any key). ``header:NAME``: a trusted proxy's header (the last comma-separated
    entry, e.g. of ``X-Forwarded-For``), honoured only because the operator named it: only when every request comes
    through that proxy; a request without it counts against its peer address.

    >>> ClientKey.parse("header:X-Real-IP")({"headers": [(b"x-real-ip", b"10.0.0.7")], "client": ("127.0.0.1", 9)})
    'header:10.0.0.7'
    """

    kind: str = "peer"
    header: str = ""

    @classmethod
    def parse(cls, spec: str) -> ClientKey:
        """``peer``, ``token`` or ``header:NAME`` (ValueError, one line, otherwise)."""
        kind, sep, name = spec.strip().partition(":")
        kind = kind.lower()
        if kind in ("peer", "token") and not sep:
            return cls(kind)
        if kind == "header" and name.strip() and all(c.isalnum() or c in "-_" for c in name.strip()):
            return cls("header", name.strip().lower())
        raise ValueError(f"client key {spec!r}: expected peer, token or header:NAME (a header name)")

    def __call__(self, scope: Mapping[str, Any]) -> str:
        if self.kind == "token":
            given = _header(scope, b"authorization")
            if given:
                return "token:" + hashlib.sha256(given.partition(" ")[2].strip().encode("latin-1", "replace"))\
                    .hexdigest()[:12]  # fmt: skip
        elif self.kind == "header":
            given = _header(scope, self.header.encode("latin-1"))
            entry = (given or "").rpartition(",")[2].strip()[:100]
            if entry:
                return "header:" + peer_key(entry)
        client = scope.get("client")
        return peer_key(client[0]) if client else "unknown"


# -- the ASGI guard: bearer token, body size, WebSockets per client ----------------------------------------------


def _tokens_checker(token: str | None, tokens: Sequence[str]) -> Callable[[str | None], bool]:
    """``ok(authorization_header)``: the header carries ``token`` or one of ``tokens`` (constant time each)."""
    checks = [bearer_checker(t) for t in ([token] if token is not None else []) + list(tokens)]
    if not checks:
        return lambda header: True
    return lambda header: any([check(header) for check in checks])  # every one compared: no early exit


#: Where ``agentgym serve --web`` serves the viewer's page.
WEB_PREFIX = "/web"


def _web_credentials(scope: Mapping[str, Any], prefix: str) -> list[str]:
    """What a browser on the page under ``prefix`` can carry instead of an ``Authorization`` header: the viewer's
    token cookie, and on the page itself the ``?token=`` it is opened with once (the page then sets the cookie)."""
    from urllib.parse import parse_qsl

    path = scope.get("path", "")
    if not (path == prefix or path.startswith(prefix + "/")):
        return []
    out = []
    for part in (_header(scope, b"cookie") or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == "agentgym_token":
            out.append(f"Bearer {value}")
    if path in (prefix, prefix + "/"):
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:
            out.append(f"Bearer {query['token']}")
    return out


class RequestGuard:
    """ASGI middleware: a bearer token on every HTTP request and WebSocket handshake, a cap on body size, and on
    the WebSocket sessions each client holds.

    A missing or wrong token gets 401 (a WebSocket handshake is refused, which clients see as 403); a body over
    ``max_body_bytes`` gets 413, refused from its ``Content-Length`` or as soon as a streamed body passes the
    limit (the body is read here, then handed to the app). A client (``client_key``) holding
    ``max_websockets_per_client`` WebSockets has its next handshake refused (close code 1013, "try again later").
    ``server_id`` is sent in ``X-Agentgym-Server``. ``tokens``: more accepted tokens (one per client).
    """

    def __init__(self, app: Any, *, token: str | None = None, max_body_bytes: int = 1 << 20, server_id: str = "",
                 tokens: Sequence[str] = (), client_key: ClientKey | None = None,
                 max_websockets_per_client: int | None = None, web_prefix: str | None = None) -> None:  # fmt: skip
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
        self.app = app
        self.authorized = _tokens_checker(token, tokens)
        self.max_body_bytes = max_body_bytes
        self.extra_headers = [(SERVER_HEADER.encode(), server_id.encode())] if server_id else []
        self.client_key = client_key or ClientKey()
        self.max_websockets_per_client = max_websockets_per_client
        self.websockets: dict[str, int] = {}  # client -> its open WebSockets
        self.web_prefix = web_prefix  # the page's paths also accept its cookie (see _web_credentials)

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "websocket":
            if not self.authorized(_header(scope, b"authorization")):
                await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
                return
            client = self.client_key(scope)
            held = self.websockets.get(client, 0)
            if self.max_websockets_per_client is not None and held >= self.max_websockets_per_client:
                await send({"type": "websocket.close", "code": 1013, "reason": f"this client ({client}) holds its "
                            f"maximum of {self.max_websockets_per_client} WebSocket sessions"})  # fmt: skip
                return
            self.websockets[client] = held + 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.websockets[client] -= 1
                if not self.websockets[client]:
                    del self.websockets[client]
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._stamped(send)
        web = _web_credentials(scope, self.web_prefix) if self.web_prefix else []
        if not self.authorized(_header(scope, b"authorization")) and not any([self.authorized(c) for c in web]):
            error = ApiError(401, "unauthorized", "missing or wrong bearer token: send 'Authorization: Bearer <token>'")
            await _send_error(send, error, [(b"www-authenticate", b"Bearer")])
            return
        announced = _header(scope, b"content-length")
        if announced is not None and announced.isdigit() and int(announced) > self.max_body_bytes:
            error = ApiError(413, "too_large", f"request body too large: {announced} > {self.max_body_bytes} bytes")
            await _send_error(send, error, [(b"connection", b"close")])
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nobody reads an answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                error = ApiError(413, "too_large", f"request body too large: over {self.max_body_bytes} bytes")
                await _send_error(send, error, [(b"connection", b"close")])
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _stamped(self, send: Callable) -> Callable:
        if not self.extra_headers:
            return send

        async def stamped(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.extra_headers]}
            await send(message)

        return stamped


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


async def _send_error(send: Callable, error: ApiError, headers: list[tuple[bytes, bytes]]) -> None:
    body = dumps(error.body())
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": error.status, "headers": head})
    await send({"type": "http.response.body", "body": body})


# -- sessions ----------------------------------------------------------------------------------------


@dataclass(eq=False)
class Session:
    """One env on the server; its calls run one at a time (``lock``). ``done`` and ``task_id`` follow the episode
    (from reset and step answers, and from the snapshot a restore puts back)."""

    id: str
    env_id: str
    env: gym.Env
    last_used: float
    #: Who opened it (its :class:`ClientKey`): its calls count against that client's share of the workers.
    client: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: int = 0
    snapshots: list[str] = field(default_factory=list)
    done: bool = True
    task_id: str | None = None
    #: Seconds an env call of this session takes (a moving average; infinite until the first call).
    cost: float = math.inf

    def status(self) -> dict[str, Any]:
        base = _agent_env(self.env)
        return {"env_id": self.env_id, "turn": base.turn, "done": self.done, "task_index": base.task_index,
                "task_id": self.task_id}  # fmt: skip


@dataclass
class SessionTable:
    """The sessions and snapshots of one app, with its limits; touched only from the event loop.

    Each client may hold ``per_client`` sessions (sessions being opened included), the last ``reserve`` only when
    it holds none (:func:`~agentgym.tools.serving.fair_share_fits`). Snapshots are kept pickled, so their size is
    known: ``snapshot_bytes`` in all, ``snapshot_bytes_per_client`` per client.
    """

    max_sessions: int
    idle_timeout: float
    max_snapshots: int
    per_client: int
    reserve: int = 0
    snapshot_bytes: int = 2 << 30
    snapshot_bytes_per_client: int = 512 << 20
    sessions: dict[str, Session] = field(default_factory=dict)
    #: snapshot id -> (the session that took it, the pickled snapshot)
    snapshots: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    #: Ids of sessions evicted for idleness (the most recent 10,000), so their clients learn why (410, not 404).
    evicted: OrderedDict[str, float] = field(default_factory=OrderedDict)
    #: Ids of sessions closed because an env call ran past the call deadline (the most recent 10,000): why.
    broken: OrderedDict[str, str] = field(default_factory=OrderedDict)
    #: client -> its sessions being opened, and its sessions (both counted against its share)
    pending: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    #: client -> the bytes of its snapshots; and of all
    snapshot_held: dict[str, int] = field(default_factory=dict)
    snapshot_total: int = 0
    last_sweep: float = 0.0

    def open_slots(self) -> int:
        return self.max_sessions - len(self.sessions) - sum(self.pending.values())

    def client_sessions(self, client: str) -> int:
        return self.held.get(client, 0) + self.pending.get(client, 0)

    def check_room(self, client: str) -> None:
        """429 ``too_many_sessions`` unless ``client`` may open one more session."""
        mine, total = self.client_sessions(client), self.max_sessions - self.open_slots()
        if fair_share_fits(mine, total, self.max_sessions, self.per_client, self.reserve):
            return
        if total >= self.max_sessions:
            why = f"the server holds its maximum of {self.max_sessions} sessions: close some (DELETE /sessions/{{id}})"
            raise ApiError(429, "too_many_sessions", why + " or wait for idle ones to expire")
        if mine >= self.per_client:
            raise ApiError(429, "too_many_sessions", f"this client ({client}) holds its maximum of {self.per_client} "
                           "sessions: close some (DELETE /sessions/{id})")  # fmt: skip
        raise ApiError(429, "too_many_sessions", f"the server keeps its last {self.reserve} of {self.max_sessions} "
                       f"sessions for clients holding none, and this client ({client}) holds {mine}: close some "
                       "(DELETE /sessions/{id}) or retry later")  # fmt: skip

    def opening(self, client: str, delta: int) -> None:
        self.pending[client] = self.pending.get(client, 0) + delta
        if not self.pending[client]:
            del self.pending[client]

    def add(self, s: Session) -> None:
        self.sessions[s.id] = s
        self.held[s.client] = self.held.get(s.client, 0) + 1

    def sweep(self, now: float) -> list[gym.Env]:
        """Evict sessions idle for over ``idle_timeout`` seconds; returns their envs, to close off the loop."""
        if now - self.last_sweep < min(self.idle_timeout / 4, 5.0):
            return []
        self.last_sweep = now
        stale = [s for s in self.sessions.values() if not s.busy and now - s.last_used > self.idle_timeout]
        for s in stale:
            self.evicted[s.id] = s.last_used
        while len(self.evicted) > 10_000:
            self.evicted.popitem(last=False)
        return [self.drop(s.id) for s in stale]

    def drop(self, session_id: str) -> gym.Env:
        s = self.sessions.pop(session_id)
        self.held[s.client] -= 1
        if not self.held[s.client]:
            del self.held[s.client]
        for snap_id in s.snapshots:
            self._forget_snapshot(s.client, snap_id)
        s.snapshots.clear()
        return s.env

    def get(self, session_id: str, now: float) -> Session:
        s = self.sessions.get(session_id)
        if s is not None and not s.busy and now - s.last_used > self.idle_timeout:
            self.evicted[session_id] = s.last_used
            s = None  # expired: the caller's sweep closes it
        if s is None:
            if session_id in self.broken:
                raise ApiError(410, "session_broken", self.broken[session_id])
            if session_id in self.evicted:
                raise ApiError(410, "session_expired", f"session {session_id} was closed after more than "
                               f"{self.idle_timeout:g} s unused (the server's idle timeout)")  # fmt: skip
            raise ApiError(404, "unknown_session", f"unknown session {session_id!r} (closed, or never opened "
                           "on this server: a restarted server has lost its sessions)")  # fmt: skip
        return s

    def break_session(self, s: Session, why: str) -> None:
        """Close ``s`` for good (its env is closed once its stuck call returns); its client gets 410 and ``why``."""
        if self.sessions.get(s.id) is s:
            self.drop(s.id)
        self.broken[s.id] = why
        while len(self.broken) > 10_000:
            self.broken.popitem(last=False)

    def add_snapshot(self, s: Session, pickled: bytes) -> str:
        """Keep ``pickled`` (a snapshot of ``s``) within the byte budgets: 413 ``snapshot_too_large`` for one
        larger than a client's whole budget, 429 ``snapshot_budget`` when keeping it would pass a budget (the
        session's oldest snapshot, dropped beyond ``max_snapshots``, counts as freed)."""
        size = len(pickled)
        if size > min(self.snapshot_bytes_per_client, self.snapshot_bytes):
            raise ApiError(413, "snapshot_too_large", f"this snapshot is {size:,} bytes pickled, over the server's "
                           f"snapshot budget of {min(self.snapshot_bytes_per_client, self.snapshot_bytes):,} "
                           "bytes per client")  # fmt: skip
        freed = len(self.snapshots[s.snapshots[0]][1]) if len(s.snapshots) >= self.max_snapshots else 0
        mine = self.snapshot_held.get(s.client, 0) + size - freed
        if mine > self.snapshot_bytes_per_client:
            raise ApiError(429, "snapshot_budget", f"this client's ({s.client}) snapshots would hold {mine:,} "
                           f"bytes, over its budget of {self.snapshot_bytes_per_client:,}: close sessions to drop "
                           "their snapshots")  # fmt: skip
        if self.snapshot_total + size - freed > self.snapshot_bytes:
            raise ApiError(429, "snapshot_budget", f"the server's snapshots would hold over its budget of "
                           f"{self.snapshot_bytes:,} bytes: close sessions or retry later")  # fmt: skip
        if freed:
            self._forget_snapshot(s.client, s.snapshots.pop(0))
        snap_id = secrets.token_urlsafe(12)
        self.snapshots[snap_id] = (s.id, pickled)
        s.snapshots.append(snap_id)
        self.snapshot_held[s.client] = self.snapshot_held.get(s.client, 0) + size
        self.snapshot_total += size
        return snap_id

    def _forget_snapshot(self, client: str, snap_id: str) -> None:
        found = self.snapshots.pop(snap_id, None)
        if found is None:
            return
        self.snapshot_total -= len(found[1])
        self.snapshot_held[client] -= len(found[1])
        if not self.snapshot_held[client]:
            del self.snapshot_held[client]


# -- env calls (in worker threads) ---------------------------------------------------------------------


class Workers:
    """The threads env calls run in, shared fairly between clients.

    ``size`` threads at most; each call has ``call_timeout`` seconds (waiting for a thread included). A call past
    its deadline is answered 504 and its session closed, but a Python thread cannot be killed: the call goes on
    holding its thread ("stuck") until it returns. So each client may hold at most ``per_client`` threads, stuck
    calls included, and the last ``reserve`` threads go only to clients holding none
    (:func:`~agentgym.tools.serving.fair_share_fits`): a few clients together cannot take every thread. A call that
    does not fit waits; a freed thread goes to the waiting call whose client holds fewest. A client whose stuck
    calls fill its share gets 429 at once; a call still waiting at its deadline gets 429 (its client's share was
    full) or 503 (the server's was). ``/health`` reports the busy, free and stuck threads.
    """

    def __init__(self, size: int, call_timeout: float, per_client: int, reserve: int = 0) -> None:
        if size < 1 or per_client < 1 or not call_timeout > 0 or not 0 <= reserve < size:
            raise ValueError(f"workers and max_calls_per_client must be >= 1, call_timeout > 0 and 0 <= reserve < "
                             f"workers, got {size}, {per_client}, {call_timeout}, {reserve}")  # fmt: skip
        self.size, self.call_timeout, self.per_client, self.reserve = size, float(call_timeout), per_client, reserve
        self.executor = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix="agentgym-env")
        self.held: dict[str, int] = {}  # client -> its calls holding a thread (stuck ones included)
        self.total = 0
        self.stuck: dict[str, int] = {}  # client -> its calls past their deadline, still running
        self.waiting: list[tuple[str, asyncio.Future[None]]] = []  # calls waiting for a thread, oldest first

    def stats(self) -> dict[str, Any]:
        return {"size": self.size, "busy": self.total, "free": self.size - self.total,
                "stuck": sum(self.stuck.values()), "waiting": len(self.waiting), "call_timeout": self.call_timeout,
                "max_calls_per_client": self.per_client, "reserve": self.reserve,
                "clients": len(self.held)}  # fmt: skip

    def _fits(self, client: str) -> bool:
        return fair_share_fits(self.held.get(client, 0), self.total, self.size, self.per_client, self.reserve)

    def _take(self, client: str) -> None:
        self.held[client] = self.held.get(client, 0) + 1
        self.total += 1

    def _give_back(self, client: str, stuck: bool) -> None:
        self.total -= 1
        self.held[client] -= 1
        if not self.held[client]:
            del self.held[client]
        if stuck:
            self.stuck[client] -= 1
            if not self.stuck[client]:
                del self.stuck[client]
        self._wake()

    def _wake(self) -> None:
        """Hand free threads to waiting calls that fit, those of the clients holding fewest first."""
        while True:
            fitting = [(self.held.get(c, 0), i) for i, (c, f) in enumerate(self.waiting) if not f.done()
                       and self._fits(c)]  # fmt: skip
            if not fitting:
                self.waiting = [w for w in self.waiting if not w[1].done()]
                return
            client, future = self.waiting.pop(min(fitting)[1])
            self._take(client)
            future.set_result(None)

    async def _acquire(self, client: str, timeout: float) -> None:
        if self._fits(client):
            self._take(client)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((client, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except (TimeoutError, asyncio.CancelledError) as e:
            if future.done() and not future.cancelled():  # granted as the wait ended: give it back
                self._give_back(client, stuck=False)
            else:
                future.cancel()
                self.waiting = [w for w in self.waiting if w[1] is not future]
            if isinstance(e, asyncio.CancelledError):
                raise
            if self.held.get(client, 0) >= self.per_client:
                raise ApiError(429, "too_busy", f"this client ({client}) kept its {self.per_client} env workers "
                               f"busy for the whole {self.call_timeout:g} s call deadline") from None  # fmt: skip
            raise ApiError(
                503,
                "busy",
                f"no env worker came free for this client within the "
                f"{self.call_timeout:g} s call deadline ({self.total} of {self.size} busy)",
            ) from None

    async def run(self, client: str, fn: Callable[..., Any], *args: Any, stuck_env: gym.Env | None = None,
                  on_stuck: Callable[[], None] | None = None) -> tuple[Any, float]:  # fmt: skip
        """``fn(*args)`` in a thread: ``(result, seconds)``; 429 when ``client`` holds its share of the threads,
        503 when every thread is stuck, 504 past the deadline (``on_stuck`` is called then, on the loop, and
        ``stuck_env`` is closed once the call returns)."""
        stuck_here = self.stuck.get(client, 0)
        if stuck_here >= self.per_client:
            raise ApiError(429, "too_busy", f"this client ({client}) has {stuck_here} env calls stuck past the "
                           f"{self.call_timeout:g} s call deadline, its whole share of the server's workers; they "
                           "free up when those calls return")  # fmt: skip
        if sum(self.stuck.values()) >= self.size:
            raise ApiError(503, "starved", f"all {self.size} env workers are stuck in calls past the "
                           f"{self.call_timeout:g} s deadline")  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.call_timeout
        await self._acquire(client, self.call_timeout)
        future = self.executor.submit(_timed, fn, *args)  # never queued: at most ``size`` calls hold threads
        waited = asyncio.wrap_future(future)
        try:
            done, _ = await asyncio.wait({waited}, timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:  # the server is stopping: the thread is freed when the call returns

            def give_back(f: asyncio.Future[Any]) -> None:
                if not f.cancelled():
                    f.exception()  # retrieved, so asyncio does not report it as never retrieved
                self._give_back(client, False)

            waited.add_done_callback(give_back)
            raise
        if done:
            self._give_back(client, stuck=False)
            return waited.result()
        if future.cancel():  # still queued: it never runs
            self._give_back(client, stuck=False)
        else:
            self.stuck[client] = self.stuck.get(client, 0) + 1

            def returned(f: asyncio.Future) -> None:
                f.cancelled() or f.exception()  # retrieved: no "exception never retrieved" warning
                self._give_back(client, stuck=True)
                if stuck_env is not None:
                    self.executor.submit(_close, [stuck_env])

            waited.add_done_callback(returned)
        if on_stuck is not None:
            on_stuck()
        raise ApiError(504, "call_timeout", f"the env call ran past the server's call deadline of "
                       f"{self.call_timeout:g} s; the session is closed")  # fmt: skip


async def _env_call(
    workers: Workers,
    client: str,
    fn: Callable[..., Any],
    *args: Any,
    session: Session | None = None,
    inline_below: float = 0.0,
    on_stuck: Callable[[], None] | None = None,
) -> Any:
    """Run an env call and map the env's exceptions to API errors the client can raise again.

    The call runs in one of ``workers``' threads (with its deadline and the client's share), or on the event loop
    when the session's recent calls took under ``inline_below`` seconds on average (a thread hand-off costs a
    fraction of a millisecond; but an inline call has no deadline, so only for envs whose calls cannot block).
    """
    inline = session is not None and session.cost < inline_below
    try:
        if inline:
            result, seconds = _timed(fn, *args)
        else:
            stuck_env = session.env if session is not None else None
            result, seconds = await workers.run(client, fn, *args, stuck_env=stuck_env, on_stuck=on_stuck)
    except ApiError:
        raise
    except UntrustedArgumentError as e:
        raise ApiError(422, "untrusted_argument", _one_line(e), exception="ValueError") from None
    except EnvUnavailableError as e:
        raise ApiError(503, "env_unavailable", _one_line(e), exception="EnvUnavailableError") from None
    except SnapshotError as e:
        raise ApiError(422, "snapshot_unsupported", _one_line(e), exception="SnapshotError") from None
    except (ValueError, TypeError) as e:
        raise ApiError(422, "invalid_argument", _one_line(e), exception=type(e).__name__) from None
    except (RuntimeError, gym.error.ResetNeeded) as e:
        kind = "ResetNeeded" if isinstance(e, gym.error.ResetNeeded) else "RuntimeError"
        raise ApiError(409, "env_state", _one_line(e), exception=kind) from None
    except Exception as e:
        _log.exception("env call failed")
        raise ApiError(500, "env_error", f"the env raised {type(e).__name__}: {_one_line(e)}") from None
    if session is not None:
        session.cost = seconds if math.isinf(session.cost) else 0.8 * session.cost + 0.2 * seconds
    return result


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _pickled_snapshot(env: gym.Env) -> bytes:
    """A snapshot of ``env``, pickled: what the server keeps (its size is what counts against the budgets)."""
    try:
        return pickle.dumps(snapshot(env), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise SnapshotError(f"the env's snapshot cannot be pickled: {e}") from None


def _restore_pickled(env: gym.Env, pickled: bytes) -> Snapshot:
    """Restore ``env`` from a snapshot this server pickled; returns the snapshot."""
    snap = pickle.loads(pickled)  # the server's own bytes, never a client's
    restore(env, snap)
    return snap


def _stand_in(type_name: str) -> Any:
    """An object of a class named ``type_name`` (an action the client could not send as JSON)."""
    name = type_name if type_name.isidentifier() and len(type_name) <= 64 else "object"
    return type(name, (), {})()


def _agent_env(env: gym.Env) -> AgentEnv:
    """The ``AgentEnv`` inside a session's env (``create_session`` refuses any other env)."""
    base = env.unwrapped
    if not isinstance(base, AgentEnv):
        raise TypeError(f"{type(base).__name__} is not an AgentEnv")
    return base


def _describe_env(env: gym.Env) -> dict[str, Any]:
    base = _agent_env(env)
    return {
        "class": f"{type(base).__module__}:{type(base).__qualname__}",
        "spec_kwargs": base.spec_kwargs(),
        "max_turns": base.max_turns,
        "max_action_chars": base.max_action_chars,
        "invalid_action_penalty": base.invalid_action_penalty,
        "num_tasks": int(base.num_tasks),
        "reset_options": list(base.reset_options),
    }


def _make(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
    try:
        return gym.make(env_id, **env_kwargs)
    except gym.error.Error as e:  # gymnasium's own errors (e.g. a bad wrapper argument) are argument errors here
        raise ValueError(f"cannot make {env_id} with {env_kwargs}: {e}") from None


def _step(env: gym.Env, action: Any) -> dict[str, Any]:
    obs, reward, terminated, truncated, info = env.step(action)
    return {"observation": obs, "reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
            "info": info}  # fmt: skip


def _close(envs: Iterable[gym.Env]) -> None:
    for env in envs:
        try:
            env.close()
        except Exception:  # a broken close must not break the server
            _log.exception("closing an env failed")


# -- the app -----------------------------------------------------------------------------------------


def create_app(
    *,
    env_ids: Iterable[str] | None = None,
    token: str | None = None,
    max_sessions: int = 1024,
    idle_timeout: float = 300.0,
    max_body_bytes: int = 1 << 20,
    max_snapshots: int = 256,
    inline_below: float = 0.0,
    env_args: Mapping[str, Any] | None = None,
    allow_env_args: Mapping[str, Sequence[Any]] | None = None,
    workers: int = 128,
    call_timeout: float = 300.0,
    max_calls_per_client: int | None = None,
    max_sessions_per_client: int | None = None,
    max_snapshot_bytes: int = 2 << 30,
    max_snapshot_bytes_per_client: int | None = None,
    client_key: str | ClientKey = "peer",
    tokens: Sequence[str] = (),
    clock: Callable[[], float] = time.monotonic,
    web: Any = None,
) -> FastAPI:
    """The FastAPI app of the env server.

    Args:
        env_ids: the env ids clients may build (default: every registered agentgym env, ``agentgym.list_envs()``).
        token: require ``Authorization: Bearer <token>`` on every request (401 otherwise).
        max_sessions: open sessions at most (429 beyond).
        idle_timeout: seconds a session may go unused before it is closed (410 afterwards); checked as requests
            arrive (no background task, so the app needs no lifespan).
        max_body_bytes: largest request body (413 beyond).
        max_snapshots: snapshots kept per session (the oldest is dropped beyond).
        inline_below: a session whose env calls take under this many seconds on average has them run on the event
            loop rather than in a worker thread (saves the thread hand-off, but such a call has no deadline: only
            for envs whose calls cannot block); 0 (the default) runs every call in a worker thread.
        env_args: the operator's constructor arguments (``--env-arg``): ``{name: value}`` for every served env that
            takes ``name``, ``{"ENV_ID:name": value}`` for one env. Clients cannot change them.
        allow_env_args: ``{"ENV_ID:name": [values]}``: values clients may pick for an argument of one env besides
            what the env declares public (``agentgym.contract.trust``), e.g. ``{"agentgym/SearchQA-v0:dataset":
            ["100k"]}``; a bare ``name`` only when exactly one served env takes it
            (``agentgym.contract.trust.split_allowed_args``).
        workers: threads env calls run in; the last eighth only for clients with no call running.
        call_timeout: seconds an env call may take (504 beyond; its session is then closed).
        max_calls_per_client: env calls one client may have running, stuck ones included (default a quarter of
            ``workers``).
        max_sessions_per_client: open sessions per client (default a quarter of ``max_sessions``); the last eighth
            of ``max_sessions`` only for clients holding none.
        max_snapshot_bytes: bytes of pickled snapshots the server keeps in all (2 GiB; 429 beyond).
        max_snapshot_bytes_per_client: ... per client (default a quarter of ``max_snapshot_bytes``; 429 beyond, and
            413 for one snapshot larger than that).
        client_key: whom a request counts against (:class:`ClientKey`): ``"peer"`` (the default), ``"token"`` (needs
            ``tokens``) or ``"header:NAME"`` (a trusted proxy's header).
        tokens: more bearer tokens the server accepts besides ``token``: one per client, for ``client_key="token"``.
        clock: the seconds idle sessions are measured in (``time.monotonic``; a test may drive its own).
        web: an ASGI app to serve at ``/web/``: the viewer's page for playing the served envs by hand (``agentgym
            serve --web`` builds it: ``agentgym.viewer.app.create_app`` with a play room); the bearer token rule holds
            there too, and a browser may carry the token in the page's cookie there (:func:`_web_credentials`).
            None: no page.
    """
    from agentgym.contract.registry import list_envs

    if max_sessions < 1 or max_snapshots < 1 or not idle_timeout > 0 or max_snapshot_bytes < 1:
        raise ValueError("max_sessions, max_snapshots and max_snapshot_bytes must be >= 1 and idle_timeout > 0")
    for name, value in [
        ("max_calls_per_client", max_calls_per_client),
        ("max_sessions_per_client", max_sessions_per_client),
        ("max_snapshot_bytes_per_client", max_snapshot_bytes_per_client),
    ]:
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    key = client_key if isinstance(client_key, ClientKey) else ClientKey.parse(client_key)
    if key.kind == "token" and not tokens:
        raise ValueError("client_key='token' needs per-client tokens (tokens=, --tokens-file): with one shared token "
                         "every client is the same client, and without any a client picks its own key")  # fmt: skip
    allowed = sorted(set(list_envs() if env_ids is None else env_ids))
    unknown = [e for e in allowed if e not in gym.registry]
    if unknown:
        raise ValueError(f"unknown env id(s) {unknown}: not registered with gymnasium (see agentgym list)")
    operator = split_operator_args(allowed, env_args or {})
    allow = split_allowed_args(allowed, allow_env_args or {})
    pool = Workers(workers, call_timeout, max_calls_per_client or max(1, workers // 4), reserve=workers // 8)
    table = SessionTable(
        max_sessions=max_sessions,
        idle_timeout=float(idle_timeout),
        max_snapshots=max_snapshots,
        per_client=max_sessions_per_client or max(1, max_sessions // 4),
        reserve=max_sessions // 8,
        snapshot_bytes=max_snapshot_bytes,
        snapshot_bytes_per_client=max_snapshot_bytes_per_client or max(1, max_snapshot_bytes // 4),
    )
    server_id = secrets.token_hex(8)
    limits = {"max_sessions": max_sessions, "idle_timeout": float(idle_timeout), "max_body_bytes": max_body_bytes,
              "max_snapshots": max_snapshots, "max_sessions_per_client": table.per_client,
              "sessions_reserved_for_new_clients": table.reserve, "max_snapshot_bytes": max_snapshot_bytes,
              "max_snapshot_bytes_per_client": table.snapshot_bytes_per_client,
              "client_key": key.kind + (f":{key.header}" if key.header else "")}  # fmt: skip

    app = FastAPI(title="agentgym env server", version="1", docs_url=None, redoc_url=None)
    app.add_middleware(RequestGuard, token=token, max_body_bytes=max_body_bytes, server_id=server_id, tokens=tokens,
                       client_key=key, web_prefix=WEB_PREFIX if web is not None else None)  # fmt: skip
    if web is not None:
        app.mount(WEB_PREFIX, web)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return Response(dumps(exc.body()), status_code=exc.status, media_type="application/json")

    async def sweep() -> None:
        stale = table.sweep(clock())
        if stale:
            await run_in_threadpool(_close, stale)

    async def call(request: Request, s: Session, fn: Callable[..., Any], *args: Any) -> Any:
        """An env call of session ``s`` for the client of ``request``; past the deadline the session is closed."""

        def broken() -> None:
            table.break_session(s, f"session {s.id} was closed: an env call ran past the server's call deadline of "
                                f"{pool.call_timeout:g} s")  # fmt: skip

        return await _env_call(pool, key(request.scope), fn, *args, session=s, inline_below=inline_below,
                               on_stuck=broken)  # fmt: skip

    @asynccontextmanager
    async def use(session_id: str) -> AsyncIterator[Session]:
        """The session, marked busy (never evicted while in use) and locked for one env call at a time."""
        await sweep()
        now = clock()
        try:
            s = table.get(session_id, now)
        except ApiError:
            if session_id in table.sessions:  # expired just now
                await run_in_threadpool(_close, [table.drop(session_id)])
            raise
        s.busy += 1
        s.last_used = now
        try:
            async with s.lock:
                if table.sessions.get(session_id) is not s:  # closed while this call waited for the lock
                    if session_id in table.broken:
                        raise ApiError(410, "session_broken", table.broken[session_id])
                    raise ApiError(404, "unknown_session", f"session {session_id!r} was closed")
                yield s
        finally:
            s.busy -= 1
            s.last_used = clock()

    @app.get("/health")
    async def health() -> Response:
        """``status``: ``ok``; ``degraded`` while no worker is free (calls wait) or some env calls are stuck past
        the call deadline; ``starved`` (HTTP 503) when every worker is stuck and no env call can run."""
        await sweep()
        threads = pool.stats()
        status = ("starved" if threads["stuck"] >= pool.size else
                  "degraded" if threads["stuck"] or not threads["free"] else "ok")  # fmt: skip
        body = {"status": status, "server": server_id, "sessions": len(table.sessions), "workers": threads,
                "snapshot_bytes": table.snapshot_total, "limits": limits, "env_ids": allowed}  # fmt: skip
        return _json_response(body, 503 if status == "starved" else 200)

    @app.post("/sessions")
    async def create_session(request: Request) -> Response:
        req = _parse(CreateSessionRequest, await request.body())
        if req.env_id not in allowed:
            raise ApiError(404, "unknown_env", f"env {req.env_id!r} is not served here; served: {allowed}")
        try:
            kwargs = checked_kwargs(req.env_id, req.env_kwargs, operator=operator[req.env_id],
                                    allow=allow[req.env_id])  # fmt: skip
        except UntrustedArgumentError as e:
            raise ApiError(422, "untrusted_argument", _one_line(e), exception="ValueError") from None
        await sweep()
        client = key(request.scope)
        table.check_room(client)
        table.opening(client, +1)
        try:
            env = await _env_call(pool, client, _make, req.env_id, kwargs)
        finally:
            table.opening(client, -1)
        if not isinstance(env.unwrapped, AgentEnv):
            await run_in_threadpool(_close, [env])
            raise ApiError(422, "invalid_argument", f"{req.env_id} is not an agentgym env (AgentEnv)")
        s = Session(id=secrets.token_urlsafe(16), env_id=req.env_id, env=env, last_used=clock(),
                    client=client)  # fmt: skip
        table.add(s)
        return _json_response({"session_id": s.id, "server": server_id, "env": _describe_env(env)}, 201)

    @app.post("/sessions/{session_id}/reset")
    async def reset(session_id: str, request: Request) -> Response:
        req = _parse(ResetRequest, await request.body())
        async with use(session_id) as s:
            reset = functools.partial(s.env.reset, seed=req.seed, options=req.options)
            obs, info = await call(request, s, reset)
            s.done, s.task_id = False, str(info.get("task_id"))
            return _json_response({"observation": obs, "info": info, "status": s.status()})

    @app.post("/sessions/{session_id}/step")
    async def step(session_id: str, request: Request) -> Response:
        req = _parse(StepRequest, await request.body())
        action = _stand_in(req.action_type) if req.action_type is not None else req.action
        async with use(session_id) as s:
            out = await call(request, s, _step, s.env, action)
            s.done = out["terminated"] or out["truncated"]
            return _json_response(out)

    @app.post("/sessions/{session_id}/snapshot")
    async def take_snapshot(session_id: str, request: Request) -> Response:
        async with use(session_id) as s:
            pickled = await call(request, s, _pickled_snapshot, s.env)
            return _json_response({"snapshot_id": table.add_snapshot(s, pickled)})

    @app.post("/sessions/{session_id}/restore")
    async def restore_snapshot(session_id: str, request: Request) -> Response:
        req = _parse(RestoreRequest, await request.body())
        async with use(session_id) as s:
            found = table.snapshots.get(req.snapshot_id)
            if found is None:
                raise ApiError(404, "unknown_snapshot", f"unknown snapshot {req.snapshot_id!r}: dropped with the "
                               "session that took it, or one of its oldest, or taken on another server")  # fmt: skip
            snap = await call(request, s, _restore_pickled, s.env, found[1])
            _, s.done, _, s.task_id, *_ = snap.base
            s.task_id = s.task_id if _agent_env(s.env).task_index is not None else None
            return _json_response({"status": s.status()})

    @app.get("/sessions/{session_id}")
    async def session_status(session_id: str) -> Response:
        async with use(session_id) as s:
            return _json_response({"status": s.status()})

    @app.get("/sessions/{session_id}/transcript")
    async def transcript(session_id: str) -> Response:
        async with use(session_id) as s:
            return _json_response({"transcript": _agent_env(s.env).transcript})

    @app.delete("/sessions/{session_id}")
    async def close_session(session_id: str) -> Response:
        async with use(session_id) as s:
            env = table.drop(s.id)
            await run_in_threadpool(_close, [env])
            return _json_response({"closed": session_id})

    return app


# -- serving -------------------------------------------------------------------------------------------


def env_uvicorn_config(
    app: Any,
    *,
    header_timeout: float = 10.0,
    body_timeout: float = 60.0,
    timeout_keep_alive: int = 30,
    max_connections: int = 1024,
    max_connections_per_peer: int | None = None,
    ws_max_size: int = 1 << 20,
    **kwargs: Any,
) -> Any:
    """:func:`agentgym.tools.serving.uvicorn_config` for env servers: connections capped in all and per client
    address (:class:`~agentgym.tools.serving.ConnectionLimits`: ``max_connections``, ``max_connections_per_peer``
    (default a quarter), idle ones closed first to make room, 503 only when every connection has a request in
    flight), WebSocket sessions (OpenEnv's ``/ws``) not cut by the HTTP read deadline, WebSocket messages capped at
    ``ws_max_size`` bytes, kept-alive connections open 30 s (clients close theirs first, so a request never races
    the server's close), and responses not held back by Nagle's algorithm."""
    limits = ConnectionLimits(max_connections=max_connections, per_peer=max_connections_per_peer)
    return uvicorn_config(app, header_timeout=header_timeout, body_timeout=body_timeout, ws_max_size=ws_max_size,
                          timeout_keep_alive=timeout_keep_alive, connection_limits=limits, **kwargs)  # fmt: skip


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    log_level: str = "info",
    header_timeout: float = 10.0,
    body_timeout: float = 60.0,
    max_connections: int = 1024,
    max_connections_per_peer: int | None = None,
    **app_kwargs: Any,
) -> None:
    """Serve agentgym envs (``create_app(**app_kwargs)``) with uvicorn until interrupted.

    Binds to loopback by default; any other ``host`` needs a bearer ``token`` (ValueError otherwise, before
    anything is built). ``max_connections`` / ``max_connections_per_peer``: open connections at most, in all and per
    client address (:func:`env_uvicorn_config`).
    """
    check_bind(host, token or (app_kwargs.get("tokens") or [None])[0])
    app = create_app(token=token, **app_kwargs)
    config = env_uvicorn_config(app, host=host, port=port, log_level=log_level, header_timeout=header_timeout,
                                body_timeout=body_timeout, max_connections=max_connections,
                                max_connections_per_peer=max_connections_per_peer)  # fmt: skip
    run_uvicorn(config)


class ServerProcess:
    """An env server in a subprocess on a loopback port, for tests, benchmarks, or a server beside a trainer (out of
    its process: no shared GIL).

    ``target`` (``"module:function"``, default :func:`serve`; e.g. ``"agentgym.serving.openenv:serve_openenv"``) is
    called with ``port`` and ``kwargs`` (JSON data, sent through the child's stdin, so a token never shows in
    its command line). ``port=None`` picks a free port. ``start`` returns once
    ``GET /health`` answers (sending ``kwargs["token"]`` if any); ``stop`` kills the server as a crash would.

    >>> with ServerProcess(env_ids=["agentgym/Household-v0"]) as server:      # doctest: +SKIP
    ...     env = RemoteEnv(server.url, "agentgym/Household-v0")
    """

    def __init__(
        self, target: str = "agentgym.serving.server:serve", *, port: int | None = None, **kwargs: Any
    ) -> None:
        self.target = target
        self.port = port or _free_port()
        self.kwargs = {"log_level": "warning", **kwargs}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> ServerProcess:
        import httpx

        module, _, function = self.target.partition(":")
        # The arguments (a token among them) go through a pipe: a command line is readable by every user (ps).
        code = (f"import importlib, json, sys; importlib.import_module({module!r}).{function}"
                f"(port={self.port}, **json.loads(sys.stdin.readline()))")  # fmt: skip
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.kwargs).encode() + b"\n")
        self.proc.stdin.close()
        token = self.kwargs.get("token") or (self.kwargs.get("tokens") or [None])[0]
        headers = {"authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.url + "/health", headers=headers, timeout=2.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server {self.target} on {self.url} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
