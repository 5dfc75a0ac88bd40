"""A blocking MCP client over one session (stdio command or streamable-HTTP URL), for a synchronous env.

The session lives in its own event loop on a daemon thread, opened on first use and kept until :meth:`close`.
Every call has a deadline; a server that hangs, crashes or answers junk raises :class:`ToolServerError` (a message
for the agent), never blocks past the deadline. A broken session is closed and reopened on the next call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MCPToolClient", "ServerSpec", "ToolServerError"]


class ToolServerError(RuntimeError):
    """The tool server could not answer (its message is shown to the agent)."""


@dataclass(frozen=True)
class ServerSpec:
    """Where the tools are: ``command`` (an argv started over stdio) or ``url`` (streamable HTTP), one of them;
    ``headers`` go with HTTP requests (a bearer token, say)."""

    command: tuple[str, ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("give the tool server as command (an argv list) or url, exactly one")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, got {self.url[:80]!r}")
        if any(not isinstance(a, str) for a in self.command):
            raise ValueError("command must be a list of strings (an argv)")


@dataclass
class _Live:
    session: Any
    stop: asyncio.Event
    task: asyncio.Future[Any]


@dataclass
class MCPToolClient:
    """One MCP client session to ``spec``'s server (blocking calls with deadlines; thread-safe)."""

    spec: ServerSpec
    connect_timeout: float = 30.0
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _live: _Live | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    # -- the loop and the session ------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-tools-client", daemon=True)
            self._thread.start()
        return self._loop

    def _run(self, coro: Any, timeout: float) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError from None

    async def _open(self) -> _Live:
        from mcp.client.session import ClientSession

        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()

        async def hold() -> None:
            try:
                with open(os.devnull, "w") as errlog:  # a stdio server's stderr is not the agent's business
                    async with self._transport(errlog) as streams, ClientSession(*streams) as session:
                        await session.initialize()
                        ready.set_result(session)
                        await stop.wait()
            except BaseException as e:
                if not ready.done():
                    ready.set_exception(ToolServerError(f"cannot start the tool server ({_why(e)})"))

        task = asyncio.ensure_future(hold())
        try:
            session = await ready
        except BaseException:
            task.cancel()
            raise
        return _Live(session, stop, task)

    def _transport(self, errlog: Any) -> Any:
        if self.spec.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = dict(self.spec.headers)
            client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
            return _closing(client, streamable_http_client(self.spec.url, http_client=client))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.spec.command[0], args=list(self.spec.command[1:]),
                                       cwd=self.spec.cwd, encoding_error_handler="replace")  # fmt: skip
        return stdio_client(params, errlog=errlog)

    def _session(self) -> Any:
        if self._live is None:
            try:
                self._live = self._run(self._open(), self.connect_timeout)
            except TimeoutError:
                raise ToolServerError(f"the tool server did not start within {self.connect_timeout:g} s") from None
        return self._live.session

    def _drop(self) -> None:
        live, self._live = self._live, None
        if live is not None and self._loop is not None:

            async def stop() -> None:
                live.stop.set()
                try:
                    await asyncio.wait_for(asyncio.shield(live.task), 5.0)
                except BaseException:
                    live.task.cancel()

            with contextlib.suppress(Exception):  # closing must not raise
                self._run(stop(), 10.0)

    # -- calls -------------------------------------------------------------------------------------------
    def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        """``[{"name", "description", "input_schema"}]`` of the server's tools (ToolServerError if it fails)."""
        with self._lock:
            session = self._session()
            try:
                result = self._run(session.list_tools(), timeout)
            except TimeoutError:
                self._drop()
                raise ToolServerError(f"listing the tools took longer than {timeout:g} s") from None
            except Exception as e:
                self._drop()
                raise ToolServerError(f"listing the tools failed ({_why(e)})") from None
            return [{"name": t.name, "description": t.description or "", "input_schema": dict(t.input_schema)}
                    for t in result.tools]  # fmt: skip

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> tuple[str, bool]:
        """``(text, is_error)`` of one call: the result's content blocks as text (structured content as JSON when
        there is no text). ToolServerError when the server hangs past ``timeout``, crashes or answers junk."""
        with self._lock:
            session = self._session()
            try:
                result = self._run(session.call_tool(name, arguments, read_timeout_seconds=timeout), timeout + 2.0)
            except TimeoutError:
                raise ToolServerError(f"{name} took longer than {timeout:g} s and was abandoned") from None
            except Exception as e:
                if "timed out" in str(e).lower() or "timeout" in type(e).__name__.lower():
                    raise ToolServerError(f"{name} took longer than {timeout:g} s and was abandoned") from None
                if _is_tool_error(e):
                    raise ToolServerError(f"{name} was refused by the server ({_why(e)})") from None
                self._drop()
                raise ToolServerError(f"the tool server failed during {name} ({_why(e)})") from None
            return _result_text(result), bool(getattr(result, "is_error", False))

    def close(self) -> None:
        """Close the session (the server process ends with it) and stop the loop."""
        with self._lock:
            self._drop()
            if self._loop is not None:
                with contextlib.suppress(Exception):  # what is still pending (a start that timed out) ends first
                    self._run(_cancel_pending(), 10.0)
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None:
                    self._thread.join(5.0)
                if not self._loop.is_running():
                    self._loop.close()
                self._loop = self._thread = None


async def _cancel_pending() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=5.0)


def _is_tool_error(e: BaseException) -> bool:
    """A JSON-RPC error answer (the server is alive and said no), not a dead transport (code -32000, "connection
    closed")."""
    from mcp.shared.exceptions import MCPError

    return isinstance(e, MCPError) and e.code != -32000 and "connection closed" not in str(e).lower()


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _result_text(result: Any) -> str:
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        else:
            parts.append(f"[{kind} content omitted]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


class _closing:
    """Enter ``inner`` and close ``client`` after it (an HTTP client the transport does not own)."""

    def __init__(self, client: Any, inner: Any) -> None:
        self.client, self.inner = client, inner

    async def __aenter__(self) -> Any:
        return await self.inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.inner.__aexit__(*exc)
        finally:
            await self.client.aclose()


def _argv(command: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(command, str):
        raise ValueError("command must be an argv list, not a shell string")
    return tuple(sys.executable if a == "{python}" else a for a in command)
