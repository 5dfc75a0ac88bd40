"""AIRS: each iteration, choose which intrinsic bonus counts, by the extrinsic return it has been bringing.

The arms are reward components of the run's ``reward_wrappers`` (``TrainConfig.airs_arms``: e.g. ``novelty``,
``rnd``). At iteration k the trainer measures the batch's mean extrinsic return E_k (each episode's return without
any arm's component), credits the gain ``E_k - E_{k-1}`` to the arm that shaped the update between the two batches
(the arm of iteration k - 1), then picks the arm of iteration k by UCB1 and zeroes the other arms' components in
the batch's records (``credit.scale_components``) before the advantages.

Unstated in the paper's abstract ("based on the estimated task return in real time"), chosen here, with knobs:

- the score of an arm: the mean of its last ``window`` gains (``airs_window``, 10: the policy drifts, so old gains
  go stale) plus ``c * sqrt(2 ln N / n_a)`` (``airs_c``, 0.1: gains are differences of mean returns, far below
  UCB1's [0, 1] range), N the gains recorded so far and n_a the arm's;
- every arm is tried once first, in order; ties go to the first arm.

>>> ctl = AIRSController(2)
>>> [ctl.step(e) for e in (0.0, 0.0, 0.5, 0.5)]   # A, B (each tried once), then B paid 0.5: B, B
[0, 1, 1, 1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["AIRSController"]


@dataclass
class AIRSController:
    """UCB1 over ``arms`` arms with windowed mean gains (module docstring). :meth:`step` is the whole protocol."""

    arms: int
    c: float = 0.1
    window: int = 10
    gains: list[list[float]] = field(default_factory=list)  # per arm, every gain credited to it
    arm: int | None = None  # the arm of the last step
    last_return: float | None = None  # the extrinsic mean return at the last step

    def __post_init__(self) -> None:
        if self.arms < 1 or self.c < 0 or self.window < 1:
            raise ValueError(f"AIRS needs arms >= 1, c >= 0 and window >= 1, got {self.arms}, {self.c}, {self.window}")
        if not self.gains:
            self.gains = [[] for _ in range(self.arms)]

    @classmethod
    def of(cls, arms: int, airs_c: float = 0.1, airs_window: int = 10) -> AIRSController:
        """A fresh controller from ``TrainConfig``'s knobs (``airs_c``, ``airs_window``)."""
        return cls(arms, airs_c, airs_window)

    def score(self, a: int) -> float:
        """Arm ``a``'s UCB1 score (infinite while untried)."""
        seen = self.gains[a]
        if not seen:
            return math.inf
        total = sum(len(g) for g in self.gains)
        recent = seen[-self.window :]
        return math.fsum(recent) / len(recent) + self.c * math.sqrt(2.0 * math.log(total) / len(seen))

    def step(self, extrinsic_return: float) -> int:
        """Credit ``extrinsic_return - last`` to the previous arm, then choose (and return) this iteration's arm."""
        if not math.isfinite(extrinsic_return):
            raise ValueError(f"AIRS: the extrinsic return must be finite, got {extrinsic_return}")
        if self.arm is not None and self.last_return is not None:
            self.gains[self.arm].append(extrinsic_return - self.last_return)
        scores = [self.score(a) for a in range(self.arms)]
        self.arm = scores.index(max(scores))
        self.last_return = extrinsic_return
        return self.arm
