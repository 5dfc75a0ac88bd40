"""CALM: subgoal achievements judged per transition, paid once each, as turn rewards.

A task is decomposed into subgoals once (``decomposition``: by default the env's own, ``reset_info["gold"]
["subgoals"]``: Household-v0's planner gives ``{"text", "require"}`` per subgoal with ``state_facts=True``; or any
callable ``decompose(trajectory) -> [subgoal]``, e.g. an LLM's list, where a subgoal without ``require`` is a bare
text). For every turn t and subgoal k the judge is asked the yes/no :class:`~agentgym.rewards.verdicts.Question`
"did this transition achieve subgoal k?" (the task, the subgoal, the observation before, the action and the
observation after). A subgoal pays when first achieved:

    r_t = beta * #{k : the judge's first yes for k is at turn t}

so each subgoal pays at most once and an episode earns at most beta * #subgoals. The question's ``rule`` (what
``RuleJudge`` answers) reads the env's verified state: subgoal k's requirements hold on ``info["state_facts"]``
after turn t and did not before it (a requirement ``{"name", "attributes", "count"}`` holds when at least ``count``
objects of that name have those attribute values). A verdict the judge could not give (value None) makes every
turn whose reward depends on it invalid (NaN), from that turn up to the subgoal's first yes after it: never a
silent 0.

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> take = {"text": "take an apple", "require": [{"name": "apple", "attributes": {"location": "agent"}}]}
>>> def facts(where): return {"state_facts": [{"name": "apple", "attributes": {"location": where}}]}
>>> steps = [("go to table 1", "table"), ("take apple 1", "agent"), ("put apple 1", "table"), ("take apple 1", "agent")]
>>> turns = [Turn(a, [], 0.0, False, False, facts(w)) for a, w in steps]
>>> t = Trajectory("e", 0, "t", "a", [], {"gold": {"subgoals": [take]}, **facts("table")}, turns=turns)
>>> SubgoalScorer(beta=0.5)([t])[0].rewards   # paid at the first take only
[0.0, 0.5, 0.0, 0.0]
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.text_features import observation_text
from agentgym.rewards.verdicts import Judge, Question, RuleJudge
from agentgym.tools.llm import LLMClient, LLMError

Subgoal = Mapping[str, Any]

DECOMPOSE_PROMPT = (
    "Break the task below into the few subgoals an agent must achieve, in order. Write one short subgoal per line and "
    "nothing else.\n\nTask:\n{task}"
)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\(?\d+[.):])\s*")


def requirements_met(require: Sequence[Mapping[str, Any]], facts: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every requirement holds on ``facts``: at least ``count`` (default 1) objects named ``name`` with all of
    ``attributes``' values.

    >>> requirements_met([{"name": "mug", "attributes": {"location": "agent"}}],
    ...                  [{"name": "mug", "attributes": {"location": "agent", "temperature": "hot"}}])
    True
    """
    for req in require:
        want = dict(req.get("attributes", {}))
        have = sum(1 for f in facts if f.get("name") == req["name"]
                   and all(f.get("attributes", {}).get(k) == v for k, v in want.items()))  # fmt: skip
        if have < int(req.get("count", 1)):
            return False
    return True


def _text(subgoal: Subgoal | str) -> str:
    return subgoal if isinstance(subgoal, str) else str(subgoal["text"])


def first_yes(verdicts: Sequence[float | None]) -> tuple[int | None, list[int]]:
    """The turn of the first yes of one subgoal's per-turn verdicts (1.0 yes, 0.0 no, None unknown), and the turns
    made invalid by unknown verdicts: from the first None up to the first yes after it (inclusive), or to the end.

    >>> first_yes([0.0, 1.0, 1.0]), first_yes([0.0, None, 0.0, 1.0]), first_yes([None, 0.0])
    ((1, []), (None, [1, 3]), (None, [0]))
    """
    uncertain: list[int] = []
    for t, v in enumerate(verdicts):
        if v is None:
            uncertain.append(t)
        elif v == 1.0:
            if uncertain:
                return None, [*uncertain, t]
            return t, []
    return None, uncertain


def parse_subgoals(reply: str, limit: int = 8) -> list[str]:
    """The subgoals of a model's reply: one per non-empty line, list markers and numbering removed, at most ``limit``.

    >>> parse_subgoals("1. Take the apple.\\n2) Heat it\\n\\n- put it on the table")
    ['Take the apple.', 'Heat it', 'put it on the table']
    """
    lines = [_BULLET.sub("", line).strip() for line in reply.splitlines()]
    return [line for line in lines if line][:limit]


@dataclass
class LLMDecomposer:
    """CALM's decomposition by a model: asks ``client`` once per task (the trajectory's first message, which holds
    no gold) for its subgoals, one per line (:func:`parse_subgoals`), and caches them by task id. A failed request or
    an empty list gives None (the scorer marks that trajectory invalid)."""

    client: LLMClient
    model: str | None = None
    limit: int = 8
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0, "max_tokens": 256})
    _cache: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False)

    def __call__(self, traj: Trajectory) -> list[str] | None:
        if traj.task_id not in self._cache:
            prompt = DECOMPOSE_PROMPT.format(task=observation_text(traj.initial_observation))
            try:
                reply = self.client.chat([{"role": "user", "content": prompt}], model=self.model,
                                         **dict(self.sampling)).text  # fmt: skip
            except LLMError:
                return None
            found = parse_subgoals(reply, self.limit)
            if not found:
                return None
            self._cache[traj.task_id] = found
        return list(self._cache[traj.task_id])


@dataclass
class SubgoalScorer(TurnScorer):
    """CALM's turn rewards (see the module docstring). ``judge``: any :class:`~agentgym.rewards.verdicts.Judge`
    (None: ``RuleJudge``, the verified variant); ``beta``: the reward per achieved subgoal; ``subgoals_key`` /
    ``facts_key``: where the decomposition (in ``reset_info["gold"]``) and the state facts (in each info) are;
    ``decompose``: a callable giving a trajectory's subgoals (None: unknown) instead of the gold ones;
    ``decomposition="llm"`` makes it an :class:`LLMDecomposer` over ``client`` (the trainer builds the client from
    ``scorer_kwargs["client"]``)."""

    judge: Judge | None = None
    beta: float = 0.1
    name: str = "calm"
    subgoals_key: str = "subgoals"
    facts_key: str = "state_facts"
    decomposition: str = "gold"
    client: LLMClient | None = None
    decompose: Callable[[Trajectory], Sequence[Subgoal | str] | None] | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.beta):
            raise ValueError(f"beta must be finite, got {self.beta}")
        if self.decomposition not in ("gold", "llm"):
            raise ValueError(f"decomposition must be 'gold' or 'llm', got {self.decomposition!r}")
        if self.decomposition == "llm" and self.decompose is None:
            if self.client is None:
                raise ValueError("decomposition='llm' needs a client (scorer_kwargs['client']: an endpoint)")
            self.decompose = LLMDecomposer(self.client)

    def subgoals(self, traj: Trajectory) -> list[Subgoal | str] | None:
        """The trajectory's decomposition: ``decompose(traj)`` (None: it failed), else
        ``reset_info["gold"][subgoals_key]``."""
        if self.decompose is not None:
            found = self.decompose(traj)
            return None if found is None else list(found)
        gold = traj.reset_info.get("gold", {})
        if self.subgoals_key not in gold:
            raise KeyError(f"{self.name}: reset_info['gold'] has no {self.subgoals_key!r} (Household-v0: "
                           "state_facts=True) and no decompose callable was given")  # fmt: skip
        return list(gold[self.subgoals_key])

    def question(self, traj: Trajectory, t: int, subgoal: Subgoal | str) -> Question:
        """Did turn ``t`` of ``traj`` achieve ``subgoal``? (the rule: its requirements hold after and not before)."""
        before = traj.turns[t - 1].observation if t else traj.initial_observation
        task = observation_text(traj.initial_observation)
        prompt = (f"Task:\n{task}\n\nSubgoal: {_text(subgoal)}\n\nObservation before the step:\n"
                  f"{observation_text(before)}\n\nThe agent's action:\n{traj.turns[t].action}\n\n"
                  f"Observation after the step:\n{observation_text(traj.turns[t].observation)}\n\n"
                  "Did this step achieve the subgoal (not achieved before it, achieved after it)?")  # fmt: skip
        rule = None
        if not isinstance(subgoal, str) and "require" in subgoal:
            require = list(subgoal["require"])
            prev = traj.turns[t - 1].info if t else traj.reset_info
            info, key = traj.turns[t].info, self.facts_key

            def rule() -> bool:
                return requirements_met(require, info[key]) and not requirements_met(require, prev[key])

        return Question("yesno", prompt, rule=rule)

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        judge = self.judge if self.judge is not None else RuleJudge()
        found = [self.subgoals(traj) for traj in group]
        plans = [p or [] for p in found]
        jobs = [(i, t, k) for i, traj in enumerate(group) for k in range(len(plans[i])) for t in range(len(traj.turns))]
        verdicts = judge.ask([self.question(group[i], t, plans[i][k]) for i, t, k in jobs]) if jobs else []
        if len(verdicts) != len(jobs):
            raise ValueError(f"{self.name}: the judge gave {len(verdicts)} verdicts for {len(jobs)} questions")
        table: dict[tuple[int, int], list[float | None]] = {}
        for (i, _, k), v in zip(jobs, verdicts, strict=True):
            table.setdefault((i, k), []).append(None if v.value is None else float(v.value))  # type: ignore[arg-type]
        out = []
        for i, traj in enumerate(group):
            if found[i] is None:  # no decomposition: nothing can be scored
                nan = [math.nan] * len(traj.turns)
                out.append(TurnScores(self.name, nan, [False] * len(traj.turns), {"subgoals": None, "achieved_at": []}))
                continue
            rewards = [0.0] * len(traj.turns)
            valid = [True] * len(traj.turns)
            achieved: list[int | None] = []
            for k in range(len(plans[i])):
                at, unknown = first_yes(table.get((i, k), []))
                achieved.append(at)
                if at is not None:
                    rewards[at] += self.beta
                for t in unknown:
                    valid[t] = False
            rewards = [r if ok else math.nan for r, ok in zip(rewards, valid, strict=True)]
            texts = [_text(s) for s in plans[i]]
            out.append(TurnScores(self.name, rewards, valid, {"subgoals": texts, "achieved_at": achieved}))
        return out


METHODS: tuple[Method, ...] = (
    Method("calm", "CALM", "scorer", "beta per subgoal on the turn a judge says first achieves it",
           needs=("judge", "segments"), paper=cite("CALM"), code=f"{__name__}:SubgoalScorer",
           choices=("each subgoal pays once, on its first yes (knob beta, default 0.1)",
                    "decomposition: the env's planner subgoals (Household-v0 state_facts=True; decomposition='gold') "
                    "or a model's list, asked once per task over scorer_kwargs['client'] (decomposition='llm')",
                    "rule judge: the subgoal's requirements hold on the state facts after the turn and not before",
                    "a failed verdict invalidates the turns from it to the subgoal's next yes"),
           train={"algo": "grpo", "env_id": "agentgym/Household-v0",
                  "env_kwargs": {"split": "train", "state_facts": True}, "scorer": "calm", "estimator": "gtpo"},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
