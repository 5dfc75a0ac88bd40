"""``RemoteEnv``: an agentgym env played over HTTP on an env server (``agentgym serve``, agentgym.serving.server).

It is an ``AgentEnv``: the same observations, rewards, flags and ``info`` as the env built locally with
``gymnasium.make(env_id, **env_kwargs)`` (the server builds exactly that), the same errors (a bad reset option
raises ``ValueError``, ``step`` after the episode ended raises ``RuntimeError``), snapshots and restores through
the server (``agentgym.contract.branching`` works, across processes too: a pickled ``RemoteEnv`` opens a new session and
restores the episode into it), and ``agentgym check`` passes on it.

Failures are one-line errors, never hangs: every request has a deadline (``timeout``, ``connect_timeout``), and a
server that cannot be reached, stops mid-request, has restarted (and so lost the session) or has closed an idle
session raises :class:`EnvServerError`, an ``EnvUnavailableError`` that is also a ``ConnectionError``. A request
that may have reached the server is never retried (a step must not run twice).

>>> from agentgym.serving.server import create_app
>>> from agentgym.tools.serving import BackgroundServer
>>> with BackgroundServer(create_app(env_ids=["agentgym/Household-v0"])) as server:
...     env = RemoteEnv(server.url, "agentgym/Household-v0")
...     obs, info = env.reset(seed=0)
...     obs, reward, terminated, truncated, info = env.step("look")
...     env.close()
>>> info["turn"], obs[0]["role"]
(1, 'user')
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import httpx

from agentgym.contract.env import AgentEnv, EnvUnavailableError, Snapshot, SnapshotError, _rebuild

__all__ = ["EnvServerError", "RemoteEnv", "RemoteSnapshot", "http_client"]

# agentgym.serving.server.SERVER_HEADER (not imported: the client needs no FastAPI)
_SERVER_HEADER = "x-agentgym-server"
_JSON = {"content-type": "application/json"}
#: Actions sent as JSON as they are; any other type is sent by name (the server steps a stand-in of that class).
_JSON_ACTIONS = (str, dict, type(None), bool, int, float)


class EnvServerError(EnvUnavailableError, ConnectionError):
    """The env server cannot be used: unreachable, gone mid-request, restarted (its sessions are lost), the session
    expired, the token was refused, or the server is full. The message says which, in one line."""


@dataclass(frozen=True)
class RemoteSnapshot:
    """What a ``RemoteEnv`` snapshot holds: the id of a snapshot kept by the server ``server`` (an instance id)."""

    server: str
    snapshot_id: str


def _json_default(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars (e.g. a numpy task_index), without importing numpy here
    if callable(item):
        return item()
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, default=_json_default, separators=(",", ":")).encode()


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def http_client(url: str = "http://", *, max_connections: int = 64) -> httpx.Client:
    """An ``httpx.Client`` for env servers, to share between many ``RemoteEnv`` (``client=``).

    Its sockets set ``TCP_NODELAY`` (httpx writes a request's headers and body apart; with Nagle's algorithm the
    body then waits for the server's delayed ACK, ~40 ms a request); kept-alive connections close after 5 s, before
    the server closes them (30 s), so a request never races the server's close. For a plain-HTTP ``url`` CA
    certificates are not loaded (~20 ms per client).
    """
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                          keepalive_expiry=5.0)  # fmt: skip
    transport = httpx.HTTPTransport(verify=not url.startswith("http://"), limits=limits, socket_options=nodelay)
    return httpx.Client(transport=transport, limits=limits)


class RemoteEnv(AgentEnv):
    """The env ``env_id`` (built with ``env_kwargs``) in a session of the env server at ``url``.

    Args:
        url: the server, ``http://host:port``.
        env_id: a registered env id the server serves (``GET /health`` lists them).
        env_kwargs: constructor arguments, JSON data (as for ``gymnasium.make``): only those the env declares
            public (``agentgym.contract.trust``); the server refuses others (``ValueError``), its operator gives those.
        token: the server's bearer token (required when it listens beyond loopback).
        timeout: seconds to wait for any answer (an env step included) before raising ``EnvServerError``.
        connect_timeout: seconds to wait for a connection.
        client: an ``httpx.Client`` to share between many envs (:func:`http_client` makes a suitable one; the env
            does not close it); by default each env has its own.

    ``close()`` ends the session; a session never closed is ended by the server after its idle timeout. Pickling
    carries the constructor arguments (the token included) and a snapshot of the episode, not ``client``.
    """

    def __init__(
        self,
        url: str,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        client: httpx.Client | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._headers = {**_JSON, **({"authorization": f"Bearer {token}"} if token else {})}
        # (connect, read, write, pool): a plain tuple, which any httpx-compatible client (httpx, or httpx2 under
        # Starlette's TestClient) accepts, where an httpx.Timeout object is refused by the other
        self._timeout = (connect_timeout, timeout, timeout, timeout)
        self._own_client = client is None
        self._http = client if client is not None else http_client(self.url, max_connections=4)
        self.session_id: str | None = None
        self._closed = False
        try:
            created = self._call("POST", "/sessions", {"env_id": env_id, "env_kwargs": self.env_kwargs}, "create")
        except BaseException:
            if self._own_client:
                self._http.close()
            raise
        self.session_id = created["session_id"]
        #: The id of the server instance that holds the session (a restarted server has another).
        self.server_id: str = created["server"]
        remote = created["env"]
        super().__init__(
            max_turns=remote["max_turns"],
            invalid_action_penalty=remote["invalid_action_penalty"],
            max_action_chars=remote["max_action_chars"],
            render_mode=render_mode,
        )
        #: The class of the env on the server (``module:qualname``).
        self.remote_class: str = remote["class"]
        self.num_tasks = int(remote["num_tasks"])
        self.reset_options = tuple(remote["reset_options"])
        self._remote_spec: dict[str, Any] = remote["spec_kwargs"]
        self._anchor = ""

    # -- HTTP ------------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any, what: str) -> Any:
        content = None if body is None else _dumps(body)
        try:
            request = self._http.build_request(method, self.url + path, content=content, headers=self._headers,
                                               timeout=self._timeout)  # fmt: skip
            resp = self._http.send(request)
        except httpx.TimeoutException as e:
            raise EnvServerError(f"the env server at {self.url} did not answer ({what}) in time: "
                                 f"{type(e).__name__} after {self._timeout[1]:g} s") from None  # fmt: skip
        except httpx.ConnectError as e:
            raise EnvServerError(f"cannot reach the env server at {self.url} ({what}): {_one_line(e)}") from None
        except httpx.TransportError as e:
            raise EnvServerError(f"lost the connection to the env server at {self.url} ({what}): "
                                 f"{type(e).__name__}: {_one_line(e)}; it stopped or restarted") from None  # fmt: skip
        if resp.status_code >= 400:
            raise self._error(resp, what)
        return resp.json()

    def _error(self, resp: httpx.Response, what: str) -> Exception:
        try:
            body = resp.json()
            detail, code, exception = body["detail"], body.get("error"), body.get("exception")
        except (ValueError, KeyError, TypeError):
            detail, code, exception = _one_line(resp.text[:500]), None, None
        status = resp.status_code
        where = f"env server {self.url} ({what}, HTTP {status})"
        server = resp.headers.get(_SERVER_HEADER)
        if status in (404, 410) and code in ("unknown_session", "session_expired"):
            if self.session_id is not None and server and server != self.server_id:
                return EnvServerError(f"the env server at {self.url} restarted (server {self.server_id} -> "
                                      f"{server}): session {self.session_id} and its episode are gone; make a new "
                                      "RemoteEnv")  # fmt: skip
            return EnvServerError(f"{where}: {detail}")
        if code in ("unknown_snapshot", "snapshot_too_large"):
            return EnvServerError(f"{where}: {detail}")
        if status in (401, 429, 504) or code == "session_broken" or (status == 503 and code != "env_unavailable"):
            return EnvServerError(f"{where}: {detail}")
        if code == "env_unavailable":
            return EnvUnavailableError(detail)
        if code == "snapshot_unsupported":
            return SnapshotError(detail)
        mirrored = {"ValueError": ValueError, "TypeError": TypeError, "RuntimeError": RuntimeError,
                    "ResetNeeded": gym.error.ResetNeeded}  # fmt: skip
        if exception in mirrored:
            return mirrored[exception](detail)
        if status < 500:
            return ValueError(f"{where}: {detail}")
        return RuntimeError(f"{where}: {detail}")

    def _session(self, suffix: str = "") -> str:
        return f"/sessions/{self.session_id}{suffix}"

    # -- the Gymnasium API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        gym.Env.reset(self, seed=seed)  # the local np_random follows the seed, as Gymnasium's checker expects
        out = self._call("POST", self._session("/reset"), {"seed": seed, "options": options}, "reset")
        self._status(out["status"])
        self._anchor = out["info"].get("anchor", "")
        return out["observation"], out["info"]

    def step(self, action: Any) -> tuple[list, float, bool, bool, dict]:
        out = self._call("POST", self._session("/step"), self._wire_action(action), "step")
        info = out["info"]
        self._turn = int(info.get("turn", self._turn + 1))
        self._done = bool(out["terminated"] or out["truncated"])
        self._anchor = info.get("anchor", "")
        return out["observation"], float(out["reward"]), bool(out["terminated"]), bool(out["truncated"]), info

    def _wire_action(self, action: Any) -> dict[str, Any]:
        """The step body: the action as the env would see it (cut to one character over ``max_action_chars``, so
        the server still sees that it was cut; the env's own sanitising then gives the same text)."""
        if isinstance(action, bytes | bytearray):
            action = bytes(action).decode("utf-8", errors="replace")
        if isinstance(action, str):
            return {"action": action[: self.max_action_chars + 1]}
        if isinstance(action, _JSON_ACTIONS):
            try:
                _dumps(action)
            except (TypeError, ValueError, RecursionError):
                return {"action_type": type(action).__name__}
            return {"action": action}
        return {"action_type": type(action).__name__}

    def close(self) -> None:
        """End the session on the server (best effort: a server that is gone has nothing left to close)."""
        if self._closed or self.session_id is None:
            return
        self._closed = True
        try:
            self._call("DELETE", self._session(), None, "close")
        except (EnvServerError, ValueError, RuntimeError):
            pass
        finally:
            if self._own_client:
                self._http.close()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self.transcript)

    # -- state mirrored from the server ----------------------------------------------------------------
    def _status(self, status: Mapping[str, Any]) -> None:
        self._turn, self._done = int(status["turn"]), bool(status["done"])
        self._task_index, self._task_id = status["task_index"], status["task_id"] or ""

    def anchor(self) -> str:
        """The state key the server's env gave in the latest ``info``."""
        return self._anchor

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The whole conversation so far, as the server's env holds it."""
        return self._call("GET", self._session("/transcript"), None, "transcript")["transcript"]

    def spec_kwargs(self) -> dict[str, Any]:
        """The constructor arguments of the env on the server (recreate it locally with ``env_id``)."""
        return json.loads(self._spec_key())

    def _spec_key(self) -> str:
        return json.dumps({"env_id": self.env_id, **self._remote_spec}, sort_keys=True)

    # -- branching and pickling ------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Snapshot the episode on the server; the ``Snapshot`` holds its id (a :class:`RemoteSnapshot`).

        It restores into any ``RemoteEnv`` of the same env and arguments on the same server, while the session
        that took it is open.
        """
        out = self._call("POST", self._session("/snapshot"), None, "snapshot")
        state = RemoteSnapshot(server=self.server_id, snapshot_id=out["snapshot_id"])
        return Snapshot(env=self._class_name(), spec=self._spec_key(), base=(), state=state)

    def restore(self, snapshot: Snapshot) -> None:
        """Put the server's env in the state of ``snapshot`` (from ``snapshot()`` of a RemoteEnv like this one)."""
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"restore() takes a Snapshot, got {type(snapshot).__name__}")
        if snapshot.env != self._class_name() or not isinstance(snapshot.state, RemoteSnapshot):
            raise ValueError(f"snapshot of {snapshot.env} cannot restore into a RemoteEnv (only RemoteEnv snapshots)")
        if snapshot.spec != self._spec_key():
            theirs, ours = json.loads(snapshot.spec), self.spec_kwargs()
            diff = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
            raise ValueError(f"snapshot comes from an env built with other arguments (differing: {diff})")
        if snapshot.state.server != self.server_id:
            raise EnvServerError(f"the snapshot was taken on env server {snapshot.state.server}, not on the one "
                                 f"holding this session ({self.server_id} at {self.url})")  # fmt: skip
        out = self._call("POST", self._session("/restore"), {"snapshot_id": snapshot.state.snapshot_id}, "restore")
        self._status(out["status"])

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the constructor arguments (not a shared ``client``) plus a snapshot of the episode: unpickling
        opens a new session on the same server and restores the episode into it."""
        snap = self.snapshot() if self._task_index is not None and not self._done else None
        args, kwargs = self._init_call
        return _rebuild, (type(self), args, {k: v for k, v in kwargs.items() if k != "client"}, snap)
