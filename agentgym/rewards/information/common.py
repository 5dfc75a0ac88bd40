"""What the information scorers share: the gold and final answers of a trajectory, the scoring tokenizer, and
``TurnScores`` built from per-turn rewards (NaN -> invalid)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.contract.parsing import ParseError, parse_tag_action
from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring import AnswerScorer
from agentgym.rewards.base import TurnScores


def gold_answers(traj: Trajectory) -> list[str]:
    """The gold answer aliases of a trajectory's task (``reset_info["gold"]["answers"]``)."""
    gold = traj.reset_info.get("gold") or {}
    answers = gold.get("answers") if isinstance(gold, dict) else None
    if isinstance(answers, str):
        answers = [answers]
    if not answers:
        raise ValueError(f"trajectory of task {traj.task_id!r} has no reset_info['gold']['answers']")
    return [str(a) for a in answers]


def final_answer(traj: Trajectory, tags: Sequence[str] = ("search", "answer")) -> str | None:
    """The content of the last action's ``<answer>`` tag (as the env parses it), or None when it has none."""
    if not traj.turns:
        return None
    try:
        parsed = parse_tag_action(traj.turns[-1].action, tags)
    except ParseError:
        return None
    return parsed.content if parsed.tag == "answer" else None


def _tokenizer_of(scorer: AnswerScorer, tokenizer: Any) -> Any:
    tok = tokenizer if tokenizer is not None else getattr(scorer, "tokenizer", None)
    if tok is None:
        raise ValueError("pass the tokenizer that renders trajectories for the scoring model (tokenizer=...)")
    return tok


def _scores(name: str, rewards: Sequence[float], extras: dict[str, Any]) -> TurnScores:
    rewards = [float(r) for r in rewards]
    return TurnScores(name, rewards, [math.isfinite(r) for r in rewards], extras)


def _floats(values: Sequence[float] | np.ndarray) -> list[float | None]:
    """JSON-friendly list: NaN -> None."""
    return [None if not math.isfinite(float(v)) else float(v) for v in values]
