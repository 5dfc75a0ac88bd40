"""Paired comparisons over a handful of seeds: the exact sign-flip test and Holm's correction.

With n paired seeds, the differences ``d_i = method_i - baseline_i`` are compared with the null hypothesis that each
``d_i`` is symmetric about 0 (the two arms are exchangeable within a seed): under it every one of the 2^n sign
patterns is equally likely, and the two-sided p-value is the share of patterns whose mean is at least as far from 0
as the observed one. It assumes nothing about the shape of the differences, so it holds for 3 seeds as for 30; its
smallest attainable value is ``2 / 2^n`` (0.25 with 3 seeds, 0.0078 with 8), which a report should state.

>>> test = sign_flip_test([0.1, 0.2, 0.3])  # all three positive: only the observed pattern and its mirror are as far
>>> round(test.p, 4), test.exact, test.n
(0.25, True, 3)
>>> sign_flip_test([0.05] * 8).p == 2 / 256
True
>>> [round(p, 3) for p in holm([0.01, 0.04, 0.03, 0.005])]
[0.03, 0.06, 0.06, 0.02]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["SignFlipTest", "holm", "sign_flip_test"]

#: Up to this many pairs every sign pattern is enumerated (2^20 patterns); beyond it a seeded Monte-Carlo draw.
MAX_EXACT = 20


@dataclass(frozen=True)
class SignFlipTest:
    """A paired sign-flip test of the mean difference: ``mean`` and ``sd`` (sample, ddof 1; NaN for one pair) of the
    differences, ``n`` pairs, the two-sided ``p``, whether it enumerated every pattern (``exact``) or drew
    ``samples`` random ones (then ``p = (1 + hits) / (1 + samples)``), and the smallest ``p`` attainable exactly."""

    mean: float
    sd: float
    n: int
    p: float
    exact: bool
    samples: int
    p_min: float


def sign_flip_test(
    diffs: Sequence[float], *, max_exact: int = MAX_EXACT, samples: int = 100_000, seed: int = 0
) -> SignFlipTest:
    """Two-sided paired sign-flip (permutation) test that the mean of ``diffs`` is 0.

    Every one of the 2^n sign patterns when ``n <= max_exact``, else ``samples`` patterns drawn with ``seed``.
    Zero differences are kept (flipping them changes nothing). Raises ``ValueError`` on no differences or a
    non-finite one."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"sign_flip_test needs a non-empty 1-d sequence of differences, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError(f"sign_flip_test: non-finite differences {d.tolist()}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    n = int(d.size)
    observed = abs(float(d.sum()))
    tol = 1e-9 * max(1.0, float(np.abs(d).sum()))  # sums of the same numbers in another order may differ in ulps
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    p_min = 2.0 / 2.0**n if n <= 1023 else 0.0
    if n <= max_exact:
        hits = 0
        block = 1 << min(n, 16)
        low = ((np.arange(block)[:, None] >> np.arange(min(n, 16))) & 1) * -2 + 1  # rows: the low bits' signs
        for high in range(1 << max(n - 16, 0)):
            signs = low
            if n > 16:
                bits = ((high >> np.arange(n - 16)) & 1) * -2 + 1
                signs = np.hstack([low, np.broadcast_to(bits, (block, n - 16))])
            hits += int(np.count_nonzero(np.abs(signs @ d) >= observed - tol))
        return SignFlipTest(float(d.mean()), sd, n, hits / 2.0**n, True, 0, p_min)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, samples, 10_000):
        size = min(10_000, samples - start)
        signs = rng.integers(0, 2, size=(size, n)) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ d) >= observed - tol))
    return SignFlipTest(float(d.mean()), sd, n, (1 + hits) / (1 + samples), False, samples, p_min)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values of one family of tests, in the order given: the i-th smallest p is
    multiplied by ``m - i + 1`` (i from 1), then made non-decreasing along that order and capped at 1. Rejecting
    where the adjusted p is below alpha controls the family-wise error rate at alpha."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"holm needs a 1-d sequence of p-values, got shape {p.shape}")
    if not np.all((p >= 0) & (p <= 1)):  # NaN fails too
        raise ValueError(f"holm: p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = scaled
    return adjusted.tolist()
