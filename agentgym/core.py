"""The agentgym contract: ``AgentEnv``, the base class of every environment in the suite.

An agent's *turn* is one ``step``: the action is the agent's whole turn as raw text (what the model
generated), the observation is the list of new chat messages the environment produced in reply.

``info`` carries stable, JSON-serialisable keys on every ``reset`` and ``step``:

=====================  =============================================================================
``turn``               agent turns taken so far (0 after ``reset``)
``task_id``            identifier of the task being played
``action_valid``       whether the last action parsed and was legal (``True`` after ``reset``)
``parse_error``        ``None`` or a human-readable message explaining why the action was invalid
``reward_components``  ``{name: float}`` for this step; the env reward is their sum
``anchor``             canonical key of the current state (identical states share a key)
``gold``               privileged task data for reward shapers and trainers, never shown to the policy
``success``            present once the episode has ended (terminated or truncated)
=====================  =============================================================================

Subclasses implement ``_reset`` and ``_step``; the base class seeds ``self.np_random``, sanitises and
truncates actions, counts turns, enforces the turn limit and assembles ``info``.

>>> import agentgym, gymnasium as gym
>>> env = gym.make("agentgym/SearchQA-v0")
>>> obs, info = env.reset(seed=0)
>>> obs[-1]["role"], info["turn"]
('user', 0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym

from agentgym.spaces import Chat, UnicodeText

if TYPE_CHECKING:
    from agentgym.agents.base import Agent

Message = dict[str, Any]

#: Actions longer than this many characters are truncated before parsing (``info["action_truncated"]``).
MAX_ACTION_CHARS = 16_384


@dataclass
class StepResult:
    """What an env's ``_step`` returns; ``AgentEnv.step`` turns it into the Gymnasium 5-tuple.

    The step reward is ``sum(reward_components.values())``, so every reward has a name.
    """

    observation: list[Message]
    reward_components: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    action_valid: bool = True
    parse_error: str | None = None
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def sanitize_action(action: Any, max_chars: int = MAX_ACTION_CHARS) -> tuple[str, str | None, bool]:
    """Coerce any action into valid Unicode text of at most ``max_chars`` characters.

    Returns ``(text, error, truncated)``: ``error`` explains a non-string action, ``truncated`` says
    whether the text was cut. Lone surrogates (invalid Unicode) become U+FFFD.
    """
    error = None
    if isinstance(action, bytes | bytearray):
        action = bytes(action).decode("utf-8", errors="replace")
    elif not isinstance(action, str):
        error = f"The action must be text (a string), got {type(action).__name__}."
        action = ""
    truncated = len(action) > max_chars
    if truncated:
        action = action[:max_chars]
    try:
        action.encode("utf-8")
    except UnicodeEncodeError:
        action = action.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
    return action, error, truncated


class AgentEnv(gym.Env[list, str]):
    """Base class for multi-turn text environments (see the module docstring for the contract)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    #: Built-in agents for this env: name -> factory ``(env) -> Agent``.
    agents: ClassVar[Mapping[str, Callable[[AgentEnv], Agent]]] = {}

    def __init__(self, *, max_turns: int, max_action_chars: int = MAX_ACTION_CHARS, render_mode: str | None = None):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.max_turns = max_turns
        self.max_action_chars = max_action_chars
        self.render_mode = render_mode
        self.observation_space = Chat()
        self.action_space = UnicodeText(max_length=max_action_chars)
        self._turn = 0
        self._done = True
        self._transcript: list[Message] = []

    # -- to implement -------------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> tuple[list[Message], dict[str, Any]]:
        """Start a task drawn with ``self.np_random``; return the first messages and extra info.

        The extra info must hold ``task_id``, ``anchor`` and ``gold``.
        """
        raise NotImplementedError

    def _step(self, action: str) -> StepResult:
        """Apply one sanitised agent turn."""
        raise NotImplementedError

    # -- the Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        super().reset(seed=seed)
        self._turn = 0
        self._done = False
        obs, extra = self._reset(dict(options or {}))
        self._transcript = list(obs)
        info = {"turn": 0, "action_valid": True, "parse_error": None, "reward_components": {}}
        info.update(extra)
        self._last_info = info
        return obs, info

    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("The episode has ended (or never started): call reset() before step().")
        text, type_error, cut = sanitize_action(action, self.max_action_chars)
        self._turn += 1
        if type_error is not None:
            result = StepResult(
                observation=[{"role": "user", "content": type_error}],
                action_valid=False,
                parse_error=type_error,
                reward_components=self.invalid_action_components(),
            )
        else:
            result = self._step(text)
        truncated = not result.terminated and self._turn >= self.max_turns
        self._done = result.terminated or truncated
        components = {k: float(v) for k, v in result.reward_components.items()}
        info = {
            "turn": self._turn,
            "action_valid": result.action_valid,
            "parse_error": result.parse_error,
            "reward_components": components,
            "action_truncated": cut,
        }
        info.update(result.info)
        if self._done:
            info["success"] = bool(result.success)
        self._transcript.append({"role": "assistant", "content": text})
        self._transcript.extend(result.observation)
        self._last_info = info
        return result.observation, float(sum(components.values())), result.terminated, truncated, info

    def invalid_action_components(self) -> dict[str, float]:
        """Reward components for an action that could not be parsed (override to add a format penalty)."""
        return {}

    @property
    def turn(self) -> int:
        """Agent turns taken in the current episode."""
        return self._turn

    @property
    def transcript(self) -> list[Message]:
        """The whole conversation so far (env messages and the agent's sanitised actions)."""
        return list(self._transcript)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self._transcript)

    def spec_kwargs(self) -> dict[str, Any]:
        """Constructor arguments that recreate this env (used by trajectory records and replay)."""
        return {}
