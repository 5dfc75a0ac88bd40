"""Per-step support labels (FaithRL, docs/step-labels.md): ``StepSupport`` asks whether each turn's claim is supported
by the evidence the agent had, and gives f_t = 1 (supported) or 0 (unsupported) per turn.

A turn's *claim* is the content of its last ``<answer>`` or ``<search>`` tag (the answer it commits to, or the query
it builds on); a turn with neither tag claims its whole action (``<think>`` blocks removed). Its *evidence* is what
the agent had read before acting: the task prompt and every observation before the turn (on SearchQA the retrieved
passages ``Doc i(Title: ...) ...``).

For each turn the scorer asks its ``judge`` one yes/no :class:`~agentgym.rewards.verdicts.Question` ("is this step's
claim supported by the retrieved evidence?", the evidence and the step rendered in its prompt), whose ``rule`` is the
verified rule :func:`supported`: every content word of the claim (of a search query, half of them:
``min_share_search``; words normalised as SQuAD does, stop words dropped, matched on their first five letters)
occurs in the evidence or in the gold supporting documents' facts (``info["gold"]``'s ``hop_entities`` and
``hop_answers`` on SearchQA: the entities and the facts its supporting documents state). A claim with no content
word is supported (it asserts nothing). The default judge is the :class:`~agentgym.rewards.verdicts.RuleJudge`, so
the labels are the verified rule's; an LLM judge answers the same questions from the prompt alone (gold is never
rendered). A verdict the judge could not give makes the turn invalid (NaN), never a silent 0.

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> gold = {"gold": {"hop_entities": ["Zorbel"], "hop_answers": ["Mira Quell"]}}
>>> turns = [Turn("<search>Zorbel founder</search>", [{"role": "user", "content": "Doc 1(Title: Zorbel) "
...               "Zorbel was founded by Mira Quell."}], 0.0, False, False, {}),
...          Turn("<answer>Tom Vale</answer>", [], 0.0, True, False, {})]
>>> t = Trajectory("e", 0, "t", "a", [{"role": "user", "content": "Who founded Zorbel?"}], gold, turns)
>>> StepSupport()([t])[0].rewards
[1.0, 0.0]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.contract.trajectory import Trajectory
from agentgym.grading.answers import normalize_answer
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.verdicts import Judge, Question, RuleJudge, ask_each, verdict_errors, verdict_values

_TAG = re.compile(r"<(answer|search)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
#: Words that carry no claim (beyond SQuAD normalisation's articles).
STOP_WORDS = frozenset(
    (
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "by",
        "with",
        "from",
        "and",
        "or",
        "as",
        "that",
        "this",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "did",
        "does",
        "do",
        "it",
        "its",
        "his",
        "her",
        "their",
        "they",
        "he",
        "she",
        "i",
        "we",
        "you",
        "me",
        "my",
        "our",
        "your",
        "not",
        "no",
    )
)
#: Words match on their first ``STEM`` letters (a crude stem: "founded" and "founder" are one word).
STEM = 5

QUESTION = (
    "Evidence the agent had read:\n{evidence}\n\nThe agent's step:\n{step}\n\nIs this step's claim supported by the "
    "retrieved evidence above? Answer yes or no."
)


def claim_of(action: str) -> tuple[str, str]:
    """The kind (``"answer"``, ``"search"`` or ``"text"``) and the claim of a turn: its last ``<answer>``/``<search>``
    tag's content, else the action without ``<think>`` blocks.

    >>> claim_of("<think>hmm</think><search> Zorbel founder </search>"), claim_of("<think>x</think> just text")
    (('search', 'Zorbel founder'), ('text', 'just text'))
    """
    tags = _TAG.findall(action)
    if tags:
        return str(tags[-1][0]).lower(), str(tags[-1][1]).strip()
    return "text", _THINK.sub(" ", action).strip()


def content_words(text: str) -> set[str]:
    """The stems of the normalised words of ``text`` that carry content (SQuAD normalisation, stop words dropped,
    each word cut to its first ``STEM`` letters)."""
    return {w[:STEM] for w in normalize_answer(text).split() if w not in STOP_WORDS}


def supported(claim: str, evidence: Iterable[str], min_share: float = 1.0) -> bool:
    """The verified rule: at least ``min_share`` of the content words of ``claim`` occur in ``evidence`` (an empty
    claim is supported).

    >>> supported("Mira Quell", ["Zorbel was founded by Mira Quell."]), supported("Tom Vale", ["Mira Quell"])
    (True, False)
    >>> supported("Mira Quell born", ["Mira Quell"]), supported("Mira Quell born", ["Mira Quell"], min_share=0.5)
    (False, True)
    """
    words = content_words(claim)
    if not words:
        return True
    seen: set[str] = set()
    for text in evidence:
        seen |= content_words(text)
    return len(words & seen) >= min_share * len(words)


def gold_facts(info: Mapping[str, Any]) -> list[str]:
    """The facts of the gold supporting documents in an info's ``gold`` record (``hop_entities``, ``hop_answers``)."""
    gold = info.get("gold")
    if not isinstance(gold, Mapping):
        return []
    return [str(x) for key in ("hop_entities", "hop_answers") for x in gold.get(key) or ()]


def _texts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages]


@dataclass
class StepSupport(TurnScorer):
    """Per-turn support labels f_t in {0, 1} (see the module docstring). ``judge``: who answers (None: the
    :class:`RuleJudge`, the verified rule); ``use_gold``: the rule also accepts the gold supporting documents' facts;
    ``max_evidence_chars``: the evidence rendered into a judge's prompt keeps its last this many characters."""

    judge: Judge | None = None
    use_gold: bool = True
    min_share: float = 1.0
    min_share_search: float = 0.5
    max_evidence_chars: int = 8000
    name: str = "step_support"
    _judge: Judge = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_evidence_chars < 1:
            raise ValueError(f"max_evidence_chars must be >= 1, got {self.max_evidence_chars}")
        if not (0.0 <= self.min_share <= 1.0 and 0.0 <= self.min_share_search <= 1.0):
            raise ValueError(f"min_share and min_share_search must lie in [0, 1], got {self.min_share}, "
                             f"{self.min_share_search}")  # fmt: skip
        self._judge = self.judge if self.judge is not None else RuleJudge()

    def questions(self, traj: Trajectory) -> list[Question]:
        """One yes/no question per turn; its rule is the verified rule over the evidence before the turn (+ gold)."""
        gold = gold_facts(traj.reset_info) if self.use_gold else []
        evidence = _texts(traj.initial_observation)
        out = []
        for turn in traj.turns:
            kind, claim = claim_of(turn.action)
            share = self.min_share_search if kind == "search" else self.min_share
            seen = tuple(evidence)
            rendered = "\n".join(seen)[-self.max_evidence_chars :]
            prompt = QUESTION.format(evidence=rendered, step=turn.action)
            rule = lambda c=claim, s=seen, m=share: supported(c, (*s, *gold), m)
            out.append(Question("yesno", prompt, rule=rule))
            evidence += _texts(turn.observation)
        return out

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for vs in ask_each(self._judge, [self.questions(traj) for traj in group]):
            errors = verdict_errors(vs)
            out.append(TurnScores(self.name, verdict_values(vs), extras={"errors": errors} if errors else {}))
        return out
