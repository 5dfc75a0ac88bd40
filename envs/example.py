"""A complete agentgym environment: guess a secret number, told "Higher." or "Lower." after each guess.

It is the example of docs/writing-an-env.md and the README's third quick start; it is not registered by default.
Register and run it:

>>> import gymnasium as gym
>>> from agentgym.running.runner import run
>>> gym.register("example/GuessNumber-v0", entry_point="agentgym.envs.example:GuessNumberEnv")
>>> [(t.success, len(t.turns)) for t in run("example/GuessNumber-v0", "bisect", episodes=3, progress=False)]
[(True, 6), (True, 7), (True, 5)]
"""

import re
from typing import Any, ClassVar

from agentgym import Agent, AgentEnv, StepResult
from agentgym.contract.trust import declare, integer

GUESS = re.compile(r"\s*<guess>\s*(-?\d{1,9})\s*</guess>\s*")


class BisectAgent(Agent):
    """Guesses the middle of the range the replies so far leave open."""

    name = "bisect"

    def act(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        low, high = 1, int(re.findall(r"\d+", messages[0]["content"])[1])
        for guess, reply in zip(messages[1::2], messages[2::2], strict=False):
            if (m := GUESS.fullmatch(guess["content"])) and reply["content"] in ("Higher.", "Lower."):
                low, high = (int(m[1]) + 1, high) if reply["content"] == "Higher." else (low, int(m[1]) - 1)
        return f"<guess>{(low + high) // 2}</guess>"


class GuessNumberEnv(AgentEnv):
    """Task ``i`` hides the number ``i + 1`` in ``1..high``; the agent answers ``<guess>N</guess>`` each turn."""

    agents: ClassVar = {"bisect": BisectAgent}
    public_args: ClassVar = declare(AgentEnv.public_args, high=integer(1, 1_000_000))  # what clients may set

    def __init__(self, *, high: int = 100, max_turns: int = 8, invalid_action_penalty: float = 0.0):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty)
        self.high = self.num_tasks = high

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        prompt = f"I picked a number between 1 and {self.high}. Guess it: reply <guess>N</guess>."
        return [{"role": "user", "content": prompt}], {"gold": {"secret": task_index + 1}}

    def _step(self, action: str) -> StepResult:
        match = GUESS.fullmatch(action)
        if match is None:
            error = "Reply with one whole number inside <guess> and </guess>."
            return StepResult([{"role": "user", "content": error}], action_valid=False, parse_error=error)
        guess, secret = int(match.group(1)), self.task_index + 1
        reply = "Correct!" if guess == secret else "Higher." if guess < secret else "Lower."
        won = guess == secret
        return StepResult([{"role": "user", "content": reply}], {"outcome": float(won)}, terminated=won, success=won)

    def _snapshot_state(self) -> tuple:  # all episode state is the base class's (task, turn, transcript)
        return ()

    def _restore_state(self, state: tuple) -> None:
        pass
