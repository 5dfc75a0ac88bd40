"""The optional vLLM rollout back-end. Runs where ``vllm`` imports and CUDA is available; skipped otherwise."""

from __future__ import annotations

import gymnasium
import pytest
import torch

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.rollout import RolloutConfig, collect_rollouts
from agentgym.baselines.update import make_batch, score_batch
from agentgym.baselines.vllm_backend import vllm_unavailable_reason

REASON = vllm_unavailable_reason()


def test_unavailable_reason_is_explicit():
    if REASON is not None:
        assert "vllm" in REASON.lower()
    with pytest.raises(ValueError, match="rollout_backend"):
        TrainConfig(rollout_backend="sglang")


@pytest.mark.skipif(REASON is not None, reason=str(REASON))
def test_vllm_rollouts_match_the_trainer_and_follow_weight_updates(tmp_path):
    from transformers import AutoModelForCausalLM

    from agentgym.baselines.vllm_backend import VLLMPolicy
    from agentgym.tools.tiny_model import load_tokenizer, save_tiny_model

    path = save_tiny_model(tmp_path / "tiny", seed=0)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).cuda()
    policy = VLLMPolicy(
        model,
        load_tokenizer(path),
        model_path=str(path),
        dtype="float32",
        gpu_memory_utilization=0.2,
        engine_kwargs={"skip_tokenizer_init": True},
    )
    config = RolloutConfig(max_turns=2, max_new_tokens=8, stop=())

    def factory():
        return gymnasium.make("agentgym/SearchQA-v0", dataset="tiny")

    rollouts = collect_rollouts(policy, factory, [1, 2], group_size=2, config=config, sample_seed=3)
    batch = make_batch(rollouts, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(model, batch, 1.0, minibatch_size=4)
    on = batch["loss_mask"] > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-3)
    with torch.no_grad():  # new training weights reach the engine after mark_stale
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    policy.mark_stale()
    again = collect_rollouts(policy, factory, [1, 2], group_size=2, config=config, sample_seed=3)
    batch = make_batch(again, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(model, batch, 1.0, minibatch_size=4)
    on = batch["loss_mask"] > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-3)
