"""Advantage estimators: groups of scored rollouts -> per-turn advantages -> per-token advantages.

Framework-free (numpy in, numpy out, float64 inside; torch tensors are accepted and converted) so any RL
trainer can import it. Notation and formulas follow docs/rewards.md, 'Advantage estimators' (the notation is
defined at the top of that guide).

Conventions
- A *group* is the G rollouts of one task (same prompt and seed), named by ``group_ids`` (any hashables).
- Per-turn inputs are ragged: one 1-D array per trajectory with one entry per agent turn, in turn order.
  Per-turn outputs come back the same way (``list[np.ndarray]``); per-trajectory ones as an ``(N,)`` array.
- ``z_S(x) = (x - mean_S) / (std_S + eps)`` with the *population* std (ddof=0). A set of one value, or of
  values that all tie, gives exactly 0. Sums use ``math.fsum``, so every result is bitwise independent of
  the batch order: permuting the batch permutes the output exactly. Output is deterministic and NaN-free.
- Inputs must be finite: a NaN reward (a scorer's failed turn) raises ``ValueError``, it is never read as 0.
- Turn-level advantages reach tokens only through :func:`broadcast_to_tokens`, with explicit turn spans.

Estimators by name (``ESTIMATORS`` / :func:`get_estimator`), each ``fn(batch: TurnBatch, **params) ->
list[np.ndarray]`` (per-turn advantages): ``grpo``, ``dr_grpo``, ``rloo`` (trajectory-level, every turn gets
the trajectory's value), ``gtpo``, ``turn_ppo``, ``igpo``, ``siop``, ``a2tgpo``, ``gigpo`` (state anchors),
``gigpo_obs`` (observation anchors), ``matchtir``, ``mapo``, ``userrl``, ``mt_grpo`` (a verified per-turn signal
plus the outcome). Token-level PPO GAE (:func:`token_gae`) works on token arrays and is not registered.

>>> b = TurnBatch([[0.0, 1.0], [0.0, 0.0], [1.0]], group_ids=["q", "q", "r"])
>>> [a.round(4).tolist() for a in get_estimator("grpo")(b)]
[[1.0, 1.0], [-1.0, -1.0], [0.0]]
>>> broadcast_to_tokens([1.0, -0.5], [(0, 2), (4, 5)], length=6).tolist()
[1.0, 1.0, 0.0, 0.0, -0.5, 0.0]
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from agentgym.contract.trajectory import Trajectory

__all__ = [
    "ESTIMATORS",
    "OUTCOME_ESTIMATORS",
    "TURN_SIGNALS",
    "TurnBatch",
    "TurnSignal",
    "a2tgpo_advantages",
    "adaptive_clip_scale",
    "broadcast_to_tokens",
    "broadcast_to_tokens_batch",
    "dr_grpo",
    "get_estimator",
    "gigpo",
    "group_zscore",
    "grpo",
    "gtpo",
    "igpo_advantages",
    "mapo_mixed",
    "masked_whiten",
    "matchtir_dual",
    "mt_grpo",
    "normalize_turn_returns",
    "observation_anchors",
    "observation_key",
    "place_turn_rewards",
    "rloo",
    "siop_advantages",
    "token_gae",
    "token_gae_torch",
    "turn_gae",
    "turn_group_normalize",
    "turn_returns",
    "userrl_advantages",
    "userrl_trajectory_score",
    "userrl_turn_credits",
]

ArrayLike = Any  # numpy array, sequence of numbers, or a torch tensor
Span = tuple[int, int]
DEFAULT_EPS = 1e-6


# ----------------------------------------------------------------------------------------------------------------
# input conversion and the z-score core


def _numpy(x: ArrayLike) -> Any:
    if hasattr(x, "detach"):  # torch tensor: no torch import needed
        x = x.detach().cpu().numpy()
    return x


def _vec(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(_numpy(x), dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or inf (mark failed turns explicitly; they are never read as 0)")
    return a


def _arr(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(_numpy(x), dtype=np.float64)
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or inf")
    return a


def _ragged(rows: ArrayLike, name: str) -> list[np.ndarray]:
    return [_vec(r, f"{name}[{i}]") for i, r in enumerate(_numpy(rows))]


def _keys(ids: ArrayLike, n: int, name: str = "group_ids") -> list[Hashable]:
    ids = _numpy(ids)
    keys = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    if len(keys) != n:
        raise ValueError(f"{name}: {len(keys)} ids for {n} trajectories")
    return keys


def _check_unit(name: str, x: float) -> float:
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {x}")
    return float(x)


def _z(x: np.ndarray, eps: float, scale: bool) -> np.ndarray:
    """z-score of one set (population std); a single value or a tie gives exact zeros."""
    n = x.size
    if n <= 1 or bool(np.all(x == x[0])):
        return np.zeros(n)
    d = x - math.fsum(x) / n
    if not scale:
        return d
    den = math.sqrt(math.fsum(d * d) / n) + eps
    return d / den if den > 0 else np.zeros(n)


def group_zscore(
    values: ArrayLike, keys: Sequence[Hashable], eps: float = DEFAULT_EPS, scale: bool = True
) -> np.ndarray:
    """``z`` of a flat array within the sets of equal ``keys``: ``(x - mean_k) / (std_k + eps)`` (population std;
    ``scale=False``: only ``x - mean_k``). A key held by one element, or whose values tie, gives exact zeros.

    >>> group_zscore([1.0, 3.0, 5.0, 5.0], ["a", "a", "b", "b"], eps=0.0).tolist()
    [-1.0, 1.0, 0.0, 0.0]
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    x = _vec(values, "values")
    keys = _keys(keys, x.size, "keys")
    buckets: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        buckets.setdefault(k, []).append(i)
    out = np.zeros(x.size)
    for idx in buckets.values():
        ix = np.asarray(idx, dtype=np.intp)
        out[ix] = _z(x[ix], eps, scale)
    return out


def _flat(rows: list[np.ndarray]) -> tuple[np.ndarray, list[int]]:
    lengths = [r.size for r in rows]
    return (np.concatenate(rows) if rows else np.zeros(0)), lengths


def _unflat(flat: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
    return [a.copy() for a in np.split(flat, np.cumsum(lengths)[:-1])] if lengths else []


_By = Literal["group", "group_turn", "batch"]


def _normalize(rows: list[np.ndarray], keys: list[Hashable], by: _By, eps: float, scale: bool = True):
    """z-score per-turn values pooled over the group, per (group, turn index) cell, or over the whole batch."""
    flat, lengths = _flat(rows)
    if by == "group":
        cell = [keys[i] for i, n in enumerate(lengths) for _ in range(n)]
    elif by == "group_turn":
        cell = [(keys[i], t) for i, n in enumerate(lengths) for t in range(n)]
    elif by == "batch":
        cell = [0] * flat.size
    else:
        raise ValueError(f"by must be 'group', 'group_turn' or 'batch', got {by!r}")
    return _unflat(group_zscore(flat, cell, eps, scale), lengths)


def _rtg(r: np.ndarray, gamma: float) -> np.ndarray:
    out = np.empty_like(r)
    acc = 0.0
    for t in range(r.size - 1, -1, -1):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out


def _per_turn(values: np.ndarray, rows: list[np.ndarray]) -> list[np.ndarray]:
    return [np.full(r.size, v) for v, r in zip(values, rows, strict=True)]


# ----------------------------------------------------------------------------------------------------------------
# trajectory-level estimators (docs/rewards.md, 'GRPO, Dr. GRPO, RLOO')


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


# ----------------------------------------------------------------------------------------------------------------
# token-level PPO GAE and the turn <-> token plumbing


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


def token_gae_torch(rewards, values, mask, gamma: float, lam: float, *, bootstrap_value: float = 0.0):
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


def _turn_span_lists(turn_spans: Sequence[Any]) -> list[list[Span]]:
    """Each turn is one ``(start, end)`` or a list of them (a turn split by template tokens)."""
    out = []
    for s in turn_spans:
        if len(s) == 2 and all(isinstance(v, (int, np.integer)) for v in s):
            out.append([(int(s[0]), int(s[1]))])
        else:
            out.append([(int(a), int(b)) for a, b in s])
    return out


def broadcast_to_tokens(
    turn_advantages: Sequence[float] | ArrayLike,
    turn_spans: Sequence[Span] | Sequence[Sequence[Span]],
    length: int,
    loss_mask: ArrayLike | None = None,
) -> np.ndarray:
    """Token advantages ``(length,)``: turn ``k``'s advantage on its tokens ``[start, end)``, exactly 0 on every
    other token (observation/template tokens, padding) and on mask-0 tokens. Turns come only from the explicit
    spans (a turn whose advantage is 0 is still its own turn); a span may also be a list of spans. Spans must lie
    in ``[0, length]`` and not overlap.

    >>> broadcast_to_tokens([2.0, 0.0, -1.0], [(0, 2), (3, 4), (5, 7)], 8, loss_mask=[1, 1, 1, 1, 1, 1, 0, 1]).tolist()
    [2.0, 2.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0]
    """
    adv = _vec(turn_advantages, "turn_advantages")
    spans = _turn_span_lists(turn_spans)
    if len(spans) != adv.size:
        raise ValueError(f"{adv.size} turn advantages but {len(spans)} turn spans")
    out = np.zeros(length)
    owner = np.full(length, -1, dtype=np.intp)
    for k, (a, turn) in enumerate(zip(adv.tolist(), spans, strict=True)):
        for s, e in turn:
            if not 0 <= s <= e <= length:
                raise ValueError(f"turn {k}: span ({s}, {e}) is outside [0, {length}]")
            if (owner[s:e] >= 0).any():
                raise ValueError(f"turn {k}: span ({s}, {e}) overlaps turn {int(owner[s:e].max())}")
            owner[s:e] = k
            out[s:e] = a
    if loss_mask is not None:
        m = np.asarray(_numpy(loss_mask))
        if m.shape != (length,):
            raise ValueError(f"loss_mask shape {m.shape} != ({length},)")
        out = np.where(m != 0, out, 0.0)
    return out + 0.0  # no -0.0


def broadcast_to_tokens_batch(
    turn_advantages: Sequence[ArrayLike],
    turn_spans: Sequence[Sequence[Span] | Sequence[Sequence[Span]]],
    length: int,
    loss_mask: ArrayLike | None = None,
) -> np.ndarray:
    """:func:`broadcast_to_tokens` for a padded batch: ``(B, length)``, with an optional ``(B, length)`` mask."""
    if len(turn_advantages) != len(turn_spans):
        raise ValueError(f"{len(turn_advantages)} advantage rows but {len(turn_spans)} span rows")
    m = None if loss_mask is None else np.asarray(_numpy(loss_mask))
    if m is not None and m.shape != (len(turn_spans), length):
        raise ValueError(f"loss_mask shape {m.shape} != ({len(turn_spans)}, {length})")
    rows = [
        broadcast_to_tokens(a, s, length, None if m is None else m[i])
        for i, (a, s) in enumerate(zip(turn_advantages, turn_spans, strict=True))
    ]
    return np.stack(rows) if rows else np.zeros((0, length))


def place_turn_rewards(turn_rewards: ArrayLike, turn_spans: Sequence[Any], length: int) -> np.ndarray:
    """Token rewards ``(length,)`` with each turn's reward on the last token of its span, 0 elsewhere: the input of
    :func:`token_gae` (docs/rewards.md, 'Token-level PPO GAE and broadcasting': every per-turn reward lands on the last
    policy token of its turn).

    >>> place_turn_rewards([0.5, 1.0], [(0, 3), (5, 7)], 8).tolist()
    [0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0]
    """
    r = _vec(turn_rewards, "turn_rewards")
    spans = _turn_span_lists(turn_spans)
    if len(spans) != r.size:
        raise ValueError(f"{r.size} turn rewards but {len(spans)} turn spans")
    out = np.zeros(length)
    for k, (x, turn) in enumerate(zip(r.tolist(), spans, strict=True)):
        ends = [e for s, e in turn if e > s]
        if not ends or max(ends) > length or min(s for s, _ in turn) < 0:
            raise ValueError(f"turn {k}: spans {turn} hold no token inside [0, {length})")
        out[max(ends) - 1] += x
    return out


# ----------------------------------------------------------------------------------------------------------------
# turn-level returns and estimators


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


# ----------------------------------------------------------------------------------------------------------------
# UserRL credit variants (docs/rewards.md, 'MatchTIR dual-level, MAPO, UserRL')

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


# ----------------------------------------------------------------------------------------------------------------
# multi-turn GRPO with a verified per-turn signal, and the signals and observation keys it reads
# (docs/rewards.md, 'Multi-turn GRPO', and 'GiGPO' for the observation anchors)

FinalTurn = Literal["outcome", "both"]
SignalMode = Literal["value", "delta"]


def _signal_rows(rows: Any, name: str) -> list[list[float | None]]:
    """Ragged per-turn signals: a number (a bool counts as 0/1) or None (no verified signal at that turn)."""
    out: list[list[float | None]] = []
    for i, row in enumerate(_numpy(rows)):
        row = _numpy(row)
        items = row.tolist() if isinstance(row, np.ndarray) else list(row)
        clean: list[float | None] = []
        for t, x in enumerate(items):
            if x is None:
                clean.append(None)
                continue
            if not isinstance(x, (int, float, np.number)):  # bool is an int
                raise ValueError(f"{name}[{i}][{t}]: a signal is a number, a bool or None, got {x!r}")
            v = float(x)
            if not math.isfinite(v):
                raise ValueError(f"{name}[{i}][{t}]: {v} (a turn without a signal is None, never NaN)")
            clean.append(v)
        out.append(clean)
    return out


def mt_grpo(
    outcomes: ArrayLike,
    turn_signals: Sequence[Sequence[float | bool | None]],
    group_ids: ArrayLike,
    turn_coef: float = 1.0,
    outcome_coef: float = 1.0,
    final_turn: FinalTurn = "outcome",
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """Multi-turn GRPO (Zeng et al.): two reward streams, each normalised over its own population.

    * Outcome term ``A^O_i = z_group(R_i)``: over every rollout of the group, whatever its length (as :func:`grpo`).
    * Turn term ``A^T_{i,t} = z_{(group, t)}(s_{i,t})``: turn ``t``'s verified signal over the *cell* of the
      rollouts of the group that reached turn ``t`` and report a signal there. A shorter rollout is simply absent
      from the cells of the turns it never played; a turn whose signal is None (e.g. a diagnostic's distractor
      stage) is in no cell. With ``final_turn="outcome"`` a rollout's final turn is in no cell either (its signal
      is unused, so it does not move its siblings' z-scores).
    * A turn whose signal is used gets ``turn_coef * A^T + outcome_coef * A^O`` (the paper's ``A^T + lambda A^O``,
      lambda = 1); every other turn gets ``A^O`` alone: the final turn (``final_turn="outcome"``, the paper's
      rule: its verified reward is the outcome) and turns without a signal. ``final_turn="both"`` treats the final
      turn like the others.

    ``z`` is the population z-score with ``eps`` added to the std, as in :func:`grpo`: a cell or group of one, or
    whose values all tie, gives exact zeros (no information, no advantage from that stream). The turn term is
    invariant to ``a * s + b`` (``a > 0``) per cell, up to ``eps``. ``turn_coef=0`` is GRPO exactly.

    >>> a = mt_grpo([1.0, 0.0], [[True, True], [False, True]], ["q", "q"], eps=0.0)
    >>> [x.tolist() for x in a]  # turn 1: z(1, 0) + z(1, 0); turn 2 (final): z(R) alone
    [[2.0, 1.0], [-2.0, -1.0]]
    """
    r = _vec(outcomes, "outcomes")
    keys = _keys(group_ids, r.size)
    sig = _signal_rows(turn_signals, "turn_signals")
    if len(sig) != r.size:
        raise ValueError(f"{r.size} outcomes but {len(sig)} signal rows")
    if final_turn not in ("outcome", "both"):
        raise ValueError(f"final_turn must be 'outcome' or 'both', got {final_turn!r}")
    if not (math.isfinite(turn_coef) and math.isfinite(outcome_coef)):
        raise ValueError(f"turn_coef and outcome_coef must be finite, got {turn_coef}, {outcome_coef}")
    a_o = grpo(r, keys, eps)
    used = [[v is not None and (final_turn == "both" or t < len(row) - 1) for t, v in enumerate(row)] for row in sig]
    values = [v for row, u in zip(sig, used, strict=True) for v, ok in zip(row, u, strict=True) if ok]
    cells = [(keys[i], t) for i, u in enumerate(used) for t, ok in enumerate(u) if ok]
    z = iter(group_zscore(np.array(values, dtype=np.float64), cells, eps).tolist())
    out = []
    for i, u in enumerate(used):
        out.append(np.array([turn_coef * next(z) + outcome_coef * a_o[i] if ok else a_o[i] for ok in u]) + 0.0)
    return out


@dataclass(frozen=True)
class TurnSignal:
    """Where an env reports a verified per-turn signal: ``info[key]`` after each step, read as it is (``"value"``:
    a per-step verdict such as the diagnostics' ``correct``) or as its change over the step (``"delta"``: for a
    cumulative key such as SearchQA's ``supporting_recall``; the state before the first step is the reset's)."""

    key: str
    mode: SignalMode = "value"

    def __post_init__(self) -> None:
        if self.mode not in ("value", "delta"):
            raise ValueError(f"signal mode must be 'value' or 'delta', got {self.mode!r}")

    def read(self, reset_info: Mapping[str, Any], step_infos: Sequence[Mapping[str, Any]]) -> list[float | None]:
        """One signal per step (None: the step's info has no number under ``key``, or, for ``"delta"``, no earlier
        state had one). A bool counts as 0/1; a non-finite or non-numeric value raises ``ValueError``.

        >>> TurnSignal("recall", "delta").read({"recall": 0.0}, [{"recall": 0.5}, {}, {"recall": 1.0}])
        [0.5, None, 0.5]
        """

        def number(x: Any, where: str) -> float | None:
            if x is None:
                return None
            if not isinstance(x, (int, float, np.number)) or not math.isfinite(float(x)):
                raise ValueError(f"{where}[{self.key!r}] must be a finite number, a bool or None, got {x!r}")
            return float(x)

        prev = number(reset_info.get(self.key), "reset info")
        out: list[float | None] = []
        for k, info in enumerate(step_infos):
            x = number(info.get(self.key), f"step {k} info")
            if self.mode == "value" or x is None:
                out.append(x)
                continue
            out.append(None if prev is None else x - prev)
            prev = x
        return out


#: The verified per-turn signal each built-in env reports (what :func:`mt_grpo` reads by default in the reference
#: trainer). Household reports ``progress`` only with ``expert_plan=True``; envs not listed report none.
TURN_SIGNALS: Mapping[str, TurnSignal] = MappingProxyType(
    {
        # the step's choice was right (True/False); None on a distractor stage
        "agentgym/Chain-v0": TurnSignal("correct"),
        "agentgym/Umbrella-v0": TurnSignal("correct"),
        "agentgym/KeyDoor-v0": TurnSignal("correct"),
        # the share of the task's supporting documents retrieved so far: its increase is the step's new hits
        "agentgym/SearchQA-v0": TurnSignal("supporting_recall", "delta"),
        # 1 - (expert plan length) / (initial plan length): its increase is the step's plan progress (< 0: a detour)
        "agentgym/Household-v0": TurnSignal("progress", "delta"),
    }
)


def observation_key(messages: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """A hashable key of exactly what an observation showed the agent: each message as canonical JSON (sorted keys,
    non-JSON values by ``str``). Two observations share a key only if every message is identical.

    >>> observation_key([{"role": "user", "content": "Turn 2/2. Options: a b."}])
    ('{"content": "Turn 2/2. Options: a b.", "role": "user"}',)
    """
    return tuple(json.dumps(dict(m), sort_keys=True, ensure_ascii=False, default=str) for m in messages)


def observation_anchors(
    initial_observation: Sequence[Mapping[str, Any]], observations: Sequence[Sequence[Mapping[str, Any]]]
) -> list[tuple[str, ...]]:
    """Per turn, the :func:`observation_key` of the observation its action answered: the reset's for the first
    turn, the previous step's after that (``observations`` holds one observation per step, so one anchor each).
    GiGPO's observation anchors (``gigpo_obs``): unlike an env's state anchor they carry nothing the agent did
    not see."""
    return [observation_key(o) for o in [initial_observation, *observations][: len(observations)]]


# ----------------------------------------------------------------------------------------------------------------
# ragged batch and the registry


@dataclass
class TurnBatch:
    """A batch of trajectories for the turn-level estimators: per-trajectory arrays of per-turn rewards and the
    group ids, plus what some estimators need: ``outcomes`` (per trajectory; default the sum of the turn
    rewards), ``anchors`` (GiGPO, per turn: the env's state anchor, hashable or None), ``values`` (turn-PPO critic,
    ``T`` or ``T + 1`` per trajectory), ``turn_lengths`` (policy tokens per turn, UserRL's weighting),
    ``observations`` (``gigpo_obs``, per turn: a hashable key of what the agent observed, see
    :func:`observation_anchors`), ``turn_signals`` (``mt_grpo``, per turn: a verified signal or None)."""

    turn_rewards: Sequence[ArrayLike]
    group_ids: ArrayLike
    outcomes: ArrayLike | None = None
    anchors: Sequence[Sequence[Hashable | None]] | None = None
    values: Sequence[ArrayLike] | None = None
    turn_lengths: Sequence[ArrayLike] | None = None
    observations: Sequence[Sequence[Hashable]] | None = None
    turn_signals: Sequence[Sequence[float | bool | None]] | None = None

    def __post_init__(self) -> None:
        self.turn_rewards = _ragged(self.turn_rewards, "turn_rewards")
        n = len(self.turn_rewards)
        self.group_ids = _keys(self.group_ids, n)
        if self.outcomes is not None:
            self.outcomes = _vec(self.outcomes, "outcomes")
            if self.outcomes.size != n:
                raise ValueError(f"{self.outcomes.size} outcomes for {n} trajectories")
        if self.anchors is not None:
            self.anchors = [list(a) for a in self.anchors]
            if [len(a) for a in self.anchors] != self.lengths:
                raise ValueError("anchors must have one entry per turn")
        if self.values is not None:
            self.values = _ragged(self.values, "values")
            if len(self.values) != n:
                raise ValueError(f"{len(self.values)} value rows for {n} trajectories")
        if self.turn_lengths is not None:
            self.turn_lengths = _ragged(self.turn_lengths, "turn_lengths")
            if [t.size for t in self.turn_lengths] != self.lengths:
                raise ValueError("turn_lengths must have one entry per turn")
        if self.observations is not None:
            self.observations = [list(o) for o in self.observations]
            if [len(o) for o in self.observations] != self.lengths:
                raise ValueError("observations must have one entry per turn")
        if self.turn_signals is not None:
            self.turn_signals = _signal_rows(self.turn_signals, "turn_signals")
            if [len(s) for s in self.turn_signals] != self.lengths:
                raise ValueError("turn_signals must have one entry per turn")

    @property
    def lengths(self) -> list[int]:
        return [r.size for r in self.turn_rewards]  # type: ignore[union-attr]

    @property
    def outcome_array(self) -> np.ndarray:
        """``outcomes``, or the sum of each trajectory's turn rewards when not given."""
        if self.outcomes is not None:
            return self.outcomes  # type: ignore[return-value]
        return np.array([math.fsum(r) for r in self.turn_rewards], dtype=np.float64)

    def permuted(self, order: Sequence[int]) -> TurnBatch:
        """The same batch with trajectories reordered (``new[j] = old[order[j]]``)."""

        def pick(x):
            return None if x is None else [x[i] for i in order]

        return TurnBatch(
            pick(self.turn_rewards),
            pick(self.group_ids),
            None if self.outcomes is None else np.asarray(self.outcomes)[list(order)],
            pick(self.anchors),
            pick(self.values),
            pick(self.turn_lengths),
            pick(self.observations),
            pick(self.turn_signals),
        )

    @classmethod
    def from_trajectories(
        cls,
        trajectories: Sequence[Trajectory],
        *,
        reward_component: str | None = None,
        outcome_component: str | None = None,
        signal: TurnSignal | str | None = None,
    ) -> TurnBatch:
        """Build from ``agentgym.contract.trajectory.Trajectory`` records. Turn rewards are ``turn.reward`` or one named
        entry of ``info["reward_components"]`` (absent = 0); ``outcomes`` the sum of ``outcome_component`` over
        the turns (None: the sum of the turn rewards). Group id: ``group_id``, else (env_id, task_id, seed).
        Anchors are the states the actions were taken in (the reset's ``info["anchor"]`` for the first turn, the
        previous step's after that; None where absent), observations the keys of what the agent saw before each
        action (:func:`observation_anchors`); turn lengths from ``token_spans`` when every turn has them;
        ``turn_signals`` read by ``signal`` (a :class:`TurnSignal`, or an info key read as it is) when given."""

        def rew(turn, name):
            return turn.reward if name is None else float(turn.info.get("reward_components", {}).get(name, 0.0))

        rewards = [[rew(t, reward_component) for t in tr.turns] for tr in trajectories]
        gids = [tr.group_id if tr.group_id is not None else (tr.env_id, tr.task_id, tr.seed) for tr in trajectories]
        outcomes = None
        if outcome_component is not None:
            outcomes = [math.fsum(rew(t, outcome_component) for t in tr.turns) for tr in trajectories]
        # a turn's anchor is the state its action was taken in: the reset's for the first turn, else the last step's
        anchors = [[(tr.turns[k - 1].info if k else tr.reset_info).get("anchor") for k in range(len(tr.turns))]
                   for tr in trajectories]  # fmt: skip
        lengths = None
        if all(t.token_spans is not None for tr in trajectories for t in tr.turns):
            lengths = [[sum(e - s for s, e in t.token_spans) for t in tr.turns] for tr in trajectories]
        observations = [observation_anchors(tr.initial_observation, [t.observation for t in tr.turns])
                        for tr in trajectories]  # fmt: skip
        signals = None
        if signal is not None:
            src = TurnSignal(signal) if isinstance(signal, str) else signal
            signals = [src.read(tr.reset_info, [t.info for t in tr.turns]) for tr in trajectories]
        return cls(rewards, gids, outcomes, anchors, None, lengths, observations, signals)


Estimator = Callable[..., list[np.ndarray]]


def _est_grpo(b: TurnBatch, eps: float = DEFAULT_EPS, scale: bool = True) -> list[np.ndarray]:
    return _per_turn(grpo(b.outcome_array, b.group_ids, eps, scale), b.turn_rewards)  # type: ignore[arg-type]


def _est_dr_grpo(b: TurnBatch, norm_length: float | None = None) -> list[np.ndarray]:
    return _per_turn(dr_grpo(b.outcome_array, b.group_ids, norm_length), b.turn_rewards)  # type: ignore[arg-type]


def _est_rloo(b: TurnBatch) -> list[np.ndarray]:
    return _per_turn(rloo(b.outcome_array, b.group_ids), b.turn_rewards)  # type: ignore[arg-type]


def _est_gtpo(b: TurnBatch, gamma: float = 1.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    return gtpo(b.turn_rewards, b.group_ids, gamma, eps)


def _est_turn_ppo(b: TurnBatch, gamma: float = 0.99, lam: float = 0.9) -> list[np.ndarray]:
    if b.values is None:
        raise ValueError("turn_ppo needs TurnBatch.values (critic values at turn boundaries)")
    return [turn_gae(r, v, gamma, lam)[0] for r, v in zip(b.turn_rewards, b.values, strict=True)]


def _est_igpo(
    b: TurnBatch, mode: Literal["separate", "joint"] = "separate", gamma: float = 1.0, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    """IGPO from a TurnBatch: the final turn's reward is the outcome, the earlier ones are IG rewards."""
    if any(r.size == 0 for r in b.turn_rewards):  # type: ignore[union-attr]
        raise ValueError("igpo needs at least one turn per trajectory (the final turn holds the outcome)")
    ig = [r[:-1] for r in b.turn_rewards]  # type: ignore[index]
    out = np.array([r[-1] for r in b.turn_rewards], dtype=np.float64)  # type: ignore[index]
    return igpo_advantages(ig, out, b.group_ids, mode, gamma, eps)


def _est_siop(b: TurnBatch, gamma: float = 1.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    return siop_advantages(b.turn_rewards, b.group_ids, gamma, eps)


def _est_a2tgpo(
    b: TurnBatch, gamma: float = 1.0, sqrt_scale: bool = True, eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    return a2tgpo_advantages(b.turn_rewards, b.group_ids, gamma, sqrt_scale, eps)


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


def _est_mt_grpo(
    b: TurnBatch,
    turn_coef: float = 1.0,
    outcome_coef: float = 1.0,
    final_turn: FinalTurn = "outcome",
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    if b.turn_signals is None:
        raise ValueError("mt_grpo needs TurnBatch.turn_signals (a verified per-turn signal; see TURN_SIGNALS)")
    return mt_grpo(b.outcome_array, b.turn_signals, b.group_ids, turn_coef, outcome_coef, final_turn, eps)


def _est_matchtir(b: TurnBatch, gamma: float = 0.9, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    return matchtir_dual(b.turn_rewards, b.group_ids, gamma, eps)


def _est_mapo(b: TurnBatch, alpha: float = 0.5, gamma: float = 1.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    """MAPO from a TurnBatch: Monte Carlo returns of the turn rewards (gamma=1 unless set), then mixed z."""
    _check_unit("gamma", gamma)
    return mapo_mixed([_rtg(r, gamma) for r in b.turn_rewards], b.group_ids, alpha, eps)  # type: ignore[arg-type]


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


#: Estimators by name: ``fn(batch: TurnBatch, **params) -> list[np.ndarray]`` (one array of per-turn advantages
#: per trajectory). Read-only.
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(
    {
        "grpo": _est_grpo,
        "dr_grpo": _est_dr_grpo,
        "rloo": _est_rloo,
        "gtpo": _est_gtpo,
        "turn_ppo": _est_turn_ppo,
        "igpo": _est_igpo,
        "siop": _est_siop,
        "a2tgpo": _est_a2tgpo,
        "gigpo": _est_gigpo,
        "gigpo_obs": _est_gigpo_obs,
        "matchtir": _est_matchtir,
        "mapo": _est_mapo,
        "userrl": _est_userrl,
        "mt_grpo": _est_mt_grpo,
    }
)
#: The estimators that read the rewards only through each trajectory's outcome (``TurnBatch.outcome_array``):
#: for them "outcome-only" means the outcome alone, and the reference trainer feeds them the ``outcome`` reward
#: component only by default (``TrainConfig.reward_components``). ``mt_grpo``'s turn credit comes from the
#: verified signal, not from rewards.
OUTCOME_ESTIMATORS: tuple[str, ...] = ("grpo", "dr_grpo", "rloo", "mt_grpo")


def get_estimator(name: str) -> Estimator:
    """The estimator registered under ``name`` (see ``ESTIMATORS``); ``KeyError`` lists the known names."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}") from None
