"""``RemoteAnswerScorer``: answer likelihoods over an OpenAI-compatible ``/v1/completions`` endpoint (vLLM
``prompt_logprobs`` or legacy ``echo`` + ``logprobs``), with token-id prompts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from agentgym.rewards.answer_scoring.render import Suffix
from agentgym.rewards.answer_scoring.scorer import AnswerScorer, _check_requests
from agentgym.rewards.base import ScorerError

if TYPE_CHECKING:
    from agentgym.tools.llm import LLMClient


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
