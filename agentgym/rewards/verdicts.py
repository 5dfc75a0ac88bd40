"""What every judge-based method asks a judge, and what it gets back: :class:`Question`, :class:`Verdict` and the
:class:`Judge` protocol, with the judge that answers from the env's gold (:class:`RuleJudge`).

A method renders each thing it needs judged as a :class:`Question`: its ``kind`` (``"yesno"``: a criterion met or
not; ``"score"``: a grade in [0, 1]; ``"compare"``: which of two items is better; ``"rank"``: a score for each of
``items`` items), the ``prompt`` an LLM judge reads (the context and the criterion, already rendered) and, where the
env's gold decides the answer, a ``rule``: a function of nothing that returns the answer from gold. A judge answers
a batch of questions with one :class:`Verdict` each, in order. A verdict the judge could not give (a failed
request, a reply without an answer, a rule that raised) has ``value`` None and says why in ``error``: the method
marks what depended on it invalid, never a silent 0.

``RuleJudge`` answers every question from its ``rule`` (a question without one is an error verdict): the verified
variant of a judge method, and what the property tests run ("a perfect judge reduces to the verified variant").
``agentgym.rewards.judge.LLMJudge`` asks a model over any OpenAI-compatible endpoint (the suite's own
``agentgym.tools.openai_server`` serves the local SmolLM2) with the same questions.

>>> judge = RuleJudge()
>>> [v.value for v in judge.ask([Question("yesno", "Is 2 even?", rule=lambda: True),
...                               Question("score", "Grade it.", rule=lambda: 0.25),
...                               Question("rank", "Rank them.", items=3, rule=lambda: (0.1, 0.9, 0.5))])]
[1.0, 0.25, (0.1, 0.9, 0.5)]
>>> judge.ask([Question("yesno", "Is it?")])[0].error
'the rule judge needs a rule for every question: this one has none'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

QuestionKind = Literal["yesno", "score", "compare", "rank"]
QUESTION_KINDS: tuple[str, ...] = QuestionKind.__args__  # type: ignore[attr-defined]

#: A verdict's value: yes/no as 1.0/0.0; a score in [0, 1]; compare: P(first item is better) (1.0, 0.0, or 0.5 for
#: a tie); rank: one score in [0, 1] per item, higher is better.
Value = float | tuple[float, ...]


@dataclass(frozen=True)
class Question:
    """One question for a judge (see the module docstring). ``evidence``: the judge must quote a span of the
    context that supports a yes (CM2's evidence grounding); ``items``: how many items a rank question ranks;
    ``rule``: the answer from gold, for :class:`RuleJudge` (never rendered into the prompt)."""

    kind: QuestionKind
    prompt: str
    items: int = 0
    evidence: bool = False
    rule: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in QUESTION_KINDS:
            raise ValueError(f"question kind must be one of {QUESTION_KINDS}, got {self.kind!r}")
        if (self.kind == "rank") != (self.items > 0):
            raise ValueError("a rank question needs items > 0, and only a rank question has items")


@dataclass(frozen=True)
class Verdict:
    """A judge's answer to one question: ``value`` (None where it could not answer; ``error`` says why), the
    ``evidence`` it quoted, and its raw ``reply`` (None for a rule judge)."""

    value: Value | None
    evidence: str | None = None
    reply: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


@runtime_checkable
class Judge(Protocol):
    """Anything that answers a batch of questions, one verdict per question, in order."""

    @property
    def name(self) -> str: ...

    def ask(self, questions: Sequence[Question]) -> list[Verdict]: ...


def check_value(question: Question, value: Any) -> Value:
    """``value`` as the verdict value of ``question``'s kind (a bool counts as 1.0/0.0); ``ValueError`` if it is not
    one (a number outside [0, 1], a rank of the wrong length, NaN)."""
    if question.kind == "rank":
        scores = tuple(float(x) for x in value)
        if len(scores) != question.items:
            raise ValueError(f"a rank of {question.items} items got {len(scores)} scores")
        for x in scores:
            if not 0.0 <= x <= 1.0:
                raise ValueError(f"a rank score must lie in [0, 1], got {x}")
        return scores
    x = float(value)
    if math.isnan(x) or not 0.0 <= x <= 1.0:
        raise ValueError(f"a {question.kind} verdict must lie in [0, 1], got {value!r}")
    if question.kind == "yesno" and x not in (0.0, 1.0):
        raise ValueError(f"a yes/no verdict is 0 or 1 (True or False), got {value!r}")
    return x


@dataclass(frozen=True)
class RuleJudge:
    """The judge that answers each question from its ``rule`` (the env's gold): see the module docstring."""

    name: str = "rule"

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        out = []
        for q in questions:
            if q.rule is None:
                out.append(Verdict(None, error="the rule judge needs a rule for every question: this one has none"))
                continue
            try:
                out.append(Verdict(check_value(q, q.rule())))
            except Exception as e:  # a rule over untrusted trajectories must not take the scorer down
                out.append(Verdict(None, error=f"rule failed: {type(e).__name__}: {e}"))
        return out


def ask_each(judge: Judge, asked: Sequence[Sequence[Question]]) -> list[list[Verdict]]:
    """Ask every question of ``asked`` (one list per trajectory, turn or span) in one batch, and give the verdicts
    back in the same nesting; ``ValueError`` if the judge broke the protocol (not one verdict per question).

    >>> [[v.value for v in vs] for vs in ask_each(RuleJudge(), [[Question("yesno", "a", rule=lambda: 1)], []])]
    [[1.0], []]
    """
    flat = [q for qs in asked for q in qs]
    verdicts = judge.ask(flat) if flat else []
    if len(verdicts) != len(flat):
        raise ValueError(f"judge {judge.name!r} gave {len(verdicts)} verdicts for {len(flat)} questions")
    it = iter(verdicts)
    return [[next(it) for _ in qs] for qs in asked]


def verdict_values(verdicts: Sequence[Verdict]) -> list[float]:
    """Each verdict's value as a float, NaN where the judge gave none (yes/no and score questions)."""
    return [math.nan if v.value is None else float(v.value) for v in verdicts]  # type: ignore[arg-type]


def verdict_errors(verdicts: Sequence[Verdict]) -> dict[str, str]:
    """The errors of the verdicts that have one, by position (as a string: JSON-ready extras)."""
    return {str(i): v.error for i, v in enumerate(verdicts) if v.error is not None}


_SPACE = re.compile(r"\s+")


def _normalise(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def grounded(evidence: str | None, context: str) -> bool:
    """Whether the quoted ``evidence`` occurs in ``context`` (case and runs of whitespace ignored); an empty or
    missing quote never does.

    >>> grounded("the  Capital", "Paris is the capital of France."), grounded("Lyon", "Paris"), grounded(None, "x")
    (True, False, False)
    """
    return evidence is not None and bool(_normalise(evidence)) and _normalise(evidence) in _normalise(context)
