"""T^2PO's token-level thinking intervention: when the policy's uncertainty stops changing, insert a fixed string.

:class:`InterveningPolicy` samples like :class:`~agentgym.baselines.rollout.HFPolicy`, in windows of ``window``
tokens. A window's uncertainty is the mean surprisal ``-log p`` of its sampled tokens (the paper's "marginal
uncertainty"; unstated: a one-sample estimate of the entropy, which the sampler does not return). When it changed by
less than ``delta`` from the previous window's, the tokens of ``text`` are appended to the action (within its token
budget) and sampling goes on after them. The inserted tokens carry log-prob 0 and are kept out of the loss:
:meth:`InterveningPolicy.mask_interventions` sets their ``loss_mask`` to 0 in the finished rollouts. ``delta = 0``
never intervenes (it samples exactly as the plain policy). The turn-level part of T^2PO (resampling turns without
progress) is ``agentgym.baselines.branches.resample_stalled``. ``agentgym train`` samples through this policy with
``think_intervention`` (knobs ``think_window``, ``think_delta``, ``think_text``; ``backends.make_backend``) and
masks the inserted tokens of the main rollouts and forks before the batch is built (:func:`mask_thinking`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from agentgym.baselines.rollout import HFPolicy, Rollout

__all__ = ["InterveningPolicy", "mask_thinking"]


class InterveningPolicy(HFPolicy):
    """An ``HFPolicy`` with T^2PO's thinking intervention (knobs ``window``, ``delta``, ``text``; unstated in the
    paper: w = 8 tokens, delta = 0.05 nats, the text " Wait, let me think again. ")."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        window: int = 8,
        delta: float = 0.05,
        text: str = " Wait, let me think again. ",
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(model, tokenizer, amp_dtype=amp_dtype)
        if window < 1 or delta < 0:
            raise ValueError(f"window must be >= 1 and delta >= 0, got {window} and {delta}")
        self.window, self.delta, self.text = window, delta, text
        # (context, action tokens) -> the inserted token ranges of that action (K forks share a context)
        self.inserted: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[int, int]]] = {}

    def _stopped_at(self, tokens: list[int], start: int, stop: Sequence[str]) -> int | None:
        """The shortest length ``> start`` whose decoded prefix of ``tokens`` holds a stop string (None: none)."""
        if not stop or not any(s in self.decode(tokens) for s in stop):
            return None
        return next(m for m in range(start + 1, len(tokens) + 1) if any(s in self.decode(tokens[:m]) for s in stop))

    @torch.no_grad()
    def sample_batch(
        self,
        contexts: Sequence[Sequence[int]],
        *,
        budgets: Sequence[int],
        temperature: float,
        stop: Sequence[str],
        generators: Sequence[torch.Generator],
        share_prefill: bool = False,
    ) -> list[tuple[list[int], list[float], str]]:
        """:meth:`HFPolicy.sample_batch` window by window, with the intervention; each row's inserted ranges (in its
        sampled tokens' coordinates) are kept in ``inserted`` under its context and tokens. ``delta = 0`` samples as
        :meth:`HFPolicy.sample_batch` does, in one pass (the same tokens and log-probs, bit for bit)."""
        if self.delta == 0:  # |u - u_prev| < 0 never holds: no intervention
            return super().sample_batch(contexts, budgets=budgets, temperature=temperature, stop=stop,
                                        generators=generators, share_prefill=share_prefill)  # fmt: skip
        n = len(contexts)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        finish = ["length"] * n
        ranges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        last: list[float | None] = [None] * n
        insert = self.encode(self.text)
        active = [i for i in range(n) if budgets[i] > 0]
        while active:
            rows = super().sample_batch([[*contexts[i], *tokens[i]] for i in active],
                                        budgets=[min(self.window, budgets[i] - len(tokens[i])) for i in active],
                                        temperature=temperature, stop=(), generators=[generators[i] for i in active],
                                        share_prefill=share_prefill)  # fmt: skip
            going = []
            for i, (tok, lp, fin) in zip(active, rows, strict=True):
                start = len(tokens[i])
                tokens[i] += tok
                logprobs[i] += lp
                cut = self._stopped_at(tokens[i], start, stop)  # a stop string may span two windows
                if cut is not None:
                    del tokens[i][cut:], logprobs[i][cut:]
                    finish[i] = "stop"
                    continue
                if fin == "eos":
                    finish[i] = "eos"
                    continue
                if len(tokens[i]) >= budgets[i] or not tok:
                    continue
                u = math.fsum(-x for x in lp) / len(lp)
                room = budgets[i] - len(tokens[i])
                previous = last[i]
                if previous is not None and abs(u - previous) < self.delta and room > len(insert):
                    ranges[i].append((len(tokens[i]), len(tokens[i]) + len(insert)))
                    tokens[i] += insert
                    logprobs[i] += [0.0] * len(insert)
                    last[i] = None  # the next two windows decide again
                else:
                    last[i] = u
                going.append(i)
            active = going
        for i in range(n):
            if ranges[i]:
                self.inserted[tuple(contexts[i]), tuple(tokens[i])] = ranges[i]
        return [(tokens[i], logprobs[i], finish[i]) for i in range(n)]

    def mask_interventions(self, rollouts: Sequence[Rollout], *, forget_rest: bool = False) -> int:
        """Set ``loss_mask`` to 0 on the inserted tokens of ``rollouts`` (found by each turn's context and tokens)
        and forget them; returns how many tokens were masked. ``forget_rest``: also forget every other recorded
        insertion (turns that were sampled but are not trained: discarded resamples, evaluation episodes)."""
        masked = 0
        for r in rollouts:
            for t, (s, e) in enumerate(r.turn_spans):
                key = (tuple(r.input_ids[: r.context_lengths[t]]), tuple(r.response_ids[s:e]))
                for a, b in self.inserted.pop(key, []):
                    r.loss_mask[s + a : s + b] = [0] * (b - a)
                    masked += b - a
        if forget_rest:
            self.inserted.clear()
        return masked


def mask_thinking(policy: HFPolicy, rollouts: Sequence[Rollout], *, forget_rest: bool = False) -> int:
    """The trainer's step: the inserted tokens of ``rollouts`` leave the loss when ``policy`` intervenes
    (:meth:`InterveningPolicy.mask_interventions`); 0 for any other policy."""
    if not isinstance(policy, InterveningPolicy):
        return 0
    return policy.mask_interventions(rollouts, forget_rest=forget_rest)
