"""Generalised advantage estimation: token-level PPO GAE (:func:`token_gae`, not registered: it works on token
arrays), PPO's :func:`masked_whiten`, and turn-level GAE with a critic at turn boundaries (``turn_ppo``).
docs/rewards.md, 'Token-level PPO GAE and broadcasting' and 'Turn-level returns: GTPO, turn-PPO'."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from agentgym.rewards.advantages.base import ArrayLike, EstimatorSpec, _arr, _check_unit, _numpy, _vec
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

if TYPE_CHECKING:
    import torch


def token_gae(
    rewards: ArrayLike,
    values: ArrayLike,
    mask: ArrayLike,
    gamma: float,
    lam: float,
    *,
    bootstrap_value: ArrayLike = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """PPO GAE over a token sequence ``(L,)`` or a padded batch ``(B, L)``; returns ``(advantages, returns)``.

    Only mask-1 (policy) tokens are steps: going backwards, ``nextvalue`` and ``lastgaelam`` are carried
    unchanged across mask-0 tokens (observation, template, padding), whose rewards and values are ignored and
    whose advantages and returns are exactly 0. On a policy token ``t`` with next policy token ``t'``:
    ``delta_t = r_t + gamma * V_t' - V_t``, ``A_t = delta_t + gamma * lam * A_t'``, ``return_t = A_t + V_t``.
    After the last policy token ``V = bootstrap_value`` (0 for a finished episode). Put each turn's reward on its
    last policy token (:func:`place_turn_rewards`).

    >>> m = [1, 1, 0, 0, 1]  # two policy tokens, two observation tokens, one policy token
    >>> adv, ret = token_gae([0.0, 1.0, 9.0, 9.0, 2.0], [1.0, 2.0, 9.0, 9.0, 1.0], m, gamma=0.5, lam=0.5)
    >>> adv.tolist(), ret.tolist()
    ([-0.0625, -0.25, 0.0, 0.0, 1.0], [0.9375, 1.75, 0.0, 0.0, 2.0])
    """
    _check_unit("gamma", gamma)
    _check_unit("lam", lam)
    r, v = _arr(rewards, "rewards"), _arr(values, "values")
    m = np.asarray(_numpy(mask)) != 0
    if not (r.shape == v.shape == m.shape) or r.ndim not in (1, 2):
        raise ValueError(f"rewards, values and mask must share a 1-D or 2-D shape: {r.shape}, {v.shape}, {m.shape}")
    single = r.ndim == 1
    if single:
        r, v, m = r[None], v[None], m[None]
    b, n = r.shape
    nextvalue = np.broadcast_to(_arr(bootstrap_value, "bootstrap_value"), (b,)).astype(np.float64)
    lastgaelam = np.zeros(b)
    adv = np.zeros((b, n))
    for t in range(n - 1, -1, -1):
        mt = m[:, t]
        gae = r[:, t] + gamma * nextvalue - v[:, t] + gamma * lam * lastgaelam
        adv[:, t] = np.where(mt, gae, 0.0)
        lastgaelam = np.where(mt, gae, lastgaelam)
        nextvalue = np.where(mt, v[:, t], nextvalue)
    ret = np.where(m, adv + v, 0.0)
    return (adv[0], ret[0]) if single else (adv, ret)


def token_gae_torch(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    *,
    bootstrap_value: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_gae` on torch tensors, on their device (no host round trip); computed in float64, returned
    in ``values.dtype``. Same shapes, semantics and results as the numpy version."""
    import torch

    _check_unit("gamma", gamma)
    _check_unit("lam", lam)
    with torch.no_grad():
        r, v = rewards.to(torch.float64), values.to(torch.float64)
        m = mask != 0
        single = r.dim() == 1
        if single:
            r, v, m = r[None], v[None], m[None]
        b, n = r.shape
        zero = torch.zeros(b, dtype=torch.float64, device=r.device)
        nextvalue = zero + bootstrap_value
        lastgaelam = zero.clone()
        adv = torch.zeros_like(r)
        for t in range(n - 1, -1, -1):
            mt = m[:, t]
            gae = r[:, t] + gamma * nextvalue - v[:, t] + gamma * lam * lastgaelam
            adv[:, t] = torch.where(mt, gae, zero)
            lastgaelam = torch.where(mt, gae, lastgaelam)
            nextvalue = torch.where(mt, v[:, t], nextvalue)
        ret = torch.where(m, adv + v, torch.zeros_like(v))
        if single:
            adv, ret = adv[0], ret[0]
        return adv.to(values.dtype), ret.to(values.dtype)


def masked_whiten(x: ArrayLike, mask: ArrayLike, eps: float = 1e-8, shift_mean: bool = True) -> np.ndarray:
    """Whiten ``x`` over its mask-1 entries (PPO's advantage normalisation): ``(x - mean) / (std + eps)``,
    population std; mask-0 entries come back exactly 0. ``shift_mean=False`` keeps the mean (only rescales)."""
    a = _arr(x, "x")
    m = np.asarray(_numpy(mask)) != 0
    if m.shape != a.shape:
        raise ValueError(f"mask shape {m.shape} != x shape {a.shape}")
    sel = a[m]
    if sel.size == 0:
        return np.zeros(a.shape)
    mean = math.fsum(sel) / sel.size
    std = math.sqrt(math.fsum((sel - mean) ** 2) / sel.size)
    out = a - mean if shift_mean else a.copy()
    if std + eps > 0:
        out = out / (std + eps)
    return np.where(m, out, 0.0)


def turn_gae(
    turn_rewards: ArrayLike, turn_values: ArrayLike, gamma: float = 0.99, lam: float = 0.9
) -> tuple[np.ndarray, np.ndarray]:
    """turn-PPO: GAE over the turns of one trajectory with a critic ``V(s_h)`` at turn boundaries; returns
    ``(advantages, returns)``, both ``(T,)``. ``delta_h = r_h + gamma V(s_{h+1}) - V(s_h)``,
    ``A_h = delta_h + gamma lam A_{h+1}``, ``return_h = A_h + V(s_h)``. ``turn_values`` has ``T`` entries
    (``V = 0`` after the last turn) or ``T + 1`` (the last one bootstraps a truncated episode).

    >>> adv, ret = turn_gae([0.0, 1.0], [0.5, 0.5], gamma=1.0, lam=0.5)
    >>> adv.tolist(), ret.tolist()
    ([0.25, 0.5], [0.75, 1.0])
    """
    r = _vec(turn_rewards, "turn_rewards")
    v = _vec(turn_values, "turn_values")
    _check_unit("gamma", gamma)
    _check_unit("lam", lam)
    if v.size == r.size:
        v = np.append(v, 0.0)
    elif v.size != r.size + 1:
        raise ValueError(f"{r.size} turn rewards need {r.size} or {r.size + 1} turn values, got {v.size}")
    adv = np.zeros(r.size)
    last = 0.0
    for t in range(r.size - 1, -1, -1):
        last = r[t] + gamma * v[t + 1] - v[t] + gamma * lam * last
        adv[t] = last
    return adv, adv + v[:-1]


def _est_turn_ppo(b: TurnBatch, gamma: float = 0.99, lam: float = 0.9) -> list[np.ndarray]:
    if b.values is None:
        raise ValueError("turn_ppo needs TurnBatch.values (critic values at turn boundaries)")
    return [turn_gae(r, v, gamma, lam)[0] for r, v in zip(b.turn_rewards, b.values, strict=True)]


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("turn_ppo", _est_turn_ppo),)

METHODS: tuple[Method, ...] = (
    Method("turn_ppo", "turn-PPO", "estimator", "GAE over turns with a critic at turn boundaries",
           needs=("learned_model",), paper=cite("turn-PPO"), code=f"{__name__}:_est_turn_ppo",
           train={"algo": "ppo", "estimator": "turn_ppo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
