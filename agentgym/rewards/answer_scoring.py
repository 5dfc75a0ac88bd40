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

import inspect
import math
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from agentgym.contract.agent import normalize_messages
from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import ScorerError

if TYPE_CHECKING:
    import torch

    from agentgym.tools.llm import LLMClient

CutKind = Literal["observation", "action"]
Span = tuple[int, int]


class TemplateError(ValueError):
    """The chat template is not prefix-stable: rendering more messages changed the text of earlier ones."""


# --------------------------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class TurnSpans:
    """Token spans ``[start, end)`` of one agent turn inside ``RenderedTrajectory.ids``.

    ``action``: the whole assistant message as the template renders it (role header, text, end marker);
    ``action_content``: only the action text (the whole message when the text could not be located).
    ``observation``: all the env's messages for this turn (empty, ``start == end``, when it sent none);
    ``observation_content``: the text of each of those messages.
    """

    action: Span
    action_content: Span
    observation: Span
    observation_content: tuple[Span, ...]


@dataclass(frozen=True)
class RenderedTrajectory:
    """A trajectory as token ids plus where each context ends (see ``cuts``)."""

    ids: tuple[int, ...]
    #: End of the initial observation (the task prompt): the context ``h_0`` = ``h'_0``.
    prompt_end: int
    turns: tuple[TurnSpans, ...]
    #: Text the template appends to open an assistant turn (``add_generation_prompt``), e.g. ``"<|assistant|>"``.
    generation_prompt: str

    def cuts(self, kind: CutKind = "observation") -> list[int]:
        """``[c_0, c_1, ..., c_T]``: ``ids[:c_t]`` is the context after turn t (``c_0`` = the prompt alone).

        ``"observation"``: ``h_t``, ending after the env's reply to turn t (IGPO, TIPS; for a turn with no reply,
        e.g. the final answer, that is the end of the action). ``"action"``: ``h'_t``, ending at the end of the
        agent's turn t (SIOP).
        """
        if kind == "observation":
            return [self.prompt_end, *(t.observation[1] for t in self.turns)]
        if kind == "action":
            return [self.prompt_end, *(t.action[1] for t in self.turns)]
        raise ValueError(f"kind must be 'observation' or 'action', got {kind!r}")


def _apply_template(tokenizer: Any, messages: list[dict[str, Any]], generation: bool, kwargs: dict[str, Any]) -> str:
    if not messages:
        return ""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **kwargs)
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
    return text


def _encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[Span] | None]:
    """Token ids of ``text`` (no special tokens added) and each token's character span, when the tokenizer has them."""
    if not text:
        return [], []
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, ValueError, TypeError, KeyError):  # slow tokenizers have no offsets
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]), None


def _char_to_token_span(offsets: list[Span] | None, start: int, end: int, n_tokens: int) -> Span:
    """Tokens overlapping the characters ``[start, end)``; the whole text without offsets."""
    if offsets is None:
        return (0, n_tokens)
    if start >= end:
        first = next((i for i, (s, _) in enumerate(offsets) if s >= start), n_tokens)
        return (first, first)
    hit = [i for i, (s, e) in enumerate(offsets) if e > start and s < end]
    return (hit[0], hit[-1] + 1) if hit else (0, n_tokens)


def render_trajectory(
    traj: Trajectory, tokenizer: Any, *, template_kwargs: dict[str, Any] | None = None
) -> RenderedTrajectory:
    """Render ``traj`` with ``tokenizer``'s chat template into token ids with per-turn spans and context cuts.

    Message k's tokens are the encoding of ``template(messages[:k])[len(template(messages[:k-1])):]``, so each
    ``ids[:cut]`` is exactly the rendering of the conversation so far. Raises ``TemplateError`` when the template is
    not prefix-stable and ``ValueError`` when the trajectory has no initial observation or the tokenizer no template.

    >>> r = render_trajectory(traj, tok)            # doctest: +SKIP
    >>> r.ids[: r.cuts("action")[1]]                # the prompt and the first action  # doctest: +SKIP
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template")
    if not traj.initial_observation:
        raise ValueError(f"trajectory of task {traj.task_id!r} has no initial observation to condition on")
    kwargs = dict(template_kwargs or {})
    tags: list[tuple[int, str]] = [(-1, "prompt")] * len(traj.initial_observation)
    raw: list[dict[str, Any]] = list(traj.initial_observation)
    for t, turn in enumerate(traj.turns):
        raw.append({"role": "assistant", "content": turn.action})
        tags.append((t, "action"))
        raw.extend(turn.observation)
        tags.extend([(t, "observation")] * len(turn.observation))
    messages = normalize_messages(raw)

    ids: list[int] = []
    spans: list[tuple[Span, Span]] = []  # per message: (whole delta, content) in absolute token indices
    previous = ""
    for k in range(1, len(messages) + 1):
        text = _apply_template(tokenizer, messages[:k], False, kwargs)
        if not text.startswith(previous):
            raise TemplateError(
                f"the chat template is not prefix-stable: adding message {k} ({messages[k - 1]['role']}) changed the "
                "rendering of the earlier messages, so the context after a turn is not a prefix of the whole "
                "trajectory. Use a template that renders past turns verbatim (e.g. keep past reasoning)."
            )
        delta = text[len(previous) :]
        delta_ids, offsets = _encode_with_offsets(tokenizer, delta)
        content = messages[k - 1]["content"]
        at = delta.find(content) if content else -1
        if content and at < 0:
            local = (0, len(delta_ids))
        else:
            start = at if at >= 0 else len(delta)
            local = _char_to_token_span(offsets, start, start + len(content), len(delta_ids))
        base = len(ids)
        ids.extend(delta_ids)
        spans.append(((base, len(ids)), (base + local[0], base + local[1])))
        previous = text

    n_prompt = len(traj.initial_observation)
    with_generation = _apply_template(tokenizer, messages[:n_prompt], True, kwargs)
    prompt_text = _apply_template(tokenizer, messages[:n_prompt], False, kwargs)
    if not with_generation.startswith(prompt_text):
        raise TemplateError("the chat template's generation prompt rewrites the conversation before it")
    prompt_end = spans[n_prompt - 1][0][1]
    turns: list[TurnSpans] = []
    for t in range(len(traj.turns)):
        members = [i for i, (turn, _) in enumerate(tags) if turn == t]
        action_idx = members[0]
        obs_idx = members[1:]
        action_whole, action_content = spans[action_idx]
        obs_start = spans[obs_idx[0]][0][0] if obs_idx else action_whole[1]
        obs_end = spans[obs_idx[-1]][0][1] if obs_idx else action_whole[1]
        turns.append(
            TurnSpans(
                action=action_whole,
                action_content=action_content,
                observation=(obs_start, obs_end),
                observation_content=tuple(spans[i][1] for i in obs_idx),
            )
        )
    return RenderedTrajectory(
        ids=tuple(ids),
        prompt_end=prompt_end,
        turns=tuple(turns),
        generation_prompt=with_generation[len(prompt_text) :],
    )


# --------------------------------------------------------------------------------------------- suffixes


@dataclass(frozen=True)
class Suffix:
    """Tokens appended after a cut, and which of them are scored (``scored[j]`` for ``ids[j]``).

    >>> Suffix((5, 6, 7), (False, True, True)).n_scored
    2
    """

    ids: tuple[int, ...]
    scored: tuple[bool, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))
        object.__setattr__(self, "scored", tuple(bool(s) for s in self.scored))
        if len(self.ids) != len(self.scored):
            raise ValueError(f"suffix has {len(self.ids)} tokens but {len(self.scored)} mask entries")

    @property
    def n_scored(self) -> int:
        return sum(self.scored)


def encode_suffix(tokenizer: Any, pieces: Sequence[tuple[str, bool]]) -> Suffix:
    """Tokenise the concatenated ``pieces`` (``(text, scored)``) as one string; a token is scored when its characters
    overlap a scored piece (so a BPE token merging ``" "`` and the answer's first letters counts). Tokenizers without
    offsets tokenise each piece separately. Raises ``ValueError`` when nothing is scored.

    >>> encode_suffix(tok, [("<|assistant|><answer> ", False), ("Trolkend", True), (" </answer>", False)])
    ... # doctest: +SKIP
    """
    text = "".join(p for p, _ in pieces)
    ids, offsets = _encode_with_offsets(tokenizer, text)
    if offsets is not None:
        scored = [False] * len(ids)
        pos = 0
        for piece, is_scored in pieces:
            if is_scored and piece:
                for i, (s, e) in enumerate(offsets):
                    if e > pos and s < pos + len(piece):
                        scored[i] = True
            pos += len(piece)
        suffix = Suffix(tuple(ids), tuple(scored))
    else:
        all_ids: list[int] = []
        mask: list[bool] = []
        for piece, is_scored in pieces:
            piece_ids = list(tokenizer(piece, add_special_tokens=False)["input_ids"]) if piece else []
            all_ids += piece_ids
            mask += [is_scored] * len(piece_ids)
        suffix = Suffix(tuple(all_ids), tuple(mask))
    if suffix.n_scored == 0:
        raise ValueError(f"no token of the scored text is left after tokenisation: {pieces!r:.200}")
    return suffix


# --------------------------------------------------------------------------------------------- planning


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


# --------------------------------------------------------------------------------------------- local


@dataclass(frozen=True)
class _Block:
    """Mask rows ``[q0, q1)`` attend to every key ``< visible`` and, causally, to keys ``own .. own + (q1 - q0)``
    (their own tokens). The trajectory is ``_Block(0, L, 0, 0)``; a suffix appended at offset o for cut c is
    ``_Block(o, o + n, c, o)``."""

    q0: int
    q1: int
    visible: int
    own: int


Method = Literal["single_pass", "cached", "naive"]


class LocalAnswerScorer(AnswerScorer):
    """Scores with a local transformers causal LM (see the module docstring for the three methods).

    The 4D mask is additive (0 / dtype min; works under ``sdpa`` and ``eager``) or, with ``mask_kind="bool"`` under
    ``sdpa``, boolean (True = attend); other attention implementations (flash-attention, flex) ignore or reject
    arbitrary dense masks, so they raise unless ``method="naive"``. Models with sliding-window layers get a second
    mask restricted to the window, keyed by layer type. ``max_pass_tokens`` bounds one pass (trajectory + appended
    suffixes; the dense mask is N x N); longer work goes to the cached path, whose prefill runs causally in chunks
    of that size.

    >>> scorer = LocalAnswerScorer(model, tokenizer)                             # doctest: +SKIP
    >>> scorer.logprobs(ids, [10, 20], [suffix, suffix])                          # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        method: Method = "single_pass",
        max_pass_tokens: int = 4096,
        mask_kind: Literal["additive", "bool"] = "additive",
    ):
        if method not in ("single_pass", "cached", "naive"):
            raise ValueError(f"method must be 'single_pass', 'cached' or 'naive', got {method!r}")
        if max_pass_tokens < 2:
            raise ValueError("max_pass_tokens must be >= 2")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.method: Method = method
        self.max_pass_tokens = int(max_pass_tokens)
        if mask_kind not in ("additive", "bool"):
            raise ValueError(f"mask_kind must be 'additive' or 'bool', got {mask_kind!r}")
        self.mask_kind = mask_kind
        config = model.config
        self.attn_implementation = str(getattr(config, "_attn_implementation", None) or "eager")
        if method != "naive" and self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(
                f"attention implementation {self.attn_implementation!r} cannot take a custom 4D mask; load the model "
                "with attn_implementation='sdpa' (or 'eager'), call model.set_attn_implementation('sdpa'), or use "
                "method='naive'"
            )
        if mask_kind == "bool" and self.attn_implementation != "sdpa":
            raise ValueError("a boolean mask needs attn_implementation='sdpa' (eager adds the mask to the scores)")
        layer_types = list(getattr(config, "layer_types", None) or [])
        unknown = set(layer_types) - {"full_attention", "sliding_attention"}
        if method != "naive" and unknown:
            raise NotImplementedError(f"layer types {sorted(unknown)} are not supported by the 4D-mask scorer")
        self._sliding = int(getattr(config, "sliding_window", 0) or 0) if "sliding_attention" in layer_types else 0
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None

    # -- torch helpers ---------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _mask(self, n_q: int, n_kv: int, blocks: Sequence[_Block], q_pos: torch.Tensor, kv_pos: torch.Tensor) -> Any:
        """The model's 4D attention mask ``(1, 1, n_q, n_kv)`` from row blocks (see ``_Block``): additive (0 = attend,
        dtype min = masked) by default, boolean (True = attend) with ``mask_kind="bool"`` under sdpa. Built by block
        fills, not by full-matrix comparisons. Sliding-window models get a dict with a windowed copy per layer type."""
        import torch

        device = self.device
        if self.mask_kind == "bool":
            allowed = torch.zeros((n_q, n_kv), dtype=torch.bool, device=device)
            for b in blocks:
                n = b.q1 - b.q0
                allowed[b.q0 : b.q1, : b.visible] = True
                allowed[b.q0 : b.q1, b.own : b.own + n] = torch.ones((n, n), dtype=torch.bool, device=device).tril_()
            full = allowed
        else:
            dtype = next(self.model.parameters()).dtype
            full = torch.full((n_q, n_kv), torch.finfo(dtype).min, dtype=dtype, device=device)
            for b in blocks:
                n = b.q1 - b.q0
                full[b.q0 : b.q1, : b.visible] = 0
                full[b.q0 : b.q1, b.own : b.own + n].triu_(1)  # 0 on and below the diagonal: causal
        if not self._sliding:
            return full[None, None]
        outside = (q_pos[:, None] - kv_pos[None, :]) >= self._sliding
        window = full.masked_fill(outside, False if full.dtype == torch.bool else torch.finfo(full.dtype).min)
        return {"full_attention": full[None, None], "sliding_attention": window[None, None]}

    def _logits(self, ids: torch.Tensor, positions: torch.Tensor, mask: Any, rows: torch.Tensor, cache: Any) -> Any:
        """Log-softmax of the logits at ``rows`` of one (batch 1) forward."""
        import torch

        kwargs: dict[str, Any] = {"position_ids": positions[None], "use_cache": cache is not None}
        if mask is not None:
            kwargs["attention_mask"] = mask
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if self._keep_kw is not None:
            kwargs[self._keep_kw] = rows
            logits = self.model(ids[None], **kwargs).logits[0]
        else:
            logits = self.model(ids[None], **kwargs).logits[0, rows]
        return torch.log_softmax(logits.float(), dim=-1)

    # -- methods ---------------------------------------------------------------------------------------------
    def logprobs(self, prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> list[np.ndarray]:
        _check_requests(prefix, cuts, suffixes)
        if not cuts:
            return []
        import torch

        with torch.inference_mode():
            if self.method == "naive":
                return self._naive(prefix, cuts, suffixes)
            plan = _plan(prefix, cuts, suffixes)
            total = plan.context_len + sum(len(s) for _, s in plan.segments)
            if self.method == "single_pass" and total <= self.max_pass_tokens:
                return self._single_pass(prefix, plan)
            return self._cached(prefix, plan)

    def _naive(self, prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> list[np.ndarray]:
        import torch

        out = []
        for cut, suffix in zip(cuts, suffixes, strict=True):
            # a plain forward over prefix[:cut] + suffix (the model's own causal mask and positions)
            ids = torch.tensor([*prefix[:cut], *suffix.ids], dtype=torch.long, device=self.device)
            rows = torch.tensor([cut + j - 1 for j in range(len(suffix.ids)) if suffix.scored[j]], device=self.device)
            targets = torch.tensor([t for t, s in zip(suffix.ids, suffix.scored, strict=True) if s])
            if self._keep_kw is not None:
                logits = self.model(ids[None], **{self._keep_kw: rows}).logits[0]
            else:
                logits = self.model(ids[None]).logits[0, rows]
            logp = torch.log_softmax(logits.float(), dim=-1)
            out.append(logp[torch.arange(len(targets)), targets].double().cpu().numpy())
        return out

    def _gather(self, plan: _Plan, row_of: Callable[[int, int], int], logp: Any) -> list[np.ndarray]:
        """Pick each request's scored log-probs from ``logp`` (rows indexed by ``row_of(segment, row)``)."""
        import torch

        flat_rows = [row_of(seg, row) for src in plan.sources for seg, row, _ in src]
        flat_targets = [t for src in plan.sources for _, _, t in src]
        values = logp[torch.tensor(flat_rows), torch.tensor(flat_targets)].double().cpu().numpy()
        out, start = [], 0
        for src in plan.sources:
            out.append(values[start : start + len(src)])
            start += len(src)
        return out

    def _single_pass(self, prefix: Sequence[int], plan: _Plan) -> list[np.ndarray]:
        import torch

        L = plan.context_len
        device = self.device
        tokens = list(prefix[:L])
        positions = list(range(L))
        offsets = []
        for cut, appended in plan.segments:
            offsets.append(len(tokens))
            tokens += appended
            positions += range(cut, cut + len(appended))
        ids = torch.tensor(tokens, dtype=torch.long, device=device)
        pos = torch.tensor(positions, dtype=torch.long, device=device)
        blocks = [_Block(0, L, 0, 0)]  # the trajectory: causal
        blocks += [_Block(o, o + len(a), cut, o) for o, (cut, a) in zip(offsets, plan.segments, strict=True)]
        mask = self._mask(len(tokens), len(tokens), blocks, pos, pos)

        def row_of(segment: int, row: int) -> int:
            return row if segment < 0 else offsets[segment] + row

        needed = sorted({row_of(seg_, row) for src in plan.sources for seg_, row, _ in src})
        where = {r: i for i, r in enumerate(needed)}
        logp = self._logits(ids, pos, mask, torch.tensor(needed, device=device), None)
        return self._gather(plan, lambda s, r: where[row_of(s, r)], logp)

    def _new_cache(self) -> Any:
        # Without a config every layer keeps all its keys/values (a config would make sliding-window layers drop
        # old ones, and our masks index the full trajectory), and the cache is created lazily by the first forward.
        from transformers import DynamicCache

        return DynamicCache()

    def _cached(self, prefix: Sequence[int], plan: _Plan) -> list[np.ndarray]:
        """Prefill the trajectory into a KV cache (causal chunks), then score suffix chunks against it."""
        import torch

        L = plan.context_len
        device = self.device
        chunk = self.max_pass_tokens
        traj_rows = sorted({row for src in plan.sources for seg, row, _ in src if seg < 0})
        picked: dict[tuple[int, int], Any] = {}
        cache = self._new_cache()
        for start in range(0, L, chunk):
            end = min(L, start + chunk)
            rows = [r for r in traj_rows if start <= r < end]
            local = torch.tensor([r - start for r in rows] or [end - start - 1], device=device)
            ids = torch.tensor(list(prefix[start:end]), dtype=torch.long, device=device)
            pos = torch.arange(start, end, device=device)
            mask = None  # plain causal attention: the model builds the mask (and may use a fused causal kernel)
            if self._sliding:
                mask = self._mask(
                    end - start, end, [_Block(0, end - start, start, start)], pos, torch.arange(end, device=device)
                )
            logp = self._logits(ids, pos, mask, local, cache)
            for i, r in enumerate(rows):
                picked[(-1, r)] = logp[i]
        # suffix chunks: whole segments, at most `chunk` appended tokens each (a longer segment goes alone)
        groups: list[list[int]] = []
        size = 0
        for k, (_, appended) in enumerate(plan.segments):
            if groups and size + len(appended) <= chunk:
                groups[-1].append(k)
                size += len(appended)
            else:
                groups.append([k])
                size = len(appended)
        for group in groups:
            tokens, positions, blocks, offsets = [], [], [], {}
            for k in group:
                cut, appended = plan.segments[k]
                offsets[k] = len(tokens)
                blocks.append(_Block(len(tokens), len(tokens) + len(appended), cut, L + len(tokens)))
                tokens += appended
                positions += range(cut, cut + len(appended))
            Q = len(tokens)
            ids = torch.tensor(tokens, dtype=torch.long, device=device)
            pos = torch.tensor(positions, dtype=torch.long, device=device)
            kv_pos = torch.cat([torch.arange(L, device=device), pos])
            mask = self._mask(Q, L + Q, blocks, pos, kv_pos)
            rows = [(k, r) for src in plan.sources for k, r, _ in src if k in offsets]
            rows = sorted(set(rows))
            local = torch.tensor([offsets[k] + r for k, r in rows], device=device)
            logp = self._logits(ids, pos, mask, local, cache)
            cache.crop(-Q)  # drop this chunk's keys/values: the cache holds the trajectory again
            for i, key in enumerate(rows):
                picked[key] = logp[i]
        keys = sorted(picked)
        where = {key: i for i, key in enumerate(keys)}
        stacked = torch.stack([picked[key] for key in keys])
        return self._gather(plan, lambda s, r: where[(s, r)], stacked)


# --------------------------------------------------------------------------------------------- remote


@dataclass
class _Call:
    prompt: list[int]
    #: (request index, absolute prompt positions of its scored tokens)
    reads: list[tuple[int, list[int]]]


class RemoteAnswerScorer(AnswerScorer):
    """Scores through an OpenAI-compatible ``/v1/completions`` endpoint with token-id prompts.

    Each suffix becomes one prompt ``prefix[:cut] + suffix`` (trimmed after its last scored token) sent with
    ``max_tokens`` (0 = score only; vLLM rejects 0, so pass ``max_tokens=1`` there and the generated token is ignored)
    and either vLLM's ``prompt_logprobs=0`` (``mode="prompt_logprobs"``, the default) or the legacy ``echo=True,
    logprobs=0`` (``mode="echo"``). Suffixes that continue the prefix are served by one prompt over the prefix.
    Calls run concurrently (``max_workers``); an endpoint with prefix caching (vLLM ``--enable-prefix-caching``)
    then shares the trajectory's KV cache between them. The response must carry a finite log-prob for every scored
    position (and, when the server echoes ``prompt_token_ids``, the same ids), else the call counts as failed.

    Failures (HTTP errors after the client's retries, connection errors, malformed responses) raise ``ScorerError``
    with ``on_error="raise"``; with ``on_error="mark"`` the affected suffixes get all-NaN arrays (the turn scorers turn
    those into invalid turns). Never zeros.

    >>> scorer = RemoteAnswerScorer("http://127.0.0.1:8000/v1", "tiny", tokenizer=tok)     # doctest: +SKIP
    >>> scorer = RemoteAnswerScorer(vllm_url, "Qwen/Qwen2.5-7B-Instruct", tokenizer=tok, max_tokens=1)  # doctest: +SKIP
    """

    def __init__(
        self,
        client: LLMClient | str,
        model: str | None = None,
        *,
        tokenizer: Any = None,
        mode: Literal["prompt_logprobs", "echo"] = "prompt_logprobs",
        max_tokens: int = 0,
        on_error: Literal["raise", "mark"] = "raise",
        max_workers: int = 8,
        client_kwargs: dict[str, Any] | None = None,
    ):
        from agentgym.tools.llm import LLMClient

        if mode not in ("prompt_logprobs", "echo"):
            raise ValueError(f"mode must be 'prompt_logprobs' or 'echo', got {mode!r}")
        if on_error not in ("raise", "mark"):
            raise ValueError(f"on_error must be 'raise' or 'mark', got {on_error!r}")
        if max_tokens < 0 or max_workers < 1:
            raise ValueError("need max_tokens >= 0 and max_workers >= 1")
        self._owns_client = isinstance(client, str)
        self.client: LLMClient = (
            LLMClient(client, model=model, **(client_kwargs or {})) if isinstance(client, str) else client
        )
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.max_tokens = int(max_tokens)
        self.on_error = on_error
        self.max_workers = int(max_workers)

    def close(self) -> None:
        """Close the client if this scorer created it."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> RemoteAnswerScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _calls(self, prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> list[_Call]:
        calls: list[_Call] = []
        shared: list[tuple[int, list[int]]] = []
        shared_end = 0
        for i, (cut, suffix) in enumerate(zip(cuts, suffixes, strict=True)):
            last = max(j for j, s in enumerate(suffix.scored) if s)
            positions = [cut + j for j in range(last + 1) if suffix.scored[j]]
            if tuple(prefix[cut : cut + last + 1]) == suffix.ids[: last + 1]:
                shared.append((i, positions))
                shared_end = max(shared_end, cut + last + 1)
            else:
                calls.append(_Call([*prefix[:cut], *suffix.ids[: last + 1]], [(i, positions)]))
        if shared:
            calls.append(_Call(list(prefix[:shared_end]), shared))
        return calls

    def _run(self, call: _Call) -> list[np.ndarray]:
        from agentgym.tools.llm import LLMError

        kw: dict[str, Any] = {"max_tokens": self.max_tokens, "model": self.model}
        if self.mode == "prompt_logprobs":
            kw["prompt_logprobs"] = 0
        else:
            kw.update(echo=True, logprobs=0)
        try:
            res = self.client.completions(call.prompt, **kw)
        except LLMError as exc:
            raise ScorerError(f"remote scoring call failed: {exc}") from exc
        lps = res.prompt_logprobs
        if res.prompt_token_ids is not None and list(res.prompt_token_ids) != call.prompt:
            raise ScorerError("the server scored different prompt token ids than were sent")
        if lps is None or len(lps) != len(call.prompt):
            got = "none" if lps is None else f"{len(lps)}"
            raise ScorerError(f"expected {len(call.prompt)} prompt log-probs from the server, got {got}")
        out = []
        for _, positions in call.reads:
            values = [lps[p] for p in positions]
            if any(v is None or not math.isfinite(v) for v in values):
                raise ScorerError(f"the server returned a missing or non-finite log-prob at positions {positions}")
            out.append(np.asarray(values, dtype=np.float64))
        return out

    def logprobs(self, prefix: Sequence[int], cuts: Sequence[int], suffixes: Sequence[Suffix]) -> list[np.ndarray]:
        return self.logprobs_many([(prefix, cuts, suffixes)])[0]

    def logprobs_many(
        self, items: Sequence[tuple[Sequence[int], Sequence[int], Sequence[Suffix]]]
    ) -> list[list[np.ndarray]]:
        results: list[list[np.ndarray | None]] = []
        jobs: list[tuple[int, _Call]] = []
        for item_idx, (prefix, cuts, suffixes) in enumerate(items):
            _check_requests(prefix, cuts, suffixes)
            results.append([None] * len(cuts))
            jobs += [(item_idx, c) for c in self._calls(prefix, cuts, suffixes)]
        if jobs:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(jobs))) as pool:
                futures = [pool.submit(self._run, call) for _, call in jobs]
                if self.on_error == "raise":
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    failed = next((f for f in futures if f in done and f.exception() is not None), None)
                    if failed is not None:
                        for f in futures:
                            f.cancel()
                        raise failed.exception()  # type: ignore[misc]
                for (item_idx, call), future in zip(jobs, futures, strict=True):
                    try:
                        values = future.result()
                    except ScorerError:
                        if self.on_error == "raise":
                            raise
                        values = [np.full(len(pos), np.nan) for _, pos in call.reads]
                    for (req, _), v in zip(call.reads, values, strict=True):
                        results[item_idx][req] = v
        if any(v is None for row in results for v in row):
            raise AssertionError("a scoring request was not served")  # a bug in _calls, never a silent gap
        return [[v for v in row if v is not None] for row in results]
