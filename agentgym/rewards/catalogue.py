"""The method catalogue: one :class:`Method` card per credit-assignment method, kept beside its code.

A card says what a method is (``name``, the paper's ``system`` name, its ``kind``), the paper it follows, what it
needs from a run (``needs``, words of :data:`NEEDS`), where its code is (``code``, ``"module:attribute"``), its knobs
(read from that code's signature, never copied), the choices made where the paper leaves the formula unstated, and
how ``agentgym train --method NAME`` composes it (``train``: the :class:`~agentgym.baselines.config.TrainConfig`
settings the method is, e.g. a scorer plus the estimator that reads its rewards).

Each module that holds a method lists its cards in a module-level ``METHODS`` tuple; :func:`collect` gathers them
from a list of modules. ``CARD_MODULES`` names the reward modules that hold cards; the trainer adds its own
(``agentgym.baselines.methods``), and ``agentgym methods`` lists the whole catalogue. Systems of the reference
papers that are not built yet have cards too (``status="missing"``, no ``code``), in :data:`PLANNED`; a built card
of the same name replaces a planned one.

>>> card = Method("demo", "Demo", "estimator", "a worked example", needs=("outcome",),
...               code="agentgym.rewards.advantages.group:grpo")
>>> sorted(card.knobs())
['eps', 'scale']
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, Literal

Kind = Literal["estimator", "scorer", "transform", "wrapper", "bonus", "branch", "trainer"]
Status = Literal["built", "partial", "missing"]

#: What a card can say a method needs, with what each word means (``agentgym methods --need WORD`` filters on it).
NEEDS: Mapping[str, str] = MappingProxyType({
    "outcome": "the episode's outcome reward",
    "group": "sibling rollouts of the same task (a group)",
    "turn_signal": "a verified per-turn signal from the env (info key, e.g. progress or action_valid)",
    "snapshots": "env snapshots to fork rollouts from (agentgym.contract.branching)",
    "scoring_model": "a language model that scores answer likelihoods (the policy or a teacher)",
    "judge": "an LLM judge or rubric scorer",
    "learned_model": "a reward or value model trained during the run",
    "expert": "expert demonstrations or an oracle agent",
    "reference": "a gold answer or reference trajectory",
    "logprobs": "the rollouts' sampling log-probabilities",
    "segments": "a segmentation of each trajectory (subgoals or phases)",
    "anchors": "canonical observations (info['anchor']) to group equal states",
})  # fmt: skip
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]

#: Parameters of a method's code that are its inputs, not knobs (the batch an estimator reads, the env a wrapper
#: wraps, the model a scorer scores with).
_INPUTS = frozenset({"self", "batch", "env", "scorer", "model", "tokenizer", "judge", "client", "trajectories", "name"})


def _plain(value: object) -> bool:
    """Whether ``value`` can be written as a JSON value on the command line (what a knob's default must be; a
    parameter without a default, or with an object or function as its default, is an input, not a knob)."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


@dataclass(frozen=True)
class Paper:
    """The paper a method follows: its title, year and arXiv id (None where it has none)."""

    title: str
    year: int
    arxiv: str | None = None

    @property
    def url(self) -> str | None:
        return f"https://arxiv.org/abs/{self.arxiv}" if self.arxiv else None


@dataclass(frozen=True)
class Method:
    """One method of the catalogue.

    ``code`` is ``"module:attribute"`` (a function or class); it is imported only when a knob or the code itself is
    asked for, so listing the catalogue imports no model code. ``train`` holds the ``TrainConfig`` settings that
    make a training run use the method (``agentgym train --method NAME``); its knobs are set with
    ``--set knob=value``. ``choices`` are the parts of the formula the paper leaves unstated, each with the choice
    made (and the knob that changes it); ``missing`` says what a partial or missing method still lacks."""

    name: str
    system: str
    kind: Kind
    summary: str
    needs: tuple[str, ...] = ()
    paper: Paper | None = None
    code: str | None = None
    status: Status = "built"
    choices: tuple[str, ...] = ()
    train: Mapping[str, Any] = field(default_factory=dict)
    missing: str = ""
    #: which ``TrainConfig`` mapping the knobs go into under ``agentgym train --method``: ``estimator_kwargs``,
    #: ``scorer_kwargs``, ``wrapper`` (the method's entry of ``reward_wrappers``) or ``config`` (top-level fields)
    knobs_into: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.needs) - set(NEEDS))
        if unknown:
            raise ValueError(f"method {self.name!r}: unknown needs {unknown}; known: {', '.join(NEEDS)}")
        if self.kind not in KINDS or self.status not in STATUSES:
            raise ValueError(f"method {self.name!r}: kind must be one of {KINDS} and status one of {STATUSES}")
        if (self.code is None) != (self.status == "missing"):
            verb = "needs" if self.code is None else "has no"
            raise ValueError(f"method {self.name!r}: a {self.status} method {verb} code")

    def load(self) -> Callable[..., Any]:
        """The method's code (imports its module)."""
        if self.code is None:
            raise LookupError(f"method {self.name!r} is not built")
        module, _, attr = self.code.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def knobs(self) -> dict[str, Any]:
        """The knobs of the method's code and their defaults, read from its signature (keyword parameters with a
        default; inputs such as the batch or the wrapped env are not knobs)."""
        if self.code is None:
            return {}
        params = inspect.signature(self.load()).parameters.values()
        return {p.name: p.default for p in params
                if p.name not in _INPUTS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and _plain(p.default) and "Callable" not in str(p.annotation)}  # fmt: skip

    def row(self) -> dict[str, Any]:
        """The card as plain JSON-ready data (``agentgym methods --json``); knobs only for built code."""
        paper = None if self.paper is None else {"title": self.paper.title, "year": self.paper.year,
                                                 "arxiv": self.paper.arxiv}  # fmt: skip
        knobs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.knobs().items()}
        return {"name": self.name, "system": self.system, "kind": self.kind, "status": self.status,
                "summary": self.summary, "needs": list(self.needs), "paper": paper, "code": self.code,
                "knobs": knobs, "choices": list(self.choices), "train": dict(self.train),
                "missing": self.missing}  # fmt: skip


#: The reward modules that hold cards (a test fails on a module with ``METHODS`` that is missing here).
CARD_MODULES: tuple[str, ...] = tuple(f"agentgym.rewards.{m}" for m in (
    "advantages.group", "advantages.gae", "advantages.turn_level", "advantages.anchor_groups", "advantages.mixed",
    "advantages.userrl", "advantages.multi_turn", "advantages.gopo", "advantages.lampo", "advantages.serl",
    "advantages.hiper", "advantages.dual_track", "information.gain", "information.potential", "information.siop",
    "information.infopo", "matching", "judge", "process", "wrappers", "subgoal_format", "par", "bt", "rnd", "maxinfo",
    "advantages.faith", "thoughts", "geli", "checklist", "aggregate", "group_judging", "principles",
    "state_similarity", "subgoals", "skills", "oni", "corver", "goal_qa", "learned",
))  # fmt: skip


def reward_methods() -> tuple[Method, ...]:
    """The cards of the reward modules (``CARD_MODULES``), imported on the call."""
    return collect(importlib.import_module(name) for name in CARD_MODULES)


def collect(modules: Iterable[ModuleType]) -> tuple[Method, ...]:
    """Every module's ``METHODS`` cards in order; a name given twice raises ``ValueError``."""
    cards: list[Method] = []
    seen: dict[str, str] = {}
    for module in modules:
        for card in module.METHODS:
            if card.name in seen:
                raise ValueError(f"method {card.name!r} has cards in {seen[card.name]} and {module.__name__}")
            seen[card.name] = module.__name__
            cards.append(card)
    return tuple(cards)


def merge(built: Iterable[Method], planned: Iterable[Method]) -> tuple[Method, ...]:
    """The built cards, then the planned ones no built card replaces (same name), each part in its order."""
    built = tuple(built)
    names = {c.name for c in built}
    return built + tuple(c for c in planned if c.name not in names)
