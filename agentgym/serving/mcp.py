"""One tool env served as an MCP server (``agentgym serve --mcp ENV_ID``): any MCP client drives an episode.

The server holds one env instance, built by the operator (env id and constructor arguments). Its MCP tools are the
env's tools at this point of the episode (name, description and JSON-schema input from the env's own schemas:
BFCL's ``offered_tools()``, ToolUse's world schemas less the withheld ones, CodeExec's and SQL's ``tool_schemas()``,
MCPTools' server tools), plus two control tools:

- ``reset``: start an episode (``seed``, ``task_index`` or ``task_id``, and the env's own reset ``options``); the
  result is the episode's first messages (system prompt and user request).
- ``reply``: a plain-text turn to the user (no tool call): in ToolUse and BFCL this ends the user's request and
  brings the next one (or ends the episode); in CodeExec it carries ``<answer>...</answer>``. The env's own
  finishing tools (``submit_answer``, ``submit_query``) are ordinary tools.

A call of an env tool renders the action the env's prompt asks for (``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>``), steps the env and answers the observation's text; ``structured_content`` carries ``reward``,
``terminated``, ``truncated``, ``turn``, ``action_valid``, ``parse_error`` and the verified ``success``,
``correct`` and ``progress`` where the env reports them. When the offered tools change (BFCL's next user turn, a
withheld function enabled) the server sends ``notifications/tools/list_changed``. A bad call (unknown tool,
arguments that are not an object, an action longer than the env accepts, a step after the end) is an error result
with a message, never a crash; results are cut at ``max_result_chars``.

Transports: stdio (the default) and streamable HTTP (``/mcp``), bound to loopback unless a bearer token is set
(the env server's rule, :func:`agentgym.tools.serving.check_bind`, and its guard: 401 without the token, 413 past
``max_body_bytes``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.contract.env import AgentEnv

__all__ = ["CONTROL_TOOLS", "EnvMCPServer", "env_tool_schemas", "render_call", "serve_mcp"]

#: The control tools every served env has besides its own (an env tool of the same name hides one).
CONTROL_TOOLS = ("reset", "reply")
#: ``info`` keys copied into a result's structured content when present (the env's verified verdicts).
VERDICT_KEYS = ("success", "correct", "progress", "task_id")
MAX_RESULT_CHARS = 16_000

_RESET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seed": {"type": ["integer", "null"], "description": "seeds the task stream (a task is drawn from it)"},
        "task_index": {"type": "integer", "minimum": 0, "description": "play this task"},
        "task_id": {"type": "string", "description": "play the task with this id"},
        "options": {"type": "object", "description": "the env's own reset options (e.g. ToolUse's variant)"},
    },
    "additionalProperties": False,
}
_REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "the message to the user"}},
    "required": ["text"],
    "additionalProperties": False,
}


def env_tool_schemas(env: AgentEnv) -> dict[str, dict[str, Any]]:
    """``{name: OpenAI function schema}`` of the tools ``env`` offers now (empty for an env without tools).

    >>> import agentgym, gymnasium as gym
    >>> env = gym.make("agentgym/SQL-v0").unwrapped
    >>> sorted(env_tool_schemas(env))[:2]
    ['describe_table', 'list_tables']
    """
    offered = getattr(env, "offered_tools", None)
    if callable(offered):
        return dict(offered())
    if getattr(env, "world", None) is not None and callable(getattr(env, "_schemas", None)):  # ToolUse
        disabled = set(getattr(env, "_ep", {}).get("disabled", ()))
        return {n: s for n, s in env._schemas().items() if n not in disabled}  # type: ignore[attr-defined]
    module_schemas = getattr(sys.modules.get(type(env).__module__), "tool_schemas", None)
    return dict(module_schemas()) if callable(module_schemas) else {}


def render_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The action text of one tool call in the suite's format.

    >>> render_call("add", {"a": 1})
    '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    """
    return "<tool_call>" + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False) + "</tool_call>"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 60] + f"\n[... {len(text) - limit + 60} characters cut ...]"


def _observation_text(obs: list[Mapping[str, Any]]) -> str:
    """An observation's messages as one text: tool results as they are, other messages tagged with their role."""
    parts = []
    for m in obs:
        content = m.get("content", "")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
        parts.append(text if m.get("role") == "tool" else f"[{m.get('role', '?')}] {text}")
    return "\n".join(parts) if parts else "(no new messages)"


def _jsonable(value: Any, limit: int = 4000) -> Any:
    """``value`` as JSON data (unknown types as text), or its text cut at ``limit`` when larger."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return json.loads(text) if len(text) <= limit else text[:limit]


@dataclass
class Outcome:
    """What one control or env call answers: the text, the structured content and whether it is an error."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)
    error: bool = False


class EnvMCPServer:
    """The MCP face of one env instance (thread-safe: calls are serialised).

    >>> import agentgym
    >>> srv = EnvMCPServer("agentgym/ToolUse-v0", {"world": "bank"})
    >>> srv.call("reset", {"task_index": 3}).data["task_id"]
    'bank/3'
    >>> out = srv.call("transfer", {"source": "savings", "target": "checking", "amount": 302.5})
    >>> out.text, out.data["reward"], out.error
    ('"moved 302.50 from savings to checking"', 0.0, False)
    >>> srv.call("transfer", "junk").error
    True
    >>> srv.close()
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                 max_result_chars: int = MAX_RESULT_CHARS) -> None:  # fmt: skip
        self.env_id = env_id
        self.env = gym.make(env_id, **dict(env_kwargs or {}))
        base = self.env.unwrapped
        if not isinstance(base, AgentEnv):
            raise ValueError(f"{env_id} is not an agentgym env")
        self.base: AgentEnv = base
        self.max_result_chars = max_result_chars
        self._lock = threading.Lock()
        self._started = False
        self._done = True

    # -- tools ------------------------------------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        """The MCP tools now: ``{"name", "description", "input_schema"}`` each, the env's first."""
        with self._lock:
            return self._tools()

    def _tools(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        schemas = env_tool_schemas(self.base) if self._started else {}
        for name, schema in schemas.items():
            fn = schema.get("function", schema)
            params = fn.get("parameters") or {"type": "object", "properties": {}}
            if params.get("type") != "object":
                params = {"type": "object", "properties": {}}
            out.append({"name": name, "description": str(fn.get("description", "")), "input_schema": dict(params)})
        if "reset" not in schemas:
            out.append({"name": "reset", "input_schema": _RESET_SCHEMA,
                        "description": f"Start an episode of {self.env_id}; answers its first messages."})  # fmt: skip
        if "reply" not in schemas:
            out.append({"name": "reply", "input_schema": _REPLY_SCHEMA,
                        "description": "Reply to the user in plain text (no tool call): ends the current request "
                        "where the env's prompt says a plain reply does."})  # fmt: skip
        return out

    def tools_digest(self) -> str:
        """A digest of :meth:`tools` (it changes when the offered tools do)."""
        return hashlib.blake2b(json.dumps(self.tools(), sort_keys=True).encode(), digest_size=8).hexdigest()

    # -- calls ------------------------------------------------------------------------------------------
    def call(self, name: Any, arguments: Any) -> Outcome:
        """Run one MCP tool call; anything a client sends becomes an :class:`Outcome` (an error one if bad)."""
        if not isinstance(name, str) or len(name) > 200:
            return Outcome("Error: the tool name must be a string of at most 200 characters.", error=True)
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return Outcome(f"Error: arguments must be a JSON object, got {type(arguments).__name__}.", error=True)
        with self._lock:
            try:
                return self._call(name, dict(arguments))
            except Exception as e:  # an env failure must not take the server down
                return Outcome(f"Error: {self.env_id} failed ({type(e).__name__}: {str(e)[:300]}).", error=True)

    def _call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        env_tools = set(env_tool_schemas(self.base)) if self._started else set()
        if name == "reset" and name not in env_tools:
            return self._reset(arguments)
        if not self._started or self._done:
            return Outcome("Error: no episode is running: call reset first.", error=True)
        if name == "reply" and name not in env_tools:
            text = arguments.get("text")
            if set(arguments) != {"text"} or not isinstance(text, str):
                return Outcome("Error: reply takes one argument, text (a string).", error=True)
            action = text
        elif name in env_tools:
            try:
                action = render_call(name, arguments)
            except (TypeError, ValueError) as e:
                return Outcome(f"Error: arguments are not JSON ({e}).", error=True)
        else:
            available = sorted(t["name"] for t in self._tools())
            return Outcome(f"Error: unknown tool {name!r}; available: {available}.", error=True)
        if len(action) > self.base.max_action_chars:
            return Outcome(f"Error: the call is {len(action)} characters; this env accepts at most "
                           f"{self.base.max_action_chars}.", error=True)  # fmt: skip
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._done = bool(terminated or truncated)
        data = {"reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
                "turn": info.get("turn"), "action_valid": bool(info.get("action_valid", True)),
                "parse_error": info.get("parse_error")}  # fmt: skip
        data.update({k: _jsonable(info[k]) for k in VERDICT_KEYS if k in info})
        if "metrics" in info:
            data["metrics"] = _jsonable(info["metrics"])
        text = _observation_text(obs)
        if self._done:
            text += f"\n[episode ended: reward {float(reward):g}, success {info.get('success')}]"
        return Outcome(_cut(text, self.max_result_chars), data)

    def _reset(self, arguments: dict[str, Any]) -> Outcome:
        unknown = sorted(set(arguments) - set(_RESET_SCHEMA["properties"]))
        if unknown:
            return Outcome(f"Error: unknown reset argument(s) {unknown}; accepted: {list(_RESET_SCHEMA['properties'])}",
                           error=True)  # fmt: skip
        seed = arguments.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            return Outcome("Error: seed must be a non-negative integer or null.", error=True)
        options = arguments.get("options") or {}
        if not isinstance(options, Mapping):
            return Outcome("Error: options must be a JSON object.", error=True)
        options = dict(options)
        for key in ("task_index", "task_id"):
            if key in arguments:
                options[key] = arguments[key]
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except ValueError as e:  # a bad option or task: the client's error
            return Outcome(f"Error: {str(e)[:500]}", error=True)
        self._started, self._done = True, False
        data = {"task_id": info.get("task_id"), "turn": 0, "num_tasks": int(self.base.num_tasks),
                "reset_options": list(self.base.reset_options)}  # fmt: skip
        return Outcome(_cut(_observation_text(obs), self.max_result_chars), data)

    def close(self) -> None:
        with self._lock:
            self.env.close()

    # -- the MCP server ---------------------------------------------------------------------------------
    def mcp_server(self) -> Any:
        """A low-level ``mcp`` ``Server`` whose handlers are this env's (calls run in a worker thread)."""
        import anyio
        import mcp_types as types
        from mcp.server.lowlevel.server import NotificationOptions, Server

        class _Server(Server):  # announces tools/list_changed on every transport (HTTP builds its own options)
            def create_initialization_options(self, notification_options: Any = None, *a: Any, **k: Any) -> Any:
                return super().create_initialization_options(notification_options or NotificationOptions(
                    tools_changed=True), *a, **k)  # fmt: skip

        async def list_tools(ctx: Any, params: Any) -> Any:
            tools = await anyio.to_thread.run_sync(self.tools)
            return types.ListToolsResult(tools=[types.Tool(**t) for t in tools])

        async def call_tool(ctx: Any, params: Any) -> Any:
            before = await anyio.to_thread.run_sync(self.tools_digest)
            out = await anyio.to_thread.run_sync(self.call, params.name, params.arguments)
            if await anyio.to_thread.run_sync(self.tools_digest) != before:
                await ctx.session.send_tool_list_changed()
            return types.CallToolResult(content=[types.TextContent(text=out.text)],
                                        structured_content=out.data or None, is_error=out.error)  # fmt: skip

        hint = f"Tools of the agentgym env {self.env_id}: call reset to start an episode."
        return _Server(f"agentgym {self.env_id}", on_list_tools=list_tools, on_call_tool=call_tool, instructions=hint)


async def run_stdio(srv: EnvMCPServer) -> None:
    """Serve ``srv`` over this process's stdin/stdout until the client leaves."""
    from mcp.server.stdio import stdio_server

    server = srv.mcp_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(srv: EnvMCPServer, *, host: str = "127.0.0.1", token: str | None = None,
             max_body_bytes: int = 1 << 20) -> Any:  # fmt: skip
    """The streamable-HTTP ASGI app of ``srv`` (path ``/mcp``) behind the env server's guard (bearer token, body
    size)."""
    from agentgym.serving.server import RequestGuard

    server = srv.mcp_server()
    app = server.streamable_http_app(host=host, max_request_body_size=max_body_bytes, max_sessions=64)
    return RequestGuard(app, token=token, max_body_bytes=max_body_bytes)


def serve_mcp(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, transport: str = "stdio",
              host: str = "127.0.0.1", port: int = 8000, token: str | None = None, max_body_bytes: int = 1 << 20,
              log_level: str = "warning") -> None:  # fmt: skip
    """Serve ``env_id`` (built with the operator's ``env_kwargs``) as an MCP server until interrupted or, on stdio,
    until the client leaves. HTTP binds loopback by default; any other host needs ``token`` (ValueError)."""
    from agentgym.tools.serving import check_bind, run_uvicorn, uvicorn_config

    if transport not in ("stdio", "http"):
        raise ValueError(f"transport must be 'stdio' or 'http', got {transport!r}")
    if transport == "http":
        check_bind(host, token)
    srv = EnvMCPServer(env_id, env_kwargs)
    try:
        if transport == "stdio":
            import anyio

            anyio.run(run_stdio, srv)
        else:
            app = http_app(srv, host=host, token=token, max_body_bytes=max_body_bytes)
            run_uvicorn(uvicorn_config(app, host=host, port=port, log_level=log_level))
    finally:
        srv.close()
