"""Model agents in both tool-call formats: the conversions (agentgym.agents.tool_calls), the tiny chat template with
tools, the server's Hermes tool-call parser, and OpenAIAgent / HFAgent playing ToolUse-v0 natively (real tiny model,
real uvicorn server on loopback)."""

import json

import pytest

from agentgym.agents.tool_calls import calls_message, listed_tools, to_openai_messages
from agentgym.envs.tool_use.env import ToolUseEnv

CALL = {"name": "get_balance", "arguments": {"account": "checking"}}


def hermes(*calls, before=""):
    return before + "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


def test_listed_tools_reads_every_tools_block_and_later_schemas_win():
    env = ToolUseEnv(world="bank", variant="miss_func")
    obs, info = env.reset(options={"task_index": 3})
    held = info["gold"]["hold"]["function"]
    names = [t["function"]["name"] for t in listed_tools(obs)]
    assert held not in names and names == [n for n in env.world.schemas() if n != held]
    enabled = {"role": "user", "content": f"Enabled:\n<tools>\n{json.dumps(env.world.schemas()[held])}\n</tools>"}
    assert [t["function"]["name"] for t in listed_tools([*obs, enabled])] == [*names, held]
    as_list = {"role": "system", "content": f"<tools>{json.dumps(list(env.world.schemas().values()))}</tools>"}
    assert len(listed_tools([as_list])) == len(env.world.schemas())
    assert listed_tools([{"role": "tool", "content": "<tools>{}</tools>"}, {"role": "user", "content": "hi"}]) == []


def test_to_openai_messages_pairs_calls_and_results_by_id():
    history = [
        {"role": "user", "content": "Check it."},
        {
            "role": "assistant",
            "content": hermes(CALL, {"name": "list_accounts", "arguments": {}}, before="Let me look. "),
        },
        {"role": "tool", "name": "get_balance", "content": "12.0"},
        {"role": "tool", "name": "list_accounts", "content": "[]"},
        {"role": "assistant", "content": "It holds 12.00."},
        {"role": "assistant", "content": '<tool_call>{"name": "x", "arguments": {</tool_call>'},  # unparseable: kept
    ]
    out = to_openai_messages(history)
    assert out[0] == history[0] and out[4] == history[4] and out[5] == history[5]
    assistant = out[1]
    assert assistant["content"] == "Let me look." and [c["function"]["name"] for c in assistant["tool_calls"]] == [
        "get_balance", "list_accounts"]  # fmt: skip
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == CALL["arguments"]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(ids)) == 2 and [out[2]["tool_call_id"], out[3]["tool_call_id"]] == ids
    assert to_openai_messages(history) == out  # deterministic ids
    # An OpenAI-format turn keeps its own ids; results that carry one keep it.
    message = json.loads(calls_message(hermes(CALL)))
    turn = [{"role": "assistant", "content": json.dumps(message)},
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "1"}]  # fmt: skip
    native = to_openai_messages(turn)
    assert native[0]["tool_calls"] == message["tool_calls"] and native[1] == turn[1]


def test_calls_message_is_an_action_tool_envs_accept_like_the_hermes_text():
    """Every gold turn of 20 calendar tasks, played as Hermes text in one env and as the OpenAI message
    ``calls_message`` makes of it in another: same tool results, same world, ids echoed."""
    for index in range(20):
        text_env, native_env = ToolUseEnv(world="calendar"), ToolUseEnv(world="calendar")
        _, info = text_env.reset(options={"task_index": index})
        native_env.reset(options={"task_index": index})
        for turn in info["gold"]["turns"]:
            action = hermes(*turn["calls"]) if turn["calls"] else turn["reply"]
            native = calls_message(action)
            assert (native is None) == (not turn["calls"])
            o1, *_, i1 = text_env.step(action)
            o2, *_, i2 = native_env.step(native or action)
            assert [m["content"] for m in o1] == [m["content"] for m in o2]
            if native is not None:
                assert [m["tool_call_id"] for m in o2] == [c["id"] for c in json.loads(native)["tool_calls"]]
            assert i1["action_valid"] and i2["action_valid"]
            assert text_env.world.state() == native_env.world.state()
        assert i1["success"] and i2["success"]


# ---------------------------------------------------------------------------- real tiny model and server
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from agentgym.agents.hf_agent import HFAgent  # noqa: E402
from agentgym.agents.openai_agent import OpenAIAgent  # noqa: E402
from agentgym.tools.openai_server import create_app  # noqa: E402
from agentgym.tools.serving import BackgroundServer  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model, build_tiny_tokenizer, save_tiny_model  # noqa: E402


def test_tiny_template_renders_tools_and_structured_calls():
    tok = build_tiny_tokenizer()
    msgs = to_openai_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": hermes(CALL)},
                               {"role": "tool", "content": "12.0"}])  # fmt: skip
    schema = listed_tools(ToolUseEnv(world="bank").reset()[0])
    text = tok.apply_chat_template(msgs, tools=schema, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|system|><tools>\n") and text.count('"type": "function"') == len(schema)
    assert json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0]) == CALL
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert plain == "<|user|>hi<|end|>\n<|assistant|>"  # nothing changes without tools


CONTEXT = 8192  # a tool list costs ~1,300-1,800 tokens of the tiny model's WordPiece vocabulary


@pytest.fixture(scope="module")
def tool_server():
    model, tokenizer = build_tiny_model(seed=0, max_position_embeddings=CONTEXT)
    with BackgroundServer(create_app(model, tokenizer, model_name="tiny", tool_call_parser="hermes")) as srv:
        yield srv


def test_create_app_refuses_an_unknown_tool_call_parser():
    model, tokenizer = build_tiny_model(seed=0)
    with pytest.raises(ValueError, match="tool_call_parser"):
        create_app(model, tokenizer, tool_call_parser="mistral")


@pytest.mark.parametrize("tool_format", ["text", "native"])
def test_openai_and_hf_agents_play_tool_use_alike_in_both_formats(tool_server, tmp_path, tool_format):
    """Greedy OpenAIAgent (through the server) and HFAgent (in process) give the same actions turn after turn, in
    either format; native requests carry the listed tools (more prompt tokens than the same text request)."""
    hf = HFAgent(save_tiny_model(tmp_path / "m", seed=0, max_position_embeddings=CONTEXT), max_new_tokens=24,
                 tool_format=tool_format)  # fmt: skip
    api = OpenAIAgent(tool_server.url + "/v1", "tiny", api_key_env=None, max_tokens=24, tool_format=tool_format)
    env = ToolUseEnv(world="bank", max_turns=3)
    obs, info = env.reset(options={"task_index": 1})
    messages = list(obs)
    for agent in (hf, api):
        agent.reset(seed=0)
    done = False
    while not done:
        a, b = hf.act(messages, info), api.act(messages, info)
        assert a == b
        obs, _, terminated, truncated, info = env.step(a)
        messages += [{"role": "assistant", "content": a}, *obs]
        done = terminated or truncated
    text = OpenAIAgent(tool_server.url + "/v1", "tiny", api_key_env=None, max_tokens=1)
    text.act(messages, {})
    native = OpenAIAgent(tool_server.url + "/v1", "tiny", api_key_env=None, max_tokens=1, tool_format="native")
    native.act(messages, {})
    # the schemas travel as `tools` instead of in the text: the prompt holds them once either way
    assert abs(native.last_result.usage["prompt_tokens"] - text.last_result.usage["prompt_tokens"]) < 100
    for agent in (hf, api, text, native):
        agent.close()


def test_native_runs_through_the_runner_and_replay(tool_server, tmp_path):
    from agentgym.cli import main
    from agentgym.contract.trajectory import read_trajectories
    from agentgym.running.replay import replay_file

    out = tmp_path / "run"
    args = ["run", "agentgym/ToolUse-v0", "--agent", "openai", "--episodes", "3", "--out", str(out), "--quiet",
            "--env-arg", "max_turns=3", "--agent-arg", f"base_url={tool_server.url}/v1", "--agent-arg", "model=tiny",
            "--agent-arg", "api_key_env=null", "--agent-arg", "max_tokens=16", "--agent-arg", "temperature=1.0",
            "--agent-arg", "tool_format=native"]  # fmt: skip
    assert main(args) == 0
    trajs = list(read_trajectories(out / "trajectories.jsonl"))
    assert len(trajs) == 3 and all(t.error is None and t.done and 1 <= len(t.turns) <= 3 for t in trajs)
    assert all(r.ok for r in replay_file(out / "trajectories.jsonl"))


def test_agents_refuse_an_unknown_tool_format(tmp_path):
    with pytest.raises(ValueError, match="tool_format"):
        OpenAIAgent("http://127.0.0.1:9/v1", "tiny", api_key_env=None, tool_format="xml")
    model, tok = build_tiny_model(seed=0)
    with pytest.raises(ValueError, match="tool_format"):
        HFAgent(model=model, tokenizer=tok, tool_format="xml")
