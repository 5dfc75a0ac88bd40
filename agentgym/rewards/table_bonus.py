"""The shared base of the exploration bonuses read from a table a trainer refits between iterations (RND's
predictor, MaxInfoRL's ensemble): the table argument, the frozen snapshot taken at each reset, the text a step is
scored on, and the reward component. A subclass sets ``table_type`` and ``component`` and says what a step is worth
(``bonus``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym

from agentgym.rewards.text_features import observation_text
from agentgym.rewards.wrappers import StepReturn, add_component


class TableBonus(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """``coef * bonus(...)`` added to each step's reward as the component ``name`` (the class's ``component`` by
    default), read from the ``snapshot()`` of ``table`` taken at ``reset``.

    ``table`` is the table every env of a run shares (the trainer updates it once per iteration, after all rollouts,
    so sibling rollouts read the same frozen table); a mapping is the keyword arguments of a new ``table_type``
    (from a JSON config), ``None`` a default one. ``key=None`` scores observations' texts; a string scores
    ``info[key]`` (a canonical state such as ``"anchor"``)."""

    #: Episode state, for ``agentgym.contract.branching`` (a snapshot is immutable: copies share it).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_snapshot",)
    #: The table class a trainer makes (once per run, shared by every env) from this wrapper's ``table`` mapping.
    table_type: ClassVar[type]
    #: The reward component's default name.
    component: ClassVar[str]

    def __init__(
        self, env: gym.Env, table: Any = None, coef: float = 0.1, name: str | None = None, key: str | None = None
    ):
        gym.utils.RecordConstructorArgs.__init__(self, table=table, coef=coef, name=name, key=key)
        gym.Wrapper.__init__(self, env)
        if table is None or isinstance(table, Mapping):
            table = self.table_type(**dict(table or {}))
        self.table = table
        self.coef = float(coef)
        self.name = name or self.component
        self.key = key
        self._snapshot = table.snapshot()

    def text(self, obs: Any, info: Mapping[str, Any]) -> str:
        """What a state is scored on: the observation's text, or ``info[key]``."""
        if self.key is None:
            return observation_text(obs)
        if self.key not in info:
            raise KeyError(f"{type(self).__name__}: info has no {self.key!r}")
        return str(info[self.key])

    def bonus(self, action: Any, obs: Any, info: Mapping[str, Any]) -> float:
        """The step's bonus before ``coef`` (``self._snapshot`` is the table as of the episode's reset)."""
        raise NotImplementedError

    def started(self, obs: Any, info: Mapping[str, Any]) -> None:
        """Called after each reset with the first observation (a subclass that scores transitions keeps it)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._snapshot = self.table.snapshot()
        self.started(obs, info)
        return obs, info

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        reward, info = add_component(reward, info, self.name, self.coef * self.bonus(action, obs, info))
        return obs, reward, terminated, truncated, info
