"""An agent that plays through an OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, our ``openai_server``).

Stop strings: OpenAI semantics cut the completion *before* a stop string and drop it, but environments such as
Search-R1 parse ``<search>...</search>`` and ``<answer>...</answer>``, so the agent puts it back
(``restore_stop``): when the server reports which stop matched (vLLM's ``stop_reason``) that string is appended;
when it does not report (OpenAI) and ``append_stop=True``, the first stop string that closes a tag left open in
the text (``<search>`` without ``</search>``) is appended. An eos stop (vLLM ``stop_reason`` None or a token id)
appends nothing.

Tool calls: with ``tool_format="native"`` the agent sends the functions a tool env lists in ``<tools>`` as the
request's ``tools``, sends its earlier tool-call turns back as structured ``tool_calls`` messages, and returns the
server's ``tool_calls`` as an assistant message (JSON text, which tool envs accept). The default ``"text"`` sends
the conversation as it is (Hermes ``<tool_call>`` blocks in the text); see ``agentgym.agents.tool_calls``.

Seeds: ``reset(seed=s)`` seeds ``self.np_random``; each turn then sends a ``seed`` drawn from it, so an episode
replays exactly on a server with seeded sampling, and turns do not reuse one seed. With ``reset(seed=None)`` no
seed is sent.

>>> agent = OpenAIAgent("http://127.0.0.1:8000/v1", "tiny", stop=["</search>", "</answer>"])   # doctest: +SKIP
>>> agent.reset(seed=0)                                                                        # doctest: +SKIP
>>> agent.act([{"role": "user", "content": "Question: ..."}], {})                              # doctest: +SKIP
'<search> ... </search>'
"""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from agentgym.agents.tool_calls import (
    ToolFormat,
    check_tool_format,
    drop_tool_listings,
    listed_tools,
    to_openai_messages,
)
from agentgym.contract.agent import Agent, AgentError, Message
from agentgym.tools.llm import ChatResult, LLMClient, LLMConnectionError, LLMError

#: Message keys forwarded to the server; env-specific extras are dropped.
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")

_CLOSING_TAG = re.compile(r"^</([A-Za-z_][\w.-]*)>$")


def restore_stop(
    text: str,
    stop: Sequence[str],
    *,
    finish_reason: str | None,
    stop_reason: str | int | None = None,
    stop_reason_reported: bool = False,
    append_stop: bool = True,
) -> str:
    """Re-append the stop string an OpenAI-style server removed (see the module docstring).

    >>> restore_stop("<search>ovra", ["</search>", "</answer>"], finish_reason="stop")
    '<search>ovra</search>'
    >>> restore_stop("done", ["</answer>"], finish_reason="stop", stop_reason=None, stop_reason_reported=True)
    'done'
    """
    if finish_reason != "stop" or not stop:
        return text
    if stop_reason_reported:
        if isinstance(stop_reason, str) and stop_reason and not text.endswith(stop_reason):
            return text + stop_reason
        return text
    if not append_stop:
        return text
    for s in stop:
        match = _CLOSING_TAG.match(s)
        if match is None:
            continue
        opening = re.compile(rf"<{re.escape(match.group(1))}(?:\s[^<>]*)?>")
        last_open = max((m.end() for m in opening.finditer(text)), default=-1)
        if last_open >= 0 and text.rfind(s) < last_open:
            return text + s
    return text


class OpenAIAgent(Agent):
    """Chat-completions agent (see the module docstring for stop-string and seed handling).

    ``system_prompt`` is prepended when the conversation does not start with a system message. ``extra_body`` adds
    fields to every request (e.g. vLLM's ``{"top_k": 20}``). ``tool_format``: ``"text"`` or ``"native"`` (see the
    module docstring). ``last_result`` keeps the latest ``ChatResult``. Errors
    after the client's retries raise ``AgentError`` whose ``__cause__`` is the ``LLMError``; until the server has
    accepted one connection, each request is preceded by ``preflight`` (one connect, no retries), so a server that is
    not there fails at once (``LLMConnectionError`` cause) instead of after every retry.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        api_key: str | None = None,
        temperature: float = 0.0,
        top_p: float | None = None,
        max_tokens: int = 512,
        stop: str | Sequence[str] | None = None,
        system_prompt: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        append_stop: bool = True,
        extra_body: dict[str, Any] | None = None,
        client: LLMClient | None = None,
        tool_format: ToolFormat = "text",
    ) -> None:
        super().__init__()
        self.tool_format = check_tool_format(tool_format)
        self._owns_client = client is None
        self.client = client or LLMClient(
            base_url, api_key=api_key, api_key_env=api_key_env, model=model, timeout=timeout, max_retries=max_retries
        )
        self.model = model
        self.temperature = float(temperature)
        self.top_p = top_p
        self.max_tokens = int(max_tokens)
        self.stop: tuple[str, ...] = (stop,) if isinstance(stop, str) else tuple(stop or ())
        self.system_prompt = system_prompt
        self.append_stop = append_stop
        self.extra_body = dict(extra_body or {})
        self.last_result: ChatResult | None = None
        self._seeded = False
        self._connect_timeout = min(float(timeout), 5.0)
        self._reached = client is not None  # a client the caller built is theirs to check

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._seeded = seed is not None
        self.last_result = None

    def preflight(self) -> None:
        """One TCP connect to the server (at most 5 s, no retries): ``AgentError`` when nothing listens there (a
        refused connection is not worth the client's retries); once a connect succeeded the agent stops checking.
        Behind an HTTP proxy (``*_proxy`` variables) the proxy connects, so nothing is checked here."""
        if self._reached:
            return
        url = urlsplit(self.client.base_url)
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError("it must start with http:// or https:// and name a host")
        except ValueError as exc:
            raise AgentError(f"openai agent: bad base_url {self.client.base_url!r}: {exc}") from None
        if url.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(url.hostname):
            return
        try:
            socket.create_connection((url.hostname or "", port), timeout=self._connect_timeout).close()
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            cause = LLMConnectionError(f"connect to {url.hostname}:{port} failed: {why}", url=self.client.base_url)
            raise AgentError(f"openai agent: nothing answers at {self.client.base_url} ({why}); start the server "
                             "there or pass another --agent-arg base_url=...") from cause  # fmt: skip
        self._reached = True

    def _request_messages(self, messages: Sequence[Message]) -> list[Message]:
        if self.tool_format == "native":
            messages = to_openai_messages(drop_tool_listings(messages))
        out = [{k: m[k] for k in MESSAGE_KEYS if k in m} for m in messages]
        if self.system_prompt is not None and (not out or out[0].get("role") != "system"):
            out.insert(0, {"role": "system", "content": self.system_prompt})
        return out

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        self.preflight()
        params: dict[str, Any] = {
            **self.extra_body,
            "model": self.model,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "stop": list(self.stop) or None,
        }
        if self._seeded:
            params["seed"] = int(self.np_random.integers(0, 2**31 - 1))
        if self.tool_format == "native":
            params["tools"] = listed_tools(messages) or None
        try:
            result = self.client.chat(self._request_messages(messages), **params)
        except LLMError as exc:
            raise AgentError(f"openai agent: {exc}") from exc
        self.last_result = result
        if self.tool_format == "native" and result.tool_calls:
            message = {"role": "assistant", "content": result.text or None, "tool_calls": result.tool_calls}
            return json.dumps(message, ensure_ascii=False)
        return restore_stop(
            result.text,
            self.stop,
            finish_reason=result.finish_reason,
            stop_reason=result.stop_reason,
            stop_reason_reported=result.stop_reason_reported,
            append_stop=self.append_stop,
        )

    def close(self) -> None:
        if self._owns_client:
            self.client.close()
