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
they are served one at a time.

>>> from agentgym.tools.tiny_model import build_tiny_model                         # doctest: +SKIP
>>> app = create_app(*build_tiny_model(seed=0), model_name="tiny")               # doctest: +SKIP
>>> with BackgroundServer(app) as server:                                          # doctest: +SKIP
...     LLMClient(server.url + "/v1").chat([{"role": "user", "content": "hi"}])
>>> serve_model("/path/to/model", port=8000)                                      # doctest: +SKIP

Command line: ``python -m agentgym.tools.openai_server MODEL_DIR --port 8000 [--tiny]``.
"""

import argparse
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from agentgym.tools.local_lm import Generation, LocalLM, TokenLogprob

logger = logging.getLogger(__name__)

#: Most completions per request (``n``) and most top log-probs per token.
MAX_N = 16
MAX_TOP_LOGPROBS = 20


class RequestError(Exception):
    """A request the server refuses; becomes an OpenAI-style error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def _error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error", 413: "invalid_request_error"}.get(status, "error")
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
        n: int = Field(1, ge=1, le=MAX_N)
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
    """Turns validated requests into OpenAI responses using a ``LocalLM`` (runs in worker threads)."""

    def __init__(self, lm: LocalLM, model_name: str, max_new_tokens_limit: int) -> None:
        self.lm = lm
        self.model_name = model_name
        self.limit = max_new_tokens_limit

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

    def chat(self, req: Any) -> dict[str, Any]:
        with self.lm.lock:
            return self._chat(req)

    def completions(self, req: Any) -> dict[str, Any]:
        with self.lm.lock:
            return self._completions(req)

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
            gen = self.lm.generate(
                prompt_ids,
                max_new_tokens=budget,
                temperature=req.temperature,
                top_p=req.top_p,
                stop=req.stop,
                generator=gen_seed,
                logprobs=top if req.logprobs else None,
            )
            completion_tokens += len(gen.token_ids)
            logprobs = None
            if req.logprobs:
                logprobs = {"content": [self._chat_logprob(lp, top) for lp in gen.logprobs]}
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": self._visible(gen)},
                    "logprobs": logprobs,
                    "finish_reason": gen.finish_reason,
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
        raw = req.prompt
        items: list[str | list[int]]
        if isinstance(raw, str) or (isinstance(raw, list) and raw and isinstance(raw[0], int)):
            items = [raw]
        else:
            items = list(raw)
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
                gen = self.lm.generate(
                    ids,
                    max_new_tokens=budget,
                    temperature=req.temperature,
                    top_p=req.top_p,
                    stop=req.stop,
                    generator=gen_seed,
                    logprobs=req.logprobs,
                    prompt_logprobs=prompt_k if want_prompt_lp else None,
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


def create_app(
    model: Any,
    tokenizer: Any,
    *,
    model_name: str = "tiny",
    max_new_tokens_limit: int = 2048,
    max_request_bytes: int = 8 * 1024 * 1024,
) -> Any:
    """A FastAPI app serving ``model`` (a transformers causal LM, already on its device) with the OpenAI API.

    ``max_new_tokens_limit`` caps ``max_tokens`` (larger requests get a 400); requests bodies above
    ``max_request_bytes`` get a 413. The app's ``state.lm`` is the ``LocalLM`` it serves.

    >>> app = create_app(model, tokenizer, model_name="tiny")   # doctest: +SKIP
    """
    import json

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError
    from starlette.concurrency import run_in_threadpool

    schemas = _schemas()
    lm = LocalLM(model, tokenizer)
    engine = _Engine(lm, model_name, max_new_tokens_limit)
    app = FastAPI(title="agentgym OpenAI-compatible server", docs_url=None, redoc_url=None)
    app.state.lm = lm

    def error(status: int, message: str, param: str | None = None) -> JSONResponse:
        return JSONResponse(_error_body(status, message, param), status_code=status)

    async def parse(request: Request, schema: Any) -> Any:
        body = await request.body()
        if len(body) > max_request_bytes:
            raise RequestError(413, f"Request body of {len(body)} bytes exceeds the limit of {max_request_bytes}.")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"Request body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise RequestError(400, "Request body must be a JSON object.")
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise RequestError(400, f"Invalid request: {problems}") from exc

    async def handle(request: Request, schema: Any, fn: Any) -> JSONResponse:
        try:
            req = await parse(request, schema)
            return JSONResponse(await run_in_threadpool(fn, req))
        except RequestError as exc:
            return error(exc.status, exc.message, exc.param)
        except Exception as exc:  # a bug or a model failure: answer 500 with the reason, and log it
            logger.exception("request to %s failed", request.url.path)
            return error(500, f"Internal error: {type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
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
        return await handle(request, schemas.ChatRequest, engine.chat)

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        return await handle(request, schemas.CompletionRequest, engine.completions)

    return app


class BackgroundServer:
    """Run an ASGI app with uvicorn on a loopback port in a daemon thread (for tests and notebooks).

    ``port=0`` picks a free port (bound before the thread starts, so there is no race); ``url`` is
    ``http://host:port``. ``stop()`` (or leaving the ``with`` block) shuts the server down and joins the thread.

    >>> with BackgroundServer(app) as server:                  # doctest: +SKIP
    ...     httpx.get(server.url + "/health")
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, graceful_timeout: int = 2) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.graceful_timeout = graceful_timeout
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        import uvicorn

        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=self.graceful_timeout,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=self.graceful_timeout + 10)
        self._server = self._thread = None

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_model(
    model_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    model_name: str | None = None,
    device: str = "cpu",
    max_new_tokens_limit: int = 2048,
) -> None:
    """Load a local model directory (``local_files_only=True``) and serve it until interrupted (blocks).

    >>> serve_model("/models/qwen2.5-0.5b-instruct", port=8000)   # doctest: +SKIP
    """
    import uvicorn

    lm = LocalLM.from_pretrained(model_path, device=device)
    name = model_name or os.path.basename(os.path.normpath(os.fspath(model_path)))
    app = create_app(lm.model, lm.tokenizer, model_name=name, max_new_tokens_limit=max_new_tokens_limit)
    uvicorn.run(app, host=host, port=port, log_level="info")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a local transformers model with the OpenAI API.")
    parser.add_argument("model", help="local model directory (or an output directory with --tiny)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model-name", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-new-tokens-limit", type=int, default=2048)
    parser.add_argument("--tiny", action="store_true", help="first write a tiny random model to MODEL (seed 0)")
    args = parser.parse_args(argv)
    if args.tiny:
        from agentgym.tools.tiny_model import save_tiny_model

        save_tiny_model(args.model, seed=0)
    serve_model(
        args.model,
        args.host,
        args.port,
        model_name=args.model_name,
        device=args.device,
        max_new_tokens_limit=args.max_new_tokens_limit,
    )


if __name__ == "__main__":
    main()
