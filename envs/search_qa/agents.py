"""Built-in SearchQA agents: ``oracle`` (privileged upper bound), ``heuristic`` (honest baseline), ``random``.

>>> import gymnasium as gym, agentgym
>>> from agentgym.envs.search_qa.agents import OracleAgent
>>> env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
>>> obs, info = env.reset(seed=0)
>>> agent = OracleAgent(); agent.reset(seed=0)
>>> agent.act(obs, info).startswith("<think>")
True
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from agentgym.contract.agent import Agent, GoldAgent

Message = dict[str, Any]

_STOP = frozenset(
    """a an the of in on at to for by with from and or is was were are be been which who whom whose what when
    where how did does do that this these those as it its into than then there their his her first earlier later
    more less""".split()  # noqa: SIM905 - a word list reads better as text
)
_WORD = re.compile(r"\w+", re.UNICODE)
_DOC = re.compile(r"Doc \d+\(Title: (.*?)\) (.*?)(?=\nDoc \d+\(Title: |</information>|\Z)", re.DOTALL)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_CAPITALISED = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:of\s+|de\s+|van\s+)?[A-Z][\w'-]*)*")
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_NUMBER = re.compile(r"\b\d[\d,.]*\b")


def question_of(messages: list[Message]) -> str:
    """The question of a SearchQA prompt (the text after the last ``Question:``)."""
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    return first.rsplit("Question:", 1)[-1].strip()


def passages_of(messages: list[Message]) -> list[tuple[str, str]]:
    """``(title, text)`` of every passage returned so far, most recent search first."""
    out: list[tuple[str, str]] = []
    for m in reversed(messages):
        if m["role"] != "assistant" and "<information>" in m["content"]:
            out.extend((t.strip(), x.strip()) for t, x in _DOC.findall(m["content"]))
    return out


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class OracleAgent(Agent):
    """Reads the privileged gold record: searches each hop's oracle query, then answers the gold answer.

    It is an upper bound that proves every task is solvable through the env's own interface (its
    queries go through the real retriever); it is not a baseline.
    """

    name = "oracle"
    privileged = True

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        gold = info["gold"]
        queries = gold.get("oracle_queries") or []
        turn = int(info.get("turn", 0))
        if turn < len(queries):
            return f"<think>I need hop {turn + 1} of {len(queries)}.</think>\n<search> {queries[turn]} </search>"
        return f"<think>I have what I need.</think>\n<answer> {gold['answers'][0]} </answer>"


class DemoAgent(GoldAgent):
    """The oracle's plan in its shortest form, for supervised warm starts of small models (SearchQA's
    ``demo_agent``): one ``<search> query </search>`` per gold hop, then ``<answer> gold answer </answer>``.

    >>> DemoAgent.actions({"oracle_queries": ["Ada Lovelace father"], "answers": ["Lord Byron"]})
    ['<search> Ada Lovelace father </search>', '<answer> Lord Byron </answer>']
    """

    name = "demo"

    @staticmethod
    def actions(gold: dict[str, Any]) -> list[str]:
        """The whole plan from a reset's ``info["gold"]``."""
        return [
            *(f"<search> {q} </search>" for q in gold.get("oracle_queries") or []),
            f"<answer> {gold['answers'][0]} </answer>",
        ]

    def play(self, turn: int, messages: list[Message]) -> str:
        plan = self.actions(self.gold)
        return plan[min(turn, len(plan) - 1)]


class HeuristicAgent(Agent):
    """An honest retrieve-and-extract baseline that never looks at ``info["gold"]``.

    Turn 1 searches the question. Then it ranks the retrieved sentences by overlap with the question's
    content words and extracts a candidate of the expected type (a year for "when"/"year" questions,
    otherwise a capitalised name not already in the question). For multi-hop questions ("the director
    of the film X") it searches again with the candidate as the bridge entity while turns remain, and for
    "A or B" comparisons it answers the option whose passages overlap the question most.
    """

    name = "heuristic"

    def __init__(self, max_searches: int = 3):
        super().__init__()
        self.max_searches = max_searches

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        question = question_of(messages)
        turn = int(info.get("turn", 0))
        if turn == 0:
            return f"<search> {question.rstrip('?')} </search>"
        passages = passages_of(messages)
        options = self._options(question)
        if options:
            return f"<answer> {self._compare(question, options, passages)} </answer>"
        candidate = self._extract(question, passages)
        hops_left = question.lower().count(" of ") - (turn - 1)
        if candidate and hops_left > 0 and turn < self.max_searches:
            relation = " ".join(content_words(question)[:4])
            return f"<search> {candidate} {relation} </search>"
        return f"<answer> {candidate or 'unknown'} </answer>"

    @staticmethod
    def _options(question: str) -> list[str] | None:
        m = re.search(r",\s*(.+?)\s+or\s+(.+?)\?*$", question)
        return [m.group(1).strip(), m.group(2).strip()] if m else None

    @staticmethod
    def _compare(question: str, options: list[str], passages: list[tuple[str, str]]) -> str:
        # Pick the option with the most extreme number in its passage, direction from the question word.
        larger = bool(re.search(r"\b(longer|larger|bigger|more|later|younger|newer|higher)\b", question, re.I))
        values: dict[str, float] = {}
        for opt in options:
            for title, text in passages:
                if opt.lower() in title.lower():
                    nums = [float(n.replace(",", "")) for n in _NUMBER.findall(text) if n.replace(",", "").isdigit()]
                    if nums:
                        values[opt] = nums[0]
                        break
        if len(values) == 2:
            return (max if larger else min)(values, key=values.__getitem__)
        return options[0]

    @staticmethod
    def _extract(question: str, passages: list[tuple[str, str]]) -> str | None:
        q_words = set(content_words(question))
        want_year = bool(re.search(r"\b(when|year)\b", question, re.I))
        scored: list[tuple[float, int, str]] = []
        for rank, (title, text) in enumerate(passages):
            for sentence in _SENTENCE.findall(text):
                overlap = len(q_words.intersection(content_words(sentence + " " + title)))
                scored.append((overlap - 0.1 * rank, -len(scored), sentence))
        for _, _, sentence in sorted(scored, reverse=True)[:5]:
            if want_year:
                years = _YEAR.findall(sentence)
                if years:
                    return years[0]
                continue
            names = [c for c in _CAPITALISED.findall(sentence) if c.lower() not in question.lower()]
            names = [n for n in names if n.split()[0].lower() not in _STOP]
            if names:
                return Counter(names).most_common(1)[0][0]
        return None


class RandomAgent(Agent):
    """A uniformly random policy: searches random question words, answers a random capitalised word from
    what it has read, or (one time in ten) emits a malformed action."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        words = content_words(question_of(messages)) or ["nothing"]
        roll = rng.random()
        if roll < 0.1:
            return "I am not sure what to do <search"
        if roll < 0.55:
            k = int(rng.integers(1, min(4, len(words)) + 1))
            picked = [words[int(i)] for i in rng.choice(len(words), size=k, replace=False)]
            return f"<search> {' '.join(picked)} </search>"
        text = " ".join(f"{t} {x}" for t, x in passages_of(messages))
        names = _CAPITALISED.findall(text) or [w.title() for w in words]
        return f"<answer> {names[int(rng.integers(len(names)))]} </answer>"
