"""TRL adapter against the real ``trl`` 1.16 package: a ``GRPOTrainer`` run over SearchQA(tiny) with the tiny model on
CPU through ``rollout_func``, and ``environment_factory`` with a tool env."""

from __future__ import annotations

import inspect

import pytest
import torch

trl = pytest.importorskip("trl")
pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning")

import agentgym  # noqa: E402,F401
from agentgym.integrations.tasks import TaskRef  # noqa: E402
from agentgym.integrations.trl import (  # noqa: E402
    AgentGymRollout,
    discounted_return,
    env_return,
    tool_environment,
    tool_schemas,
)
from agentgym.tools.tiny_model import build_tiny_model  # noqa: E402


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def grpo_args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        bf16=False,
    )
    return trl.GRPOConfig(**{**base, **kw})


@pytest.mark.slow
def test_grpo_trainer_runs_on_agentgym_rollouts(tmp_path):
    model, tok = build_tiny_model(seed=0)
    rollout = AgentGymRollout(
        "agentgym/SearchQA-v0",
        env_kwargs={"dataset": "tiny"},
        max_turns=2,
        max_new_tokens=8,
        stop=("</search>", "</answer>"),
    )
    seen: list[dict] = []

    def spy(completions, completion_ids, turn_rewards, turn_spans, env_return, success, task_id, **kwargs):
        seen.append(dict(ids=completion_ids, turn_rewards=turn_rewards, spans=turn_spans, task_id=task_id))
        return [0.0] * len(completions)

    def varied(completions, completion_ids, **kwargs):  # a reward that differs within groups, so gradients flow
        return [float(sum(ids) % 7) / 7 for ids in completion_ids]

    trainer = trl.GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[env_return, discounted_return(0.9), spy, varied],
        train_dataset=rollout.dataset(range(4)),
        rollout_func=rollout,
        args=grpo_args(tmp_path),
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    assert len(seen) == 2  # one rollout call per step
    assert sum(not torch.equal(before[n], p) for n, p in model.named_parameters()) > 0
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in logs)

    # the last call: what TRL got is what the rollout recorded; env_mask = 1 exactly on the sampled turns
    rollouts, last = rollout.last_rollouts, seen[-1]
    assert [r.response_ids for r in rollouts] == last["ids"]
    assert [r.turn_rewards for r in rollouts] == last["turn_rewards"]
    for r, spans in zip(rollouts, last["spans"], strict=True):
        assert [tuple(s) for s in spans] == r.turn_spans and len(r.loss_mask) == len(r.response_ids)
        mask = [0] * len(r.response_ids)
        for s, e in r.turn_spans:
            mask[s:e] = [1] * (e - s)
        assert r.loss_mask == mask and 0 in mask  # two turns with the env's tokens between them
        assert [lp < 0 for lp in r.rollout_logprobs] == [bool(m) for m in mask]
    # GRPO's groups: num_generations consecutive copies of a prompt play one task, sampling differently
    assert last["task_id"][0::2] == last["task_id"][1::2]
    assert rollouts[0].group_id == rollouts[1].group_id != rollouts[2].group_id
    # TRL counts only env_mask-1 tokens as completion tokens
    assert logs[-1]["completions/mean_length"] == pytest.approx(sum(sum(r.loss_mask) for r in rollouts) / 4)
    rollout.close()


def test_rollout_func_refuses_unknown_prompts():
    rollout = AgentGymRollout("agentgym/SearchQA-v0", env_kwargs={"dataset": "tiny"})
    rollout.rows([0])
    with pytest.raises(KeyError, match="dataset"):
        rollout([[{"role": "user", "content": "not a task"}]], trainer=None)


def test_reward_functions_fold_turn_rewards():
    assert env_return(completions=[1, 2], turn_rewards=[[0.5, 1.0], [0.0]]) == [1.5, 0.0]
    assert discounted_return(0.5)(completions=[1], turn_rewards=[[0.0, 1.0, 1.0]]) == [0.75]
    with pytest.raises(ValueError):
        discounted_return(1.5)


TINY_RESPONSE_TEMPLATE = {  # how TRL parses the tiny template's <tool_call> blocks (TRL does not know the template)
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|end\|>\s*", "content": "text"},
    },
}


def test_environment_factory_with_grpo_trainer(tmp_path):
    from datasets import Dataset
    from transformers.utils import get_json_schema

    model, tok = build_tiny_model(seed=0)
    tok.response_template = TINY_RESPONSE_TEMPLATE
    Env = tool_environment("agentgym/ToolUse-v0", env_kwargs={"world": "bank"}, tasks=5)
    rows = Env.rows(range(4))
    assert set(Env.tool_names) == set(tool_schemas(rows[0]["prompt"]))
    trainer = trl.GRPOTrainer(
        model=model,
        processing_class=tok,
        train_dataset=Dataset.from_list(rows),
        environment_factory=Env,
        args=grpo_args(tmp_path, max_steps=1),
    )
    # TRL probed the class: its public methods are the tools, and get_reward is a reward source
    assert sorted(t.__name__ for t in trainer.tools) == sorted([*Env.tool_names, "reply"])
    assert trainer.reward_func_names == [Env.__name__]
    for tool in trainer.tools:
        schema = get_json_schema(tool)["function"]
        assert schema["name"] == tool.__name__ and schema["description"]
    sig = inspect.signature(trainer.tools[0].__self__.transfer)
    assert list(sig.parameters) == ["source", "target", "amount"] and sig.parameters["amount"].annotation is float
    assert '"name": "transfer"' in tok.apply_chat_template(rows[0]["prompt"], tools=trainer.tools, tokenize=False)

    # a whole episode as TRL's tool loop plays it: reset(**row), the gold tool calls, replies; get_reward scores it
    env = trainer._environment_pool[None][0]
    ref = TaskRef.from_dict(rows[3]["agentgym"])
    info = ref.reset(ref.make_env())[1]
    assert env.reset(**rows[3]) is None
    for turn in info["gold"]["turns"]:
        for call in turn["calls"]:
            assert "Error" not in getattr(env, call["name"])(**call["arguments"])
        if turn["reply"] is not None:
            said = env.reply(message=turn["reply"])
    assert said.endswith("(The episode has ended.)") and env.done and env.get_reward() == 1.0
    assert env.list_accounts() == "The episode has ended."
    # a reset starts over; a bad call comes back as the env's error text, never an exception
    assert env.reset(**rows[0]) is None and env.get_reward() == 0.0 and not env.done
    assert env.transfer(source="nowhere", target="checking", amount=1.0).startswith("Error: no such account")


def test_tool_environment_refuses_envs_without_tools():
    with pytest.raises(ValueError, match="no functions"):
        tool_environment("agentgym/SearchQA-v0", env_kwargs={"dataset": "tiny"})
