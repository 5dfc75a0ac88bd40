"""OpenAIAgent (through a real uvicorn server on the tiny model), HFAgent (on a saved tiny model dir) and the tiny
model factory. No mocks: every model call runs the real tiny Qwen2."""

import hashlib
import socket

import pytest

from agentgym.agents.openai_agent import AgentError, OpenAIAgent, restore_stop
from agentgym.tools.llm import LLMConnectionError, LLMHTTPError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentgym.agents.hf_agent import HFAgent  # noqa: E402
from agentgym.tools.openai_server import create_app  # noqa: E402
from agentgym.tools.serving import BackgroundServer  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model, load_tokenizer, save_tiny_model  # noqa: E402

CONVERSATION = [
    {"role": "user", "content": "Question: which company did the founder of Ovra Films work for?", "turn": 0},
]
SECOND_TURN = [
    *CONVERSATION,
    {"role": "assistant", "content": "<search> founder of ovra films </search>"},
    {"role": "user", "content": "<information> Doc 1(Title: Ovra Films) ... </information>"},
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def server():
    model, tokenizer = build_tiny_model(seed=0)
    with BackgroundServer(create_app(model, tokenizer, model_name="tiny")) as srv:
        yield srv


@pytest.fixture(scope="module")
def hf_agent(tiny_dir):
    agent = HFAgent(tiny_dir, max_new_tokens=16)
    yield agent
    agent.close()


def openai_agent(server, **kw):
    kw.setdefault("max_tokens", 16)
    return OpenAIAgent(server.url + "/v1", "tiny", api_key_env=None, **kw)


def stop_word(text: str) -> str:
    return [w for w in text.split() if w.isalpha() and len(w) >= 3][3]


# ---------------------------------------------------------------------------- tiny model


@pytest.mark.slow
def test_tiny_model_is_deterministic_and_loads_from_disk(tmp_path, tiny_dir):
    digest = lambda d: hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
    again = save_tiny_model(tmp_path / "again", seed=0)
    other = save_tiny_model(tmp_path / "other", seed=1)
    assert digest(again) == digest(tiny_dir) != digest(other)

    from transformers import AutoModelForCausalLM

    built, built_tok = build_tiny_model(seed=0)
    assert 3_500_000 < sum(p.numel() for p in built.parameters()) < 4_500_000
    loaded = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    tok = load_tokenizer(tiny_dir)
    text = tok.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|assistant|>") and "<|user|>" in text
    ids = tok(text)["input_ids"]
    assert ids == built_tok(text)["input_ids"]
    assert tok.eos_token == "<|end|>" and tok.eos_token_id == loaded.generation_config.eos_token_id
    assert tok.convert_ids_to_tokens(ids[:1]) == ["<|user|>"]  # no [CLS]/[SEP] around encodings
    with torch.no_grad():
        assert torch.equal(loaded(torch.tensor([ids])).logits, built(torch.tensor([ids])).logits)


# ---------------------------------------------------------------------------- OpenAIAgent


def test_openai_agent_matches_hf_agent_greedy(server, hf_agent):
    agent = openai_agent(server)
    for conversation in (CONVERSATION, SECOND_TURN):
        hf_agent.reset(seed=0)
        agent.reset(seed=0)
        text = agent.act(conversation, {})
        assert text and text == hf_agent.act(conversation, {})
        assert agent.last_result.finish_reason == "length"
    agent.close()


def test_system_prompt_is_prepended_once(server, tiny_dir):
    system = "Answer with <answer> tags."
    agent = openai_agent(server, system_prompt=system)
    hf = HFAgent(tiny_dir, max_new_tokens=16, system_prompt=system)
    with_prompt = agent.act(CONVERSATION, {})
    assert with_prompt == hf.act(CONVERSATION, {})
    assert with_prompt == openai_agent(server).act([{"role": "system", "content": system}, *CONVERSATION], {})
    assert with_prompt != openai_agent(server).act(CONVERSATION, {})
    # an existing system message wins
    assert agent.act([{"role": "system", "content": "x"}, *CONVERSATION], {}) == openai_agent(server).act(
        [{"role": "system", "content": "x"}, *CONVERSATION], {}
    )


def test_openai_agent_seeded_episodes_replay(server):
    agent = openai_agent(server, temperature=1.0)

    def episode(seed):
        agent.reset(seed=seed)
        return [agent.act(CONVERSATION, {}), agent.act(CONVERSATION, {})]

    first = episode(3)
    assert first == episode(3)
    assert first != episode(4)
    assert first[0] != first[1]  # each turn draws its own seed from the episode's RNG


def test_openai_agent_reappends_the_stop_string_the_server_removed(server):
    plain = openai_agent(server, temperature=1.0, max_tokens=24)
    plain.reset(seed=11)
    full = plain.act(CONVERSATION, {})
    word = stop_word(full)
    agent = openai_agent(server, temperature=1.0, max_tokens=24, stop=["</answer>", word])
    agent.reset(seed=11)
    text = agent.act(CONVERSATION, {})
    assert text == full[: full.index(word) + len(word)]
    assert agent.last_result.stop_reason == word and not agent.last_result.text.endswith(word)


def test_restore_stop_without_a_server_report():
    stops = ["</search>", "</answer>"]
    assert restore_stop("<search> ovra films", stops, finish_reason="stop") == "<search> ovra films</search>"
    assert restore_stop("think <answer>Mira", stops, finish_reason="stop") == "think <answer>Mira</answer>"
    assert restore_stop('<search k="1">x', stops, finish_reason="stop") == '<search k="1">x</search>'
    # nothing open, or a truncation by length, or appending disabled: unchanged
    assert restore_stop("<search>a</search> done", stops, finish_reason="stop") == "<search>a</search> done"
    assert restore_stop("<search> ovra", stops, finish_reason="length") == "<search> ovra"
    assert restore_stop("<search> ovra", stops, finish_reason="stop", append_stop=False) == "<search> ovra"
    # the server said which stop matched (vLLM): trust it, including "eos, nothing to add"
    reported = {"finish_reason": "stop", "stop_reason_reported": True}
    assert restore_stop("<search> x", stops, stop_reason="</answer>", **reported) == "<search> x</answer>"
    assert restore_stop("<search> x", stops, stop_reason=None, **reported) == "<search> x"
    assert restore_stop("<search> x", stops, stop_reason=151645, **reported) == "<search> x"


def test_openai_agent_errors_become_agent_errors(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        agent = OpenAIAgent(f"http://127.0.0.1:{s.getsockname()[1]}/v1", "tiny", api_key_env=None, max_retries=0)
        with pytest.raises(AgentError) as info:
            agent.act(CONVERSATION, {})
    assert isinstance(info.value.__cause__, LLMConnectionError)
    too_long = openai_agent(server, max_tokens=10**6)
    with pytest.raises(AgentError, match="max_tokens") as info:
        too_long.act(CONVERSATION, {})
    assert isinstance(info.value.__cause__, LLMHTTPError) and info.value.__cause__.status == 400


# ---------------------------------------------------------------------------- HFAgent


def test_hf_agent_seeded_sampling_and_stop_strings(tiny_dir):
    agent = HFAgent(tiny_dir, temperature=1.0, max_new_tokens=24)
    agent.reset(seed=5)
    full = agent.act(CONVERSATION, {})
    second = agent.act(CONVERSATION, {})
    agent.reset(seed=5)
    assert agent.act(CONVERSATION, {}) == full
    assert second != full  # the episode's generator moves on
    agent.reset(seed=6)
    assert agent.act(CONVERSATION, {}) != full

    word = stop_word(full)
    stopping = HFAgent(tiny_dir, temperature=1.0, max_new_tokens=24, stop=["</answer>", word])
    stopping.reset(seed=5)
    text = stopping.act(CONVERSATION, {})
    assert text == full[: full.index(word) + len(word)]  # stops at and includes the stop string
    gen = stopping.last_generation
    assert gen.finish_reason == "stop" and gen.stop_reason == word and len(gen.logprobs) == len(gen.token_ids)


def test_hf_agent_from_objects_and_argument_checks():
    model, tokenizer = build_tiny_model(seed=0)
    agent = HFAgent(model=model, tokenizer=tokenizer, max_new_tokens=4)
    assert agent.last_generation is None
    assert agent.act(CONVERSATION, {})
    assert len(agent.last_generation.token_ids) == 4
    with pytest.raises(ValueError):
        HFAgent()
    with pytest.raises(ValueError):
        HFAgent(model=model)
    with pytest.raises(AgentError, match="content"):
        agent.act([{"role": "user", "content": 5}], {})


def test_openai_agent_plays_searchqa_end_to_end_through_the_runner(server, tmp_path):
    """`agentgym run ... --agent openai` against a real server: trajectories are complete, the model's
    (random) text is handled by the env's parser, and the same seeds replay identically."""
    from agentgym.cli import main
    from agentgym.contract.trajectory import read_trajectories
    from agentgym.running.replay import replay_file

    out = tmp_path / "run"
    args = ["run", "agentgym/SearchQA-v0", "--agent", "openai", "--episodes", "3", "--out", str(out), "--quiet",
            "--env-arg", "dataset=tiny", "--env-arg", "max_turns=2", "--agent-arg", f"base_url={server.url}/v1",
            "--agent-arg", "model=tiny", "--agent-arg", "api_key_env=null", "--agent-arg", "max_tokens=12",
            "--agent-arg", "temperature=1.0"]  # fmt: skip
    assert main(args) == 0
    trajs = list(read_trajectories(out / "trajectories.jsonl"))
    assert len(trajs) == 3 and all(t.error is None and t.done for t in trajs)
    assert all(t.agent == "openai" and t.turns for t in trajs)
    assert all(r.ok for r in replay_file(out / "trajectories.jsonl"))
