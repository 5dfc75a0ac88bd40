"""``LocalLM``: a local transformers causal LM as a generation engine, shared by ``HFAgent`` and the model server.

``LocalLM`` wraps a causal LM and its tokenizer: chat template -> prompt ids, a plain token-by-token sampling
loop with a KV cache (greedy at temperature 0; otherwise temperature + top-p sampling drawn from a caller's
``torch.Generator``), stop strings, eos, per-token log-probs of the raw model distribution, and teacher-forced
prompt log-probs. ``agentgym.agents.hf_agent.HFAgent`` plays episodes with one and ``agentgym.tools.openai_server``
serves one over HTTP, so the agent and the server produce the same text for the same conversation and settings.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentgym.contract.agent import Message, normalize_messages

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TokenLogprob:
    """Log-prob of one token under the model (raw distribution, before temperature/top-p) and its rank (1 = best).

    ``top`` holds the ``k`` most likely ``(token_id, logprob)`` pairs when ``k > 0`` was requested.
    """

    token_id: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class Generation:
    """Result of ``LocalLM.generate``.

    ``text`` is the decoded completion (special tokens skipped) up to and *including* the first stop string;
    ``finish_reason`` is ``"stop"`` (eos token or stop string) or ``"length"``; ``stop_reason`` is the matched stop
    string, the eos token id, or None. ``token_ids`` are every sampled token (the eos included).
    """

    token_ids: list[int]
    text: str
    finish_reason: str
    stop_reason: str | int | None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob | None] | None = None


def model_input_names(model: Any) -> tuple[str, str | None]:
    """(cache kwarg name, logits-to-keep kwarg name) for this transformers version's forward."""
    import inspect

    params = inspect.signature(model.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    keep = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
    return cache, keep


class LocalLM:
    """A local causal LM + tokenizer with a serialised sampling loop (neither is thread-safe; ``lock`` guards both).

    Use one ``LocalLM`` per model object.

    >>> from agentgym.tools.tiny_model import build_tiny_model                       # doctest: +SKIP
    >>> lm = LocalLM(*build_tiny_model(seed=0))                                      # doctest: +SKIP
    >>> ids = lm.chat_prompt_ids([{"role": "user", "content": "hi"}])                # doctest: +SKIP
    >>> lm.generate(ids, max_new_tokens=8).finish_reason                             # doctest: +SKIP
    'length'
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        #: Guards the model and the tokenizer (re-entrant: hold it around several calls to keep them together).
        self.lock = threading.RLock()
        self._cache_kw, self._keep_kw = model_input_names(model)
        eos: set[int] = set()
        for source in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, (list, tuple)):
                eos.update(int(v) for v in value)
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        head = model.get_output_embeddings()
        self.vocab_size = int(head.weight.shape[0] if head is not None else model.config.vocab_size)
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 2**31 - 1)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *, device: str = "cpu", **model_kwargs: Any) -> LocalLM:
        """Load a local model directory (``local_files_only=True``; never downloads)."""
        from transformers import AutoModelForCausalLM

        from agentgym.tools.tiny_model import load_tokenizer

        tokenizer = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, **model_kwargs)
        return cls(model.to(device), tokenizer)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def chat_prompt_ids(self, messages: Sequence[Message], *, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template plus the generation prompt."""
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template")
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        normalized = normalize_messages(messages)
        with self.lock:
            text = self.tokenizer.apply_chat_template(normalized, add_generation_prompt=True, tokenize=False, **kwargs)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        with self.lock:
            return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        with self.lock:
            return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _forward(self, ids: torch.Tensor, cache: Any, keep_last: bool) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {"use_cache": True}
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if keep_last and self._keep_kw is not None:
            kwargs[self._keep_kw] = 1
        out = self.model(ids, **kwargs)
        new_cache = out.get("cache")
        if new_cache is None:
            new_cache = out.get("past_key_values")
        return out.logits, new_cache

    @staticmethod
    def _token_logprob(logprobs: torch.Tensor, token: int, top_k: int) -> TokenLogprob:
        value = logprobs[token]
        rank = int((logprobs > value).sum().item()) + 1
        top: tuple[tuple[int, float], ...] = ()
        if top_k > 0:
            vals, idx = logprobs.topk(min(top_k, logprobs.shape[-1]))
            top = tuple((int(i), float(v)) for i, v in zip(idx.tolist(), vals.tolist(), strict=True))
        return TokenLogprob(int(token), float(value), rank, top)

    @staticmethod
    def _teacher_forced(logits: torch.Tensor, ids: list[int], top_k: int) -> list[TokenLogprob]:
        import torch

        lp = torch.log_softmax(logits[:-1].float(), dim=-1).cpu()
        target = torch.tensor(ids[1:], dtype=torch.long).unsqueeze(1)
        values = lp.gather(1, target)
        ranks = ((lp > values).sum(dim=1) + 1).tolist()
        tops: list[tuple[tuple[int, float], ...]] = [()] * len(ids[1:])
        if top_k > 0 and len(ids) > 1:
            top_vals, top_idx = lp.topk(min(top_k, lp.shape[-1]), dim=-1)
            tops = [
                tuple((int(i), float(v)) for i, v in zip(row_i, row_v, strict=True))
                for row_i, row_v in zip(top_idx.tolist(), top_vals.tolist(), strict=True)
            ]
        return [
            TokenLogprob(tok, float(val), int(rank), top)
            for tok, val, rank, top in zip(ids[1:], values.squeeze(1).tolist(), ranks, tops, strict=True)
        ]

    def score(self, ids: Sequence[int], *, top_k: int = 0) -> list[TokenLogprob | None]:
        """Teacher-forced log-probs of ``ids[1:]`` given their prefixes (first entry None): pure prompt scoring."""
        return self.generate(ids, max_new_tokens=0, prompt_logprobs=top_k).prompt_logprobs or []

    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = (),
        generator: torch.Generator | None = None,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        logprobs_mode: str = "raw",
    ) -> Generation:
        """Sample up to ``max_new_tokens`` after ``prompt_ids``.

        Greedy when ``temperature == 0``; otherwise softmax(logits / temperature) restricted to the top-p nucleus,
        drawn on CPU from ``generator`` (a seeded ``torch.Generator`` makes it deterministic). Stops at an eos token,
        at the first occurrence of any ``stop`` string in the decoded text (kept in ``text``), at ``max_new_tokens``
        or at the model's context length. ``logprobs=k`` records each sampled token's log-prob (+ top-k): of
        ``log_softmax(logits)`` with ``logprobs_mode="raw"``, of ``log_softmax(logits / temperature)`` (before top-p;
        T=1 when greedy) with ``"processed"`` (vLLM's ``--logprobs-mode processed_logprobs``);
        ``prompt_logprobs=k`` records teacher-forced log-probs of the prompt tokens.
        """
        import torch

        ids = [int(i) for i in prompt_ids]
        if not ids:
            raise ValueError("the prompt is empty")
        if any(i < 0 or i >= self.vocab_size for i in ids):
            raise ValueError(f"prompt token ids must be in [0, {self.vocab_size})")
        if logprobs_mode not in ("raw", "processed"):
            raise ValueError(f"logprobs_mode must be 'raw' or 'processed', got {logprobs_mode!r}")
        lp_scale = temperature if logprobs_mode == "processed" and temperature > 0 else 1.0
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
        max_new_tokens = max(0, min(max_new_tokens, self.max_length - len(ids)))
        stops = [s for s in (stop or ()) if s]
        want_prompt = prompt_logprobs is not None
        out_tokens: list[int] = []
        out_logprobs: list[TokenLogprob] = []
        finish, reason, text = "length", None, ""
        prompt_lp: list[TokenLogprob | None] | None = None
        with self.lock, torch.inference_mode():
            device = self.device
            if not want_prompt and max_new_tokens == 0:
                return Generation([], "", "length", None)
            logits, cache = self._forward(torch.tensor([ids], device=device), None, keep_last=not want_prompt)
            if want_prompt:
                prompt_lp = [None, *self._teacher_forced(logits[0], ids, prompt_logprobs or 0)]
            last = logits[0, -1].float().cpu()
            for step in range(max_new_tokens):
                token = self._pick(last, temperature, top_p, generator)
                out_tokens.append(token)
                if logprobs is not None:
                    out_logprobs.append(self._token_logprob(torch.log_softmax(last / lp_scale, -1), token, logprobs))
                if token in self.eos_token_ids:
                    finish, reason = "stop", token
                    break
                if stops:
                    text = self.decode(out_tokens)
                    hits = [(text.find(s), s) for s in stops if s in text]
                    if hits:
                        pos, matched = min(hits, key=lambda h: (h[0], -len(h[1])))
                        text = text[: pos + len(matched)]
                        finish, reason = "stop", matched
                        break
                if step + 1 < max_new_tokens:
                    logits, cache = self._forward(torch.tensor([[token]], device=device), cache, keep_last=True)
                    last = logits[0, -1].float().cpu()
            if not isinstance(reason, str):
                text = self.decode(out_tokens)
        return Generation(out_tokens, text, finish, reason, out_logprobs, prompt_lp)

    @staticmethod
    def _pick(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> int:
        import torch

        if temperature == 0:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            keep = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
            keep[0] = True
            filtered = torch.zeros_like(probs)
            filtered[order[keep]] = sorted_probs[keep]
            probs = filtered
        return int(torch.multinomial(probs, 1, generator=generator).item())
