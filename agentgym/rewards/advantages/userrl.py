"""UserRL credit variants (docs/rewards.md, 'MatchTIR dual-level, MAPO, UserRL'): GRPO on a trajectory score,
attributed to turns by per-turn credits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentgym.rewards.advantages.base import (
    DEFAULT_EPS,
    ArrayLike,
    EstimatorSpec,
    _check_unit,
    _keys,
    _ragged,
    _rtg,
    _vec,
)
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

UserRLTurnMethod = Literal["equalized", "r2g", "em"]
UserRLTrajectoryMethod = Literal["sum", "r2g"]


def userrl_turn_credits(
    turn_rewards: ArrayLike, method: UserRLTurnMethod = "equalized", gamma: float = 0.8, k: float = 2.0
) -> np.ndarray:
    """UserRL turn credits ``c_t``: ``equalized`` 1 for every turn; ``r2g`` the reward-to-go
    ``sum_{k>=t} gamma^(k-t) r_k`` (gamma 0.8); ``em`` the exponential map of rewards in [0, 1] onto [0.5, 1]:
    ``0.5 + 0.5 (1 - exp(-k r)) / (1 - exp(-k))`` (k=2; UserRL's code also rounds to 4 decimals, we do not).

    >>> userrl_turn_credits([0.0, 1.0], "r2g", gamma=0.5).tolist(), userrl_turn_credits([0.0, 1.0], "em").tolist()
    ([0.5, 1.0], [0.5, 1.0])
    """
    r = _vec(turn_rewards, "turn_rewards")
    method = method.lower()  # type: ignore[assignment]
    if method == "equalized":
        return np.ones(r.size)
    if method == "r2g":
        return _rtg(r, _check_unit("gamma", gamma))
    if method == "em":
        if not k > 0:
            raise ValueError(f"k must be > 0, got {k}")
        return 0.5 + 0.5 * (-np.expm1(-k * r)) / (-math.expm1(-k))
    raise ValueError(f"turn method must be 'equalized', 'r2g' or 'em', got {method!r}")


def userrl_trajectory_score(
    turn_rewards: ArrayLike, method: UserRLTrajectoryMethod = "sum", gamma: float = 0.8
) -> float:
    """UserRL trajectory score: ``sum`` = ``sum_t r_t``; ``r2g`` = ``sum_t gamma^(t-1) r_t`` (the return from turn 1).

    >>> userrl_trajectory_score([1.0, 1.0], "sum"), userrl_trajectory_score([1.0, 1.0], "r2g", gamma=0.5)
    (2.0, 1.5)
    """
    r = _vec(turn_rewards, "turn_rewards")
    method = method.lower()  # type: ignore[assignment]
    if method == "sum":
        return math.fsum(r)
    if method == "r2g":
        return float(_rtg(r, _check_unit("gamma", gamma))[0]) if r.size else 0.0
    raise ValueError(f"trajectory method must be 'sum' or 'r2g', got {method!r}")


def userrl_advantages(
    turn_rewards: Sequence[ArrayLike],
    group_ids: ArrayLike,
    turn_method: UserRLTurnMethod = "equalized",
    trajectory_method: UserRLTrajectoryMethod = "sum",
    gamma: float = 0.8,
    k: float = 2.0,
    turn_lengths: Sequence[ArrayLike] | None = None,
    eps: float = DEFAULT_EPS,
    scale: bool = True,
) -> list[np.ndarray]:
    """UserRL turn-attributed GRPO. ``A_i = grpo(score_i)`` over the group, with ``score`` from
    :func:`userrl_trajectory_score`; then turn ``t`` gets ``A_i * c_t / cbar_i``, ``c`` from
    :func:`userrl_turn_credits` and ``cbar_i`` the mean credit over the turns with non-zero credit, weighted by
    ``turn_lengths`` (policy tokens per turn; UserRL's code weights by tokens) or unweighted when None. So the
    average token advantage of the trajectory is ``A_i`` and ``equalized`` is plain GRPO on the score. A
    trajectory whose credits are all 0 gets 0. Deviation: UserRL's code gives a singleton group its raw score
    and uses ddof=1; here a singleton group gives 0, as in :func:`grpo`. Credits are assumed >= 0 (rewards in
    [0, 1]); a negative ``cbar`` flips the sign, as in UserRL's code.

    >>> a = userrl_advantages([[0.0, 1.0], [0.0, 0.0]], [0, 0], "r2g", "sum", gamma=0.5)
    >>> [x.round(4).tolist() for x in a]
    [[0.6667, 1.3333], [0.0, 0.0]]
    """
    rows = _ragged(turn_rewards, "turn_rewards")
    keys = _keys(group_ids, len(rows))
    weights = [np.ones(r.size) for r in rows] if turn_lengths is None else _ragged(turn_lengths, "turn_lengths")
    if len(weights) != len(rows) or any(w.size != r.size for w, r in zip(weights, rows, strict=False)):
        raise ValueError("turn_lengths must have one entry per turn")
    scores = np.array([userrl_trajectory_score(r, trajectory_method, gamma) for r in rows])
    a = grpo(scores, keys, eps, scale)
    out = []
    for ai, r, w in zip(a, rows, weights, strict=True):
        c = userrl_turn_credits(r, turn_method, gamma, k)
        nz = c != 0
        cbar = math.fsum(w[nz] * c[nz]) / math.fsum(w[nz]) if nz.any() and math.fsum(w[nz]) > 0 else 0.0
        out.append(ai * c / cbar if cbar != 0 else np.zeros(r.size))
    return out


def _est_userrl(
    b: TurnBatch,
    turn_method: UserRLTurnMethod = "equalized",
    trajectory_method: UserRLTrajectoryMethod = "sum",
    gamma: float = 0.8,
    k: float = 2.0,
    eps: float = DEFAULT_EPS,
    scale: bool = True,
) -> list[np.ndarray]:
    return userrl_advantages(
        b.turn_rewards, b.group_ids, turn_method, trajectory_method, gamma, k, b.turn_lengths, eps, scale
    )


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("userrl", _est_userrl),)

METHODS: tuple[Method, ...] = (
    Method("userrl", "UserRL", "estimator", "turn credit variants (equalized, reward-to-go, EM) over user-sim turns",
           needs=("group",), paper=cite("UserRL"), code=f"{__name__}:_est_userrl",
           train={"algo": "grpo", "estimator": "userrl", "reward_components": "all"},
           knobs_into="estimator_kwargs"),
)  # fmt: skip
