"""GOPO, Group Ordinal Policy Optimization (docs/rewards.md, 'GOPO'): the advantage reads only the rank of each
reward within its group, never its magnitude."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

from agentgym.rewards.advantages.base import (
    DEFAULT_EPS,
    ArrayLike,
    EstimatorSpec,
    _flat,
    _keys,
    _per_turn,
    _ragged,
    _rtg,
    _unflat,
    _vec,
    _z,
)
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

Spread = Literal["linear", "zscore"]
Level = Literal["trajectory", "turn"]


def mean_ranks(values: ArrayLike) -> np.ndarray:
    """1-based ranks of one set in increasing order; tied values share the mean of the ranks they span.

    >>> mean_ranks([0.1, 5.0, 2.0, 2.0]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    x = _vec(values, "values")
    if x.size == 0:
        return np.zeros(0)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    last = np.cumsum(counts).astype(np.float64)  # the highest rank each distinct value spans
    return (last - (counts - 1) / 2.0)[inverse.reshape(-1)]


def _spread(ranks: np.ndarray, spread: Spread, eps: float) -> np.ndarray:
    g = ranks.size
    if g <= 1:
        return np.zeros(g)
    if spread == "linear":  # choice: the centred linear map onto [-1, 1] (the spec's; knob spread)
        return (ranks - (g + 1) / 2.0) / ((g - 1) / 2.0)
    return _z(ranks, eps, True)


def _ranked(values: np.ndarray, keys: Sequence[Hashable], spread: Spread, eps: float) -> np.ndarray:
    if spread not in ("linear", "zscore"):
        raise ValueError(f"spread must be 'linear' or 'zscore', got {spread!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    buckets: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        buckets.setdefault(k, []).append(i)
    out = np.zeros(values.size)
    for idx in buckets.values():
        ix = np.asarray(idx, dtype=np.intp)
        out[ix] = _spread(mean_ranks(values[ix]), spread, eps)
    return out + 0.0  # no -0.0


def gopo_advantages(
    outcomes: ArrayLike, group_ids: ArrayLike, spread: Spread = "linear", eps: float = DEFAULT_EPS
) -> np.ndarray:
    """GOPO: ``A_i = (rank_i - (G+1)/2) / ((G-1)/2)`` with ``rank_i`` the mean rank of ``R_i`` in its group of
    ``G`` (ties share their mean rank), so ``A`` spans [-1, 1] and sums to 0 per group. ``spread="zscore"``:
    the population z-score of the ranks instead. Invariant to any strictly increasing map of ``R``; a singleton
    or tied group gives 0.

    >>> gopo_advantages([0.1, 5.0, 2.0, 2.0], [0, 0, 0, 0]).tolist()
    [-1.0, 1.0, 0.0, 0.0]
    """
    r = _vec(outcomes, "outcomes")
    return _ranked(r, _keys(group_ids, r.size), spread, eps)


def gopo_turns(
    turn_rewards: Sequence[ArrayLike], group_ids: ArrayLike, spread: Spread = "linear", eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """Turn-level GOPO: rank each turn's return (undiscounted reward-to-go) among the returns at the same turn
    index of the group's rollouts that reached it (the (group, turn index) cell), then map as :func:`gopo_advantages`.

    >>> [a.tolist() for a in gopo_turns([[1.0, 0.0], [0.0, 3.0], [2.0]], ["q", "q", "q"])]
    [[-1.0, -1.0], [1.0, 1.0], [0.0]]
    """
    rows = _ragged(turn_rewards, "turn_rewards")
    keys = _keys(group_ids, len(rows))
    flat, lengths = _flat([_rtg(r, 1.0) for r in rows])
    cells = [(keys[i], t) for i, n in enumerate(lengths) for t in range(n)]
    return _unflat(_ranked(flat, cells, spread, eps), lengths)


def _est_gopo(
    b: TurnBatch, spread: Spread = "linear", level: Level = "trajectory", eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    if level == "trajectory":
        return _per_turn(gopo_advantages(b.outcome_array, b.group_ids, spread, eps), b.turn_rewards)  # type: ignore[arg-type]
    if level == "turn":
        return gopo_turns(b.turn_rewards, b.group_ids, spread, eps)
    raise ValueError(f"level must be 'trajectory' or 'turn', got {level!r}")


#: outcome_only: the default level reads only the outcome (level="turn" ranks the turn rewards it is given)
REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("gopo", _est_gopo, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("gopo", "GOPO", "estimator", "rank-only group advantage: the outcome's rank in its group, centred",
           needs=("outcome", "group"), paper=cite("GOPO"), code=f"{__name__}:_est_gopo",
           choices=("ties share their mean rank",
                    "the centred linear map (rank - (G+1)/2) / ((G-1)/2) onto [-1, 1]; knob spread='zscore' "
                    "z-scores the ranks instead",
                    "knob level='turn': ranks of the undiscounted per-turn returns within each (group, turn index) "
                    "cell; the default 'trajectory' ranks the outcome and gives it to every turn"),
           train={"algo": "grpo", "estimator": "gopo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
