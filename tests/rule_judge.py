"""A rule judge on a real loopback OpenAI-compatible server, for the tests of judge-based methods: ``reply(system,
user)`` grades each chat request (the judge's rubric prompt and the conversation it grades) with a fixed rule; a
``None`` reply answers HTTP 500. ``first_token(system, user)``, where given, answers a request that asks for log-probs
(``logprobs=True``): a map from first tokens to their probabilities, sent as the reply's first token's
``top_logprobs`` (the most likely token is the reply)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class RuleJudge:
    """The running judge: its ``url`` (an OpenAI-compatible base URL, ``/v1`` included), the last message of
    every request it answered, in order, every request body, and how many times its model list was read."""

    url: str
    requests: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    listed: int = 0


@contextmanager
def serve_rule_judge(
    reply: Callable[[str, str], str | None],
    first_token: Callable[[str, str], dict[str, float]] | None = None,
) -> Iterator[RuleJudge]:
    """Serve the judge on loopback for the ``with`` block (skips the test where FastAPI or uvicorn is missing)."""
    fastapi = pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from agentgym.tools.serving import BackgroundServer

    app = fastapi.FastAPI()
    judge = RuleJudge("")

    @app.post("/v1/chat/completions")
    async def chat(body: dict = fastapi.Body()) -> Any:  # noqa: B008  (FastAPI's idiom)
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        judge.requests.append(user)
        judge.bodies.append(body)
        logprobs = None
        if body.get("logprobs") and first_token is not None:
            probs = sorted(first_token(system, user).items(), key=lambda kv: -kv[1])
            top = [{"token": t, "logprob": math.log(p)} for t, p in probs[: body.get("top_logprobs") or 1]]
            text: str | None = probs[0][0]
            logprobs = {"content": [{"token": text, "logprob": top[0]["logprob"], "top_logprobs": top}]}
        else:
            text = reply(system, user)
        if text is None:
            return fastapi.responses.JSONResponse({"error": {"message": "the judge crashed"}}, status_code=500)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                  "finish_reason": "stop"}  # fmt: skip
        return {"id": "j", "object": "chat.completion", "model": "rule", "choices": [choice]}

    @app.get("/v1/models")
    async def models() -> dict:
        judge.listed += 1
        return {"object": "list", "data": [{"id": "rule", "object": "model"}]}

    with BackgroundServer(app) as server:
        judge.url = server.url + "/v1"
        yield judge
