"""Remote sampling back-end for the reference rollout: an OpenAI-compatible completions server (vLLM, or
``agentgym.tools.openai_server``) samples the turns.

``RemotePolicy`` is an :class:`~agentgym.baselines.rollout.HFPolicy` whose ``sample_batch`` sends each row to
``POST {base_url}/completions``. The transformers model stays the training copy: it provides the chat template
pieces (prompt and observation tokens are built exactly as with the HF back-end); the server holds its own copy of
the weights, which this back-end cannot update. Each row is one request: ``prompt`` = the context's token ids,
``n=1``, ``max_tokens`` = the row's budget, ``temperature``, ``stop``, ``seed`` and ``logprobs=0`` with
``return_tokens_as_token_ids`` (tokens come back as ``"token_id:123"``, so the sampled ids are exact, never
re-tokenised text). Rows are sent from a pool of ``concurrency`` threads; results come back in row order.

Sampling: each row gets a per-request seed drawn from that row's generator, so a batch is reproducible for a fixed
server (the bundled server: exactly, whatever the concurrency; vLLM: up to the batch-composition numerics of its
kernels), but not token-identical to the HF back-end at ``temperature > 0`` (greedy is). The request pins the
sampling to plain ``softmax(logits / T)``: ``top_p=1`` and vLLM's ``top_k=-1``, ``min_p=0``,
``repetition_penalty=1`` (vLLM otherwise applies the model's ``generation_config.json`` defaults, e.g. Qwen2.5's
``top_k=20, top_p=0.8, repetition_penalty=1.05``); ``extra_body`` adds or overrides fields.

Stop strings: the rollout needs every sampled id, the stop string's included. vLLM gets
``include_stop_str_in_output=True``; the bundled server cuts the stop string from ``text`` (as OpenAI does) but
its ``logprobs.tokens`` still list every sampled token, the ones that complete the stop string included, and those
ids are what this back-end returns. ``finish`` is "stop" when a stop string matched (vLLM's ``stop_reason`` is the
string), "length" when the budget ran out, else "eos" (the server stopped on an end token).

Log-probs: the server reports the sampled token's log-prob under *its* distribution. ``logprobs_mode="raw"``
(the bundled server; vLLM's default ``--logprobs-mode raw_logprobs``) means ``log_softmax(logits)``, which is the
rollout's ``log_softmax(logits / T)`` only at ``T`` = 1 (and at ``T`` = 0, where the rollout uses T=1 too), so
other temperatures raise ValueError. ``logprobs_mode="processed"`` is for a vLLM server started with
``--logprobs-mode processed_logprobs`` (the mode ``VLLMPolicy`` uses): log-probs after temperature, any ``T``.

Weights: the server keeps the weights it was started with (or whatever is loaded into it out of band), so after
the first update the samples come from an older policy than the training copy. :meth:`RemotePolicy.mark_stale`
counts these updates (``stale_updates``). The trainer's default ``old_logprobs="recompute"`` scores the samples
with the training copy, so the clipped ratio is anchored at the current training policy (ratio 1 at the first
minibatch) and stays well defined however far the server lags; the gap between the server's and the training
copy's log-probs is not importance-corrected, and the trainer logs it as ``rollout_logprob_maxdiff`` (it grows
with ``stale_updates``). ``old_logprobs="rollout"`` uses the server's log-probs as the behaviour policy instead
(the ratio is then the true off-policy ratio, clipped).

Errors: connection errors, timeouts, 429 and 5xx are retried ``max_retries`` times with exponential backoff
(``agentgym.tools.llm.LLMClient``); any other error status or a malformed answer raises ``RuntimeError`` (an
``LLMError``) carrying the server's message at once. A request thus fails after at most ``max_retries + 1``
attempts of ``timeout`` seconds each plus the backoff.

>>> policy = RemotePolicy(model, tokenizer, base_url="http://127.0.0.1:8000/v1", model_name="qwen")  # doctest: +SKIP
>>> collect_rollouts(policy, env_factory, seeds, group_size=8, config=RolloutConfig())   # doctest: +SKIP
>>> policy.close()                                                                       # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from agentgym.baselines.rollout import HFPolicy, check_rows, request_seed
from agentgym.tools.llm import CompletionResult, LLMClient, LLMResponseError

__all__ = ["LOGPROBS_MODES", "RemotePolicy"]

#: What the server's log-probs are: "raw" = log_softmax(logits), "processed" = after temperature.
LOGPROBS_MODES: tuple[str, ...] = ("raw", "processed")

_TOKEN_ID = re.compile(r"token_id:(\d+)")

#: Sampling fields that pin vLLM to plain softmax(logits / T) (the bundled server ignores the ones it lacks).
_NEUTRAL_SAMPLING: dict[str, Any] = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
#: Request fields the back-end sets itself (``extra_body`` may not).
_RESERVED = frozenset(
    {"model", "prompt", "max_tokens", "logprobs", "n", "temperature", "stop", "seed", "echo", "stream"}
    | {"prompt_logprobs", "return_tokens_as_token_ids", "include_stop_str_in_output"}
)


class RemotePolicy(HFPolicy):
    """HFPolicy with generation on a remote OpenAI-compatible completions server (see the module docstring).

    ``base_url`` is the OpenAI-style base including ``/v1`` (a bare host gets ``/v1``); ``model_name`` None uses
    the first model of ``GET /models``. ``api_key`` is sent as a bearer token (only when given: no environment
    variable is read). ``timeout`` bounds each attempt (connect, read, write); ``max_retries`` retries connection
    errors, timeouts, 429 and 5xx with ``backoff * 2**attempt`` seconds between attempts; ``concurrency`` rows are
    in flight at once. ``extra_body`` fields go into every request (after, so overriding, the neutral sampling
    fields; not the fields the back-end sets per request, ValueError). ``logprobs_mode``: see the module docstring.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        base_url: str,
        model_name: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        concurrency: int = 8,
        logprobs_mode: str = "raw",
        backoff: float = 0.5,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(model, tokenizer)
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode must be one of {LOGPROBS_MODES}, got {logprobs_mode!r}")
        if concurrency < 1 or max_retries < 0 or not timeout > 0 or backoff < 0:
            raise ValueError("need concurrency >= 1, max_retries >= 0, timeout > 0 and backoff >= 0")
        reserved = sorted(set(extra_body or {}) & _RESERVED)
        if reserved:
            raise ValueError(f"extra_body may not set {reserved}: the back-end sets them per request")
        self.client = LLMClient(
            base_url,
            api_key=api_key,
            api_key_env=None,
            model=model_name,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max(backoff, 8.0),
            max_concurrency=concurrency,
        )
        self.base_url = self.client.base_url
        self.concurrency = int(concurrency)
        self.logprobs_mode = logprobs_mode
        self.extra_body = dict(extra_body or {})
        #: Training updates since this policy was built (the server never sees them: it samples from its own weights).
        self.stale_updates = 0
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------------------
    def mark_stale(self) -> None:
        """The training weights changed. The server's cannot be updated from here: count the lag (see the module
        docstring for what the trainer's ``old_logprobs`` does with samples from the older policy)."""
        self.stale_updates += 1

    def sleep(self) -> None:
        """Nothing to release locally: the server owns its memory."""

    def close(self) -> None:
        """Close the HTTP client and the request threads (idempotent); later sampling raises RuntimeError."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    def __enter__(self) -> RemotePolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the RemotePolicy for {self.base_url} is closed")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="RemotePolicy")
            return self._pool

    # -- sampling ---------------------------------------------------------------------------------------------
    def sample_batch(
        self,
        contexts: Sequence[Sequence[int]],
        *,
        budgets: Sequence[int],
        temperature: float,
        stop: Sequence[str],
        generators: Sequence[torch.Generator],
        share_prefill: bool = False,  # HFPolicy's prefill sharing; the server caches shared prefixes itself
    ) -> list[tuple[list[int], list[float], str]]:
        check_rows(contexts, budgets, generators)
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if self.logprobs_mode == "raw" and temperature not in (0.0, 1.0):
            raise ValueError(
                f"the server reports raw log-probs (log_softmax(logits)), not those of the temperature-{temperature:g} "
                "distribution the rollout records: sample at temperature 1 (or 0), or serve with vLLM "
                "--logprobs-mode processed_logprobs and pass logprobs_mode='processed'"
            )
        if not contexts:
            return []
        stops = list(stop)
        requests = []
        for context, budget, generator in zip(contexts, budgets, generators, strict=True):
            seed = request_seed(generator)
            requests.append((list(context), max(int(budget), 1), seed))

        def one(request: tuple[list[int], int, int]) -> CompletionResult:
            context, budget, seed = request
            return self.client.completions(
                context,
                max_tokens=budget,
                logprobs=0,  # the sampled token's log-prob only
                n=1,
                temperature=float(temperature),
                stop=stops or None,
                seed=seed,
                return_tokens_as_token_ids=True,
                include_stop_str_in_output=True,
                **{**_NEUTRAL_SAMPLING, **self.extra_body},
            )

        if self.concurrency == 1 or len(requests) == 1:
            if self._closed:
                raise RuntimeError(f"the RemotePolicy for {self.base_url} is closed")
            results = [one(r) for r in requests]
        else:
            results = list(self._executor().map(one, requests))
        # parsed here, in the caller's thread: the tokenizer (decode) is not shared across threads
        return [self._parse(res, budget, stops) for res, (_, budget, _) in zip(results, requests, strict=True)]

    def _parse(self, result: CompletionResult, budget: int, stop: Sequence[str]) -> tuple[list[int], list[float], str]:
        """(ids, log-probs, finish) of one completion; LLMResponseError (a RuntimeError) when the answer is not
        what was asked for."""

        def bad(what: str) -> LLMResponseError:
            return LLMResponseError(f"{self.base_url}/completions: {what}: {result.raw!r:.500}", url=self.base_url)

        if len(result.texts) != 1:
            raise bad(f"expected 1 choice, got {len(result.texts)}")
        if result.tokens is None or result.token_logprobs is None:
            raise bad("the answer has no logprobs.tokens / logprobs.token_logprobs")
        tokens: list[int] = []
        for token in result.tokens:
            match = _TOKEN_ID.fullmatch(token)
            if match is None:
                raise bad(f"token {token!r} is not 'token_id:N' (does the server support return_tokens_as_token_ids?)")
            tokens.append(int(match.group(1)))
        logprobs = [float("nan") if v is None else float(v) for v in result.token_logprobs]
        if len(logprobs) != len(tokens) or any(math.isnan(v) for v in logprobs):
            raise bad("the sampled tokens' log-probs are missing or invalid")
        if not tokens or len(tokens) > budget:
            raise bad(f"{len(tokens)} tokens sampled for max_tokens={budget}")
        token_ids = (result.raw.get("choices") or [{}])[0].get("token_ids")  # vLLM's return_token_ids, if sent
        if isinstance(token_ids, list) and [int(t) for t in token_ids] != tokens:
            raise bad("choices[0].token_ids differ from the logprobs tokens")
        reason = result.finish_reason
        if reason == "length":  # the HF loop checks stop strings before the budget: a match on the last token is a stop
            finish = "stop" if stop and any(s in self.decode(tokens) for s in stop) else "length"
        elif reason == "stop":
            if isinstance(result.stop_reason, str):
                finish = "stop"
            elif tokens[-1] in self.eos_token_ids:
                finish = "eos"
            elif not result.stop_reason_reported and stop and any(s in self.decode(tokens) for s in stop):
                finish = "stop"  # a server without vLLM's stop_reason
            else:
                finish = "eos"  # stopped on a token the server treats as an end token (e.g. its stop_token_ids)
        else:
            raise bad(f"finish_reason {reason!r} (expected 'stop' or 'length')")
        return tokens, logprobs, finish
