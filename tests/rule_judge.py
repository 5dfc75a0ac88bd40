"""A rule judge on a real loopback OpenAI-compatible server, for the tests of judge-based methods: ``reply(system,
user)`` grades each chat request (the judge's rubric prompt and the conversation it grades) with a fixed rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest


@dataclass
class RuleJudge:
    """The running judge: its ``url`` (an OpenAI-compatible base URL, ``/v1`` included) and the last message of
    every request it answered, in order."""

    url: str
    requests: list[str] = field(default_factory=list)


@contextmanager
def serve_rule_judge(reply: Callable[[str, str], str]) -> Iterator[RuleJudge]:
    """Serve the judge on loopback for the ``with`` block (skips the test where FastAPI or uvicorn is missing)."""
    fastapi = pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from agentgym.tools.serving import BackgroundServer

    app = fastapi.FastAPI()
    judge = RuleJudge("")

    @app.post("/v1/chat/completions")
    async def chat(body: dict = fastapi.Body()) -> dict:  # noqa: B008  (FastAPI's idiom)
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        judge.requests.append(user)
        message = {"role": "assistant", "content": reply(system, user)}
        return {"id": "j", "object": "chat.completion", "model": "rule",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "rule", "object": "model"}]}

    with BackgroundServer(app) as server:
        judge.url = server.url + "/v1"
        yield judge
