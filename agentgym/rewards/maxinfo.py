"""MaxInfoRL: an ensemble-disagreement bonus, ``DisagreementBonus``, reading a frozen ``DisagreementTable`` snapshot.

K linear predictors g_k map (phi(o_t), phi(a_t)), the hashed n-gram features of the current observation and of
the action, to phi(o_{t+1}), the next observation's features. Where they disagree, the dynamics are uncertain, so
a transition there is informative; the bonus of a step is the disagreement of their predictions for it,

    b_t = coef * sum_d Var_k[g_k(phi(o_t), phi(a_t))]_d / sigma

(the variance across members, ddof = 0, summed over the output features). Members differ by a random prior and a
bootstrap resample: member k solves ridge regression shrunk towards its own random weights W0_k,
W_k = argmin sum_i w_ik ||x_i W - y_i||^2 + ridge * ||W - W0_k||^2 with Poisson(1) bootstrap weights w_ik. So on
transitions like the data the members agree (the data outweighs the priors), and off the data each falls back to
its own prior and they disagree. The trainer calls ``table.update(transitions_of(trajectories))`` once per
iteration, after every rollout; rollouts read the ``snapshot()`` taken at ``reset``.

>>> table = DisagreementTable(seed=0)
>>> seen = ("You see a door.", "open door", "The door is open.")
>>> table.update([seen] * 8)
>>> snap = table.snapshot()
>>> snap.disagreement(seen[0], seen[1]) < snap.disagreement("A dragon appears!", "fight") / 10
True
>>> disagreement(np.array([[1.0, 0.0], [3.0, 2.0]]))  # each feature: variance ((1-2)^2 + (3-2)^2) / 2 = 1
2.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.table_bonus import TableBonus
from agentgym.rewards.text_features import HashedNgrams, RunningMoments, observation_text, read_only

Transition = tuple[str, str, str]


def disagreement(predictions: np.ndarray) -> float:
    """sum_d Var_k[predictions[k, d]]: the variance across members (axis 0, ddof = 0) summed over the features."""
    return float(_spread(np.asarray(predictions, dtype=float)))


def _spread(p: np.ndarray) -> np.ndarray:
    """The variance over axis 0 summed over the last axis, taken about member 0 first (variance is shift-invariant),
    so identical members give exactly 0 whatever the rounding of their mean."""
    p = p - p[:1]
    return ((p - p.mean(axis=0)) ** 2).mean(axis=0).sum(axis=-1)


def transitions_of(trajectories: Iterable[Trajectory], key: str | None = None) -> list[Transition]:
    """(observation, action, next observation) texts of every turn: what ``DisagreementBonus(key=key)`` scored.

    The first observation is the reset's; ``key=None`` reads observations (``observation_text``), a string reads
    ``info[key]`` (``reset_info[key]`` for the first)."""
    out: list[Transition] = []
    for traj in trajectories:
        prev = observation_text(traj.initial_observation) if key is None else str(traj.reset_info[key])
        for turn in traj.turns:
            nxt = observation_text(turn.observation) if key is None else str(turn.info[key])
            out.append((prev, observation_text(turn.action), nxt))
            prev = nxt
    return out


@dataclass(frozen=True)
class DisagreementSnapshot:
    """A frozen ``DisagreementTable``: the members' weights ``(K, 2*dim, dim)`` (read-only) and the normaliser sigma.

    Immutable, so copies (env snapshots, branches) share it rather than copy its arrays."""

    features: HashedNgrams
    weights: np.ndarray
    sigma: float = 1.0
    updates: int = 0

    def inputs(self, observations: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        """x = [phi(o), phi(a)], one row per pair."""
        return np.hstack([self.features.batch(observations), self.features.batch(actions)])

    def predictions(self, observation: str, action: str) -> np.ndarray:
        """``(K, dim)``: each member's prediction of the next observation's features."""
        return self.inputs([observation], [action])[0] @ self.weights

    def disagreement(self, observation: str, action: str) -> float:
        """The raw bonus (before dividing by sigma)."""
        return disagreement(self.predictions(observation, action))

    def bonus(self, observation: str, action: str) -> float:
        return self.disagreement(observation, action) / self.sigma

    def __copy__(self) -> DisagreementSnapshot:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> DisagreementSnapshot:
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # unpickle as a read-only view again
        return _frozen, (self.features, np.asarray(self.weights), self.sigma, self.updates)


def _frozen(features: HashedNgrams, weights: np.ndarray, sigma: float, updates: int) -> DisagreementSnapshot:
    return DisagreementSnapshot(features, read_only(weights), float(sigma), int(updates))


@dataclass
class DisagreementTable:
    """An ensemble of ``members`` ridge predictors of phi(o') from [phi(o), phi(a)], refitted once per iteration.

    Member k has a random prior W0_k ~ N(0, prior_scale^2 / (2*dim)) drawn from ``seed``, so before any data the
    members disagree everywhere (about prior_scale^2 summed over features for unit-length o and a). Each update
    adds the batch to every member's sufficient statistics, weighted by that member's Poisson(1) bootstrap draw
    (``bootstrap=False``: weight 1), old statistics multiplied by ``decay``, and re-solves
    W_k = (A_k + ridge*I)^-1 (B_k + ridge*W0_k). The transitions are sorted before drawing the weights, so an
    update does not depend on the batch's order. The raw disagreement is on a known scale (about prior_scale^2 off
    the data, towards 0 on it), so by default it is not normalised; ``normalize=True`` divides it by the running
    population std of the disagreements the rollouts saw, measured before each refit, as ``RNDTable`` does (the
    priors' disagreements are nearly equal, so that std is small and the bonus grows many times after the first
    update).

    ``members=1``, or ``prior_scale=0`` with ``bootstrap=False``, gives identical members and a zero bonus.
    """

    #: What ``update`` reads, for the trainer: (observation, action, next observation) triples (``transitions_of``).
    items: ClassVar[str] = "transitions"

    seed: int = 0
    members: int = 5
    dim: int = 128
    ngrams: tuple[int, ...] = (2, 3)
    ridge: float = 1.0
    prior_scale: float = 1.0
    bootstrap: bool = True
    decay: float = 1.0
    normalize: bool = False
    updates: int = 0
    moments: RunningMoments = field(default_factory=RunningMoments)
    _features: HashedNgrams = field(init=False, repr=False)
    _prior: np.ndarray = field(init=False, repr=False)
    _w: np.ndarray = field(init=False, repr=False)
    _gram: np.ndarray = field(init=False, repr=False)
    _cross: np.ndarray = field(init=False, repr=False)
    _snapshot: DisagreementSnapshot | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.members < 1 or self.ridge <= 0.0 or self.prior_scale < 0.0 or not 0.0 < self.decay <= 1.0:
            raise ValueError("need members >= 1, ridge > 0, prior_scale >= 0 and decay in (0, 1]")
        self.ngrams = tuple(self.ngrams)
        self._features = HashedNgrams(self.dim, self.ngrams)
        rng = np.random.default_rng(self.seed)
        d_in = 2 * self.dim
        self._prior = rng.standard_normal((self.members, d_in, self.dim)) * self.prior_scale / np.sqrt(d_in)
        self._w = self._prior.copy()
        self._gram = np.zeros((self.members, d_in, d_in))
        self._cross = np.zeros((self.members, d_in, self.dim))

    def snapshot(self) -> DisagreementSnapshot:
        """The ensemble as of the last update (one shared read-only copy per update)."""
        if self._snapshot is None:
            sigma = self.moments.std if self.normalize else 1.0
            self._snapshot = _frozen(self._features, self._w, sigma, self.updates)
        return self._snapshot

    def update(self, items: Sequence[Transition]) -> None:
        """Measure the batch's disagreements under the current ensemble (for sigma), then refit every member."""
        batch = sorted((str(o), str(a), str(n)) for o, a, n in items)
        if batch:
            n = len(batch)
            texts = [o for o, _, _ in batch] + [a for _, a, _ in batch] + [nxt for _, _, nxt in batch]
            feats = self._features.batch(texts)  # one pass: o' of a step is usually o of the next
            x, y = np.hstack([feats[:n], feats[n : 2 * n]]), feats[2 * n :]
            preds = np.einsum("ni,kio->kno", x, self._w)
            self.moments.merge(_spread(preds))
            rng = np.random.default_rng([self.seed, self.updates])  # one stream per update: order-free, replayable
            eye = self.ridge * np.eye(x.shape[1])
            for k in range(self.members):
                w = rng.poisson(1.0, len(batch)).astype(float) if self.bootstrap else np.ones(len(batch))
                self._gram[k] = self.decay * self._gram[k] + (x * w[:, None]).T @ x
                self._cross[k] = self.decay * self._cross[k] + (x * w[:, None]).T @ y
                self._w[k] = np.linalg.solve(self._gram[k] + eye, self._cross[k] + self.ridge * self._prior[k])
        self.updates += 1
        self._snapshot = None


class DisagreementBonus(TableBonus):
    """MaxInfoRL bonus on each step's transition: ``coef * disagreement(o_t, a_t) / sigma`` (component ``name``).

    ``table`` is the ``DisagreementTable`` every env of a run shares (the trainer updates it once per iteration);
    a mapping is the keyword arguments of a new table, ``None`` a default one. The wrapper only reads the
    ``snapshot()`` taken at ``reset``. ``key=None`` reads observations' texts; a string reads ``info[key]`` (the
    reset info's for o_0). The action's text is ``observation_text(action)``.

    >>> import gymnasium as gym
    >>> env = DisagreementBonus(gym.make("agentgym/Chain-v0"))
    >>> _ = env.reset(seed=0)
    >>> _, r, *_, info = env.step("<answer> black </answer>")
    >>> info["reward_components"]["disagreement"] > 0, r == sum(info["reward_components"].values())
    (True, True)
    """

    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_snapshot", "_last")
    table_type: ClassVar[type[DisagreementTable]] = DisagreementTable
    component: ClassVar[str] = "disagreement"
    _last: str = ""

    def started(self, obs: Any, info: Mapping[str, Any]) -> None:
        self._last = self.text(obs, info)

    def bonus(self, action: Any, obs: Any, info: Mapping[str, Any]) -> float:
        value = self._snapshot.bonus(self._last, observation_text(action))
        self._last = self.text(obs, info)
        return value


METHODS = (
    Method(
        "maxinforl", "MaxInfoRL", "bonus", "ensemble-disagreement bonus (information about the dynamics)",
        paper=cite("MaxInfoRL"), code="agentgym.rewards.maxinfo:DisagreementBonus",
        choices=(
            "predictors: K linear ridge maps from [phi(o), phi(a)] to phi(o'), hashed character 2- and 3-grams "
            "(table knobs members, dim, ngrams, ridge)",
            "member diversity: a random prior per member (ridge shrinks towards it) plus Poisson(1) bootstrap "
            "weights (table knobs prior_scale, bootstrap)",
            "disagreement: variance across members, ddof 0, summed over output features; predicts features only, "
            "not the reward",
            "no normaliser by default: the raw disagreement is about prior_scale^2 off the data and falls towards 0 "
            "on it (table knob normalize=True divides by the running std of the disagreements the rollouts saw)",
            "weight: a fixed coef added to the step reward; the paper's auto-tuned weight and Boltzmann exploration "
            "(ent_coef) are not built",
        ),
        train={"reward_wrappers": [{"name": "maxinforl"}]}, knobs_into="wrapper",
    ),
)  # fmt: skip
