"""PAR, Preference As Reward: r' = sigmoid(r - r_ref), the reward model's own preference of a response over a
reference response as the RL reward (bounded, steepest near the reference, a function of the centred reward).

``PreferenceAsReward`` is the ``TurnTransform``; with M reference rewards it averages the sigmoids,
r' = 1/M sum_m sigmoid(r - r_ref,m), as the paper's code does (``average="reference"`` takes sigmoid(r - mean_m
r_ref,m) instead). ``level="turn"`` transforms every turn's score; ``level="outcome"`` transforms the trajectory's
total and puts it on the last turn (0 elsewhere), for an outcome or final-answer score. ``PARScorer`` applies it to
another scorer's scores with each task's own references: fixed ones, or the same scorer's scores of reference
trajectories (``reference_rewards``) that a provider gives per group, such as ``DemoReferences`` (the env's
demonstration agent replaying the task), or the group's own rollouts. ``par_judge`` builds PAR over an LLM judge, the
trainer's scorer (``agentgym train --method par``).

>>> par = PreferenceAsReward(references=(0.0, 1.0))
>>> [round(x, 6) for x in par([1.0, 0.5])]  # (sigmoid(1) + sigmoid(0)) / 2, (sigmoid(0.5) + sigmoid(-0.5)) / 2
[0.615529, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.judge import DEFAULT_RUBRIC, JudgeScorer
from agentgym.rewards.papers import cite
from agentgym.rewards.process import TurnTransform
from agentgym.tools.llm import LLMClient

Level = Literal["turn", "outcome"]
#: Reference trajectories for a group: each task's reference episodes (their ``task_id`` the task's)
ReferenceSource = Callable[[Sequence[Trajectory]], Sequence[Trajectory]]


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


def scalar_reward(scores: TurnScores, level: Level) -> float | None:
    """One trajectory's reward as a reference: the mean of its valid turn scores (``level="turn"``) or its total
    (``"outcome"``, only when every turn is scored); None when there is none."""
    valid = [r for r, ok in zip(scores.rewards, scores.valid, strict=True) if ok]
    if not valid or (level == "outcome" and not scores.all_valid):
        return None
    return float(sum(valid)) if level == "outcome" else float(sum(valid) / len(valid))


def reference_rewards(
    references: Iterable[Trajectory],
    scorer: TurnScorer,
    level: Level = "turn",
    key: Callable[[Trajectory], str] = _task,
) -> dict[str, list[float]]:
    """Each task's reference rewards: ``scorer``'s scores of the reference trajectories of that task, one per
    trajectory, in their order (``scalar_reward``). A reference the scorer could not score at all is left out (so a
    task may end with none)."""
    groups: dict[str, list[Trajectory]] = {}
    for traj in references:
        groups.setdefault(key(traj), []).append(traj)
    out: dict[str, list[float]] = {}
    for task, group in groups.items():
        refs = out.setdefault(task, [])
        refs += [x for x in (scalar_reward(s, level) for s in scorer(group)) if x is not None]
    return out


@dataclass
class DemoReferences:
    """Reference trajectories from the env's demonstration agent (``AgentEnv.demo_agent``: its oracle unless it names
    another) replaying each task of a group: the env made again from the trajectory's ``env_id`` and ``env_kwargs``
    (updated by ``env_kwargs``), reset with its ``seed`` and ``options``; ``n`` episodes per task (agent seeds seed,
    seed + 1, ...), each at most ``max_turns`` turns (None: until the env ends it). A replay whose ``task_id``
    differs from the trajectory's raises ``ValueError``: the trajectory's settings do not recreate its task.

    The env id must be registered (it is wherever the trajectory was played)."""

    n: int = 1
    max_turns: int | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n < 1 or (self.max_turns is not None and self.max_turns < 1):
            raise ValueError(f"n and max_turns must be >= 1, got {self.n}, {self.max_turns}")

    def __call__(self, group: Sequence[Trajectory]) -> list[Trajectory]:
        tasks: dict[tuple[str, int | None, str], Trajectory] = {}
        for t in group:  # one replay per task
            tasks.setdefault((t.env_id, t.seed, t.task_id), t)
        return [self.play(t, j) for t in tasks.values() for j in range(self.n)]

    def play(self, traj: Trajectory, j: int = 0) -> Trajectory:
        """The demonstration agent's episode on ``traj``'s task (agent seed ``traj.seed + j``)."""
        kwargs = {**traj.env_kwargs, **self.env_kwargs}
        env = gymnasium.make(traj.env_id, **kwargs)
        try:
            demo = getattr(env.unwrapped, "demo_agent", None)
            factory = getattr(env.unwrapped, "agents", {}).get(demo) if isinstance(demo, str) else demo
            if factory is None:
                raise ValueError(f"PAR: {traj.env_id} has no demonstration agent to play reference trajectories")
            agent = factory()
            obs, info = env.reset(seed=traj.seed, options=dict(traj.options) or None)
            if info.get("task_id") is not None and str(info["task_id"]) != traj.task_id:
                raise ValueError(f"PAR: replaying {traj.env_id} with seed {traj.seed} and env_kwargs {kwargs} gives "
                                 f"task {info['task_id']!r}, not {traj.task_id!r} (set env_kwargs)")  # fmt: skip
            agent.reset(seed=None if traj.seed is None else traj.seed + j)
            ref = Trajectory(traj.env_id, traj.seed, traj.task_id, agent.name, list(obs), dict(info),
                             env_kwargs=kwargs, options=dict(traj.options), group_id=traj.group_id)  # fmt: skip
            messages = list(obs)
            while self.max_turns is None or len(ref.turns) < self.max_turns:
                action = agent.act(messages, info)
                obs, reward, terminated, truncated, info = env.step(action)
                ref.turns.append(Turn(action, list(obs), float(reward), bool(terminated), bool(truncated), info))
                messages += [{"role": "assistant", "content": action}, *obs]
                if terminated or truncated:
                    break
            agent.close()
            return ref
        finally:
            env.close()


@dataclass
class PARScorer(TurnScorer):
    """PAR on another scorer's scores (a judge, a reward model, or ``ComponentScorer("outcome", missing=0.0)``),
    each trajectory against the reference rewards of its own task. ``references`` is a fixed mapping task -> its
    rewards (e.g. from ``reference_rewards``); or a ``ReferenceSource`` called on each group, whose trajectories the
    same scorer scores (``reference_rewards``); or ``"group"``: the group's own rollouts, so r' is a rollout's mean
    preference over the group's rollouts (itself among them, a tie: 1/2), the current policy standing in for the
    warm-start one. ``m`` keeps the first m references of a task (None: all). A task without references raises
    ``KeyError`` with a fixed mapping, and leaves its rollouts unscored (NaN, invalid) when the scorer could not
    score any of the group's references: a made-up reference would silently change the reward's centre. The
    references used are kept in each ``TurnScores.extras["references"]``.

    >>> from agentgym.contract.trajectory import Turn
    >>> from agentgym.rewards.process import ComponentScorer
    >>> turn = Turn("a", [], 1.0, True, False, {"reward_components": {"outcome": 1.0}})
    >>> t = Trajectory("e", 0, "q1", "x", [], {}, turns=[turn])
    >>> PARScorer(ComponentScorer("outcome"), {"q1": [1.0, 3.0]}, m=1)([t])[0].rewards  # sigmoid(1 - 1)
    [0.5]
    """

    scorer: TurnScorer
    references: Mapping[str, Sequence[float]] | ReferenceSource | Literal["group"]
    average: Literal["sigmoid", "reference"] = "sigmoid"
    level: Level = "turn"
    m: int | None = None
    name: str = "par"
    key: Callable[[Trajectory], str] = _task

    def __post_init__(self) -> None:
        if self.m is not None and self.m < 1:
            raise ValueError(f"m must be >= 1 or None, got {self.m}")
        if isinstance(self.references, str) and self.references != "group":
            raise ValueError(f"references must be a mapping, a callable or 'group', got {self.references!r}")

    def transform(
        self, traj: Trajectory, references: Mapping[str, Sequence[float]] | None = None
    ) -> PreferenceAsReward:
        """The transform for ``traj``'s task (``references``: the group's, default the fixed mapping)."""
        if references is None:
            if not isinstance(self.references, Mapping):
                raise TypeError("PAR: pass the group's references (this scorer computes them per group)")
            references = self.references
        task = self.key(traj)
        refs = list(references.get(task, ()))[: self.m]
        if not refs:
            raise KeyError(f"PAR: no reference rewards for task {task!r}")
        return PreferenceAsReward(tuple(refs), self.average, self.level)

    def group_references(self, group: Sequence[Trajectory], scores: Sequence[TurnScores]) -> dict[str, list[float]]:
        """Each task's reference rewards for this group (``scores``: the scorer's scores of ``group``)."""
        if isinstance(self.references, Mapping):
            return {k: [float(x) for x in v] for k, v in self.references.items()}
        if self.references == "group":
            out: dict[str, list[float]] = {}
            for traj, s in zip(group, scores, strict=True):
                x = scalar_reward(s, self.level)
                out.setdefault(self.key(traj), []).extend([] if x is None else [x])
            return out
        assert callable(self.references)
        return reference_rewards(self.references(group), self.scorer, self.level, self.key)

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        scores = self.scorer(group)
        refs = self.group_references(group, scores) if group else {}
        out = []
        for traj, s in zip(group, scores, strict=True):
            if not isinstance(self.references, Mapping) and not refs.get(self.key(traj)):
                # the scorer could not score any reference of this task: every turn unscored, never a made-up centre
                errors = {**s.extras.get("errors", {}), "references": f"no reference reward for {self.key(traj)!r}"}
                n = len(s.rewards)
                out.append(TurnScores(self.name, [math.nan] * n, [False] * n, {**s.extras, "errors": errors}))
                continue
            transform = self.transform(traj, refs)
            new = transform(s)
            new.name = self.name
            new.extras["references"] = list(transform.references)
            out.append(new)
        return out


def par_judge(
    client: LLMClient,
    rubric: str = DEFAULT_RUBRIC,
    level: Level = "outcome",
    reference: Literal["demo", "group"] = "demo",
    m: int = 1,
    average: Literal["sigmoid", "reference"] = "sigmoid",
    max_turns: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> PARScorer:
    """PAR over an LLM judge (the trainer's ``par`` scorer): the judge grades each rollout against ``rubric`` (the
    whole trajectory once at ``level="outcome"``, every turn at ``"turn"``), and r' = sigmoid(r - r_ref) with r_ref
    the same judge's grade of a reference trajectory of the task: ``reference="demo"``, ``m`` episodes of the env's
    demonstration agent (``DemoReferences``: ``max_turns``, ``env_kwargs`` over the trajectory's own), or
    ``"group"``, the group's own rollouts (every one of them; ``m`` is not used)."""
    if reference not in ("demo", "group"):
        raise ValueError(f"reference must be 'demo' or 'group', got {reference!r}")
    judge = JudgeScorer(client, rubric, mode="trajectory" if level == "outcome" else "turn")
    if reference == "group":
        return PARScorer(judge, "group", average, level, m=None)
    return PARScorer(judge, DemoReferences(m, max_turns, dict(env_kwargs or {})), average, level, m=m)


METHODS = (
    Method(
        "par", "PAR", "transform", "bounded preference-as-reward transform sigmoid(r - r_ref) of a judge's grade",
        needs=("judge", "reference"), paper=cite("PAR"), code="agentgym.rewards.par:par_judge",
        choices=(
            "exactly the sigmoid; M references averaged as the mean of the M sigmoids, as the paper's code does "
            "(knob average='sigmoid'|'reference': sigmoid of r minus the mean reference); knob m keeps the first m",
            "per turn or on the trajectory's total, put on its last turn (knob level='turn'|'outcome'; the judge "
            "grades every turn or the whole trajectory once)",
            "a reference reward is the same judge's grade of a reference trajectory of the task: its mean valid "
            "turn score (level turn) or its total (level outcome), see reference_rewards",
            "reference trajectories: m episodes of the env's demonstration agent replaying the task from the "
            "rollout's env id, env_kwargs and seed (knob reference='demo'), or the group's own rollouts, the current "
            "policy standing in for the warm-start one (reference='group': r' = mean preference over the group)",
            "the trainer adds r' to the env's outcome (scorer_coef), so the verified outcome still counts",
        ),
        train={"algo": "grpo", "estimator": "grpo", "scorer": "par", "reward_components": ["outcome"]},
        knobs_into="scorer_kwargs",
    ),
)  # fmt: skip
