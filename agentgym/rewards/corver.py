"""CorVer: the agent's claims verified against the corpus by entity co-occurrence.

Each sentence of an agent turn (tags removed; split after ``.``, ``!``, ``?`` and at line breaks) is a claim. Its
(subject, object) pair is its first two distinct entity names, found through the knowledge base's name list (the
longest name wins where names overlap; matched on word boundaries). The sentence is verified when the pair
co-occurs in at least ``n`` passages of the corpus:

    v_s = 1 if #passages mentioning both subject and object >= n else 0;   a sentence without a pair is neutral.

One corpus lookup per sentence with a pair (``CooccurrenceIndex.lookups`` counts them). The paper aligns v_s to
tokens, A_tok = A_traj + lambda * (v_s - mean v) over the sentence's tokens. Here the scorer pays it per turn:

    r_t = coef * sum over turn t's verified sentences s of (v_s - mean v)     (center=True; False: v_s alone)

where mean v is over the trajectory's sentences with a pair, so with centring the rewards shift credit between
turns and sum to 0. Each sentence's character span in the turn and its v_s are in ``TurnScores.extras`` for a trainer
that places them on tokens through the tokenizer's offsets (the trainer's turn rewards are per turn).

The name list and the passages come from the env: ``SearchQAEnv.entity_names()`` and its corpus, built once from
``gymnasium.make(trajectory's env id, **corpus_kwargs)`` (``corpus_kwargs`` must name the same dataset as the run's
``env_kwargs``), or given directly as ``CooccurrenceIndex(names, passages)``.

>>> index = CooccurrenceIndex(["Ada Vell", "Orrin", "Kest"], ["Ada Vell was born in Orrin.", "Kest is a river."])
>>> [index.verify(s, n=1) for s in ("Ada Vell comes from Orrin.", "Ada Vell swam in the Kest.", "It is late.")]
[1.0, 0.0, None]
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def sentences(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, sentence)`` of each sentence of ``text``: split after ``.``, ``!``, ``?``, at line breaks and at
    tags (which are left out; offsets index ``text``), blank ones dropped.

    >>> [s for _, _, s in sentences("<think>Ada is in Orrin. So</think> <answer>Orrin</answer>")]
    ['Ada is in Orrin.', 'So', 'Orrin']
    """
    plain = _TAG.sub(lambda m: "\n" + " " * (len(m.group()) - 1), text)  # a tag ends a sentence
    out = []
    for m in _SENTENCE.finditer(plain):
        body = m.group()
        lead = len(body) - len(body.lstrip())
        s = body.strip()
        if s:
            out.append((m.start() + lead, m.start() + lead + len(s), s))
    return out


@dataclass
class CooccurrenceIndex:
    """Which passages mention each entity name, to count pair co-occurrences (see the module docstring)."""

    names: Sequence[str]
    passages: Iterable[str]
    lookups: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False)
    _postings: dict[str, set[int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = sorted({n.strip() for n in self.names if n.strip()}, key=lambda n: (-len(n), n))
        self.names = names
        if not names:
            raise ValueError("the name list is empty")
        self._pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in names) + r")(?!\w)")
        self._postings = {}
        for i, text in enumerate(self.passages):
            for name in self.mentions(text):
                self._postings.setdefault(name, set()).add(i)
        self.passages = ()  # the postings hold what is needed

    def mentions(self, text: str) -> list[str]:
        """The distinct names ``text`` mentions, in order of first mention."""
        return list(dict.fromkeys(m.group() for m in self._pattern.finditer(text)))

    def pair(self, sentence: str) -> tuple[str, str] | None:
        """The sentence's (subject, object): its first two distinct names; None with fewer than two."""
        found = self.mentions(sentence)
        return (found[0], found[1]) if len(found) >= 2 else None

    def count(self, a: str, b: str) -> int:
        """How many passages mention both ``a`` and ``b`` (one lookup)."""
        self.lookups += 1
        return len(self._postings.get(a, set()) & self._postings.get(b, set()))

    def verify(self, sentence: str, n: int = 1) -> float | None:
        """v_s: 1.0 when the sentence's pair co-occurs in at least ``n`` passages, 0.0 when not, None without a pair."""
        pair = self.pair(sentence)
        return None if pair is None else float(self.count(*pair) >= n)


def _env_index(env_id: str, kwargs: Mapping[str, Any]) -> CooccurrenceIndex:
    import gymnasium

    env = gymnasium.make(env_id, **dict(kwargs))
    try:
        inner: Any = env.unwrapped
        if not hasattr(inner, "entity_names"):
            raise ValueError(f"{env_id} has no entity_names(): CorVer needs an env with a name list and a corpus")
        return CooccurrenceIndex(inner.entity_names(), [f"{d.title} {d.text}" for d in inner.dataset.corpus])
    finally:
        env.close()


@dataclass
class CorpusVerifier(TurnScorer):
    """CorVer's turn rewards (see the module docstring). ``n``: passages a pair must share; ``coef``: lambda;
    ``center``: subtract the trajectory's mean v; ``corpus_kwargs``: the env arguments that build the corpus (None:
    the trajectory's own ``env_kwargs``); ``index``: a ready index (overrides the env's)."""

    n: int = 1
    coef: float = 0.1
    center: bool = True
    name: str = "corver"
    corpus_kwargs: dict[str, Any] | None = None
    #: an object, not a command-line knob (hence the factory)
    index: CooccurrenceIndex | None = field(default_factory=lambda: None)
    _built: dict[str, CooccurrenceIndex] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")

    def index_for(self, traj: Trajectory) -> CooccurrenceIndex:
        if self.index is not None:
            return self.index
        kwargs = self.corpus_kwargs if self.corpus_kwargs is not None else traj.env_kwargs
        key = f"{traj.env_id}|{sorted(kwargs.items())!r}"
        if key not in self._built:
            self._built[key] = _env_index(traj.env_id, kwargs)
        return self._built[key]

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for traj in group:
            index = self.index_for(traj)
            spans = [[(a, b, index.verify(s, self.n)) for a, b, s in sentences(t.action)] for t in traj.turns]
            verified = [v for turn in spans for _, _, v in turn if v is not None]
            mean = math.fsum(verified) / len(verified) if verified and self.center else 0.0
            rewards = [self.coef * math.fsum(v - mean for _, _, v in turn if v is not None) for turn in spans]
            extras = {"sentences": [[[a, b, v] for a, b, v in turn] for turn in spans], "mean_v": mean}
            out.append(TurnScores(self.name, rewards, extras=extras))
        return out


METHODS: tuple[Method, ...] = (
    Method("corver", "CorVer", "scorer", "claims whose entity pair co-occurs in the corpus get credit on their turn",
           needs=("reference",), paper=cite("CorVer"), code=f"{__name__}:CorpusVerifier",
           choices=("claim extractor: the first two distinct names of the KB's name list in a sentence (no 0.5B "
                    "extractor model)",
                    "v_s = 1 if the pair co-occurs in >= n passages (knob n, default 1), no PMI threshold",
                    "placed per turn: coef * sum over the turn's sentences of (v_s - mean v) (knobs coef, center); "
                    "sentence character spans and v_s are in the extras for token placement",
                    "a sentence without a pair is neutral (left out of the mean)"),
           train={"algo": "grpo", "scorer": "corver", "estimator": "gtpo",
                  "scorer_kwargs": {"corpus_kwargs": {"dataset": "tiny"}}},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
