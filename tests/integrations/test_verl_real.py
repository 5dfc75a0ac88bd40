"""verl adapter against the REAL verl 0.9.1 package, where it is installed (skipped otherwise: verl pins transformers <
5.11, so it lives in its own environment, e.g. ``pip install verl==0.9.1 'transformers<5.11' cachetools fastapi
uvicorn`` next to agentgym). No GPU and no vLLM/SGLang server: ``server_manager.generate`` is the tiny model.

Checked: ``register()`` puts the loop in verl's agent-loop registry under an importable ``_target_`` and the estimator
in ``ADV_ESTIMATOR_REGISTRY``; the loop, built by ``hydra.utils.instantiate`` as verl's ``AgentLoopWorker`` builds it
(real ``AgentLoopBase.__init__`` and Continuous Token builder), returns ``AgentLoopOutput``s whose ``as_dict()``
``rm_scores`` hold the per-turn rewards; verl's own ``compute_advantage`` runs the ``agentgym_turn`` estimator.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
hydra = pytest.importorskip("hydra")

from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import agentgym  # noqa: E402,F401
from agentgym.baselines.rollout import HFPolicy  # noqa: E402
from agentgym.envs.search_qa.agents import DemoAgent  # noqa: E402
from agentgym.integrations import verl as agentgym_verl  # noqa: E402
from agentgym.integrations.tasks import TaskRef  # noqa: E402


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


class Server:
    def __init__(self, policy: HFPolicy, actions: list[str] | None = None) -> None:
        self.policy, self.actions, self.calls = policy, actions, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls += 1
        if self.actions is not None:  # scripted turns
            ids = [*self.policy.encode(self.actions.pop(0)), self.policy.end_token_id]
            return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))
        g = torch.Generator().manual_seed(self.calls)
        stop = sampling_params.get("stop") or ()
        ids, lps, _ = self.policy.sample(prompt_ids, max_new_tokens=12, temperature=1.0, stop=stop, generator=g)
        return TokenOutput(token_ids=ids, log_probs=lps)


def play(server, tokenizer, row, response_length=4096) -> AgentLoopOutput:
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 2048, "response_length": response_length, "multi_turn": {}}
            },
            "data": {},
        }
    )
    kwargs = {k: v for k, v in row.items() if k != "prompt"}
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def main():  # built inside the running event loop, as verl's AgentLoopWorker builds it
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry[agentgym_verl.AGENT_NAME],
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type=None,
            dataset_cls=None,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap([]),
        )
        return await loop.run(params, raw_prompt=row["prompt"], **kwargs)

    return asyncio.run(main())


def test_register(policy):
    cls = agentgym_verl.register()
    assert agentgym_verl.register() is cls  # idempotent
    assert _agent_loop_registry["agentgym"] == {"_target_": "agentgym.integrations.verl.AgentGymAgentLoop"}
    assert hydra.utils.get_class("agentgym.integrations.verl.AgentGymAgentLoop") is cls
    assert core_algos.get_adv_estimator_fn("agentgym_turn") is agentgym_verl.compute_turn_advantage


def test_agent_loop_outputs_and_estimator(policy):
    agentgym_verl.register()
    rows = agentgym_verl.dataset_rows(
        "agentgym/SearchQA-v0", [0, 4], env_kwargs={"dataset": "tiny", "max_turns": 8}, stop=["</search>", "</answer>"]
    )
    ref = TaskRef.from_dict(rows[1]["extra_info"]["agentgym"])
    actions = DemoAgent.actions(ref.reset(ref.make_env())[1]["gold"])
    outs = [
        play(Server(policy), policy.tokenizer, rows[0]),
        play(Server(policy), policy.tokenizer, rows[0], response_length=64),
        play(Server(policy, list(actions)), policy.tokenizer, rows[1]),
        play(Server(policy), policy.tokenizer, rows[1]),
    ]
    for out in outs:
        assert isinstance(out, AgentLoopOutput) and type(out).__name__ == "AgentGymLoopOutput"
        n = len(out.response_ids)
        assert n == len(out.response_mask) == len(out.response_logprobs)
        extra = out.extra_fields
        spans = agentgym_verl.turn_spans_from_mask(out.response_mask)
        assert [e - 1 for _, e in spans] == [e for e in extra["turn_ends"] if e < n]
        d = out.as_dict()
        assert d["rm_scores"].shape == d["responses"].shape == d["response_mask"].shape
        assert (
            float(d["rm_scores"].sum()) == pytest.approx(out.reward_score) == pytest.approx(sum(extra["turn_rewards"]))
        )
    oracle = outs[2]
    assert oracle.extra_fields["success"] is True and oracle.reward_score == 1.0
    assert oracle.as_dict()["rm_scores"][oracle.extra_fields["turn_ends"][-1]] == 1.0
    assert len(outs[1].response_ids) <= 64

    width = max(len(o.response_ids) for o in outs)
    scores = torch.stack(
        [torch.nn.functional.pad(o.as_dict()["rm_scores"], (0, width - len(o.response_ids))) for o in outs]
    )
    mask = torch.tensor([o.response_mask + [0] * (width - len(o.response_mask)) for o in outs])
    uid = np.array(["a", "a", "b", "b"], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask}, non_tensors={"uid": uid})
    data = compute_advantage(
        data, adv_estimator="agentgym_turn", config=OmegaConf.create({"agentgym_estimator": "gtpo"})
    )
    adv = data.batch["advantages"]
    assert adv.shape == mask.shape and torch.all(adv[mask == 0] == 0)
    want = agentgym_verl.turn_advantages(scores, mask, list(uid), estimator="gtpo")
    np.testing.assert_allclose(adv.numpy(), want, atol=1e-6)
    assert adv[2][mask[2] == 1].min() > 0 > adv[3][mask[3] == 1].max()  # the solved episode beats its sibling
