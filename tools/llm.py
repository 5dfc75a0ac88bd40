"""An OpenAI-compatible LLM HTTP client on httpx: chat, completions with (prompt) log-probs, retries, a concurrency cap.

Every request runs on the client's own event loop in a background thread (started on first use), so one client
serves both ``await client.achat(...)`` from any event loop and ``client.chat(...)`` from any number of plain
threads (e.g. a ``ThreadPoolExecutor``), with one connection pool and one concurrency limit for all of them.

Retries: connection errors, timeouts, HTTP 429 and 5xx are retried ``max_retries`` times with exponential backoff
(``backoff * 2**attempt``, at most ``max_backoff``, times a jitter factor in [1, 1.25) drawn from a per-client RNG
seeded with ``jitter_seed``; a ``Retry-After`` header raises the delay). Other 4xx fail at once. Errors are
``LLMHTTPError`` (status, body), ``LLMTimeoutError``, ``LLMConnectionError`` and ``LLMResponseError``, all
``LLMError``; messages name the URL, the status and the server's error text, never the API key.

``base_url`` is the OpenAI-style base including ``/v1`` (``http://127.0.0.1:8000/v1``); a bare host gets ``/v1``.

>>> client = LLMClient("http://127.0.0.1:8000/v1", model="tiny")                       # doctest: +SKIP
>>> client.chat([{"role": "user", "content": "Hi"}], temperature=0, max_tokens=16).text  # doctest: +SKIP
'...'
>>> res = client.completions([5, 6, 7], max_tokens=0, prompt_logprobs=0)                # doctest: +SKIP
>>> res.prompt_logprobs                                                                  # doctest: +SKIP
[None, -10.3, -10.2]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import threading
import weakref
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from agentgym.contract.parsing import scrub_surrogates

T = TypeVar("T")

#: HTTP statuses below 500 that are retried (5xx always are, as are connection errors and timeouts).
RETRY_STATUSES = frozenset({429})


class LLMError(RuntimeError):
    """Base class of client errors; ``url`` is the request URL."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class LLMHTTPError(LLMError):
    """The server answered with an error status; ``status`` and the raw ``body`` text are kept."""

    def __init__(self, message: str, *, url: str, status: int, body: str) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.body = body


class LLMTimeoutError(LLMError):
    """The request timed out (connect, read, write or pool wait), after all retries."""


class LLMConnectionError(LLMError):
    """The server could not be reached or dropped the connection, after all retries."""


class LLMResponseError(LLMError):
    """The server answered 2xx with a body that is not a valid OpenAI response."""


@dataclass
class ChatResult:
    """First choice of a chat completion (``texts`` has every choice's text, in index order).

    ``stop_reason`` is vLLM's field (the matched stop string, or a token id, or None for eos);
    ``stop_reason_reported`` says whether the server sent that field at all (OpenAI itself does not).
    ``tokens``/``token_logprobs`` are filled when ``logprobs=True`` was requested.
    """

    text: str
    finish_reason: str | None
    usage: dict[str, Any]
    raw: dict[str, Any]
    tool_calls: list[dict[str, Any]] | None = None
    stop_reason: str | int | None = None
    stop_reason_reported: bool = False
    texts: list[str] = field(default_factory=list)
    tokens: list[str] | None = None
    token_logprobs: list[float] | None = None


@dataclass
class CompletionResult:
    """First choice of a text completion, with log-probs split into prompt and generated parts.

    ``tokens``/``token_logprobs``: the generated tokens (``logprobs=k`` requested). ``prompt_logprobs``: one entry per
    prompt token (the first is None), from vLLM's ``prompt_logprobs`` or, with ``echo=True``, from the legacy
    ``logprobs.token_logprobs`` (split at ``usage.prompt_tokens``). ``prompt_token_ids`` when known (a token-id
    prompt or a server that returns them).
    """

    text: str
    finish_reason: str | None
    usage: dict[str, Any]
    raw: dict[str, Any]
    stop_reason: str | int | None = None
    stop_reason_reported: bool = False
    texts: list[str] = field(default_factory=list)
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    prompt_tokens: list[str] | None = None
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[float | None] | None = None


def _normalize_base_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        url += "/v1"
    return url


def _error_text(resp: httpx.Response, limit: int = 2000) -> str:
    """The server's error message: OpenAI ``{"error": {"message"}}``, vLLM/FastAPI shapes, or the raw text."""
    text = resp.text
    try:
        data = resp.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            text = str(err["message"])
        elif isinstance(err, str):
            text = err
        elif data.get("message"):
            text = str(data["message"])
        elif data.get("detail"):
            text = json.dumps(data["detail"]) if not isinstance(data["detail"], str) else data["detail"]
    text = text.strip() or resp.reason_phrase
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self, http: httpx.AsyncClient | None) -> None:
        if self.loop.is_closed():
            return
        on_loop = threading.current_thread() is self.thread
        if http is not None and self.thread.is_alive() and not on_loop:
            with contextlib.suppress(Exception):  # closing is best effort
                self.submit(http.aclose()).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not on_loop:
            self.thread.join(timeout=5)
            if not self.thread.is_alive():
                self.loop.close()


class _Shared:
    """State reachable from the finalizer without keeping the client alive."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runner: _LoopThread | None = None
        self.http: httpx.AsyncClient | None = None  # created and used on the loop thread only
        self.semaphore: asyncio.Semaphore | None = None
        self.closed = False

    def shutdown(self) -> None:
        with self.lock:
            self.closed = True
            runner, self.runner = self.runner, None
            http, self.http = self.http, None
        if runner is not None:
            runner.stop(http)


class LLMClient:
    """OpenAI-compatible client (see the module docstring). Close it (or use ``with``) to release the loop thread.

    The API key is ``api_key`` or else the value of the environment variable named by ``api_key_env``; it is sent as
    a bearer token and never appears in ``repr`` or error messages. ``model`` is the default model name; when None,
    the first id from ``GET /models`` is used. ``timeout`` applies to connect, read, write and pool waits.

    >>> with LLMClient("http://127.0.0.1:8000/v1", max_concurrency=4) as client:     # doctest: +SKIP
    ...     texts = list(pool.map(lambda m: client.chat(m, temperature=0).text, conversations))
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_concurrency: int = 8,
        jitter_seed: int | None = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0 or backoff < 0:
            raise ValueError("need max_retries >= 0, max_concurrency >= 1, timeout > 0, backoff >= 0")
        self.base_url = _normalize_base_url(base_url)
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_concurrency = int(max_concurrency)
        key = api_key if api_key is not None else (os.environ.get(api_key_env) if api_key_env else None)
        self._headers = dict(headers or {})
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._rng = random.Random(jitter_seed)  # used only on the client's loop thread
        self._shared = _Shared()
        self._finalizer = weakref.finalize(self, self._shared.shutdown)

    def __repr__(self) -> str:
        auth = ", api_key=***" if "Authorization" in self._headers else ""
        return f"LLMClient({self.base_url!r}, model={self.model!r}{auth})"

    # ----------------------------------------------------------------- plumbing

    def _runner(self) -> _LoopThread:
        shared = self._shared
        with shared.lock:
            if shared.closed:
                raise LLMError(f"the client for {self.base_url} is closed", url=self.base_url)
            if shared.runner is None:
                shared.runner = _LoopThread(name=f"LLMClient-{self.base_url}")
            return shared.runner

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            runner = self._runner()
        except BaseException:
            coro.close()
            raise
        return runner.submit(coro)

    def _run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        runner = self._shared.runner
        if runner is not None and threading.current_thread() is runner.thread:
            coro.close()
            raise RuntimeError("sync LLMClient methods cannot be called from the client's own loop; use the a* ones")
        return self._submit(coro).result()

    async def _run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        runner = self._shared.runner
        if runner is not None and asyncio.get_running_loop() is runner.loop:
            return await coro
        return await asyncio.wrap_future(self._submit(coro))

    def _http(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        # Runs on the loop thread only: created lazily so both bind to that loop.
        shared = self._shared
        if shared.http is None or shared.semaphore is None:
            limits = httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency)
            shared.http = httpx.AsyncClient(headers=self._headers, timeout=httpx.Timeout(self.timeout), limits=limits)
            shared.semaphore = asyncio.Semaphore(self.max_concurrency)
        return shared.http, shared.semaphore

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay * (1.0 + 0.25 * self._rng.random())

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        http, semaphore = self._http()
        url = self.base_url + path
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            retry_after = None
            cause: BaseException | None = None
            try:
                async with semaphore:
                    resp = await http.request(
                        method, url, json=scrub_surrogates(body)
                    )  # a lone surrogate cannot encode
            except httpx.TimeoutException as exc:
                cause = exc
                error: LLMError = LLMTimeoutError(
                    f"{method} {url} timed out after {self.timeout:g}s ({type(exc).__name__}; "
                    f"{attempt + 1} attempt(s))",
                    url=url,
                )
            except httpx.TransportError as exc:
                cause = exc
                error = LLMConnectionError(
                    f"{method} {url} failed: {type(exc).__name__}: {exc} ({attempt + 1} attempt(s))", url=url
                )
            else:
                if resp.status_code < 400:
                    try:
                        data = resp.json()
                    except ValueError as exc:
                        raise LLMResponseError(
                            f"{method} {url} returned non-JSON: {resp.text[:500]!r}", url=url
                        ) from exc
                    if not isinstance(data, dict):
                        raise LLMResponseError(f"{method} {url} returned {type(data).__name__}, not an object", url=url)
                    return data
                status = resp.status_code
                retryable = status >= 500 or status in RETRY_STATUSES
                error = LLMHTTPError(
                    f"{method} {url} failed with HTTP {status}: {_error_text(resp)}"
                    + (f" ({attempt + 1} attempt(s))" if retryable else ""),
                    url=url,
                    status=status,
                    body=resp.text,
                )
                if not retryable:
                    raise error
                retry_after = _retry_after(resp)
            if attempt + 1 >= attempts:
                raise error from cause
            await asyncio.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")

    async def _model_name(self) -> str:
        if self.model is None:
            models = await self._list_models()
            if not models:
                raise LLMResponseError(f"{self.base_url}/models lists no models", url=self.base_url + "/models")
            self.model = models[0]
        return self.model

    async def _list_models(self) -> list[str]:
        data = await self._request("GET", "/models")
        try:
            return [str(m["id"]) for m in data["data"]]
        except (KeyError, TypeError) as exc:
            raise LLMResponseError(f"unexpected /models response: {data!r:.500}", url=self.base_url) from exc

    # ----------------------------------------------------------------- requests

    async def _chat(self, messages: Sequence[Mapping[str, Any]], sampling: dict[str, Any]) -> ChatResult:
        body: dict[str, Any] = {"model": sampling.pop("model", None) or await self._model_name()}
        body["messages"] = [dict(m) for m in messages]
        body.update({k: v for k, v in sampling.items() if v is not None})
        data = await self._request("POST", "/chat/completions", body)
        return _parse_chat(data, self.base_url)

    async def _completions(self, prompt: str | Sequence[int], kw: dict[str, Any]) -> CompletionResult:
        if not isinstance(prompt, str):
            prompt = [int(t) for t in prompt]
        body: dict[str, Any] = {"model": kw.pop("model", None) or await self._model_name(), "prompt": prompt}
        body.update({k: v for k, v in kw.items() if v is not None})
        data = await self._request("POST", "/completions", body)
        return _parse_completion(data, prompt, bool(kw.get("echo")), self.base_url)

    async def amodels(self) -> list[str]:
        """Model ids served at ``GET /models``."""
        return await self._run_async(self._list_models())

    def models(self) -> list[str]:
        return self._run_sync(self._list_models())

    async def achat(self, messages: Sequence[Mapping[str, Any]], **sampling: Any) -> ChatResult:
        """POST ``/chat/completions``; ``sampling`` goes into the body (temperature, max_tokens, stop, seed, top_p,
        n, logprobs, tools, or any server extension); None values are dropped.

        >>> res = await client.achat([{"role": "user", "content": "Hi"}], temperature=0, seed=1)  # doctest: +SKIP
        """
        return await self._run_async(self._chat(messages, dict(sampling)))

    def chat(self, messages: Sequence[Mapping[str, Any]], **sampling: Any) -> ChatResult:
        """Blocking ``achat``; safe to call from many threads at once."""
        return self._run_sync(self._chat(messages, dict(sampling)))

    async def acompletions(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 0,
        echo: bool = False,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        **kw: Any,
    ) -> CompletionResult:
        """POST ``/completions`` for one prompt (text or token ids). ``max_tokens=0`` scores without generating.

        ``prompt_logprobs=k`` is vLLM's extension (teacher-forced log-probs of the prompt tokens); the legacy OpenAI
        way is ``echo=True, logprobs=k``. Both fill ``CompletionResult.prompt_logprobs``. vLLM rejects
        ``max_tokens=0`` (vllm-project/vllm#9336): score there with ``max_tokens=1`` and ignore the one token.
        """
        body = {"max_tokens": max_tokens, "echo": echo, "logprobs": logprobs, "prompt_logprobs": prompt_logprobs}
        return await self._run_async(self._completions(prompt, {**body, **kw}))

    def completions(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 0,
        echo: bool = False,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        **kw: Any,
    ) -> CompletionResult:
        """Blocking ``acompletions``; safe to call from many threads at once."""
        body = {"max_tokens": max_tokens, "echo": echo, "logprobs": logprobs, "prompt_logprobs": prompt_logprobs}
        return self._run_sync(self._completions(prompt, {**body, **kw}))

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the connection pool and stop the loop thread (idempotent); later calls raise ``LLMError``."""
        self._finalizer()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# --------------------------------------------------------------------- parsing


def _choices(data: dict[str, Any], base_url: str) -> list[dict[str, Any]]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise LLMResponseError(f"response from {base_url} has no choices: {data!r:.500}", url=base_url)
    return sorted(choices, key=lambda c: c.get("index", 0))


def _parse_chat(data: dict[str, Any], base_url: str) -> ChatResult:
    choices = _choices(data, base_url)
    first = choices[0]
    message = first.get("message") or {}
    tokens = token_logprobs = None
    content_lp = (first.get("logprobs") or {}).get("content")
    if isinstance(content_lp, list):
        tokens = [str(c.get("token", "")) for c in content_lp]
        token_logprobs = [float(c["logprob"]) for c in content_lp]
    return ChatResult(
        text=message.get("content") or "",
        finish_reason=first.get("finish_reason"),
        usage=data.get("usage") or {},
        raw=data,
        tool_calls=message.get("tool_calls") or None,
        stop_reason=first.get("stop_reason"),
        stop_reason_reported="stop_reason" in first,
        texts=[(c.get("message") or {}).get("content") or "" for c in choices],
        tokens=tokens,
        token_logprobs=token_logprobs,
    )


def _vllm_prompt_logprobs(entries: list[Any], ids: list[int] | None) -> list[float | None]:
    """vLLM ``prompt_logprobs``: per position None or ``{token_id: {"logprob", "rank", "decoded_token"}}``; the
    prompt token is picked by id when known, else it is the first key (vLLM lists the prompt token first)."""
    out: list[float | None] = []
    for pos, entry in enumerate(entries):
        if not entry:
            out.append(None)
            continue
        key = str(ids[pos]) if ids is not None and pos < len(ids) and str(ids[pos]) in entry else next(iter(entry))
        value = entry[key]
        out.append(float(value["logprob"] if isinstance(value, dict) else value))
    return out


def _parse_completion(data: dict[str, Any], prompt: str | list[int], echo: bool, base_url: str) -> CompletionResult:
    choices = _choices(data, base_url)
    first = choices[0]
    usage = data.get("usage") or {}
    ids = first.get("prompt_token_ids")
    prompt_ids = [int(i) for i in ids] if isinstance(ids, list) else (prompt if isinstance(prompt, list) else None)
    n_prompt = len(prompt_ids) if prompt_ids is not None else usage.get("prompt_tokens")

    tokens = token_logprobs = prompt_tokens = prompt_lp = None
    legacy = first.get("logprobs")
    if isinstance(legacy, dict) and isinstance(legacy.get("token_logprobs"), list):
        all_tokens = [str(t) for t in legacy.get("tokens") or []]
        all_lp = [None if v is None else float(v) for v in legacy["token_logprobs"]]
        split = int(n_prompt) if echo and n_prompt is not None else 0
        tokens, token_logprobs = all_tokens[split:], all_lp[split:]
        if echo and n_prompt is not None:
            prompt_tokens, prompt_lp = all_tokens[:split], all_lp[:split]
    if isinstance(first.get("prompt_logprobs"), list):
        prompt_lp = _vllm_prompt_logprobs(first["prompt_logprobs"], prompt_ids)
    text = first.get("text") or ""
    return CompletionResult(
        text=text,
        finish_reason=first.get("finish_reason"),
        usage=usage,
        raw=data,
        stop_reason=first.get("stop_reason"),
        stop_reason_reported="stop_reason" in first,
        texts=[c.get("text") or "" for c in choices],
        tokens=tokens,
        token_logprobs=token_logprobs,
        prompt_tokens=prompt_tokens,
        prompt_token_ids=prompt_ids,
        prompt_logprobs=prompt_lp,
    )
