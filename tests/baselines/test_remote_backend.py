"""The remote rollout back-end against the bundled OpenAI-compatible server on the tiny model, over loopback.

No mocks: a real uvicorn server runs ``create_app`` on one copy of the tiny model and ``RemotePolicy`` holds a second
copy (same seed, same weights) as its training model. A small ASGI middleware in front of the real app answers
scripted 5xx / malformed bodies on demand and counts requests (as in tests/tools/test_llm_client.py).
"""

from __future__ import annotations

import copy
import json
import socket
import time

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the envs)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentgym.baselines.remote_backend import RemotePolicy  # noqa: E402
from agentgym.baselines.rollout import HFPolicy, RolloutConfig, check_contexts, collect_rollouts  # noqa: E402
from agentgym.tools.openai_server import create_app  # noqa: E402
from agentgym.tools.serving import BackgroundServer  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402


class Faults:
    """ASGI middleware: answers ``permanent`` (status, body) instead of the app when set; counts requests."""

    def __init__(self, app):
        self.app = app
        self.permanent: tuple[int, bytes] | None = None
        self.requests = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.requests += 1
        if self.permanent is None:
            return await self.app(scope, receive, send)
        status, body = self.permanent
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def served():
    model, tokenizer = build_tiny_model(seed=0)
    faults = Faults(create_app(model, tokenizer, model_name="tiny"))
    with BackgroundServer(faults) as server:
        yield server, faults


@pytest.fixture
def faults(served):
    served[1].permanent, served[1].requests = None, 0
    yield served[1]
    served[1].permanent = None


@pytest.fixture(scope="module")
def policy(served):
    p = RemotePolicy(*build_tiny_model(seed=0), base_url=served[0].url + "/v1", model_name="tiny", concurrency=4)
    yield p
    p.close()


def contexts(policy, n=3):
    return [policy.prompt_ids([{"role": "user", "content": f"Question number {k}: which river?"}]) for k in range(n)]


def generators(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def teacher_forced(model, context, tokens, temperature):
    """log_softmax(logits / T) of ``tokens`` after ``context`` (T=1 when greedy), from one full forward."""
    with torch.no_grad():
        logits = model(torch.tensor([list(context) + list(tokens)])).logits[0].float()
    lp = torch.log_softmax(logits[len(context) - 1 : -1] / (temperature or 1.0), dim=-1)
    return lp.gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1)


def stop_word(policy, tokens, start=2):
    """The decoded text of the first sampled token at or after ``start`` that decodes to something."""
    for token in tokens[start:]:
        word = policy.decode([token]).strip()
        if word:
            return word
    raise AssertionError(f"no decodable token in {tokens}")


def test_samples_ids_finish_and_logprobs_of_the_server(policy, faults):
    ctx = contexts(policy)
    budgets = [8, 5, 12]
    out = policy.sample_batch(ctx, budgets=budgets, temperature=1.0, stop=(), generators=generators(1, 2, 3))
    assert faults.requests == 3 and len(out) == 3
    for context, budget, (tokens, logprobs, finish) in zip(ctx, budgets, out, strict=True):
        assert 1 <= len(tokens) <= budget and len(logprobs) == len(tokens)
        assert finish in ("eos", "length")
        assert (tokens[-1] in policy.eos_token_ids) if finish == "eos" else len(tokens) == budget
        expected = teacher_forced(policy.model, context, tokens, 1.0)
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4), (logprobs, expected)


def test_raw_logprobs_refuse_other_temperatures_before_drawing(policy, faults):
    gens = generators(5)
    with pytest.raises(ValueError, match="processed_logprobs"):
        policy.sample_batch(contexts(policy, 1), budgets=[4], temperature=0.7, stop=(), generators=gens)
    assert faults.requests == 0
    assert torch.equal(gens[0].get_state(), torch.Generator().manual_seed(5).get_state())
    with pytest.raises(ValueError, match="logprobs_mode"):
        RemotePolicy(policy.model, policy.tokenizer, base_url="http://127.0.0.1:9/v1", logprobs_mode="scaled")
    with pytest.raises(ValueError, match="extra_body may not set"):
        RemotePolicy(policy.model, policy.tokenizer, base_url="http://127.0.0.1:9/v1", extra_body={"seed": 1})


def test_greedy_equals_the_hf_back_end(policy):
    ctx = contexts(policy)
    local = HFPolicy(policy.model, policy.tokenizer)
    kw = {"budgets": [10, 10, 6], "temperature": 0.0}
    remote = policy.sample_batch(ctx, stop=(), generators=generators(0, 0, 0), **kw)
    hf = local.sample_batch(ctx, stop=(), generators=generators(0, 0, 0), **kw)
    assert [(t, f) for t, _, f in remote] == [(t, f) for t, _, f in hf]
    for (_, lp_r, _), (_, lp_h, _) in zip(remote, hf, strict=True):
        assert torch.allclose(torch.tensor(lp_r), torch.tensor(lp_h), atol=1e-4)
    # with a stop string the model reaches, both stop at the same token with finish "stop"
    stop = (stop_word(policy, remote[0][0]),)
    remote = policy.sample_batch(ctx[:1], stop=stop, generators=generators(0), budgets=[10], temperature=0.0)
    hf = local.sample_batch(ctx[:1], stop=stop, generators=generators(0), budgets=[10], temperature=0.0)
    assert remote[0][0] == hf[0][0] and remote[0][2] == hf[0][2] == "stop"


def test_seeds_make_batches_reproducible_whatever_the_concurrency(policy, served):
    ctx = contexts(policy, 4)
    kw = {"budgets": [6, 6, 6, 6], "temperature": 1.0, "stop": ()}
    first = policy.sample_batch(ctx, generators=generators(7, 8, 9, 10), **kw)
    assert first == policy.sample_batch(ctx, generators=generators(7, 8, 9, 10), **kw)
    assert len({tuple(t) for t, _, _ in first}) > 1  # the rows draw from their own seeds
    # one request at a time, the model named by GET /models: the same rows
    with RemotePolicy(policy.model, policy.tokenizer, base_url=served[0].url + "/v1", concurrency=1) as serial:
        assert serial.sample_batch(ctx, generators=generators(7, 8, 9, 10), **kw) == first
        assert serial.client.model == "tiny"
    # a row does not depend on the rest of the batch
    alone = policy.sample_batch(ctx[2:3], generators=generators(9), budgets=[6], temperature=1.0, stop=())
    assert alone == first[2:3]


def test_stop_strings_end_a_row_with_their_tokens(policy):
    ctx = contexts(policy, 1)
    free = policy.sample_batch(ctx, budgets=[12], temperature=1.0, stop=(), generators=generators(21))[0]
    stop = stop_word(policy, free[0])
    tokens, logprobs, finish = policy.sample_batch(
        ctx, budgets=[12], temperature=1.0, stop=(stop, "never-sampled"), generators=generators(21)
    )[0]
    assert finish == "stop"
    assert stop in policy.decode(tokens) and stop not in policy.decode(tokens[:-1])
    assert tokens == free[0][: len(tokens)] and logprobs == free[1][: len(tokens)]  # same seed, cut at the stop


def test_collect_rollouts_on_chain(policy):
    config = RolloutConfig(max_turns=3, max_new_tokens=8, temperature=1.0, stop=("</answer>",))

    def factory():
        return gymnasium.make("agentgym/Chain-v0", horizon=2)

    rollouts = collect_rollouts(policy, factory, [1, 2], group_size=2, config=config, sample_seed=3)
    assert len(rollouts) == 4
    for r in rollouts:
        check_contexts(r, [])  # the per-turn contexts were checked inside (config.check)
        assert 1 <= len(r.turn_spans) <= 2 and r.context_lengths == [len(r.prompt_ids) + s for s, _ in r.turn_spans]
        ids = r.input_ids
        lp = teacher_forced(policy.model, ids[: len(r.prompt_ids)], r.response_ids, 1.0)
        mask = torch.tensor(r.loss_mask, dtype=torch.bool)
        assert torch.allclose(torch.tensor(r.rollout_logprobs)[mask], lp[mask], atol=1e-4)
    again = collect_rollouts(policy, factory, [1, 2], group_size=2, config=config, sample_seed=3)
    assert [r.response_ids for r in again] == [r.response_ids for r in rollouts]


def eos_prone(model, tokenizer, bias=8.0):
    """A copy of ``model`` whose head adds ``bias`` to the eos logit (the random tiny model almost never ends)."""
    model = copy.deepcopy(model)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = bias
    model.lm_head = head
    return model


@pytest.mark.slow
def test_eos_rows_match_the_hf_back_end(policy):
    server_tok = build_tiny_tokenizer()
    with BackgroundServer(create_app(eos_prone(policy.model, server_tok), server_tok, model_name="tiny")) as server:
        model = eos_prone(policy.model, policy.tokenizer)
        with RemotePolicy(model, policy.tokenizer, base_url=server.url + "/v1", model_name="tiny") as remote:
            ctx = contexts(remote, 6)
            out = remote.sample_batch(ctx, budgets=[20] * 6, temperature=1.0, stop=(), generators=generators(*range(6)))
            assert {f for _, _, f in out} == {"eos", "length"}
            for context, (tokens, logprobs, finish) in zip(ctx, out, strict=True):
                assert (tokens[-1] in remote.eos_token_ids) == (finish == "eos")
                expected = teacher_forced(model, context, tokens, 1.0)
                assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
            greedy = remote.sample_batch(
                ctx, budgets=[5] * 6, temperature=0.0, stop=(), generators=generators(*[0] * 6)
            )
            hf = HFPolicy(model, policy.tokenizer).sample_batch(
                ctx, budgets=[5] * 6, temperature=0.0, stop=(), generators=generators(*[0] * 6)
            )
            assert [(t, f) for t, _, f in greedy] == [(t, f) for t, _, f in hf] and greedy[0][2] == "eos"
            # episodes whose turns end on eos: the template's closing <|end|> is not repeated after it
            config = RolloutConfig(max_turns=2, max_new_tokens=8, temperature=1.0, stop=("</answer>",))
            rollouts = collect_rollouts(
                remote, lambda: gymnasium.make("agentgym/Chain-v0", horizon=2), [4], group_size=4, config=config
            )
            ends = [r.response_ids[e - 1] for r in rollouts for _, e in r.turn_spans[:-1]]
            assert any(t in remote.eos_token_ids for t in ends)
            for r in rollouts:
                for _, e in r.turn_spans[:-1]:
                    if r.response_ids[e - 1] in remote.eos_token_ids:
                        assert r.response_ids[e] not in remote.eos_token_ids


def test_mark_stale_counts_and_close(policy, served):
    p = RemotePolicy(policy.model, policy.tokenizer, base_url=served[0].url, model_name="tiny")
    assert p.base_url == served[0].url + "/v1" and p.stale_updates == 0
    p.mark_stale()
    p.mark_stale()
    p.sleep()
    assert p.stale_updates == 2
    p.close()
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.sample_batch(contexts(p, 2), budgets=[2, 2], temperature=1.0, stop=(), generators=generators(1, 2))


def test_server_errors_carry_the_servers_message(policy, served, faults):
    url = served[0].url + "/v1"
    ctx = contexts(policy, 1)
    kw = {"budgets": [4], "temperature": 1.0, "stop": ()}
    wrong = RemotePolicy(policy.model, policy.tokenizer, base_url=url, model_name="nope")
    with wrong, pytest.raises(RuntimeError, match=r"HTTP 404.*model `nope` does not exist"):
        wrong.sample_batch(ctx, generators=generators(1), **kw)
    assert faults.requests == 1  # a 4xx is not retried
    with pytest.raises(RuntimeError, match=r"HTTP 400.*maximum context is 2048"):
        policy.sample_batch([[5] * 2100], generators=generators(1), **kw)
    # 5xx: retried max_retries times, then the server's message
    faults.permanent, faults.requests = (500, json.dumps({"error": {"message": "engine exploded"}}).encode()), 0
    retrying = RemotePolicy(policy.model, policy.tokenizer, base_url=url, model_name="tiny", backoff=0.01)
    with retrying, pytest.raises(RuntimeError, match=r"HTTP 500.*engine exploded.*3 attempt"):
        retrying.sample_batch(ctx, generators=generators(1), **kw)
    assert faults.requests == 3
    # malformed 2xx bodies: not retried
    no_logprobs = {"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]}
    text_tokens = {
        "choices": [
            {
                "index": 0,
                "text": "x",
                "finish_reason": "length",
                "logprobs": {"tokens": ["x"], "token_logprobs": [-1.0], "top_logprobs": [None], "text_offset": [0]},
            }
        ]
    }
    for body, message in ((no_logprobs, "no logprobs"), (text_tokens, "not 'token_id:N'"), ([], "not an object")):
        faults.permanent, faults.requests = (200, json.dumps(body).encode()), 0
        with pytest.raises(RuntimeError, match=message):
            policy.sample_batch(ctx, generators=generators(1), **kw)
        assert faults.requests == 1


@pytest.mark.slow
def test_a_dead_server_fails_within_the_retry_bound(policy):
    """Refused connections are retried with backoff and then fail: no attempt waits for the 60 s request timeout
    (the upper bound is a hang guard below that timeout, so a loaded machine cannot break it)."""
    with socket.socket() as sock:  # bound and kept, never listening: connections are refused and no one else gets it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1"
        with RemotePolicy(policy.model, policy.tokenizer, base_url=url, model_name="t", timeout=60.0) as dead:
            t0 = time.monotonic()
            with pytest.raises(RuntimeError, match="3 attempt"):
                dead.sample_batch(
                    contexts(policy, 2), budgets=[4, 4], temperature=1.0, stop=(), generators=generators(1, 2)
                )
            elapsed = time.monotonic() - t0
    assert 1.5 <= elapsed < 30.0  # 0.5 + 1 s of backoff (jitter x1 to x1.25), and no 60 s timeout waited out


def test_processed_logprobs_at_any_temperature():
    """A server started with logprobs_mode="processed" (vLLM's --logprobs-mode processed_logprobs) reports the
    log-probs after temperature, which is what the rollout records: any temperature works."""
    model, tokenizer = build_tiny_model(seed=0)
    with BackgroundServer(create_app(model, tokenizer, model_name="tiny", logprobs_mode="processed")) as server:
        policy = RemotePolicy(*build_tiny_model(seed=0), base_url=server.url + "/v1", logprobs_mode="processed")
        with policy:
            ctx = contexts(policy, 2)
            for temperature in (0.7, 1.3):
                out = policy.sample_batch(ctx, budgets=[6, 6], temperature=temperature, stop=(),
                                          generators=generators(1, 2))  # fmt: skip
                for context, (tokens, logprobs, _) in zip(ctx, out, strict=True):
                    expected = teacher_forced(policy.model, context, tokens, temperature)
                    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)


@pytest.mark.slow
def test_the_trainer_samples_through_a_remote_server(served, tmp_path):
    """``rollout_backend="remote"``: the reference trainer's rollouts come from the server; the server holds the same
    initial weights, so the first iteration's behaviour log-probs match the trainer's own, and later ones drift."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import train

    config = load_config("tiny", overrides={
        "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2, "max_new_tokens": 6,
        "stop": ["</answer>"], "iterations": 2, "sft_steps_per_iteration": 1, "sft_lr": 1e-2,
        "plot": False, "progress": False, "out_dir": str(tmp_path),
        "rollout_backend": "remote", "backend_kwargs": {"base_url": served[0].url + "/v1", "model_name": "tiny"},
    })  # fmt: skip
    history = train(config)["history"]
    assert history[0]["rollout_logprob_maxdiff"] < 1e-4
    assert history[1]["rollout_logprob_maxdiff"] > 1e-3  # the server's weights did not follow the SFT step
