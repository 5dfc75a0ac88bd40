"""MCPTools-v0: train on your own tools. The tools come from an external MCP server (a stdio command or a streamable
HTTP URL, both the operator's), the tasks from the operator (a JSONL file of ``{"id"?, "prompt", "answer"}`` lines,
or inline ``tasks``).

The system prompt lists the server's tools (``tools/list`` at each reset) as OpenAI function schemas between
``<tools>`` tags. An agent turn either calls tools (Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks, or an OpenAI assistant message as JSON) and gets one ``tool`` message per call, or ends the episode with a
plain reply holding ``<answer>...</answer>``, scored against the task's answer(s) with the suite's answer matching
(``agentgym.grading.answers``: ``em`` decides ``success`` and the ``outcome`` reward; ``f1`` is reported too).

Each call has a deadline (``call_timeout`` seconds) and its result is cut at ``max_output_chars``; a server that
hangs, crashes, refuses or answers junk becomes a ``tool`` message that says so, never an exception or a hang (a
crashed server is restarted on the next call). A call of a tool the server did not list, or with arguments that are
not an object, runs nothing and makes the step invalid. The server spec, the tasks and the caps are the operator's:
no client of the env server can set them (``public_args``), so nobody remote makes the env spawn a command or fetch
a URL. One MCP session per env, opened on first use and closed by ``close()``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import NoActionError, ParseError, ToolCall, parse_tag_action, parse_tool_turn
from agentgym.contract.trust import declare
from agentgym.envs.mcp_tools.client import MCPToolClient, ServerSpec, ToolServerError, _argv
from agentgym.grading.answers import score_answer

MAX_CALLS_PER_TURN = 8
#: Tasks at most, and bytes of a tasks file at most.
MAX_TASKS = 100_000
MAX_TASKS_BYTES = 64 << 20
MAX_ARGUMENT_CHARS = 16_000

SYSTEM = (
    "You are an assistant with tools. The functions you may call are listed as JSON schemas between <tools> and "
    "</tools>:\n<tools>\n{tools}\n</tools>\nTo call functions, put one JSON object per call in your turn, each inside "
    '<tool_call></tool_call> tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n'
    "</tool_call>\nEach result comes back as a tool message (cut at {limit} characters). When you know the answer, "
    "reply with <answer>your answer</answer>: that ends the episode."
)


def load_tasks(tasks: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tasks as ``{"id", "prompt", "answers"}`` records, from a JSONL path or a list (ValueError if malformed).

    >>> load_tasks([{"prompt": "2+2?", "answer": "4"}])
    [{'id': '0', 'prompt': '2+2?', 'answers': ['4']}]
    """
    if isinstance(tasks, str):
        with open(tasks, encoding="utf-8") as f:
            text = f.read(MAX_TASKS_BYTES + 1)
        if len(text) > MAX_TASKS_BYTES:
            raise ValueError(f"tasks file {tasks} is larger than {MAX_TASKS_BYTES} bytes")
        rows: list[Any] = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"tasks file {tasks} line {n}: not JSON ({e.msg})") from None
    else:
        rows = list(tasks)
    if not rows or len(rows) > MAX_TASKS:
        raise ValueError(f"give 1..{MAX_TASKS} tasks, got {len(rows)}")
    out, seen = [], set()
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(f"task {i}: expected an object with a non-empty 'prompt' string and an 'answer'")
        answer = row.get("answer", row.get("answers"))
        answers = [answer] if isinstance(answer, str) else answer
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise ValueError(f"task {i}: 'answer' must be a string or a non-empty list of strings")
        task_id = str(row.get("id", i))
        if task_id in seen:
            raise ValueError(f"task {i}: duplicate id {task_id!r}")
        seen.add(task_id)
        out.append({"id": task_id, "prompt": row["prompt"], "answers": list(answers)})
    return out


class MCPToolsEnv(AgentEnv):
    """Tool use over an external MCP server's tools (see the module docstring).

    Args:
        command: the server as an argv started over stdio (``"{python}"`` stands for this Python), or
        url: its streamable-HTTP endpoint (``headers``: sent with each request, e.g. a bearer token).
        tasks: a JSONL path of ``{"id"?, "prompt", "answer"}`` lines, or such records inline.
        call_timeout: seconds one tool call (or ``tools/list``) may take.
        max_output_chars: a tool result is cut to this many characters.
        connect_timeout: seconds the server has to start and answer ``initialize``.
        max_turns: agent turns before truncation.
    """

    #: Nothing beyond the base's: the server, its headers, the tasks and the caps are the operator's.
    public_args = declare(AgentEnv.public_args)

    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        tasks: str | Sequence[Mapping[str, Any]] | None = None,
        call_timeout: float = 10.0,
        max_output_chars: int = 4000,
        connect_timeout: float = 30.0,
        cwd: str | None = None,
        max_turns: int = 20,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if not 0 < call_timeout <= 3600 or not 0 < connect_timeout <= 3600:
            raise ValueError("call_timeout and connect_timeout must be in (0, 3600] seconds")
        if not 100 <= max_output_chars <= 1_000_000:
            raise ValueError(f"max_output_chars must be in 100..1000000, got {max_output_chars}")
        self.call_timeout = float(call_timeout)
        self.max_output_chars = int(max_output_chars)
        self._client: MCPToolClient | None = None
        self._tools: dict[str, dict[str, Any]] = {}
        self._ep: dict[str, Any] = {}
        self.tasks: list[dict[str, Any]] = []
        self.server: ServerSpec | None = None
        if importlib.util.find_spec("mcp") is None:
            self.unavailable_reason = "MCPTools-v0 needs the MCP Python SDK: pip install 'mcp>=2.3'"
        if command is None and url is None:  # the registered default: reset says what the operator must give
            self.unavailable_reason = (
                self.unavailable_reason
                or "MCPTools-v0 needs the operator's command= or url= (the MCP server) and tasks="
            )
            self.num_tasks = 1
            return
        self.server = ServerSpec(command=_argv(command or ()), url=url, headers=tuple((headers or {}).items()), cwd=cwd)
        if tasks is None:
            raise ValueError("give tasks= (a JSONL path or a list of {'prompt', 'answer'} records)")
        self.tasks = load_tasks(tasks)
        self.num_tasks = len(self.tasks)
        self._client = MCPToolClient(self.server, connect_timeout=float(connect_timeout))

    # -- tasks --------------------------------------------------------------------------------------
    def task_index_of(self, task_id: str) -> int:
        for i, t in enumerate(self.tasks):
            if t["id"] == task_id:
                return i
        raise ValueError(f"unknown task_id {task_id!r} ({len(self.tasks)} tasks)")

    def offered_tools(self) -> dict[str, dict[str, Any]]:
        """The server's tools at the last reset as OpenAI function schemas (name -> schema)."""
        return dict(self._tools)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        assert self._client is not None
        task = self.tasks[task_index]
        self._ep = {"task": task, "calls": 0, "failed_calls": 0}
        note = ""
        try:
            listed = self._client.list_tools(self.call_timeout)
            self._tools = {t["name"]: _schema(t) for t in listed if isinstance(t.get("name"), str)}
        except ToolServerError as e:
            self._tools = {}
            note = f"\n(The tool server is unavailable: {e}. You may still answer.)"
        tools = "\n".join(json.dumps(s, ensure_ascii=False) for s in self._tools.values())
        system = SYSTEM.format(tools=tools, limit=self.max_output_chars) + note
        obs = [{"role": "system", "content": system}, {"role": "user", "content": task["prompt"]}]
        gold = {"answers": list(task["answers"]), "tools": sorted(self._tools)}
        return obs, {"task_id": task["id"], "gold": gold}

    # -- steps --------------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        try:
            turn = parse_tool_turn(action, MAX_CALLS_PER_TURN)
        except ParseError as e:
            return self._invalid(f"Error: {e}", "tool")
        if turn.calls is not None:
            return self._run_calls(list(turn.calls))
        assert turn.text is not None
        try:
            answer = parse_tag_action(turn.text, ("answer",), truncated_at=self.truncated_at, require_visible=True)
        except NoActionError:
            return self._invalid("Error: no tool call and no <answer> found. Call a tool, or give your final answer "
                                 "as <answer>...</answer>.", "user")  # fmt: skip
        except ParseError as e:
            return self._invalid(f"Error: {e}", "user")
        scores = score_answer(answer.content, self._ep["task"]["answers"])
        success = scores["em"] == 1.0
        metrics = {"success": float(success), **scores, "calls": float(self._ep["calls"]),
                   "failed_calls": float(self._ep["failed_calls"])}  # fmt: skip
        info = {"correct": success, "submitted": answer.content, "metrics": metrics}
        return StepResult([], {"outcome": float(success)}, terminated=True, success=success, info=info)

    def _invalid(self, message: str, role: str) -> StepResult:
        return StepResult([{"role": role, "content": message}], action_valid=False, parse_error=message)

    def _run_calls(self, calls: list[ToolCall]) -> StepResult:
        assert self._client is not None
        out, errors = [], []
        for call in calls:
            self._ep["calls"] += 1
            msg: dict[str, Any] = {"role": "tool", "name": call.name}
            if call.id is not None:
                msg["tool_call_id"] = call.id
            if call.name not in self._tools:
                error = f"Error: unknown function {call.name!r}; available functions: {sorted(self._tools)}."
                errors.append(error)
                out.append({**msg, "content": error})
                continue
            if len(json.dumps(call.arguments, ensure_ascii=False)) > MAX_ARGUMENT_CHARS:
                error = f"Error: the arguments of {call.name} are longer than {MAX_ARGUMENT_CHARS} characters."
                errors.append(error)
                out.append({**msg, "content": error})
                continue
            try:
                text, is_error = self._client.call_tool(call.name, dict(call.arguments), self.call_timeout)
                content = f"Error: {text}" if is_error and not text.startswith("Error") else text
            except ToolServerError as e:
                self._ep["failed_calls"] += 1
                content = f"Error: {e}."
            out.append({**msg, "content": _cut(content, self.max_output_chars)})
        if errors:
            return StepResult(out, action_valid=False, parse_error=" ".join(errors)[:2000])
        return StepResult(out)

    def _truncated_info(self) -> dict[str, Any]:
        return {"metrics": {"success": 0.0, "calls": float(self._ep.get("calls", 0)),
                            "failed_calls": float(self._ep.get("failed_calls", 0))}}  # fmt: skip

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        super().close()


def _schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    params = tool.get("input_schema")
    if not isinstance(params, Mapping) or params.get("type") != "object":
        params = {"type": "object", "properties": {}}
    desc = str(tool.get("description") or "")[:2000]
    return {"type": "function", "function": {"name": tool["name"], "description": desc, "parameters": dict(params)}}


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut.

    >>> _cut("x" * 500, 100)[-39:]
    '[... output cut: 500 characters in all]'
    """
    if len(text) <= limit:
        return text
    tail = f"\n[... output cut: {len(text)} characters in all]"
    return text[: limit - len(tail)] + tail
