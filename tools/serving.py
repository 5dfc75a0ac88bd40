"""Serving over HTTP safely: loopback unless a bearer token is set, tokens compared in constant time, and uvicorn
connections with read deadlines and size limits. Shared by the model server (``tools/openai_server.py``) and the
retrieval server (``tools/retrieval/server.py``); the env server (``agentgym/serving/server.py``) builds on it.

>>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
(True, False)
>>> check_bind("0.0.0.0", token="s3cret")  # beyond loopback only with a token (else a one-line ValueError)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: The environment variable the command lines read the bearer token from (so it need not appear in ``ps``).
TOKEN_ENV = "AGENTGYM_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``); any other name is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse (ValueError, one line) to serve beyond loopback without a bearer token."""
    if not token and not is_loopback(host):
        raise ValueError(
            f"refusing to serve on {host!r} (beyond loopback) without a bearer token: set {TOKEN_ENV} "
            "(or pass --token / token=), or bind to 127.0.0.1"
        )


def bearer_checker(token: str | None) -> Any:
    """``ok(authorization_header) -> bool`` comparing ``Bearer <token>`` in constant time (always true without one).

    The scheme is case-insensitive (RFC 9110: ``bearer``, ``BEARER`` and ``Bearer`` are one scheme); the token is
    compared exactly.

    >>> ok = bearer_checker("s3cret")
    >>> ok("Bearer s3cret"), ok("bearer s3cret"), ok("Bearer S3CRET"), ok(None)
    (True, True, False, False)
    """
    if token is None:
        return lambda header: True
    if not token:
        raise ValueError("the bearer token must not be empty")
    want = hashlib.sha256(token.encode()).digest()

    def ok(header: str | None) -> bool:  # hashing first: the comparison does not depend on the lengths either
        scheme, _, credentials = (header or "").strip().partition(" ")
        given = hashlib.sha256(credentials.strip().encode("latin-1", "replace")).digest()
        return hmac.compare_digest(given, want) and scheme.lower() == "bearer"

    return ok


def peer_key(host: str) -> str:
    """Whom a connection from ``host`` counts against: the address itself, an IPv6 address's /64 network (one host
    usually holds a whole /64), an IPv4-mapped IPv6 address's IPv4 address.

    >>> peer_key("127.0.0.2"), peer_key("2001:db8::1"), peer_key("2001:db8::2:1"), peer_key("::ffff:10.0.0.1")
    ('127.0.0.2', '2001:db8::/64', '2001:db8::/64', '10.0.0.1')
    """
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


def fair_share_fits(mine: int, total: int, capacity: int, per_client: int, reserve: int) -> bool:
    """Whether a client holding ``mine`` of ``total`` held units (connections, sessions, workers) may take one more:
    under ``capacity`` in all, under its ``per_client`` share, and the last ``reserve`` units only for a client
    holding none (so a few clients together cannot take everything: a newcomer still gets one).

    >>> fair_share_fits(0, 7, 8, 2, 2), fair_share_fits(1, 6, 8, 2, 2), fair_share_fits(1, 5, 8, 2, 2)
    (True, False, True)
    """
    return total < capacity and mine < per_client and (mine == 0 or capacity - total > reserve)


@dataclass(eq=False)
class ConnectionLimits:
    """The open connections of one server, capped in all (``max_connections``) and per peer (``per_peer``, an
    address as :func:`peer_key` groups them), the last ``reserve`` for peers holding none.

    A connection is *idle* when no request of it is in flight (it sent nothing yet, part of a request's headers, or
    it is kept alive between requests). A new connection over a cap takes the place of an idle one (its own peer's
    oldest, else the oldest of the peer holding most; connections that never sent a request before kept-alive
    ones); when every connection has a request in flight it is
    *refused*: its request is answered 503 and the connection closed (at most ``max_refused`` such connections are
    kept for that; more are dropped at once). So connections that send nothing never stop a client's request.
    """

    max_connections: int = 1024
    per_peer: int | None = None
    reserve: int | None = None
    max_refused: int | None = None
    #: peer -> its admitted connections, oldest first (each a protocol with ``idle()`` and ``evict()``).
    peers: dict[str, dict[Any, None]] = field(default_factory=dict)
    total: int = 0
    refused: int = 0
    #: Counters for ``/health`` and tests: idle connections closed to make room, connections refused.
    evicted_count: int = 0
    refused_count: int = 0

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        self.per_peer = max(1, self.max_connections // 4) if self.per_peer is None else self.per_peer
        self.reserve = self.max_connections // 8 if self.reserve is None else self.reserve
        self.max_refused = max(1, self.max_connections // 8) if self.max_refused is None else self.max_refused
        if self.per_peer < 1 or not 0 <= self.reserve < self.max_connections or self.max_refused < 0:
            raise ValueError(f"need per_peer >= 1 and 0 <= reserve < max_connections, got {self.per_peer}, "
                             f"{self.reserve}, {self.max_connections}")  # fmt: skip

    def stats(self) -> dict[str, int]:
        return {"open": self.total, "max_connections": self.max_connections, "max_connections_per_peer":
                int(self.per_peer or 0), "peers": len(self.peers), "evicted_idle": self.evicted_count,
                "refused": self.refused_count}  # fmt: skip

    def admit(self, peer: str, conn: Any) -> bool:
        """Count ``conn`` against ``peer`` if the caps allow, closing idle connections to make room; False when
        every connection that could give way has a request in flight."""
        assert self.per_peer is not None and self.reserve is not None
        mine = self.peers.get(peer, {})
        for _ in range(self.reserve + 2):
            if fair_share_fits(len(mine), self.total, self.max_connections, self.per_peer, self.reserve):
                self.peers.setdefault(peer, {})[conn] = None
                self.total += 1
                return True
            victim = self._idle(mine) if len(mine) >= self.per_peer else self._idle_of_heaviest()
            if victim is None:
                return False
            self.release(victim[0], victim[1])
            self.evicted_count += 1
            victim[1].evict()
        return False

    def release(self, peer: str, conn: Any) -> None:
        """``conn`` is closed (or no longer an HTTP connection): it no longer counts."""
        mine = self.peers.get(peer)
        if mine is not None and conn in mine:
            del mine[conn]
            self.total -= 1
            if not mine:
                del self.peers[peer]

    def _idle(self, conns: dict[Any, None]) -> tuple[str, Any] | None:
        """The oldest connection that never sent a request, else the oldest idle one (a kept-alive connection may
        have a request on its way: it goes last)."""
        kept_alive = None
        for conn in conns:
            if conn.idle():
                if conn.fresh():
                    return conn.peer, conn
                kept_alive = kept_alive or (conn.peer, conn)
        return kept_alive

    def _idle_of_heaviest(self) -> tuple[str, Any] | None:
        for _, conns in sorted(self.peers.items(), key=lambda kv: -len(kv[1])):
            found = self._idle(conns)
            if found is not None:
                return found
        return None


@functools.cache
def guarded_h11_protocol(header_timeout: float, body_timeout: float) -> type:
    """uvicorn's h11 protocol with read deadlines (uvicorn has none: a client sending partial headers, or nothing,
    holds its connection for ever).

    The request headers must be complete within ``header_timeout`` seconds of the connection being made, or of the
    first byte of the next request on a kept-alive connection (trickling bytes does not extend it), and the body
    within ``body_timeout`` seconds of the headers, unless the app has started answering; otherwise the connection
    is closed (an app waiting for the body sees a disconnect). Idle kept-alive connections still close after
    uvicorn's ``timeout_keep_alive``.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    if not (header_timeout > 0 and body_timeout > 0):
        raise ValueError(f"timeouts must be positive, got {header_timeout!r} and {body_timeout!r}")

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._read_timer: asyncio.TimerHandle | None = None
            self._timed_cycle: Any = None

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._read_timer = self.loop.call_later(seconds, self._read_timed_out)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _track(self) -> None:
            cycle = self.cycle
            if cycle is None:
                return  # still reading the first request's headers: the deadline armed at connection_made holds
            if cycle is not self._timed_cycle:  # a request's headers are complete
                self._timed_cycle = cycle
                self._disarm()
                if cycle.more_body and not cycle.response_started:
                    self._arm(body_timeout)
            elif not cycle.response_complete and (not cycle.more_body or cycle.response_started):
                self._disarm()  # the body is in, or the app is answering: no read deadline any more

        def _read_timed_out(self) -> None:
            self._read_timer = None
            cycle = self.cycle
            if cycle is not None and cycle.response_started and not cycle.response_complete:
                return
            if not self.transport.is_closing():
                self.logger.debug("closing a connection that did not send its request in time")
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            sock = transport.get_extra_info("socket")  # asyncio sets TCP_NODELAY only on sockets it made itself:
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):  # else each body waits ~40 ms
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)
            self._arm(header_timeout)

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._disarm()  # the connection is a WebSocket now: no HTTP read deadline
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if self._read_timer is None and (cycle is None or cycle.response_complete):
                self._arm(header_timeout)  # the first bytes of the next request on a kept-alive connection
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            self._disarm()
            super().on_response_complete()
            self._track()  # a pipelined request may have started
            cycle = self.cycle
            if cycle is not None and cycle.response_complete and self.conn.trailing_data[0]:
                self._arm(header_timeout)  # part of the next request is already here

    GuardedH11Protocol.__qualname__ = GuardedH11Protocol.__name__ = (
        f"GuardedH11Protocol(header_timeout={header_timeout}, body_timeout={body_timeout})"
    )
    return GuardedH11Protocol


def limited_h11_protocol(header_timeout: float, body_timeout: float, limits: ConnectionLimits) -> type:
    """:func:`guarded_h11_protocol` whose connections count against ``limits`` (:class:`ConnectionLimits`): one
    class per server, as ``limits`` is that server's. A refused connection's request is answered 503 ``busy``
    (``{"detail", "error"}``) and the connection closed; a WebSocket no longer counts once upgraded (the app bounds
    its sessions)."""
    import h11

    base = guarded_h11_protocol(header_timeout, body_timeout)
    body = json.dumps({"detail": f"the server has every connection it takes ({limits.max_connections}, "
                       f"{limits.per_peer} per client address) busy with a request in flight: retry later",
                       "error": "busy"}).encode()  # fmt: skip
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"), (b"retry-after", b"1")]  # fmt: skip

    async def busy(scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": head})
        await send({"type": "http.response.body", "body": body})

    class LimitedH11Protocol(base):  # type: ignore[misc, valid-type]
        peer = ""
        counted = False  # holds a place in ``limits``
        waiting = False  # refused at connect: holds one of the ``max_refused`` places until its request comes
        rejected = False  # its request is answered 503

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.peer = peer_key(self.client[0]) if self.client else "unknown"
            if limits.admit(self.peer, self):
                self.counted = True
                return
            limits.refused_count += 1
            if limits.refused >= (limits.max_refused or 0):
                transport.abort()
                return
            limits.refused += 1
            self.waiting = True

        def idle(self) -> bool:
            """No request in flight: nothing sent yet, a request's headers still coming, or kept alive."""
            return self.cycle is None or self.cycle.response_complete

        def fresh(self) -> bool:
            """No request of this connection has reached the app yet."""
            return self.cycle is None

        def evict(self) -> None:
            """Close this idle connection to make room for another (``limits`` no longer counts it)."""
            self.counted = False
            if not self.transport.is_closing():
                with contextlib.suppress(h11.LocalProtocolError):
                    self.conn.send(h11.ConnectionClosed())
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.waiting:  # its request starts: is there room now?
                self.waiting = False
                limits.refused -= 1
                if limits.admit(self.peer, self):
                    self.counted = True
                else:
                    self.rejected = True
                    self.app = busy
            super().data_received(data)

        def handle_websocket_upgrade(self, event: Any) -> None:
            if self.rejected:
                self.transport.write(self.conn.send(h11.Response(status_code=503, headers=head, reason=b"Busy")))
                self.transport.write(self.conn.send(h11.Data(data=body)))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
                self.transport.close()
                return
            self._release()
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            self._release()
            super().connection_lost(exc)

        def _release(self) -> None:
            if self.counted:
                self.counted = False
                limits.release(self.peer, self)
            if self.waiting:
                self.waiting = False
                limits.refused -= 1

    return LimitedH11Protocol


def uvicorn_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    header_timeout: float = 10.0,
    body_timeout: float = 60.0,
    timeout_keep_alive: int = 5,
    limit_concurrency: int | None = 256,
    max_header_bytes: int = 16 * 1024,
    connection_limits: ConnectionLimits | None = None,
    **kwargs: Any,
) -> Any:
    """A ``uvicorn.Config`` for ``app`` with bounded connections (the servers in agentgym.tools all use it).

    ``header_timeout`` / ``body_timeout``: see :func:`guarded_h11_protocol` (the h11 protocol is always used, so
    the deadlines hold whether or not httptools is installed); ``timeout_keep_alive`` closes idle kept-alive
    connections; ``limit_concurrency`` answers 503 to requests arriving while that many connections or tasks are
    open; ``max_header_bytes`` bounds the request line and headers (400 beyond). ``connection_limits`` replaces
    ``limit_concurrency`` with :class:`ConnectionLimits` (caps per client address, idle connections closed first,
    503 only when the connections are busy). uvicorn's ``proxy_headers`` is off unless asked for: it would take a
    loopback client's ``X-Forwarded-For`` as its address (the env server names a trusted proxy's header itself,
    ``--client-key header:NAME``). Other keywords go to ``uvicorn.Config``.
    """
    import uvicorn

    kwargs.setdefault("proxy_headers", False)

    if connection_limits is None:
        http = guarded_h11_protocol(float(header_timeout), float(body_timeout))
    else:
        http = limited_h11_protocol(float(header_timeout), float(body_timeout), connection_limits)
        limit_concurrency = None
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=http,
        timeout_keep_alive=timeout_keep_alive,
        limit_concurrency=limit_concurrency,
        h11_max_incomplete_event_size=max_header_bytes,
        **kwargs,
    )


def run_uvicorn(config: Any) -> None:
    """Serve ``config`` (a ``uvicorn.Config``) in this thread until interrupted, as ``uvicorn.run`` does (exit 3
    when the server could not start)."""
    import uvicorn

    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise SystemExit(3)


class BackgroundServer:
    """Run an ASGI app with uvicorn on a loopback port in a daemon thread (for tests and notebooks).

    ``port=0`` picks a free port (bound before the thread starts, so there is no race); ``url`` is
    ``http://host:port``. ``stop()`` (or leaving the ``with`` block) shuts the server down and joins the thread.
    Other keywords (``header_timeout``, ``limit_concurrency``, ...) go to :func:`uvicorn_config`.

    >>> with BackgroundServer(app) as server:                  # doctest: +SKIP
    ...     httpx.get(server.url + "/health")
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, graceful_timeout: int = 2, **config: Any
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.graceful_timeout = graceful_timeout
        self.config = config
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        import uvicorn

        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn_config(
            self.app,
            **{
                "log_level": "warning",
                "lifespan": "off",
                "access_log": False,
                "timeout_graceful_shutdown": self.graceful_timeout,
                **self.config,
            },
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=self.graceful_timeout + 10)
        self._server = self._thread = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
