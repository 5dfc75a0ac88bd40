"""SCRIBE: skill-prototype rubrics, routed per subgoal span and verified by a judge.

A *library* holds skill prototypes: a name, a description, routing keywords and k rubric checks. A trajectory is cut
into spans: each turn is routed to the prototype whose keywords its action contains most often (ties: the first in
the library), and consecutive turns routed alike form one span (``segmentation="runs"``; ``"turn"``: one span per
turn). The judge answers each of the span's prototype's k checks (yes/no :class:`~agentgym.rewards.verdicts.Question`
s: the task, the span's steps, the check), so

    r_span = (#checks met) / k   in {0, 1/k, ..., 1},      R' = R + lambda * mean over spans of r_span.

A span no prototype matches is *unroutable*: its r_span is NaN (invalid), never 0, and it does not enter the mean;
a check the judge could not answer makes its span invalid the same way. A trajectory without a valid span has no
bonus: its last turn is invalid. ``assign="end"`` puts lambda * mean on the last turn; ``"span"`` puts
lambda * r_span / #valid spans on each valid span's last turn (the same total).

Each check's ``rule`` (what ``RuleJudge`` answers) reads the env's verified info: SearchQA-v0's supporting documents,
retrieved ids, answer metrics and gold entities; Household-v0's ``state_facts`` and goal (``state_facts=True``).
:data:`LIBRARIES` has one library per env (``library="auto"`` picks it from the trajectory's env id):

* SearchQA: ``search one hop`` (``<search>``) and ``verify a candidate`` (``<answer>``);
* Household: ``find``, ``transform`` and ``place``.

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> gold = {"supporting_doc_ids": ["d1"], "hop_entities": ["Ada Vell"], "hop_answers": ["Orrin"], "answers": ["Orrin"]}
>>> t0 = Turn("<search> Ada Vell </search>", [{"role": "user", "content": "Doc 1 ... Orrin"}], 0.0, False, False,
...           {"gold": gold, "progress": 1.0, "retrieved_doc_ids": ["d1"]})
>>> t1 = Turn("<answer> Orrin </answer>", [], 1.0, True, False, {"gold": gold, "progress": 1.0, "answer": "Orrin",
...           "metrics": {"em": 1.0}})
>>> traj = Trajectory("agentgym/SearchQA-v0", 0, "q", "a", [], {"gold": gold, "progress": 0.0}, turns=[t0, t1])
>>> SkillRubricScorer(coef=0.5)([traj])[0].rewards   # both spans meet all 3 checks: 0.5 * 1 on the last turn
[0.0, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.subgoals import requirements_met
from agentgym.rewards.text_features import observation_text
from agentgym.rewards.verdicts import Judge, Question, RuleJudge, ask_each, verdict_values


@dataclass(frozen=True)
class Span:
    """Turns ``start .. end - 1`` of ``traj``, routed to a prototype (None: unroutable)."""

    traj: Trajectory
    start: int
    end: int
    prototype: str | None

    def info(self, t: int) -> Mapping[str, Any]:
        """The info after turn ``t`` (``t = -1``: the reset's)."""
        return self.traj.turns[t].info if t >= 0 else self.traj.reset_info

    @property
    def before(self) -> Mapping[str, Any]:
        return self.info(self.start - 1)

    @property
    def after(self) -> Mapping[str, Any]:
        return self.info(self.end - 1)

    @property
    def turns(self) -> list[Any]:
        return self.traj.turns[self.start : self.end]

    @property
    def gold(self) -> Mapping[str, Any]:
        return self.traj.reset_info.get("gold", {})


Rule = Callable[[Span], bool]


@dataclass(frozen=True)
class Check:
    """One rubric check: what the judge is asked, and the name of its rule in :data:`RULES` (None: no rule)."""

    text: str
    rule: str | None = None


@dataclass(frozen=True)
class Prototype:
    """A skill prototype: ``name``, ``description``, routing ``keywords`` (lower case) and its rubric ``checks``."""

    name: str
    description: str
    keywords: tuple[str, ...]
    checks: tuple[Check, ...]

    def __post_init__(self) -> None:
        if not self.checks:
            raise ValueError(f"prototype {self.name!r} needs at least one check")


def _all_valid(span: Span) -> bool:
    return all(t.action_valid for t in span.turns)


# -- SearchQA-v0 rules ----------------------------------------------------------------------------------------------
def _new_supporting(span: Span) -> bool:
    """A retrieved document is a supporting one and the share of supporting documents seen grew."""
    supporting = set(span.gold.get("supporting_doc_ids", ()))
    found = any(d in supporting for t in span.turns for d in t.info.get("retrieved_doc_ids", ()))
    return found and float(span.after["progress"]) > float(span.before["progress"])


def _names_chain_entity(span: Span) -> bool:
    """A query names an entity of the question's chain (a hop's entity or answer)."""
    names = [n.lower() for n in (*span.gold.get("hop_entities", ()), *span.gold.get("hop_answers", ())) if n]
    return any(n in t.action.lower() for t in span.turns for n in names)


def _answer_seen(span: Span) -> bool:
    """The candidate answer appears in an observation before it (a retrieved passage)."""
    answer = str(span.after.get("answer") or "").strip().lower()
    seen = " ".join(observation_text(t.observation) for t in span.traj.turns[: span.end - 1]).lower()
    return bool(answer) and answer in seen


def _answer_correct(span: Span) -> bool:
    return float(span.after.get("metrics", {}).get("em", 0.0)) == 1.0


# -- Household-v0 rules (state_facts=True) ---------------------------------------------------------------------------
def _goal_objects(span: Span) -> list[Mapping[str, Any]]:
    if "goal_facts" not in span.gold:
        raise KeyError("Household's rules need gold['goal_facts'] and info['state_facts'] (state_facts=True)")
    return list(span.gold["goal_facts"])


def _holds_goal_object(span: Span) -> bool:
    name = _goal_objects(span)[0]["name"]
    return requirements_met([{"name": name, "attributes": {"location": "agent"}}], span.after["state_facts"])


def _reaches_goal_object(span: Span) -> bool:
    name = _goal_objects(span)[0]["name"]
    want = [{"name": name, "attributes": {"reachable": "yes"}}]
    return any(requirements_met(want, span.info(t)["state_facts"]) for t in range(span.start, span.end))


def _state_attributes(goal: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in goal.get("attributes", {}).items() if k not in ("location", "reachable")}


def _transformed(span: Span) -> bool:
    """After the span a goal object has the goal's state attributes (hot, clean, on, ...); a goal without any fails."""
    wanted = [{"name": g["name"], "attributes": _state_attributes(g)} for g in _goal_objects(span)]
    wanted = [w for w in wanted if w["attributes"]]
    return bool(wanted) and requirements_met(wanted, span.after["state_facts"])


def _held_while_transforming(span: Span) -> bool:
    name = _goal_objects(span)[0]["name"]
    want = [{"name": name, "attributes": {"location": "agent"}}]
    return any(requirements_met(want, span.info(t)["state_facts"]) for t in range(span.start - 1, span.end))


def _placed(span: Span) -> bool:
    """After the span a goal object is in (or on) a receptacle of the goal's type."""
    places = [g for g in _goal_objects(span) if g.get("attributes", {}).get("location") not in (None, "agent")]
    if not places:
        return False
    g = places[0]
    return requirements_met([{"name": g["name"], "attributes": {"location": g["attributes"]["location"]}}],
                            span.after["state_facts"])  # fmt: skip


def _placed_more(span: Span) -> bool:
    """More goal objects stand where the goal wants them after the span than before it."""
    places = [g for g in _goal_objects(span) if g.get("attributes", {}).get("location") not in (None, "agent")]
    if not places:
        return False
    g = places[0]

    def placed(info: Mapping[str, Any]) -> int:
        return sum(1 for f in info["state_facts"] if f.get("name") == g["name"]
                   and f.get("attributes", {}).get("location") == g["attributes"]["location"])  # fmt: skip

    return placed(span.after) > placed(span.before)


#: Rule name -> the rule (a function of a span that reads the env's verified info).
RULES: Mapping[str, Rule] = MappingProxyType({
    "actions_valid": _all_valid, "new_supporting_document": _new_supporting,
    "names_chain_entity": _names_chain_entity, "answer_seen": _answer_seen, "answer_correct": _answer_correct,
    "holds_goal_object": _holds_goal_object, "reaches_goal_object": _reaches_goal_object,
    "transformed": _transformed, "held_while_transforming": _held_while_transforming, "placed": _placed,
    "placed_more": _placed_more,
})  # fmt: skip

#: One prototype library per env.
LIBRARIES: Mapping[str, tuple[Prototype, ...]] = MappingProxyType({
    "search_qa": (
        Prototype("search one hop", "Issue one search that resolves the next hop of the question's chain.",
                  ("<search>",),
                  (Check("The search action is well formed.", "actions_valid"),
                   Check("The search retrieves a supporting document the agent had not seen before.",
                         "new_supporting_document"),
                   Check("The query names an entity of the question's reasoning chain.", "names_chain_entity"))),
        Prototype("verify a candidate", "Commit to a candidate answer that the retrieved evidence supports.",
                  ("<answer>",),
                  (Check("The answer action is well formed.", "actions_valid"),
                   Check("The candidate answer appears in a passage retrieved earlier.", "answer_seen"),
                   Check("The candidate answer is correct.", "answer_correct"))),
    ),
    "household": (
        Prototype("find", "Locate an object the task needs and pick it up.",
                  ("go to", "open", "take", "examine", "look", "inventory"),
                  (Check("Every action of the span is valid.", "actions_valid"),
                   Check("The span reaches a receptacle where an object of the task's type can be taken.",
                         "reaches_goal_object"),
                   Check("The span ends holding an object of the task's type.", "holds_goal_object"))),
        Prototype("transform", "Change the state of the task's object (heat, cool, clean, turn on a lamp).",
                  ("heat", "cool", "clean", "slice", "use"),
                  (Check("Every action of the span is valid.", "actions_valid"),
                   Check("The agent holds the task's object during the span.", "held_while_transforming"),
                   Check("After the span the task's object has the state the task asks for.", "transformed"))),
        Prototype("place", "Put the task's object where the task wants it.",
                  ("put", "move"),
                  (Check("Every action of the span is valid.", "actions_valid"),
                   Check("After the span an object of the task's type is in or on the task's receptacle.",
                         "placed"),
                   Check("The span puts one more of the task's objects in place.", "placed_more"))),
    ),
})  # fmt: skip

_ENV_LIBRARY = {"agentgym/SearchQA-v0": "search_qa", "agentgym/Household-v0": "household"}


def route(text: str, library: Sequence[Prototype]) -> str | None:
    """The prototype whose keywords occur most often in ``text`` (lower-cased; ties: the first), None if none does.

    >>> route("<search> who wrote it </search>", LIBRARIES["search_qa"]), route("hello", LIBRARIES["search_qa"])
    ('search one hop', None)
    """
    low = text.lower()
    best, hits = None, 0
    for p in library:
        n = sum(low.count(k) for k in p.keywords)
        if n > hits:
            best, hits = p.name, n
    return best


def segment(traj: Trajectory, library: Sequence[Prototype], segmentation: str = "runs") -> list[Span]:
    """The trajectory's spans: each turn routed (:func:`route` of its action), consecutive turns of the same
    prototype merged (``"runs"``) or kept apart (``"turn"``)."""
    spans: list[Span] = []
    for t, turn in enumerate(traj.turns):
        name = route(turn.action, library)
        if segmentation == "runs" and spans and spans[-1].prototype == name and spans[-1].end == t:
            spans[-1] = Span(traj, spans[-1].start, t + 1, name)
        else:
            spans.append(Span(traj, t, t + 1, name))
    return spans


@dataclass
class SkillRubricScorer(TurnScorer):
    """SCRIBE's reward (see the module docstring). ``judge``: any :class:`~agentgym.rewards.verdicts.Judge` (None:
    ``RuleJudge``); ``coef``: lambda; ``library``: a key of :data:`LIBRARIES` or ``"auto"`` (by env id);
    ``prototypes``: a library given directly (overrides ``library``)."""

    judge: Judge | None = None
    coef: float = 0.1
    name: str = "scribe"
    library: str = "auto"
    segmentation: str = "runs"
    assign: str = "end"
    #: an object, not a command-line knob (hence the factory)
    prototypes: Sequence[Prototype] | None = field(default_factory=lambda: None)

    def __post_init__(self) -> None:
        if self.segmentation not in ("runs", "turn"):
            raise ValueError(f"segmentation must be 'runs' or 'turn', got {self.segmentation!r}")
        if self.assign not in ("end", "span"):
            raise ValueError(f"assign must be 'end' or 'span', got {self.assign!r}")
        if self.library != "auto" and self.library not in LIBRARIES:
            raise ValueError(f"library must be 'auto' or one of {sorted(LIBRARIES)}, got {self.library!r}")

    def library_of(self, traj: Trajectory) -> tuple[Prototype, ...]:
        if self.prototypes is not None:
            return tuple(self.prototypes)
        key = _ENV_LIBRARY.get(traj.env_id) if self.library == "auto" else self.library
        if key is None:
            raise KeyError(f"{self.name}: no prototype library for {traj.env_id!r}; choose one of {sorted(LIBRARIES)}")
        return LIBRARIES[key]

    def question(self, span: Span, prototype: Prototype, check: Check) -> Question:
        steps = "\n\n".join(f"Action:\n{t.action}\nObservation:\n{observation_text(t.observation)}"
                            for t in span.turns)  # fmt: skip
        prompt = (f"Task:\n{observation_text(span.traj.initial_observation)}\n\nThe agent is carrying out the skill "
                  f"'{prototype.name}': {prototype.description}\n\nIts steps:\n\n{steps}\n\nCheck: {check.text}\n"
                  "Does the span meet this check?")  # fmt: skip
        rule = RULES[check.rule] if check.rule is not None else None
        return Question("yesno", prompt, rule=None if rule is None else (lambda: rule(span)))

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        judge = self.judge if self.judge is not None else RuleJudge()
        spans, asked = [], []  # asked: one list of questions per span (none for an unroutable span)
        for traj in group:
            library = {p.name: p for p in self.library_of(traj)}
            spans.append(segment(traj, list(library.values()), self.segmentation))
            for span in spans[-1]:
                proto = library.get(span.prototype) if span.prototype is not None else None
                asked.append([] if proto is None else [self.question(span, proto, c) for c in proto.checks])
        answers = iter(ask_each(judge, asked))
        out = []
        for i, traj in enumerate(group):
            r_span = []
            for _ in spans[i]:
                vs = next(answers)  # a span without checks or with a failed verdict is invalid
                r_span.append(math.fsum(verdict_values(vs)) / len(vs) if vs and all(v.ok for v in vs) else math.nan)
            good = [j for j, r in enumerate(r_span) if not math.isnan(r)]
            rewards = [0.0] * len(traj.turns)
            valid = [True] * len(traj.turns)
            if traj.turns and not good:
                rewards[-1], valid[-1] = math.nan, False
            elif self.assign == "end" and good:
                rewards[-1] = self.coef * math.fsum(r_span[j] for j in good) / len(good)
            else:
                for j in good:
                    rewards[spans[i][j].end - 1] += self.coef * r_span[j] / len(good)
            extras = {"spans": [[s.start, s.end, s.prototype] for s in spans[i]], "r_span": r_span}
            out.append(TurnScores(self.name, rewards, valid, extras))
        return out


METHODS: tuple[Method, ...] = (
    Method("scribe", "SCRIBE", "scorer",
           "lambda * the mean share of its skill prototype's rubric checks each routed span meets",
           needs=("judge", "segments"), paper=cite("SCRIBE"), code=f"{__name__}:SkillRubricScorer",
           choices=("segmentation: each turn routed by keywords, consecutive turns of one prototype form a span "
                    "(knob segmentation='runs'|'turn')",
                    "routing: keyword counts, ties to the library's first; an unroutable span is invalid and left "
                    "out of the mean (no LLM routing)",
                    "r_span = share of the prototype's k checks the judge says are met; a failed verdict invalidates "
                    "the span",
                    "lambda = coef (default 0.1), paid on the last turn (assign='end') or per span ('span')",
                    "libraries: SearchQA (search one hop, verify a candidate), Household (find, transform, place)"),
           train={"algo": "grpo", "scorer": "scribe", "estimator": "gtpo"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
