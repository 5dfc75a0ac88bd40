"""An OpenAI-compatible HTTP server for a local transformers causal LM (FastAPI), plus a background-thread runner.

Endpoints: ``GET /v1/models``, ``GET /health``, ``POST /v1/chat/completions`` and ``POST /v1/completions``.
Sampling follows ``agentgym.tools.local_lm.LocalLM``: greedy at ``temperature`` 0, else temperature + ``top_p``;
``seed`` makes sampling deterministic (one ``torch.Generator`` per request, shared by its ``n`` choices); ``stop``
strings are cut from the text as in OpenAI, and vLLM's ``stop_reason`` says which one matched (None for eos).
Completions take a prompt as text or token ids (or a list of either), support ``echo``, legacy ``logprobs=k``
and vLLM's ``prompt_logprobs=k`` (teacher-forced log-probs of the prompt tokens); ``max_tokens=0`` only scores.
Choices also carry ``prompt_token_ids``. Malformed requests get a 4xx with an OpenAI-style error body
``{"error": {"message", "type", "param", "code"}}``. Streaming is not supported (400).

Requests are handled in worker threads under the ``LocalLM`` lock (the model and tokenizer are not thread-safe), so
they are served one at a time. Limits, checked before the lock is taken: a body over ``max_request_bytes`` is a 413
(refused from its ``Content-Length``, or as soon as a chunked body passes it, never buffered whole); more than
``max_prompts`` prompts or ``max_sequences`` prompts x ``n`` is a 413, ``n`` over ``max_n`` a 400, and a prompt
longer than the context x ``max_chars_per_token`` characters a 400 (not tokenised). A request whose client
disconnects is cancelled between tokens, so the next one is served at once. ``token`` requires ``Authorization:
Bearer <token>`` (401 otherwise); :func:`serve_model` refuses to bind beyond loopback without one.

:func:`uvicorn_config` (used by :func:`serve_model`, :class:`BackgroundServer` and the retrieval server) bounds
connections: the request headers must arrive within ``header_timeout`` seconds of the connection (or of the first
byte of a kept-alive connection's next request) and the body within ``body_timeout`` seconds of the headers, else
the connection is closed; headers over ``max_header_bytes`` get a 400 and connections over ``limit_concurrency``
a 503.

>>> from agentgym.tools.tiny_model import build_tiny_model                         # doctest: +SKIP
>>> app = create_app(*build_tiny_model(seed=0), model_name="tiny")               # doctest: +SKIP
>>> with BackgroundServer(app) as server:                                          # doctest: +SKIP
...     LLMClient(server.url + "/v1").chat([{"role": "user", "content": "hi"}])
>>> serve_model("/path/to/model", port=8000)                                      # doctest: +SKIP

Command line: ``python -m agentgym.tools.openai_server MODEL_DIR --port 8000 [--tiny]``.
"""

import argparse
import asyncio
import json
import logging
import os
import secrets
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from agentgym.agents.tool_calls import calls_message
from agentgym.tools.local_lm import Generation, LocalLM, TokenLogprob
from agentgym.tools.named_models import CACHE_ENV, NAMED_MODELS, ModelUnavailableError, model_names, resolve_model_path
from agentgym.tools.serving import (
    TOKEN_ENV,
    bearer_checker,
    check_bind,
    run_uvicorn,
    uvicorn_config,
)

logger = logging.getLogger(__name__)

#: Most completions per request (``n``) and most top log-probs per token.
MAX_N = 16
#: ``tool_call_parser`` values: None (completions are text) or "hermes" (``<tool_call>`` blocks become tool_calls).
TOOL_CALL_PARSERS: tuple[str | None, ...] = (None, "hermes")
MAX_TOP_LOGPROBS = 20
#: Default caps: prompts per request, and sequences (prompts x ``n``) per request.
MAX_PROMPTS = 64
MAX_SEQUENCES = 256
#: Default bound on characters per token: a prompt longer than the context times this is refused untokenised.
MAX_CHARS_PER_TOKEN = 32


class RequestError(Exception):
    """A request the server refuses; becomes an OpenAI-style error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


class _Cancelled(Exception):
    """Raised in the worker thread (between tokens or sequences) when the request's client has gone away."""


def _error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "invalid_request_error",
    }.get(status, "error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _schemas() -> Any:
    """Pydantic request models (built on demand so importing this module does not import pydantic)."""
    from types import SimpleNamespace

    from pydantic import BaseModel, ConfigDict, Field, field_validator

    class _Sampling(BaseModel):
        model_config = ConfigDict(extra="ignore")
        model: str | None = None
        temperature: float = Field(1.0, ge=0.0, le=2.0)
        top_p: float = Field(1.0, gt=0.0, le=1.0)
        stop: str | list[str] | None = Field(None, validate_default=True)
        seed: int | None = None
        n: int = Field(1, ge=1)  # the upper bound is the app's max_n (checked by the engine)
        stream: bool = False

        @field_validator("stop")
        @classmethod
        def _check_stop(cls, v: str | list[str] | None) -> list[str]:
            stops = [v] if isinstance(v, str) else list(v or [])
            if len(stops) > 16 or any(not s for s in stops):
                raise ValueError("stop must be a non-empty string or a list of at most 16 non-empty strings")
            return stops

    class ChatMessage(BaseModel):
        model_config = ConfigDict(extra="allow")
        role: str
        content: str | list[dict[str, Any]] | None = None

    class ChatRequest(_Sampling):
        messages: list[ChatMessage] = Field(min_length=1)
        max_tokens: int | None = Field(None, ge=1)
        max_completion_tokens: int | None = Field(None, ge=1)
        logprobs: bool = False
        top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
        tools: list[dict[str, Any]] | None = None
        tool_choice: str | dict[str, Any] | None = None

    class CompletionRequest(_Sampling):
        prompt: str | list[int] | list[str] | list[list[int]]
        max_tokens: int = Field(16, ge=0)
        echo: bool = False
        logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
        prompt_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
        add_special_tokens: bool = True
        return_tokens_as_token_ids: bool = False

    return SimpleNamespace(ChatRequest=ChatRequest, CompletionRequest=CompletionRequest)


class _Engine:
    """Turns validated requests into OpenAI responses using a ``LocalLM`` (runs in worker threads).

    ``precheck_*`` are cheap checks run on the event loop before a request queues for the model lock; ``run``
    takes the lock and runs ``_chat`` / ``_completions`` there, stopping with :class:`_Cancelled` when ``cancel``
    is set: at the next forward pass of the model (a pre-forward hook, scoped to the thread running the request)
    or between sequences.
    """

    def __init__(
        self,
        lm: LocalLM,
        model_name: str,
        max_new_tokens_limit: int,
        *,
        max_prompts: int = MAX_PROMPTS,
        max_n: int = MAX_N,
        max_sequences: int = MAX_SEQUENCES,
        max_chars_per_token: float = MAX_CHARS_PER_TOKEN,
        tool_call_parser: str | None = None,
        logprobs_mode: str = "raw",
    ) -> None:
        if logprobs_mode not in ("raw", "processed"):
            raise ValueError(f"logprobs_mode must be 'raw' or 'processed', got {logprobs_mode!r}")
        self.logprobs_mode = logprobs_mode
        if tool_call_parser not in TOOL_CALL_PARSERS:
            raise ValueError(f"tool_call_parser must be one of {TOOL_CALL_PARSERS}, got {tool_call_parser!r}")
        self.tool_call_parser = tool_call_parser
        self.lm = lm
        self.model_name = model_name
        self.limit = max_new_tokens_limit
        self.max_prompts = max_prompts
        self.max_n = max_n
        self.max_sequences = max_sequences
        self.max_prompt_chars = int(lm.max_length * max_chars_per_token) if lm.max_length < 2**31 - 1 else None
        #: (thread id, cancel event) of the request holding the lock, read by the pre-forward hook.
        self._active: tuple[int, threading.Event] | None = None
        register = getattr(lm.model, "register_forward_pre_hook", None)
        if register is not None:  # a torch module: cancel between tokens, not only between sequences
            register(self._forward_hook)

    # -------------------------------------------------------------- cancellation

    def _forward_hook(self, module: Any, args: Any) -> None:
        active = self._active
        if active is not None and active[0] == threading.get_ident() and active[1].is_set():
            raise _Cancelled

    def _checkpoint(self) -> None:
        active = self._active
        if active is not None and active[1].is_set():
            raise _Cancelled

    def run(self, fn: Any, req: Any, cancel: threading.Event) -> dict[str, Any]:
        with self.lm.lock:
            if cancel.is_set():  # abandoned while it queued for the lock
                raise _Cancelled
            self._active = (threading.get_ident(), cancel)
            try:
                return fn(req)
            finally:
                self._active = None

    # -------------------------------------------------------------- cheap checks (no lock, no tokenizer)

    def _check_sequences(self, prompts: int, n: int) -> None:
        if n > self.max_n:
            raise RequestError(400, f"n must be <= {self.max_n}, got {n}.", param="n")
        if prompts > self.max_prompts:
            raise RequestError(
                413, f"Too many prompts: {prompts} > {self.max_prompts} per request; split the batch.", param="prompt"
            )
        if prompts * n > self.max_sequences:
            raise RequestError(
                413,
                f"Too many sequences: {prompts} prompt(s) x n={n} = {prompts * n} > {self.max_sequences} per request; "
                "split the batch.",
                param="n",
            )

    def _check_chars(self, chars: int, param: str) -> None:
        cap = self.max_prompt_chars
        if cap is not None and chars > cap:
            raise RequestError(
                400,
                f"The prompt has {chars} characters, more than the model's maximum context of {self.lm.max_length} "
                f"tokens can hold (the server refuses prompts over {cap} characters).",
                param=param,
            )

    def precheck_chat(self, req: Any) -> None:
        self._check_sequences(1, req.n)
        chars = sum(_text_chars(m.model_dump(exclude_none=True)) for m in req.messages)
        self._check_chars(chars + _text_chars(req.tools), "messages")

    def precheck_completions(self, req: Any) -> None:
        items = _prompt_items(req.prompt)
        if not items:
            raise RequestError(400, "prompt must not be empty.", param="prompt")
        self._check_sequences(len(items), req.n)
        for item in items:
            if isinstance(item, str):
                self._check_chars(len(item), "prompt")

    # -------------------------------------------------------------- helpers

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise RequestError(404, f"The model `{model}` does not exist; this server serves `{self.model_name}`.")

    def _budget(self, prompt_len: int, requested: int | None, default: int) -> int:
        ctx = self.lm.max_length
        if prompt_len >= ctx:
            raise RequestError(400, f"The prompt has {prompt_len} tokens; the model's maximum context is {ctx}.")
        if requested is None:
            return max(0, min(default, self.limit, ctx - prompt_len))
        if requested > self.limit:
            raise RequestError(400, f"max_tokens must be <= {self.limit}, got {requested}.", param="max_tokens")
        if prompt_len + requested > ctx:
            raise RequestError(
                400,
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{prompt_len + requested} tokens ({prompt_len} in the prompt, {requested} in the completion).",
                param="max_tokens",
            )
        return requested

    @staticmethod
    def _generator(seed: int | None) -> Any:
        import torch

        gen = torch.Generator()
        gen.manual_seed((seed if seed is not None else secrets.randbits(63)) % 2**64)
        return gen

    def _token_str(self, token_id: int, as_ids: bool = False) -> str:
        return f"token_id:{token_id}" if as_ids else self.lm.tokenizer.decode([token_id])

    @staticmethod
    def _visible(gen: Generation) -> str:
        """OpenAI semantics: the matched stop string is not part of the returned text."""
        if isinstance(gen.stop_reason, str) and gen.text.endswith(gen.stop_reason):
            return gen.text[: len(gen.text) - len(gen.stop_reason)]
        return gen.text

    @staticmethod
    def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    # -------------------------------------------------------------- chat

    def _chat(self, req: Any) -> dict[str, Any]:
        if req.stream:
            raise RequestError(400, "stream=true is not supported by this server.", param="stream")
        self.check_model(req.model)
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        try:
            prompt_ids = self.lm.chat_prompt_ids(messages, tools=req.tools)
        except ValueError as exc:
            raise RequestError(400, f"Cannot apply the chat template: {exc}", param="messages") from exc
        except Exception as exc:  # jinja errors from the template
            raise RequestError(400, f"Cannot apply the chat template: {type(exc).__name__}: {exc}") from exc
        requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        budget = self._budget(len(prompt_ids), requested, self.limit)
        gen_seed = self._generator(req.seed)
        top = req.top_logprobs or 0
        choices, completion_tokens = [], 0
        for index in range(req.n):
            self._checkpoint()
            gen = self.lm.generate(
                prompt_ids,
                max_new_tokens=budget,
                temperature=req.temperature,
                top_p=req.top_p,
                stop=req.stop,
                generator=gen_seed,
                logprobs=top if req.logprobs else None,
                logprobs_mode=self.logprobs_mode,
            )
            completion_tokens += len(gen.token_ids)
            logprobs = None
            if req.logprobs:
                logprobs = {"content": [self._chat_logprob(lp, top) for lp in gen.logprobs]}
            message: dict[str, Any] = {"role": "assistant", "content": self._visible(gen)}
            finish = gen.finish_reason
            if self.tool_call_parser and req.tools and req.tool_choice != "none":
                parsed = calls_message(message["content"])
                if parsed is not None:  # vLLM's Hermes parser: the calls leave the content, the text before stays
                    message, finish = json.loads(parsed), "tool_calls"
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                    "stop_reason": gen.stop_reason,
                }
            )
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": self._usage(len(prompt_ids), completion_tokens),
        }

    def _chat_logprob(self, lp: TokenLogprob, top: int) -> dict[str, Any]:
        token = self._token_str(lp.token_id)
        return {
            "token": token,
            "logprob": lp.logprob,
            "bytes": list(token.encode("utf-8")),
            "top_logprobs": [
                {"token": (t := self._token_str(i)), "logprob": v, "bytes": list(t.encode("utf-8"))}
                for i, v in lp.top[:top]
            ],
        }

    # -------------------------------------------------------------- completions

    def _prompts(self, req: Any) -> list[tuple[str | None, list[int]]]:
        items = _prompt_items(req.prompt)
        if not items:
            raise RequestError(400, "prompt must not be empty.", param="prompt")
        out: list[tuple[str | None, list[int]]] = []
        for item in items:
            if isinstance(item, str):
                ids = self.lm.encode(item, add_special_tokens=req.add_special_tokens)
                out.append((item, ids))
            else:
                ids = [int(t) for t in item]
                bad = [t for t in ids if not 0 <= t < self.lm.vocab_size]
                if bad:
                    raise RequestError(
                        400, f"prompt token ids must be in [0, {self.lm.vocab_size}); got {bad[:5]}.", param="prompt"
                    )
                out.append((None, ids))
            if not out[-1][1]:
                raise RequestError(400, "prompt must contain at least one token.", param="prompt")
        return out

    def _completions(self, req: Any) -> dict[str, Any]:
        if req.stream:
            raise RequestError(400, "stream=true is not supported by this server.", param="stream")
        self.check_model(req.model)
        prompts = self._prompts(req)
        budgets = [self._budget(len(ids), req.max_tokens, 16) for _, ids in prompts]
        gen_seed = self._generator(req.seed)
        want_prompt_lp = req.prompt_logprobs is not None or (req.echo and req.logprobs is not None)
        prompt_k = max(req.prompt_logprobs or 0, (req.logprobs or 0) if req.echo else 0)
        choices, prompt_total, completion_total = [], 0, 0
        for p_index, ((text, ids), budget) in enumerate(zip(prompts, budgets, strict=True)):
            prompt_total += len(ids)
            for k in range(req.n):
                self._checkpoint()
                gen = self.lm.generate(
                    ids,
                    max_new_tokens=budget,
                    temperature=req.temperature,
                    top_p=req.top_p,
                    stop=req.stop,
                    generator=gen_seed,
                    logprobs=req.logprobs,
                    prompt_logprobs=prompt_k if want_prompt_lp else None,
                    logprobs_mode=self.logprobs_mode,
                )
                completion_total += len(gen.token_ids)
                choices.append(self._completion_choice(req, p_index * req.n + k, text, ids, gen))
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": self._usage(prompt_total, completion_total),
        }

    def _completion_choice(
        self, req: Any, index: int, text: str | None, ids: list[int], gen: Generation
    ) -> dict[str, Any]:
        as_ids = req.return_tokens_as_token_ids
        visible = self._visible(gen)
        prompt_text = text if text is not None else self.lm.decode(ids)
        logprobs = None
        if req.logprobs is not None:
            entries: list[tuple[int, TokenLogprob | None]] = []
            if req.echo:
                entries += list(zip(ids, gen.prompt_logprobs or [None] * len(ids), strict=True))
            entries += [(lp.token_id, lp) for lp in gen.logprobs]
            tokens, token_lps, tops, offsets, offset = [], [], [], [], 0
            for token_id, lp in entries:
                token = self._token_str(token_id, as_ids)
                tokens.append(token)
                offsets.append(offset)
                offset += len(token)
                token_lps.append(None if lp is None else lp.logprob)
                tops.append(None if lp is None else {self._token_str(i, as_ids): v for i, v in lp.top[: req.logprobs]})
            logprobs = {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
        prompt_logprobs = None
        if req.prompt_logprobs is not None and gen.prompt_logprobs is not None:
            prompt_logprobs = [
                None if lp is None else self._vllm_logprob(lp, req.prompt_logprobs) for lp in gen.prompt_logprobs
            ]
        return {
            "index": index,
            "text": (prompt_text + visible) if req.echo else visible,
            "logprobs": logprobs,
            "finish_reason": gen.finish_reason,
            "stop_reason": gen.stop_reason,
            "prompt_logprobs": prompt_logprobs,
            "prompt_token_ids": ids,
        }

    def _vllm_logprob(self, lp: TokenLogprob, k: int) -> dict[str, dict[str, Any]]:
        """vLLM's per-position shape: the prompt token first, then the top-k (ranks 1..k)."""
        out = {
            str(lp.token_id): {"logprob": lp.logprob, "rank": lp.rank, "decoded_token": self._token_str(lp.token_id)}
        }
        for rank, (i, v) in enumerate(lp.top[:k], start=1):
            out.setdefault(str(i), {"logprob": v, "rank": rank, "decoded_token": self._token_str(i)})
        return out


def _prompt_items(raw: Any) -> list[Any]:
    """A completions ``prompt`` as a list of prompts (text or token ids)."""
    if isinstance(raw, str) or (isinstance(raw, list) and raw and isinstance(raw[0], int)):
        return [raw]
    return list(raw)


#: Deepest nesting of arrays and objects a request body may have (``tools`` schemas need a handful of levels).
MAX_JSON_DEPTH = 64


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests arrays/objects more than ``limit`` levels deep (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def _text_chars(value: Any) -> int:
    """Total length of the strings in a JSON-like value (a cheap size bound for what the chat template renders)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(str(k)) + _text_chars(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_text_chars(v) for v in value)
    return 0


def create_app(
    model: Any,
    tokenizer: Any,
    *,
    model_name: str = "tiny",
    max_new_tokens_limit: int = 2048,
    max_request_bytes: int = 8 * 1024 * 1024,
    max_prompts: int = MAX_PROMPTS,
    max_n: int = MAX_N,
    max_sequences: int = MAX_SEQUENCES,
    max_chars_per_token: float = MAX_CHARS_PER_TOKEN,
    token: str | None = None,
    tool_call_parser: str | None = None,
    logprobs_mode: str = "raw",
) -> Any:
    """A FastAPI app serving ``model`` (a transformers causal LM, already on its device) with the OpenAI API.

    ``max_new_tokens_limit`` caps ``max_tokens`` (larger requests get a 400); requests bodies above
    ``max_request_bytes`` get a 413 (``Connection: close``; the body is not read). ``max_prompts`` and
    ``max_sequences`` cap the prompts and the prompts x ``n`` of a request (413), ``max_n`` caps ``n`` (400);
    prompts longer than the model's context x ``max_chars_per_token`` characters get a 400 without being tokenised.
    ``tool_call_parser="hermes"`` (vLLM's ``--tool-call-parser hermes``): when a chat request has ``tools``, the
    ``<tool_call>`` blocks of a completion come back as ``tool_calls`` (ids derived from the text, so runs replay
    identically) with ``finish_reason`` ``"tool_calls"``; text without a parseable call stays ``content``.
    ``logprobs_mode="processed"`` (vLLM's ``--logprobs-mode processed_logprobs``) reports the sampled tokens'
    log-probs under ``softmax(logits / temperature)`` instead of the raw ``softmax(logits)`` (prompt log-probs stay
    raw). ``token`` requires ``Authorization: Bearer <token>`` on every endpoint (401 otherwise). The app's ``state.lm``
    is the ``LocalLM`` it serves. A request whose client disconnects stops at its next forward pass (the app adds a
    pre-forward hook to ``model`` for that).

    >>> app = create_app(model, tokenizer, model_name="tiny")   # doctest: +SKIP
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect

    for name, value in (
        ("max_request_bytes", max_request_bytes),
        ("max_prompts", max_prompts),
        ("max_n", max_n),
        ("max_sequences", max_sequences),
        ("max_chars_per_token", max_chars_per_token),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    schemas = _schemas()
    lm = LocalLM(model, tokenizer)
    engine = _Engine(
        lm,
        model_name,
        max_new_tokens_limit,
        max_prompts=max_prompts,
        max_n=max_n,
        max_sequences=max_sequences,
        max_chars_per_token=max_chars_per_token,
        tool_call_parser=tool_call_parser,
        logprobs_mode=logprobs_mode,
    )
    authorized = bearer_checker(token)
    app = FastAPI(title="agentgym OpenAI-compatible server", docs_url=None, redoc_url=None)
    app.state.lm = lm

    def error(status: int, message: str, param: str | None = None) -> JSONResponse:
        headers = {"Connection": "close"} if status == 413 else None  # do not read the rest of a refused body
        if status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        return JSONResponse(_error_body(status, message, param), status_code=status, headers=headers)

    def check_token(request: Request) -> None:
        if not authorized(request.headers.get("authorization")):
            raise RequestError(401, "Missing or wrong bearer token: send the header `Authorization: Bearer <token>`.")

    async def read_body(request: Request) -> bytes:
        announced = request.headers.get("content-length")
        if announced is not None and announced.isdigit() and int(announced) > max_request_bytes:
            raise RequestError(413, f"Request body of {announced} bytes exceeds the limit of {max_request_bytes}.")
        chunks, size = [], 0
        async for chunk in request.stream():  # chunked bodies: stop as soon as the limit is passed
            size += len(chunk)
            if size > max_request_bytes:
                raise RequestError(413, f"Request body exceeds the limit of {max_request_bytes} bytes.")
            chunks.append(chunk)
        return b"".join(chunks)

    async def parse(request: Request, schema: Any) -> Any:
        body = await read_body(request)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise RequestError(400, f"Request body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise RequestError(400, "Request body must be a JSON object.")
        if _too_deep(data):
            raise RequestError(400, f"Request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.")
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise RequestError(400, f"Invalid request: {problems}") from exc

    async def disconnected(request: Request) -> None:
        """Returns when the client goes away (the body has been read, so only a disconnect can arrive)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def handle(request: Request, schema: Any, precheck: Any, fn: Any) -> JSONResponse:
        try:
            check_token(request)
            req = await parse(request, schema)
            precheck(req)
            cancel = threading.Event()
            work = asyncio.ensure_future(run_in_threadpool(engine.run, fn, req, cancel))
            watch = asyncio.ensure_future(disconnected(request))
            try:
                await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watch.cancel()
                if not work.done():  # the client left (or the server is stopping): stop generating
                    cancel.set()
                    work.add_done_callback(_retrieve_exception)
            if not work.done():
                logger.info("client left; cancelled its request to %s", request.url.path)
                return error(499, "Client closed the request.")
            return JSONResponse(work.result())
        except RequestError as exc:
            return error(exc.status, exc.message, exc.param)
        except ClientDisconnect:  # left while sending the body; nobody is listening
            return error(499, "Client closed the request.")
        except Exception as exc:  # a bug or a model failure: answer 500 with the reason, and log it
            logger.exception("request to %s failed", request.url.path)
            return error(500, f"Internal error: {type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        try:
            check_token(request)
        except RequestError as exc:
            return error(exc.status, exc.message)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        try:
            check_token(request)
        except RequestError as exc:
            return error(exc.status, exc.message)
        card = {
            "id": model_name,
            "object": "model",
            "created": 0,
            "owned_by": "agentgym",
            "max_model_len": lm.max_length,
        }
        return JSONResponse({"object": "list", "data": [card]})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        return await handle(request, schemas.ChatRequest, engine.precheck_chat, engine._chat)

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        return await handle(request, schemas.CompletionRequest, engine.precheck_completions, engine._completions)

    return app


def _retrieve_exception(future: Any) -> None:
    """Done-callback of an abandoned request: consume its outcome (normally :class:`_Cancelled`) quietly."""
    if not future.cancelled() and future.exception() is not None and not isinstance(future.exception(), _Cancelled):
        logger.warning("an abandoned request failed: %r", future.exception())


def serve_model(
    model_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    model_name: str | None = None,
    device: str = "cpu",
    max_new_tokens_limit: int = 2048,
    token: str | None = None,
    header_timeout: float = 10.0,
    model_cache_dir: str | os.PathLike[str] | None = None,
    **app_kwargs: Any,
) -> None:
    """Load a local model directory (``local_files_only=True``) or a named model (``"smollm2-135m"``, from the
    operator's ``model_cache_dir``: ``agentgym.tools.named_models``) and serve it until interrupted (blocks).

    Binds to loopback by default; beyond loopback it needs a bearer ``token`` (ValueError otherwise, before the
    model is loaded). ``app_kwargs`` (``max_prompts``, ``max_sequences``, ...) go to :func:`create_app`.

    >>> serve_model("/models/qwen2.5-0.5b-instruct", port=8000)   # doctest: +SKIP
    """
    check_bind(host, token)
    if isinstance(model_path, str) and model_path in NAMED_MODELS:
        name = model_name or model_path
        model_path = resolve_model_path(model_path, model_cache_dir)
    else:
        name = model_name or os.path.basename(os.path.normpath(os.fspath(model_path)))
    lm = LocalLM.from_pretrained(model_path, device=device)
    app = create_app(
        lm.model, lm.tokenizer, model_name=name, max_new_tokens_limit=max_new_tokens_limit, token=token, **app_kwargs
    )
    run_uvicorn(uvicorn_config(app, host=host, port=port, log_level="info", header_timeout=header_timeout))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a local transformers model with the OpenAI API.")
    parser.add_argument(
        "model", help=f"local model directory, a named model ({', '.join(model_names())}), or an output directory "
        "with --tiny"
    )  # fmt: skip
    parser.add_argument("--model-cache-dir", default=None, help=f"where named models are cached (default: ${CACHE_ENV}"
                        ", else ~/.cache/agentgym/models)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default; others need a token)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model-name", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-new-tokens-limit", type=int, default=2048)
    parser.add_argument("--max-prompts", type=int, default=MAX_PROMPTS, help="prompts per request (413 beyond)")
    parser.add_argument("--max-n", type=int, default=MAX_N, help="most completions per prompt, n (400 beyond)")
    parser.add_argument("--max-sequences", type=int, default=MAX_SEQUENCES, help="prompts x n per request (413 beyond)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token clients must send (default: ${TOKEN_ENV}, which keeps it out of ps)",
    )
    parser.add_argument("--header-timeout", type=float, default=10.0, help="seconds a client has to send its headers")
    parser.add_argument(
        "--logprobs-mode",
        choices=["raw", "processed"],
        default="raw",
        help="log-probs of sampled tokens: raw softmax(logits) or after temperature (vLLM's processed_logprobs)",
    )
    parser.add_argument("--tiny", action="store_true", help="first write a tiny random model to MODEL (seed 0)")
    parser.add_argument(
        "--tool-call-parser",
        choices=[p for p in TOOL_CALL_PARSERS if p],
        default=None,
        help="return the <tool_call> blocks of chat completions with `tools` as tool_calls (as vLLM's option)",
    )
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        check_bind(args.host, token)
    except ValueError as exc:
        parser.error(str(exc))
    if args.tiny:
        from agentgym.tools.tiny_model import save_tiny_model

        save_tiny_model(args.model, seed=0)
    elif args.model in NAMED_MODELS:
        try:
            NAMED_MODELS[args.model].gguf_path()
        except ModelUnavailableError as exc:
            parser.error(str(exc))
    elif not os.path.isdir(args.model):
        parser.error(f"no model directory at {args.model} (a local folder with config.json, or a named model: "
                     f"{', '.join(model_names())})")  # fmt: skip
    serve_model(
        args.model,
        args.host,
        args.port,
        model_name=args.model_name,
        device=args.device,
        max_new_tokens_limit=args.max_new_tokens_limit,
        token=token,
        header_timeout=args.header_timeout,
        model_cache_dir=args.model_cache_dir,
        max_prompts=args.max_prompts,
        max_n=args.max_n,
        max_sequences=args.max_sequences,
        tool_call_parser=args.tool_call_parser,
        logprobs_mode=args.logprobs_mode,
    )


if __name__ == "__main__":
    main()
