"""HiPER's hierarchical advantage estimation (docs/rewards.md, 'HiPER'): a planner turn proposes a subgoal, the
executor turns until the next subgoal carry it out; returns are aggregated per subgoal segment, and each turn is
credited with its return measured against the group's segment returns."""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from agentgym.rewards.advantages.base import DEFAULT_EPS, ArrayLike, EstimatorSpec, _check_unit, _keys, _ragged
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

SegmentNorm = Literal["group", "segment"]


def subgoal_segments(texts: Sequence[str], tag: str = "subgoal") -> list[int]:
    """The segment index of each turn: a turn whose text holds ``<tag>...</tag>`` starts a new segment (the first
    turn is segment 0 whether or not it holds one); the turns after it belong to it until the next tagged turn.

    >>> subgoal_segments(["<subgoal>find key</subgoal> go north", "take key", "<subgoal>open</subgoal> open door"])
    [0, 0, 1]
    """
    pattern = re.compile(rf"<{re.escape(tag)}>.*?</{re.escape(tag)}>", re.DOTALL)
    out, k = [], 0
    for t, text in enumerate(texts):
        if t > 0 and pattern.search(text):
            k += 1
        out.append(k)
    return out


def subgoal_achieved(
    segments: ArrayLike, reset_info: Mapping[str, Any], infos: Sequence[Mapping[str, Any]], key: str = "plan_length"
) -> list[float] | None:
    """The env-verified "subgoal achieved" signal of one rollout: 1.0 on the last turn of each segment after which
    the env's remaining distance to the goal (``info[key]``: Household's expert plan length, with
    ``expert_plan=True``) is shorter than before its first turn (the reset's for the first turn), else 0.0. A
    segment whose distance is unknown at either end counts as not achieved; None when no step reports the key.

    >>> subgoal_achieved([0, 0, 1, 1], {"plan_length": 4}, [{"plan_length": 4}, {"plan_length": 3},
    ...                  {"plan_length": 5}, {"plan_length": 3}])
    [0.0, 1.0, 0.0, 0.0]
    """
    seg = np.asarray(segments, dtype=np.int64).reshape(-1)
    if seg.size != len(infos):
        raise ValueError(f"{seg.size} segment indices for {len(infos)} steps")
    if not any(_distance(i, key) is not None for i in infos):
        return None
    out = [0.0] * seg.size
    start = 0
    for t in range(seg.size):
        if t + 1 < seg.size and seg[t + 1] == seg[t]:
            continue
        before = _distance(infos[start - 1] if start else reset_info, key)
        after = _distance(infos[t], key)
        # choice: achieved = the distance to the goal shrank over the segment (a net gain; detours inside it allowed)
        out[t] = float(before is not None and after is not None and after < before)
        start = t + 1
    return out


def _distance(info: Mapping[str, Any], key: str) -> float | None:
    x = info.get(key)
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _segment_returns(r: np.ndarray, seg: np.ndarray, gamma: float) -> tuple[dict[int, float], np.ndarray]:
    """``G^H_k = sum_{t in k} r_t + gamma * G^H_{k+1}`` per non-empty segment ``k`` (an empty segment, a skipped
    index, is passed over), and each turn's ``G^L_t`` = its reward-to-go within the segment + ``gamma * G^H_{k+1}``."""
    high: dict[int, float] = {}
    low = np.zeros(r.size)
    after = 0.0  # G^H of the next non-empty segment
    end = r.size
    for k in sorted(set(seg.tolist()), reverse=True):
        start = int(np.searchsorted(seg, k, side="left"))
        acc = gamma * after
        for t in range(end - 1, start - 1, -1):
            acc = r[t] + acc
            low[t] = acc
        high[k] = acc
        after, end = acc, start
    return high, low


def hiper_advantages(
    turn_rewards: Sequence[ArrayLike],
    segments: Sequence[ArrayLike],
    group_ids: ArrayLike,
    gamma: float = 1.0,
    by: SegmentNorm = "group",
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """HiPER's hierarchical advantage (HAE). Segment ``k`` of a rollout returns
    ``G^H_k = sum_{t in k} r_t + gamma * G^H_{k+1}``; its planner turn (the segment's first) gets
    ``A^H_k = (G^H_k - mu) / (sigma + eps)``, and an executor turn ``t`` of it gets
    ``A^L_t = (G^L_t - mu) / (sigma + eps)`` with ``G^L_t`` the reward-to-go within the segment plus
    ``gamma * G^H_{k+1}`` (at the segment's first turn ``G^L = G^H``, so both levels agree there). ``mu`` and
    ``sigma`` (population std) are over the segment returns of the population: all segments of the group's
    rollouts (``by="group"``) or those with the same index (``by="segment"``). A population of one, or whose
    returns tie, gives 0 to its turns. One segment per trajectory with the reward on the last turn is GRPO; one
    turn per segment is GTPO (``by="group"``).

    >>> [a.tolist() for a in hiper_advantages([[0.0, 1.0], [0.0, 0.0]], [[0, 0], [0, 1]], [0, 0], eps=0.0)]
    [[1.4142135623730951, 1.4142135623730951], [-0.7071067811865475, -0.7071067811865475]]
    """
    rows = _ragged(turn_rewards, "turn_rewards")
    segs = [np.asarray(s, dtype=np.int64) for s in _ragged(segments, "segments")]
    keys = _keys(group_ids, len(rows))
    if [s.size for s in segs] != [r.size for r in rows]:
        raise ValueError("segments must have one entry per turn")
    if any((np.diff(s) < 0).any() or (s < 0).any() for s in segs):
        raise ValueError("segment indices must be >= 0 and nondecreasing")
    if by not in ("group", "segment"):
        raise ValueError(f"by must be 'group' or 'segment', got {by!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    _check_unit("gamma", gamma)
    split = [_segment_returns(r, s, gamma) for r, s in zip(rows, segs, strict=True)]
    # choice: normalise over all segments of the group (by="group", so one turn per segment is GTPO); knob by
    pops: dict[Hashable, list[float]] = {}
    for i, (high, _) in enumerate(split):
        for k, g in high.items():
            pops.setdefault(keys[i] if by == "group" else (keys[i], k), []).append(g)
    stats: dict[Hashable, tuple[float, float] | None] = {}
    for cell, vals in pops.items():
        x = np.asarray(vals)
        if x.size <= 1 or bool(np.all(x == x[0])):
            stats[cell] = None  # no comparison in this population: no advantage (as GRPO's tie rule)
            continue
        mu = math.fsum(x) / x.size
        # choice: the baseline is the population's mean segment return, scaled by its std (knob by)
        stats[cell] = (mu, math.sqrt(math.fsum((x - mu) ** 2) / x.size) + eps)
    out = []
    for i, (_, low) in enumerate(split):
        a = np.zeros(low.size)
        for t, k in enumerate(segs[i].tolist()):
            st = stats[keys[i] if by == "group" else (keys[i], k)]
            if st is not None and st[1] > 0:
                a[t] = (low[t] - st[0]) / st[1]
        out.append(a + 0.0)
    return out


def _est_hiper(
    b: TurnBatch,
    gamma: float = 1.0,
    by: SegmentNorm = "group",
    eps: float = DEFAULT_EPS,
    achieved_bonus: float = 0.0,
) -> list[np.ndarray]:
    """``hiper_advantages`` of the batch's turn rewards, plus ``achieved_bonus`` on the last turn of each segment
    whose subgoal the env verified achieved (``TurnBatch.subgoal_achieved``, see :func:`subgoal_achieved`)."""
    if b.segments is None:
        raise ValueError("hiper needs TurnBatch.segments (each turn's subgoal segment, see subgoal_segments)")
    if not math.isfinite(achieved_bonus):
        raise ValueError(f"achieved_bonus must be finite, got {achieved_bonus}")
    rewards = b.turn_rewards
    if achieved_bonus:
        if b.subgoal_achieved is None:
            raise ValueError("hiper's achieved_bonus needs TurnBatch.subgoal_achieved (see subgoal_achieved)")
        # choice: the verified signal enters as a segment-end bonus on the turn rewards (knob achieved_bonus; 0: off)
        rewards = [
            np.asarray(r) + achieved_bonus * np.asarray(a) for r, a in zip(rewards, b.subgoal_achieved, strict=True)
        ]
    return hiper_advantages(rewards, b.segments, b.group_ids, gamma, by, eps)


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("hiper", _est_hiper),)

METHODS: tuple[Method, ...] = (
    Method("hiper", "HiPER", "estimator",
           "hierarchical advantage: returns aggregated per subgoal segment, planner and executor turns credited "
           "against the group's segment returns",
           needs=("outcome", "group", "segments"), paper=cite("HiPER"), code=f"{__name__}:_est_hiper",
           choices=("segments from <subgoal>...</subgoal> tags: a tagged turn starts a new segment "
                    "(subgoal_segments); the subgoal_format wrapper asks for the tags and marks a malformed turn "
                    "action_valid=False",
                    "normalisation over all segment returns of the group (by='group', so one turn per segment is "
                    "GTPO); knob by='segment' z-scores per (group, segment index)",
                    "the executor baseline is the same population's mean segment return, scaled by its std",
                    "gamma discounts between segments, not within one; knob gamma",
                    "a population of one or of tied returns gives 0",
                    "the verified subgoal-achieved signal (Household with expert_plan=True: the expert plan is "
                    "shorter after the segment than before it) is a bonus on the segment's last turn; knob "
                    "achieved_bonus (0: off; it needs an env that reports plan_length)",
                    "critic-free: segment returns are measured against the group, not against learned high- and "
                    "low-level values"),
           train={"algo": "grpo", "estimator": "hiper", "reward_wrappers": [{"name": "subgoal_format"}]},
           knobs_into="estimator_kwargs"),
)  # fmt: skip
