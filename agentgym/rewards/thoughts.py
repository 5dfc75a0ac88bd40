"""Thought-level process rewards (TP-GRPO, docs/step-labels.md): per-step correctness labels merged into thoughts.

``ThoughtSegments`` is a :class:`~agentgym.rewards.process.TurnTransform` over per-turn labels (1: the step is
right, 0: wrong; from a verifier's info key, a judge or :class:`~agentgym.rewards.faith.StepSupport`). It merges
each maximal run of same-label steps into one *thought* and pays one reward per thought, on every turn of it:

    r_t = w * (+1 if the thought's label is 1 else -1) * n_k / S      (turn t in thought k of n_k steps, S steps)

(``share=False``: ``w * (+-1)``, without the thought's share of the steps). ``w = 1 - p_hat`` is the
capability-adaptive weight: ``p_hat`` the policy's running success rate, so a policy that already succeeds leans on
the outcome alone (``p_hat = 1``: every r_t is 0, outcome only). A label is 1 where the scorer's value is at least
``threshold``; an unlabelled turn (NaN) is invalid, gets NaN and splits the thoughts around it.

``ThoughtScorer`` is the trainer's scorer: labels from ``labels`` (``"info:KEY"``: the env's verified per-step label
``info[KEY]``, e.g. the diagnostics' ``correct``; ``"step_support"``: FaithRL's support labels), ``p_hat`` kept
across iterations (``persistent``) as an exponential moving average of each batch's success rate.

>>> ThoughtSegments()([1, 1, 0, 0, 1])  # thoughts [1, 1], [0, 0], [1]: +2/5, -2/5, +1/5
[0.4, 0.4, -0.4, -0.4, 0.2]
>>> ThoughtSegments(p_hat=0.5, share=False)([1, 0, 0])
[0.5, -0.5, -0.5]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.process import TurnTransform


def thoughts(labels: Sequence[float]) -> list[tuple[int, int, float]]:
    """The maximal runs of equal labels as ``(start, end, label)`` (``end`` exclusive); a NaN label is its own run
    (label NaN), so it splits the runs around it.

    >>> thoughts([1, 1, 0, 0, 1])
    [(0, 2, 1.0), (2, 4, 0.0), (4, 5, 1.0)]
    """
    out: list[tuple[int, int, float]] = []
    for t, x in enumerate(float(v) for v in labels):
        if out and not math.isnan(x) and out[-1][2] == x:
            out[-1] = (out[-1][0], t + 1, x)
        else:
            out.append((t, t + 1, x))
    return out


@dataclass(frozen=True)
class ThoughtSegments(TurnTransform):
    """TP-GRPO's thought rewards over per-turn labels (see the module docstring). ``p_hat``: the running success
    rate (w = 1 - p_hat); ``share``: scale each thought's +-1 by its share of the steps; ``threshold``: a value at
    least this is label 1."""

    p_hat: float = 0.0
    share: bool = True
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_hat <= 1.0:
            raise ValueError(f"p_hat is a success rate in [0, 1], got {self.p_hat}")

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        labels = [math.nan if math.isnan(float(r)) else float(float(r) >= self.threshold) for r in rewards]
        steps = sum(not math.isnan(x) for x in labels)
        w = 1.0 - self.p_hat
        out = [math.nan] * len(labels)
        for start, end, label in thoughts(labels):
            if math.isnan(label):
                continue
            size = (end - start) / steps if self.share else 1.0
            value = w * (1.0 if label == 1.0 else -1.0) * size + 0.0
            out[start:end] = [value] * (end - start)
        return out


@dataclass
class ThoughtScorer(TurnScorer):
    """TP-GRPO in the trainer: per-turn labels (``labels``: ``"info:KEY"`` or ``"step_support"``) through
    :class:`ThoughtSegments` with ``p_hat`` the running success rate: before scoring a batch, ``p_hat <- (1 -
    momentum) * p_hat + momentum * (the batch's success rate)``, starting from the first batch's rate. A trajectory
    succeeded where its final info says so (``Trajectory.success``). Extras: ``p_hat`` and the turn ``labels``."""

    persistent: ClassVar[bool] = True

    labels: str = "info:correct"
    share: bool = True
    threshold: float = 0.5
    momentum: float = 0.1
    name: str = "thoughts"
    p_hat: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not (self.labels == "step_support" or (self.labels.startswith("info:") and len(self.labels) > 5)):
            raise ValueError(f"labels must be 'info:KEY' or 'step_support', got {self.labels!r}")
        if not 0.0 < self.momentum <= 1.0:
            raise ValueError(f"momentum must lie in (0, 1], got {self.momentum}")

    def turn_labels(self, group: Sequence[Trajectory]) -> list[list[float]]:
        """The per-turn labels of each trajectory (NaN where a turn has none)."""
        if self.labels == "step_support":
            from agentgym.rewards.faith import StepSupport

            return [list(s.rewards) for s in StepSupport()(group)]
        key = self.labels[5:]
        out = []
        for traj in group:
            row = []
            for turn in traj.turns:
                v = turn.info.get(key)
                row.append(math.nan if v is None else float(v))
            out.append(row)
        return out

    def update(self, trajectories: Sequence[Trajectory]) -> float:
        """Fold a batch's success rate into ``p_hat`` and return it."""
        if trajectories:
            rate = sum(t.success for t in trajectories) / len(trajectories)
            self.p_hat = rate if self.p_hat is None else (1.0 - self.momentum) * self.p_hat + self.momentum * rate
        return 0.0 if self.p_hat is None else self.p_hat

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        """Update ``p_hat`` with the whole batch, then score every group."""
        p_hat = self.update([t for g in groups for t in g])
        transform = ThoughtSegments(min(1.0, max(0.0, p_hat)), self.share, self.threshold)
        out = []
        for group in groups:
            scores = []
            for labels in self.turn_labels(group):
                rewards = transform.apply(labels)
                scores.append(TurnScores(self.name, rewards, extras={"p_hat": p_hat, "labels": labels}))
            out.append(scores)
        return out

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([group])[0]


METHODS: tuple[Method, ...] = (
    Method("tp_grpo", "TP-GRPO", "transform",
           "runs of same-label steps merged into thoughts, one +-reward per thought, weighted by 1 - success rate",
           needs=("outcome", "turn_signal"), paper=cite("TP-GRPO"), code=f"{__name__}:ThoughtScorer",
           choices=("a thought's reward is +-1 times its share of the steps, on every turn of the thought (knob "
                    "share=False: +-1)",
                    "capability-adaptive weight w = 1 - p_hat, p_hat an exponential moving average of the batches' "
                    "success rates (knob momentum = 0.1), starting from the first batch's rate",
                    "labels: the env's verified per-step label info['correct'] (knob labels: 'info:KEY', or "
                    "'step_support' for FaithRL's support labels); a value >= threshold (0.5) is right; an "
                    "unlabelled turn is invalid and splits the thoughts around it",
                    "the thought rewards are added to the outcome (scorer_coef) and read by gtpo"),
           train={"algo": "grpo", "scorer": f"{__name__}:ThoughtScorer", "estimator": "gtpo",
                  "reward_components": ["outcome"], "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
