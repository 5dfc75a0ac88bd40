"""OpenRLHF adapter, INTERFACE-LEVEL: OpenRLHF 0.11's wheel pins flash-attn (no CPU build) and deepspeed, so it is not
installed here and never imported by these tests.

``AgentGymInstance`` is driven by a copy of the documented ``MultiTurnAgentExecutor`` loop (OpenRLHF 0.11.2,
``openrlhf/utils/agent.py``): ``reset({"observation", "label"})`` -> tokenize the observation; per turn, sample
(``action_text`` keeps special tokens), ``step({"observation_text", "action_text", "label", "sampling_params"})``,
add ``rewards.item()`` to the total, tokenize ``environment_feedback`` and append it, stop on ``done``. Checked: the
returned fields and types, the per-turn rewards summing to the trajectory reward, and that the text the executor
builds is exactly the chat template of the conversation.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import agentgym  # noqa: F401
from agentgym.baselines.rollout import HFPolicy
from agentgym.envs.search_qa.agents import DemoAgent
from agentgym.integrations.openrlhf import AgentGymInstance, ChatText, dataset_rows
from agentgym.integrations.tasks import TaskRef

STEP_KEYS = {"rewards", "scores", "environment_feedback", "done", "sampling_params", "extra_logs"}


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


@pytest.fixture
def instance_cls(policy):
    cls = type("AgentInstance", (AgentGymInstance,), {"tokenizer": policy.tokenizer, "_chat": None})
    return cls


async def execute(instance_cls: type, prompt: str, label: str, generate: Any, max_length: int = 4096) -> dict:
    """The documented MultiTurnAgentExecutor loop (text observations, token-in/token-out generation)."""
    tok = instance_cls.tokenizer
    agent = instance_cls()
    observation = (await agent.reset({"observation": prompt, "label": label}))["observation"]
    tokens = tok(text=observation, add_special_tokens=False)["input_ids"]
    text, ranges, total, steps = observation, [], 0.0, []
    params = SimpleNamespace(max_tokens=None, logprobs=1)
    while max_length - len(tokens) > 0:
        action_tokens, action_text = generate(tokens)
        ranges.append((len(tokens), len(tokens) + len(action_tokens)))
        result = await agent.step(
            {"observation_text": text, "action_text": action_text, "label": label, "sampling_params": params}
        )
        steps.append(result)
        total += result["rewards"].item()
        feedback = tok(text=result["environment_feedback"], add_special_tokens=False)["input_ids"]
        text += action_text + result["environment_feedback"]
        tokens = tokens + action_tokens + feedback
        if result["done"]:
            break
    return {"reward": total, "text": text, "tokens": tokens, "ranges": ranges, "steps": steps}


def sampler(policy: HFPolicy, seed: int = 0):
    calls = [0]

    def generate(tokens):
        calls[0] += 1
        g = torch.Generator().manual_seed(seed + calls[0])
        ids, _, _ = policy.sample(tokens, max_new_tokens=10, temperature=1.0, stop=("</answer>",), generator=g)
        return ids, policy.tokenizer.decode(ids, skip_special_tokens=False)

    return generate


def test_rows_and_labels():
    rows = dataset_rows("agentgym/SearchQA-v0", [0, 7], env_kwargs={"dataset": "tiny"})
    assert [TaskRef.from_json(r["label"]).options for r in rows] == [{"task_index": 0}, {"task_index": 7}]
    assert all(isinstance(r["label"], str) and r["prompt"][0]["role"] == "user" for r in rows)


def test_sampled_episode_builds_the_chat_template_text(policy, instance_cls):
    row = dataset_rows("agentgym/SearchQA-v0", [2], env_kwargs={"dataset": "tiny", "max_turns": 3})[0]
    chat = ChatText(policy.tokenizer)
    out = asyncio.run(execute(instance_cls, chat.prompt(row["prompt"]), row["label"], sampler(policy)))
    steps = out["steps"]
    assert len(steps) == 3 and [s["done"] for s in steps] == [False, False, True]
    for s in steps:
        assert set(s) == STEP_KEYS and isinstance(s["environment_feedback"], str)
        assert isinstance(s["rewards"].item(), float) and set(s["extra_logs"]) == {"turn", "success", "env_return"}
    assert steps[-1]["environment_feedback"] == "" and steps[-1]["scores"].item() == out["reward"]
    # rebuild the conversation: the executor's text is the chat template of it, turn by turn
    ref = TaskRef.from_json(row["label"])
    env = ref.make_env()
    messages, _ = ref.reset(env)
    for (s, e), step in zip(out["ranges"], steps, strict=True):
        action, _ = chat.split_end(policy.tokenizer.decode(out["tokens"][s:e], skip_special_tokens=False))
        messages.append({"role": "assistant", "content": action})
        obs, *_ = env.step(action)
        if not step["done"]:
            messages += obs
    assert out["text"] == chat.render(messages[:-1], add_generation_prompt=True) + messages[-1]["content"]


def test_oracle_episode_rewards(policy, instance_cls):
    row = dataset_rows("agentgym/SearchQA-v0", [4], env_kwargs={"dataset": "tiny", "max_turns": 8})[0]
    ref = TaskRef.from_json(row["label"])
    actions = DemoAgent.actions(ref.reset(ref.make_env())[1]["gold"])
    end = policy.tokenizer.eos_token
    scripted = iter(actions)

    def generate(tokens):
        text = next(scripted) + end  # each turn ends with the sampled eos text
        return policy.tokenizer(text=text, add_special_tokens=False)["input_ids"], text

    out = asyncio.run(execute(instance_cls, "", row["label"], generate))
    rewards = [s["rewards"].item() for s in out["steps"]]
    assert rewards == [0.0] * (len(actions) - 1) + [1.0] and out["reward"] == 1.0
    assert out["steps"][-1]["extra_logs"] == {"turn": float(len(actions)), "success": 1.0, "env_return": 1.0}
    # a turn that ended with the eos text: the feedback starts after it (the template's "\n", then the observation)
    assert out["steps"][0]["environment_feedback"].startswith("\n<|user|>")


def test_chat_text_pieces(policy):
    chat = ChatText(policy.tokenizer)
    assert chat.closing == "<|end|>\n"
    assert chat.split_end("<answer> x </answer><|end|>") == ("<answer> x </answer>", "<|end|>")
    assert chat.split_end("abc") == ("abc", None)
    obs = [{"role": "user", "content": "hi"}]
    assert chat.feedback(obs) == "<|end|>\n<|user|>hi<|end|>\n<|assistant|>"
    assert chat.feedback(obs, ended_with="<|end|>") == "\n<|user|>hi<|end|>\n<|assistant|>"


def test_step_before_reset_and_missing_tokenizer():
    agent = type("I", (AgentGymInstance,), {"tokenizer": None, "_chat": None})()
    with pytest.raises(RuntimeError, match="reset"):
        asyncio.run(agent.step({"action_text": "x"}))
    label = dataset_rows("agentgym/SearchQA-v0", [0], env_kwargs={"dataset": "tiny"})[0]["label"]
    with pytest.raises(RuntimeError, match="tokenizer"):
        asyncio.run(agent.reset({"observation": "", "label": label}))
