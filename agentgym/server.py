"""The env server: agentgym envs played over HTTP, one session per env (``agentgym serve``; the client is
:class:`agentgym.remote.RemoteEnv`).

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
server keeps them (at most ``max_snapshots`` per session, oldest dropped) until the session that took them ends.

Errors are 4xx answers ``{"detail": message, "error": code}`` (plus ``"exception"``, the Python exception the env
raised, which the client raises again): 400 ``bad_json`` (a body that is not a JSON object), 401 ``unauthorized``
(missing or wrong bearer token, compared in constant time), 404 ``unknown_session`` / ``unknown_env`` /
``unknown_snapshot``, 409 ``env_state`` (the env refused the call in its state, e.g. ``step`` after the episode
ended), 410 ``session_expired`` (evicted after ``idle_timeout`` seconds unused), 413 ``too_large`` (a body over
``max_body_bytes``, refused from its ``Content-Length`` or as soon as a streamed body passes it), 422
``invalid_request`` (fields missing or mistyped), ``invalid_argument`` (the env raised ``ValueError`` /
``TypeError``) or ``snapshot_unsupported``, 429 ``too_many_sessions`` (``max_sessions`` open). An env that cannot run
here answers 503 ``env_unavailable``; any other exception from the env is a 500 ``env_error``.

:func:`serve` binds to loopback by default and refuses any other address without a bearer token
(:func:`agentgym.tools.serving.check_bind`); connections are bounded as in
:func:`agentgym.tools.serving.uvicorn_config`.

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
import contextlib
import functools
import json
import logging
import math
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

from agentgym.branching import restore, snapshot
from agentgym.core import AgentEnv, EnvUnavailableError, Snapshot, SnapshotError
from agentgym.tools.serving import (
    TOKEN_ENV,
    bearer_checker,
    check_bind,
    guarded_h11_protocol,
    run_uvicorn,
    uvicorn_config,
)
from agentgym.trust import UntrustedArgumentError, checked_kwargs, split_operator_args

_log = logging.getLogger(__name__)

__all__ = [
    "SERVER_HEADER",
    "TOKEN_ENV",
    "ApiError",
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


# -- the ASGI guard: bearer token, body size -------------------------------------------------------------


class RequestGuard:
    """ASGI middleware: a bearer token on every HTTP request and WebSocket handshake, and a cap on body size.

    A missing or wrong token gets 401 (a WebSocket handshake is refused, which clients see as 403); a body over
    ``max_body_bytes`` gets 413, refused from its ``Content-Length`` or as soon as a streamed body passes the
    limit (the body is read here, then handed to the app). ``server_id`` is sent in ``X-Agentgym-Server``.
    """

    def __init__(self, app: Any, *, token: str | None = None, max_body_bytes: int = 1 << 20, server_id: str = ""):
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
        self.app = app
        self.authorized = bearer_checker(token)
        self.max_body_bytes = max_body_bytes
        self.extra_headers = [(SERVER_HEADER.encode(), server_id.encode())] if server_id else []

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "websocket":
            if not self.authorized(_header(scope, b"authorization")):
                await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
                return
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._stamped(send)
        if not self.authorized(_header(scope, b"authorization")):
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


def _header(scope: dict[str, Any], name: bytes) -> str | None:
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
    #: Who opened it (the peer address): its calls count against that client's share of the workers.
    client: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: int = 0
    snapshots: list[str] = field(default_factory=list)
    done: bool = True
    task_id: str | None = None
    #: Seconds an env call of this session takes (a moving average; infinite until the first call).
    cost: float = math.inf

    def status(self) -> dict[str, Any]:
        base = self.env.unwrapped
        return {"env_id": self.env_id, "turn": base.turn, "done": self.done, "task_index": base.task_index,
                "task_id": self.task_id}  # fmt: skip


@dataclass
class SessionTable:
    """The sessions and snapshots of one app, with its limits; touched only from the event loop."""

    max_sessions: int
    idle_timeout: float
    max_snapshots: int
    sessions: dict[str, Session] = field(default_factory=dict)
    snapshots: dict[str, tuple[str, Snapshot]] = field(default_factory=dict)
    #: Ids of sessions evicted for idleness (the most recent 10,000), so their clients learn why (410, not 404).
    evicted: OrderedDict[str, float] = field(default_factory=OrderedDict)
    #: Ids of sessions closed because an env call ran past the call deadline (the most recent 10,000): why.
    broken: OrderedDict[str, str] = field(default_factory=OrderedDict)
    pending: int = 0
    last_sweep: float = 0.0

    def open_slots(self) -> int:
        return self.max_sessions - len(self.sessions) - self.pending

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
        for snap_id in s.snapshots:
            self.snapshots.pop(snap_id, None)
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

    def client_sessions(self, client: str) -> int:
        return sum(1 for s in self.sessions.values() if s.client == client)

    def add_snapshot(self, s: Session, snap: Snapshot) -> str:
        snap_id = secrets.token_urlsafe(12)
        self.snapshots[snap_id] = (s.id, snap)
        s.snapshots.append(snap_id)
        while len(s.snapshots) > self.max_snapshots:
            self.snapshots.pop(s.snapshots.pop(0), None)
        return snap_id


# -- env calls (in worker threads) ---------------------------------------------------------------------


class Workers:
    """The threads env calls run in, shared fairly between clients.

    ``size`` threads at most; each call has ``call_timeout`` seconds (waiting for a thread included). A call past
    its deadline is answered 504 and its session closed, but a Python thread cannot be killed: the call goes on
    holding its thread ("stuck") until it returns. So each client (a peer address) may have at most ``per_client``
    calls running, stuck ones included (its further calls wait for one of its own slots, within the deadline): a
    client whose stuck calls fill its share gets 429 at once, and the other clients keep the rest of the threads.
    ``/health`` reports the busy and stuck threads.
    """

    def __init__(self, size: int, call_timeout: float, per_client: int) -> None:
        if size < 1 or per_client < 1 or not call_timeout > 0:
            raise ValueError(f"workers and max_calls_per_client must be >= 1 and call_timeout > 0, got {size}, "
                             f"{per_client}, {call_timeout}")  # fmt: skip
        self.size, self.call_timeout, self.per_client = size, float(call_timeout), per_client
        self.executor = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix="agentgym-env")
        self.running: dict[str, int] = {}  # client -> its calls holding (or waiting for) a thread
        self.stuck: dict[str, int] = {}  # client -> its calls past their deadline, still running
        self.slots: dict[str, asyncio.Semaphore] = {}  # client -> its share of the threads

    def stats(self) -> dict[str, Any]:
        busy = sum(self.per_client - sem._value for sem in self.slots.values())
        return {"size": self.size, "busy": busy, "stuck": sum(self.stuck.values()), "call_timeout": self.call_timeout,
                "max_calls_per_client": self.per_client, "clients": len(self.running)}  # fmt: skip

    def _done(self, client: str, stuck: bool, *, held: bool = True) -> None:
        if held:
            self.slots[client].release()
        self.running[client] -= 1
        if not self.running[client]:
            del self.running[client]
            del self.slots[client]
        if stuck:
            self.stuck[client] -= 1
            if not self.stuck[client]:
                del self.stuck[client]

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
        self.running[client] = self.running.get(client, 0) + 1
        slots = self.slots.setdefault(client, asyncio.Semaphore(self.per_client))
        try:
            await asyncio.wait_for(slots.acquire(), self.call_timeout)
        except (TimeoutError, asyncio.CancelledError) as e:
            self._done(client, stuck=False, held=False)
            if isinstance(e, asyncio.CancelledError):
                raise
            raise ApiError(429, "too_busy", f"this client ({client}) kept its {self.per_client} env workers busy "
                           f"for the whole {self.call_timeout:g} s call deadline") from None  # fmt: skip
        future = self.executor.submit(_timed, fn, *args)
        waited = asyncio.wrap_future(future)
        try:
            done, _ = await asyncio.wait({waited}, timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:  # the server is stopping: the thread is freed when the call returns
            waited.add_done_callback(lambda f: (f.cancelled() or f.exception(), self._done(client, stuck=False)))
            raise
        if done:
            self._done(client, stuck=False)
            return waited.result()
        if future.cancel():  # still queued: it never runs
            self._done(client, stuck=False)
        else:
            self.stuck[client] = self.stuck.get(client, 0) + 1

            def returned(f: asyncio.Future) -> None:
                f.cancelled() or f.exception()  # retrieved: no "exception never retrieved" warning
                self._done(client, stuck=True)
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


def _client(request: Request) -> str:
    """Whom a request counts against: its peer address (behind a proxy every client is the proxy)."""
    return request.client.host if request.client is not None else "unknown"


def _stand_in(type_name: str) -> Any:
    """An object of a class named ``type_name`` (an action the client could not send as JSON)."""
    name = type_name if type_name.isidentifier() and len(type_name) <= 64 else "object"
    return type(name, (), {})()


def _describe_env(env: gym.Env) -> dict[str, Any]:
    base = env.unwrapped
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
    clock: Callable[[], float] = time.monotonic,
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
        allow_env_args: ``{name: [values]}``: values clients may pick for an argument besides what the env
            declares public (``agentgym.trust``), e.g. ``{"dataset": ["100k"]}``.
        workers: threads env calls run in.
        call_timeout: seconds an env call may take (504 beyond; its session is then closed).
        max_calls_per_client: env calls one client (peer address) may have running, stuck ones included (default
            a quarter of ``workers``).
        max_sessions_per_client: open sessions per client (default ``max_sessions``).
        clock: the seconds idle sessions are measured in (``time.monotonic``; a test may drive its own).
    """
    from agentgym.registry import list_envs

    if max_sessions < 1 or max_snapshots < 1 or not idle_timeout > 0:
        raise ValueError("max_sessions and max_snapshots must be >= 1 and idle_timeout > 0")
    allowed = sorted(set(list_envs() if env_ids is None else env_ids))
    unknown = [e for e in allowed if e not in gym.registry]
    if unknown:
        raise ValueError(f"unknown env id(s) {unknown}: not registered with gymnasium (see agentgym list)")
    operator = split_operator_args(allowed, env_args or {})
    allow = {k: list(v) for k, v in (allow_env_args or {}).items()}
    pool = Workers(workers, call_timeout, max_calls_per_client or max(1, workers // 4))
    per_client_sessions = max_sessions_per_client or max_sessions
    server_id = secrets.token_hex(8)
    table = SessionTable(max_sessions=max_sessions, idle_timeout=float(idle_timeout), max_snapshots=max_snapshots)
    limits = {"max_sessions": max_sessions, "idle_timeout": float(idle_timeout), "max_body_bytes": max_body_bytes,
              "max_snapshots": max_snapshots, "max_sessions_per_client": per_client_sessions}  # fmt: skip

    app = FastAPI(title="agentgym env server", version="1", docs_url=None, redoc_url=None)
    app.add_middleware(RequestGuard, token=token, max_body_bytes=max_body_bytes, server_id=server_id)

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

        return await _env_call(pool, _client(request), fn, *args, session=s, inline_below=inline_below,
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
        """``status``: ``ok``; ``degraded`` while some env calls are stuck past the call deadline; ``starved``
        (HTTP 503) when every worker is stuck and no env call can run."""
        await sweep()
        threads = pool.stats()
        status = "starved" if threads["stuck"] >= pool.size else "degraded" if threads["stuck"] else "ok"
        body = {"status": status, "server": server_id, "sessions": len(table.sessions), "workers": threads,
                "limits": limits, "env_ids": allowed}  # fmt: skip
        return _json_response(body, 503 if status == "starved" else 200)

    @app.post("/sessions")
    async def create_session(request: Request) -> Response:
        req = _parse(CreateSessionRequest, await request.body())
        if req.env_id not in allowed:
            raise ApiError(404, "unknown_env", f"env {req.env_id!r} is not served here; served: {allowed}")
        try:
            kwargs = checked_kwargs(req.env_id, req.env_kwargs, operator=operator[req.env_id], allow=allow)
        except UntrustedArgumentError as e:
            raise ApiError(422, "untrusted_argument", _one_line(e), exception="ValueError") from None
        await sweep()
        client = _client(request)
        if table.open_slots() <= 0:
            raise ApiError(429, "too_many_sessions", f"the server holds its maximum of {max_sessions} sessions: "
                           "close some (DELETE /sessions/{id}) or wait for idle ones to expire")  # fmt: skip
        if table.client_sessions(client) >= per_client_sessions:
            raise ApiError(429, "too_many_sessions", f"this client ({client}) holds its maximum of "
                           f"{per_client_sessions} sessions: close some (DELETE /sessions/{{id}})")  # fmt: skip
        table.pending += 1
        try:
            env = await _env_call(pool, client, _make, req.env_id, kwargs)
        finally:
            table.pending -= 1
        if not isinstance(env.unwrapped, AgentEnv):
            await run_in_threadpool(_close, [env])
            raise ApiError(422, "invalid_argument", f"{req.env_id} is not an agentgym env (AgentEnv)")
        s = Session(id=secrets.token_urlsafe(16), env_id=req.env_id, env=env, last_used=clock(),
                    client=client)  # fmt: skip
        table.sessions[s.id] = s
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
            snap = await call(request, s, snapshot, s.env)
            return _json_response({"snapshot_id": table.add_snapshot(s, snap)})

    @app.post("/sessions/{session_id}/restore")
    async def restore_snapshot(session_id: str, request: Request) -> Response:
        req = _parse(RestoreRequest, await request.body())
        async with use(session_id) as s:
            found = table.snapshots.get(req.snapshot_id)
            if found is None:
                raise ApiError(404, "unknown_snapshot", f"unknown snapshot {req.snapshot_id!r}: dropped with the "
                               "session that took it, or one of its oldest, or taken on another server")  # fmt: skip
            await call(request, s, restore, s.env, found[1])
            _, s.done, _, s.task_id, *_ = found[1].base
            s.task_id = s.task_id if s.env.unwrapped.task_index is not None else None
            return _json_response({"status": s.status()})

    @app.get("/sessions/{session_id}")
    async def session_status(session_id: str) -> Response:
        async with use(session_id) as s:
            return _json_response({"status": s.status()})

    @app.get("/sessions/{session_id}/transcript")
    async def transcript(session_id: str) -> Response:
        async with use(session_id) as s:
            return _json_response({"transcript": s.env.unwrapped.transcript})

    @app.delete("/sessions/{session_id}")
    async def close_session(session_id: str) -> Response:
        async with use(session_id) as s:
            env = table.drop(s.id)
            await run_in_threadpool(_close, [env])
            return _json_response({"closed": session_id})

    return app


# -- serving -------------------------------------------------------------------------------------------


@functools.cache
def _env_server_protocol(header_timeout: float, body_timeout: float) -> type:
    """``guarded_h11_protocol`` with two fixes: its read deadline stops when the connection becomes a WebSocket
    (armed at ``connection_made``, it would otherwise close a WebSocket session ``header_timeout`` seconds in), and
    ``TCP_NODELAY`` is set on every connection (asyncio sets it only on sockets it created itself: on a socket bound
    by the caller, Nagle's algorithm held each response body until the client's delayed ACK, ~40 ms)."""
    base = guarded_h11_protocol(header_timeout, body_timeout)

    class EnvServerProtocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._disarm()
            super().handle_websocket_upgrade(event)

    return EnvServerProtocol


def env_uvicorn_config(
    app: Any,
    *,
    header_timeout: float = 10.0,
    body_timeout: float = 60.0,
    timeout_keep_alive: int = 30,
    limit_concurrency: int | None = 1024,
    ws_max_size: int = 1 << 20,
    **kwargs: Any,
) -> Any:
    """:func:`agentgym.tools.serving.uvicorn_config` for env servers: WebSocket sessions (OpenEnv's ``/ws``) are not
    cut by the HTTP read deadline, WebSocket messages are capped at ``ws_max_size`` bytes, kept-alive connections
    stay open 30 s (clients close theirs first, so a request never races the server's close), more connections are
    allowed (one per session client), and responses are not held back by Nagle's algorithm."""
    config = uvicorn_config(app, header_timeout=header_timeout, body_timeout=body_timeout, ws_max_size=ws_max_size,
                            timeout_keep_alive=timeout_keep_alive, limit_concurrency=limit_concurrency,
                            **kwargs)  # fmt: skip
    config.http = _env_server_protocol(float(header_timeout), float(body_timeout))
    return config


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    log_level: str = "info",
    header_timeout: float = 10.0,
    body_timeout: float = 60.0,
    limit_concurrency: int = 1024,
    **app_kwargs: Any,
) -> None:
    """Serve agentgym envs (``create_app(**app_kwargs)``) with uvicorn until interrupted.

    Binds to loopback by default; any other ``host`` needs a bearer ``token`` (ValueError otherwise, before
    anything is built). ``limit_concurrency``: open connections at most (503 beyond).
    """
    check_bind(host, token)
    app = create_app(token=token, **app_kwargs)
    config = env_uvicorn_config(app, host=host, port=port, log_level=log_level, header_timeout=header_timeout,
                                body_timeout=body_timeout, limit_concurrency=limit_concurrency)  # fmt: skip
    run_uvicorn(config)


class ServerProcess:
    """An env server in a subprocess on a loopback port, for tests, benchmarks, or a server beside a trainer (out of
    its process: no shared GIL).

    ``target`` (``"module:function"``, default :func:`serve`; e.g. ``"agentgym.openenv_compat:serve_openenv"``) is
    called with ``port`` and ``kwargs`` (JSON data, sent through the child's stdin, so a token never shows in
    its command line). ``port=None`` picks a free port. ``start`` returns once
    ``GET /health`` answers (sending ``kwargs["token"]`` if any); ``stop`` kills the server as a crash would.

    >>> with ServerProcess(env_ids=["agentgym/Household-v0"]) as server:      # doctest: +SKIP
    ...     env = RemoteEnv(server.url, "agentgym/Household-v0")
    """

    def __init__(self, target: str = "agentgym.server:serve", *, port: int | None = None, **kwargs: Any) -> None:
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
        token = self.kwargs.get("token")
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
