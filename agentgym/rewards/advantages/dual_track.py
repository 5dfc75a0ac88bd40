"""TRUST-SQL's Dual-Track GRPO (docs/rewards.md, 'Dual-track GRPO'): exploration turns (schema probing) are credited
with the group advantage of the exploration reward, execution turns (the final answer) with the outcome's."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentgym.rewards.advantages.base import DEFAULT_EPS, ArrayLike, EstimatorSpec, _check_unit, _keys
from agentgym.rewards.advantages.batch import PHASES, TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite


def turn_phases(infos: Sequence[Mapping[str, Any]], key: str = "phase") -> list[str]:
    """Each step's phase: ``info[key]`` when it is ``"exploration"`` or ``"execution"``; otherwise (absent) the final
    step is ``"execution"`` and every earlier one ``"exploration"``.

    >>> turn_phases([{}, {"phase": "execution"}, {}])
    ['exploration', 'execution', 'execution']
    """
    last = len(infos) - 1
    out = []
    for t, info in enumerate(infos):
        phase = info.get(key)
        if phase is not None and phase not in PHASES:
            raise ValueError(f"info[{key!r}] at step {t}: unknown phase {phase!r}; known: {', '.join(PHASES)}")
        out.append(phase if phase is not None else ("execution" if t == last else "exploration"))
    return out


def exploration_reward(infos: Sequence[Mapping[str, Any]], key: str = "exploration_reward") -> float:
    """A rollout's exploration reward: the last finite number an info reports under ``key`` (0 when none does).

    >>> exploration_reward([{"exploration_reward": 0.5}, {"exploration_reward": 0.75}, {}])
    0.75
    """
    for info in reversed(infos):
        x = info.get(key)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)):
            return float(x)
    return 0.0


def dual_track_advantages(
    outcomes: ArrayLike,
    exploration_rewards: ArrayLike,
    phases: Sequence[Sequence[str]],
    group_ids: ArrayLike,
    lam: float = 0.0,
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """Dual-Track GRPO: ``A^exp_i = z_group(R^exp_i)`` and ``A^out_i = z_group(R^out_i)``; an execution turn gets
    ``A^out_i``, an exploration turn ``(1 - lam) * A^exp_i + lam * A^out_i``. ``lam=0`` (default) isolates the
    tracks: exploration turns do not see the outcome, execution turns do not see the exploration reward.
    ``lam=1``, or ``R^exp == R^out``, gives GRPO.

    >>> phases = [["exploration", "execution"]] * 2
    >>> [a.tolist() for a in dual_track_advantages([1.0, 0.0], [0.0, 1.0], phases, [0, 0], eps=0.0)]
    [[-1.0, 1.0], [1.0, -1.0]]
    """
    a_out = grpo(outcomes, group_ids, eps)
    a_exp = grpo(exploration_rewards, group_ids, eps)
    _keys(group_ids, len(phases))
    if a_exp.size != a_out.size or len(phases) != a_out.size:
        raise ValueError(f"{a_out.size} outcomes, {a_exp.size} exploration rewards and {len(phases)} phase rows")
    _check_unit("lam", lam)
    # choice: a convex mix on exploration turns, so lam=1 is GRPO (the spec's additive lam*A^out would double it)
    mixed = (1.0 - lam) * a_exp + lam * a_out
    out = []
    for i, row in enumerate(phases):
        bad = set(row) - set(PHASES)
        if bad:
            raise ValueError(f"phases[{i}]: unknown phase(s) {sorted(bad)}; known: {', '.join(PHASES)}")
        out.append(np.array([a_out[i] if p == "execution" else mixed[i] for p in row], dtype=np.float64) + 0.0)
    return out


def _est_dual_track(b: TurnBatch, lam: float = 0.0, eps: float = DEFAULT_EPS) -> list[np.ndarray]:
    if b.phases is None or b.exploration_rewards is None:
        raise ValueError("dual_track needs TurnBatch.phases and TurnBatch.exploration_rewards")
    return dual_track_advantages(b.outcome_array, b.exploration_rewards, b.phases, b.group_ids, lam, eps)


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("dual_track", _est_dual_track, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("dual_track", "TRUST-SQL", "estimator",
           "dual-track GRPO: exploration turns get the exploration reward's group advantage, execution turns the "
           "outcome's",
           needs=("outcome", "group", "segments", "turn_signal"), paper=cite("TRUST-SQL"),
           code=f"{__name__}:_est_dual_track",
           choices=("exploration turns get (1 - lam)*A^exp + lam*A^out (a convex mix, so lam=1 is GRPO); knob lam, "
                    "default 0 (isolated tracks)",
                    "phases from info['phase']; where absent the final turn is execution and earlier turns "
                    "exploration (turn_phases)",
                    "R^exp is the last info['exploration_reward'] of the rollout, 0 where none (exploration_reward)",
                    "advantages per turn: every token of a turn gets its phase's advantage"),
           train={"algo": "grpo", "estimator": "dual_track", "env_id": "agentgym/SQL-v0", "env_kwargs": {},
                  "stop": ["</tool_call>"]},  # the paper's setting: text-to-SQL that must discover the schema
           knobs_into="estimator_kwargs"),
)  # fmt: skip
