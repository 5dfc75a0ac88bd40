"""QG/QA auxiliary shaping (EAGER): cloze questions about the goal, answered from the trajectory by a QA model.

Question generation: the language goal with one of its entity or attribute spans masked (``___``), one question per
span found in it. Household-v0: the goal is ``gold["description"]``, the spans the goal's object and receptacle and,
with ``state_facts=True``, the attribute values of ``gold["goal_facts"]`` ("hot", "clean"); SearchQA-v0: the
question (after ``Question:`` in the prompt), the spans its chain's entities (``gold["hop_entities"]``).

Question answering: an :class:`~agentgym.rewards.answer_scoring.AnswerScorer` (the policy as ``LocalAnswerScorer``,
by default in the trainer) scores each candidate answer c after the trajectory and the question,
``log p(c | trajectory, question)`` (the mean over c's tokens, ``length_norm=True``, or their sum). The trajectory is
rendered *without* its first message, which states the goal, so the answers must come from what the agent did and
saw. The candidates are every question's answer plus, as distractors, the names and attribute values of the reset's
``info["state_facts"]`` (Household-v0, ``state_facts=True``) or the chain's entities and answers (SearchQA-v0): they
depend on the task only, so the G rollouts of a group answer the same multiple choice (with fewer than two candidates
there is no question). p(c) is the softmax of the scores over the candidates. Once, on the last turn:

    r = coef * sum over questions q of 1[argmax_c p(c) = a_q] * p(a_q)      (0 <= r <= coef * #questions)

A question whose scores are NaN (a failed back-end) makes the reward invalid; a goal without a span gives 0.

>>> for question, answer in cloze_questions("put a hot cup in countertop.", ["cup", "countertop", "hot"]):
...     print(question, "->", answer)
put a hot ___ in countertop. -> cup
put a hot cup in ___. -> countertop
put a ___ cup in countertop. -> hot
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring import AnswerScorer, encode_suffix, render_trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.text_features import observation_text

#: What replaces the trajectory's first message (the goal) in the QA model's context.
EPISODE_NOTE = "Here is what an agent did and saw."
QUESTION_PROMPT = "Fill in the blank about the agent's task: {question}\nAnswer: "


def _find(span: str, text: str) -> re.Match[str] | None:
    return re.search(rf"(?<!\w){re.escape(span)}(?!\w)", text, flags=re.IGNORECASE)


def cloze_questions(goal: str, spans: Sequence[str]) -> list[tuple[str, str]]:
    """``(question, answer)`` per distinct span found in ``goal`` (case-insensitive, on word boundaries): the goal
    with the span's first occurrence replaced by ``___``; the answer is the span as the goal writes it."""
    out, seen = [], set()
    for span in spans:
        m = _find(span.strip(), goal) if span.strip() else None
        if m is None or m.group().lower() in seen:
            continue
        seen.add(m.group().lower())
        out.append((goal[: m.start()] + "___" + goal[m.end() :], m.group()))
    return out


def goal_and_spans(traj: Trajectory) -> tuple[str, list[str]]:
    """The trajectory's language goal and the spans to mask (see the module docstring)."""
    gold = traj.reset_info.get("gold", {})
    if "description" in gold:
        spans = [gold.get("object") or "", gold.get("receptacle") or ""]
        for fact in gold.get("goal_facts", ()):
            spans += [str(v) for k, v in fact.get("attributes", {}).items() if k not in ("location", "reachable")]
        return str(gold["description"]), spans
    prompt = observation_text(traj.initial_observation)
    goal = prompt.rsplit("Question:", 1)[-1].strip()
    return goal, [str(e) for e in gold.get("hop_entities", ())]


def distractors(traj: Trajectory) -> list[str]:
    """Task-level wrong candidates: the names and attribute values of the reset's state facts (Household-v0) and the
    chain's entities and answers (SearchQA-v0); never anything a rollout did, so siblings face the same choice."""
    gold = traj.reset_info.get("gold", {})
    out = [str(x) for key in ("hop_entities", "hop_answers", "answers") for x in gold.get(key, ())]
    for fact in traj.reset_info.get("state_facts", ()):
        out.append(str(fact.get("name", "")))
        out += [str(v) for v in fact.get("attributes", {}).values()]
    return out


@dataclass
class GoalQAScorer(TurnScorer):
    """EAGER's QG/QA reward (see the module docstring). ``scorer``: the QA model (the trainer passes the policy);
    ``tokenizer``: its tokenizer (default: the scorer's); ``coef``: the weight; ``length_norm``: mean (True) or
    sum of the candidate's token log-probs; ``use_distractors``: add the state facts' words to the candidates."""

    scorer: AnswerScorer
    tokenizer: Any = None
    coef: float = 1.0
    length_norm: bool = True
    use_distractors: bool = True
    name: str = "goal_qa"

    def questions(self, traj: Trajectory) -> tuple[list[tuple[str, str]], list[str]]:
        """The trajectory's cloze questions and the candidate answers."""
        goal, spans = goal_and_spans(traj)
        qs = cloze_questions(goal, spans)
        cands = [a for _, a in qs] + (distractors(traj) if self.use_distractors else [])
        cands = list(dict.fromkeys(c for c in cands if c.strip()))
        return (qs, cands) if len(cands) >= 2 else ([], cands)  # one candidate would always be "right"

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        tok = self.tokenizer if self.tokenizer is not None else getattr(self.scorer, "tokenizer", None)
        if tok is None:
            raise ValueError("pass the tokenizer that renders trajectories for the QA model (tokenizer=...)")
        plans, items = [], []
        for traj in group:
            qs, cands = self.questions(traj)
            plans.append((qs, cands))
            if not traj.turns or not qs:
                continue
            blind = dataclasses.replace(traj, initial_observation=[{"role": "user", "content": EPISODE_NOTE}])
            rendered = render_trajectory(blind, tok)
            lead = rendered.generation_prompt
            suffixes = [encode_suffix(tok, [(lead + QUESTION_PROMPT.format(question=q), False), (c, True)])
                        for q, _ in qs for c in cands]  # fmt: skip
            items.append((rendered.ids, [len(rendered.ids)] * len(suffixes), suffixes))
        results = iter(self.scorer.logprobs_many(items) if items else [])
        out = []
        for traj, (qs, cands) in zip(group, plans, strict=True):
            rewards = [0.0] * len(traj.turns)
            extras: dict[str, Any] = {"questions": [q for q, _ in qs], "answers": [a for _, a in qs],
                                      "candidates": cands, "p": [], "correct": []}  # fmt: skip
            if not traj.turns or not qs:
                out.append(TurnScores(self.name, rewards, extras=extras))
                continue
            lps = next(results)
            agg = np.array([float(np.mean(lp) if self.length_norm else np.sum(lp)) for lp in lps], dtype=np.float64)
            scores = agg.reshape(len(qs), len(cands))
            total = 0.0
            for (_, answer), row in zip(qs, scores, strict=True):
                if not np.all(np.isfinite(row)):
                    total = math.nan
                    extras["p"].append(None)
                    extras["correct"].append(None)
                    continue
                p = np.exp(row - row.max())
                p /= p.sum()
                k = cands.index(answer)
                right = int(np.argmax(row)) == k
                extras["p"].append(float(p[k]))
                extras["correct"].append(right)
                total += float(p[k]) if right else 0.0
            rewards[-1] = self.coef * total
            valid = [True] * (len(rewards) - 1) + [math.isfinite(rewards[-1])]
            out.append(TurnScores(self.name, rewards, valid, extras))
        return out


METHODS: tuple[Method, ...] = (
    Method("goal_qa", "QG/QA auxiliary shaping", "scorer",
           "cloze questions masking the goal's entity spans, answered from the trajectory: sum of 1[right] * p(answer)",
           needs=("scoring_model",), paper=cite("QG/QA auxiliary shaping"), code=f"{__name__}:GoalQAScorer",
           choices=("paid once, on the last turn: coef * sum_q 1[argmax = a_q] * p(a_q) (knob coef)",
                    "QA model: the scoring model's log p(candidate | trajectory without its goal message, question); "
                    "mean over the candidate's tokens (knob length_norm)",
                    "candidates, the same for a whole group: every question's answer plus the reset's state-fact "
                    "words or the chain's entities and answers (knob use_distractors); p = softmax over them",
                    "spans: Household's goal object, receptacle and goal attribute values; SearchQA's chain "
                    "entities"),
           train={"algo": "grpo", "scorer": "goal_qa", "estimator": "gtpo"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
