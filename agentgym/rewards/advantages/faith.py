"""FaithRL's advantage (docs/step-labels.md, 'FaithRL'): a geometric reward over per-step support labels, then a
faithfulness-aware modulation of each step's advantage.

Each turn s of a trajectory carries a support label f_s in {0, 1} (``TurnBatch.turn_signals``: 1 where the step's
claim is supported by the evidence, 0 where it is not, None where nobody could say; :class:`~agentgym.rewards.faith.
StepSupport` makes them). With the trajectory's verified outcome ``correct``:

* the geometric reward ``R = correct * (prod_s (eps + (1 - eps) * f_s)) ** (1 / S)`` over the S labelled steps (a
  trajectory with no labelled step keeps ``R = correct``);
* ``A_i = z_group(R_i)``, GRPO's z-score of R within the group;
* a supported step gets ``A_i`` if ``A_i > 0``, else ``keep_negative * A_i`` (0 by default: a valid partial
  derivation of a failed trajectory is not punished); an unsupported step gets ``-max(|A_i|, kappa)`` (never a
  positive advantage; ``kappa`` floors the penalty so an unsupported step of a tied group is still penalised);
  a step without a label keeps ``A_i``.

Every label 1 and ``keep_negative=1`` is GRPO exactly.

>>> a = faith_advantages([1.0, 1.0, 0.0], [[1, 1], [1, 0], [1, 0]], ["q", "q", "q"], eps=0.25, adv_eps=0.0)
>>> [x.round(4).tolist() for x in a]  # R = (1, 0.5, 0): A = (1.2247, 0, -1.2247)
[[1.2247, 1.2247], [0.0, 0.0], [0.0, -1.2247]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from agentgym.rewards.advantages.base import DEFAULT_EPS, ArrayLike, EstimatorSpec, _keys, _vec
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.advantages.signals import _signal_rows
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

Labels = Sequence[Sequence[float | bool | None]]


def _check_labels(rows: list[list[float | None]]) -> None:
    for i, row in enumerate(rows):
        for t, x in enumerate(row):
            if x is not None and x not in (0.0, 1.0):
                raise ValueError(f"support label of trajectory {i}, turn {t} is {x}: labels are 0, 1 or None")


def geometric_reward(correct: float, labels: Sequence[float | None], eps: float = 0.1) -> float:
    """FaithRL's geometric reward ``correct * (prod_s (eps + (1 - eps) f_s)) ** (1 / S)`` over the labelled steps.

    >>> round(geometric_reward(1.0, [1, 0, 1, 1], eps=0.0625), 12)
    0.5
    """
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must be in [0, 1], got {eps}")
    f = [float(x) for x in labels if x is not None]
    if not f:
        return float(correct)
    if eps == 0.0 and 0.0 in f:
        return 0.0
    log_mean = math.fsum(math.log(eps + (1.0 - eps) * x) for x in f) / len(f)
    return float(correct) * math.exp(log_mean)


def modulate(
    advantage: float, labels: Sequence[float | None], kappa: float = 0.0, keep_negative: float = 0.0
) -> list[float]:
    """The per-step advantages of one trajectory whose GRPO advantage is ``advantage`` (see the module docstring).

    >>> modulate(-0.5, [1, 0, None], kappa=0.75)
    [0.0, -0.75, -0.5]
    """
    if kappa < 0 or not 0.0 <= keep_negative <= 1.0:
        raise ValueError(f"need kappa >= 0 and keep_negative in [0, 1], got {kappa}, {keep_negative}")
    out = []
    for f in labels:
        if f is None:
            out.append(advantage)
        elif f == 1.0:
            out.append(advantage if advantage > 0 else keep_negative * advantage)
        else:
            out.append(-max(abs(advantage), kappa))
    return [x + 0.0 for x in out]  # no -0.0 from 0 * negative


def faith_advantages(
    outcomes: ArrayLike,
    labels: Labels,
    group_ids: ArrayLike,
    eps: float = 0.1,
    kappa: float = 0.0,
    keep_negative: float = 0.0,
    adv_eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """FaithRL: per-turn advantages from the outcomes (``correct``, the verified outcome), the per-turn support
    labels and the groups (see the module docstring)."""
    r = _vec(outcomes, "outcomes")
    keys = _keys(group_ids, r.size)
    rows = _signal_rows(labels, "labels")
    if len(rows) != r.size:
        raise ValueError(f"{r.size} outcomes but {len(rows)} label rows")
    _check_labels(rows)
    geo = np.array([geometric_reward(c, row, eps) for c, row in zip(r, rows, strict=True)], dtype=np.float64)
    a = grpo(geo, keys, adv_eps)
    return [
        np.array(modulate(float(ai), row, kappa, keep_negative), dtype=np.float64)
        for ai, row in zip(a, rows, strict=True)
    ]


def _est_faith(
    b: TurnBatch, eps: float = 0.1, kappa: float = 0.0, keep_negative: float = 0.0, adv_eps: float = DEFAULT_EPS
) -> list[np.ndarray]:
    if b.turn_signals is None:
        raise ValueError("faith needs TurnBatch.turn_signals: the per-step support labels (in the trainer: the "
                         "StepSupport scorer with turn_signal_source='scorer')")  # fmt: skip
    return faith_advantages(b.outcome_array, b.turn_signals, b.group_ids, eps, kappa, keep_negative, adv_eps)


#: outcome_only: the rewards reach faith only through each trajectory's outcome (its step credit is the labels).
REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("faith", _est_faith, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("faithrl", "FaithRL", "estimator",
           "geometric step-support reward, then unsupported steps penalised and supported ones never punished",
           needs=("outcome", "group", "reference"), paper=cite("FaithRL"), code=f"{__name__}:_est_faith",
           choices=("f~_s = eps + (1 - eps) f_s, R = correct * (prod_s f~_s)^(1/S) over the labelled steps, "
                    "eps = 0.1 (knob eps); correct is the verified outcome (SearchQA: exact match)",
                    "a supported step gets A_i if A_i > 0, else keep_negative * A_i (knob, 0: exactly 0; 1 with every "
                    "step supported is GRPO); an unsupported step gets -max(|A_i|, kappa) (knob kappa = 0, the floor "
                    "of the penalty); a turn the judge could not label keeps A_i",
                    "labels: StepSupport (agentgym.rewards.faith), a yes/no question per turn whose rule is the "
                    "verified rule (every content word of the step's answer/search claim occurs in the evidence read "
                    "before it or in the gold supporting documents' facts); scorer_kwargs judge picks an LLM judge",
                    "A_i: GRPO's population z-score of R within the group (knob adv_eps)"),
           train={"algo": "grpo", "estimator": "faith", "scorer": "agentgym.rewards.faith:StepSupport",
                  "turn_signal_source": "scorer", "env_id": "agentgym/SearchQA-v0"},
           knobs_into="estimator_kwargs"),
)  # fmt: skip
