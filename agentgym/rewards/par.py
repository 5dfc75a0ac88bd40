"""PAR, Preference As Reward: r' = sigmoid(r - r_ref), the reward model's own preference of a response over a
reference response as the RL reward (bounded, steepest near the reference, a function of the centred reward).

``PreferenceAsReward`` is the ``TurnTransform``; with M reference rewards it averages the sigmoids,
r' = 1/M sum_m sigmoid(r - r_ref,m), as the paper's code does (``average="reference"`` takes sigmoid(r - mean_m
r_ref,m) instead). ``level="turn"`` transforms every turn's score; ``level="outcome"`` transforms the trajectory's
total and puts it on the last turn (0 elsewhere), for an outcome or final-answer score. ``PARScorer`` applies it to
another scorer's scores with each task's own references, and ``reference_rewards`` computes those references by
scoring reference trajectories (the oracle agent's, or the warm-start policy's) with the same scorer.

>>> par = PreferenceAsReward(references=(0.0, 1.0))
>>> [round(x, 6) for x in par([1.0, 0.5])]  # (sigmoid(1) + sigmoid(0)) / 2, (sigmoid(0.5) + sigmoid(-0.5)) / 2
[0.615529, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.process import TurnTransform

Level = Literal["turn", "outcome"]


def sigmoid(x: float) -> float:
    """1 / (1 + e^-x) without overflow for large |x| (NaN stays NaN)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


@dataclass(frozen=True)
class PreferenceAsReward(TurnTransform):
    """r' = mean_m sigmoid(r - r_ref,m) per turn (``level="turn"``) or on the trajectory's total (``"outcome"``).

    r' lies in (0, 1), equals 1/2 at r = r_ref, is increasing in r with slope at most 1/4, and does not change when
    the same constant is added to r and to every reference. NaN (an unscored turn) stays NaN.

    >>> PreferenceAsReward(references=(1.0,), level="outcome")([0.5, 0.5])  # the total 1.0 meets the reference
    [0.0, 0.5]
    """

    references: tuple[float, ...] = (0.0,)
    #: ``"sigmoid"``: mean of the M sigmoids (the paper's code); ``"reference"``: sigmoid of r - mean reference
    average: Literal["sigmoid", "reference"] = "sigmoid"
    level: Level = "turn"

    def __post_init__(self) -> None:
        refs = tuple(float(r) for r in self.references)
        if not refs or not all(math.isfinite(r) for r in refs):
            raise ValueError(f"PAR needs at least one finite reference reward, got {self.references!r}")
        if self.average not in ("sigmoid", "reference") or self.level not in ("turn", "outcome"):
            raise ValueError(f"average must be 'sigmoid' or 'reference' and level 'turn' or 'outcome', got "
                             f"{self.average!r}, {self.level!r}")  # fmt: skip
        object.__setattr__(self, "references", refs)

    def value(self, r: float) -> float:
        """The transformed value of one reward."""
        if self.average == "reference":
            return sigmoid(r - sum(self.references) / len(self.references))
        return sum(sigmoid(r - ref) for ref in self.references) / len(self.references)

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        r = [float(x) for x in rewards]
        if self.level == "turn":
            return [self.value(x) for x in r]
        return [0.0] * (len(r) - 1) + [self.value(sum(r))] if r else []


def _task(traj: Trajectory) -> str:
    return traj.task_id


def reference_rewards(
    references: Iterable[Trajectory],
    scorer: TurnScorer,
    level: Level = "turn",
    key: Callable[[Trajectory], str] = _task,
) -> dict[str, list[float]]:
    """Each task's reference rewards: ``scorer``'s scores of the reference trajectories of that task, one per
    trajectory, in their order: the mean of its valid turn scores (``level="turn"``) or its total (``"outcome"``).
    A reference the scorer could not score at all is left out (so a task may end with none)."""
    groups: dict[str, list[Trajectory]] = {}
    for traj in references:
        groups.setdefault(key(traj), []).append(traj)
    out: dict[str, list[float]] = {}
    for task, group in groups.items():
        refs = out.setdefault(task, [])
        for scores in scorer(group):
            valid = [r for r, ok in zip(scores.rewards, scores.valid, strict=True) if ok]
            if level == "outcome" and valid and scores.all_valid:
                refs.append(float(sum(valid)))
            elif level == "turn" and valid:
                refs.append(float(sum(valid) / len(valid)))
    return out


@dataclass
class PARScorer(TurnScorer):
    """PAR on another scorer's scores (a judge, a reward model, or ``ComponentScorer("outcome", missing=0.0)``),
    each trajectory against the reference rewards of its own task (``references[key(traj)]``, e.g. from
    ``reference_rewards``). ``m`` keeps the first m references of a task (None: all). A task without references
    raises ``KeyError``: a made-up reference would silently change the reward's centre.

    >>> from agentgym.contract.trajectory import Turn
    >>> from agentgym.rewards.process import ComponentScorer
    >>> turn = Turn("a", [], 1.0, True, False, {"reward_components": {"outcome": 1.0}})
    >>> t = Trajectory("e", 0, "q1", "x", [], {}, turns=[turn])
    >>> PARScorer(ComponentScorer("outcome"), {"q1": [1.0, 3.0]}, m=1)([t])[0].rewards  # sigmoid(1 - 1)
    [0.5]
    """

    scorer: TurnScorer
    references: Mapping[str, Sequence[float]]
    average: Literal["sigmoid", "reference"] = "sigmoid"
    level: Level = "turn"
    m: int | None = None
    name: str = "par"
    key: Callable[[Trajectory], str] = _task

    def __post_init__(self) -> None:
        if self.m is not None and self.m < 1:
            raise ValueError(f"m must be >= 1 or None, got {self.m}")

    def transform(self, traj: Trajectory) -> PreferenceAsReward:
        """The transform for ``traj``'s task."""
        task = self.key(traj)
        refs = list(self.references.get(task, ()))[: self.m]
        if not refs:
            raise KeyError(f"PAR: no reference rewards for task {task!r}")
        return PreferenceAsReward(tuple(refs), self.average, self.level)

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for traj, scores in zip(group, self.scorer(group), strict=True):
            new = self.transform(traj)(scores)
            new.name = self.name
            out.append(new)
        return out


METHODS = (
    Method(
        "par", "PAR", "transform", "bounded preference-as-reward transform sigmoid(r - r_ref)",
        needs=("judge", "reference"), paper=cite("PAR"), code="agentgym.rewards.par:PARScorer", status="partial",
        choices=(
            "exactly the sigmoid; M references averaged as the mean of the M sigmoids, as the paper's code does "
            "(knob average='sigmoid'|'reference': sigmoid of r minus the mean reference); knob m keeps the first m",
            "per turn or on the trajectory's total, put on its last turn (knob level='turn'|'outcome')",
            "a reference reward is the same scorer's score of a reference trajectory of the task: its mean valid "
            "turn score (level turn) or its total (level outcome), see reference_rewards",
        ),
        missing="agentgym train cannot run it yet: the trainer has no judge or reward-model scorer to transform "
        "and no provider of reference trajectories per task",
    ),
)  # fmt: skip
