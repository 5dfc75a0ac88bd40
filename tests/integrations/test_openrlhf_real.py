"""OpenRLHF adapter inside the REAL ``MultiTurnAgentExecutor`` of OpenRLHF 0.11.2, where ``openrlhf.utils.agent``
imports (skipped otherwise: the wheel pins flash-attn, which has no CPU build; ``pip install --no-deps
openrlhf==0.11.2`` plus ``aiohttp``, ``sympy`` and ``pylatexenc`` is enough for this module). The vLLM engine is
replaced by the tiny model behind the engine's ``generate(token_ids, sampling_params)`` interface."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

import pytest
import torch

agent = pytest.importorskip("openrlhf.utils.agent")

import agentgym  # noqa: E402,F401
from agentgym.baselines.rollout import HFPolicy  # noqa: E402
from agentgym.envs.search_qa.agents import DemoAgent  # noqa: E402
from agentgym.integrations.openrlhf import agent_classes, dataset_rows  # noqa: E402
from agentgym.integrations.tasks import TaskRef  # noqa: E402


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


class Engine:
    """vLLM's ``generate`` as OpenRLHF calls it: token ids in; ``outputs[0]``: ids, text, finish reason, log-probs."""

    def __init__(self, policy: HFPolicy, actions: list[str] | None = None) -> None:
        self.policy, self.actions, self.calls = policy, actions, 0

    async def generate(self, token_ids, params, multi_modal_data=None):
        self.calls += 1
        if self.actions is not None:
            ids = [*self.policy.encode(self.actions.pop(0)), self.policy.end_token_id]
            lps, finish = [-1.0] * len(ids), "stop"
        else:
            g = torch.Generator().manual_seed(self.calls)
            n = min(params.max_tokens, 10)
            ids, lps, why = self.policy.sample(token_ids, max_new_tokens=n, temperature=1.0, stop=(), generator=g)
            finish = "length" if why == "length" else "stop"
        text = self.policy.tokenizer.decode(ids, skip_special_tokens=False)
        logprobs = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps, strict=True)]
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason=finish, logprobs=logprobs)]
        )


def execute(policy, row, engine, max_length=4096):
    _, executor_cls = agent_classes()
    prompt = policy.tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    params = SimpleNamespace(max_tokens=None, logprobs=1)
    run = executor_cls().execute(prompt, row["label"], params, max_length, policy.tokenizer, engine)
    return asyncio.run(run)


def test_classes_fit_openrlhfs_bases():
    instance_cls, executor_cls = agent_classes()
    assert issubclass(instance_cls, agent.AgentInstanceBase) and issubclass(executor_cls, agent.MultiTurnAgentExecutor)
    executor_cls()  # OpenRLHF builds it with no arguments


def test_sampled_and_oracle_episodes(policy):
    rows = dataset_rows("agentgym/SearchQA-v0", [2, 4], env_kwargs={"dataset": "tiny", "max_turns": 8})
    sampled = execute(policy, rows[0], Engine(policy))
    tokens, ranges = sampled["observation_tokens"], sampled["action_ranges"]
    assert len(ranges) == 8 and len(sampled["rollout_log_probs"]) == len(tokens)
    assert sampled["reward"] == 0.0 and sampled["extra_logs"]["turn"] == 8.0
    for (_, e), (s, _) in itertools.pairwise(ranges):
        between = policy.tokenizer.convert_ids_to_tokens(tokens[e:s])
        assert "<|user|>" in between and between[-1] == "<|assistant|>"

    ref = TaskRef.from_json(rows[1]["label"])
    actions = DemoAgent.actions(ref.reset(ref.make_env())[1]["gold"])
    oracle = execute(policy, rows[1], Engine(policy, list(actions)))
    assert len(oracle["action_ranges"]) == len(actions)
    assert oracle["reward"] == 1.0 and float(oracle["scores"]) == 1.0
    assert oracle["extra_logs"] == {"turn": float(len(actions)), "success": 1.0, "env_return": 1.0}
