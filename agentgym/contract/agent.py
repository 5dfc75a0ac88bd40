"""The agent interface used by ``agentgym run`` / ``agentgym bench`` and the built-in agents.

An agent plays one episode at a time. The runner calls ``reset`` at the start of every episode and then
``act`` once per turn with the *whole* conversation so far (every message the env produced and every
action the agent took, in order) and the latest ``info``. Agents that need privileged data (the
``oracle``) read ``info["gold"]``; honest agents must not.

>>> class Echo(Agent):
...     name = "echo"
...     def act(self, messages, info):
...         return "<answer>" + messages[-1]["content"][:10] + "</answer>"
>>> Echo().act([{"role": "user", "content": "hello"}], {})
'<answer>hello</answer>'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Message = dict[str, Any]


class AgentError(RuntimeError):
    """An agent could not produce an action (e.g. the model server failed after its retries); see ``__cause__``."""


class Agent:
    """Base class for agents. Subclasses override ``act`` (and ``reset`` if they keep episode state)."""

    name: str = "agent"
    #: True if the agent reads privileged ``info["gold"]`` (an upper bound, not a baseline).
    privileged: bool = False

    def __init__(self) -> None:
        self.np_random = np.random.default_rng()

    def reset(self, *, seed: int | None = None) -> None:
        """Start a new episode; agents draw randomness only from ``self.np_random``."""
        self.np_random = np.random.default_rng(seed)

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        """Return the next action (the agent's whole turn as text)."""
        raise NotImplementedError

    def preflight(self) -> None:
        """Raise ``AgentError`` at once if the agent cannot play at all (e.g. nothing listens at its server), so a
        run fails before its first episode with that reason instead of after retrying in every episode."""

    def close(self) -> None:
        """Release resources (HTTP clients, models)."""


class GoldAgent(Agent):
    """Base class of privileged agents (``oracle``): keeps the ``gold`` of the reset ``info`` (later infos need not
    repeat it) and plays ``play(turn, messages)``, ``turn`` being the agent turns taken so far.

    >>> class Replay(GoldAgent):
    ...     def play(self, turn, messages):
    ...         return self.gold["answers"][turn]
    >>> agent = Replay()
    >>> agent.act([], {"gold": {"answers": ["a", "b"]}}), agent.act([{"role": "assistant", "content": "a"}], {})
    ('a', 'b')
    """

    privileged = True

    def __init__(self) -> None:
        super().__init__()
        self.gold: dict[str, Any] = {}

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        if "gold" in info:
            self.gold = info["gold"]
        return self.play(sum(1 for m in messages if m.get("role") == "assistant"), messages)

    def play(self, turn: int, messages: list[Message]) -> str:
        """The action of agent turn ``turn`` (0-based), from ``self.gold``."""
        raise NotImplementedError


def normalize_messages(messages: Sequence[Message]) -> list[Message]:
    """Copy chat messages for a chat template: list-of-parts content joined to text, None content -> ''."""
    out: list[Message] = []
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ValueError(f"each message must be a dict with a string 'role', got {msg!r:.200}")
        content = msg.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type", "text") != "text":
                    raise ValueError(f"only text content parts are supported, got {part!r:.200}")
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        elif not isinstance(content, str):
            raise ValueError(f"message content must be a string, a list of text parts or null, got {content!r:.200}")
        out.append({**msg, "content": content})
    return out
