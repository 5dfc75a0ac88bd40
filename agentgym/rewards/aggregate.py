"""Aggregating rubric and aspect rewards within a group: POW3R's policy-aware criterion weights and ALaRM's
consistency-filtered aspect rewards.

POW3R (:func:`pow3r_weights`, :class:`PolicyAwareRubric`): a rubric of K criteria with human weights h_k in
categories, and the group's per-rollout criterion scores c_ik (CM2's checklist, :mod:`agentgym.rewards.checklist`).
A criterion that every rollout meets, or none does, teaches nothing about this group, so the weights follow the
"rollout-level contrast": ``u_k = h_k * (std_i c_ik + eps)``, renormalised within each category so that the category
keeps its human total, ``w_k = H_c * u_k / sum_{k' in c} u_k'``; ``R_i = sum_k w_k c_ik / sum_k h_k`` (in [0, 1]).

ALaRM (:func:`alarm_combine`, :class:`HierarchicalReward`): a holistic reward R_h and aspect rewards R_a. Aspect a is
kept only if its pairwise preferences inside the group agree with R_h's on at least a share ``tau`` of the pairs R_h
orders; then ``R = R_h + sum_{a kept} lambda * R_a``.

>>> w = pow3r_weights([[1, 1, 0], [1, 0, 0]], human=[1.0, 1.0, 1.0], categories=["a", "a", "b"], eps=0.0)
>>> w.tolist()   # criterion 0 is met by both rollouts: its category's weight goes to criterion 1
[0.0, 2.0, 1.0]
>>> r, kept = alarm_combine([1.0, 0.0], {"good": [0.9, 0.1], "bad": [0.1, 0.9]}, tau=0.5, lam=0.5)
>>> r.tolist(), kept
([1.45, 0.05], ('good',))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.checklist import (
    Assign,
    ChecklistBuilder,
    ChecklistScorer,
    CriterionScores,
    Scope,
    rule_judge,
)
from agentgym.rewards.judge import render_conversation
from agentgym.rewards.papers import cite
from agentgym.rewards.process import outcome_of
from agentgym.rewards.verdicts import Judge, Question

Contrast = Literal["std", "mad"]


def _contrast(column: np.ndarray, contrast: Contrast) -> float:
    """The spread of one criterion's scores over the rollouts that have one (0 for fewer than two)."""
    x = column[~np.isnan(column)]
    if x.size < 2:
        return 0.0
    if contrast == "std":
        return float(x.std())
    return float(np.abs(x - x.mean()).mean())


def pow3r_weights(
    scores: Sequence[Sequence[float]] | np.ndarray,
    human: Sequence[float],
    categories: Sequence[str],
    eps: float = 0.05,
    contrast: Contrast = "std",
) -> np.ndarray:
    """POW3R's weights for one group: ``scores[i][k]`` is rollout i's score on criterion k (NaN: no verdict, left
    out of the spread). ``u_k = h_k * (spread_k + eps)`` (``contrast``: the population ``"std"`` or the mean absolute
    deviation ``"mad"``), then each category's weights are rescaled to sum to its human total; a category whose u
    are all 0 (eps = 0 and no spread) keeps its human weights."""
    c = np.asarray(scores, dtype=np.float64).reshape(-1, len(human))
    h = np.asarray(human, dtype=np.float64)
    if eps < 0 or (h < 0).any():
        raise ValueError(f"eps and the human weights must be >= 0, got eps={eps}, weights={h.tolist()}")
    if contrast not in ("std", "mad"):
        raise ValueError(f"contrast must be 'std' or 'mad', got {contrast!r}")
    u = np.array([h[k] * (_contrast(c[:, k], contrast) + eps) for k in range(h.size)])
    w = np.zeros(h.size)
    for cat in dict.fromkeys(categories):
        idx = np.array([k for k, name in enumerate(categories) if name == cat])
        total_u = u[idx].sum()
        w[idx] = h[idx] if total_u <= 0 else h[idx].sum() * u[idx] / total_u
    return w


def _aligned(results: Sequence[CriterionScores]) -> None:
    """``ValueError`` unless every rollout of the group has the same criteria (POW3R weighs a shared rubric)."""
    first = results[0]
    for res in results[1:]:
        if res.texts != first.texts or res.categories != first.categories or res.weights != first.weights:
            raise ValueError("POW3R needs one rubric per group: the rollouts' checklists differ")


@dataclass
class PolicyAwareRubric(TurnScorer):
    """POW3R over CM2's checklist (see the module docstring): the criteria are judged as
    :class:`~agentgym.rewards.checklist.ChecklistScorer` judges them (same ``judge``, ``checklists``, ``scope``,
    ``require_quote``), then weighted by :func:`pow3r_weights` within the group and paid by ``assign``. A rollout
    with a criterion the judge could not score is invalid where that criterion's reward lands. The weights go to
    ``TurnScores.extras["pow3r_weights"]``."""

    judge: Judge = field(default_factory=rule_judge)
    checklists: str | ChecklistBuilder = "tool_use"
    eps: float = 0.05
    contrast: Contrast = "std"
    assign: Assign = "end"
    scope: Scope = "agent"
    require_quote: bool = False
    name: str = "pow3r"

    def __post_init__(self) -> None:
        self._checklist = ChecklistScorer(self.judge, self.checklists, self.assign, self.scope, self.require_quote,
                                          self.name)  # fmt: skip
        pow3r_weights([[0.0]], [1.0], ["a"], self.eps, self.contrast)  # validates eps and contrast

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        results = self._checklist.criterion_scores(group)
        live = [res for traj, res in zip(group, results, strict=True) if traj.turns]
        if not live:
            return [TurnScores(self.name, []) for _ in group]
        _aligned(live)
        human = live[0].weights
        w = pow3r_weights([res.scores for res in live], human, live[0].categories, self.eps, self.contrast)
        out = []
        for traj, res in zip(group, results, strict=True):
            ts = self._checklist.turn_scores(traj, res, [wk * c for wk, c in zip(w, res.scores, strict=True)],
                                             sum(human))  # fmt: skip
            ts.extras["pow3r_weights"] = w.tolist()
            out.append(ts)
        return out


# -- ALaRM ------------------------------------------------------------------------------------------------------------
def agreement(holistic: Sequence[float] | np.ndarray, aspect: Sequence[float] | np.ndarray) -> float:
    """The share of the pairs that ``holistic`` orders strictly on which ``aspect`` prefers the same rollout (an
    aspect tie counts half); NaN when ``holistic`` orders no pair.

    >>> agreement([1, 1, 0, 0], [1.0, 0.5, 0.5, 0.0])   # pairs (0,2) (0,3) (1,3) agree, (1,2) is an aspect tie
    0.875
    """
    h, a = np.asarray(holistic, dtype=np.float64), np.asarray(aspect, dtype=np.float64)
    agree, pairs = 0.0, 0
    for i in range(h.size):
        for j in range(i + 1, h.size):
            if h[i] == h[j]:
                continue
            pairs += 1
            same = np.sign(a[i] - a[j]) * np.sign(h[i] - h[j])
            agree += 1.0 if same > 0 else 0.5 if same == 0 else 0.0
    return agree / pairs if pairs else math.nan


def alarm_combine(
    holistic: Sequence[float],
    aspects: Mapping[str, Sequence[float]],
    tau: float = 0.5,
    lam: float = 0.5,
    ties_only: bool = False,
    keep_unordered: bool = True,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """ALaRM for one group: ``(R, kept aspects)``. An aspect is kept if its :func:`agreement` with ``holistic`` is at
    least ``tau`` (where ``holistic`` orders no pair, ``keep_unordered`` decides); ``R = R_h + lam * sum_{kept} R_a``.
    ``ties_only``: the aspect sum is scaled down so it never reverses a pair ``holistic`` orders (it only orders
    holistic ties). Any NaN in a kept aspect or in ``holistic`` makes that rollout's R NaN."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must lie in [0, 1], got {tau}")
    h = np.asarray(holistic, dtype=np.float64)
    kept = []
    for name, values in aspects.items():
        if len(values) != h.size:
            raise ValueError(f"aspect {name!r} has {len(values)} rewards for a group of {h.size}")
        share = agreement(h, values)
        if keep_unordered if math.isnan(share) else share >= tau:
            kept.append(name)
    extra = lam * np.sum([np.asarray(aspects[a], dtype=np.float64) for a in kept], axis=0) if kept else np.zeros(h.size)
    if ties_only and kept:
        finite = np.isfinite(extra) & np.isfinite(h)
        gaps = [abs(x - y) for x in h[finite] for y in h[finite] if x != y]
        spread = float(np.ptp(extra[finite])) if finite.any() else 0.0
        if gaps and spread > 0:
            extra = extra * min(1.0, min(gaps) / (2.0 * spread))
    return h + extra, tuple(kept)


HOLISTIC_PROMPT = (
    "Grade how well the AI agent accomplished the user's task in this conversation, as a whole.\n\n"
    "Conversation:\n\n{conversation}"
)


def _clamped(x: float) -> Callable[[], float]:
    return lambda: min(1.0, max(0.0, x))


@dataclass
class HierarchicalReward(TurnScorer):
    """ALaRM: a holistic reward refined by the aspect rewards that agree with it (see the module docstring).

    The holistic reward R_h is the env's outcome (``holistic="outcome"``: the ``outcome`` reward component) or a
    judge's grade of the whole trajectory (``"judge"``: a ``score`` question whose rule, for a rule judge, is the
    outcome). The aspects are the categories of a checklist (``checklists``, judged as
    :class:`~agentgym.rewards.checklist.ChecklistScorer` judges them): aspect a's reward is the share of category a's
    criteria met. The scorer pays on the last turn the part of R the turn rewards do not already hold: ``R - R_h``
    where R_h is the env's outcome (so outcome + this = R when the trainer counts every component), else R. Kept
    aspects and agreements go to ``extras``."""

    judge: Judge = field(default_factory=rule_judge)
    checklists: str | ChecklistBuilder = "tool_use"
    holistic: Literal["outcome", "judge"] = "outcome"
    tau: float = 0.5
    lam: float = 0.5
    ties_only: bool = False
    keep_unordered: bool = True
    scope: Scope = "agent"
    require_quote: bool = False
    name: str = "alarm"

    def __post_init__(self) -> None:
        if self.holistic not in ("outcome", "judge"):
            raise ValueError(f"holistic must be 'outcome' or 'judge', got {self.holistic!r}")
        alarm_combine([0.0], {}, self.tau)  # validates tau
        self._checklist = ChecklistScorer(self.judge, self.checklists, "end", self.scope, self.require_quote,
                                          self.name)  # fmt: skip

    def holistic_rewards(self, group: Sequence[Trajectory]) -> list[float]:
        """R_h per rollout (NaN where the judge gave no grade)."""
        outcomes = [outcome_of(t) for t in group]
        if self.holistic == "outcome":
            return outcomes
        questions = [Question("score", HOLISTIC_PROMPT.format(conversation=render_conversation(t.messages)),
                              rule=_clamped(r)) for t, r in zip(group, outcomes, strict=True)]  # fmt: skip
        return [math.nan if v.value is None else float(v.value) for v in self.judge.ask(questions)]  # type: ignore[arg-type]

    def aspect_rewards(self, group: Sequence[Trajectory]) -> dict[str, list[float]]:
        """R_a per aspect (a checklist category) and rollout: the share of the category's criteria met."""
        results = self._checklist.criterion_scores(group)
        names = list(dict.fromkeys(c for res in results for c in res.categories))
        out: dict[str, list[float]] = {}
        for name in names:
            row = []
            for res in results:
                mine = [s for s, c in zip(res.scores, res.categories, strict=True) if c == name]
                row.append(sum(mine) / len(mine) if mine else 0.0)
            out[name] = row
        return out

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        h = self.holistic_rewards(group)
        aspects = self.aspect_rewards(group)
        r, kept = alarm_combine(h, aspects, self.tau, self.lam, self.ties_only, self.keep_unordered)
        shares = {a: agreement(h, v) for a, v in aspects.items()}
        out = []
        for traj, ri, hi in zip(group, r, h, strict=True):
            rewards = [0.0] * len(traj.turns)
            if traj.turns:
                rewards[-1] = float(ri - hi) if self.holistic == "outcome" else float(ri)
            extras = {"kept": list(kept), "agreement": shares, "holistic": hi}
            out.append(TurnScores(self.name, rewards, [not math.isnan(x) for x in rewards], extras))
        return out


_CHECKLIST_TRAIN = {"algo": "grpo", "scorer_kwargs": {"judge": "rule"}, "estimator": "grpo",
                    "reward_components": ["outcome"], "env_id": "agentgym/ToolUse-v0", "env_kwargs": {},
                    "stop": ["</tool_call>"]}  # fmt: skip

METHODS: tuple[Method, ...] = (
    Method("pow3r", "POW3R", "scorer", "checklist criteria weighted by their spread in the group, category totals kept",
           needs=("judge", "group"), paper=cite("POW3R"), code=f"{__name__}:PolicyAwareRubric",
           choices=("contrast: the population std of the criterion's scores over the group (knob contrast='mad': "
                    "the mean absolute deviation); eps = 0.05 (knob eps)",
                    "w_k = H_c * u_k / sum_{k' in c} u_k' with u_k = h_k (contrast_k + eps); R = sum_k w_k c_k / "
                    "sum_k h_k, so R lies in [0, 1]; a category whose u are all 0 keeps its human weights",
                    "the criteria, human weights (Criterion.weight) and categories are CM2's checklist's; paid on the "
                    "last turn (knob assign='turn': each user turn's weighted share where it ends)"),
           train={**_CHECKLIST_TRAIN, "scorer": "pow3r"}, knobs_into="scorer_kwargs"),
    Method("alarm", "ALaRM", "scorer", "holistic reward plus the aspect rewards whose group preferences agree with it",
           needs=("judge", "group", "outcome"), paper=cite("ALaRM"), code=f"{__name__}:HierarchicalReward",
           choices=("agreement: over the pairs the holistic reward orders strictly, the share the aspect orders the "
                    "same way, an aspect tie counting half; tau = 0.5 (knob tau)",
                    "one lambda for every kept aspect, 0.5 (knob lam); aspects add to the holistic reward (knob "
                    "ties_only=True scales them so they only order holistic ties)",
                    "a group whose holistic rewards all tie keeps every aspect (knob keep_unordered)",
                    "holistic: the env's outcome (knob holistic='judge': a judge's 0-10 grade of the trajectory); "
                    "aspects: the categories of CM2's checklist, each the share of its criteria met; the scorer pays "
                    "R - outcome on the last turn where the outcome is the holistic reward"),
           train={**_CHECKLIST_TRAIN, "scorer": "alarm"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
