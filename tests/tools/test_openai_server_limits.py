"""The OpenAI-compatible server under abuse: batch caps, abandoned requests, huge bodies and prompts, slow clients,
bearer tokens. Real uvicorn servers on loopback serving the tiny random model (no mocks)."""

import select
import socket
import time

import httpx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentgym.tools import openai_server  # noqa: E402
from agentgym.tools.llm import LLMClient, LLMHTTPError  # noqa: E402
from agentgym.tools.openai_server import create_app, main  # noqa: E402
from agentgym.tools.serving import BackgroundServer  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model  # noqa: E402

PROMPT = "which river flows through the city of ovra"


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


@pytest.fixture(scope="module")
def served(tiny):
    """Default caps, a 1 MB body limit, long generations allowed and short read deadlines."""
    app = create_app(*tiny, model_name="tiny", max_new_tokens_limit=2048, max_request_bytes=1_000_000)
    with BackgroundServer(app, header_timeout=0.5, body_timeout=1.0) as server:
        yield server, app.state.lm


@pytest.fixture
def url(served):
    return served[0].url


@pytest.fixture
def lm(served):
    return served[1]


def post(url, path, body, timeout=10.0, **kw):
    return httpx.post(url + path, json=body, timeout=timeout, **kw)


def assert_error(resp, status, needle):
    assert resp.status_code == status, resp.text[:300]
    err = resp.json()["error"]
    assert needle in err["message"] and err["code"] == status, err


#: Seconds a 2-token request may take after an abuse: ~0.05 s when the server is free, a minute or more when a
#: request left running holds the model. Generous, so a loaded machine passes.
SMALL_REQUEST = 15.0


def time_to_serve_a_small_request(url):
    t0 = time.monotonic()
    resp = post(url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, timeout=30)
    assert resp.status_code == 200, resp.text
    return time.monotonic() - t0


# ---------------------------------------------------------------------------- 3a: caps on prompts, n, sequences


def test_default_caps_on_prompts_n_and_sequences(url):
    many = post(url, "/v1/completions", {"prompt": ["a b"] * 65, "max_tokens": 1})
    assert_error(many, 413, "Too many prompts: 65 > 64")
    ids = post(url, "/v1/completions", {"prompt": [[5, 6]] * 65, "max_tokens": 1})
    assert_error(ids, 413, "Too many prompts")
    seqs = post(url, "/v1/completions", {"prompt": ["a"] * 17, "n": 16, "max_tokens": 1})
    assert_error(seqs, 413, "17 prompt(s) x n=16 = 272 > 256")
    assert_error(post(url, "/v1/completions", {"prompt": "a", "n": 17}), 400, "n must be <= 16")
    chat = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 17})
    assert_error(chat, 400, "n must be <= 16")
    assert (openai_server.MAX_PROMPTS, openai_server.MAX_N, openai_server.MAX_SEQUENCES) == (64, 16, 256)


def test_caps_are_options(tiny):
    app = create_app(*tiny, max_prompts=3, max_n=4, max_sequences=6)
    with BackgroundServer(app) as server:
        assert_error(post(server.url, "/v1/completions", {"prompt": ["a"] * 4, "max_tokens": 1}), 413, "> 3")
        assert_error(post(server.url, "/v1/completions", {"prompt": "a", "n": 5, "max_tokens": 1}), 400, "<= 4")
        too_many = post(server.url, "/v1/completions", {"prompt": ["a"] * 2, "n": 4, "max_tokens": 1})
        assert_error(too_many, 413, "= 8 > 6")
        ok = post(server.url, "/v1/completions", {"prompt": ["a", "b"], "n": 3, "max_tokens": 1})
        assert ok.status_code == 200 and len(ok.json()["choices"]) == 6
    with pytest.raises(ValueError, match="max_sequences must be positive"):
        create_app(*tiny, max_sequences=0)


# ---------------------------------------------------------------------------- 3b: abandoned requests are cancelled


def test_a_request_abandoned_by_its_client_stops_and_frees_the_server(url):
    # 8 x 2000 greedy tokens: about a minute of generation if it were left running.
    with pytest.raises(httpx.ReadTimeout):
        post(url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2000, "n": 8, "temperature": 0}, timeout=0.5)
    assert time_to_serve_a_small_request(url) < SMALL_REQUEST
    chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2000, "n": 8}
    with pytest.raises(httpx.ReadTimeout):
        post(url, "/v1/chat/completions", chat, timeout=0.5)
    assert time_to_serve_a_small_request(url) < SMALL_REQUEST


def test_a_request_abandoned_while_queued_never_runs(url, lm):
    long = {"prompt": PROMPT, "max_tokens": 2000, "n": 8, "temperature": 0}
    with lm.lock:  # the model is busy: the request waits for the lock, and its client gives up meanwhile
        with pytest.raises(httpx.ReadTimeout):
            post(url, "/v1/completions", long, timeout=0.5)
        time.sleep(0.2)
    assert time_to_serve_a_small_request(url) < SMALL_REQUEST


# ---------------------------------------------------------------------------- 3c: huge bodies are not read


def read_response(sock, limit=5.0):
    """Everything the server sends until it closes the connection (or ``limit`` seconds pass)."""
    sock.settimeout(limit)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def connect(url):
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def test_an_announced_huge_body_is_refused_before_it_is_sent(tiny):
    app = create_app(*tiny, model_name="tiny", max_request_bytes=1_000_000)
    with BackgroundServer(app, body_timeout=60.0) as server, connect(server.url) as sock:
        t0 = time.monotonic()
        head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: 400000000\r\n\r\n".encode() + b'{"prompt": "')
        answer = read_response(sock, limit=90.0)
        elapsed = time.monotonic() - t0
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"exceeds the limit of 1000000" in answer and b"connection: close" in answer.lower()
        assert elapsed < 30.0  # answered at once, not at the 60 s body deadline
        assert time_to_serve_a_small_request(server.url) < SMALL_REQUEST


def test_a_chunked_body_is_refused_once_it_passes_the_limit(url):
    chunk = b"a" * (256 * 1024)
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent, answer = 0, b""
    with connect(url) as sock:
        head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        try:
            while sent < 64 * 2**20 and not select.select([sock], [], [], 0)[0]:
                sock.sendall(frame)
                sent += len(chunk)
            if sent >= 64 * 2**20:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_response(sock)
    assert sent < 32 * 2**20, f"the server read {sent / 2**20:.0f} MiB before refusing"
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"exceeds the limit of 1000000 bytes" in answer
    assert time_to_serve_a_small_request(url) < SMALL_REQUEST


# ---------------------------------------------------------------------------- 3d: over-long prompts, no lock taken


def test_a_prompt_too_long_for_the_context_is_refused_without_the_model_lock(url, lm):
    cap = lm.max_length * 32
    with lm.lock:  # a long generation holds the model: the refusal must not wait for it
        t0 = time.monotonic()
        resp = post(url, "/v1/completions", {"prompt": "a" * (cap + 1), "max_tokens": 1}, timeout=30)
        assert_error(resp, 400, f"The prompt has {cap + 1} characters")
        assert "maximum context of 2048 tokens" in resp.json()["error"]["message"]
        batch = post(url, "/v1/completions", {"prompt": ["ok", "a" * (cap + 1)], "max_tokens": 1}, timeout=30)
        assert_error(batch, 400, "characters")
        messages = [{"role": "system", "content": "a" * cap}, {"role": "user", "content": "hi"}]
        chat = post(url, "/v1/chat/completions", {"messages": messages}, timeout=30)
        assert_error(chat, 400, "characters")
        assert time.monotonic() - t0 < 30.0  # a refusal that waited for the lock would never come
    # Under the bound the prompt is tokenised as before (one WordPiece [UNK] here) and served.
    ok = post(url, "/v1/completions", {"prompt": "a" * (cap - 10), "max_tokens": 1})
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["prompt_token_ids"]) == 1


# ---------------------------------------------------------------------------- slow clients, tokens


def test_partial_headers_and_slow_bodies_are_cut_off(url):
    slow = [connect(url) for _ in range(20)]
    for sock in slow[:10]:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    for sock in slow[10:]:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
    t0 = time.monotonic()
    for sock in slow:
        read_response(sock, limit=max(0.01, t0 + 15.0 - time.monotonic()))  # one budget for all of them
        sock.close()
    assert time.monotonic() - t0 < 10.0  # cut at the 0.5 s / 1 s deadlines, with room for a loaded machine
    assert time_to_serve_a_small_request(url) < SMALL_REQUEST


def test_bearer_token(tiny):
    with BackgroundServer(create_app(*tiny, token="s3cret")) as server:
        for path in ("/health", "/v1/models"):
            resp = httpx.get(server.url + path, timeout=5)
            assert_error(resp, 401, "bearer token")
        resp = post(server.url, "/v1/completions", {"prompt": "a"}, headers={"Authorization": "Bearer s3cre"})
        assert_error(resp, 401, "bearer token")
        anonymous = LLMClient(server.url, api_key_env=None, max_retries=0)
        with anonymous, pytest.raises(LLMHTTPError, match="401"):
            anonymous.chat([{"role": "user", "content": "hi"}], max_tokens=1)
        with LLMClient(server.url, api_key="s3cret", model="tiny") as client:
            assert client.chat([{"role": "user", "content": "hi"}], max_tokens=1).finish_reason in ("stop", "length")


def test_command_line_refuses_a_public_bind_without_a_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("AGENTGYM_TOKEN", raising=False)
    with pytest.raises(SystemExit) as info:  # before the model directory (missing here) is touched
        main([str(tmp_path / "missing-model"), "--host", "0.0.0.0"])
    assert info.value.code == 2
    assert "refusing to serve on '0.0.0.0'" in capsys.readouterr().err


def test_tools_nested_950_deep_is_a_400_and_the_bearer_scheme_is_case_insensitive(tiny):
    deep = '{"x": ' * 950 + "{}" + "}" * 950  # written out: encoding it would hit this process's recursion limit
    body = ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
            '"tools": [{"type": "function", "function": {"name": "f", "parameters": ' + deep + "}}]}")  # fmt: skip

    def chat(auth):
        headers = {"Authorization": auth, "Content-Type": "application/json"}
        return httpx.post(server.url + "/v1/chat/completions", content=body, headers=headers, timeout=10)

    with BackgroundServer(create_app(*tiny, token="s3cret")) as server:
        for scheme in ("bearer", "BEARER", "Bearer"):
            assert_error(chat(f"{scheme} s3cret"), 400, "levels deep")
        assert_error(chat("bearer S3CRET"), 401, "bearer token")
        ok = post(
            server.url, "/v1/completions", {"prompt": "a", "max_tokens": 1}, headers={"Authorization": "bearer s3cret"}
        )
        assert ok.status_code == 200, ok.text
