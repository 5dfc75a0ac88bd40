"""RND: random network distillation as a step wrapper, ``RNDBonus``, reading a frozen ``RNDTable`` snapshot.

A fixed random target network f and a predictor f^ both read phi(o), the hashed character n-grams of an
observation's text (``text_features.HashedNgrams``). The bonus of the state a step reaches is the predictor's error

    b_t = coef * ||f^(phi(o_{t+1})) - f(phi(o_{t+1}))||^2 / sigma,

which is large for observations unlike those the predictor was fitted on. The trainer calls ``table.update(texts)``
once per iteration, after every rollout of the batch (``observations_of(trajectories)`` gives the texts); the
update refits f^ on them and then freezes. Rollouts read the ``snapshot()`` taken at ``reset``, so siblings get
the same bonus whatever order they ran in, as with ``CountTable``.

>>> table = RNDTable(seed=0)
>>> before = table.snapshot().error("You are in the kitchen.")
>>> table.update(["You are in the kitchen."] * 4)
>>> after = table.snapshot().error("You are in the kitchen.")
>>> round(after / before, 6), table.snapshot().error("A dragon appears!") > 10 * after  # (1 / (4 + 1))^2
(0.04, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.table_bonus import TableBonus
from agentgym.rewards.text_features import HashedNgrams, RunningMoments, observation_text, read_only


def observations_of(trajectories: Iterable[Trajectory], key: str | None = None) -> list[str]:
    """The text each turn of each trajectory reached: what ``RNDBonus(key=key)`` scored, for ``RNDTable.update``.

    ``key=None`` reads the turn's observation (``observation_text``), a string reads ``turn.info[key]``."""
    return [
        observation_text(t.observation) if key is None else str(t.info[key]) for tr in trajectories for t in tr.turns
    ]


@dataclass(frozen=True)
class RNDSnapshot:
    """A frozen ``RNDTable``: target weights, predictor weights and the normaliser sigma, all read-only.

    Immutable, so copies (env snapshots, branches) share it rather than copy its arrays."""

    features: HashedNgrams
    target_in: np.ndarray
    target_out: np.ndarray
    predictor: np.ndarray
    sigma: float = 1.0
    updates: int = 0

    def target(self, x: np.ndarray) -> np.ndarray:
        """f(x) = tanh(x W1) W2: the fixed random network, for features ``x`` of shape ``(..., dim)``."""
        return np.tanh(x @ self.target_in) @ self.target_out

    def errors(self, texts: Sequence[str]) -> np.ndarray:
        """||f^(phi(o)) - f(phi(o))||^2 for each text (the raw bonus, before dividing by sigma)."""
        x = self.features.batch(texts)
        diff = x @ self.predictor - self.target(x)
        return (diff * diff).sum(axis=1)

    def error(self, text: str) -> float:
        return float(self.errors([text])[0])

    def bonus(self, text: str) -> float:
        """The error divided by sigma (the spread of the errors the rollouts saw; 1.0 before any update)."""
        return self.error(text) / self.sigma

    def __copy__(self) -> RNDSnapshot:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> RNDSnapshot:
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # unpickle as a read-only view again
        return _frozen, (self.features, np.asarray(self.target_in), np.asarray(self.target_out),
                         np.asarray(self.predictor), self.sigma, self.updates)  # fmt: skip


def _frozen(features: HashedNgrams, w1: np.ndarray, w2: np.ndarray, p: np.ndarray, sigma: float, n: int) -> RNDSnapshot:
    return RNDSnapshot(features, read_only(w1), read_only(w2), read_only(p), float(sigma), int(n))


@dataclass
class RNDTable:
    """The RND networks, refitted once per training iteration: ``update(observation texts)``, then ``snapshot()``.

    The target f(x) = tanh(x W1) W2 has Gaussian weights drawn from ``seed`` (W1 ~ N(0, 1), W2 ~ N(0, 1/(hidden *
    out_dim)), so E||f||^2 is about 0.4 on unit-length features); it never changes. The predictor is linear,
    f^(x) = x P, starting at P = 0, and ``fit`` chooses how ``update`` refits it:

    * ``"ridge"`` (default): P = (A + ridge*I)^-1 B with A = sum x x^T and B = sum x f(x)^T over every observation
      seen so far (old sums multiplied by ``decay`` at each update): the exact least-squares predictor, so a
      repeated observation's error falls by (ridge / (n + ridge))^2 after n copies of it.
    * ``"gd"``: ``steps`` full-batch gradient steps of size ``lr`` on the batch's mean squared error, from the
      current P (the paper's continual training, without its minibatches).

    sigma (the bonus's divisor, unstated in the spec) is the running population std of the raw errors the rollouts
    saw: each update first measures the batch's errors under the old predictor (the snapshot they read), merges
    them into running moments, then refits; ``normalize=False`` keeps sigma = 1. sigma is 1 until the first update
    (or ``calibrate``), so the first batch's bonuses are raw errors. The texts are sorted before fitting, so an
    update does not depend on the batch's order.
    """

    #: What ``update`` reads, for the trainer: every step's observation text (``observations_of``).
    items: ClassVar[str] = "observations"

    seed: int = 0
    dim: int = 256
    ngrams: tuple[int, ...] = (2, 3)
    hidden: int = 64
    out_dim: int = 16
    fit: Literal["ridge", "gd"] = "ridge"
    ridge: float = 1.0
    steps: int = 50
    lr: float = 0.5
    decay: float = 1.0
    normalize: bool = True
    updates: int = 0
    moments: RunningMoments = field(default_factory=RunningMoments)
    _features: HashedNgrams = field(init=False, repr=False)
    _w1: np.ndarray = field(init=False, repr=False)
    _w2: np.ndarray = field(init=False, repr=False)
    _p: np.ndarray = field(init=False, repr=False)
    _gram: np.ndarray = field(init=False, repr=False)
    _cross: np.ndarray = field(init=False, repr=False)
    _snapshot: RNDSnapshot | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.fit not in ("ridge", "gd"):
            raise ValueError(f"fit must be 'ridge' or 'gd', got {self.fit!r}")
        if self.ridge <= 0.0 or not 0.0 < self.decay <= 1.0 or self.hidden < 1 or self.out_dim < 1:
            raise ValueError("need ridge > 0, decay in (0, 1], hidden >= 1 and out_dim >= 1")
        self.ngrams = tuple(self.ngrams)
        self._features = HashedNgrams(self.dim, self.ngrams)
        rng = np.random.default_rng(self.seed)
        self._w1 = rng.standard_normal((self.dim, self.hidden))
        self._w2 = rng.standard_normal((self.hidden, self.out_dim)) / np.sqrt(self.hidden * self.out_dim)
        self._p = np.zeros((self.dim, self.out_dim))
        self._gram = np.zeros((self.dim, self.dim))
        self._cross = np.zeros((self.dim, self.out_dim))

    def snapshot(self) -> RNDSnapshot:
        """The networks as of the last update (one shared read-only copy per update, cheap to call per reset)."""
        if self._snapshot is None:
            sigma = self.moments.std if self.normalize else 1.0
            self._snapshot = _frozen(self._features, self._w1, self._w2, self._p, sigma, self.updates)
        return self._snapshot

    def calibrate(self, items: Sequence[str]) -> None:
        """Merge the errors of ``items`` into sigma's running moments without refitting (the paper initialises its
        normalisers from a random agent's first steps; without it sigma is 1 until the first update)."""
        if items:
            self.moments.merge(self.snapshot().errors(list(items)))
            self._snapshot = None

    def update(self, items: Sequence[str]) -> None:
        """Measure the batch's errors under the current predictor (for sigma), then refit the predictor on them."""
        texts = sorted(items)  # order-independent: the sums and the gradient steps see one fixed order
        if texts:
            x = self._features.batch(texts)
            y = self.snapshot().target(x)
            diff = x @ self._p - y
            self.moments.merge((diff * diff).sum(axis=1))  # the errors the batch's rollouts were given
            if self.fit == "ridge":
                self._gram = self.decay * self._gram + x.T @ x
                self._cross = self.decay * self._cross + x.T @ y
                self._p = np.linalg.solve(self._gram + self.ridge * np.eye(self.dim), self._cross)
            else:
                for _ in range(self.steps):
                    self._p = self._p - self.lr * (x.T @ (x @ self._p - y)) / len(texts)
        self.updates += 1
        self._snapshot = None


class RNDBonus(TableBonus):
    """RND bonus on the state each step reaches: ``coef * ||f^(phi(o')) - f(phi(o'))||^2 / sigma`` (component ``name``).

    ``table`` is the ``RNDTable`` every env of a run shares (the trainer updates it once per iteration); a mapping
    is the keyword arguments of a new table (from a JSON config), ``None`` a default one. The wrapper only reads the
    ``snapshot()`` taken at ``reset``. ``key=None`` scores the observation's text; a string scores ``info[key]``
    (e.g. ``"anchor"``, a canonical state). The bonus is non-episodic and the trainer adds it to the reward (the
    paper's separate intrinsic return and its weight, unstated here, are ``coef`` on one combined return).

    >>> import gymnasium as gym
    >>> env = RNDBonus(gym.make("agentgym/Chain-v0"), coef=0.5)
    >>> _ = env.reset(seed=0)
    >>> _, r, *_, info = env.step("<answer> black </answer>")
    >>> info["reward_components"]["rnd"] > 0, r == sum(info["reward_components"].values())
    (True, True)
    """

    table_type: ClassVar[type[RNDTable]] = RNDTable
    component: ClassVar[str] = "rnd"

    def bonus(self, action: Any, obs: Any, info: Mapping[str, Any]) -> float:
        return self._snapshot.bonus(self.text(obs, info))


METHODS = (
    Method(
        "rnd", "RND", "bonus", "random network distillation novelty bonus, predictor refit per iteration",
        paper=cite("RND"), code="agentgym.rewards.rnd:RNDBonus",
        choices=(
            "features: hashed character 2- and 3-grams of the observation text, 256 buckets, unit length (no "
            "encoder); table knobs dim, ngrams; key reads info[key] instead",
            "target: tanh(x W1) W2, Gaussian, fixed from table knob seed; predictor: linear in the features",
            "refit: closed-form ridge on every observation so far (table knobs fit='ridge'|'gd', ridge, decay; "
            "gd: steps, lr)",
            "running std: population std of the raw errors the rollouts saw, merged over updates before each refit "
            "(table knob normalize)",
            "intrinsic return: non-episodic, added to the step reward with weight coef (no separate gamma_int or "
            "value head)",
        ),
        train={"reward_wrappers": [{"name": "rnd"}]}, knobs_into="wrapper",
    ),
)  # fmt: skip
