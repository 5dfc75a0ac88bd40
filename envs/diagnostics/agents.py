"""Built-in agents of the diagnostics: ``oracle`` (privileged, always right) and ``random`` (uniform over the options).

>>> agent = RandomAgent()
>>> agent.reset(seed=0)
>>> agent.act([{"role": "user", "content": "Turn 1/2. Signal: red. Options: blue red."}], {})
'<answer> red </answer>'
"""

from __future__ import annotations

from typing import Any

from agentgym.contract.agent import Agent, GoldAgent

Message = dict[str, Any]
#: What precedes the option words at the end of every stage's text.
OPTIONS_MARK = "Options: "


class OracleAgent(GoldAgent):
    """Answers ``info["gold"]["choices"][turn]``: every decisive choice right, every distractor choice the
    best-paying one (an upper bound: it reads privileged data, misleading signals included)."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        return f"<answer> {self.gold['choices'][turn]} </answer>"


class RandomAgent(Agent):
    """Not privileged: picks one of the latest observation's options uniformly at random; with probability
    ``malformed`` (default 0, so its success rate is the theoretical ``(1/k)^decisive stages``) it replies with a
    malformed turn instead."""

    name = "random"

    def __init__(self, malformed: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= malformed <= 1.0:
            raise ValueError(f"malformed must be in [0, 1], got {malformed}")
        self.malformed = float(malformed)

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        text = str(messages[-1].get("content") or "") if messages else ""
        at = text.rfind(OPTIONS_MARK)
        options = text[at + len(OPTIONS_MARK) :].rstrip(".").split() if at >= 0 else []
        if not options or (self.malformed and self.np_random.random() < self.malformed):
            return "<answer>"
        return f"<answer> {options[int(self.np_random.integers(len(options)))]} </answer>"
