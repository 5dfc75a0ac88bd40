"""Turn-level estimators built on per-turn returns: z-score the turn rewards or returns over the group (or per
turn-index cell), then take the reward-to-go. docs/rewards.md, 'Turn-level returns', 'IGPO and SIOP advantages' and
'A^2TGPO'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentgym.rewards.advantages.base import (
    DEFAULT_EPS,
    ArrayLike,
    EstimatorSpec,
    _arr,
    _By,
    _check_unit,
    _keys,
    _normalize,
    _ragged,
    _rtg,
    _vec,
    group_zscore,
)
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def turn_returns(turn_rewards: ArrayLike, gamma: float = 1.0) -> np.ndarray:
    """Reward-to-go of one trajectory: ``G_t = sum_{k>=t} gamma^(k-t) r_k`` (GTPO, MAPO's Monte Carlo returns).

    >>> turn_returns([1.0, 0.0, 2.0], gamma=0.5).tolist()
    [1.5, 1.0, 2.0]
    """
    return _rtg(_vec(turn_rewards, "turn_rewards"), _check_unit("gamma", gamma))


def normalize_turn_returns(
    turn_returns: Sequence[ArrayLike],
    group_ids: ArrayLike,
    by: _By = "group",
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """GTPO's normalisation: z-score per-turn returns over all (rollout, turn) entries of the group
    (``by="group"``, the default: our reading of "normalised within the group"), per (group, turn index) cell
    (``"group_turn"``) or over the whole batch (``"batch"``).

    >>> [g.tolist() for g in normalize_turn_returns([[3.0, 1.0], [2.0], [5.0]], ["a", "a", "b"], eps=0.0)]
    [[1.224744871391589, -1.224744871391589], [0.0], [0.0]]
    """
    rows = _ragged(turn_returns, "turn_returns")
    return _normalize(rows, _keys(group_ids, len(rows)), by, eps)


def gtpo(
    turn_rewards: Sequence[ArrayLike], group_ids: ArrayLike, gamma: float = 1.0, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """GTPO: ``A_{i,t} = z_group(G_{i,t})`` with ``G`` from :func:`turn_returns` (pooled over the group's turns)."""
    rows = _ragged(turn_rewards, "turn_rewards")
    _check_unit("gamma", gamma)
    return _normalize([_rtg(r, gamma) for r in rows], _keys(group_ids, len(rows)), "group", eps)


def igpo_advantages(
    ig_rewards: Sequence[ArrayLike],
    outcome_rewards: ArrayLike,
    group_ids: ArrayLike,
    mode: Literal["separate", "joint"] = "separate",
    gamma: float = 1.0,
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """IGPO advantage. Rollout ``i`` has ``T_i - 1`` information-gain rewards (its non-final turns) and one outcome
    reward (its final turn). ``mode="separate"`` (used in IGPO's runs): z-score all IG rewards of the group
    pooled over rollouts and turns, and the outcomes over the group's rollouts, separately; ``"joint"``: z-score
    all of them together. Then ``A_{i,t} = sum_{k>=t} gamma^(k-t) r~_{i,k}`` (gamma=1), ``T_i`` entries.
    IG rewards are not potential-based (no terminal ``-Phi``): they change the optimal policy.

    >>> [a.tolist() for a in igpo_advantages([[0.0], [1.0]], [1.0, 0.0], [0, 0], eps=0.0)]
    [[0.0, 1.0], [0.0, -1.0]]
    """
    ig = _ragged(ig_rewards, "ig_rewards")
    out = _vec(outcome_rewards, "outcome_rewards")
    keys = _keys(group_ids, len(ig))
    if out.size != len(ig):
        raise ValueError(f"{len(ig)} IG rows but {out.size} outcome rewards")
    _check_unit("gamma", gamma)
    if mode == "separate":
        z_ig = _normalize(ig, keys, "group", eps)
        z_out = group_zscore(out, keys, eps)
        rows = [np.append(a, b) for a, b in zip(z_ig, z_out, strict=True)]
    elif mode == "joint":
        rows = _normalize([np.append(a, b) for a, b in zip(ig, out, strict=True)], keys, "group", eps)
    else:
        raise ValueError(f"mode must be 'separate' or 'joint', got {mode!r}")
    return [_rtg(r, gamma) for r in rows]


def siop_advantages(
    turn_rewards: Sequence[ArrayLike], group_ids: ArrayLike, gamma: float = 1.0, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """SIOP advantage: z-score over all (rollout, turn) rewards of the group, then the turn reward-to-go
    ``A_{i,t} = sum_{k>=t} gamma^(k-t) r~_{i,k}`` (gamma=1 unless set).

    >>> [a.tolist() for a in siop_advantages([[1.0, 0.0], [0.0, 1.0]], [0, 0], eps=0.0)]
    [[0.0, -1.0], [0.0, 1.0]]
    """
    rows = _ragged(turn_rewards, "turn_rewards")
    _check_unit("gamma", gamma)
    return [_rtg(r, gamma) for r in _normalize(rows, _keys(group_ids, len(rows)), "group", eps)]


def turn_group_normalize(
    turn_rewards: Sequence[ArrayLike], group_ids: ArrayLike, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """A^2TGPO's normalisation: z-score within each (group, turn index) cell, i.e. turn ``t`` of a rollout is
    compared with turn ``t`` of its siblings that reached it. A cell of one rollout, or of ties, gives 0.

    >>> [r.tolist() for r in turn_group_normalize([[1.0, 5.0], [3.0]], ["q", "q"], eps=0.0)]
    [[-1.0, 0.0], [1.0]]
    """
    rows = _ragged(turn_rewards, "turn_rewards")
    return _normalize(rows, _keys(group_ids, len(rows)), "group_turn", eps)


def a2tgpo_advantages(
    turn_rewards: Sequence[ArrayLike],
    group_ids: ArrayLike,
    gamma: float = 1.0,
    sqrt_scale: bool = True,
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """A^2TGPO advantage (unverified exact form; docs/rewards.md, 'A^2TGPO'): ``r~ =``
    :func:`turn_group_normalize` ``(r)``, then ``A_{i,t} = (sum_{k>=t} gamma^(k-t) r~_{i,k}) / sqrt(T_i - t + 1)``
    (1-based ``t``; the divisor is the number of summed terms, which keeps a sum of unit-variance terms at unit
    variance). ``sqrt_scale=False`` drops the divisor. Pair with :func:`adaptive_clip_scale` for the per-turn clip
    range.

    >>> [a.round(4).tolist() for a in a2tgpo_advantages([[1.0, 1.0], [0.0, 0.0]], [0, 0], eps=0.0)]
    [[1.4142, 1.0], [-1.4142, -1.0]]
    """
    _check_unit("gamma", gamma)
    out = []
    for r in turn_group_normalize(turn_rewards, group_ids, eps):
        a = _rtg(r, gamma)
        out.append(a / np.sqrt(np.arange(a.size, 0, -1, dtype=np.float64)) if sqrt_scale else a)
    return out


def adaptive_clip_scale(r_tilde: ArrayLike, beta: float = 0.3) -> np.ndarray:
    """A^2TGPO's adaptive clip factor (unverified): ``1 + beta * (2 sigmoid(r~) - 1)`` ``= 1 + beta tanh(r~/2)``,
    elementwise; the clip range is ``eps_{i,t} = eps * scale``. It is 1 at 0, increasing, and inside
    ``(1 - beta, 1 + beta)``; in float64 it rounds onto the bounds for ``|r~| > ~35``.

    >>> adaptive_clip_scale([0.0, 1e9, -1e9], beta=0.3).tolist()
    [1.0, 1.3, 0.7]
    """
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    return 1.0 + beta * np.tanh(_arr(r_tilde, "r_tilde") / 2.0)


def _est_gtpo(b: TurnBatch, gamma: float = 1.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    return gtpo(b.turn_rewards, b.group_ids, gamma, eps)


def _est_igpo(
    b: TurnBatch, mode: Literal["separate", "joint"] = "separate", gamma: float = 1.0, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """IGPO from a TurnBatch: the final turn's reward is the outcome, the earlier ones are IG rewards."""
    if any(r.size == 0 for r in b.turn_rewards):
        raise ValueError("igpo needs at least one turn per trajectory (the final turn holds the outcome)")
    ig = [r[:-1] for r in b.turn_rewards]
    out = np.array([r[-1] for r in b.turn_rewards], dtype=np.float64)
    return igpo_advantages(ig, out, b.group_ids, mode, gamma, eps)


def _est_siop(b: TurnBatch, gamma: float = 1.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    return siop_advantages(b.turn_rewards, b.group_ids, gamma, eps)


def _est_a2tgpo(
    b: TurnBatch, gamma: float = 1.0, sqrt_scale: bool = True, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    return a2tgpo_advantages(b.turn_rewards, b.group_ids, gamma, sqrt_scale, eps)


REGISTERED: tuple[EstimatorSpec, ...] = (
    EstimatorSpec("gtpo", _est_gtpo),
    EstimatorSpec("igpo", _est_igpo),
    EstimatorSpec("siop", _est_siop),
    EstimatorSpec("a2tgpo", _est_a2tgpo),
)

METHODS: tuple[Method, ...] = (
    Method("gtpo", "GTPO", "estimator", "group z-score of discounted per-turn returns",
           needs=("group",), paper=cite("GTPO"), code=f"{__name__}:_est_gtpo",
           train={"algo": "grpo", "estimator": "gtpo", "reward_components": "all"},
           knobs_into="estimator_kwargs"),
    Method("a2tgpo", "A^2TGPO", "estimator",
           "turn rewards normalised per (group, turn index), accumulated with a 1/sqrt(turns left) scale",
           needs=("group", "scoring_model"), paper=cite("A^2TGPO"), code=f"{__name__}:_est_a2tgpo",
           choices=("the accumulation divisor sqrt(T_i - t + 1) (knob sqrt_scale)",
                    "the adaptive clip eps*(1 + beta*(2*sigmoid(r~) - 1)) with beta = 0.3"),
           train={"algo": "grpo", "scorer": "igpo", "estimator": "a2tgpo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
