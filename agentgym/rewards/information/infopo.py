"""InfoPO (``CounterfactualInformationGain``): how much observation ``o_t`` changed the log-probs of the next action,
and ``infopo_fuse``, its gated fusion with the outcome advantage. docs/rewards.md, 'InfoPO: counterfactual
information gain'."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring import AnswerScorer, RenderedTrajectory, Suffix, render_trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.information.common import _floats, _scores, _tokenizer_of
from agentgym.rewards.papers import cite


@dataclass
class CounterfactualInformationGain(TurnScorer):
    """InfoPO: ``I_t = mean over the tokens of a_{t+1} of [log pi(tok | context with o_t) - log pi(tok | context with
    o_t's text replaced by a same-length run of the placeholder token)]``, credited to turn t; the last turn gets 0
    (and so does a turn whose env reply was empty). Same length keeps every later position unchanged; role markers of
    the observation messages stay. Scored with the policy (``scorer``); the factual log-probs are read off the
    trajectory's own positions in the same pass. ``extras``: ``info`` (``I_1..I_T``).

    ``placeholder``: a token id, or a string whose last token is used (default ``"."``).

    >>> infopo = CounterfactualInformationGain(LocalAnswerScorer(model, tok))   # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    placeholder: str | int = "."
    name: str = "infopo"

    def _placeholder_id(self, tok: Any) -> int:
        if isinstance(self.placeholder, int):
            return self.placeholder
        ids = list(tok(self.placeholder, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"placeholder {self.placeholder!r} encodes to no token")
        return int(ids[-1])

    def _requests(self, rendered: RenderedTrajectory, placeholder: int) -> tuple[list[int], list[Suffix], list[int]]:
        cuts: list[int] = []
        suffixes: list[Suffix] = []
        turns: list[int] = []
        ids = rendered.ids
        for t in range(len(rendered.turns) - 1):
            contents = [s for s in rendered.turns[t].observation_content if s[1] > s[0]]
            nxt = rendered.turns[t + 1].action_content
            if not contents or nxt[1] <= nxt[0]:
                continue
            start = contents[0][0]
            factual = list(ids[start : nxt[1]])
            counterfactual = list(factual)
            for a, b in contents:
                counterfactual[a - start : b - start] = [placeholder] * (b - a)
            mask = tuple(nxt[0] <= start + j < nxt[1] for j in range(len(factual)))
            cuts += [start, start]
            suffixes += [Suffix(tuple(factual), mask), Suffix(tuple(counterfactual), mask)]
            turns.append(t)
        return cuts, suffixes, turns

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        placeholder = self._placeholder_id(tok)
        items, turn_lists = [], []
        for traj in group:
            rendered = render_trajectory(traj, tok)
            cuts, suffixes, turns = self._requests(rendered, placeholder)
            items.append((rendered.ids, cuts, suffixes))
            turn_lists.append(turns)
        out = []
        for traj, lps, turns in zip(group, self.scorer.logprobs_many(items), turn_lists, strict=True):
            info = [0.0] * len(traj.turns)
            for n, t in enumerate(turns):
                info[t] = float(np.mean(lps[2 * n] - lps[2 * n + 1]))
            out.append(_scores(self.name, info, {"info": _floats(info)}))
        return out


def infopo_fuse(
    a_out: Any,
    a_int: Any,
    outcome_std: float | Any,
    beta: float,
    tau: float = 0.05,
    mask: Any = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """InfoPO's gated fusion ``A = A_out + beta * g * m * z(A_int)`` with ``g = sigmoid(-outcome_std / tau)``.

    ``z`` standardises ``a_int`` over the entries where ``mask`` (``m``, default all ones) is non-zero; masked-out
    entries get ``A_out`` unchanged. The gate is near 0.5 when a group's outcomes tie (std 0: no outcome signal, lean
    on the intrinsic advantage) and falls towards 0 as the outcomes spread. ``outcome_std`` may be a scalar or
    broadcast against ``a_out`` (one per row/group).

    >>> infopo_fuse([1.0, -1.0], [0.2, 0.4], outcome_std=0.0, beta=1.0).round(3)
    array([ 0.5, -0.5])
    """
    a_out = np.asarray(a_out, dtype=np.float64)
    a_int = np.asarray(a_int, dtype=np.float64)
    m = np.ones_like(a_int) if mask is None else np.asarray(mask, dtype=np.float64)
    if a_out.shape != a_int.shape or m.shape != a_int.shape:
        raise ValueError(f"shapes differ: A_out {a_out.shape}, A_int {a_int.shape}, mask {m.shape}")
    sel = m != 0
    z = np.zeros_like(a_int)
    if sel.any():
        vals = a_int[sel]
        z[sel] = (vals - vals.mean()) / (vals.std() + eps)
    gate = 1.0 / (1.0 + np.exp(np.asarray(outcome_std, dtype=np.float64) / tau))
    return a_out + beta * gate * m * z


METHODS: tuple[Method, ...] = (
    Method("infopo", "InfoPO", "scorer",
           "counterfactual feedback: how much each observation moves the next action's likelihood, fused gated",
           needs=("scoring_model", "outcome", "group"), paper=cite("InfoPO"),
           code=f"{__name__}:CounterfactualInformationGain",
           choices=("the placeholder replacing an observation is '.' repeated to the same token length",),
           train={"algo": "grpo", "scorer": "infopo"}, knobs_into="scorer_kwargs"),
)  # fmt: skip
