"""PPR: principle-based process rewards, renormalised with the outcome (``ppr``).

A judge grades each turn against a list of ``principles`` (one ``"score"`` question per turn), giving a process
score p_t in [0, 1]. ``ReNorm`` calibrates it with the trajectory's outcome R: r_t = R + p_t - ``offset``. With the
default ``offset`` 1 and R in {0, 1}, every step of a failed trajectory gets r_t in [-1, 0] and every step of a
successful one r_t in [0, 1]: a step's sign never contradicts the outcome, and within a trajectory a better-graded
step always earns more. (The paper does not state the formula; this is the choice, with the offset as a knob.)
An ungraded step (the judge gave no verdict) is NaN and invalid, never a silent 0.

The rule of each question (what ``RuleJudge`` answers, the verified variant) is the env's verified turn signal
clipped to [0, 1] (``signal_key``/``signal_mode``, default the env's ``TURN_SIGNALS`` entry): on Chain-v0, p_t is
1 for a right choice and 0 for a wrong one.

>>> ReNorm()([0.75, 0.25], outcome=1.0), ReNorm()([0.75, 0.25], outcome=0.0)
([0.75, 0.25], [-0.25, -0.75])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.advantages.signals import TurnSignal
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.judge import (
    GOLD_PROMPT,
    TURN_PROMPT,
    conversation_until,
    render_conversation,
    render_gold,
    signal_rule,
    turn_signals,
)
from agentgym.rewards.papers import cite
from agentgym.rewards.process import TurnTransform, outcome_of
from agentgym.rewards.verdicts import Judge, Question, ask_each, verdict_errors, verdict_values

DEFAULT_PRINCIPLES: tuple[str, ...] = (
    "The turn is a well-formed action that the environment accepts.",
    "It is relevant to the user's task and uses what the agent has already learned.",
    "It does not repeat an earlier action without a reason.",
    "It moves the agent closer to a correct final answer.",
)


@dataclass(frozen=True)
class ReNorm(TurnTransform):
    """PPR's ReNorm: r_t = R + p_t - ``offset`` (R: the trajectory's outcome; NaN stays NaN).

    >>> ReNorm(offset=1.0)([1.0, 0.0, float("nan")], outcome=0.0)
    [0.0, -1.0, nan]
    """

    offset: float = 1.0

    def apply(self, rewards: Sequence[float], outcome: float | None = None) -> list[float]:
        if outcome is None:
            raise ValueError("ReNorm needs the trajectory's outcome")
        return [float(outcome) + float(p) - self.offset for p in rewards]


def principles_question(principles: Sequence[str]) -> str:
    """The question that grades a turn against ``principles`` (numbered).

    >>> print(principles_question(["Be brief.", "Be right."]))
    How well does the agent's last turn follow these principles?
    1. Be brief.
    2. Be right.
    A turn that follows every principle gets 10; one that follows none gets 0.
    """
    listed = "\n".join(f"{k}. {p.strip()}" for k, p in enumerate(principles, 1))
    return (
        f"How well does the agent's last turn follow these principles?\n{listed}\n"
        "A turn that follows every principle gets 10; one that follows none gets 0."
    )


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, x))


@dataclass
class PrincipleScorer(TurnScorer):
    """PPR (see the module docstring): p_t from one judge ``"score"`` question per turn against ``principles``, then
    ``ReNorm(offset)`` with the outcome (the sum of the ``outcome`` reward component); ``renorm=False`` keeps the raw
    p_t. ``show_gold`` adds the task's gold to the judge's prompt (never the policy's). A group is one judge batch.
    Extras: ``p`` (the raw grades), ``outcome`` and the judge's ``errors``.

    >>> from agentgym.rewards.verdicts import RuleJudge
    >>> PrincipleScorer(RuleJudge()).name
    'ppr'
    """

    judge: Judge
    principles: tuple[str, ...] = DEFAULT_PRINCIPLES
    offset: float = 1.0
    renorm: bool = True
    outcome: str = "outcome"
    show_gold: bool = False
    signal_key: str = ""
    signal_mode: Literal["value", "delta"] = "value"
    name: str = "ppr"

    def __post_init__(self) -> None:
        TurnSignal("x", self.signal_mode)  # checks the mode
        self.principles = tuple(str(p) for p in self.principles)
        if not self.principles or not all(p.strip() for p in self.principles):
            raise ValueError("principles must be a non-empty list of non-empty strings")
        if not math.isfinite(self.offset):
            raise ValueError(f"offset must be finite, got {self.offset}")

    def prompt(self, traj: Trajectory, turn: int) -> str:
        """What the judge reads about turn ``turn``."""
        gold = ""
        if self.show_gold and "gold" in traj.reset_info:
            gold = GOLD_PROMPT.format(gold=render_gold(traj.reset_info["gold"]))
        conversation = render_conversation(conversation_until(traj, turn))
        return TURN_PROMPT.format(gold=gold, conversation=conversation, rubric=principles_question(self.principles))

    def questions(self, traj: Trajectory) -> list[Question]:
        """One score question per turn; its rule is the verified signal clipped to [0, 1]."""
        signals, where = turn_signals(traj, self.signal_key, self.signal_mode)
        return [Question("score", self.prompt(traj, t), rule=signal_rule(s, where, t, _clip01))
                for t, s in enumerate(signals)]  # fmt: skip

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for traj, vs in zip(group, ask_each(self.judge, [self.questions(traj) for traj in group]), strict=True):
            p, outcome = verdict_values(vs), outcome_of(traj, self.outcome)
            extras = {"p": p, "outcome": outcome, "errors": verdict_errors(vs)}
            scores = TurnScores(self.name, p, [v.ok for v in vs], extras)
            out.append(ReNorm(self.offset)(scores, outcome) if self.renorm else scores)
        return out


METHODS: tuple[Method, ...] = (
    Method("ppr", "PPR", "scorer", "principle-based process rewards renormalised with the outcome",
           needs=("judge", "outcome"), paper=cite("PPR"), code=f"{__name__}:PrincipleScorer",
           choices=("ReNorm is r_t = R + p_t - offset with offset = 1 (knob offset): for R in {0, 1} a failed "
                    "trajectory's steps are <= 0 and a successful one's >= 0",
                    "p_t: one judge score question (0-10, read as [0, 1]) per turn against a list of principles "
                    "(knob principles); the rule judge's p_t is the env's verified turn signal clipped to [0, 1]",
                    "the trainer adds r_t to the env's turn rewards (the outcome stays on the last turn)"),
           train={"algo": "grpo", "scorer": "ppr", "scorer_kwargs": {"judge": "rule"}, "estimator": "gtpo",
                  "reward_components": ["outcome"]},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
