"""Built-in BFCL agents: ``oracle`` (privileged: plays the gold calls of each user turn, then a plain reply) and
``random`` (random calls of the offered functions with values drawn from the conversation).

>>> gold = {"turns": [{"calls": [{"name": "pwd", "arguments": {}}], "reply": None}, {"calls": [], "reply": "Done."}]}
>>> OracleAgent().act([{"role": "user", "content": "Where am I?"}], {"gold": gold})
'<tool_call>\\n{"name": "pwd", "arguments": {}}\\n</tool_call>'
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgym.agents.base import Agent
from agentgym.envs.tool_use.agents import OracleAgent, hermes

__all__ = ["OracleAgent", "RandomAgent", "hermes"]

Message = dict[str, Any]
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_][\w.\-]*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class RandomAgent(Agent):
    """Calls one or two random offered functions (arguments: words and numbers seen in the conversation), or replies
    "Done." (30%)."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        blocks = [b for m in messages if m.get("role") in ("system", "user") for b in _TOOLS.findall(m["content"])]
        tools = [json.loads(line)["function"] for b in blocks for line in b.splitlines() if line.strip()]
        text = " ".join(m.get("content", "") for m in messages[1:] if m.get("role") in ("user", "tool"))
        words = _WORD.findall(text)[-200:] or ["x"]
        numbers = [float(x) for x in _NUMBER.findall(text)[-50:]] or [1.0]
        if not tools or rng.random() < 0.3:
            return "Done."
        calls = []
        for _ in range(int(rng.integers(1, 3))):
            fn = tools[int(rng.integers(len(tools)))]
            params = fn["parameters"]
            args = {
                key: self._value(prop, words, numbers)
                for key, prop in params["properties"].items()
                if key in params["required"] or rng.random() < 0.5
            }
            calls.append({"name": fn["name"], "arguments": args})
        return hermes(calls)

    def _value(self, prop: dict[str, Any], words: list[str], numbers: list[float], depth: int = 0) -> Any:
        rng = self.np_random
        if "enum" in prop:
            return prop["enum"][int(rng.integers(len(prop["enum"])))]
        kind = prop.get("type", "string")
        if kind == "integer":
            return int(rng.integers(0, 6))
        if kind == "number":
            return numbers[int(rng.integers(len(numbers)))]
        if kind == "boolean":
            return bool(rng.random() < 0.5)
        if kind == "array" and depth < 2:
            item = prop.get("items", {"type": "string"})
            return [self._value(item, words, numbers, depth + 1) for _ in range(int(rng.integers(0, 3)))]
        if kind == "object":
            return {}
        return words[int(rng.integers(len(words)))]
