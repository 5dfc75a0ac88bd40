"""The estimator registry, collected from the estimator modules: each lists its estimators in a module-level
``REGISTERED`` tuple of :class:`~agentgym.rewards.advantages.base.EstimatorSpec`, and ``MODULES`` names the modules
collected. Nothing here lists an estimator by hand."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType

from agentgym.rewards.advantages import (
    anchor_groups,
    dual_track,
    faith,
    gae,
    gopo,
    group,
    hiper,
    lampo,
    mixed,
    multi_turn,
    serl,
    turn_level,
    userrl,
)
from agentgym.rewards.advantages.base import Estimator, EstimatorSpec

#: The modules that register estimators, in registry order.
MODULES: tuple[ModuleType, ...] = (
    group, gae, turn_level, anchor_groups, mixed, userrl, multi_turn, gopo, lampo, serl, hiper, dual_track,
    faith,
)  # fmt: skip


def collect_specs(modules: Iterable[ModuleType]) -> tuple[EstimatorSpec, ...]:
    """Every module's ``REGISTERED`` specs in order; a name registered twice raises ``ValueError``."""
    specs: list[EstimatorSpec] = []
    seen: dict[str, str] = {}
    for module in modules:
        for spec in module.REGISTERED:
            if spec.name in seen:
                raise ValueError(f"estimator {spec.name!r} is registered by {seen[spec.name]} and {module.__name__}")
            seen[spec.name] = module.__name__
            specs.append(spec)
    return tuple(specs)


SPECS: tuple[EstimatorSpec, ...] = collect_specs(MODULES)

#: Estimators by name: ``fn(batch: TurnBatch, **params) -> list[np.ndarray]`` (one array of per-turn advantages
#: per trajectory). Read-only.
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType({spec.name: spec.fn for spec in SPECS})

#: The estimators that read the rewards only through each trajectory's outcome (``TurnBatch.outcome_array``):
#: for them "outcome-only" means the outcome alone, and the reference trainer feeds them the ``outcome`` reward
#: component only by default (``TrainConfig.reward_components``). ``mt_grpo``'s turn credit comes from the
#: verified signal, not from rewards.
OUTCOME_ESTIMATORS: tuple[str, ...] = tuple(spec.name for spec in SPECS if spec.outcome_only)


def get_estimator(name: str) -> Estimator:
    """The estimator registered under ``name`` (see ``ESTIMATORS``); ``KeyError`` lists the known names."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}") from None
