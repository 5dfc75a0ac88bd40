"""``LocalAnswerScorer``: answer likelihoods from a local transformers causal LM.

By default ONE forward pass over ``[trajectory | suffix_1 | ... | suffix_T]`` with a 4D attention mask (suffix t sees
trajectory tokens ``< cut_t`` and, causally, itself) and explicit ``position_ids`` (suffix positions continue from
``cut_t``); logits are computed only at the rows that predict scored tokens. ``method="cached"`` (also the automatic
fallback when a pass would exceed ``max_pass_tokens``) prefills the trajectory once into a KV cache and scores the
suffixes in chunks against it; ``method="naive"`` is the one-forward-per-suffix reference.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from agentgym.rewards.answer_scoring.render import Suffix
from agentgym.rewards.answer_scoring.scorer import AnswerScorer, _check_requests, _Plan, _plan

if TYPE_CHECKING:
    import torch


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
    """Scores with a local transformers causal LM (the module docstring describes the three methods).

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
            tokens: list[int] = []
            positions: list[int] = []
            blocks: list[_Block] = []
            offsets: dict[int, int] = {}
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
            wanted = sorted({(k, r) for src in plan.sources for k, r, _ in src if k in offsets})
            local = torch.tensor([offsets[k] + r for k, r in wanted], device=device)
            logp = self._logits(ids, pos, mask, local, cache)
            cache.crop(-Q)  # drop this chunk's keys/values: the cache holds the trajectory again
            for i, key in enumerate(wanted):
                picked[key] = logp[i]
        keys = sorted(picked)
        where = {key: i for i, key in enumerate(keys)}
        stacked = torch.stack([picked[key] for key in keys])
        return self._gather(plan, lambda s, r: where[(s, r)], stacked)
