"""The Bradley-Terry reward transform: u_k = log sigmoid(r_k - r_ref,k) per property k, aggregated as U = sum_k u_k.

For a reward model fitted with a Bradley-Terry loss, sigmoid(r - r_ref) is the probability that a response beats
the reference, i.e. is "good" in that property; the log makes the sum over K properties the log of the probability
of being good in all of them (a logical AND). It saturates for good outputs (u -> 0) and stays steep for poor ones
(u -> r - r_ref), so improving the worst property pays most, and no property can buy off another.

``LogSigmoidCentered`` is the per-property ``TurnTransform``; ``BTScorer`` aggregates K named components (recorded
reward components, ``turn.info`` values, or other scorers' scores such as judge properties) into one per-turn
reward U, against references per component: a fixed mapping, or each component's mean over the group's rollouts.
``bt_judge`` builds it over K LLM-judge rubrics, one per property, the trainer's scorer (``agentgym train --method
bt``).

>>> round(log_sigmoid(2.0) + log_sigmoid(-1.0), 6)  # log(0.880797) + log(0.268941)
-1.44019
>>> log_sigmoid(-1000.0), log_sigmoid(1000.0)  # finite at both ends: no overflow
(-1000.0, 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.judge import JudgeScorer
from agentgym.rewards.papers import cite
from agentgym.rewards.process import ComponentScorer, TurnTransform
from agentgym.tools.llm import LLMClient

#: ``bt_judge``'s default properties: name -> rubric, each graded by its own judge request
PROPERTIES: Mapping[str, str] = MappingProxyType({
    "relevance": "Judge whether the agent's actions are relevant to the user's task and use what it has learned.",
    "form": "Judge whether every action is well formed: the tool calls or answers the task asks for, nothing else.",
    "correctness": "Judge whether the agent's final answer is correct and supported by what it found.",
})  # fmt: skip


def log_sigmoid(x: float) -> float:
    """log(1 / (1 + e^-x)), stable: min(x, 0) - log1p(e^-|x|), so it is finite for every finite x (about x for very
    negative x, -e^-x for large x) and -inf only at x = -inf. NaN stays NaN."""
    return min(x, 0.0) - math.log1p(math.exp(-abs(x))) if not math.isnan(x) else math.nan


@dataclass(frozen=True)
class LogSigmoidCentered(TurnTransform):
    """u = log sigmoid(r - ref) per turn: <= 0, increasing, with slope sigmoid(ref - r) in (0, 1), decreasing in r.

    >>> LogSigmoidCentered(ref=1.0)([1.0]) == [math.log(0.5)]
    True
    """

    ref: float = 0.0

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        return [log_sigmoid(float(r) - self.ref) for r in rewards]


def bt_utility(rewards: Mapping[str, float], ref: Mapping[str, float]) -> float:
    """U = sum_k log sigmoid(r_k - ref_k) over the components of ``rewards`` (each needs a reference)."""
    return float(sum(log_sigmoid(float(r) - float(ref[k])) for k, r in rewards.items()))


@dataclass
class BTScorer(TurnScorer):
    """U_t = sum_k log sigmoid(r_k,t - ref_k) over the K ``components`` (``level="turn"``), or U = sum_k log
    sigmoid(R_k - ref_k) on the trajectory totals R_k, put on its last turn (``level="outcome"``, 0 elsewhere).

    A component is a name, read per turn like ``ComponentScorer(name, source=source, missing=missing)`` (a
    recorded reward component by default; ``missing=0.0`` because an absent component adds nothing to the reward),
    or any ``TurnScorer`` (e.g. a judge of one property), named by its ``name``. ``ref`` is a mapping from component
    name to its reference, or ``"group"``: each component's mean over the group's rollouts (every valid turn of
    every rollout at ``level="turn"``, the rollouts' totals at ``"outcome"``), the stand-in for the paper's
    base-policy samples for the prompt; ``quantile=q`` takes that q-quantile instead of the mean. NaN (an unscored
    component) makes the turn's U NaN and the turn invalid.

    >>> from agentgym.contract.trajectory import Turn
    >>> turn = Turn("a", [], 1.0, True, False, {"reward_components": {"helpful": 2.0, "harmless": -1.0}})
    >>> t = Trajectory("e", 0, "q", "x", [], {}, turns=[turn])
    >>> s = BTScorer(("helpful", "harmless"), ref={"helpful": 0.0, "harmless": 0.0})([t])[0]
    >>> round(s.rewards[0], 6)  # log sigmoid(2) + log sigmoid(-1)
    -1.44019
    """

    components: Sequence[str | TurnScorer]
    ref: Mapping[str, float] | Literal["group"] = "group"
    quantile: float | None = None
    level: Literal["turn", "outcome"] = "turn"
    source: Literal["component", "info"] = "component"
    missing: float = 0.0
    name: str = "bt"

    def __post_init__(self) -> None:
        if not self.components:
            raise ValueError("BTScorer needs at least one component")
        if self.level not in ("turn", "outcome"):
            raise ValueError(f"level must be 'turn' or 'outcome', got {self.level!r}")
        if self.quantile is not None and not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {self.quantile}")
        self.scorers = [c if isinstance(c, TurnScorer) else ComponentScorer(c, source=self.source, missing=self.missing)
                        for c in self.components]  # fmt: skip
        names = [s.name for s in self.scorers]
        if len(set(names)) != len(names):
            raise ValueError(f"component names must differ, got {names}")
        if self.ref != "group":
            if not isinstance(self.ref, Mapping):
                raise ValueError(f"ref must be 'group' or a mapping of component -> reference, got {self.ref!r}")
            absent = sorted(set(names) - set(self.ref))
            if absent:
                raise ValueError(f"ref has no reference for {absent}")

    def _values(self, group: Sequence[Trajectory]) -> dict[str, list[list[float]]]:
        """name -> per trajectory -> per turn values (the trajectory's total at level outcome, as a 1-list)."""
        out: dict[str, list[list[float]]] = {}
        for scorer in self.scorers:
            per_traj = []
            for s in scorer(group):
                r = [x if ok else math.nan for x, ok in zip(s.rewards, s.valid, strict=True)]
                per_traj.append(r if self.level == "turn" else ([float(sum(r))] if r else []))
            out[scorer.name] = per_traj
        return out

    def references(self, values: Mapping[str, list[list[float]]]) -> dict[str, float]:
        """Each component's reference: the fixed one, or the group's mean (quantile) over its valid values."""
        if self.ref != "group":
            return {k: float(self.ref[k]) for k in values}
        refs = {}
        for k, per_traj in values.items():
            pooled = np.array([x for r in per_traj for x in r if not math.isnan(x)])
            if pooled.size == 0:
                refs[k] = math.nan
            else:
                refs[k] = float(pooled.mean() if self.quantile is None else np.quantile(pooled, self.quantile))
        return refs

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        values = self._values(group)
        refs = self.references(values)
        out = []
        for i, traj in enumerate(group):
            n = len(values[self.scorers[0].name][i])
            u = [sum(log_sigmoid(values[k][i][t] - refs[k]) for k in values) for t in range(n)]
            if self.level == "outcome":
                u = [0.0] * (len(traj.turns) - 1) + u if traj.turns else []
            out.append(TurnScores(self.name, [float(x) for x in u], extras={"references": refs}))
        return out


def bt_judge(
    client: LLMClient,
    rubrics: Mapping[str, str] | None = None,
    level: Literal["turn", "outcome"] = "outcome",
    ref: Mapping[str, float] | Literal["group"] = "group",
    quantile: float | None = None,
) -> BTScorer:
    """The BT transform over K LLM-judge properties (the trainer's ``bt`` scorer): one ``JudgeScorer`` per entry of
    ``rubrics`` (name -> rubric; None: :data:`PROPERTIES`), grading the whole trajectory once at ``level="outcome"``
    and every turn at ``"turn"``, aggregated by ``BTScorer`` as U = sum_k log sigmoid(r_k - ref_k)."""
    props = dict(PROPERTIES if rubrics is None else rubrics)
    if not props:
        raise ValueError("bt_judge needs at least one rubric")
    mode: Literal["turn", "trajectory"] = "trajectory" if level == "outcome" else "turn"
    judges = [JudgeScorer(client, rubric, name=name, mode=mode) for name, rubric in props.items()]
    return BTScorer(judges, ref=ref, quantile=quantile, level=level)


METHODS = (
    Method(
        "bt", "BT reward transform", "transform", "sum of log-sigmoid property rewards (a logical AND) of K judges",
        needs=("judge", "group"), paper=cite("BT reward transform"), code="agentgym.rewards.bt:bt_judge",
        choices=(
            "reference per component: the group mean of that component over the group's rollouts, standing in for "
            "base-policy samples of the prompt (knob ref='group' or a fixed mapping; knob quantile for a "
            "q-quantile instead of the mean)",
            "the group reference pools every valid turn of every rollout (level turn) or the rollouts' totals "
            "(level outcome); knob level",
            "the K properties are K rubrics graded by the same judge, one request each (knob rubrics: name -> "
            "rubric; default relevance, form, correctness); BTScorer also takes recorded reward components",
            "an absent recorded component reads 0.0 (it adds nothing to the reward; BTScorer's knob missing)",
            "the trainer adds U to the env's outcome (scorer_coef), so the verified outcome still counts",
        ),
        train={"algo": "grpo", "estimator": "grpo", "scorer": "bt", "reward_components": ["outcome"]},
        knobs_into="scorer_kwargs",
    ),
)  # fmt: skip
