"""Answer likelihoods: ``log p(answer tokens | context after turn t)`` for every turn of a trajectory at once.

Information-style turn rewards (IGPO, TIPS, SIOP, InfoPO; see ``agentgym.rewards.information``) all need the same
primitive: teacher-forced log-probs of a short *suffix* (a pseudo-answer prompt plus an answer) appended to the
trajectory cut after turn t, for every t. The T contexts share prefixes, so scoring them as T separate forwards wastes
almost all of the compute. This module provides:

- ``render_trajectory``: a ``Trajectory`` -> token ids via the tokenizer's chat template, with the cut points
  ``h_t`` (after the env's observation for turn t; IGPO/TIPS) and ``h'_t`` (after the agent's turn t; SIOP) and the
  token spans of every action and observation. The ids are the concatenation of per-message deltas
  (``template(messages[:k])`` minus ``template(messages[:k-1])``, the rollout loop's fixed-base convention), so every
  context is a *prefix* of the full sequence by construction; a template whose rendering of earlier messages changes
  when later ones are added (e.g. one that strips past ``<think>`` blocks) raises ``TemplateError``.
- ``Suffix`` / ``encode_suffix``: suffix token ids plus a mask of the scored tokens.
- ``AnswerScorer``: ``logprobs(prefix, cuts, suffixes)`` -> per suffix, the log-probs of its scored tokens given
  ``prefix[:cut]`` and the suffix tokens before them.
- ``LocalAnswerScorer``: a transformers causal LM; by default ONE forward pass over
  ``[trajectory | suffix_1 | ... | suffix_T]`` with a 4D attention mask (suffix t sees trajectory tokens ``< cut_t``
  and, causally, itself) and explicit ``position_ids`` (suffix positions continue from ``cut_t``); logits are computed
  only at the rows that predict scored tokens. ``method="cached"`` (also the automatic fallback when a pass would
  exceed ``max_pass_tokens``) prefills the trajectory once into a KV cache and scores the suffixes in chunks against
  it; ``method="naive"`` is the one-forward-per-suffix reference.
- ``RemoteAnswerScorer``: the same over an OpenAI-compatible ``/v1/completions`` endpoint (vLLM ``prompt_logprobs``
  or legacy ``echo`` + ``logprobs``), with token-id prompts.

Modules: ``render`` (rendering and suffixes), ``scorer`` (the interface and the request planning), ``local`` and
``remote`` (the back-ends).

Two savings apply to every back-end: suffix tokens after the last scored one are dropped (they cannot change it), and
a suffix that *is* the continuation of the prefix (``suffix == prefix[cut:cut+n]``) is read off the trajectory's own
positions instead of being appended (InfoPO's factual log-probs).

Example::

    model, tok = build_tiny_model(seed=0)
    rendered = render_trajectory(traj, tok)
    suffix = encode_suffix(tok, [(rendered.generation_prompt + "<answer> ", False), ("Trolkend", True)])
    cuts = rendered.cuts("observation")  # h_0 .. h_T
    lps = LocalAnswerScorer(model, tok).logprobs(rendered.ids, cuts, [suffix] * len(cuts))
    [float(lp.mean()) for lp in lps]  # mean log p(gold | h_t) per context
"""

from __future__ import annotations

from agentgym.rewards.answer_scoring.local import LocalAnswerScorer, Method
from agentgym.rewards.answer_scoring.remote import RemoteAnswerScorer
from agentgym.rewards.answer_scoring.render import (
    CutKind,
    RenderedTrajectory,
    Span,
    Suffix,
    TemplateError,
    TurnSpans,
    encode_suffix,
    render_trajectory,
)
from agentgym.rewards.answer_scoring.scorer import AnswerScorer

__all__ = [
    "AnswerScorer",
    "CutKind",
    "LocalAnswerScorer",
    "Method",
    "RemoteAnswerScorer",
    "RenderedTrajectory",
    "Span",
    "Suffix",
    "TemplateError",
    "TurnSpans",
    "encode_suffix",
    "render_trajectory",
]
