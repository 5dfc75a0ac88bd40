"""GiGPO (docs/rewards.md, 'GiGPO'): a trajectory-level GRPO term plus a step term z-scored within anchor groups,
the turns of a task group taken from the same anchor: the env's state (``gigpo``) or what the agent observed
(``gigpo_obs``, see :func:`~agentgym.rewards.advantages.signals.observation_anchors`)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

from agentgym.rewards.advantages.base import (
    DEFAULT_EPS,
    ArrayLike,
    EstimatorSpec,
    _check_unit,
    _flat,
    _keys,
    _ragged,
    _rtg,
    _unflat,
    _vec,
    group_zscore,
)
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def gigpo(
    outcomes: ArrayLike,
    step_rewards: Sequence[ArrayLike],
    anchors: Sequence[Sequence[Hashable | None]],
    group_ids: ArrayLike,
    omega: float = 1.0,
    gamma: float = 0.95,
    eps: float = DEFAULT_EPS,
    scale: bool = True,
) -> list[np.ndarray]:
    """GiGPO: ``A_{i,t} = A^E_i + omega * A^S_{i,t}``. ``A^E = grpo(outcomes)``. ``A^S`` z-scores the discounted
    step return ``G_{i,t} = sum_{k>=t} gamma^(k-t) r_{i,k}`` within each anchor group: every (rollout, turn)
    of the same task group whose anchor (canonical observation, the env's ``info["anchor"]``) is identical,
    including repeats within one rollout. A singleton anchor group gives ``A^S = 0``; a ``None`` anchor never
    groups. ``omega=0`` is GRPO. ``scale=False`` drops both stds.

    >>> a = gigpo([1.0, 0.0], [[0.0, 1.0], [0.0, 0.0]], [["s0", "s1"], ["s0", "s2"]], [0, 0], gamma=0.5)
    >>> [x.round(4).tolist() for x in a]
    [[2.0, 1.0], [-2.0, -1.0]]
    """
    r = _vec(outcomes, "outcomes")
    steps = _ragged(step_rewards, "step_rewards")
    keys = _keys(group_ids, r.size)
    if len(steps) != r.size or len(anchors) != r.size:
        raise ValueError(f"{r.size} outcomes, {len(steps)} step-reward rows, {len(anchors)} anchor rows")
    if not math.isfinite(omega):
        raise ValueError(f"omega must be finite, got {omega}")
    _check_unit("gamma", gamma)
    a_e = grpo(r, keys, eps, scale)
    cells: list[Hashable] = []
    for i, (s, an) in enumerate(zip(steps, anchors, strict=True)):
        if len(an) != s.size:
            raise ValueError(f"trajectory {i}: {s.size} step rewards but {len(an)} anchors")
        cells.extend((keys[i], k) if k is not None else _Unique() for k in an)
    flat, lengths = _flat([_rtg(s, gamma) for s in steps])
    a_s = _unflat(group_zscore(flat, cells, eps, scale), lengths)
    return [a_e[i] + omega * a_s[i] for i in range(r.size)]


class _Unique:
    """A key equal only to itself (a turn without an anchor forms its own anchor group)."""

    __slots__ = ()


def _est_gigpo(
    b: TurnBatch,
    omega: float = 1.0,
    gamma: float = 0.95,
    eps: float = DEFAULT_EPS,
    scale: bool = True,
    anchor: Literal["state", "observation"] = "state",
) -> list[np.ndarray]:
    """GiGPO over the env's state anchors (``anchor="state"``: ``TurnBatch.anchors``) or over what the agent
    observed (``"observation"``: ``TurnBatch.observations``, the paper's grouping)."""
    if anchor == "state":
        if b.anchors is None:
            raise ValueError("gigpo needs TurnBatch.anchors (canonical observation per turn)")
        anchors = b.anchors
    elif anchor == "observation":
        if b.observations is None:
            raise ValueError("gigpo with observation anchors needs TurnBatch.observations (see observation_anchors)")
        anchors = b.observations
    else:
        raise ValueError(f"anchor must be 'state' or 'observation', got {anchor!r}")
    return gigpo(b.outcome_array, b.turn_rewards, anchors, b.group_ids, omega, gamma, eps, scale)


def _est_gigpo_obs(
    b: TurnBatch, omega: float = 1.0, gamma: float = 0.95, eps: float = DEFAULT_EPS, scale: bool = True
) -> list[np.ndarray]:
    """GiGPO with observation anchors: turns grouped by what the agent observed, not by the env's state."""
    return _est_gigpo(b, omega, gamma, eps, scale, anchor="observation")


REGISTERED: tuple[EstimatorSpec, ...] = (
    EstimatorSpec("gigpo", _est_gigpo),
    EstimatorSpec("gigpo_obs", _est_gigpo_obs),
)

METHODS: tuple[Method, ...] = (
    Method("gigpo", "GiGPO", "estimator",
           "episode z-score plus a step z-score among turns from the same state (anchor groups)",
           needs=("outcome", "group", "anchors"), paper=cite("GiGPO"), code=f"{__name__}:_est_gigpo",
           choices=("anchor='state' groups by the env's canonical state; 'observation' (estimator gigpo_obs) by "
                    "what the agent saw, the paper's grouping",),
           train={"algo": "grpo", "estimator": "gigpo", "reward_components": "all"},
           knobs_into="estimator_kwargs"),
)  # fmt: skip
