"""CM2 checklist rewards: each user turn's intended behaviour as fine-grained yes/no criteria with evidence.

A :class:`Checklist` belongs to one user turn (the agent turns that answer one user message): its ``criteria``, each a
:class:`Criterion` (what must hold, the evidence that would show it, and for the verified variant a ``rule`` that
decides it from gold). :class:`ChecklistScorer` asks its judge one ``yesno`` question per criterion, with
``evidence=True``: a model judge must quote a span of the conversation that shows a yes. A yes whose quoted span does
not occur in the conversation counts as no (evidence grounding); a verdict the judge could not give makes the reward
it feeds invalid (NaN), never a silent 0.

The reward is the share of the trajectory's criteria met ("sparse reward assignment, dense evaluation criteria"):
``assign="end"`` pays it on the last turn; ``assign="turn"`` pays each user turn's met criteria divided by the total
number of criteria on that user turn's last agent turn, so the turn rewards sum to the end reward. Weights are uniform.

Checklists come from a builder, a function of the trajectory: :func:`tool_use_checklists` derives the verified
ToolUse-v0 checklist from the env's gold (``reset_info["gold"]``: the task's instructions, their gold calls and facts)
and its state checks (``info["state_check"]``), with rule closures; any callable returning checklists (say, ones an
LLM wrote offline) plugs in the same way.

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> from agentgym.rewards.verdicts import RuleJudge
>>> turn = Turn("The balance is $12.00.", [], 1.0, True, False, {})
>>> traj = Trajectory("e", 0, "t", "a", [{"role": "user", "content": "Balance?"}], {}, turns=[turn])
>>> said = Criterion("The reply states the balance, 12.00.", rule=lambda: "12.00" in turn.action)
>>> polite = Criterion("The reply thanks the user.", rule=lambda: "thank" in turn.action.lower())
>>> scorer = ChecklistScorer(RuleJudge(), lambda t: [Checklist(0, "Balance?", (said, polite))])
>>> scorer([traj])[0].rewards
[0.5]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.contract.parsing import ParseError, parse_tool_calls
from agentgym.contract.trajectory import Trajectory
from agentgym.grading.facts import states
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.judge import conversation_until, render_conversation
from agentgym.rewards.papers import cite
from agentgym.rewards.verdicts import Judge, Question, RuleJudge, Verdict, grounded

Assign = Literal["end", "turn"]
Scope = Literal["agent", "all"]

DEFAULT_EVIDENCE = "a quote from the conversation that shows it"

QUESTION = (
    "You check one criterion of an AI agent's behaviour in a conversation.\n\nConversation:\n\n{conversation}\n\n"
    "---\nThe user's request: {request}\nCriterion: {criterion}\nRequired evidence: {evidence}\n\n"
    "Answer yes only if the conversation shows the criterion is met, and quote, word for word, the span of the "
    "conversation that shows it."
)


@dataclass(frozen=True)
class Criterion:
    """One yes/no criterion: ``text`` (what must hold), ``evidence`` (what would show it), ``rule`` (the answer from
    gold, for a rule judge; never rendered), ``category`` and ``weight`` (the human weight h_k POW3R reads)."""

    text: str
    evidence: str = DEFAULT_EVIDENCE
    rule: Callable[[], bool] | None = None
    category: str = "default"
    weight: float = 1.0


@dataclass(frozen=True)
class Checklist:
    """The criteria of one user turn: ``turn`` is the index of the agent turn that ends it (where ``assign="turn"``
    pays; the judge sees the conversation up to it), ``request`` the user's message."""

    turn: int
    request: str
    criteria: tuple[Criterion, ...]


ChecklistBuilder = Callable[[Trajectory], Sequence[Checklist]]


def evidence_text(traj: Trajectory, turn: int, scope: Scope = "agent") -> str:
    """The text a quoted span must occur in: the agent's actions and the tool results up to turn ``turn``
    (``scope="agent"``), or the whole conversation up to it, system prompt and user messages included (``"all"``)."""
    messages = conversation_until(traj, turn) if traj.turns else list(traj.initial_observation)
    if scope == "agent":
        messages = [m for m in messages[len(traj.initial_observation) :] if m.get("role") in ("assistant", "tool")]
    return "\n".join(str(m.get("content") or "") for m in messages)


def met(verdict: Verdict, text: str, require_quote: bool = False) -> float:
    """A criterion's score from its verdict: 1.0 for a grounded yes, 0.0 for a no or an ungrounded yes, NaN for no
    verdict. A yes with a quote counts only if the quote occurs in ``text``; a yes without one counts unless
    ``require_quote`` (a rule judge quotes nothing; ``LLMJudge`` already makes an unquoted yes an error or a no, and
    its ``answer="logprob"`` mode reads no quote at all)."""
    if verdict.value is None:
        return math.nan
    if float(verdict.value) < 0.5:  # type: ignore[arg-type]
        return 0.0
    if verdict.evidence is not None:
        return float(grounded(verdict.evidence, text))
    return 0.0 if require_quote else 1.0


def user_turn_ends(traj: Trajectory) -> list[int]:
    """The agent turns that end a user turn: each turn the env answers with a user message, and the last turn.

    >>> from agentgym.contract.trajectory import Turn
    >>> turns = [Turn(a, obs, 0.0, False, False, {}) for a, obs in
    ...          [("call", [{"role": "tool", "content": "ok"}]), ("done", [{"role": "user", "content": "Next."}]),
    ...           ("call", [])]]
    >>> user_turn_ends(Trajectory("e", 0, "t", "a", [], {}, turns=turns))
    [1, 2]
    """
    ends = [i for i, t in enumerate(traj.turns) if any(m.get("role") == "user" for m in t.observation)]
    if traj.turns and (not ends or ends[-1] != len(traj.turns) - 1):
        ends.append(len(traj.turns) - 1)
    return ends


# -- the verified ToolUse-v0 checklists ---------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=1e-6)
    return bool(a == b)


def _successful_calls(traj: Trajectory, turns: range) -> list[tuple[str, Mapping[str, Any]]]:
    """The calls of ``turns`` that the env ran without an error: (name, arguments), in order."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for t in turns:
        turn = traj.turns[t]
        try:
            calls = parse_tool_calls(turn.action)
        except ParseError:
            continue
        results = [m for m in turn.observation if m.get("role") == "tool"]
        if len(results) != len(calls):
            continue
        for call, result in zip(calls, results, strict=True):
            if not str(result.get("content", "")).startswith("Error"):
                out.append((call.name, call.arguments))
    return out


def _called(traj: Trajectory, turns: range, gold: Mapping[str, Any]) -> Callable[[], bool]:
    def rule() -> bool:
        args = gold["arguments"]
        return any(name == gold["name"] and set(a) == set(args) and all(_same(a[k], args[k]) for k in args)
                   for name, a in _successful_calls(traj, turns))  # fmt: skip

    return rule


def _state_matched(check: Mapping[str, Any] | None) -> Callable[[], bool]:
    return lambda: bool(check and check["state_match"])


def _stated(traj: Trajectory, end: int | None, fact: str) -> Callable[[], bool]:
    return lambda: end is not None and states(traj.turns[end].action, fact)


def _asked_first(traj: Trajectory, turns: range) -> Callable[[], bool]:
    def rule() -> bool:  # the turn the env took as the ask: a question, asked before the world changed
        asked = [t for t in turns if traj.turns[t].info.get("asked_first") is not None]
        return bool(asked) and traj.turns[asked[0]].info["asked_first"] is True and "?" in traj.turns[asked[0]].action

    return rule


#: ToolUse-v0's lookups: tools that read the world and never change it (an instruction made of these alone gets no
#: outcome criterion, since leaving the world alone would meet it).
LOOKUPS = frozenset({"pwd", "ls", "cat", "find", "list_accounts", "get_balance", "get_statement", "list_events",
                     "find_events", "free_slots", "list_todos"})  # fmt: skip


def tool_use_checklists(traj: Trajectory) -> list[Checklist]:
    """The verified checklist of a ToolUse-v0 episode, one per instruction, from ``reset_info["gold"]`` and the state
    checks the env reports: for each instruction, one criterion per gold call ("called NAME with these arguments",
    met by a call the env ran without an error in that instruction's turns), one that the world's outcome matches the
    gold replay's (the env's ``state_check``) where the instruction changes the world (it makes a call other than a
    lookup: ``get_*``, ``list_*``, ``read_*``, ``find_*``, ``search_*``), one per fact the reply must state, and, for
    the instruction a held variant withholds something from, one that the agent asked before acting. An instruction
    the episode never reached keeps its criteria, unmet (its checklist sits on the last turn).

    ``ValueError`` for a trajectory without ToolUse's gold."""
    gold = traj.reset_info.get("gold")
    if not isinstance(gold, dict) or "task" not in gold or "instructions" not in gold["task"]:
        raise ValueError(f"the 'tool_use' checklists need ToolUse-v0's reset_info['gold'] (env {traj.env_id!r} "
                         "gives none); pass another checklist builder")  # fmt: skip
    task, hold = gold["task"], gold.get("hold")
    checks = {t: turn.info["state_check"] for t, turn in enumerate(traj.turns) if "state_check" in turn.info}
    ends = sorted(checks)
    last = max(len(traj.turns) - 1, 0)
    out = []
    start = 0
    for k, ins in enumerate(task["instructions"]):
        end = ends[k] if k < len(ends) else None
        turns = range(start, (end + 1) if end is not None else start)
        check = checks[end] if end is not None else None
        criteria = []
        seen: list[Mapping[str, Any]] = []
        for call in ins["calls"]:
            if call in seen:
                continue
            seen.append(call)
            args = ", ".join(f"{a}={v!r}" for a, v in call["arguments"].items())
            criteria.append(Criterion(f"The agent called {call['name']}({args}) and it succeeded.",
                                      "the tool call and the tool message with its result",
                                      _called(traj, turns, call), "calls"))  # fmt: skip
        if any(c["name"] not in LOOKUPS for c in ins["calls"]):
            criteria.append(Criterion(f"After this request the user's {task['world']} is exactly as they asked.",
                                      "the tool results that made the change", _state_matched(check),
                                      "outcome"))  # fmt: skip
        for fact in ins["facts"]:
            criteria.append(Criterion(f"The agent's reply tells the user {fact}.", "the sentence of the reply that "
                                      "states it", _stated(traj, end, fact), "facts"))  # fmt: skip
        if hold and hold["instruction"] == k:
            what = "value" if hold["kind"] == "param" else f"function {hold['function']}"
            criteria.append(Criterion(f"The agent asked the user for the missing {what} before changing anything.",
                                      "the agent's question", _asked_first(traj, turns), "ask"))  # fmt: skip
        out.append(Checklist(end if end is not None else last, ins["text"], tuple(criteria)))
        start = turns.stop
    return out


#: Checklist builders by name (what ``ChecklistScorer(checklists=NAME)`` and ``--set`` accept).
CHECKLISTS: Mapping[str, ChecklistBuilder] = {"tool_use": tool_use_checklists}


def checklist_builder(checklists: str | ChecklistBuilder) -> ChecklistBuilder:
    """The builder ``checklists`` names (a key of :data:`CHECKLISTS`), or ``checklists`` itself if callable."""
    if callable(checklists):
        return checklists
    if checklists not in CHECKLISTS:
        raise ValueError(f"unknown checklists {checklists!r}; known: {', '.join(CHECKLISTS)} (or a callable)")
    return CHECKLISTS[checklists]


def rule_judge() -> Judge:
    """The default judge of the checklist methods: :class:`RuleJudge` (the verified variant)."""
    return RuleJudge()


@dataclass
class CriterionScores:
    """One trajectory's checklist results: per criterion (flattened over its checklists, in order) its text, score
    (1.0, 0.0, NaN where the judge gave no verdict), weight, category and the agent turn it belongs to."""

    texts: list[str]
    scores: list[float]
    weights: list[float]
    categories: list[str]
    turns: list[int]
    evidence: list[str | None]
    errors: dict[str, str]


@dataclass
class ChecklistScorer(TurnScorer):
    """CM2: the share of checklist criteria met (see the module docstring).

    ``judge`` answers the criteria (the rule judge by default: the verified variant); ``checklists`` is a builder or
    a name of :data:`CHECKLISTS`; ``assign`` ``"end"`` or ``"turn"``; ``scope`` the text a quote must occur in
    (:func:`evidence_text`); ``require_quote`` whether a yes without a quote counts as no. Per-criterion scores go to
    ``TurnScores.extras["criteria"]``."""

    judge: Judge = field(default_factory=rule_judge)
    checklists: str | ChecklistBuilder = "tool_use"
    assign: Assign = "end"
    scope: Scope = "agent"
    require_quote: bool = False
    name: str = "checklist"

    def __post_init__(self) -> None:
        if self.assign not in ("end", "turn"):
            raise ValueError(f"assign must be 'end' or 'turn', got {self.assign!r}")
        if self.scope not in ("agent", "all"):
            raise ValueError(f"scope must be 'agent' or 'all', got {self.scope!r}")
        self._build = checklist_builder(self.checklists)

    def question(self, traj: Trajectory, checklist: Checklist, criterion: Criterion) -> Question:
        """The yes/no question for one criterion: the conversation up to the checklist's turn, the request, the
        criterion and the evidence it needs (the rule rides along for a rule judge)."""
        conversation = conversation_until(traj, checklist.turn) if traj.turns else traj.initial_observation
        prompt = QUESTION.format(conversation=render_conversation(conversation), request=checklist.request,
                                 criterion=criterion.text, evidence=criterion.evidence)  # fmt: skip
        return Question("yesno", prompt, evidence=True, rule=criterion.rule)

    def criterion_scores(self, group: Sequence[Trajectory]) -> list[CriterionScores]:
        """Every trajectory's per-criterion results, from one batch of questions to the judge."""
        lists = [list(self._build(traj)) if traj.turns else [] for traj in group]
        questions = [self.question(traj, cl, c) for traj, cls in zip(group, lists, strict=True) for cl in cls
                     for c in cl.criteria]  # fmt: skip
        verdicts = iter(self.judge.ask(questions) if questions else [])
        out = []
        for traj, cls in zip(group, lists, strict=True):
            texts = {cl.turn: evidence_text(traj, cl.turn, self.scope) for cl in cls}
            res = CriterionScores([], [], [], [], [], [], {})
            for cl in cls:
                for c in cl.criteria:
                    v = next(verdicts)
                    if v.error is not None:
                        res.errors[str(len(res.scores))] = v.error
                    res.texts.append(c.text)
                    res.scores.append(met(v, texts[cl.turn], self.require_quote))
                    res.weights.append(c.weight)
                    res.categories.append(c.category)
                    res.turns.append(cl.turn)
                    res.evidence.append(v.evidence)
            out.append(res)
        return out

    def turn_scores(self, traj: Trajectory, res: CriterionScores, values: Sequence[float], total: float) -> TurnScores:
        """Place per-criterion ``values`` on the turns by ``assign``: a turn's reward is the sum of the values that
        land on it divided by ``total``; a NaN value makes the turn it lands on invalid."""
        sums = [0.0] * len(traj.turns)
        if traj.turns:
            for turn, v in zip(res.turns, values, strict=True):
                sums[len(traj.turns) - 1 if self.assign == "end" else turn] += v
        rewards = [x / total if total else x for x in sums]
        extras = {"criteria": res.scores, "categories": res.categories, "weights": res.weights,
                  "evidence": res.evidence, "errors": res.errors}  # fmt: skip
        return TurnScores(self.name, rewards, [not math.isnan(r) for r in rewards], extras)

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        out = []
        for traj, res in zip(group, self.criterion_scores(group), strict=True):
            out.append(self.turn_scores(traj, res, res.scores, len(res.scores)))
        return out


METHODS: tuple[Method, ...] = (
    Method("cm2", "CM2", "scorer", "checklist of evidence-grounded yes/no criteria per user turn; reward = share met",
           needs=("judge",), paper=cite("CM2"), code=f"{__name__}:ChecklistScorer",
           choices=("uniform criterion weights",
                    "knob assign: 'end' pays the share met on the last turn; 'turn' pays each user turn's met "
                    "criteria / all criteria on its last agent turn (the turn rewards sum to the end reward)",
                    "knob scope: a quoted span must occur in the agent's actions and tool results ('agent') or "
                    "anywhere in the conversation ('all'); matching collapses whitespace and ignores case",
                    "knob require_quote (default False): a yes without a quote counts (a rule judge quotes "
                    "nothing; LLMJudge already refuses an unquoted yes in text mode); True makes it a no",
                    "a user turn ends at an agent turn the env answers with a user message (ToolUse: the reply that "
                    "closes an instruction); criteria of a user turn the episode never reached stay unmet",
                    "verified ToolUse checklist: per instruction, each gold call made without an error, the world's "
                    "outcome (where the instruction changes it), each fact stated, and asking first where held"),
           train={"algo": "grpo", "scorer": "cm2", "scorer_kwargs": {"judge": "rule"}, "estimator": "grpo",
                  "reward_components": ["outcome"], "env_id": "agentgym/ToolUse-v0", "env_kwargs": {},
                  "stop": ["</tool_call>"]},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
