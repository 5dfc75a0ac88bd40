"""MatchTIR tool-call matching: call similarity, optimal / greedy / Sinkhorn assignment, a turn scorer.

``call_similarity(p, g)`` is 0 if the names differ, else [1 + Jaccard(keys) + #{k: p[k] == g[k]}] / (2 + |g.params|),
so it lies in [0, 1] and a call matches itself with similarity 1. ``match_calls`` assigns predicted calls to gold
calls: ``"optimal"`` is a real maximum-weight bipartite matching (scipy's ``linear_sum_assignment``; MatchTIR's
reference code calls its greedy loop "hungarian"), ``"greedy"`` is that greedy loop (for comparison) and
``"sinkhorn"`` is an entropic optimal-transport soft assignment (``reg`` = 0.1). A turn's reward is the matched
similarity divided by max(#pred, #gold), so extra and missing calls both cost.

>>> gold = {"name": "add", "arguments": {"a": 1, "b": 2}}
>>> call_similarity({"name": "add", "arguments": {"a": 1, "b": 3}}, gold)   # (1 + 1 + 1) / (2 + 2)
0.75
>>> match_calls([gold], [gold, {"name": "mul", "arguments": {}}]).score   # 1 matched of max(1, 2)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentgym.contract.parsing import ParseError, ToolCall, parse_tool_calls
from agentgym.contract.trajectory import Trajectory
from agentgym.rewards import catalogue
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.papers import cite

CallLike = ToolCall | Mapping[str, Any]
Method = Literal["optimal", "greedy", "sinkhorn"]
MATCH_METHODS: tuple[str, ...] = ("optimal", "greedy", "sinkhorn")


def _name_args(call: CallLike) -> tuple[str, Mapping[str, Any]]:
    if isinstance(call, ToolCall):
        return call.name, call.arguments
    args = call.get("arguments", call.get("parameters", {}))
    return str(call.get("name", "")), args if isinstance(args, Mapping) else {}


def _same_value(a: Any, b: Any) -> bool:
    """Argument equality: ``==`` except that booleans never equal numbers (``True != 1`` here)."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    try:
        return bool(a == b)
    except Exception:  # exotic objects whose == raises or is array-valued
        return False


def call_similarity(pred: CallLike, gold: CallLike) -> float:
    """MatchTIR similarity of one predicted call to one gold call, in [0, 1] (see the module docstring).

    Jaccard of two empty key sets is 1. ``pred``/``gold`` are ``ToolCall``s or ``{"name", "arguments"}`` dicts.

    >>> call_similarity(ToolCall("f", {"x": 1}), {"name": "g", "arguments": {"x": 1}})
    0.0
    """
    p_name, p_args = _name_args(pred)
    g_name, g_args = _name_args(gold)
    if p_name != g_name:
        return 0.0
    p_keys, g_keys = set(p_args), set(g_args)
    union = p_keys | g_keys
    jaccard = len(p_keys & g_keys) / len(union) if union else 1.0
    equal = sum(1 for k in g_keys & p_keys if _same_value(p_args[k], g_args[k]))
    return (1.0 + jaccard + equal) / (2.0 + len(g_keys))


def similarity_matrix(pred_calls: Sequence[CallLike], gold_calls: Sequence[CallLike]) -> np.ndarray:
    """``S[i, j] = call_similarity(pred_calls[i], gold_calls[j])``, shape (#pred, #gold)."""
    sim = np.zeros((len(pred_calls), len(gold_calls)))
    for i, p in enumerate(pred_calls):
        for j, g in enumerate(gold_calls):
            sim[i, j] = call_similarity(p, g)
    return sim


@dataclass
class Match:
    """An assignment of predicted to gold calls.

    ``pairs``: (pred index, gold index, similarity) of the matched pairs with similarity > 0 (for Sinkhorn, the
    argmax of each predicted call's transport row). ``total``: the matched similarity (for Sinkhorn, the expected
    similarity under the soft plan). ``score = total / max(#pred, #gold)`` (1.0 when both are empty).
    ``per_pred``: each predicted call's credited similarity (its row of the plan for Sinkhorn). ``plan``: the
    (#pred, #gold) assignment matrix (0/1, or the soft plan scaled so a full row sums to 1).
    """

    pairs: list[tuple[int, int, float]]
    total: float
    score: float
    per_pred: list[float]
    plan: np.ndarray = field(repr=False)


def _greedy(sim: np.ndarray) -> np.ndarray:
    """MatchTIR's reference loop: repeatedly take the most similar free pair (ties: lowest indices first)."""
    plan = np.zeros_like(sim)
    order = sorted((-sim[i, j], i, j) for i in range(sim.shape[0]) for j in range(sim.shape[1]))
    used_p: set[int] = set()
    used_g: set[int] = set()
    for neg, i, j in order:
        if -neg <= 0.0:
            break
        if i not in used_p and j not in used_g:
            plan[i, j] = 1.0
            used_p.add(i)
            used_g.add(j)
    return plan


def _optimal(sim: np.ndarray) -> np.ndarray:
    from scipy.optimize import linear_sum_assignment

    plan = np.zeros_like(sim)
    rows, cols = linear_sum_assignment(sim, maximize=True)
    plan[rows, cols] = 1.0
    return plan


def _sinkhorn(sim: np.ndarray, reg: float, max_iter: int = 1000, tol: float = 1e-9) -> np.ndarray:
    """Entropic OT between uniform marginals on a square, zero-padded problem (cost 1 - sim), in the log domain.

    The last iterate is rounded onto the exact marginals (Altschuler, Weed and Rigollet 2017), so the plan is
    doubly stochastic and its value never exceeds the optimal assignment's. Returns the plan restricted to the
    real calls, scaled by n = max(#pred, #gold) so a full row sums to 1.
    """
    m, k = sim.shape
    n = max(m, k)
    padded = np.zeros((n, n))
    padded[:m, :k] = sim
    log_kernel = -(1.0 - padded) / reg
    log_f = np.zeros(n)
    log_g = np.zeros(n)
    log_marginal = -math.log(n)
    for it in range(max_iter):
        log_f = log_marginal - _logsumexp(log_kernel + log_g[None, :], axis=1)
        log_g = log_marginal - _logsumexp(log_kernel + log_f[:, None], axis=0)
        if it % 10 == 9 and np.abs(_logsumexp(log_kernel + log_g[None, :], axis=1) + log_f - log_marginal).max() < tol:
            break
    plan = np.exp(log_f[:, None] + log_kernel + log_g[None, :])
    target = np.full(n, 1.0 / n)
    plan *= np.minimum(target / plan.sum(axis=1), 1.0)[:, None]
    plan *= np.minimum(target / plan.sum(axis=0), 1.0)[None, :]
    row_deficit = target - plan.sum(axis=1)
    col_deficit = target - plan.sum(axis=0)
    if row_deficit.sum() > 0:
        plan += np.outer(row_deficit, col_deficit) / row_deficit.sum()
    return n * plan[:m, :k]


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


def match_calls(
    pred_calls: Sequence[CallLike], gold_calls: Sequence[CallLike], method: Method = "optimal", reg: float = 0.1
) -> Match:
    """Assign predicted calls to gold calls and score the turn (see ``Match``).

    >>> calls = [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]
    >>> m = match_calls(calls[::-1], calls)
    >>> m.pairs, m.score
    ([(0, 1, 1.0), (1, 0, 1.0)], 1.0)
    """
    if method not in MATCH_METHODS:
        raise ValueError(f"method must be one of {MATCH_METHODS}, got {method!r}")
    if reg <= 0:
        raise ValueError(f"reg must be > 0, got {reg}")
    sim = similarity_matrix(pred_calls, gold_calls)
    m, k = sim.shape
    if m == 0 or k == 0:
        return Match([], 0.0, 1.0 if m == k else 0.0, [0.0] * m, sim)
    plan = {"optimal": _optimal, "greedy": _greedy}[method](sim) if method != "sinkhorn" else _sinkhorn(sim, reg)
    per_pred = (plan * sim).sum(axis=1)
    total = float(per_pred.sum())
    best = plan.argmax(axis=1)
    pairs = [
        (i, int(best[i]), float(sim[i, best[i]])) for i in range(m) if plan[i, best[i]] > 0 and sim[i, best[i]] > 0
    ]
    return Match(pairs, total, total / max(m, k), [float(v) for v in per_pred], plan)


@dataclass
class ToolCallMatching(TurnScorer):
    """MatchTIR turn rewards: each turn's tool calls matched against gold calls.

    A turn's calls are read in either format (``agentgym.contract.parsing.parse_tool_calls``): Hermes ``<tool_call>``
    blocks, or an OpenAI assistant message with ``tool_calls`` (as JSON text, which is how a dict action is
    recorded).

    Gold: ``traj.reset_info["gold"]["calls"]``, a list per turn of ``{"name", "arguments"}`` dicts.

    * ``scope="turn"``: turn t is matched against gold turn t (turns past the gold list have no gold calls);
      reward = ``match_calls(...).score``, and ``empty_reward`` when both the turn and its gold are call-free.
    * ``scope="trajectory"``: all predicted calls are matched against all gold calls at once (MatchTIR's global
      matching); a turn's reward is the mean credited similarity of its calls (0 for a turn without calls).
      When two calls are equally good matches for one gold call, the hard methods credit one of them
      (deterministically); Sinkhorn splits the credit between them.

    An action whose tool calls cannot be parsed (malformed JSON, unclosed tag) is a *wrong* action, not a
    scorer failure: its turn scores 0 (valid), with the parse error in ``extras["parse_errors"]``.

    >>> from agentgym.contract.trajectory import Turn
    >>> gold = {"calls": [[{"name": "add", "arguments": {"a": 1}}]]}
    >>> t = Trajectory("e", 0, "t", "a", [], {"gold": gold}, turns=[Turn(
    ...     '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', [], 0.0, True, False, {})])
    >>> ToolCallMatching()([t])[0].rewards
    [1.0]
    """

    name: str = "tool_match"
    method: Method = "optimal"
    reg: float = 0.1
    scope: Literal["turn", "trajectory"] = "turn"
    empty_reward: float = 1.0
    gold_key: str = "calls"

    def __post_init__(self) -> None:
        if self.method not in MATCH_METHODS:
            raise ValueError(f"method must be one of {MATCH_METHODS}, got {self.method!r}")
        if self.scope not in ("turn", "trajectory"):
            raise ValueError(f"scope must be 'turn' or 'trajectory', got {self.scope!r}")

    def _gold(self, traj: Trajectory) -> list[list[CallLike]]:
        gold = (traj.reset_info.get("gold") or {}).get(self.gold_key)
        if not isinstance(gold, list) or not all(isinstance(turn, list) for turn in gold):
            raise ValueError(
                f"{self.name}: task {traj.task_id!r} has no gold calls: expected reset_info['gold'][{self.gold_key!r}]"
                " as a list (one per turn) of lists of {'name', 'arguments'}"
            )
        return gold

    def score_trajectory(self, traj: Trajectory) -> TurnScores:
        gold = self._gold(traj)
        parsed: list[list[ToolCall] | None] = []
        errors: dict[int, str] = {}
        for t, turn in enumerate(traj.turns):
            try:
                parsed.append(parse_tool_calls(turn.action))
            except ParseError as e:
                parsed.append(None)
                errors[t] = str(e)
        if self.scope == "turn":
            rewards = []
            for t, calls in enumerate(parsed):
                gold_t = gold[t] if t < len(gold) else []
                if calls is None:
                    rewards.append(0.0)
                elif not calls and not gold_t:
                    rewards.append(float(self.empty_reward))
                else:
                    rewards.append(match_calls(calls, gold_t, self.method, self.reg).score)
        else:
            flat = [(t, c) for t, calls in enumerate(parsed) for c in calls or []]
            all_gold = [g for turn in gold for g in turn]
            credit = match_calls([c for _, c in flat], all_gold, self.method, self.reg).per_pred
            sums = [0.0] * len(parsed)
            counts = [0] * len(parsed)
            for (t, _), v in zip(flat, credit, strict=True):
                sums[t] += v
                counts[t] += 1
            rewards = [s / c if c else 0.0 for s, c in zip(sums, counts, strict=True)]
        return TurnScores(
            self.name, rewards, [True] * len(rewards), {"parse_errors": {str(k): v for k, v in errors.items()}}
        )

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return [self.score_trajectory(traj) for traj in group]


METHODS: tuple[catalogue.Method, ...] = (
    catalogue.Method(
        "matchtir", "MatchTIR", "scorer",
        "turn rewards from an optimal matching of the turn's tool calls to the gold calls, dual-level advantages",
        needs=("reference", "group"), paper=cite("MatchTIR"), code=f"{__name__}:ToolCallMatching",
        choices=("hard matching is the optimal assignment (scipy), not the reference code's greedy one",),
        train={"algo": "grpo", "scorer": "matchtir", "estimator": "matchtir", "reward_components": "all",
               "env_id": "agentgym/ToolUse-v0", "env_kwargs": {}, "stop": ["</tool_call>"]},
        knobs_into="scorer_kwargs"),
)  # fmt: skip
