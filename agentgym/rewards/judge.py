"""Rubric / LLM-judge turn rewards over any OpenAI-compatible chat endpoint.

``JudgeScorer`` asks a judge model to grade the agent against a rubric. ``mode="turn"`` sends one request per
turn t with the conversation up to turn t (and, by default, the env's reply to it) and puts the score on turn t;
``mode="trajectory"`` sends the whole conversation once and puts the score on the last turn (0 elsewhere).
The judge is told to end with ``Score: N/<scale>``; ``parse_score`` also reads ``Score: N`` (divided by
``scale``), ``N out of M``, ``[[N]]`` and a bare ``N``/``N/M`` reply, takes the last score in the text and
clamps it to [0, 1]. A request that fails (after the client's retries) or a reply without a score marks the
turn invalid with reward NaN (``on_error="mark"``, the default) or raises ``ScorerError`` (``"raise"``):
never a silent 0. The judge's replies and errors are kept in ``TurnScores.extras``.

>>> parse_score("The search was on topic. Score: 7/10"), parse_score("**Score**: 4", scale=5)
(0.7, 0.8)
>>> parse_score("I cannot grade this.") is None
True
>>> judge = JudgeScorer(LLMClient("http://127.0.0.1:8000/v1"), rubric="Reward focused searches.")  # doctest: +SKIP
>>> scores = judge(group)                                                                             # doctest: +SKIP

``LLMJudge`` is the :class:`~agentgym.rewards.verdicts.Judge` over an endpoint that every judge-based method asks
(yes/no, score, compare and rank :class:`~agentgym.rewards.verdicts.Question` s): one system prompt per kind, replies
read the many ways models write them (``parse_yesno``, ``parse_compare``, ``parse_rank``, ``parse_score``), a batch
run on a bounded thread pool with identical questions asked once and a bounded LRU cache, counters for the trainer's
metrics, and ``answer="logprob"`` (yes iff P(yes) > P(no) at the reply's first token) for weak local models.
``TurnVerdictScorer`` (card ``turn_verdict``) asks it one yes/no question per turn; with ``RuleJudge`` its rewards
are the env's verified per-turn signal. docs/judges.md has worked examples.

>>> parse_yesno("The search found the city.\\n**Answer:** Yes."), parse_yesno("no"), parse_compare("Answer: tie")
(1.0, 0.0, 0.5)
>>> parse_rank("Scores: 3, 7/10, 5", items=3)
(0.3, 0.7, 0.5)
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.advantages.signals import TURN_SIGNALS, SignalMode, TurnSignal
from agentgym.rewards.base import ScorerError, TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.verdicts import (
    Judge,
    Question,
    Value,
    Verdict,
    ask_each,
    check_value,
    grounded,
    verdict_errors,
    verdict_values,
)
from agentgym.tools.llm import LLMClient, LLMError

Message = dict[str, Any]

DEFAULT_RUBRIC = (
    "Judge whether the agent's turn moves it towards solving the user's task: a well-formed action, relevant to "
    "the task, using what it has already learned, without repeating itself. A correct final answer scores highest."
)

SYSTEM_PROMPT = (
    "You are a strict, fair judge of an AI agent's turns in a multi-turn task.\n\nRubric:\n{rubric}\n\n"
    "Explain your reasoning in at most three sentences, then end your reply with a final line of the form "
    "'Score: N/{scale}', where N is a number from 0 to {scale}."
)

TASK_PROMPT = {
    "turn": "Score the agent's LAST turn (the last assistant message above) against the rubric.",
    "trajectory": "Score the agent's whole trajectory above against the rubric.",
}

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_SCORE = re.compile(
    rf"\bscore[sd]?\b(?:\s+(?:is|of))?[\s*_:=]*{_NUMBER}(?:\s*(?:/|out\s+of)\s*{_NUMBER})?(\s*%)?", re.IGNORECASE
)
_BRACKETS = re.compile(rf"\[\[\s*{_NUMBER}\s*(?:/\s*{_NUMBER}\s*)?\]\]")
_BARE = re.compile(rf"^\s*{_NUMBER}\s*(?:(?:/|out\s+of)\s*{_NUMBER})?\s*\.?\s*$", re.IGNORECASE)


def parse_score(text: str, scale: float = 10.0) -> float | None:
    """The judge's score in [0, 1], or None if the reply holds none (see the module docstring).

    >>> parse_score("Reasoning... score: 12/10"), parse_score("[[3]]"), parse_score("Score: 85%")
    (1.0, 0.3, 0.85)
    """
    for pattern in (_SCORE, _BRACKETS, _BARE):
        matches = list(pattern.finditer(text))
        if not matches:
            continue
        groups = matches[-1].groups()
        value = float(groups[0])
        percent = len(groups) > 2 and groups[2] is not None
        denominator = float(groups[1]) if groups[1] is not None else (100.0 if percent else scale)
        if denominator <= 0:
            return None
        return min(1.0, max(0.0, value / denominator))
    return None


def render_conversation(messages: Sequence[Message]) -> str:
    """Render chat messages for the judge: a ``### role`` header, then the content, per message."""
    return "\n\n".join(f"### {m.get('role', 'user')}\n{m.get('content') or ''}" for m in messages)


def conversation_until(traj: Trajectory, turn: int, *, include_observation: bool = True) -> list[Message]:
    """The messages up to and including turn ``turn``'s action (and the env's reply to it if asked)."""
    out = list(traj.initial_observation)
    for k, t in enumerate(traj.turns[: turn + 1]):
        out.append({"role": "assistant", "content": t.action})
        if k < turn or include_observation:
            out.extend(t.observation)
    return out


@dataclass
class JudgeScorer(TurnScorer):
    """Score turns with an LLM judge and a rubric (see the module docstring).

    ``client`` is any ``LLMClient`` (vLLM, OpenAI, our own server); ``model`` overrides its default model;
    ``sampling`` goes into every request (greedy by default, for reproducible grades); requests run on
    ``max_workers`` threads (the client caps concurrency too).

    >>> judge = JudgeScorer(LLMClient("http://127.0.0.1:8000/v1"), mode="trajectory")   # doctest: +SKIP
    >>> judge([traj])[0].rewards                                                       # doctest: +SKIP
    [0.0, 0.0, 0.8]
    """

    client: LLMClient
    rubric: str = DEFAULT_RUBRIC
    name: str = "judge"
    mode: Literal["turn", "trajectory"] = "turn"
    scale: float = 10.0
    on_error: Literal["mark", "raise"] = "mark"
    include_observation: bool = True
    model: str | None = None
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0, "max_tokens": 512})
    max_workers: int = 8

    def __post_init__(self) -> None:
        if self.mode not in TASK_PROMPT:
            raise ValueError(f"mode must be one of {tuple(TASK_PROMPT)}, got {self.mode!r}")
        if self.on_error not in ("mark", "raise"):
            raise ValueError(f"on_error must be 'mark' or 'raise', got {self.on_error!r}")
        if self.scale <= 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")

    def judge_messages(self, traj: Trajectory, turn: int) -> list[Message]:
        """The chat request that grades turn ``turn`` (or, in trajectory mode, the whole trajectory)."""
        if self.mode == "trajectory":
            conversation = traj.messages
        else:
            conversation = conversation_until(traj, turn, include_observation=self.include_observation)
        system = SYSTEM_PROMPT.format(rubric=self.rubric.strip(), scale=f"{self.scale:g}")
        user = f"Conversation:\n\n{render_conversation(conversation)}\n\n---\n{TASK_PROMPT[self.mode]}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _grade(self, traj: Trajectory, turn: int) -> tuple[float, str | None, str | None]:
        """(score or NaN, the judge's reply, an error message)."""
        try:
            reply = self.client.chat(self.judge_messages(traj, turn), model=self.model, **dict(self.sampling)).text
        except LLMError as e:
            error = f"judge request failed: {e}"
            if self.on_error == "raise":
                raise ScorerError(f"{self.name}: task {traj.task_id!r} turn {turn}: {error}") from e
            return math.nan, None, error
        score = parse_score(reply, self.scale)
        if score is None:
            error = f"no score in the judge's reply: {reply[:200]!r}"
            if self.on_error == "raise":
                raise ScorerError(f"{self.name}: task {traj.task_id!r} turn {turn}: {error}")
            return math.nan, reply, error
        return score, reply, None

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        if self.mode == "turn":
            jobs = [(i, t) for i, traj in enumerate(group) for t in range(len(traj.turns))]
        else:
            jobs = [(i, len(traj.turns) - 1) for i, traj in enumerate(group) if traj.turns]
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(jobs) or 1))) as pool:
            results = list(pool.map(lambda job: self._grade(group[job[0]], job[1]), jobs))
        rewards = [[0.0] * len(traj.turns) for traj in group]
        replies: list[list[str | None]] = [[None] * len(traj.turns) for traj in group]
        errors: list[dict[str, str]] = [{} for _ in group]
        for (i, t), (score, reply, error) in zip(jobs, results, strict=True):
            rewards[i][t] = score
            replies[i][t] = reply
            if error is not None:
                errors[i][str(t)] = error
        return [
            TurnScores(self.name, r, [not math.isnan(x) for x in r], {"replies": rep, "errors": err})
            for r, rep, err in zip(rewards, replies, errors, strict=True)
        ]


# --------------------------------------------------------------------------------------------------------------------
# LLMJudge: the Judge protocol over an OpenAI-compatible endpoint

JUDGE_SYSTEM = (
    "You are a careful, impartial judge. Read the material in the user's message and answer the question at its "
    "end. Think briefly if you need to (at most three sentences), then give your answer in the form below.\n\n"
)
#: What each kind of question asks the judge to end its reply with (``{n}``: a rank question's item count).
KIND_PROMPTS: Mapping[str, str] = {
    "yesno": "End your reply with a line 'Answer: yes' or 'Answer: no'.",
    "score": "Grade from 0 to 10, then end your reply with a line 'Score: N/10'.",
    "compare": "The material holds two items, A and B. End your reply with a line 'Answer: A' (A is better), "
    "'Answer: B' (B is better) or 'Answer: tie'.",
    "rank": "The material holds {n} items, numbered 1 to {n}. Grade each from 0 to 10, then end your reply with one "
    "line 'Scores: s1, s2, ..., s{n}': one grade per item, in order.",
}
EVIDENCE_PROMPT = (
    " Before a yes, quote the exact words of the material that support it on a line of its own: "
    'Evidence: "<the words, copied exactly>".'
)
#: The system prompt of ``answer="logprob"`` (a yes/no question answered by the first token alone).
LOGPROB_SYSTEM = (
    "You are a careful, impartial judge. Read the material in the user's message and answer the question at its "
    "end with one word: yes or no."
)
ANSWER_MODES = ("text", "logprob")

_MARKUP = r"[\s*_`'\"#>:=\-]*"
_ANSWER = re.compile(
    rf"\banswer\b(?:\s+to\s+[^.:\n]{{0,60}}?\s+is\b)?{_MARKUP}(?:is{_MARKUP})?(yes|no)\b", re.IGNORECASE
)
_FIRST_WORD = re.compile(rf"^{_MARKUP}(yes|no)\b", re.IGNORECASE)
_COMPARE = re.compile(rf"(?i:\banswer\b){_MARKUP}(?:(?i:is){_MARKUP})?(?:(?:item|option)\s+)?(A|B|(?i:tie))\b")
_COMPARE_BARE = re.compile(rf"^{_MARKUP}(A|B|(?i:tie))[\s.*!]*$")
_SCORES = re.compile(r"\bscores\b[\s*_:=]*", re.IGNORECASE)
_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?")
_BARE_LIST = re.compile(r"^\s*-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?(?:\s*[,;]\s*-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)+\s*\.?\s*$")
_EVIDENCE = re.compile(r"\bevidence\b[\s*_]*[:=][\s*_]*[\"\u201c](.+?)[\"\u201d]", re.IGNORECASE | re.DOTALL)


def parse_yesno(text: str) -> float | None:
    """A yes/no reply as 1.0/0.0: the last ``Answer: yes|no`` (markdown, ``is`` and ``the answer to ... is``
    allowed), else a reply whose first word is yes or no; None when it holds neither.

    >>> parse_yesno("Answer is no"), parse_yesno("Yes, the agent found it."), parse_yesno("Not sure.")
    (0.0, 1.0, None)
    >>> parse_yesno("The answer to this question is yes."), parse_yesno("The answer to that is unclear; no idea.")
    (1.0, None)
    """
    matches = _ANSWER.findall(text)
    word = matches[-1] if matches else (m.group(1) if (m := _FIRST_WORD.match(text)) else None)
    return None if word is None else float(word.lower() == "yes")


def parse_compare(text: str) -> float | None:
    """A compare reply as P(A is better): ``Answer: A`` 1.0, ``Answer: B`` 0.0, ``Answer: tie`` 0.5 (the last such
    line; A and B are capitals), or a bare ``A``/``B``/``tie`` reply; None otherwise.

    >>> parse_compare("**Answer:** B"), parse_compare("A."), parse_compare("Answer: a tie is unlikely")
    (0.0, 1.0, None)
    """
    matches = _COMPARE.findall(text)
    word = matches[-1] if matches else (m.group(1) if (m := _COMPARE_BARE.match(text)) else None)
    return None if word is None else {"A": 1.0, "B": 0.0}.get(word, 0.5)


def parse_rank(text: str, items: int, scale: float = 10.0) -> tuple[float, ...] | None:
    """A rank reply's grades in [0, 1]: the numbers of the last ``Scores:`` line (``N/M`` read as N/M, a bare N as
    N/``scale``, clamped), or of a bare comma-separated reply; None when there is none or its count is not
    ``items``.

    >>> parse_rank("Item 2 is best. Scores: 2, 9, 4.5", items=3), parse_rank("Scores: 1, 2", items=3)
    ((0.2, 0.9, 0.45), None)
    """
    marks = list(_SCORES.finditer(text))
    tail = text[marks[-1].end() :].split("\n")[0] if marks else (text if _BARE_LIST.match(text) else "")
    grades = []
    for part in re.split(r"[,;]", tail):
        numbers = _NUMBERS.findall(part)
        if not numbers:
            continue
        value, denominator = float(numbers[0]), float(numbers[1]) if len(numbers) > 1 and "/" in part else scale
        if denominator <= 0:
            return None
        grades.append(min(1.0, max(0.0, value / denominator)))
    return tuple(grades) if grades and len(grades) == items else None


def parse_evidence(text: str) -> str | None:
    """The span a reply quotes on its last ``Evidence: "..."`` line (straight or curly quotes), or None.

    >>> parse_evidence('Evidence: "Paris is the capital"\\nAnswer: yes')
    'Paris is the capital'
    """
    matches = _EVIDENCE.findall(text)
    return matches[-1].strip() if matches else None


def yes_no_probabilities(top: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """(P(yes), P(no)) from a token's top log-probs (``[{"token", "logprob"}, ...]``): each side sums the
    probabilities of the listed tokens that read as the word once stripped of spaces and punctuation, any case.

    >>> yes_no_probabilities([{"token": " Yes", "logprob": math.log(0.5)}, {"token": "no", "logprob": math.log(0.25)},
    ...                       {"token": "yes", "logprob": math.log(0.125)}])
    (0.625, 0.25)
    """
    p = {"yes": 0.0, "no": 0.0}
    for entry in top:
        word = str(entry.get("token", "")).strip().strip(".,!:;*\"'`").lower()
        if word in p:
            p[word] += math.exp(float(entry["logprob"]))
    return p["yes"], p["no"]


@dataclass
class LLMJudge:
    """The :class:`~agentgym.rewards.verdicts.Judge` over any OpenAI-compatible endpoint (see the module docstring).

    ``model``: the model to ask (None: the client's default, else the first the endpoint lists). ``answer``:
    ``"text"`` reads the reply; ``"logprob"`` answers a yes/no question from one token, yes iff P(yes) > P(no) among
    the ``top_logprobs`` most likely first tokens (a word that is not listed is less likely than every listed token;
    neither listed: an error verdict); other kinds are always read from text. ``cache_size``: verdicts kept (LRU,
    keyed on the model, the answer mode and the question's kind, prompt, items and evidence; 0: none; errors are
    never kept). ``max_workers``: requests in flight per batch. ``ungrounded``: a yes to an ``evidence`` question
    whose quote is missing or not in the prompt is an error verdict (``"invalid"``) or a no (``"no"``). ``scale``:
    the grade scale of score and rank replies. ``sampling`` goes into every text request (greedy by default).
    Counters (``stats()``): ``requests`` sent, ``cache_hits`` (questions answered by the cache or by an identical
    question of the same batch) and ``failures`` (error verdicts).

    >>> judge = LLMJudge(LLMClient("http://127.0.0.1:8000/v1"), answer="logprob")       # doctest: +SKIP
    >>> judge.ask([Question("yesno", "Is Paris in France?")])[0].value                 # doctest: +SKIP
    1.0
    """

    client: LLMClient
    model: str | None = None
    name: str = "llm"
    answer: Literal["text", "logprob"] = "text"
    cache_size: int = 4096
    max_workers: int = 8
    ungrounded: Literal["invalid", "no"] = "invalid"
    scale: float = 10.0
    top_logprobs: int = 20
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0, "max_tokens": 256})
    requests: int = field(default=0, init=False)
    cache_hits: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    _cache: OrderedDict[tuple[Any, ...], Verdict] = field(default_factory=OrderedDict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _listed_model: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.answer not in ANSWER_MODES:
            raise ValueError(f"answer must be one of {ANSWER_MODES}, got {self.answer!r}")
        if self.ungrounded not in ("invalid", "no"):
            raise ValueError(f"ungrounded must be 'invalid' or 'no', got {self.ungrounded!r}")
        if isinstance(self.cache_size, bool) or self.cache_size < 0 or self.max_workers < 1:
            raise ValueError(f"need cache_size >= 0 and max_workers >= 1, got {self.cache_size}, {self.max_workers}")
        if self.scale <= 0 or not 1 <= self.top_logprobs <= 20:
            raise ValueError(f"need scale > 0 and 1 <= top_logprobs <= 20, got {self.scale}, {self.top_logprobs}")

    def stats(self) -> dict[str, int]:
        """The counters, for a trainer's metrics."""
        with self._lock:
            return {"requests": self.requests, "cache_hits": self.cache_hits, "failures": self.failures}

    def messages(self, question: Question) -> list[Message]:
        """The chat request that asks ``question``."""
        if self.answer == "logprob" and question.kind == "yesno":
            system = LOGPROB_SYSTEM
        else:
            system = JUDGE_SYSTEM + KIND_PROMPTS[question.kind].format(n=question.items)
            if question.evidence and question.kind == "yesno":
                system += EVIDENCE_PROMPT
        return [{"role": "system", "content": system}, {"role": "user", "content": question.prompt}]

    def _key(self, model: str, q: Question) -> tuple[Any, ...]:
        mode = self.answer if q.kind == "yesno" else "text"
        return (model, mode, q.kind, q.prompt, q.items, q.evidence)

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        """One verdict per question, in order (see the class docstring); never raises for a failed request."""
        if not questions:
            return []
        try:
            model = self.model or self.client.model or self._listed_model or self.client.models()[0]
            self._listed_model = model  # the endpoint's model list is read once
        except (LLMError, IndexError) as e:
            with self._lock:
                self.failures += len(questions)
            error = f"judge request failed: no model to ask ({type(e).__name__}: {e})"
            return [Verdict(None, error=error) for _ in questions]
        keys = [self._key(model, q) for q in questions]
        out: list[Verdict | None] = [None] * len(questions)
        todo: dict[tuple[Any, ...], list[int]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                cached = self._cache.get(key)
                if cached is not None:
                    self._cache.move_to_end(key)
                    out[i] = cached
                    self.cache_hits += 1
                elif key in todo:
                    todo[key].append(i)
                    self.cache_hits += 1
                else:
                    todo[key] = [i]
        firsts = [idx[0] for idx in todo.values()]
        if firsts:
            workers = max(1, min(self.max_workers, len(firsts)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                answers = list(pool.map(lambda i: self._ask_one(questions[i], model), firsts))
        else:
            answers = []
        with self._lock:
            self.requests += len(firsts)
            for (key, idx), verdict in zip(todo.items(), answers, strict=True):
                for i in idx:
                    out[i] = verdict
                if verdict.ok:
                    if self.cache_size > 0:
                        self._cache[key] = verdict
                        self._cache.move_to_end(key)
                else:
                    self.failures += len(idx)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return [v for v in out if v is not None]

    def _ask_one(self, question: Question, model: str) -> Verdict:
        logprob = self.answer == "logprob" and question.kind == "yesno"
        sampling = (
            {"temperature": 0.0, "max_tokens": 1, "logprobs": True, "top_logprobs": self.top_logprobs}
            if logprob
            else dict(self.sampling)
        )
        try:
            result = self.client.chat(self.messages(question), model=model, **sampling)
        except LLMError as e:
            return Verdict(None, error=f"judge request failed: {e}")
        if logprob:
            return self._read_logprobs(result.raw)
        return self._read(question, result.text)

    def _read_logprobs(self, raw: Mapping[str, Any]) -> Verdict:
        try:
            first = raw["choices"][0]["logprobs"]["content"][0]
            top = list(first.get("top_logprobs") or []) or [first]
        except (KeyError, IndexError, TypeError):
            return Verdict(None, error="the judge's reply has no log-probs (does the endpoint support logprobs?)")
        p_yes, p_no = yes_no_probabilities(top)
        tokens = ", ".join(repr(str(e.get("token", ""))) for e in top[:5])
        reply = f"P(yes)={p_yes:.4g} P(no)={p_no:.4g}; top first tokens: {tokens}"
        if p_yes == 0.0 and p_no == 0.0:
            return Verdict(None, reply=reply, error=f"neither yes nor no among the {len(top)} most likely first "
                                                    f"tokens (the top ones: {tokens})")  # fmt: skip
        return Verdict(float(p_yes > p_no), reply=reply)

    def _read(self, question: Question, reply: str) -> Verdict:
        value: Value | None
        if question.kind == "yesno":
            value = parse_yesno(reply)
        elif question.kind == "score":
            value = parse_score(reply, self.scale)
        elif question.kind == "compare":
            value = parse_compare(reply)
        else:
            value = parse_rank(reply, question.items, self.scale)
        if value is None:
            return Verdict(None, reply=reply, error=f"no {question.kind} answer in the judge's reply: {reply[:200]!r}")
        evidence = parse_evidence(reply) if question.evidence else None
        needs_quote = question.evidence and question.kind == "yesno" and value == 1.0
        if needs_quote and (evidence is None or not grounded(evidence, question.prompt)):
            why = "quotes no evidence" if evidence is None else f"quotes evidence not in the prompt: {evidence!r}"
            if self.ungrounded == "no":
                return Verdict(0.0, evidence, reply)
            return Verdict(None, evidence, reply, error=f"the judge's yes {why}")
        return Verdict(check_value(question, value), evidence, reply)


# --------------------------------------------------------------------------------------------------------------------
# The env's verified per-turn signal as the rule of a turn question


def turn_signals(traj: Trajectory, key: str = "", mode: SignalMode = "value") -> tuple[list[float | None], str]:
    """The trajectory's verified per-turn signal and where it came from: ``info[key]`` read as ``mode`` (a ``key``
    of ``""`` takes the env's entry of ``TURN_SIGNALS``). Every turn is None, with the reason as the second item,
    when the env has no signal or its values are not numbers.

    >>> from agentgym.contract.trajectory import Turn
    >>> turns = [Turn("a", [], 0.0, False, False, {"correct": True}), Turn("b", [], 1.0, True, False, {})]
    >>> turn_signals(Trajectory("agentgym/Chain-v0", 0, "t", "x", [], {}, turns=turns))
    ([1.0, None], "info['correct']")
    """
    signal = TurnSignal(key, mode) if key else TURN_SIGNALS.get(traj.env_id)
    if signal is None:
        why = f"env {traj.env_id!r} reports no verified turn signal (set signal_key)"
        return [None] * len(traj.turns), why
    where = f"info[{signal.key!r}]" + (" (its increase)" if signal.mode == "delta" else "")
    try:
        return signal.read(traj.reset_info, [t.info for t in traj.turns]), where
    except ValueError as e:
        return [None] * len(traj.turns), f"{where}: {e}"


def signal_rule(signal: float | None, where: str, turn: int, value: Callable[[float], Any]) -> Callable[[], Any]:
    """The rule of a turn question: ``value(signal)``, or a ``ValueError`` naming the turn when it has no signal."""

    def rule() -> Any:
        if signal is None:
            raise ValueError(f"turn {turn} has no verified signal ({where} is None)")
        return value(signal)

    return rule


def render_gold(gold: Any, limit: int = 4000) -> str:
    """The task's gold for a judge's prompt: JSON (keys sorted), cut to ``limit`` characters.

    >>> render_gold({"choices": ["red", "dog"], "decisive": [True, False]})
    '{"choices": ["red", "dog"], "decisive": [true, false]}'
    """
    text = json.dumps(gold, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


DEFAULT_TURN_RUBRIC = "Was the agent's last turn right: did it make progress towards solving the user's task?"

TURN_PROMPT = """Below is a conversation between a user (the environment) and an AI agent, up to the agent's last turn \
and the environment's reply to it.
{gold}
Conversation:

{conversation}

---
Question: {rubric}"""

GOLD_PROMPT = """
The task's reference solution (hidden from the agent; use it to judge the turn):
{gold}
"""


@dataclass
class TurnVerdictScorer(TurnScorer):
    """One yes/no question per turn: "was the agent's turn right / did it make progress?" (``rubric``), asked over
    the conversation up to the turn and the env's reply to it; reward 1.0 for a yes and 0.0 for a no, NaN (invalid)
    where the judge gave no verdict. ``show_gold`` adds the task's gold (``reset_info["gold"]``, rendered as JSON)
    to the judge's prompt only: the policy never sees it. The rule of each question (what ``RuleJudge`` answers) is
    the env's verified turn signal (``signal_key``/``signal_mode``; ``""``: the env's ``TURN_SIGNALS`` entry): yes iff
    it is > 0 (for a ``"delta"`` signal: iff the step increased it); a turn without a signal (a diagnostic's
    distractor stage) has no rule answer, so the rule judge marks it invalid. A group is one judge batch.

    >>> scorer = TurnVerdictScorer(RuleJudge())            # doctest: +SKIP
    >>> scorer([chain_episode])[0].rewards                  # doctest: +SKIP
    [1.0, 0.0]
    """

    #: a trainer keeps one scorer for the run (baselines: ``MethodState.turn_scorer``), so the judge's cache lasts
    #: the run: a turn seen in an earlier iteration (same conversation, same gold) is not asked again
    persistent: ClassVar[bool] = True
    judge: Judge
    rubric: str = DEFAULT_TURN_RUBRIC
    show_gold: bool = True
    signal_key: str = ""
    signal_mode: Literal["value", "delta"] = "value"
    gold_chars: int = 4000
    #: "conversation": the judge reads everything up to the turn and the env's reply to it; "turn": only the
    #: observation the turn answered, the turn and the env's reply (a judge call costs per prompt token: at H = 16
    #: the whole conversation is about 8x the last turn's context)
    context: Literal["conversation", "turn"] = "conversation"
    name: str = "turn_verdict"

    def __post_init__(self) -> None:
        TurnSignal("x", self.signal_mode)  # checks the mode
        if self.context not in ("conversation", "turn"):
            raise ValueError(f"context must be 'conversation' or 'turn', got {self.context!r}")
        if self.gold_chars < 0:
            raise ValueError(f"gold_chars must be >= 0, got {self.gold_chars}")

    def prompt(self, traj: Trajectory, turn: int) -> str:
        """What the judge reads about turn ``turn``."""
        gold = ""
        if self.show_gold and "gold" in traj.reset_info:
            gold = GOLD_PROMPT.format(gold=render_gold(traj.reset_info["gold"], self.gold_chars))
        messages = conversation_until(traj, turn)
        if self.context == "turn":  # the observation answered (the reset's or the previous step's), the turn, the reply
            seen = traj.initial_observation if turn == 0 else traj.turns[turn - 1].observation
            messages = [*seen, {"role": "assistant", "content": traj.turns[turn].action}, *traj.turns[turn].observation]
        conversation = render_conversation(messages)
        return TURN_PROMPT.format(gold=gold, conversation=conversation, rubric=self.rubric.strip())

    def questions(self, traj: Trajectory) -> list[Question]:
        """One yes/no question per turn, each with its rule from the verified signal."""
        signals, where = turn_signals(traj, self.signal_key, self.signal_mode)
        return [Question("yesno", self.prompt(traj, t), rule=signal_rule(s, where, t, lambda x: x > 0))
                for t, s in enumerate(signals)]  # fmt: skip

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for vs in ask_each(self.judge, [self.questions(traj) for traj in group]):
            extras = {"replies": [v.reply for v in vs], "errors": verdict_errors(vs)}
            out.append(TurnScores(self.name, verdict_values(vs), [v.ok for v in vs], extras))
        return out


METHODS: tuple[Method, ...] = (
    Method("judge", "LLM judge", "scorer", "an LLM grades each turn (or the trajectory) against a rubric",
           needs=("judge",), code=f"{__name__}:JudgeScorer",
           choices=("greedy sampling for reproducible grades; an unreadable grade marks the turn invalid",),
           train={"algo": "grpo", "scorer": "judge", "estimator": "gtpo"}, knobs_into="scorer_kwargs"),
    Method("turn_verdict", "MT-GRPO", "scorer",
           "a judge's yes/no per turn (right, progress?) as the turn signal; the rule judge gives the verified one",
           needs=("judge",), paper=cite("MT-GRPO"), code=f"{__name__}:TurnVerdictScorer",
           choices=("one yes/no question per turn over the conversation up to the turn and the env's reply, with the "
                    "task's gold in the judge's prompt only (knob show_gold); reward 1.0 for yes, 0.0 for no",
                    "the rule (what the rule judge answers) is the env's verified turn signal > 0 (for a delta "
                    "signal: the step increased it); a turn without a signal has no rule answer and is invalid",
                    "trained as MT-GRPO's turn signal (turn_signal_source='scorer'): an invalid turn has no signal, as "
                    "a distractor stage has none"),
           train={"algo": "grpo", "scorer": "turn_verdict", "scorer_kwargs": {"judge": "rule"},
                  "estimator": "mt_grpo", "turn_signal_source": "scorer"},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
