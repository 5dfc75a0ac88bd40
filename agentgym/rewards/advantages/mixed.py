"""Estimators that mix two normalisations of the turn returns (docs/rewards.md, 'MatchTIR dual-level, MAPO,
UserRL'): MatchTIR's trajectory + (group, turn) cell average, MAPO's (group, turn) cell + batch mixture."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from agentgym.rewards.advantages.base import (
    DEFAULT_EPS,
    ArrayLike,
    EstimatorSpec,
    _check_unit,
    _keys,
    _normalize,
    _ragged,
    _rtg,
)
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def matchtir_dual(
    turn_rewards: Sequence[ArrayLike], group_ids: ArrayLike, gamma: float = 0.9, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """MatchTIR dual-level advantage: ``A_{i,t} = (z_q(sum_t r_{i,t}) + z_{(q,t)}(G_{i,t})) / 2`` with the
    discounted turn return ``G_{i,t} = sum_{k>=t} gamma^(k-t) r_{i,k}`` z-scored per (group, turn index) cell.

    >>> [a.round(4).tolist() for a in matchtir_dual([[1.0, 1.0], [0.0, 0.0]], [0, 0])]
    [[1.0, 1.0], [-1.0, -1.0]]
    """
    rows = _ragged(turn_rewards, "turn_rewards")
    keys = _keys(group_ids, len(rows))
    _check_unit("gamma", gamma)
    traj = grpo(np.array([math.fsum(r) for r in rows]), keys, eps)
    turn = _normalize([_rtg(r, gamma) for r in rows], keys, "group_turn", eps)
    return [(a + z) / 2.0 for a, z in zip(traj, turn, strict=True)]


def mapo_mixed(
    turn_returns: Sequence[ArrayLike], group_ids: ArrayLike, alpha: float = 0.5, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """MAPO mixed advantage (mixing rule unverified): ``alpha * z_{(q,t)}(G) + (1 - alpha) * z_batch(G)``, where
    ``z_{(q,t)}`` normalises per (group, turn index) cell and ``z_batch`` over every (rollout, turn) of the batch
    (all groups). ``G`` are Monte Carlo turn returns, e.g. :func:`turn_returns` of judge rewards.

    >>> [a.tolist() for a in mapo_mixed([[2.0], [0.0], [1.0]], ["a", "a", "b"], alpha=1.0, eps=0.0)]
    [[1.0], [-1.0], [0.0]]
    """
    _check_unit("alpha", alpha)
    rows = _ragged(turn_returns, "turn_returns")
    keys = _keys(group_ids, len(rows))
    local = _normalize(rows, keys, "group_turn", eps)
    batch = _normalize(rows, keys, "batch", eps)
    return [alpha * a + (1.0 - alpha) * b for a, b in zip(local, batch, strict=True)]


def _est_matchtir(b: TurnBatch, gamma: float = 0.9, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    return matchtir_dual(b.turn_rewards, b.group_ids, gamma, eps)


def _est_mapo(b: TurnBatch, alpha: float = 0.5, gamma: float = 1.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    """MAPO from a TurnBatch: Monte Carlo returns of the turn rewards (gamma=1 unless set), then mixed z."""
    _check_unit("gamma", gamma)
    return mapo_mixed([_rtg(r, gamma) for r in b.turn_rewards], b.group_ids, alpha, eps)


REGISTERED: tuple[EstimatorSpec, ...] = (
    EstimatorSpec("matchtir", _est_matchtir),
    EstimatorSpec("mapo", _est_mapo),
)

METHODS: tuple[Method, ...] = (
    Method("mapo", "MAPO", "estimator", "mixed turn-level and batch-level z-scores of Monte-Carlo judge returns",
           needs=("judge", "group"), paper=cite("MAPO"), code=f"{__name__}:_est_mapo",
           choices=("the mixing rule alpha*z_(q,t) + (1 - alpha)*z_batch with alpha = 0.5",),
           train={"algo": "grpo", "scorer": "judge", "estimator": "mapo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
