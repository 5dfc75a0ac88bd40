"""Post-episode turn scoring: the interface shared by every ``TurnScorer``.

A ``TurnScorer`` looks at a *group* of finished trajectories (the G rollouts of one task, same prompt and
seed) and returns one ``TurnScores`` per trajectory: a reward per agent turn, plus a validity mask. A
turn the scorer could not score (e.g. a scoring server failed) is marked invalid and its reward is NaN:
never a silent 0. ``annotate`` writes the scores into the trajectories, as one more named entry of each
turn's ``info["reward_components"]``, and adds them to ``turn.reward``, so the recorded components always
sum to the total.

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> class Constant(TurnScorer):
...     name = "constant"
...     def score_group(self, group):
...         return [TurnScores(self.name, [0.5] * len(t.turns)) for t in group]
>>> turn = Turn("a", [], 1.0, True, False, {"reward_components": {"outcome": 1.0}})
>>> t = Trajectory("e", 0, "t", "a", [], {}, turns=[turn])
>>> _ = annotate([t], Constant()([t]))
>>> t.turns[0].reward, t.turns[0].info["reward_components"]
(1.5, {'outcome': 1.0, 'constant': 0.5})
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentgym.contract.trajectory import Trajectory


class ScorerError(RuntimeError):
    """A scorer could not score a turn and was asked to raise rather than mark it."""


@dataclass
class TurnScores:
    """One scorer's per-turn rewards for one trajectory. ``valid[t]`` is False where scoring failed."""

    name: str
    rewards: list[float]
    valid: list[bool] = field(default_factory=list)
    #: Scorer-specific extras per trajectory (e.g. IGPO's p_t series), JSON-serialisable.
    extras: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.valid:
            self.valid = [not math.isnan(r) for r in self.rewards]
        if len(self.valid) != len(self.rewards):
            raise ValueError(f"{self.name}: {len(self.rewards)} rewards but {len(self.valid)} validity flags")

    @property
    def all_valid(self) -> bool:
        return all(self.valid)


class TurnScorer:
    """Scores the turns of a group of trajectories. Subclasses set ``name`` and implement ``score_group``."""

    name: str = "turn_scorer"

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        raise NotImplementedError

    def __call__(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        scores = self.score_group(group)
        if len(scores) != len(group):
            raise ValueError(f"{self.name}: {len(scores)} score lists for a group of {len(group)}")
        for s, t in zip(scores, group, strict=True):
            if len(s.rewards) != len(t.turns):
                raise ValueError(f"{self.name}: {len(s.rewards)} rewards for {len(t.turns)} turns")
        return scores


T = TypeVar("T")


@dataclass
class Replay(Generic[T]):
    """The bounded fit data a persistent scorer keeps across iterations: the newest ``capacity`` items (the oldest
    dropped first), saved with the trainer's checkpoint through the scorer's ``state_dict``.

    >>> r = Replay[int](2)
    >>> r.extend([1, 2, 3]); list(r), r.state_dict()
    ([2, 3], [2, 3])
    """

    capacity: int
    _items: deque[T] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"a replay holds at least 1 item, got capacity {self.capacity}")
        self._items = deque(maxlen=self.capacity)

    def extend(self, items: Iterable[T]) -> None:
        self._items.extend(items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def state_dict(self) -> list[Any]:
        return list(self._items)

    def load_state_dict(self, items: Iterable[T]) -> None:
        """Restore ``state_dict()``'s items (keeping the newest ``capacity``)."""
        self._items = deque(items, maxlen=self.capacity)


def annotate(group: Sequence[Trajectory], scores: Sequence[TurnScores], *, strict: bool = True) -> list[Trajectory]:
    """Record ``scores`` into the trajectories (in place): each turn gains ``reward_components[name]`` and
    its reward grows by the same amount. With ``strict`` an invalid turn raises ``ScorerError``; otherwise
    the turn records NaN in ``info["invalid_components"]`` and its reward is left unchanged."""
    for traj, s in zip(group, scores, strict=True):
        for turn, r, ok in zip(traj.turns, s.rewards, s.valid, strict=True):
            comps = dict(turn.info.get("reward_components", {}))
            if s.name in comps:
                raise ValueError(f"turn already has a reward component named {s.name!r}")
            if not ok:
                if strict:
                    raise ScorerError(f"{s.name} could not score a turn of task {traj.task_id!r}")
                turn.info = {**turn.info, "invalid_components": [*turn.info.get("invalid_components", []), s.name]}
                continue
            comps[s.name] = float(r)
            turn.info = {**turn.info, "reward_components": comps}
            turn.reward = float(turn.reward + r)
    return list(group)
