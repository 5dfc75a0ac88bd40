"""Rewards that judge a group's rollouts against one another: CPO's listwise group judgement
(:class:`GroupJudgeScorer`), ArenaRL's seeded knockout tournament (:class:`TournamentJudge`) and Co-Reward's
cross-referred majority answers over paired groups (:class:`CoReward`).

- CPO: one ``rank`` question per group holds every rollout, in an order shuffled by a seeded permutation, and the
  judge's score of each comes back to its rollout (``mode="pairwise"``: a round robin of ``compare`` questions).
- ArenaRL: a single-elimination tournament of G - 1 ``compare`` questions, seeded by a pointwise ``score`` question
  per rollout; the round a rollout reaches is its reward, which the ``gopo`` estimator turns into rank advantages.
  ``mode="round_robin"`` (every pair) is the reference.
- Co-Reward: two groups answer analogical questions x and x' with the same answer; a rollout of x gets 1 when its
  answer equals the majority answer of x' and 0 otherwise, and the other way round. No gold answer is used.

The presentation order and the match-ups depend on the group's contents and ``seed``, never on the order the
rollouts arrive in, so permuting a group permutes its rewards. A verdict the judge could not give makes the rewards
that depend on it NaN (invalid), never a silent 0. For the rule judge (:class:`~agentgym.rewards.verdicts.RuleJudge`)
each question's rule answers from the rollouts' outcomes: the verified variant.

>>> knockout_rounds([3.0, 1.0, 2.0, 0.0], lambda a, b: float(a > b))   # matches won; seed 3 (2.0) upsets seed 2
[2, 0, 1, 0]
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.grading.answers import normalize_answer
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.checklist import rule_judge
from agentgym.rewards.judge import render_conversation
from agentgym.rewards.papers import cite
from agentgym.rewards.process import outcome_of
from agentgym.rewards.verdicts import Judge, Question, Verdict

DEFAULT_CRITERIA = (
    "Which response accomplishes the user's task better: a correct final answer or outcome first, then sound, "
    "efficient steps (well-formed actions, relevant to the task, using what was already learned, without repeats)."
)
Positions = Literal["both", "random"]


# -- rendering and ordering ---------------------------------------------------------------------------------------
def content_key(traj: Trajectory) -> str:
    """A digest of what the rollout did (its actions and observations): equal rollouts share it."""
    text = json.dumps([traj.task_id, [[t.action, t.observation] for t in traj.turns]], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def canonical_order(group: Sequence[Trajectory]) -> list[int]:
    """The rollouts' indices sorted by :func:`content_key` (ties by position): an order that does not depend on the
    order the group arrives in (except between identical rollouts)."""
    keys = [content_key(t) for t in group]
    return sorted(range(len(group)), key=lambda i: (keys[i], i))


def group_rng(group: Sequence[Trajectory], seed: int) -> np.random.Generator:
    """A generator seeded by ``seed`` and the group's contents (each group its own stream, whatever its order)."""
    digest = hashlib.blake2b("|".join(sorted(content_key(t) for t in group)).encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def render_rollout(traj: Trajectory) -> str:
    """What a judge reads of one rollout: the agent's turns and the env's replies (the task is shown once)."""
    messages = traj.messages[len(traj.initial_observation) :]
    return render_conversation(messages) if messages else "(no turns)"


def render_task(traj: Trajectory) -> str:
    return render_conversation(traj.initial_observation)


def minmax(values: Sequence[float]) -> list[float]:
    """``values`` scaled onto [0, 1] within the group (all equal: 0.5 each), for rule answers of rank questions."""
    lo, hi = min(values), max(values)
    return [0.5 if hi == lo else (v - lo) / (hi - lo) for v in values]


def _prefer(a: float, b: float) -> float:
    return 1.0 if a > b else 0.0 if a < b else 0.5


def _last_turn(traj: Trajectory, value: float) -> list[float]:
    rewards = [0.0] * len(traj.turns)
    if rewards:
        rewards[-1] = value
    return rewards


def _scores(
    name: str, group: Sequence[Trajectory], values: Sequence[float], extras: Sequence[dict]
) -> list[TurnScores]:
    out = []
    for traj, v, ex in zip(group, values, extras, strict=True):
        rewards = _last_turn(traj, v)
        out.append(TurnScores(name, rewards, [not math.isnan(x) for x in rewards], dict(ex)))
    return out


# -- pairwise judging ---------------------------------------------------------------------------------------------
COMPARE_PROMPT = (
    "The task:\n\n{task}\n\n=== Response A ===\n\n{a}\n\n=== Response B ===\n\n{b}\n\n---\nCriteria: {criteria}\n"
    "Which response is better, A or B?"
)
RANK_PROMPT = "The task:\n\n{task}\n\n{items}\n\n---\nCriteria: {criteria}\nGrade each of the {n} responses."
SCORE_PROMPT = "The task:\n\n{task}\n\n=== Response ===\n\n{a}\n\n---\nCriteria: {criteria}\nGrade the response."


def compare_question(group: Sequence[Trajectory], a: int, b: int, criteria: str, outcomes: Sequence[float]) -> Question:
    """Is rollout ``a`` better than rollout ``b``? (rule: their outcomes)."""
    prompt = COMPARE_PROMPT.format(task=render_task(group[a]), a=render_rollout(group[a]), b=render_rollout(group[b]),
                                   criteria=criteria)  # fmt: skip
    oa, ob = outcomes[a], outcomes[b]
    return Question("compare", prompt, rule=lambda: _prefer(oa, ob))


def round_robin(
    judge: Judge,
    group: Sequence[Trajectory],
    criteria: str,
    outcomes: Sequence[float],
    positions: Positions,
    rng: np.random.Generator,
) -> tuple[list[float], int]:
    """Every pair judged once in a seeded random position (``"random"``) or twice, once each way (``"both"``):
    each rollout's mean probability of beating the others (NaN where one of its comparisons failed), and the
    number of questions asked."""
    g = len(group)
    order = canonical_order(group)
    jobs: list[tuple[int, int, bool]] = []  # (i, j, asked as "is i better than j")
    for x in range(g):
        for y in range(x + 1, g):
            i, j = order[x], order[y]
            if positions == "both":
                jobs += [(i, j, True), (j, i, False)]
            elif rng.random() < 0.5:
                jobs.append((i, j, True))
            else:
                jobs.append((j, i, False))
    verdicts = judge.ask([compare_question(group, a, b, criteria, outcomes) for a, b, _ in jobs])
    wins: dict[tuple[int, int], list[float]] = {}
    for (a, b, straight), v in zip(jobs, verdicts, strict=True):
        i, j = (a, b) if straight else (b, a)
        p = math.nan if v.value is None else float(v.value)  # type: ignore[arg-type]
        wins.setdefault((i, j), []).append(p if straight else 1.0 - p)
    score = [0.0] * g
    for (i, j), ps in wins.items():
        p = float(np.mean(ps))
        score[i] += p / (g - 1)
        score[j] += (1.0 - p) / (g - 1)
    return ([0.5] * g if g == 1 else score), len(jobs)


# -- CPO ------------------------------------------------------------------------------------------------------------
@dataclass
class GroupJudgeScorer(TurnScorer):
    """CPO's comparative group-wise scoring: one ``rank`` question per group, the rollouts shown in a seeded
    shuffled order, each rollout's score (in [0, 1]) paid on its last turn. ``mode="pairwise"``: a round robin of
    ``compare`` questions instead (``positions`` as in :func:`round_robin`), each rollout's mean win probability.
    The rule judge ranks by the outcomes scaled onto [0, 1] within the group (:func:`minmax`), so GRPO over its
    rewards is GRPO over the outcomes."""

    judge: Judge = field(default_factory=rule_judge)
    criteria: str = DEFAULT_CRITERIA
    mode: Literal["listwise", "pairwise"] = "listwise"
    positions: Positions = "random"
    seed: int = 0
    name: str = "cpo"

    def __post_init__(self) -> None:
        if self.mode not in ("listwise", "pairwise"):
            raise ValueError(f"mode must be 'listwise' or 'pairwise', got {self.mode!r}")
        if self.positions not in ("both", "random"):
            raise ValueError(f"positions must be 'both' or 'random', got {self.positions!r}")

    def presentation(self, group: Sequence[Trajectory]) -> list[int]:
        """The order the judge sees the rollouts in: a seeded shuffle of :func:`canonical_order`."""
        order = canonical_order(group)
        return [order[k] for k in group_rng(group, self.seed).permutation(len(group))]

    def rank_question(self, group: Sequence[Trajectory], shown: Sequence[int], outcomes: Sequence[float]) -> Question:
        items = "\n\n".join(f"=== Response {k + 1} ===\n\n{render_rollout(group[i])}" for k, i in enumerate(shown))
        prompt = RANK_PROMPT.format(task=render_task(group[0]), items=items, criteria=self.criteria, n=len(shown))
        scaled = minmax([outcomes[i] for i in shown])
        return Question("rank", prompt, items=len(shown), rule=lambda: tuple(scaled))

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        if not group:
            return []
        outcomes = [outcome_of(t) for t in group]
        if self.mode == "pairwise":
            values, asked = round_robin(self.judge, group, self.criteria, outcomes, self.positions,
                                        group_rng(group, self.seed))  # fmt: skip
            return _scores(self.name, group, values, [{"questions": asked}] * len(group))
        shown = self.presentation(group)
        (verdict,) = self.judge.ask([self.rank_question(group, shown, outcomes)])
        values = [math.nan] * len(group)
        if verdict.value is not None:
            for k, i in enumerate(shown):
                values[i] = float(verdict.value[k])  # type: ignore[index]
        extras = [{"position": shown.index(i), "error": verdict.error} for i in range(len(group))]
        return _scores(self.name, group, values, extras)


# -- ArenaRL ----------------------------------------------------------------------------------------------------------
def bracket(n: int) -> list[int]:
    """The standard seeding of a bracket of ``n`` slots (a power of two): seed 0 meets seed n-1 in the first round,
    and the top two seeds can only meet in the final.

    >>> bracket(8)
    [0, 7, 3, 4, 1, 6, 2, 5]
    """
    slots = [0]
    while len(slots) < n:
        m = 2 * len(slots)
        slots = [s for x in slots for s in (x, m - 1 - x)]
    return slots


def knockout_rounds(
    players: Sequence[Any],
    play: Callable[[Any, Any], float],
    ask: Callable[[list[tuple[Any, Any]]], list[float]] | None = None,
) -> list[int]:
    """Single elimination over ``players`` listed best seed first: the number of matches each won (the round it
    reached minus one; byes count as won). ``play(a, b)`` (or ``ask`` for a whole round at once) is P(a beats b):
    above 0.5 ``a`` goes through, below it ``b``, 0.5 the better seed; NaN raises ``ValueError``. G - 1 matches."""
    g = len(players)
    if g == 0:
        return []
    size = 1 << (g - 1).bit_length()
    alive: list[int | None] = [s if s < g else None for s in bracket(size)]
    won = [0] * g
    while len(alive) > 1:
        pairs = [(alive[k], alive[k + 1]) for k in range(0, len(alive), 2)]
        matches = [(a, b) for a, b in pairs if a is not None and b is not None]
        if ask is not None:
            results = ask([(players[a], players[b]) for a, b in matches])
        else:
            results = [play(players[a], players[b]) for a, b in matches]
        outcome = dict(zip(matches, results, strict=True))
        nxt: list[int | None] = []
        for a, b in pairs:
            if a is None or b is None:
                winner = a if b is None else b
            else:
                p = outcome[(a, b)]
                if math.isnan(p):
                    raise ValueError("a match has no verdict")
                winner = a if p > 0.5 or (p == 0.5 and a < b) else b
            if winner is not None:
                won[winner] += 1
            nxt.append(winner)
        alive = nxt
    return won


@dataclass
class TournamentJudge(TurnScorer):
    """ArenaRL (see the module docstring): the reward of a rollout is the number of knockout rounds it won divided
    by the number of rounds (the champion 1, a first-round loser 0), paid on its last turn; ``gopo`` maps it to a
    rank advantage. ``seeding="judge"``: one pointwise ``score`` question per rollout (asked in one batch) orders
    the seeds, ties by a seeded shuffle; ``"random"``: a seeded shuffle alone. The side each rollout of a match is
    shown on is drawn from the seeded stream. ``mode="round_robin"``: every pair (``positions``), the mean win
    probability. A failed verdict makes the whole group's rewards NaN (every rank depends on every match)."""

    judge: Judge = field(default_factory=rule_judge)
    criteria: str = DEFAULT_CRITERIA
    mode: Literal["knockout", "round_robin"] = "knockout"
    seeding: Literal["judge", "random"] = "judge"
    positions: Positions = "random"
    seed: int = 0
    name: str = "arenarl"

    def __post_init__(self) -> None:
        if self.mode not in ("knockout", "round_robin"):
            raise ValueError(f"mode must be 'knockout' or 'round_robin', got {self.mode!r}")
        if self.seeding not in ("judge", "random"):
            raise ValueError(f"seeding must be 'judge' or 'random', got {self.seeding!r}")
        if self.positions not in ("both", "random"):
            raise ValueError(f"positions must be 'both' or 'random', got {self.positions!r}")

    def seeds(self, group: Sequence[Trajectory], outcomes: Sequence[float], rng: np.random.Generator) -> list[int]:
        """The rollouts best seed first (``ValueError`` where a pointwise score has no verdict)."""
        order = canonical_order(group)
        shuffled = [order[k] for k in rng.permutation(len(group))]
        if self.seeding == "random":
            return shuffled
        questions = [Question("score", SCORE_PROMPT.format(task=render_task(group[i]), a=render_rollout(group[i]),
                                                           criteria=self.criteria),
                              rule=_clamped(outcomes[i])) for i in shuffled]  # fmt: skip
        verdicts = self.judge.ask(questions)
        if any(v.value is None for v in verdicts):
            raise ValueError("a seeding score has no verdict")
        score = {i: float(v.value) for i, v in zip(shuffled, verdicts, strict=True)}  # type: ignore[arg-type]
        return sorted(shuffled, key=lambda i: -score[i])  # stable: ties keep the shuffled order

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        if not group:
            return []
        outcomes = [outcome_of(t) for t in group]
        rng = group_rng(group, self.seed)
        if self.mode == "round_robin":
            values, asked = round_robin(self.judge, group, self.criteria, outcomes, self.positions, rng)
            return _scores(self.name, group, values, [{"questions": asked}] * len(group))
        count = [0]  # compare questions asked

        def ask(matches: list[tuple[int, int]]) -> list[float]:
            swap = [bool(rng.random() < 0.5) for _ in matches]
            qs = [compare_question(group, b, a, self.criteria, outcomes) if s
                  else compare_question(group, a, b, self.criteria, outcomes)
                  for (a, b), s in zip(matches, swap, strict=True)]  # fmt: skip
            count[0] += len(qs)
            verdicts: list[Verdict] = self.judge.ask(qs) if qs else []
            out = []
            for v, s in zip(verdicts, swap, strict=True):
                p = math.nan if v.value is None else float(v.value)  # type: ignore[arg-type]
                out.append(1.0 - p if s else p)
            return out

        try:
            seeds = self.seeds(group, outcomes, rng)
            won = knockout_rounds(seeds, lambda a, b: math.nan, ask)
        except ValueError as e:
            return _scores(self.name, group, [math.nan] * len(group), [{"error": str(e)}] * len(group))
        rounds = max(1, (len(group) - 1).bit_length())
        values = [0.0] * len(group)
        extras: list[dict] = [{} for _ in group]
        for place, (i, w) in enumerate(zip(seeds, won, strict=True)):
            values[i] = w / rounds
            extras[i] = {"seed": place, "matches_won": w, "questions": count[0]}
        return _scores(self.name, group, values, extras)


def _clamped(x: float) -> Callable[[], float]:
    return lambda: min(1.0, max(0.0, x))


# -- Co-Reward ------------------------------------------------------------------------------------------------------
def final_answer(traj: Trajectory, tag: str = "answer") -> str | None:
    """The rollout's last ``<tag>...</tag>`` answer, SQuAD-normalised; None if it gave none.

    >>> from agentgym.contract.trajectory import Turn
    >>> turn = Turn("<answer> The Alps </answer>", [], 0.0, True, False, {})
    >>> final_answer(Trajectory("e", 0, "t", "a", [], {}, turns=[turn]))
    'alps'
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    for turn in reversed(traj.turns):
        end = turn.action.rfind(closing)
        start = turn.action.rfind(opening, 0, end if end >= 0 else None)
        if start >= 0 and end > start:
            return normalize_answer(turn.action[start + len(opening) : end])
    return None


def majority(answers: Sequence[str | None], tie: Literal["any", "none"] = "any") -> frozenset[str]:
    """The group's majority answers (rollouts without an answer do not vote): the most common one; a tie gives all
    the tied answers (``tie="any"``) or none (``"none"``: no label).

    >>> sorted(majority(["a", "b", "a", None])), sorted(majority(["a", "b"])), majority(["a", "b"], "none")
    (['a'], ['a', 'b'], frozenset())
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return frozenset()
    top = max(counts.values())
    modes = frozenset(a for a, c in counts.items() if c == top)
    return modes if len(modes) == 1 or tie == "any" else frozenset()


def pair_id(group: Sequence[Trajectory], key: str = "pair_id") -> Hashable | None:
    """The pair a group belongs to: ``reset_info[key]`` (or ``options[key]``) of its rollouts, which must agree."""
    ids = {t.reset_info.get(key, t.options.get(key)) for t in group}
    if len(ids) != 1:
        return None
    return ids.pop()


@dataclass
class CoReward(TurnScorer):
    """Co-Reward over paired groups (see the module docstring): ``score_groups`` pairs the batch's groups by
    :func:`pair_id`, in batch order (an id's first and second group, its third and fourth, ...: the trainer's
    ``group_options`` plays a task's wordings as adjacent groups); a rollout of one group gets 1.0 on its last turn
    when its :func:`final_answer` is a :func:`majority` answer of the other group, else 0.0. A group left without a
    partner (or scored alone, through ``score_group``) is invalid: NaN, never a silent 0."""

    tag: str = "answer"
    key: str = "pair_id"
    tie: Literal["any", "none"] = "any"
    name: str = "co_reward"

    def __post_init__(self) -> None:
        if self.tie not in ("any", "none"):
            raise ValueError(f"tie must be 'any' or 'none', got {self.tie!r}")

    def cross(
        self, x: Sequence[Trajectory], x_prime: Sequence[Trajectory]
    ) -> tuple[list[TurnScores], list[TurnScores]]:
        """The rewards of two paired groups, each from the other's majority."""
        ans_x = [final_answer(t, self.tag) for t in x]
        ans_y = [final_answer(t, self.tag) for t in x_prime]
        maj_x, maj_y = majority(ans_x, self.tie), majority(ans_y, self.tie)

        def pay(group: Sequence[Trajectory], answers: list[str | None], label: frozenset[str]) -> list[TurnScores]:
            values = [float(a is not None and a in label) for a in answers]
            extras = [{"answer": a, "label": sorted(label)} for a in answers]
            return _scores(self.name, group, values, extras)

        return pay(x, ans_x, maj_y), pay(x_prime, ans_y, maj_x)

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        ids = [pair_id(g, self.key) for g in groups]
        members: dict[Hashable, list[int]] = {}
        for k, pid in enumerate(ids):
            if pid is not None:
                members.setdefault(pid, []).append(k)
        out: list[list[TurnScores] | None] = [None] * len(groups)
        for idx in members.values():
            for a, b in zip(idx[0::2], idx[1::2], strict=False):  # an odd one out stays unpaired
                out[a], out[b] = self.cross(groups[a], groups[b])
        return [
            s if s is not None else self._unpaired(g, ids[k]) for k, (g, s) in enumerate(zip(groups, out, strict=True))
        ]

    def _unpaired(self, group: Sequence[Trajectory], pid: Hashable | None) -> list[TurnScores]:
        why = f"no partner group with {self.key} {pid!r} in the batch" if pid is not None else f"no {self.key}"
        return _scores(self.name, group, [math.nan] * len(group), [{"error": why}] * len(group))

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([group])[0]


_LABEL_FREE = {"algo": "grpo", "scorer_kwargs": {"judge": "rule"}}

METHODS: tuple[Method, ...] = (
    Method("cpo", "CPO", "scorer", "one judge request ranks the whole group, shown in a seeded shuffled order",
           needs=("judge", "group"), paper=cite("CPO"), code=f"{__name__}:GroupJudgeScorer",
           choices=("listwise: one rank question per group, a 0-10 grade per rollout read as [0, 1] (knob "
                    "mode='pairwise': a round robin of compare questions, the mean win probability)",
                    "the shown order is a seeded shuffle of an order fixed by the rollouts' contents (knob seed), so "
                    "permuting the group permutes the rewards",
                    "the score is paid on the last turn; the rewards feed GRPO (or estimator gopo); the training "
                    "reward counts the judge's component alone (reward_components=['cpo'])"),
           train={**_LABEL_FREE, "scorer": "cpo", "estimator": "grpo", "reward_components": ["cpo"]},
           knobs_into="scorer_kwargs"),
    Method("arenarl", "ArenaRL", "scorer", "seeded knockout tournament of pairwise judgements; round reached -> rank",
           needs=("judge", "group"), paper=cite("ArenaRL"), code=f"{__name__}:TournamentJudge",
           choices=("seeding by one pointwise 0-10 judge score per rollout, ties by a seeded shuffle (knob "
                    "seeding='random': the shuffle alone); standard bracket, byes to the top seeds; G - 1 matches",
                    "each match's sides drawn from the seeded stream; a tie sends the better seed through",
                    "reward = matches won / rounds, on the last turn; estimator gopo maps it to a rank advantage",
                    "knob mode='round_robin' (the O(G^2) reference): every pair asked once in a random position "
                    "(knob positions='both': once each way, averaged); reward = mean win probability",
                    "a failed verdict makes the group's rewards NaN"),
           train={**_LABEL_FREE, "scorer": "arenarl", "estimator": "gopo", "reward_components": ["arenarl"]},
           knobs_into="scorer_kwargs"),
    Method("co_reward", "Co-Reward", "scorer", "label-free: agree with the majority answer of the analogical question",
           needs=("group",), paper=cite("Co-Reward"), code=f"{__name__}:CoReward",
           choices=("answers: the last <answer> tag, SQuAD-normalised; a rollout without one does not vote and "
                    "gets 0",
                    "a tied majority labels with every tied answer (knob tie='none': no label, all 0)",
                    "groups pair by reset_info['pair_id'] (knob key) in batch order, through score_groups; a group "
                    "without a partner in the batch is invalid (NaN)",
                    "x': SearchQA's reset option wording='reworded' (other templates, a comparison's entities "
                    "swapped; same answers), played beside the original by the trainer's group_options"),
           train={"algo": "grpo", "scorer": "co_reward", "estimator": "grpo", "reward_components": ["co_reward"],
                  "env_id": "agentgym/SearchQA-v0", "env_kwargs": {"dataset": "tiny"},
                  "group_options": [{"wording": "original"}, {"wording": "reworded"}]},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
