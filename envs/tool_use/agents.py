"""Built-in ToolUse agents: ``oracle`` (privileged: replays the gold trace, asks when the variant requires) and
``random`` (random calls of the listed tools with arguments drawn from the conversation).

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/ToolUse-v0", world="bank", variant="miss_param")
>>> obs, info = env.reset(options={"task_index": 3})
>>> OracleAgent().act(obs, info)
'Before I can do that, could you give me the missing value?'
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgym.agents.tool_calls import listed_tools
from agentgym.contract.agent import Agent, GoldAgent

Message = dict[str, Any]
_PATH = re.compile(r"/[\w./-]+\w")
_WORD = re.compile(r"[A-Za-z_][\w.]*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def hermes(calls: list[dict[str, Any]]) -> str:
    """Calls as Hermes ``<tool_call>`` blocks."""
    return "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)


class OracleAgent(GoldAgent):
    """Plays the gold turns of ``info["gold"]["turns"]`` in order (one per agent turn so far): a turn's calls as
    Hermes blocks, else its reply; ``when_done`` once they are played (tool envs share it: BFCL, CustomerService)."""

    name = "oracle"
    when_done = "Done."

    def play(self, turn: int, messages: list[Message]) -> str:
        turns = self.gold["turns"]
        if turn >= len(turns):
            return self.when_done
        return hermes(turns[turn]["calls"]) if turns[turn]["calls"] else turns[turn]["reply"]


class RandomAgent(Agent):
    """Calls a random listed tool (arguments: paths, words and numbers seen in the conversation) or replies "Done."."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        tools = [t["function"] for t in listed_tools(messages)]
        text = " ".join(m.get("content", "") for m in messages[1:] if m.get("role") in ("user", "tool"))
        paths = _PATH.findall(text) or ["/"]
        words = _WORD.findall(text) or ["x"]
        numbers = [float(x) for x in _NUMBER.findall(text)] or [1.0]
        if not tools or rng.random() < 0.3:
            return "Done."
        calls = []
        for _ in range(int(rng.integers(1, 3))):
            fn = tools[int(rng.integers(len(tools)))]
            args: dict[str, Any] = {}
            for key, prop in fn["parameters"]["properties"].items():
                if key not in fn["parameters"]["required"] and rng.random() < 0.5:
                    continue
                args[key] = self._value(prop, key, paths, words, numbers)
            calls.append({"name": fn["name"], "arguments": args})
        return hermes(calls)

    def _value(self, prop: dict[str, Any], key: str, paths: list[str], words: list[str], numbers: list[float]) -> Any:
        rng = self.np_random
        if "enum" in prop:
            return prop["enum"][int(rng.integers(len(prop["enum"])))]
        kind = prop["type"]
        if kind == "string":
            pool = paths if key in ("path", "source", "destination") else words
            return pool[int(rng.integers(len(pool)))]
        if kind == "integer":
            return int(rng.integers(1, 6))
        if kind == "number":
            return numbers[int(rng.integers(len(numbers)))]
        if kind == "boolean":
            return bool(rng.random() < 0.5)
        return []
