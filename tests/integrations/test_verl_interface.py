"""verl adapter, INTERFACE-LEVEL: verl 0.9 pins transformers < 5.11 and needs a vLLM/SGLang server, so it is not
installed here and never imported by these tests.

The agent loop's ``run`` (``AgentGymLoopMixin``) is played against a stand-in for the members of verl 0.9.1's
``AgentLoopBase`` it uses: ``server_manager.generate`` (token ids in; ``token_ids`` and ``log_probs`` out) backed by the
tiny model, and the default Continuous Token builder's semantics (initial prompt = chat template with the generation
prompt; assistant tokens appended as sampled; a new message = the template's suffix after a synthetic system + user
prefix, the generation prompt fused into the last one). The outputs are checked against ``AgentLoopOutput``'s field
contract: ``response_mask`` 1 on sampled tokens and 0 on env tokens, ``response_logprobs`` aligned, per-turn rewards
and turn ends in ``extra_fields``. The estimator is checked against agentgym's own estimators.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import agentgym  # noqa: F401
from agentgym.baselines.rollout import HFPolicy
from agentgym.envs.search_qa.agents import DemoAgent
from agentgym.integrations.tasks import TaskRef
from agentgym.integrations.verl import (
    AGENT_NAME,
    AgentGymLoopMixin,
    compute_turn_advantage,
    dataset_rows,
    turn_advantages,
    turn_spans_from_mask,
    turn_token_rewards,
)
from agentgym.rewards.advantages import TurnBatch, broadcast_to_tokens, get_estimator

ENV = {"dataset": "tiny", "max_turns": 3}
SYNTHETIC = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


@dataclass
class MergeResult:  # verl.utils.tokenizer.continuous_token.MergeResult's fields
    token_ids: list[int]
    appended_token_count: int
    kind: str = "context"
    inserted_token_ids: list[int] = field(default_factory=list)
    removed_prefix_token_count: int = 0


class StandInLoopBase:
    """The ``AgentLoopBase`` members the agent loop uses, with verl 0.9.1's default Continuous Token semantics."""

    def __init__(self, tokenizer: Any, server: Any, *, response_length: int = 512, max_assistant_turns=None) -> None:
        self.tokenizer, self.server_manager = tokenizer, server
        self.rollout_config = SimpleNamespace(
            response_length=response_length, multi_turn=SimpleNamespace(max_assistant_turns=max_assistant_turns)
        )

    def _render(self, messages, generation_prompt: bool) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    async def ct_build_initial_tokens(self, messages, **kwargs) -> list[int]:
        return self._render(messages, True)

    async def ct_merge_assistant_token(self, ids, assistant_ids, mask, logprobs=None, assistant_logprobs=None):
        merged = MergeResult(list(ids) + list(assistant_ids), len(assistant_ids), "assistant")
        lp = None if logprobs is None else list(logprobs) + list(assistant_logprobs)
        return merged, list(mask) + [1] * len(assistant_ids), lp

    async def ct_merge_context_msg(self, previous, updated, ids, mask, logprobs=None, tools=None):
        assert updated[: len(previous)] == previous  # append-only
        appended = updated[len(previous) :]
        prefix = self._render(SYNTHETIC, False)
        new: list[int] = []
        for i, message in enumerate(appended):
            full = self._render([*SYNTHETIC, message], i == len(appended) - 1)
            assert full[: len(prefix)] == prefix
            new += full[len(prefix) :]
        lp = None if logprobs is None else list(logprobs) + [0.0] * len(new)
        return MergeResult(list(ids) + new, len(new)), list(mask) + [0] * len(new), lp


class Loop(AgentGymLoopMixin, StandInLoopBase):
    pass


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


class SamplingServer:
    """``server_manager.generate``: the tiny model samples (stop strings from ``sampling_params["stop"]``)."""

    def __init__(self, policy: HFPolicy, seed: int = 0, max_tokens: int = 10) -> None:
        self.policy, self.seed, self.max_tokens, self.calls = policy, seed, max_tokens, []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        g = torch.Generator().manual_seed(self.seed + len(self.calls))
        ids, lps, _ = self.policy.sample(
            prompt_ids,
            max_new_tokens=self.max_tokens,
            temperature=1.0,
            stop=sampling_params.get("stop") or (),
            generator=g,
        )
        return SimpleNamespace(token_ids=ids, log_probs=lps)


class ScriptedServer:
    """Returns fixed turns (token ids + the end token) with log-prob -1 each."""

    def __init__(self, policy: HFPolicy, actions: list[str]) -> None:
        self.policy, self.actions = policy, list(actions)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs):
        ids = [*self.policy.encode(self.actions.pop(0)), self.policy.end_token_id]
        return SimpleNamespace(token_ids=ids, log_probs=[-1.0] * len(ids))


def run(loop: Loop, row: dict) -> dict:
    kwargs = {k: v for k, v in row.items() if k != "prompt"}
    return asyncio.run(loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=row["prompt"], **kwargs))


def check_contract(out: dict, *, limit: int) -> None:
    n = len(out["response_ids"])
    assert n == len(out["response_mask"]) == len(out["response_logprobs"]) <= limit
    assert set(out["response_mask"]) <= {0, 1}
    for m, lp in zip(out["response_mask"], out["response_logprobs"], strict=True):
        assert (lp < 0) if m else (lp == 0.0)
    extra = out["extra_fields"]
    assert {"turn_rewards", "turn_ends", "task_id", "success"} <= set(extra)
    assert out["reward_score"] == pytest.approx(sum(extra["turn_rewards"]))
    scores = turn_token_rewards(extra["turn_rewards"], extra["turn_ends"], n)
    assert sum(scores) == pytest.approx(out["reward_score"])


def test_sampled_episodes_follow_the_output_contract(policy):
    rows = dataset_rows("agentgym/SearchQA-v0", [0, 5], env_kwargs=ENV, stop=["</search>", "</answer>"])
    for row in rows:
        assert row["agent_name"] == AGENT_NAME and row["extra_info"]["stop"] == ["</search>", "</answer>"]
        server = SamplingServer(policy)
        loop = Loop(policy.tokenizer, server)
        out = run(loop, row)
        check_contract(out, limit=512)
        spans = turn_spans_from_mask(out["response_mask"])
        extra = out["extra_fields"]
        assert len(spans) == len(extra["turn_rewards"]) == len(server.calls)
        assert extra["turn_ends"] == [e - 1 for _, e in spans]
        assert out["num_turns"] == 2 * len(spans)  # prompt + turns + env replies (the last turn gets none)
        # the model saw exactly the tokens it is trained on: each call's prompt is a prefix of prompt + response
        ids = out["prompt_ids"] + out["response_ids"]
        for _, prompt_ids, params in server.calls:
            assert ids[: len(prompt_ids)] == prompt_ids and params["stop"] == ["</search>", "</answer>"]
        assert len({rid for rid, _, _ in server.calls}) == 1  # one sticky session per episode
        ref = TaskRef.from_dict(row["extra_info"]["agentgym"])
        assert out["prompt_ids"] == loop._render(ref.reset(ref.make_env())[0], True)
        # env tokens between turns hold the env's observation and the next generation prompt
        (_, e0), (s1, _) = spans[:2]
        between = policy.tokenizer.convert_ids_to_tokens(out["response_ids"][e0:s1])
        assert between[0] == "<|user|>" and between[-1] == "<|assistant|>"


def test_oracle_episode_puts_its_reward_on_the_last_turn(policy):
    row = dataset_rows("agentgym/SearchQA-v0", [4], env_kwargs={"dataset": "tiny", "max_turns": 8})[0]
    ref = TaskRef.from_dict(row["extra_info"]["agentgym"])
    actions = DemoAgent.actions(ref.reset(ref.make_env())[1]["gold"])
    out = run(Loop(policy.tokenizer, ScriptedServer(policy, actions), response_length=4096), row)
    check_contract(out, limit=4096)
    extra = out["extra_fields"]
    assert extra["turn_rewards"] == [0.0] * (len(actions) - 1) + [1.0] and extra["success"] is True
    scores = turn_token_rewards(extra["turn_rewards"], extra["turn_ends"], len(out["response_ids"]))
    assert scores[-1] == 1.0 and sum(scores) == 1.0  # the final turn ends the response
    assert sum(out["response_mask"]) == sum(len(policy.encode(a)) + 1 for a in actions)


def test_limits_turns_and_response_length(policy):
    row = dataset_rows("agentgym/SearchQA-v0", [1], env_kwargs=ENV)[0]
    one = run(Loop(policy.tokenizer, SamplingServer(policy), max_assistant_turns=1), row)
    assert len(one["extra_fields"]["turn_rewards"]) == 1 and one["num_turns"] == 2
    short = run(Loop(policy.tokenizer, SamplingServer(policy), response_length=40), row)
    check_contract(short, limit=40)
    assert 0 < len(short["response_ids"]) <= 40


def test_missing_task_is_refused(policy):
    with pytest.raises(ValueError, match="extra_info"):
        asyncio.run(Loop(policy.tokenizer, SamplingServer(policy)).run({}, raw_prompt=[], extra_info={}))


def test_turn_token_rewards_keep_the_return():
    assert turn_token_rewards([1.0, 2.0], [1, 3], 5) == [0.0, 1.0, 0.0, 2.0, 0.0]
    assert turn_token_rewards([1.0, 2.0], [1, 9], 5) == [0.0, 1.0, 0.0, 0.0, 2.0]  # cut turn: on the last token
    assert turn_token_rewards([], [], 0) == []
    with pytest.raises(ValueError):
        turn_token_rewards([1.0], [], 3)


def test_turn_spans_from_mask():
    assert turn_spans_from_mask([0, 1, 1, 0, 1]) == [(1, 3), (4, 5)]
    assert turn_spans_from_mask([0, 0]) == [] and turn_spans_from_mask([]) == []


def test_turn_advantages_equal_agentgym_estimators():
    rng = np.random.default_rng(0)
    masks = np.array([[1, 1, 0, 0, 1, 1, 0, 0], [1, 0, 0, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 1, 0, 0], [0] * 8])
    rewards = np.zeros(masks.shape)
    turn_rewards = []
    for row, mask in zip(rewards, masks, strict=True):
        spans = turn_spans_from_mask(mask)
        rs = rng.normal(size=len(spans)).round(2).tolist()
        turn_rewards.append(rs)
        row[:] = turn_token_rewards(rs, [e - 1 for _, e in spans], 8) if spans else 0.0
    rewards[1, 2] += 0.5  # a reward on an env token counts for the turn before it
    turn_rewards[1][0] += 0.5
    index = ["a", "a", "b", "b"]
    for name in ("gtpo", "grpo", "rloo"):
        got = turn_advantages(rewards, masks, index, estimator=name)
        per_turn = get_estimator(name)(TurnBatch(turn_rewards[:3], group_ids=index[:3]))
        for k in range(3):
            want = broadcast_to_tokens(per_turn[k], turn_spans_from_mask(masks[k]), 8, masks[k])
            np.testing.assert_allclose(got[k], want, atol=1e-12)
        assert np.all(got[3] == 0) and np.all(got[masks == 0] == 0)


def test_compute_turn_advantage_in_verls_signature():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float32)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    index = np.array(["u", "u"], dtype=object)
    adv, ret = compute_turn_advantage(rewards, mask, index, {"agentgym_estimator": "grpo"})
    assert adv.dtype == torch.float32 and adv.shape == mask.shape and torch.equal(adv, ret)
    np.testing.assert_allclose(adv.numpy(), turn_advantages(rewards, mask, ["u", "u"], estimator="grpo"), atol=1e-6)
    assert adv[0, 0] > 0 > adv[1, 0] and adv[0, 2] == 0
    alone, _ = compute_turn_advantage(rewards, mask, None, None)  # no groups: each response alone -> 0
    assert torch.all(alone == 0)
