"""Playing by hand from the page: a few play sessions held by the server, one per player, driven by JSON POSTs.
A session is what ``new_session(env_id, env_kwargs)`` returns: an ``agentgym.running.play.PlaySession`` (the command
line passes it in, so this room imports no env code), with ``reset``, ``step``, ``undo``, ``save``, ``view`` and
``close``; a ``ValueError`` it raises (``PlayError``) is the client's error.

- ``GET /api/play/envs``: the env ids a player may pick (the operator's list: every registered agentgym env by
  default) and where episodes are saved;
- ``POST /api/play/new`` ``{"env_id", "seed"}``: a new session and its first view; ``/api/play/step``
  ``{"session", "action"}``, ``/api/play/undo`` ``{"session"}``, ``/api/play/reset`` ``{"session", "seed"}``,
  ``/api/play/save`` ``{"session"}`` (to a file the server names under its save folder: a client never names a
  path), ``/api/play/close`` ``{"session"}``.

Trust: the client picks an env id from the list and a seed, nothing else; envs are built with the operator's
keyword arguments (``env_kwargs``, per env id) only. Bodies are capped (:data:`MAX_BODY_BYTES`) before they are
read whole; a POST must be JSON and, when the browser says where it comes from (``Origin``, ``Sec-Fetch-Site``), come
from the page itself, so another site cannot play or save through a visitor's browser. At most ``max_sessions``
sessions live at once; the one idle longest is closed to make room, and sessions idle ``idle_seconds`` are closed.
Each session is used by one request at a time (its lock). ``PlayError`` and bad requests are 4xx with a message.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The largest request body read (a turn is at most the env's action limit, far below it).
MAX_BODY_BYTES = 1 << 20


class PlayRequestError(Exception):
    """A client error: its HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Held:
    session: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    used: float = field(default_factory=time.monotonic)
    saves: int = 0


@dataclass(eq=False)
class PlayRoom:
    """The play sessions of one server (see the module docstring). ``env_ids``: what a player may pick;
    ``save_dir``: where episodes are saved; ``new_session``: ``(env_id, env_kwargs) -> session``; ``env_kwargs``:
    the operator's constructor arguments per env id."""

    env_ids: Sequence[str]
    save_dir: Path
    new_session: Callable[[str, dict[str, Any]], Any]
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_sessions: int = 8
    idle_seconds: float = 1800.0
    _held: dict[str, _Held] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.idle_seconds <= 0:
            raise ValueError("need max_sessions >= 1 and idle_seconds > 0")
        self.env_ids = sorted(self.env_ids)

    # -- sessions ------------------------------------------------------------------------------------------------
    def _evict(self, now: float) -> list[_Held]:
        """Sessions to close: the idle ones, and the longest idle when the room is full (under the room's lock)."""
        gone = [k for k, h in self._held.items() if now - h.used > self.idle_seconds and not h.lock.locked()]
        if len(self._held) - len(gone) >= self.max_sessions:
            free = sorted((h.used, k) for k, h in self._held.items() if k not in gone and not h.lock.locked())
            if not free:
                raise PlayRequestError(503, f"all {self.max_sessions} play sessions are busy: try again shortly")
            gone.append(free[0][1])
        return [self._held.pop(k) for k in gone]

    def _get(self, sid: Any) -> _Held:
        with self._lock:
            held = self._held.get(sid) if isinstance(sid, str) else None
        if held is None:
            raise PlayRequestError(404, "no such play session (closed, or idle too long): start a new one")
        return held

    def new(self, body: Mapping[str, Any]) -> dict[str, Any]:
        env_id = body.get("env_id")
        if not isinstance(env_id, str) or env_id not in self.env_ids:
            raise PlayRequestError(400, f"env_id must be one of the {len(self.env_ids)} envs /api/play/envs lists")
        session = self.new_session(env_id, dict(self.env_kwargs.get(env_id, {})))
        view = session.reset(body.get("seed"))
        if view.get("error") and not view.get("started"):
            session.close()
            raise PlayRequestError(400, view["error"])
        sid = secrets.token_urlsafe(12)
        with self._lock:
            closing = self._evict(time.monotonic())
            self._held[sid] = _Held(session)
        for h in closing:
            h.session.close()
        return {"session": sid, "view": view}

    def _with(self, body: Mapping[str, Any], fn: Callable[[_Held], dict[str, Any]]) -> dict[str, Any]:
        held = self._get(body.get("session"))
        if not held.lock.acquire(timeout=30):
            raise PlayRequestError(409, "this play session is busy with another request")
        try:
            held.used = time.monotonic()
            return fn(held)
        except ValueError as e:  # the session's PlayError: what the client asked cannot be done
            raise PlayRequestError(400, str(e)) from None
        finally:
            held.lock.release()

    def step(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._with(body, lambda h: {"view": h.session.step(body.get("action"))})

    def undo(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._with(body, lambda h: {"view": h.session.undo()})

    def reset(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._with(body, lambda h: {"view": h.session.reset(body.get("seed"))})

    def save(self, body: Mapping[str, Any]) -> dict[str, Any]:
        def save(h: _Held) -> dict[str, Any]:
            h.saves += 1
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", h.session.env_id).strip("_")
            path = self.save_dir / f"play-{name}-{body['session'][:8]}-{h.saves}.jsonl"
            self.save_dir.mkdir(parents=True, exist_ok=True)
            return {"saved": h.session.save(path), "view": h.session.view()}

        return self._with(body, save)

    def close_session(self, body: Mapping[str, Any]) -> dict[str, Any]:
        sid = body.get("session")
        with self._lock:
            held = self._held.pop(sid, None) if isinstance(sid, str) else None
        if held is not None:
            held.session.close()
        return {"closed": held is not None}

    def close(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for h in held:
            h.session.close()

    def listing(self) -> dict[str, Any]:
        return {"envs": list(self.env_ids), "save_dir": str(self.save_dir)}

    def handlers(self) -> dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]]:
        """POST path -> handler of the JSON body."""
        return {"/api/play/new": self.new, "/api/play/step": self.step, "/api/play/undo": self.undo,
                "/api/play/reset": self.reset, "/api/play/save": self.save,
                "/api/play/close": self.close_session}  # fmt: skip


def same_origin(headers: Mapping[str, str]) -> bool:
    """Whether a request's own headers say it comes from the page itself: an ``Origin`` naming the request's
    ``Host`` (or none, as from a script), and ``Sec-Fetch-Site`` ``same-origin`` or ``none`` (or absent).

    >>> same_origin({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8765"}), same_origin({"host": "a:1",
    ...     "origin": "http://evil.example"}), same_origin({"host": "a:1", "sec-fetch-site": "cross-site"})
    (True, False, False)
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    return origin.partition("://")[2] == headers.get("host", "")
