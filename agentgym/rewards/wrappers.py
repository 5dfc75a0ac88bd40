"""Per-step reward shaping as Gymnasium wrappers: one concern each, stackable in any order.

Every wrapper overrides ``step`` (and ``reset`` where it keeps episode state), adds its term to the reward
and records the same term under its ``name`` in ``info["reward_components"]``. The components dict (and
``info``) are copied, never mutated, so the inner env's record is untouched and the components of every
step always sum to the reward, whatever the stacking order. A term is recorded on every step (0.0 when it
does not apply), so each component is present on every turn. If the name is already there (e.g. the env's
own ``format`` penalty), the term is added to it, which keeps the sum exact. Each wrapper names its episode
state in ``snapshot_attrs``, so ``agentgym.contract.branching`` can snapshot and branch an env through it.

* ``PotentialShaping``: F = gamma*Phi(s') - Phi(s) with Phi(terminal) = 0 (Ng et al. 1999): policy-invariant.
* ``ProgressReward``: the increase of the env's verified progress (``info["progress"]``): a verifiable
  process reward; it telescopes to the final progress, so it is *not* policy-invariant (that is its point).
* ``FormatPenalty``: -penalty when ``info["action_valid"]`` is False.
* ``StepCost``: -cost on every step.
* ``NoveltyBonus``: beta/sqrt(n(anchor) + 1) from a frozen ``CountTable`` snapshot (+ episodic/sqrt(n_ep)).

>>> import gymnasium as gym, agentgym
>>> env = StepCost(FormatPenalty(gym.make("agentgym/SearchQA-v0", dataset="tiny"), penalty=0.1), cost=0.01)
>>> _ = env.reset(seed=0)
>>> _, r, *_, info = env.step("no tags at all")
>>> r, info["reward_components"]
(-0.11, {'format': -0.1, 'step_cost': -0.01})
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal, SupportsFloat

import gymnasium as gym

from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

Potential = Callable[[Any, dict[str, Any]], float]
StepReturn = tuple[Any, float, bool, bool, dict[str, Any]]


def add_component(reward: SupportsFloat, info: dict[str, Any], name: str, term: float) -> tuple[float, dict[str, Any]]:
    """Return ``(reward + term, info')`` where ``info'`` is a copy whose ``reward_components[name]`` grew by ``term``.

    An ``info`` without ``reward_components`` (a non-agentgym env) starts from ``{"env": reward}`` so the
    components still sum to the reward.
    """
    reward = float(reward)
    components = dict(info.get("reward_components", {"env": reward} if reward else {}))
    components[name] = float(components.get(name, 0.0) + term)
    return reward + term, {**info, "reward_components": components}


def _finite(value: Any, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return value


@dataclass(frozen=True)
class InfoPotential:
    """The potential ``info[key]`` (picklable, unlike a lambda, so wrapped envs still go to worker processes)."""

    key: str

    def __call__(self, obs: Any, info: dict[str, Any]) -> float:
        return info[self.key]


class PotentialShaping(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Potential-based shaping F_t = gamma*Phi(s_{t+1}) - Phi(s_t) (Ng, Harada and Russell 1999).

    ``potential(observation, info)`` must be cheap and depend on the state only; a string ``key`` is the potential
    ``info[key]`` (an env's verified progress level, say). ``gamma`` **must equal the
    discount of the trainer's returns/advantages**, or invariance is lost. Terminal convention: Phi = 0 on the
    terminal state, so sum_t gamma^t F_t = -Phi(s_0) (without the fix it would be gamma^T Phi(s_T) - Phi(s_0),
    which rewards *ending* in a high-potential state and breaks invariance across episode lengths).

    ``truncation`` chooses Phi at a truncated (time-limit) last step: ``"terminal"`` (default) sets it to 0 as
    well, which is right for trainers that do not bootstrap at truncation (GRPO, RLOO, Monte-Carlo returns, the
    usual LLM setting): every episode's shaped return is then R - Phi(s_0), and Phi(s_0) is shared by a GRPO
    group. ``"bootstrap"`` keeps Phi(s_T), which is right for a critic that bootstraps V(s_T) at truncation (the
    critic then learns V - Phi and invariance holds through the bootstrap).

    >>> env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    >>> env = PotentialShaping(env, lambda obs, info: info["progress"], gamma=1.0)
    >>> _ = env.reset(seed=0)
    >>> _, r, *_, info = env.step("<search> anything </search>")
    >>> info["reward_components"]["shaping"] == r
    True
    """

    #: Episode state, for ``agentgym.contract.branching`` (snapshots and branches copy these attributes).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_phi",)

    def __init__(
        self,
        env: gym.Env,
        potential: Potential | str,
        gamma: float = 1.0,
        name: str = "shaping",
        truncation: Literal["terminal", "bootstrap"] = "terminal",
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, potential=potential, gamma=gamma, name=name, truncation=truncation
        )
        gym.Wrapper.__init__(self, env)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if truncation not in ("terminal", "bootstrap"):
            raise ValueError(f"truncation must be 'terminal' or 'bootstrap', got {truncation!r}")
        # a string names an info key whose value is the potential (a verified progress level, say)
        self.potential: Potential = InfoPotential(potential) if isinstance(potential, str) else potential
        self.gamma = float(gamma)
        self.name = name
        self.truncation = truncation
        self._phi = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._phi = _finite(self.potential(obs, info), "the potential")
        return obs, info

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        end = terminated or (truncated and self.truncation == "terminal")
        phi = 0.0 if end else _finite(self.potential(obs, info), "the potential")
        term = self.gamma * phi - self._phi
        self._phi = phi
        reward, info = add_component(reward, info, self.name, term)
        return obs, reward, terminated, truncated, info


class ProgressReward(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Verifiable process reward: ``scale * (progress_t - progress_{t-1})`` from the env's ``info[key]``.

    The env's oracle (supporting documents retrieved, planner distance, state checker) verifies progress; this
    is potential-based in form (Phi = scale*progress, gamma = 1) but *without* the terminal fix, so over an
    episode it telescopes to scale*(final progress - initial progress): it rewards reaching progress, whether
    or not the answer is right. A step whose info lacks ``key`` (e.g. a non-text action) counts as no change;
    a reset info without it raises ``KeyError`` (the env does not expose progress).

    >>> env = ProgressReward(gym.make("agentgym/SearchQA-v0", dataset="tiny"))
    >>> _, info = env.reset(seed=3)
    >>> _, r, *_ = env.step("<search>" + info["gold"]["oracle_queries"][0] + "</search>")
    >>> r > 0
    True
    """

    #: Episode state, for ``agentgym.contract.branching`` (snapshots and branches copy these attributes).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_progress",)

    def __init__(self, env: gym.Env, key: str = "progress", scale: float = 1.0, name: str = "progress"):
        gym.utils.RecordConstructorArgs.__init__(self, key=key, scale=scale, name=name)
        gym.Wrapper.__init__(self, env)
        self.key = key
        self.scale = float(scale)
        self.name = name
        self._progress = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.key not in info:
            raise KeyError(f"ProgressReward: the env's reset info has no {self.key!r} (its verified progress)")
        self._progress = _finite(info[self.key], f"info[{self.key!r}]")
        return obs, info

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        progress = _finite(info[self.key], f"info[{self.key!r}]") if self.key in info else self._progress
        term = self.scale * (progress - self._progress)
        self._progress = progress
        reward, info = add_component(reward, info, self.name, term)
        return obs, reward, terminated, truncated, info


class FormatPenalty(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """``-penalty`` on every step whose ``info["action_valid"]`` is False (malformed or illegal action).

    >>> env = FormatPenalty(gym.make("agentgym/SearchQA-v0", dataset="tiny"), penalty=0.5)
    >>> _ = env.reset(seed=0)
    >>> env.step("<search")[1]
    -0.5
    """

    #: Episode state, for ``agentgym.contract.branching`` (snapshots and branches copy these attributes).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, env: gym.Env, penalty: float = 0.1, name: str = "format"):
        gym.utils.RecordConstructorArgs.__init__(self, penalty=penalty, name=name)
        gym.Wrapper.__init__(self, env)
        self.penalty = float(penalty)
        self.name = name

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        term = 0.0 if info.get("action_valid", True) else -self.penalty
        reward, info = add_component(reward, info, self.name, term)
        return obs, reward, terminated, truncated, info


class StepCost(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """``-cost`` on every step (a per-turn price that favours short episodes).

    >>> env = StepCost(gym.make("agentgym/SearchQA-v0", dataset="tiny"), cost=0.05)
    >>> _ = env.reset(seed=0)
    >>> env.step("<search> x </search>")[1]
    -0.05
    """

    #: Episode state, for ``agentgym.contract.branching`` (snapshots and branches copy these attributes).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, env: gym.Env, cost: float = 0.01, name: str = "step_cost"):
        gym.utils.RecordConstructorArgs.__init__(self, cost=cost, name=name)
        gym.Wrapper.__init__(self, env)
        self.cost = float(cost)
        self.name = name

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        reward, info = add_component(reward, info, self.name, -self.cost)
        return obs, reward, terminated, truncated, info


@dataclass(frozen=True)
class CountSnapshot:
    """A frozen view of a ``CountTable``: what every rollout of one batch reads."""

    counts: Mapping[str, float]
    #: How many ``update`` calls the table had seen (drives ``NoveltyBonus.beta_decay``).
    updates: int = 0

    def count(self, anchor: str) -> float:
        return float(self.counts.get(anchor, 0.0))

    def __reduce__(self) -> tuple[Any, ...]:  # copy/pickle the read-only view as a fresh read-only view
        return _frozen_snapshot, (dict(self.counts), self.updates)


def _frozen_snapshot(counts: dict[str, float], updates: int) -> CountSnapshot:
    return CountSnapshot(MappingProxyType(counts), updates)


@dataclass
class CountTable:
    """Visit counts of canonical states (``info["anchor"]``) across batches, for count-based exploration.

    Rollouts read a frozen ``snapshot()``; the trainer calls ``update(anchors)`` once per batch, after all
    rollouts of the batch have finished, so sibling rollouts get the same bonus whatever order they ran in.
    ``decay`` multiplies the old counts at each update (1.0 keeps them forever; < 1 slowly forgets).

    >>> table = CountTable()
    >>> table.update(["q1:a", "q1:a", "q1:b"])
    >>> table.snapshot().count("q1:a"), table.snapshot().count("q1:z")
    (2.0, 0.0)
    """

    decay: float = 1.0
    counts: dict[str, float] = field(default_factory=dict)
    updates: int = 0
    _snapshot: CountSnapshot | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")

    def snapshot(self) -> CountSnapshot:
        """The counts as of the last update (one shared copy per update, so cheap to call per reset)."""
        if self._snapshot is None:
            self._snapshot = _frozen_snapshot(dict(self.counts), self.updates)
        return self._snapshot

    def update(self, anchors: Iterable[str]) -> None:
        """Decay the old counts, then add one visit per anchor (repeats count repeatedly)."""
        if self.decay != 1.0:
            self.counts = {k: v * self.decay for k, v in self.counts.items()}
        for a in anchors:
            self.counts[a] = self.counts.get(a, 0.0) + 1.0
        self.updates += 1
        self._snapshot = None


class NoveltyBonus(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Count-based exploration bonus on the state reached by each step, keyed by ``info[anchor_key]``.

    term = beta_k / sqrt(n(s') + 1) + episodic / sqrt(n_ep(s')), where n is the snapshot count taken at
    ``reset`` (the table is never written here, so the bonus is independent of sibling order; the ``+ 1``
    counts the current visit, so an unseen state gets beta_k), n_ep counts visits in this episode including
    the reset state and this one, and beta_k = beta * beta_decay**(table updates) anneals the bonus.

    >>> table = CountTable()
    >>> env = NoveltyBonus(gym.make("agentgym/SearchQA-v0", dataset="tiny"), table, beta=0.1, episodic=0.05)
    >>> _, info = env.reset(seed=0)
    >>> round(env.step("<search>" + info["gold"]["oracle_queries"][0] + "</search>")[1], 4)  # new state: 0.1 + 0.05
    0.15
    >>> round(env.step("<search")[1], 4)   # invalid action, same state again: 0.1 + 0.05 / sqrt(2)
    0.1354
    """

    #: Episode state, for ``agentgym.contract.branching`` (snapshots and branches copy these attributes).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_snapshot", "_visits")

    def __init__(
        self,
        env: gym.Env,
        counts: CountTable,
        beta: float = 0.1,
        name: str = "novelty",
        episodic: float = 0.0,
        beta_decay: float = 1.0,
        anchor_key: str = "anchor",
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, counts=counts, beta=beta, name=name, episodic=episodic, beta_decay=beta_decay, anchor_key=anchor_key
        )
        gym.Wrapper.__init__(self, env)
        self.counts = counts
        self.beta = float(beta)
        self.episodic = float(episodic)
        self.beta_decay = float(beta_decay)
        self.name = name
        self.anchor_key = anchor_key
        self._snapshot = counts.snapshot()
        self._visits: dict[str, int] = {}

    def _anchor(self, info: dict[str, Any]) -> str:
        if self.anchor_key not in info:
            raise KeyError(f"NoveltyBonus: info has no {self.anchor_key!r} (the canonical state key)")
        return str(info[self.anchor_key])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._snapshot = self.counts.snapshot()
        self._visits = {self._anchor(info): 1}
        return obs, info

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        anchor = self._anchor(info)
        self._visits[anchor] = self._visits.get(anchor, 0) + 1
        beta = self.beta * self.beta_decay**self._snapshot.updates
        term = beta / math.sqrt(self._snapshot.count(anchor) + 1.0)
        if self.episodic:
            term += self.episodic / math.sqrt(self._visits[anchor])
        reward, info = add_component(reward, info, self.name, term)
        return obs, reward, terminated, truncated, info


METHODS: tuple[Method, ...] = (
    Method("vpr", "VPR", "wrapper", "verifiable process reward: the change of the env's verified progress per turn",
           needs=("turn_signal",), paper=cite("VPR"), code=f"{__name__}:ProgressReward",
           choices=("no terminal fix: the episode's sum is the progress reached, whether or not the answer is right",),
           train={"algo": "grpo", "estimator": "gtpo", "progress_key": "progress"}, knobs_into="wrapper"),
    Method("format_penalty", "format penalty", "wrapper", "a fixed penalty on each malformed action",
           code=f"{__name__}:FormatPenalty",
           train={"algo": "grpo", "reward_components": "all", "reward_wrappers": [{"name": "format_penalty"}]},
           knobs_into="wrapper"),
    Method("step_cost", "step cost", "wrapper", "a fixed cost per turn", code=f"{__name__}:StepCost",
           train={"algo": "grpo", "reward_components": "all", "reward_wrappers": [{"name": "step_cost"}]},
           knobs_into="wrapper"),
    Method("novelty", "count-based exploration", "bonus",
           "beta / sqrt(visits) of the reached canonical state, from a count table frozen per batch",
           needs=("anchors",), paper=cite("count-based exploration"), code=f"{__name__}:NoveltyBonus",
           choices=("counts are frozen per batch so sibling rollouts get the same bonus",),
           train={"algo": "grpo", "reward_components": "all", "reward_wrappers": [{"name": "novelty"}]},
           knobs_into="wrapper"),
    Method("potential_shaping", "Potential-based shaping", "wrapper",
           "F = gamma*Phi(s') - Phi(s) with Phi(terminal) = 0: policy-invariant shaping",
           needs=("turn_signal",), paper=cite("Potential-based shaping"), code=f"{__name__}:PotentialShaping",
           choices=("Phi(terminal) = 0, also at truncation unless truncation='bootstrap'",),
           train={"algo": "grpo", "estimator": "gtpo", "reward_components": "all",
                  "reward_wrappers": [{"name": "potential_shaping", "potential": "progress"}]},
           knobs_into="wrapper"),
)  # fmt: skip
