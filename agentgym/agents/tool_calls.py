"""Tool calling for model agents in both formats: Hermes text and native OpenAI ``tool_calls``.

Tool envs list their functions as JSON schemas inside ``<tools>...</tools>`` in the conversation, and accept a
turn as Hermes ``<tool_call>`` blocks or as an OpenAI assistant message (its JSON text). An agent in ``"text"``
format sends the conversation as it is and returns the model's text. An agent in ``"native"`` format sends the
schemas as the request's ``tools`` (or the chat template's ``tools``) instead of in the text, sends its earlier
tool-call turns back as structured assistant messages paired with their tool results by id, and returns calls as
an assistant message.

>>> msgs = [{"role": "system", "content": 'Use these.\\n<tools>\\n{"type": "function", "function": {"name": "ls"}}'
...          '\\n</tools>'}, {"role": "assistant", "content": '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'},
...         {"role": "tool", "name": "ls", "content": '["a.txt"]'}]
>>> [t["function"]["name"] for t in listed_tools(msgs)]
['ls']
>>> native = to_openai_messages(msgs)
>>> native[1]["tool_calls"][0]["function"], native[2]["tool_call_id"] == native[1]["tool_calls"][0]["id"]
({'name': 'ls', 'arguments': '{}'}, True)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from agentgym.contract.parsing import ParseError, ToolCall, loads_untrusted, parse_hermes_tool_calls, parse_tool_turn

Message = dict[str, Any]
ToolFormat = Literal["text", "native"]
TOOL_FORMATS: tuple[str, ...] = ("text", "native")

_TOOLS = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_CALL_OPEN = re.compile(r"<tool_call>", re.IGNORECASE)


def check_tool_format(tool_format: str) -> str:
    if tool_format not in TOOL_FORMATS:
        raise ValueError(f"tool_format must be one of {TOOL_FORMATS}, got {tool_format!r}")
    return tool_format


def listed_tools(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The OpenAI function schemas listed inside ``<tools>`` blocks of system and user messages (one JSON object
    per line, or a JSON list), in order of first appearance; a later schema of the same name replaces the earlier."""
    tools: dict[str, dict[str, Any]] = {}
    for msg in messages:
        content = msg.get("content")
        if msg.get("role") not in ("system", "user") or not isinstance(content, str) or "<tools>" not in content:
            continue
        for block in _TOOLS.findall(content):
            try:
                items = loads_untrusted(block)
                items = items if isinstance(items, list) else [items]
            except ParseError:
                items = []
                for line in block.splitlines():
                    try:
                        items.append(loads_untrusted(line))
                    except ParseError:
                        continue
            for item in items:
                fn = item.get("function") if isinstance(item, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                    tools[fn["name"]] = {"type": "function", "function": fn}
    return list(tools.values())


def drop_tool_listings(messages: Sequence[Message]) -> list[Message]:
    """The conversation with the schemas inside ``<tools>`` blocks left out (a native request carries them as its
    ``tools``, so the prompt does not hold them twice).

    >>> drop_tool_listings([{"role": "system", "content": "Tools:\\n<tools>\\n{...}\\n</tools>\\nGo."}])[0]["content"]
    'Tools:\\n<tools>(given as the tools of this request)</tools>\\nGo.'
    """
    out = []
    for msg in messages:
        content = msg.get("content")
        if msg.get("role") in ("system", "user") and isinstance(content, str) and "<tools>" in content:
            msg = {**msg, "content": _TOOLS.sub("<tools>(given as the tools of this request)</tools>", content)}
        out.append(msg)
    return out


def call_id(seed: str, k: int) -> str:
    """A deterministic call id (a digest of the turn text and the call's position), so replays are identical."""
    return "call_" + hashlib.blake2b(f"{k}:{seed}".encode(), digest_size=6).hexdigest()


def _openai_call(call: ToolCall, seed: str, k: int) -> dict[str, Any]:
    return {
        "id": call.id or call_id(seed, k),
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
    }


def to_openai_messages(messages: Sequence[Message]) -> list[Message]:
    """The conversation with each tool-call turn as a structured assistant message (``tool_calls`` with ids, the
    text before the first call as ``content``) and each following tool result carrying the id of its call.

    Assistant turns that hold no parseable call stay as they are; tool results already carrying an id keep it.
    """
    out: list[Message] = []
    pending: list[str] = []  # ids of the last turn's calls, in order, not yet answered
    for msg in messages:
        role = msg.get("role")
        content = msg.get("content")
        if role == "assistant" and isinstance(content, str) and not msg.get("tool_calls"):
            try:
                calls = list(parse_tool_turn(content).calls or ())
            except ParseError:
                calls = []
            if calls:
                structured = [_openai_call(c, content, k) for k, c in enumerate(calls)]
                if content.lstrip().startswith("{"):  # an OpenAI message as JSON text (it parsed, so it loads)
                    before = loads_untrusted(content).get("content")
                    before = before if isinstance(before, str) else ""
                else:
                    first = _CALL_OPEN.search(content)
                    before = content[: first.start()] if first else content
                out.append({"role": "assistant", "content": before.strip() or None, "tool_calls": structured})
                pending = [c["id"] for c in structured]
                continue
        if role == "assistant" and msg.get("tool_calls"):
            pending = [c["id"] for c in msg["tool_calls"] if isinstance(c, dict) and c.get("id")]
        if role == "tool":
            msg = dict(msg)
            if msg.get("tool_call_id") in pending:
                pending.remove(msg["tool_call_id"])
            elif "tool_call_id" not in msg and pending:
                msg["tool_call_id"] = pending.pop(0)
        elif role != "assistant":
            pending = []
        out.append(msg)
    return out


def calls_message(text: str, *, seed: str | None = None) -> str | None:
    """An OpenAI assistant message (JSON text) for the Hermes ``<tool_call>`` blocks in a model's ``text``; None
    when the text holds no parseable call (it is then a plain reply, or a malformed turn the env will explain).

    >>> json.loads(calls_message('Listing. <tool_call>{"name": "ls", "arguments": {}}</tool_call>'))["content"]
    'Listing.'
    """
    try:
        calls = parse_hermes_tool_calls(text)
    except ParseError:
        return None
    if not calls:
        return None
    first = _CALL_OPEN.search(text)
    before = text[: first.start()].strip() if first else ""
    structured = [_openai_call(c, seed if seed is not None else text, k) for k, c in enumerate(calls)]
    return json.dumps({"role": "assistant", "content": before or None, "tool_calls": structured}, ensure_ascii=False)
