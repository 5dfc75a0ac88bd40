"""Built-in CodeExec agents: ``oracle`` (privileged: runs the reference solution through the python tool, then
submits what it printed) and ``random`` (random small programs, random answers, now and then a malformed call).

>>> agent = OracleAgent()
>>> gold = {"turns": [{"calls": [{"name": "python", "arguments": {"code": "print(6 * 7)"}}]}]}
>>> print(agent.act([{"role": "user", "content": "6 x 7?"}], {"gold": gold}))
<tool_call>
{"name": "python", "arguments": {"code": "print(6 * 7)"}}
</tool_call>
>>> print(agent.act([{"role": "assistant", "content": "..."}, {"role": "tool", "content": "42\\n"}], {}))
<tool_call>
{"name": "submit_answer", "arguments": {"answer": "42"}}
</tool_call>
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgym.contract.agent import Agent, GoldAgent
from agentgym.envs.tool_use.agents import hermes

Message = dict[str, Any]
_FILE = re.compile(r"\b[\w-]+\.(?:csv|log)\b")
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[A-Za-z][\w./-]*")

SNIPPETS = (
    "import os\nprint(sorted(os.listdir('.')))",
    "print(open({file!r}).read()[:{n}])",
    "print(len(open({file!r}).readlines()))",
    "print(sum(range({n})))",
    "print({n} * {m})",
    "print(1 / 0)",
    "print((",
    "import math\nprint(math.factorial({m}))",
    "for i in range(3):\n    print(i, i * {m})",
    "import random\nprint(random.randint(0, {n}))",
)


class OracleAgent(GoldAgent):
    """Runs the gold ``solution`` (``info["gold"]["turns"][0]``) with the python tool, then submits its output."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        if turn == 0:
            return hermes(self.gold["turns"][0]["calls"])
        printed = next((m["content"] for m in reversed(messages) if m.get("role") == "tool"), "")
        return hermes([{"name": "submit_answer", "arguments": {"answer": printed.strip()}}])


class RandomAgent(Agent):
    """Runs random small programs (listing and reading the files, arithmetic, errors) or answers a random number or
    word of the conversation, sometimes as ``<answer>`` text, sometimes with a malformed call."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        text = " ".join(m.get("content") or "" for m in messages[1:] if m.get("role") in ("user", "tool"))
        files = _FILE.findall(text) or ["data.txt"]
        r = rng.random()
        if r < 0.55:
            snippet = SNIPPETS[int(rng.integers(len(SNIPPETS)))]
            code = snippet.format(file=files[int(rng.integers(len(files)))], n=int(rng.integers(1, 400)),
                                  m=int(rng.integers(2, 30)))  # fmt: skip
            return hermes([{"name": "python", "arguments": {"code": code}}])
        tokens = _TOKEN.findall(text) or ["0"]
        answer = tokens[int(rng.integers(len(tokens)))] if rng.random() < 0.8 else str(int(rng.integers(0, 1000)))
        if r < 0.8:
            return hermes([{"name": "submit_answer", "arguments": {"answer": answer}}])
        if r < 0.9:
            return f"The answer is <answer>{answer}</answer>"
        malformed = (
            '<tool_call>{"name": "python"}</tool_call>',
            '<tool_call>{"name": "python", "arguments": {"code": 42}}</tool_call>',
            json.dumps({"tool_calls": [{"type": "function", "function": {"name": "run", "arguments": "{}"}}]}),
            "I think I need to look at the data first.",
        )
        return malformed[int(rng.integers(len(malformed)))]
