"""IGPO information gain (``InformationGain``): ``p_t = exp(mean log p(gold | h_t, answer prompt))``,
``r_t = p_t - p_{t-1}`` for non-final turns. Not policy-invariant: it is a difference of potentials *without* the
terminal ``-p_{T-1}``, so the shaped return ``p_{T-1} - p_0`` depends on the trajectory and can change the optimal
policy. docs/rewards.md, 'IGPO: information gain'."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.grading.answers import f1_score
from agentgym.rewards.answer_scoring import AnswerScorer, CutKind, encode_suffix, render_trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.information.common import _floats, _scores, _tokenizer_of, final_answer, gold_answers
from agentgym.rewards.papers import cite

#: IGPO's pseudo answer prompt, appended after the generation prompt; the gold answer follows it.
IGPO_ANSWER_PROMPT = "<think>I now have enough information to answer.</think>\n<answer> "


@dataclass
class InformationGain(TurnScorer):
    """IGPO information gain: ``r_t = p_t - p_{t-1}`` (``prob_diff``) or ``mean log-prob_t - mean log-prob_{t-1}``
    (``log_prob_diff``) for turns ``t = 1..T-1``, where ``p_t = exp(mean_j log p(gold_j | h_t, answer_prompt))``
    and ``p_0`` conditions on the prompt alone. Sum over turns = ``p_{T-1} - p_0`` (telescoping).

    Final turn: 0 by default, because the env's ``outcome`` reward component already carries the outcome;
    ``final_reward="f1"`` adds IGPO's own final reward instead (F1 of the ``<answer>`` against the gold aliases,
    ``format_penalty`` = -2 when the last action has no parsable answer): then drop the env's outcome component
    to avoid counting it twice. Not policy-invariant (see the module docstring). IGPO scores with the policy
    itself; pass a scorer over the current policy weights.

    ``context="observation"`` uses ``h_t`` (after the env's reply, as IGPO); ``"action"`` uses ``h'_t``.
    ``answer_fn`` picks the scored answer (default: the first gold alias). ``extras``: ``p`` (``p_0..p_{T-1}``)
    and ``mean_logprob``. For ``advantages.igpo_advantages`` pass the non-final rewards, ``s.rewards[:-1]``.

    >>> scores = InformationGain(LocalAnswerScorer(model, tok))(group)     # doctest: +SKIP
    >>> scores[0].rewards, scores[0].extras["p"]                            # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    mode: Literal["prob_diff", "log_prob_diff"] = "prob_diff"
    answer_prompt: str = IGPO_ANSWER_PROMPT
    answer_close: str = " </answer>"
    context: CutKind = "observation"
    answer_fn: Callable[[Trajectory], str] | None = None
    final_reward: Literal["none", "f1"] = "none"
    format_penalty: float = -2.0
    name: str = "info_gain"

    def __post_init__(self) -> None:
        if self.mode not in ("prob_diff", "log_prob_diff"):
            raise ValueError(f"mode must be 'prob_diff' or 'log_prob_diff', got {self.mode!r}")
        if self.final_reward not in ("none", "f1"):
            raise ValueError(f"final_reward must be 'none' or 'f1', got {self.final_reward!r}")

    def _answer(self, traj: Trajectory) -> str:
        return self.answer_fn(traj) if self.answer_fn is not None else gold_answers(traj)[0]

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        items = []
        for traj in group:
            rendered = render_trajectory(traj, tok)
            pieces = [(rendered.generation_prompt + self.answer_prompt, False), (self._answer(traj), True)]
            suffix = encode_suffix(tok, [*pieces, (self.answer_close, False)])
            cuts = rendered.cuts(self.context)[: len(traj.turns)]  # h_0 .. h_{T-1}
            items.append((rendered.ids, cuts, [suffix] * len(cuts)))
        results = self.scorer.logprobs_many(items)
        out = []
        for traj, lps in zip(group, results, strict=True):
            mean_lp = np.array([np.mean(lp) for lp in lps], dtype=np.float64)
            p = np.exp(mean_lp)
            series = p if self.mode == "prob_diff" else mean_lp
            rewards = [float(series[t] - series[t - 1]) for t in range(1, len(traj.turns))]
            if traj.turns:
                rewards.append(self._final(traj))
            out.append(_scores(self.name, rewards, {"p": _floats(p), "mean_logprob": _floats(mean_lp)}))
        return out

    def _final(self, traj: Trajectory) -> float:
        if self.final_reward == "none":
            return 0.0
        answer = final_answer(traj)
        return self.format_penalty if answer is None else f1_score(answer, gold_answers(traj))


METHODS: tuple[Method, ...] = (
    Method("igpo", "IGPO", "scorer",
           "information gain: the rise in the policy's probability of the gold answer after each turn",
           needs=("scoring_model", "reference", "group"), paper=cite("IGPO"), code=f"{__name__}:InformationGain",
           choices=("the final turn gets 0 (the env's outcome component carries the outcome; final_reward='f1' "
                    "scores it as the paper does)",),
           train={"algo": "grpo", "scorer": "igpo", "estimator": "igpo", "reward_components": "all"},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
