"""Dense turn-level rewards: step wrappers, post-episode turn scorers and advantage estimators.

* Step wrappers (``agentgym.rewards.wrappers``) add a named term to ``reward`` and ``info["reward_components"]``.
* Turn scorers (``information``, ``matching``, ``process``, ``judge``) score finished groups of trajectories;
  ``annotate`` (``base``) records their scores as more named components. The information scorers read answer
  likelihoods from ``answer_scoring`` (rendering, the local and the remote back-end).
* Advantage estimators (``advantages``) map scored groups to per-turn / per-token advantages.

``advantages``, ``information`` and ``answer_scoring`` are packages with one module per method or family; their
``__init__`` re-exports every public name, so ``agentgym.rewards.<module>`` import paths do not depend on the layout.

Adding a method (and its section in docs/rewards.md, which documents every built-in one):

* A step wrapper: a ``gymnasium.Wrapper`` in ``wrappers.py`` whose ``step`` returns
  ``add_component(reward, info, name, term)`` and which declares ``snapshot_attrs``; tests in
  ``tests/rewards/test_wrappers.py``.
* A turn scorer: a ``TurnScorer`` subclass (``base``) in its family's module: ``information/<method>.py`` for an
  answer-likelihood method (re-exported from ``information/__init__.py``), ``process.py`` for a transform of process
  rewards, a new ``<family>.py`` otherwise; tests in ``tests/rewards/test_<family>.py``.
* An advantage estimator: ``fn(batch: TurnBatch, **params) -> list[np.ndarray]`` in its family's module under
  ``advantages/`` (a new module for a new family), built on the helpers of ``advantages.base`` so it stays finite and
  independent of the batch order. It registers by an ``EstimatorSpec(name, fn, outcome_only=...)`` in its module's
  ``REGISTERED`` tuple; ``advantages.registry`` collects ``ESTIMATORS`` from the modules in ``registry.MODULES`` (a new
  module goes there, and its public functions into ``advantages/__init__.py``). Tests: add the name to ``NAMES`` in
  ``tests/rewards/test_advantages.py`` (which runs every estimator through the finiteness, determinism and
  permutation checks, and fails on a module that registers but is not collected) plus a worked example; and a row
  ``| `name` |`` in the registry table of docs/rewards.md (``tests/test_docs.py``).
* A name exported from ``agentgym.rewards`` itself goes into ``_LAZY`` (name -> module) and into docs/rewards.md.

See docs/rewards.md for every method's formula, requirements and a runnable example. Names are imported lazily,
so ``import agentgym.rewards`` stays cheap (no torch until a model-backed scorer is used).

May import: agentgym.contract, agentgym.grading, agentgym.tools.
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
    "PreferenceAsReward": "par",
    "PARScorer": "par",
    "BTScorer": "bt",
    "LogSigmoidCentered": "bt",
    "RNDBonus": "rnd",
    "RNDTable": "rnd",
    "DisagreementBonus": "maxinfo",
    "DisagreementTable": "maxinfo",
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
