"""LLMClient against a real uvicorn server running the OpenAI-compatible app on the tiny model (no mocks).

A fault-injecting ASGI middleware (below) sits in front of the real app to produce 5xx/429/400 answers and slow
responses on demand, and to count requests and the peak number in flight.
"""

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from agentgym.tools.llm import (
    LLMClient,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMTimeoutError,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentgym.tools.openai_server import create_app  # noqa: E402
from agentgym.tools.serving import BackgroundServer  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You answer questions."},
    {"role": "user", "content": "Which river flows through the city of Ovra?"},
]


class FaultInjector:
    """ASGI middleware: scripted failures, an optional delay, request counting and peak concurrency."""

    def __init__(self, app):
        self.app = app
        self.reset()

    def reset(self):
        self.faults: list[tuple[int, bytes]] = []  # answered (status, body) in order, one per request
        self.permanent: tuple[int, bytes] | None = None
        self.delay = 0.0
        self.requests = 0
        self.inflight = 0
        self.max_inflight = 0
        self.last_headers: dict[str, str] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.requests += 1
        self.last_headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        fault = self.faults.pop(0) if self.faults else self.permanent  # decided on arrival
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if fault is None:
                return await self.app(scope, receive, send)
            status, body = fault
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        finally:
            self.inflight -= 1


def error_json(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "server_error"}}).encode()


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


@pytest.fixture(scope="module")
def served(tiny):
    model, tokenizer = tiny
    app = create_app(model, tokenizer, model_name="tiny", max_new_tokens_limit=64)
    injector = FaultInjector(app)
    with BackgroundServer(injector) as server:
        yield server, injector, app.state.lm


@pytest.fixture
def server(served):
    server, injector, _ = served
    injector.reset()
    yield server
    deadline = time.monotonic() + 10  # let requests abandoned by timed-out clients finish
    while injector.inflight > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    injector.reset()


@pytest.fixture
def injector(served):
    return served[1]


@pytest.fixture
def lm(served):
    return served[2]


@pytest.fixture
def client(server):
    with LLMClient(server.url + "/v1", api_key_env=None, model="tiny", backoff=0.01, timeout=20) as c:
        yield c


def reference_greedy(lm, messages, max_new_tokens):
    """Greedy continuation computed with transformers' own ``generate`` (independent of LocalLM's loop)."""
    ids = lm.chat_prompt_ids(messages)
    with lm.lock, torch.no_grad():
        out = lm.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
        )
    return lm.tokenizer.decode(out[0, len(ids) :].tolist(), skip_special_tokens=True)


def reference_prompt_logprobs(lm, ids):
    with lm.lock, torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


# ---------------------------------------------------------------------------- round trips


def test_models_and_base_url_forms(server):
    with LLMClient(server.url, api_key_env=None) as bare, LLMClient(server.url + "/v1/", api_key_env=None) as full:
        assert bare.base_url == full.base_url == server.url + "/v1"
        assert bare.models() == ["tiny"]
        # model=None resolves to the first served model
        assert bare.chat(MESSAGES, temperature=0, max_tokens=3).raw["model"] == "tiny"


def test_chat_roundtrip_matches_transformers_generate(client, lm):
    res = client.chat(MESSAGES, temperature=0, max_tokens=12)
    assert res.text == reference_greedy(lm, MESSAGES, 12)
    assert res.finish_reason == "length"
    assert res.usage["completion_tokens"] == 12
    assert res.usage["prompt_tokens"] == len(lm.chat_prompt_ids(MESSAGES))
    assert res.stop_reason_reported and res.stop_reason is None
    assert res.texts == [res.text]


def test_greedy_is_deterministic(client):
    texts = {client.chat(MESSAGES, temperature=0, max_tokens=10).text for _ in range(3)}
    assert len(texts) == 1


def test_seeded_sampling_is_deterministic(client):
    a = client.chat(MESSAGES, temperature=1.0, top_p=0.95, max_tokens=12, seed=123)
    b = client.chat(MESSAGES, temperature=1.0, top_p=0.95, max_tokens=12, seed=123)
    c = client.chat(MESSAGES, temperature=1.0, top_p=0.95, max_tokens=12, seed=124)
    assert a.text == b.text
    assert a.text != c.text
    greedy = client.chat(MESSAGES, temperature=0, max_tokens=12).text
    assert a.text != greedy
    # n choices share one seeded generator: deterministic as a whole, different from each other
    n1 = client.chat(MESSAGES, temperature=1.0, max_tokens=8, seed=7, n=3).texts
    n2 = client.chat(MESSAGES, temperature=1.0, max_tokens=8, seed=7, n=3).texts
    assert n1 == n2 and len(set(n1)) == 3


def test_chat_logprobs(client):
    res = client.chat(MESSAGES, temperature=0, max_tokens=6, logprobs=True, top_logprobs=3)
    assert len(res.tokens) == len(res.token_logprobs) == 6
    content = res.raw["choices"][0]["logprobs"]["content"]
    assert all(len(c["top_logprobs"]) == 3 for c in content)
    # greedy: each sampled token is the most likely one
    assert all(c["top_logprobs"][0]["logprob"] == pytest.approx(c["logprob"]) for c in content)


def test_completions_prompt_logprobs_equal_model(client, lm):
    ids = lm.encode("the river ovra flows north through the old city of tallen")
    expected = reference_prompt_logprobs(lm, ids)

    vllm_style = client.completions(ids, max_tokens=0, prompt_logprobs=0)
    assert vllm_style.text == "" and vllm_style.usage["completion_tokens"] == 0
    assert vllm_style.prompt_token_ids == ids
    assert vllm_style.prompt_logprobs[0] is None
    assert vllm_style.prompt_logprobs[1:] == pytest.approx(expected, abs=1e-4)

    legacy = client.completions(ids, max_tokens=0, echo=True, logprobs=0)
    assert legacy.prompt_logprobs[0] is None
    assert legacy.prompt_logprobs[1:] == pytest.approx(expected, abs=1e-4)
    assert legacy.tokens == [] and legacy.token_logprobs == []

    # a text prompt tokenises to the same ids; top-k entries come after the prompt token
    text = client.completions(
        "the river ovra flows north through the old city of tallen", max_tokens=0, prompt_logprobs=2
    )
    assert text.prompt_token_ids == ids
    assert text.prompt_logprobs[1:] == pytest.approx(expected, abs=1e-4)
    entry = text.raw["choices"][0]["prompt_logprobs"][1]
    assert next(iter(entry)) == str(ids[1]) and {v["rank"] for v in list(entry.values())[1:]} <= {1, 2}


def test_completion_logprobs_match_model_on_the_full_sequence(client, lm):
    ids = lm.encode("a film about rivers")
    res = client.completions(ids, max_tokens=5, temperature=0, logprobs=2, echo=True)
    assert res.raw["choices"][0]["prompt_token_ids"] == ids
    assert len(res.tokens) == 5 and len(res.token_logprobs) == 5 and len(res.prompt_tokens) == len(ids)
    # re-score prompt + greedy continuation in one teacher-forced pass: the generated log-probs agree (KV cache ok)
    greedy = client.completions(ids, max_tokens=5, temperature=0, return_tokens_as_token_ids=True, logprobs=0)
    cont = [int(t.split(":")[1]) for t in greedy.tokens]
    full = reference_prompt_logprobs(lm, ids + cont)
    assert res.token_logprobs == pytest.approx(full[len(ids) - 1 :], abs=1e-4)
    assert res.prompt_logprobs[1:] == pytest.approx(full[: len(ids) - 1], abs=1e-4)


def test_stop_strings(client):
    full = client.chat(MESSAGES, temperature=1.0, max_tokens=20, seed=5).text
    words = [w for w in full.split() if w.isalpha() and len(w) >= 3]
    stop = words[3]
    res = client.chat(MESSAGES, temperature=1.0, max_tokens=20, seed=5, stop=["zzzz-never", stop])
    assert res.text == full[: full.index(stop)]  # OpenAI semantics: the stop string is excluded
    assert res.finish_reason == "stop"
    assert res.stop_reason == stop  # vLLM-style report of the matched stop
    comp = client.completions("a film about rivers", max_tokens=20, temperature=1.0, seed=5, stop=stop)
    assert stop not in comp.text


def test_sync_calls_from_many_threads_respect_the_concurrency_limit(server, injector):
    injector.delay = 0.05
    with LLMClient(server.url + "/v1", api_key_env=None, model="tiny", max_concurrency=3) as c:
        expected = c.chat(MESSAGES, temperature=0, max_tokens=4).text
        injector.max_inflight = 0
        with ThreadPoolExecutor(max_workers=12) as pool:
            texts = list(pool.map(lambda _: c.chat(MESSAGES, temperature=0, max_tokens=4).text, range(24)))
    assert texts == [expected] * 24
    assert 2 <= injector.max_inflight <= 3


def test_async_calls_from_a_foreign_loop(server, injector):
    injector.delay = 0.02

    async def main(c):
        results = await asyncio.gather(*(c.achat(MESSAGES, temperature=0, max_tokens=4) for _ in range(8)))
        models = await c.amodels()
        return [r.text for r in results], models

    with LLMClient(server.url + "/v1", api_key_env=None, model="tiny", max_concurrency=2) as c:
        texts, models = asyncio.run(main(c))
        texts2, _ = asyncio.run(main(c))  # a second loop, same client
    assert len(set(texts + texts2)) == 1 and models == ["tiny"]
    assert injector.max_inflight <= 2


# ---------------------------------------------------------------------------- failures


def test_transient_errors_are_retried(client, injector):
    injector.faults = [(500, error_json("a")), (429, error_json("b")), (503, error_json("c"))]
    res = client.chat(MESSAGES, temperature=0, max_tokens=3)
    assert res.text and injector.requests == 4


def test_permanent_500_raises_after_max_retries(server, injector):
    injector.permanent = (500, error_json("the GPU caught fire"))
    client = LLMClient(server.url + "/v1", api_key_env=None, model="tiny", max_retries=2, backoff=0.01)
    with client as c, pytest.raises(LLMHTTPError) as info:
        c.chat(MESSAGES, max_tokens=3)
    err = info.value
    assert err.status == 500 and "the GPU caught fire" in err.body
    assert "500" in str(err) and "the GPU caught fire" in str(err) and server.url + "/v1/chat/completions" in str(err)
    assert injector.requests == 3


def test_client_errors_are_not_retried(client, injector):
    injector.faults = [(400, error_json("bad field foo"))]
    with pytest.raises(LLMHTTPError) as info:
        client.chat(MESSAGES, max_tokens=3)
    assert info.value.status == 400 and "bad field foo" in str(info.value)
    assert injector.requests == 1
    # a real 400 from the server (max_tokens above its limit) carries the server's message
    with pytest.raises(LLMHTTPError, match="max_tokens must be <= 64"):
        client.chat(MESSAGES, max_tokens=1000)
    with pytest.raises(LLMHTTPError, match="does not exist") as info:
        client.chat(MESSAGES, model="gpt-nonexistent", max_tokens=2)
    assert info.value.status == 404
    assert injector.requests == 3


def test_slow_response_times_out(server, injector):
    injector.delay = 3.0
    with LLMClient(server.url + "/v1", api_key_env=None, model="tiny", timeout=0.2, max_retries=1, backoff=0.01) as c:
        start = time.monotonic()
        with pytest.raises(LLMTimeoutError, match="timed out"):
            c.chat(MESSAGES, max_tokens=2)
        assert time.monotonic() - start < 3.0  # both tries gave up (~0.4 s) before one answer would have come
    assert injector.requests == 2


def test_connection_refused_is_retried_then_raised():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        client = LLMClient(f"http://127.0.0.1:{port}/v1", api_key_env=None, model="x", max_retries=2, backoff=0.01)
        with client as c, pytest.raises(LLMConnectionError, match=f"127.0.0.1:{port}"):
            c.chat(MESSAGES)


def test_api_key_from_env_is_sent_and_never_shown(server, injector, monkeypatch):
    monkeypatch.setenv("AGENTGYM_TEST_KEY", "sk-secret-123")
    injector.permanent = (500, error_json("nope"))
    with LLMClient(server.url, api_key_env="AGENTGYM_TEST_KEY", model="tiny", max_retries=0) as c:
        assert "sk-secret-123" not in repr(c)
        with pytest.raises(LLMHTTPError) as info:
            c.chat(MESSAGES)
    assert injector.last_headers["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret-123" not in str(info.value)


def test_closed_client_raises(server):
    c = LLMClient(server.url, api_key_env=None, model="tiny")
    c.chat(MESSAGES, max_tokens=1)
    c.close()
    c.close()  # idempotent
    with pytest.raises(LLMError, match="closed"):
        c.chat(MESSAGES, max_tokens=1)
    assert not [t for t in threading.enumerate() if t.name == f"LLMClient-{c.base_url}"]


# ---------------------------------------------------------------------------- malformed requests


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/chat/completions", b"{not json", 400, "not valid JSON"),
        ("/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
        ("/v1/chat/completions", b"{}", 400, "messages"),
        ("/v1/chat/completions", b'{"messages": "hi"}', 400, "messages"),
        ("/v1/chat/completions", b'{"messages": []}', 400, "messages"),
        ("/v1/chat/completions", b'{"messages": [{"content": "hi"}]}', 400, "role"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "temperature": -1}', 400, "temp"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_p": 0}', 400, "top_p"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "stream": true}', 400, "stream"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "stop": [""]}', 400, "stop"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', 400, "n"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}',
            400,
            "text content",
        ),
        ("/v1/completions", b'{"prompt": ""}', 400, "at least one token"),
        ("/v1/completions", b'{"prompt": []}', 400, "empty"),
        ("/v1/completions", b'{"prompt": [1, 99999999]}', 400, "token ids"),
        ("/v1/completions", b'{"prompt": [1.5]}', 400, "prompt"),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": -1}', 400, "max_tokens"),
        ("/v1/completions", b'{"prompt": "x", "logprobs": 50}', 400, "logprobs"),
        ("/v1/completions", b'{"prompt": "x", "model": "other"}', 404, "does not exist"),
    ],
)
def test_malformed_requests_get_4xx(server, path, body, status, needle):
    resp = httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=10)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert needle in err["message"] and err["code"] == status


def test_batch_prompts_and_health(server):
    for prompts in (["a b", "c"], [[5, 6], [7]]):
        resp = httpx.post(server.url + "/v1/completions", json={"prompt": prompts, "max_tokens": 2, "n": 2}, timeout=10)
        assert resp.status_code == 200, resp.text
        data = resp.json()
        assert [c["index"] for c in data["choices"]] == [0, 1, 2, 3]
        assert data["usage"]["completion_tokens"] == 8
    assert data["choices"][2]["prompt_token_ids"] == [7]
    assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok"}
