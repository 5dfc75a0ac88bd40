"""TIPS information potential (``InformationPotential``): ``Phi_t = logsumexp_k mean log p("<answer>"+a_k+"</answer>"
| h_t)``, potential-based shaping with ``Phi(terminal) = 0``: policy-invariant. docs/rewards.md, 'TIPS: information
potential'."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring import AnswerScorer, encode_suffix, render_trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.information.common import _floats, _scores, _tokenizer_of, gold_answers
from agentgym.rewards.papers import cite


@dataclass
class InformationPotential(TurnScorer):
    """TIPS potential-based shaping with ``Phi_t = logsumexp_k mean log p_teacher(answer_format(a_k) | h_t)`` over the
    gold aliases ``a_k`` (default format ``"<answer>{answer}</answer>"``, every token scored).

    Emitted per turn: ``c*w*(Phi_t - Phi_{t-1})`` for t = 1..T, and on the last turn also ``-c*w*Phi_T`` (the
    terminal convention ``Phi(terminal) = 0``; a truncated episode's end counts as terminal too), so the last turn
    gets ``-c*w*Phi_{T-1}`` and the emitted rewards sum to ``-c*w*Phi_0``. The outcome ``R`` is *not* emitted: it
    stays in the env's ``outcome`` reward component, so after ``annotate`` the turn rewards sum to ``R - c*w*Phi_0``
    for any ``c`` (docs/rewards.md, 'TIPS: information potential'). ``terminal_zero=False`` skips the terminal term
    (sum ``c*w*(Phi_T - Phi_0)``).

    ``scale``: a fixed ``c`` (0.02) or ``"adaptive"``: ``c = scale_target / mean|dPhi|`` over the non-terminal
    differences of the batch, clipped to ``scale_bounds`` (``fit_scale``; ``score_groups`` fits one ``c`` for several
    groups, ``__call__`` fits it on its one group). ``weight`` is ``w``. The teacher is the scorer's model (a frozen or
    periodically refreshed copy of the policy). ``extras``: ``phi`` (``Phi_0..``), ``scale``.

    >>> tips = InformationPotential(LocalAnswerScorer(teacher, tok), scale="adaptive")  # doctest: +SKIP
    >>> per_group = tips.score_groups(groups)                                           # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    scale: float | Literal["adaptive"] = 0.02
    weight: float = 1.0
    answer_prompt: str = ""
    answer_format: str = "<answer>{answer}</answer>"
    answers_fn: Callable[[Trajectory], Sequence[str]] | None = None
    scale_target: float = 0.11
    scale_bounds: tuple[float, float] = (0.02, 0.2)
    terminal_zero: bool = True
    name: str = "info_potential"

    def __post_init__(self) -> None:
        if self.scale != "adaptive" and not isinstance(self.scale, (int, float)):
            raise ValueError(f"scale must be a number or 'adaptive', got {self.scale!r}")
        lo, hi = self.scale_bounds
        if not 0 < lo <= hi:
            raise ValueError(f"scale_bounds must satisfy 0 < low <= high, got {self.scale_bounds}")

    def potentials(self, group: Sequence[Trajectory]) -> list[np.ndarray]:
        """``Phi_0..Phi_{T-1}`` per trajectory (``..Phi_T`` with ``terminal_zero=False``); NaN where scoring failed."""
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        items, n_aliases = [], []
        for traj in group:
            rendered = render_trajectory(traj, tok)
            n_ctx = len(traj.turns) if self.terminal_zero else len(traj.turns) + 1
            cuts = rendered.cuts("observation")[:n_ctx]
            answers = list(self.answers_fn(traj) if self.answers_fn is not None else gold_answers(traj))
            if not answers:
                raise ValueError(f"no answers to score for task {traj.task_id!r}")
            prefix_text = rendered.generation_prompt + self.answer_prompt
            suffixes = [
                encode_suffix(tok, [(prefix_text, False), (self.answer_format.format(answer=a), True)]) for a in answers
            ]
            items.append((rendered.ids, [c for c in cuts for _ in suffixes], [s for _ in cuts for s in suffixes]))
            n_aliases.append(len(suffixes))
        out = []
        for lps, k in zip(self.scorer.logprobs_many(items), n_aliases, strict=True):
            means = np.array([np.mean(lp) for lp in lps], dtype=np.float64).reshape(-1, k)
            out.append(_logsumexp_rows(means))
        return out

    def fit_scale(self, potentials: Sequence[np.ndarray]) -> float:
        """Adaptive ``c = scale_target / mean|Phi_t - Phi_{t-1}|`` (non-terminal steps, NaN ignored), clipped to
        ``scale_bounds``; the upper bound when every difference is 0 or there is none."""
        lo, hi = self.scale_bounds
        diffs = np.concatenate(
            [np.abs(np.diff(np.asarray(phi, dtype=np.float64))) for phi in potentials] or [np.zeros(0)]
        )
        diffs = diffs[np.isfinite(diffs)]
        mean = float(diffs.mean()) if diffs.size else 0.0
        return hi if mean <= 0 else float(np.clip(self.scale_target / mean, lo, hi))

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        """Score several groups with one (possibly adaptive) scale ``c``."""
        phis = [self.potentials(g) for g in groups]
        c = self.fit_scale([p for ps in phis for p in ps]) if self.scale == "adaptive" else float(self.scale)
        return [
            [self._shaped(traj, phi, c) for traj, phi in zip(g, ps, strict=True)]
            for g, ps in zip(groups, phis, strict=True)
        ]

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([group])[0]

    def _shaped(self, traj: Trajectory, phi: np.ndarray, c: float) -> TurnScores:
        T = len(traj.turns)
        cw = c * self.weight
        rewards = [cw * (phi[t] - phi[t - 1]) for t in range(1, T)]
        if T:
            # last turn: c*w*(Phi_T - Phi_{T-1}) - c*w*Phi_T = -c*w*Phi_{T-1} (Phi_T cancels, so it is not scored)
            rewards.append(-cw * phi[T - 1] if self.terminal_zero else cw * (phi[T] - phi[T - 1]))
        return _scores(self.name, rewards, {"phi": _floats(phi), "scale": c, "weight": self.weight})


def _logsumexp_rows(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return np.zeros(x.shape[0])
    m = np.max(x, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        return (m + np.log(np.sum(np.exp(x - m), axis=1, keepdims=True)))[:, 0]


METHODS: tuple[Method, ...] = (
    Method("tips", "TIPS", "scorer",
           "potential-based shaping with a teacher's log-probability of the gold answer as the potential",
           needs=("scoring_model", "reference"), paper=cite("TIPS"), code=f"{__name__}:InformationPotential",
           choices=("the teacher is the current policy (a frozen copy is a scorer argument)",),
           train={"algo": "ppo", "scorer": "tips", "reward_components": "all"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
