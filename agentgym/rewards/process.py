"""Post-episode transforms of per-turn process rewards: G-RA gating, PRM Clip and PRM Delta.

A ``TurnTransform`` maps one trajectory's per-turn rewards (and its outcome, for gates) to new per-turn rewards;
transforms compose with ``Chain``. Two ``TurnScorer`` adapters put them to work on trajectories:
``ComponentScorer`` turns an existing per-turn reward component (or info value) into ``TurnScores``, and
``TransformedScorer`` transforms the scores of any other scorer (e.g. a judge).

* ``GatedAccumulation`` (G-RA): r~_t = r_t * 1[R_outcome >= delta]; the return is R_outcome + sum_t r~_t, so a
  closed gate leaves exactly the outcome.
* ``PRMClip``: r~_k = min(r_k - eta, 0): every process reward is a penalty, none can be farmed.
* ``PRMDelta``: r~_k = r_k - r_{k+1} (k < K), r~_K = r_K: the sum telescopes to r_1.

NaN (an unscored turn) propagates through Clip and Delta and leaves the turn invalid; a closed G-RA gate
zeroes every turn, scored or not, so the return is the outcome.

>>> PRMDelta()([0.2, 0.5, 0.9])
[-0.3, -0.4, 0.9]
>>> Chain((GatedAccumulation(delta=1.0), PRMClip(eta=0.5)))([0.2, 0.9], outcome=1.0)
[-0.3, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, overload

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

Outcome = str | Callable[[Trajectory], float]


def outcome_of(traj: Trajectory, outcome: Outcome = "outcome") -> float:
    """A trajectory's outcome reward: the sum over turns of the named component, or ``outcome(traj)``."""
    if callable(outcome):
        return float(outcome(traj))
    return float(sum(t.reward_components.get(outcome, 0.0) for t in traj.turns))


class TurnTransform:
    """Maps per-turn rewards to per-turn rewards; ``outcome`` is the trajectory's outcome (needed by gates).

    Call it on a list of floats (returns a list) or on ``TurnScores`` (returns new ``TurnScores``: same name,
    validity kept, and a turn becomes invalid if its transformed reward is NaN).
    """

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        raise NotImplementedError

    @overload
    def __call__(self, rewards: TurnScores, outcome: float | None = None) -> TurnScores: ...

    @overload
    def __call__(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]: ...

    def __call__(self, rewards: Sequence[float] | TurnScores, outcome: float | None = None) -> list[float] | TurnScores:
        if isinstance(rewards, TurnScores):
            out = self.apply(rewards.rewards, outcome)
            valid = [ok and not math.isnan(r) for ok, r in zip(rewards.valid, out, strict=True)]
            return TurnScores(rewards.name, out, valid, dict(rewards.extras))
        return self.apply([float(r) for r in rewards], outcome)


@dataclass(frozen=True)
class GatedAccumulation(TurnTransform):
    """G-RA: keep the process rewards only if the outcome reached ``delta`` (r~_t = r_t * 1[R >= delta]).

    With the gate closed every r~_t is exactly 0.0 (NaN included), so R_outcome + sum r~_t = R_outcome.

    >>> g = GatedAccumulation(delta=0.5)
    >>> g([0.3, 0.4], outcome=1.0), g([0.3, float("nan")], outcome=0.0)
    ([0.3, 0.4], [0.0, 0.0])
    """

    delta: float = 1.0

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        if outcome is None:
            raise ValueError("GatedAccumulation needs the trajectory's outcome")
        return [float(r) for r in rewards] if outcome >= self.delta else [0.0] * len(rewards)

    @overload
    def __call__(self, rewards: TurnScores, outcome: float | None = None) -> TurnScores: ...

    @overload
    def __call__(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]: ...

    def __call__(self, rewards: Sequence[float] | TurnScores, outcome: float | None = None) -> list[float] | TurnScores:
        if isinstance(rewards, TurnScores) and outcome is not None and outcome < self.delta:
            n = len(rewards.rewards)
            return TurnScores(rewards.name, [0.0] * n, [True] * n, dict(rewards.extras))
        return super().__call__(rewards, outcome)


def gated_return(rewards: Sequence[float], outcome: float, delta: float = 1.0) -> float:
    """G-RA's return R = R_outcome + sum_t r_t * 1[R_outcome >= delta] (exactly the outcome when gated).

    >>> gated_return([0.5, 0.5], outcome=0.0)
    0.0
    """
    return float(outcome + sum(GatedAccumulation(delta).apply(rewards, outcome)))


@dataclass(frozen=True)
class PRMClip(TurnTransform):
    """PRM Clip: r~_k = min(r_k - eta, 0), so no process reward is positive.

    >>> PRMClip(eta=0.5)([0.2, 0.9])
    [-0.3, 0.0]
    """

    eta: float = 0.0

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        return [float(r) - self.eta if math.isnan(r) else min(float(r) - self.eta, 0.0) for r in rewards]


@dataclass(frozen=True)
class PRMDelta(TurnTransform):
    """PRM Delta: r~_k = r_k - r_{k+1} for k < K and r~_K = r_K, so sum_k r~_k = r_1 (telescoping).

    >>> sum(PRMDelta()([0.7, 0.2, 0.4]))
    0.7
    """

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        r = [float(x) for x in rewards]
        return [r[k] - r[k + 1] for k in range(len(r) - 1)] + r[-1:]


@dataclass(frozen=True)
class Chain(TurnTransform):
    """Apply ``transforms`` left to right (each sees the same outcome).

    >>> Chain((PRMClip(eta=0.1), PRMDelta()))([0.5, 0.0])
    [0.1, -0.1]
    """

    transforms: tuple[TurnTransform, ...] = ()

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        out = [float(r) for r in rewards]
        for t in self.transforms:
            out = t.apply(out, outcome)
        return out

    @overload
    def __call__(self, rewards: TurnScores, outcome: float | None = None) -> TurnScores: ...

    @overload
    def __call__(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]: ...

    def __call__(self, rewards: Sequence[float] | TurnScores, outcome: float | None = None) -> list[float] | TurnScores:
        out: Sequence[float] | TurnScores = rewards
        for t in self.transforms:
            out = t(out, outcome)
        return out if isinstance(out, TurnScores) else list(out)


@dataclass
class ComponentScorer(TurnScorer):
    """Turn an existing per-turn value into ``TurnScores``, optionally transformed.

    ``source="component"`` reads ``turn.info["reward_components"][key]`` (e.g. the ``progress`` component a
    ``ProgressReward`` wrapper recorded); ``source="info"`` reads ``turn.info[key]`` (e.g. a PRM score or the
    env's raw ``progress`` level). A turn without the value gets ``missing`` (NaN by default: invalid, never a
    silent 0). ``outcome`` (a component name or a function of the trajectory) feeds gated transforms.

    >>> from agentgym.contract.trajectory import Turn
    >>> turns = [Turn("a", [], 0.0, False, False, {"reward_components": {"progress": 0.5}}),
    ...          Turn("b", [], 1.0, True, False, {"reward_components": {"progress": 0.5, "outcome": 1.0}})]
    >>> t = Trajectory("e", 0, "t", "x", [], {}, turns=turns)
    >>> ComponentScorer("progress", PRMClip(eta=0.6), name="progress_clip")([t])[0].rewards
    [-0.09999999999999998, -0.09999999999999998]
    """

    key: str = "progress"
    transform: TurnTransform | None = None
    name: str = ""
    source: Literal["component", "info"] = "component"
    outcome: Outcome = "outcome"
    missing: float = math.nan
    #: with ``source="info"``: score each turn by the change of ``info[key]`` over the turn (from the reset info's
    #: value), a verified progress *level* turned into per-turn progress, as ``ProgressReward`` does
    difference: bool = False

    def __post_init__(self) -> None:
        if self.source not in ("component", "info"):
            raise ValueError(f"source must be 'component' or 'info', got {self.source!r}")
        if self.difference and self.source != "info":
            raise ValueError("difference=True reads levels from the info: it needs source='info'")
        self.name = self.name or self.key

    def values(self, traj: Trajectory) -> list[float]:
        """The raw per-turn values before the transform."""
        if self.source == "component":
            return [float(t.reward_components.get(self.key, self.missing)) for t in traj.turns]
        levels = [float(t.info.get(self.key, self.missing)) for t in traj.turns]
        if not self.difference:
            return levels
        previous = [float(traj.reset_info.get(self.key, self.missing)), *levels[:-1]]
        return [b - a for a, b in zip(previous, levels, strict=True)]

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for traj in group:
            scores = TurnScores(self.name, self.values(traj))
            if self.transform is not None:
                scores = self.transform(scores, outcome_of(traj, self.outcome))
            out.append(scores)
        return out


@dataclass
class TransformedScorer(TurnScorer):
    """Apply a ``TurnTransform`` to the scores of another scorer (``name`` defaults to the inner name).

    >>> judge_gra = TransformedScorer(ComponentScorer("judge", source="info"), GatedAccumulation(1.0), "judge_gra")
    >>> judge_gra.name
    'judge_gra'
    """

    scorer: TurnScorer
    transform: TurnTransform
    name: str = ""
    outcome: Outcome = "outcome"

    def __post_init__(self) -> None:
        self.name = self.name or self.scorer.name

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for traj, scores in zip(group, self.scorer(group), strict=True):
            new = self.transform(scores, outcome_of(traj, self.outcome))
            assert isinstance(new, TurnScores)
            new.name = self.name
            out.append(new)
        return out


def gated_progress(key: str = "progress", delta: float = 1.0) -> ComponentScorer:
    """G-RA over the env's verified progress: per-turn progress ``info[key]`` changes, kept only when the outcome
    reached ``delta`` (a trainer scorer: ``agentgym train --method gra``)."""
    return ComponentScorer(key, GatedAccumulation(delta), name="gra", source="info", difference=True)


def clipped_progress(key: str = "progress", eta: float = 0.0) -> ComponentScorer:
    """PRM Clip over the env's verified per-turn progress: ``min(r - eta, 0)``, never a positive process reward."""
    return ComponentScorer(key, PRMClip(eta), name="prm_clip", source="info", difference=True)


def delta_progress(key: str = "progress") -> ComponentScorer:
    """PRM Delta over the env's verified per-turn progress: ``r_k - r_(k+1)``, so the sum is the first turn's."""
    return ComponentScorer(key, PRMDelta(), name="prm_delta", source="info", difference=True)


_PROCESS = {"algo": "grpo", "estimator": "gtpo", "reward_components": ["outcome"]}
METHODS: tuple[Method, ...] = (
    Method("gra", "G-RA", "transform", "process rewards kept only when the outcome passes a gate",
           needs=("outcome", "turn_signal"), paper=cite("G-RA"), code=f"{__name__}:gated_progress",
           choices=("the process reward is the env's verified progress per turn (any scorer can be gated: "
                    "TransformedScorer)",),
           train={**_PROCESS, "scorer": "gra"}, knobs_into="scorer_kwargs"),
    Method("prm_clip", "PRM Clip/Delta", "transform", "process rewards clipped to min(r - eta, 0)",
           needs=("turn_signal",), paper=cite("PRM Clip/Delta"), code=f"{__name__}:clipped_progress",
           train={**_PROCESS, "scorer": "prm_clip"}, knobs_into="scorer_kwargs"),
    Method("prm_delta", "PRM Clip/Delta", "transform", "process rewards as differences of successive steps",
           needs=("turn_signal",), paper=cite("PRM Clip/Delta"), code=f"{__name__}:delta_progress",
           train={**_PROCESS, "scorer": "prm_delta"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
