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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import ScorerError, TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
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


METHODS: tuple[Method, ...] = (
    Method("judge", "LLM judge", "scorer", "an LLM grades each turn (or the trajectory) against a rubric",
           needs=("judge",), code=f"{__name__}:JudgeScorer",
           choices=("greedy sampling for reproducible grades; an unreadable grade marks the turn invalid",),
           train={"algo": "grpo", "scorer": "judge", "estimator": "gtpo"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
