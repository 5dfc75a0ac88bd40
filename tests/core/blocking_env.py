"""``BlockingEnv``: a test env whose step blocks on ``BlockingEnv.gate`` when the action is ``block`` (a hung env or
sandbox call), for the server tests that hold workers busy. The tests register it under ids of their own and set,
clear or replace ``gate`` themselves."""

from __future__ import annotations

import threading
from typing import Any

from agentgym.contract.env import AgentEnv, StepResult


class BlockingEnv(AgentEnv):
    """One task; ``block`` waits for ``gate`` (at most 120 s, a hang guard), anything else answers ``ok``."""

    num_tasks = 1
    gate = threading.Event()
    public_args = AgentEnv.public_args

    def __init__(self, *, max_turns: int = 100) -> None:
        super().__init__(max_turns=max_turns)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list, dict]:
        return [{"role": "user", "content": "go"}], {"gold": {}}

    def _step(self, action: str) -> StepResult:
        if action == "block":
            self.gate.wait(timeout=120)  # a hang guard only
        return StepResult([{"role": "user", "content": "ok"}])
