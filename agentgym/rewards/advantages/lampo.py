"""LamPO's pairwise decomposed advantage (docs/rewards.md, 'LamPO'): every pair of rollouts of a group compares
their outcomes, each comparison weighted by how confident the policy was in the two responses."""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Sequence

import numpy as np

from agentgym.rewards.advantages.base import ArrayLike, EstimatorSpec, _keys, _per_turn, _vec
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function without overflow: ``exp`` only ever sees ``-|x|``."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _tokens(text: str) -> list[str]:
    """Lower-cased word tokens (runs of letters and digits): what ROUGE-L compares."""
    return re.findall(r"[^\W_]+", text.lower())


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 of ``candidate`` against ``reference`` over lower-cased word tokens: with ``L`` the length of their
    longest common subsequence, ``P = L / len(candidate)``, ``R = L / len(reference)`` and ``F = 2PR / (P + R)``
    (choice: F1, i.e. ROUGE-L's beta = 1); 0 when either has no tokens.

    >>> rouge_l("the cat sat on the mat", "the cat is on the mat")  # L = 5 ("the cat on the mat"), P = R = 5/6
    0.8333333333333334
    """
    a, b = _tokens(candidate), _tokens(reference)
    if not a or not b:
        return 0.0
    row = [0] * (len(b) + 1)  # row[j]: LCS of the prefix of a so far and b[:j]
    for x in a:
        diag = 0
        for j, y in enumerate(b, 1):
            diag, row[j] = row[j], diag + 1 if x == y else max(row[j], row[j - 1])
    lcs = row[-1]
    return 0.0 if lcs == 0 else 2.0 * lcs / (len(a) + len(b))


def reference_score(answer: str | None, references: Sequence[str]) -> float:
    """The reference term of one rollout: the best :func:`rouge_l` of its final ``answer`` over the gold aliases
    ``references`` (choice: the max over aliases); 0 without an answer.

    >>> reference_score("Paris, France", ["Paris", "City of Light"])  # vs "Paris": L = 1, P = 1/2, R = 1
    0.6666666666666666
    """
    if answer is None:
        return 0.0
    return max((rouge_l(answer, ref) for ref in references), default=0.0)


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


def _est_lampo(b: TurnBatch, beta: float = 1.0, lam: float = 0.0) -> list[np.ndarray]:
    """``lampo_advantages`` of the outcomes ``R_i`` (``lam = 0``) or of ``R_i + lam * s_i`` with ``s_i`` the
    rollout's reference score (``TurnBatch.reference_scores``: the ROUGE-L of its final answer against the gold,
    :func:`reference_score`), broadcast to every turn."""
    if b.seq_logprobs is None:
        raise ValueError("lampo needs TurnBatch.seq_logprobs (each rollout's mean sampled-token log-prob)")
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be a finite number >= 0, got {lam}")
    r = b.outcome_array
    if lam:
        if b.reference_scores is None:
            raise ValueError("lampo's lam > 0 needs TurnBatch.reference_scores (see reference_score)")
        r = r + lam * np.asarray(b.reference_scores)  # choice: R_i + lam * ROUGE-L (the spec's; knob lam, default 0)
    return _per_turn(lampo_advantages(r, b.seq_logprobs, b.group_ids, beta), b.turn_rewards)  # type: ignore[arg-type]


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("lampo", _est_lampo, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("lampo", "LamPO", "estimator",
           "pairwise decomposed advantage: outcome gaps to each sibling, weighted by sequence log-prob confidence",
           needs=("outcome", "group", "logprobs"), paper=cite("LamPO"), code=f"{__name__}:_est_lampo",
           choices=("the symmetric weight w_ij = 2*sigmoid(beta*(l_worse - l_better)) with l the mean sampled-token "
                    "log-prob of a rollout; knob beta (0 gives RLOO scaled by G/(G-1))",
                    "normalised by 1/(G-1); no std scaling",
                    "the optional reference term: R_i + lam * ROUGE-L F1 (LCS over lower-cased word tokens) of the "
                    "final <answer> against the env's gold answer (reset_info['gold']['answers'], the best alias; 0 "
                    "without an answer; it needs an env with gold answers, e.g. SearchQA); knob lam (default 0: "
                    "off)"),
           train={"algo": "grpo", "estimator": "lampo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
