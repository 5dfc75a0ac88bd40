"""The ``AnswerScorer`` interface every back-end implements, and the request planning they share: suffix tokens after
the last scored one are dropped, and a suffix that continues the prefix is read off the trajectory's own positions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from agentgym.rewards.answer_scoring.render import Suffix


@dataclass
class _Plan:
    """Where each scored token's log-prob comes from.

    ``sources[r]`` lists, for request r's scored tokens in order, ``(segment, row, target)``: segment -1 is the
    trajectory (``row`` an absolute position), segment k >= 0 the k-th appended suffix (``row`` relative to it);
    the log-prob is ``log softmax(logits at that row)[target]``. ``context_len``: trajectory tokens needed.
    """

    context_len: int
    segments: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)  # (cut, appended ids)
    sources: list[list[tuple[int, int, int]]] = field(default_factory=list)


def _check_requests(prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> None:
    if len(cuts) != len(suffixes):
        raise ValueError(f"{len(cuts)} cut points but {len(suffixes)} suffixes")
    for cut, suffix in zip(cuts, suffixes, strict=True):
        if not 0 <= cut <= len(prefix):
            raise ValueError(f"cut point {cut} outside the prefix of {len(prefix)} tokens")
        if not isinstance(suffix, Suffix):
            raise TypeError(f"suffixes must be Suffix objects, got {type(suffix).__name__}")
        if suffix.n_scored == 0:
            raise ValueError("a suffix scores no token")
        if cut == 0 and suffix.scored[0]:
            raise ValueError("the first suffix token cannot be scored at cut 0: nothing precedes it")


def _plan(prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> _Plan:
    """Lay out the requests: drop suffix tokens after the last scored one, reuse the trajectory for suffixes that
    continue it, and append the rest (each without its last scored token, whose logits come from the row before)."""
    context_len = 0
    plan = _Plan(0)
    for cut, suffix in zip(cuts, suffixes, strict=True):
        last = max(j for j, s in enumerate(suffix.scored) if s)
        ids = suffix.ids[: last + 1]
        sources: list[tuple[int, int, int]] = []
        if tuple(prefix[cut : cut + len(ids)]) == ids:
            sources = [(-1, cut + j - 1, ids[j]) for j in range(len(ids)) if suffix.scored[j]]
            context_len = max(context_len, cut + len(ids) - 1)
        else:
            context_len = max(context_len, cut)
            appended = ids[:-1]
            seg = len(plan.segments)
            if appended:
                plan.segments.append((cut, appended))
            for j in range(len(ids)):
                if suffix.scored[j]:
                    sources.append((-1, cut - 1, ids[j]) if j == 0 else (seg, j - 1, ids[j]))
        plan.sources.append(sources)
    plan.context_len = context_len
    return plan


# --------------------------------------------------------------------------------------------- interface


class AnswerScorer:
    """Teacher-forced log-probs of suffixes appended to cuts of one prefix. Subclasses implement ``logprobs``.

    ``logprobs(prefix, cuts, suffixes)[i]`` holds the log-probs (float64) of ``suffixes[i]``'s scored tokens, in
    order, each conditioned on ``prefix[:cuts[i]]`` and the suffix tokens before it. A back-end that marks failures
    (rather than raising ``ScorerError``) returns an all-NaN array for the suffixes it could not score: never zeros.
    """

    def logprobs(self, prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> list[np.ndarray]:
        raise NotImplementedError

    def logprobs_many(
        self, items: Sequence[tuple[Sequence[int], Sequence[int], Sequence[Suffix]]]
    ) -> list[list[np.ndarray]]:
        """``logprobs`` for several ``(prefix, cuts, suffixes)`` items (remote back-ends run them concurrently)."""
        return [self.logprobs(prefix, cuts, suffixes) for prefix, cuts, suffixes in items]

    def mean_logprobs(self, prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> np.ndarray:
        """Mean scored-token log-prob per suffix (NaN where scoring failed)."""
        return np.array([float(np.mean(lp)) for lp in self.logprobs(prefix, cuts, suffixes)], dtype=np.float64)
