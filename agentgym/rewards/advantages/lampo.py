"""LamPO's pairwise decomposed advantage (docs/rewards.md, 'LamPO'): every pair of rollouts of a group compares
their outcomes, each comparison weighted by how confident the policy was in the two responses."""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from agentgym.rewards.advantages.base import ArrayLike, EstimatorSpec, _keys, _per_turn, _vec
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function without overflow: ``exp`` only ever sees ``-|x|``."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def lampo_advantages(
    outcomes: ArrayLike, seq_logprobs: ArrayLike, group_ids: ArrayLike, beta: float = 1.0
) -> np.ndarray:
    """LamPO: ``A_i = 1/(G-1) * sum_{j != i} w_ij (R_i - R_j)`` over the group of ``G`` rollouts, with the
    symmetric confidence weight ``w_ij = 2 * sigmoid(beta * (l_worse - l_better))`` (``l``: a rollout's mean
    sampled-token log-prob; ``better``: the one of the pair with the higher outcome). A better response the policy
    found less likely than the worse one gets ``w > 1`` (more push), a likelier one ``w < 1``. ``beta=0`` gives
    ``w = 1``, i.e. ``G/(G-1) * (R_i - mean_G)`` (RLOO). Sums to 0 per group; a singleton or tied group gives 0.

    >>> lampo_advantages([1.0, 0.0, 0.0], [-1.0, -2.0, -1.0], [0, 0, 0], beta=0.0).tolist()
    [1.0, -0.5, -0.5]
    """
    r = _vec(outcomes, "outcomes")
    lp = _vec(seq_logprobs, "seq_logprobs")
    if lp.size != r.size:
        raise ValueError(f"{r.size} outcomes but {lp.size} seq_logprobs")
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    buckets: dict[Hashable, list[int]] = {}
    for i, k in enumerate(_keys(group_ids, r.size)):
        buckets.setdefault(k, []).append(i)
    out = np.zeros(r.size)
    for idx in buckets.values():
        g = len(idx)
        if g < 2:
            continue
        ix = np.asarray(idx, dtype=np.intp)
        x, lx = r[ix], lp[ix]
        gap = x[:, None] - x[None, :]  # R_i - R_j
        # choice: l_worse - l_better = -sign(R_i - R_j) * (l_i - l_j), symmetric in (i, j) (the spec's; knob beta)
        w = 2.0 * _sigmoid(-beta * np.sign(gap) * (lx[:, None] - lx[None, :]))
        terms = w * gap  # the diagonal is 0 (gap 0)
        out[ix] = [math.fsum(row) / (g - 1) for row in terms]
    return out + 0.0


def _est_lampo(b: TurnBatch, beta: float = 1.0) -> list[np.ndarray]:
    if b.seq_logprobs is None:
        raise ValueError("lampo needs TurnBatch.seq_logprobs (each rollout's mean sampled-token log-prob)")
    return _per_turn(lampo_advantages(b.outcome_array, b.seq_logprobs, b.group_ids, beta), b.turn_rewards)  # type: ignore[arg-type]


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("lampo", _est_lampo, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("lampo", "LamPO", "estimator",
           "pairwise decomposed advantage: outcome gaps to each sibling, weighted by sequence log-prob confidence",
           needs=("outcome", "group", "logprobs"), paper=cite("LamPO"), code=f"{__name__}:_est_lampo",
           status="partial",
           choices=("the symmetric weight w_ij = 2*sigmoid(beta*(l_worse - l_better)) with l the mean sampled-token "
                    "log-prob of a rollout; knob beta (0 gives RLOO scaled by G/(G-1))",
                    "normalised by 1/(G-1); no std scaling"),
           train={"algo": "grpo", "estimator": "lampo"}, knobs_into="estimator_kwargs",
           missing="the ROUGE-L auxiliary reward against a reference answer (knob lambda): the trainer's batch "
                   "carries no reference answers"),
)  # fmt: skip
