"""The shared core of the advantage estimators: input conversion, the z-score, reward-to-go, and the registry entry.

Conventions (every estimator module follows them)
- A *group* is the G rollouts of one task (same prompt and seed), named by ``group_ids`` (any hashables).
- Per-turn inputs are ragged: one 1-D array per trajectory with one entry per agent turn, in turn order.
  Per-turn outputs come back the same way (``list[np.ndarray]``); per-trajectory ones as an ``(N,)`` array.
- ``z_S(x) = (x - mean_S) / (std_S + eps)`` with the *population* std (ddof=0). A set of one value, or of
  values that all tie, gives exactly 0. Sums use ``math.fsum``, so every result is bitwise independent of
  the batch order: permuting the batch permutes the output exactly. Output is deterministic and NaN-free.
- Inputs must be finite: a NaN reward (a scorer's failed turn) raises ``ValueError``, it is never read as 0.

An estimator module lists what it registers in a module-level ``REGISTERED`` tuple of :class:`EstimatorSpec`;
``agentgym.rewards.advantages.registry`` collects them into ``ESTIMATORS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

ArrayLike = Any  # numpy array, sequence of numbers, or a torch tensor
Span = tuple[int, int]
DEFAULT_EPS = 1e-6

#: ``fn(batch: TurnBatch, **params) -> list[np.ndarray]``: one array of per-turn advantages per trajectory.
Estimator = Callable[..., list[np.ndarray]]


@dataclass(frozen=True)
class EstimatorSpec:
    """One registered estimator: its registry ``name``, its ``fn`` (an :data:`Estimator`), and ``outcome_only``:
    whether it reads the rewards only through each trajectory's outcome (``TurnBatch.outcome_array``), which puts
    it in ``OUTCOME_ESTIMATORS``."""

    name: str
    fn: Estimator
    outcome_only: bool = False


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


def _normalize(
    rows: list[np.ndarray], keys: list[Hashable], by: _By, eps: float, scale: bool = True
) -> list[np.ndarray]:
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
