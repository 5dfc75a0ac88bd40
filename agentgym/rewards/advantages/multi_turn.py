"""Multi-turn GRPO with a verified per-turn signal (docs/rewards.md, 'Multi-turn GRPO'); the signals it reads are
in :mod:`agentgym.rewards.advantages.signals` (``TurnSignal``, ``TURN_SIGNALS``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentgym.rewards.advantages.base import DEFAULT_EPS, ArrayLike, EstimatorSpec, _keys, _vec, group_zscore
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.advantages.signals import _signal_rows
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

FinalTurn = Literal["outcome", "both"]


def mt_grpo(
    outcomes: ArrayLike,
    turn_signals: Sequence[Sequence[float | bool | None]],
    group_ids: ArrayLike,
    turn_coef: float = 1.0,
    outcome_coef: float = 1.0,
    final_turn: FinalTurn = "outcome",
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """Multi-turn GRPO (Zeng et al.): two reward streams, each normalised over its own population.

    * Outcome term ``A^O_i = z_group(R_i)``: over every rollout of the group, whatever its length (as :func:`grpo`).
    * Turn term ``A^T_{i,t} = z_{(group, t)}(s_{i,t})``: turn ``t``'s verified signal over the *cell* of the
      rollouts of the group that reached turn ``t`` and report a signal there. A shorter rollout is simply absent
      from the cells of the turns it never played; a turn whose signal is None (e.g. a diagnostic's distractor
      stage) is in no cell. With ``final_turn="outcome"`` a rollout's final turn is in no cell either (its signal
      is unused, so it does not move its siblings' z-scores).
    * A turn whose signal is used gets ``turn_coef * A^T + outcome_coef * A^O`` (the paper's ``A^T + lambda A^O``,
      lambda = 1); every other turn gets ``A^O`` alone: the final turn (``final_turn="outcome"``, the paper's
      rule: its verified reward is the outcome) and turns without a signal. ``final_turn="both"`` treats the final
      turn like the others.

    ``z`` is the population z-score with ``eps`` added to the std, as in :func:`grpo`: a cell or group of one, or
    whose values all tie, gives exact zeros (no information, no advantage from that stream). The turn term is
    invariant to ``a * s + b`` (``a > 0``) per cell, up to ``eps``. ``turn_coef=0`` is GRPO exactly.

    >>> a = mt_grpo([1.0, 0.0], [[True, True], [False, True]], ["q", "q"], eps=0.0)
    >>> [x.tolist() for x in a]  # turn 1: z(1, 0) + z(1, 0); turn 2 (final): z(R) alone
    [[2.0, 1.0], [-2.0, -1.0]]
    """
    r = _vec(outcomes, "outcomes")
    keys = _keys(group_ids, r.size)
    sig = _signal_rows(turn_signals, "turn_signals")
    if len(sig) != r.size:
        raise ValueError(f"{r.size} outcomes but {len(sig)} signal rows")
    if final_turn not in ("outcome", "both"):
        raise ValueError(f"final_turn must be 'outcome' or 'both', got {final_turn!r}")
    if not (math.isfinite(turn_coef) and math.isfinite(outcome_coef)):
        raise ValueError(f"turn_coef and outcome_coef must be finite, got {turn_coef}, {outcome_coef}")
    a_o = grpo(r, keys, eps)
    used = [[v is not None and (final_turn == "both" or t < len(row) - 1) for t, v in enumerate(row)] for row in sig]
    values = [v for row, u in zip(sig, used, strict=True) for v, ok in zip(row, u, strict=True) if ok]
    cells = [(keys[i], t) for i, u in enumerate(used) for t, ok in enumerate(u) if ok]
    z = iter(group_zscore(np.array(values, dtype=np.float64), cells, eps).tolist())
    out = []
    for i, u in enumerate(used):
        out.append(np.array([turn_coef * next(z) + outcome_coef * a_o[i] if ok else a_o[i] for ok in u]) + 0.0)
    return out


def _est_mt_grpo(
    b: TurnBatch,
    turn_coef: float = 1.0,
    outcome_coef: float = 1.0,
    final_turn: FinalTurn = "outcome",
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    if b.turn_signals is None:
        raise ValueError("mt_grpo needs TurnBatch.turn_signals (a verified per-turn signal; see TURN_SIGNALS)")
    return mt_grpo(b.outcome_array, b.turn_signals, b.group_ids, turn_coef, outcome_coef, final_turn, eps)


#: mt_grpo reads the rewards only through the outcome: its turn credit comes from the verified signal.
REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("mt_grpo", _est_mt_grpo, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("mt_grpo", "MT-GRPO", "estimator",
           "verified per-turn signal normalised per (group, turn index) plus the group outcome z-score",
           needs=("outcome", "group", "turn_signal"), paper=cite("MT-GRPO"), code=f"{__name__}:_est_mt_grpo",
           choices=("outcome_coef lambda = 1 as in the reference code (0.5 elsewhere)",),
           train={"algo": "grpo", "estimator": "mt_grpo"}, knobs_into="estimator_kwargs"),
)  # fmt: skip
