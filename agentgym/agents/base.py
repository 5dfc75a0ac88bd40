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

    def close(self) -> None:
        """Release resources (HTTP clients, models)."""
