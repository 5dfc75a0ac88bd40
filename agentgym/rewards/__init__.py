"""Dense turn-level rewards: step wrappers, post-episode turn scorers and advantage estimators.

* Step wrappers (``agentgym.rewards.wrappers``) add a named term to ``reward`` and ``info["reward_components"]``.
* Turn scorers (``information``, ``matching``, ``process``, ``judge``) score finished groups of trajectories;
  ``annotate`` records their scores as more named components.
* Advantage estimators (``advantages``) map scored groups to per-turn / per-token advantages.

See docs/rewards.md for every method's formula, requirements and a runnable example. Names are imported lazily,
so ``import agentgym.rewards`` stays cheap (no torch until a model-backed scorer is used).

May import: agentgym.contract, agentgym.grading, agentgym.agents, agentgym.tools.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TurnScorer": "base",
    "TurnScores": "base",
    "ScorerError": "base",
    "annotate": "base",
    "PotentialShaping": "wrappers",
    "FormatPenalty": "wrappers",
    "StepCost": "wrappers",
    "NoveltyBonus": "wrappers",
    "CountTable": "wrappers",
    "ProgressReward": "wrappers",
    "InformationGain": "information",
    "InformationPotential": "information",
    "SelfInducedOutcomePotential": "information",
    "CounterfactualInformationGain": "information",
    "LocalAnswerScorer": "answer_scoring",
    "RemoteAnswerScorer": "answer_scoring",
    "ToolCallMatching": "matching",
    "GatedAccumulation": "process",
    "PRMClip": "process",
    "PRMDelta": "process",
    "ComponentScorer": "process",
    "JudgeScorer": "judge",
    "TurnBatch": "advantages",
    "get_estimator": "advantages",
    "ESTIMATORS": "advantages",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
