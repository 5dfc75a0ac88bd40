"""Text features for the learned exploration bonuses (``rnd``, ``maxinfo``): an observation's text, hashed
character n-grams of it, and running moments that normalise a bonus.

The features need no model: ``HashedNgrams`` counts the character n-grams of a text into ``dim`` buckets chosen by
CRC-32 (stable across processes, unlike Python's salted ``hash``), with a sign bit from the same hash so collisions
cancel on average, then scales the vector to unit length (an empty text is the zero vector).

>>> phi = HashedNgrams(dim=64)
>>> v = phi("the door is open")
>>> v.shape, round(float(v @ v), 6), float(phi("") @ phi(""))
((64,), 1.0, 0.0)
>>> observation_text([{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}])
'a\\nb'
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def observation_text(obs: Any) -> str:
    """The text of an observation: a string as is, a chat (a list of messages) as its contents joined by newlines,
    anything else (a number, a dict) by ``str``."""
    if isinstance(obs, str):
        return obs
    if isinstance(obs, (list, tuple)) and all(isinstance(m, Mapping) for m in obs):
        return "\n".join(str(m.get("content", "")) for m in obs)
    return str(obs)


@dataclass(frozen=True)
class HashedNgrams:
    """phi(text): signed, hashed counts of the character n-grams of ``text`` (each size in ``ngrams``), unit length."""

    dim: int = 256
    ngrams: tuple[int, ...] = (2, 3)

    def __post_init__(self) -> None:
        if self.dim < 1 or not self.ngrams or min(self.ngrams) < 1:
            raise ValueError(f"dim and every n-gram size must be >= 1, got dim={self.dim}, ngrams={self.ngrams}")

    def __call__(self, text: str) -> np.ndarray:
        grams: Counter[str] = Counter()
        for n in self.ngrams:
            grams.update(text[i : i + n] for i in range(len(text) - n + 1))
        v = np.zeros(self.dim)
        for gram, count in grams.items():
            h = zlib.crc32(f"{len(gram)}:{gram}".encode())
            v[h % self.dim] += count if h >> 31 else -count  # the top bit is the sign
        norm = math.sqrt(float(v @ v))
        return v / norm if norm else v

    def batch(self, texts: Iterable[str]) -> np.ndarray:
        """``(N, dim)``: one row per text (each distinct text hashed once)."""
        seen: dict[str, np.ndarray] = {}
        rows = [seen[t] if t in seen else seen.setdefault(t, self(t)) for t in texts]
        return np.stack(rows) if rows else np.zeros((0, self.dim))


@dataclass
class RunningMoments:
    """Count, mean and sum of squared deviations of every value merged so far (Chan et al.'s pairwise update)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def merge(self, values: Sequence[float] | np.ndarray) -> None:
        x = np.asarray(values, dtype=float)
        if x.size == 0:
            return
        n, mean = x.size, float(x.mean())
        m2 = float(((x - mean) ** 2).sum())
        total = self.count + n
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    @property
    def std(self) -> float:
        """The population standard deviation; 1.0 while it is undefined or negligible (below 1e-8 * max(1, |mean|):
        equal values up to rounding), so dividing by it changes nothing."""
        std = math.sqrt(max(self.m2, 0.0) / self.count) if self.count else 0.0
        return std if self.count >= 2 and std > 1e-8 * max(1.0, abs(self.mean)) else 1.0


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only float copy of ``array`` (what frozen table snapshots hold)."""
    out = np.array(array, dtype=float)
    out.setflags(write=False)
    return out
