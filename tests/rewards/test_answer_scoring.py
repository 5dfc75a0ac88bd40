"""Answer-likelihood scoring: rendering with prefix-stable cuts, the one-pass 4D-mask scorer against one forward per
turn, the KV-cache chunked path, sliding-window models, and the remote scorer against a real loopback server running
the same tiny model (plus a fault-injecting ASGI middleware): no mocks.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import gymnasium as gym  # noqa: E402

import agentgym  # noqa: E402, F401 - registers the envs
from agentgym.contract.agent import Agent  # noqa: E402
from agentgym.rewards.answer_scoring import (  # noqa: E402
    LocalAnswerScorer,
    RemoteAnswerScorer,
    Suffix,
    TemplateError,
    encode_suffix,
    render_trajectory,
)
from agentgym.rewards.base import ScorerError  # noqa: E402
from agentgym.running.runner import run, run_episode  # noqa: E402
from agentgym.tools.llm import LLMClient  # noqa: E402
from agentgym.tools.openai_server import create_app  # noqa: E402
from agentgym.tools.serving import BackgroundServer  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model  # noqa: E402

ENV = "agentgym/SearchQA-v0"
ATOL = 1e-4


class SearchThenAnswer(Agent):
    """Searches the gold hop queries (cycling) ``searches`` times, then answers the gold answer."""

    name = "search_then_answer"
    privileged = True

    def __init__(self, searches: int):
        super().__init__()
        self.searches = searches
        self.turn = 0

    def reset(self, *, seed=None):
        super().reset(seed=seed)
        self.turn = 0

    def act(self, messages, info):
        gold = info["gold"]
        self.turn += 1
        if self.turn <= self.searches:
            queries = gold["oracle_queries"]
            return f"<think>step {self.turn}</think>\n<search> {queries[(self.turn - 1) % len(queries)]} </search>"
        return f"<answer> {gold['answers'][0]} </answer>"


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


@pytest.fixture(scope="module")
def trajectories():
    """Real SearchQA episodes: the built-in agents plus scripted ones of T = 1..8 turns (T = 8 is truncated)."""
    trajs = []
    for agent in ("oracle", "heuristic", "random"):
        trajs += run(ENV, agent, episodes=3, seed=0, env_kwargs={"dataset": "tiny"}, progress=False)
    env = gym.make(ENV, dataset="tiny", max_turns=8)
    for searches in range(8):
        agent = SearchThenAnswer(searches)
        trajs.append(run_episode(env, agent, seed=searches, options={"task_index": searches}, env_id=ENV))
    env.close()
    return trajs


def by_turns(trajectories, T):
    return next(t for t in trajectories if len(t.turns) == T and t.agent == "search_then_answer")


def random_suffixes(rng, n, vocab):
    """Suffixes of uneven lengths (1..12 tokens) with random scored masks (at least one scored token)."""
    out = []
    for _ in range(n):
        length = int(rng.integers(1, 13))
        scored = rng.random(length) < 0.6
        scored[int(rng.integers(length))] = True
        out.append(Suffix(tuple(int(i) for i in rng.integers(0, vocab, length)), tuple(bool(s) for s in scored)))
    return out


def max_diff(a, b):
    assert len(a) == len(b)
    assert [x.shape for x in a] == [y.shape for y in b]
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------------------------- rendering


def test_render_cuts_are_prefixes_of_the_template_rendering(tiny, trajectories):
    _, tok = tiny
    for traj in trajectories:
        r = render_trajectory(traj, tok)
        assert r.generation_prompt == "<|assistant|>"
        msgs = traj.messages
        full = tok(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)["input_ids"]
        assert list(r.ids) == full
        n0 = len(traj.initial_observation)
        assert r.cuts("observation")[0] == r.cuts("action")[0] == r.prompt_end
        for t, turn in enumerate(traj.turns):
            n_msgs = n0 + sum(1 + len(x.observation) for x in traj.turns[: t + 1])
            text = tok.apply_chat_template(msgs[:n_msgs], tokenize=False)
            assert list(r.ids[: r.cuts("observation")[t + 1]]) == tok(text, add_special_tokens=False)["input_ids"]
            text = tok.apply_chat_template(msgs[: n_msgs - len(turn.observation)], tokenize=False)
            assert list(r.ids[: r.cuts("action")[t + 1]]) == tok(text, add_special_tokens=False)["input_ids"]
            a, b = r.turns[t].action_content
            assert tok.decode(r.ids[a:b]) == tok.decode(tok(turn.action, add_special_tokens=False)["input_ids"])
            for (a, b), msg in zip(r.turns[t].observation_content, turn.observation, strict=True):
                assert r.ids[a:b] == tuple(tok(msg["content"], add_special_tokens=False)["input_ids"])


def test_render_rejects_a_template_that_is_not_prefix_stable(tiny, trajectories):
    _, tok = tiny
    original = tok.chat_template
    # Like Qwen3's template: past assistant turns lose their <think> block once a later turn exists.
    tok.chat_template = (
        "{%- for m in messages -%}{{ '<|' + m['role'] + '|>' }}"
        "{%- if m['role'] == 'assistant' and not loop.last -%}{{ m['content'].split('</think>')[-1] }}"
        "{%- else -%}{{ m['content'] }}{%- endif -%}{{ '<|end|>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
    )
    try:
        oracle = next(t for t in trajectories if t.agent == "oracle")
        with pytest.raises(TemplateError, match="prefix-stable"):
            render_trajectory(oracle, tok)
    finally:
        tok.chat_template = original


def test_encode_suffix_marks_only_the_answer_tokens(tiny):
    _, tok = tiny
    s = encode_suffix(tok, [("<|assistant|><answer> ", False), ("Trolkend Port", True), (" </answer>", False)])
    tokens = tok.convert_ids_to_tokens(list(s.ids))
    assert [t for t, m in zip(tokens, s.scored, strict=True) if m] == ["tr", "##ol", "##ken", "##d", "port"]
    with pytest.raises(ValueError, match="no token"):
        encode_suffix(tok, [("<answer>", False), ("", True)])


# ------------------------------------------------------------------------------------------- local scorer


@pytest.mark.parametrize("T", range(1, 9))
def test_single_pass_equals_one_forward_per_turn(tiny, trajectories, T):
    model, tok = tiny
    traj = by_turns(trajectories, T)
    r = render_trajectory(traj, tok)
    rng = np.random.default_rng(T)
    cuts = r.cuts("observation")[:T]  # h_0 .. h_{T-1}: T contexts
    suffixes = random_suffixes(rng, T, len(tok))
    gold = encode_suffix(tok, [("<|assistant|><answer> ", False), (traj.reset_info["gold"]["answers"][0], True)])
    cuts, suffixes = [*cuts, cuts[-1]], [*suffixes, gold]
    # a suffix that continues the trajectory is read off the trajectory's own rows
    a, b = r.turns[0].action
    cuts.append(a)
    suffixes.append(Suffix(r.ids[a:b], (False, *([True] * (b - a - 1)))))
    naive = LocalAnswerScorer(model, method="naive").logprobs(r.ids, cuts, suffixes)
    single = LocalAnswerScorer(model).logprobs(r.ids, cuts, suffixes)
    assert max_diff(single, naive) < ATOL
    assert all(np.all(np.isfinite(x)) and np.all(x <= 0) for x in single)
    if T in (1, 4, 8):  # KV-cache path, forced into several prefill and suffix chunks
        chunked = LocalAnswerScorer(model, method="cached", max_pass_tokens=97).logprobs(r.ids, cuts, suffixes)
        assert max_diff(chunked, naive) < ATOL


def test_single_pass_falls_back_to_chunks_when_too_long(tiny, trajectories):
    model, _ = tiny
    traj = by_turns(trajectories, 5)
    r = render_trajectory(traj, tiny[1])
    cuts = r.cuts()[:5]
    suffixes = random_suffixes(np.random.default_rng(0), 5, 30000)
    naive = LocalAnswerScorer(model, method="naive").logprobs(r.ids, cuts, suffixes)
    small = LocalAnswerScorer(model, max_pass_tokens=len(r.ids) // 3).logprobs(r.ids, cuts, suffixes)
    assert max_diff(small, naive) < ATOL


def test_eager_attention_uses_an_additive_mask(tiny, trajectories):
    model, tok = tiny
    traj = by_turns(trajectories, 4)
    r = render_trajectory(traj, tok)
    cuts, suffixes = r.cuts()[:4], random_suffixes(np.random.default_rng(1), 4, len(tok))
    naive = LocalAnswerScorer(model, method="naive").logprobs(r.ids, cuts, suffixes)
    model.set_attn_implementation("eager")
    try:
        scorer = LocalAnswerScorer(model)
        assert scorer.attn_implementation == "eager"
        assert max_diff(scorer.logprobs(r.ids, cuts, suffixes), naive) < ATOL
    finally:
        model.set_attn_implementation("sdpa")


def test_sliding_window_layers_get_a_windowed_mask():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=500,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=1,
    )
    assert "sliding_attention" in config.layer_types
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    rng = np.random.default_rng(0)
    prefix = [int(i) for i in rng.integers(0, 500, 60)]
    cuts = [5, 20, 40, 59, 30]
    suffixes = [*random_suffixes(rng, 4, 500), Suffix(tuple(prefix[30:50]), (False, *([True] * 19)))]
    naive = LocalAnswerScorer(model, method="naive").logprobs(prefix, cuts, suffixes)
    assert max_diff(LocalAnswerScorer(model).logprobs(prefix, cuts, suffixes), naive) < ATOL
    cached = LocalAnswerScorer(model, method="cached", max_pass_tokens=16).logprobs(prefix, cuts, suffixes)
    assert max_diff(cached, naive) < ATOL


def test_invalid_requests_raise(tiny):
    model, _ = tiny
    scorer = LocalAnswerScorer(model)
    s = Suffix((5, 6), (True, True))
    with pytest.raises(ValueError, match="outside"):
        scorer.logprobs([1, 2, 3], [4], [s])
    with pytest.raises(ValueError, match="cut 0"):
        scorer.logprobs([1, 2, 3], [0], [s])
    with pytest.raises(ValueError, match="cut points"):
        scorer.logprobs([1, 2, 3], [1, 2], [s])
    with pytest.raises(ValueError, match="no token"):
        scorer.logprobs([1, 2, 3], [1], [Suffix((5,), (False,))])
    with pytest.raises(ValueError, match="method"):
        LocalAnswerScorer(model, method="fast")
    assert scorer.logprobs([1, 2, 3], [], []) == []


# ------------------------------------------------------------------------------------------- remote scorer


class FaultInjector:
    """ASGI middleware: answers the next ``fail`` completions requests with HTTP ``status`` (0 = pass through)."""

    def __init__(self, app):
        self.app = app
        self.fail = 0
        self.status = 500
        self.requests = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith("/completions"):
            self.requests += 1
            if self.fail:
                self.fail -= 1
                body = json.dumps({"error": {"message": "injected failure", "code": self.status}}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": self.status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def server(tiny):
    app = FaultInjector(create_app(*tiny, model_name="tiny"))
    with BackgroundServer(app) as srv:
        srv.faults = app
        yield srv


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "max_tokens"), [("prompt_logprobs", 0), ("echo", 1)])
def test_remote_scorer_agrees_with_local(tiny, trajectories, server, mode, max_tokens):
    model, tok = tiny
    traj = by_turns(trajectories, 4)
    r = render_trajectory(traj, tok)
    cuts = r.cuts()[:4]
    suffixes = random_suffixes(np.random.default_rng(2), 4, len(tok))
    a, b = r.turns[1].action_content
    cuts.append(r.turns[1].action[0])
    suffixes.append(Suffix(r.ids[r.turns[1].action[0] : b], tuple(i >= a for i in range(r.turns[1].action[0], b))))
    local = LocalAnswerScorer(model).logprobs(r.ids, cuts, suffixes)
    url = server.url + "/v1"
    with RemoteAnswerScorer(url, "tiny", tokenizer=tok, mode=mode, max_tokens=max_tokens, max_workers=4) as remote:
        before = server.faults.requests
        got = remote.logprobs(r.ids, cuts, suffixes)
        assert server.faults.requests - before == 5  # 4 appended suffixes + 1 prompt serving the continuation
        many = remote.logprobs_many([(r.ids, cuts[:2], suffixes[:2]), (r.ids, [], [])])
    assert max_diff(got, local) < ATOL
    assert max_diff(many[0], local[:2]) < ATOL and many[1] == []


def test_remote_failure_raises_never_zero(tiny, server):
    _, tok = tiny
    ids = list(range(1000, 1040))
    suffixes = [Suffix((7, 8, 9), (False, True, True))] * 3
    client = LLMClient(server.url + "/v1", model="tiny", max_retries=0)
    scorer = RemoteAnswerScorer(client, tokenizer=tok)
    server.faults.fail = 1
    with pytest.raises(ScorerError, match="HTTP 500"):
        scorer.logprobs(ids, [10, 20, 30], suffixes)
    server.faults.fail = 0
    marked = RemoteAnswerScorer(client, tokenizer=tok, on_error="mark", max_workers=1)
    server.faults.fail = 1  # the first of three calls fails
    out = marked.logprobs(ids, [10, 20, 30], suffixes)
    server.faults.fail = 0
    assert np.isnan(out[0]).all() and out[0].shape == (2,)
    assert np.isfinite(out[1]).all() and np.isfinite(out[2]).all()
    client.close()


def test_remote_failure_when_the_server_is_gone(tiny):
    model, tok = tiny
    app = create_app(model, tok, model_name="tiny")
    srv = BackgroundServer(app).start()
    url = srv.url + "/v1"
    srv.stop()
    suffixes = [Suffix((7, 8), (True, True))] * 2
    opts = {"max_retries": 0, "timeout": 5}
    with RemoteAnswerScorer(url, "tiny", tokenizer=tok, client_kwargs=opts) as scorer, pytest.raises(ScorerError):
        scorer.logprobs([1, 2, 3, 4], [1, 3], suffixes)
    with RemoteAnswerScorer(url, "tiny", tokenizer=tok, on_error="mark", client_kwargs=opts) as scorer:
        out = scorer.logprobs([1, 2, 3, 4], [1, 3], suffixes)
    assert all(np.isnan(x).all() and x.shape == (2,) for x in out)
