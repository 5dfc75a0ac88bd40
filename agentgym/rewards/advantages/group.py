"""Trajectory-level estimators (docs/rewards.md, 'GRPO, Dr. GRPO, RLOO'): every turn of a trajectory gets the
trajectory's advantage, computed from the outcomes of its group."""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from agentgym.rewards.advantages.base import (
    DEFAULT_EPS,
    ArrayLike,
    EstimatorSpec,
    _keys,
    _per_turn,
    _vec,
    group_zscore,
)
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def grpo(outcomes: ArrayLike, group_ids: ArrayLike, eps: float = DEFAULT_EPS, scale: bool = True) -> np.ndarray:
    """GRPO: ``A_i = (R_i - mean_G) / (std_G + eps)``, population std (ddof=0; verl/TRL use ddof=1, which only
    rescales a group by ``sqrt((G-1)/G)``). Singleton group -> 0; a group whose rewards tie -> all 0.
    ``scale=False`` drops the std (Dr. GRPO).

    >>> grpo([1.0, 0.0, 0.0, 1.0, 7.0], [0, 0, 0, 0, 1]).round(4).tolist()
    [1.0, -1.0, -1.0, 1.0, 0.0]
    """
    r = _vec(outcomes, "outcomes")
    return group_zscore(r, _keys(group_ids, r.size), eps, scale)


def dr_grpo(outcomes: ArrayLike, group_ids: ArrayLike, norm_length: float | None = None) -> np.ndarray:
    """Dr. GRPO: ``A_i = R_i - mean_G`` (no std). Its loss divides each sequence's summed token losses by one
    *constant* ``L`` (the generation budget, e.g. max response tokens) instead of the sequence's own length
    (verl: ``loss_agg_mode="seq-mean-token-sum-norm"``). Pass ``norm_length=L`` to fold ``1/L`` into the
    advantages instead; then a trainer that *sums* token losses gets the same objective (the PPO clip is
    invariant to a positive constant factor).

    >>> dr_grpo([1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0]).tolist(), dr_grpo([1.0, 0.0], [0, 0], norm_length=4).tolist()
    ([0.5, -0.5, -0.5, 0.5], [0.125, -0.125])
    """
    a = grpo(outcomes, group_ids, scale=False)
    if norm_length is None:
        return a
    if not norm_length > 0:
        raise ValueError(f"norm_length must be > 0, got {norm_length}")
    return a / float(norm_length)


def rloo(outcomes: ArrayLike, group_ids: ArrayLike) -> np.ndarray:
    """RLOO: ``A_i = R_i - mean_{j != i, j in G} R_j``; singleton group -> 0. Sums to 0 within a group.

    >>> rloo([1.0, 0.0, 0.0, 5.0], ["a", "a", "a", "b"]).tolist()
    [1.0, -0.5, -0.5, 0.0]
    """
    r = _vec(outcomes, "outcomes")
    keys = _keys(group_ids, r.size)
    buckets: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        buckets.setdefault(k, []).append(i)
    out = np.zeros(r.size)
    for idx in buckets.values():
        if len(idx) < 2:
            continue
        ix = np.asarray(idx, dtype=np.intp)
        x = r[ix]
        out[ix] = x - (math.fsum(x) - x) / (x.size - 1)
    return out


def _est_grpo(b: TurnBatch, eps: float = DEFAULT_EPS, scale: bool = True) -> list[np.ndarray]:
    return _per_turn(grpo(b.outcome_array, b.group_ids, eps, scale), b.turn_rewards)  # type: ignore[arg-type]


def _est_dr_grpo(b: TurnBatch, norm_length: float | None = None) -> list[np.ndarray]:
    return _per_turn(dr_grpo(b.outcome_array, b.group_ids, norm_length), b.turn_rewards)  # type: ignore[arg-type]


def _est_rloo(b: TurnBatch) -> list[np.ndarray]:
    return _per_turn(rloo(b.outcome_array, b.group_ids), b.turn_rewards)  # type: ignore[arg-type]


REGISTERED: tuple[EstimatorSpec, ...] = (
    EstimatorSpec("grpo", _est_grpo, outcome_only=True),
    EstimatorSpec("dr_grpo", _est_dr_grpo, outcome_only=True),
    EstimatorSpec("rloo", _est_rloo, outcome_only=True),
)

METHODS: tuple[Method, ...] = (
    Method("grpo", "GRPO", "estimator", "z-score of the outcome within the group, on every turn",
           needs=("outcome", "group"), paper=cite("GRPO"), code=f"{__name__}:_est_grpo",
           choices=("population std (ddof=0); a singleton or tied group gives 0",),
           train={"algo": "grpo"}, knobs_into="estimator_kwargs"),
    Method("dr_grpo", "Dr. GRPO", "estimator", "group-centred outcome without the std, constant-length loss",
           needs=("outcome", "group"), paper=cite("Dr. GRPO"), code=f"{__name__}:_est_dr_grpo",
           train={"algo": "dr_grpo"}, knobs_into="estimator_kwargs"),
    Method("rloo", "RLOO", "estimator", "leave-one-out baseline: the outcome minus the mean of the others",
           needs=("outcome", "group"), paper=cite("RLOO"), code=f"{__name__}:_est_rloo",
           train={"algo": "rloo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
