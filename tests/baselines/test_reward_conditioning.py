"""RC-GRPO (baselines/reward_conditioning.py): both tokens in every group, the token in the prompt and never in the
loss, a policy that ignores the token trains exactly as plain GRPO, the SFT buckets, the metrics, the trainer."""

from __future__ import annotations

import dataclasses
import json

import gymnasium
import numpy as np
import pytest
import torch

from agentgym.baselines import reward_conditioning as rc
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import EnvMaker, compute_advantages
from agentgym.baselines.reward_conditioning import (
    HIGH,
    LOW,
    MASKED_LOGIT,
    RewardTokenPrompt,
    add_reward_tokens,
    condition_messages,
    condition_metrics,
    conditioned_rollouts,
    conditioned_sft_step,
    group_tokens,
    reward_token_ids,
    sft_examples,
    sft_step_on,
)
from agentgym.baselines.rollout import HFPolicy, Rollout, collect_rollouts
from agentgym.baselines.trainer import evaluate, setup, train
from agentgym.baselines.warmup import sft_step
from agentgym.rewards.catalogue import collect
from agentgym.rewards.papers import cite
from agentgym.running.runner import run
from agentgym.tools.tiny_model import build_tiny_model

CHAIN = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2, "max_new_tokens": 6,
         "stop": ["</answer>"], "batch_tasks": 3, "group_size": 4, "kl_coef": 0.0, "plot": False,
         "progress": False}  # fmt: skip


def _config(**over) -> TrainConfig:
    return TrainConfig(**{**CHAIN, "reward_conditioning": True, **over})


def test_every_group_holds_both_tokens():
    assert group_tokens(4) == ["high", "high", "low", "low"]
    assert group_tokens(5) == ["high"] * 3 + ["low"] * 2  # round(2.5) = 3: halves round up
    assert group_tokens(4, rc_high_share=0.1) == ["high", "low", "low", "low"]  # at least one of each
    assert group_tokens(4, rc_high_share=0.9) == ["high", "high", "high", "low"]
    for g in range(2, 9):
        for share in (0.01, 0.3, 0.5, 0.7, 0.99):
            assert set(group_tokens(g, share)) == {"high", "low"}
    with pytest.raises(ValueError, match="group_size >= 2"):
        group_tokens(1)
    with pytest.raises(ValueError, match="rc_high_share"):
        group_tokens(4, rc_high_share=1.0)
    with pytest.raises(ValueError, match="reward_conditioning needs"):
        _config(group_size=1)
    with pytest.raises(ValueError, match="reward_conditioning needs"):
        _config(rc_high_share=0.0)
    with pytest.raises(ValueError, match=r"cannot run with rollout_backend 'remote'$"):
        _config(rollout_backend="remote")


def test_reward_tokens_join_the_vocabulary_deterministically_and_are_never_sampled():
    model, tok = build_tiny_model(seed=0)
    vocab = len(tok)
    ids = add_reward_tokens(model, tok)
    assert ids == [vocab, vocab + 1] == reward_token_ids(tok)
    assert model.get_input_embeddings().weight.shape[0] == vocab + 2
    assert add_reward_tokens(model, tok) == ids and len(tok) == vocab + 2  # again: nothing added
    other, other_tok = build_tiny_model(seed=0)
    add_reward_tokens(other, other_tok)
    emb, emb2 = model.get_input_embeddings().weight, other.get_input_embeddings().weight
    assert torch.equal(emb[ids], emb2[ids]) and not torch.equal(emb[ids[0]], emb[ids[1]])
    # mean +- s u: the two rows are symmetric about the old rows' mean
    assert torch.allclose((emb[ids[0]] + emb[ids[1]]) / 2, emb[:vocab].mean(0), atol=1e-6)
    logits = model(torch.tensor([[ids[0], 5, 6]])).logits
    assert (logits[0, :, ids] == MASKED_LOGIT).all() and logits[0, :, :vocab].abs().max() < 100
    prompt = HFPolicy(model, tok).prompt_ids(condition_messages([{"role": "user", "content": "go"}], "low"))
    assert prompt.count(ids[1]) == 1 and ids[0] not in prompt


def test_the_token_opens_the_first_user_message():
    msgs = [{"role": "system", "content": "tools"}, {"role": "user", "content": "Book it."}]
    out = condition_messages(msgs, "low")
    assert out == [{"role": "system", "content": "tools"}, {"role": "user", "content": f"{LOW}\nBook it."}]
    assert msgs[1]["content"] == "Book it."  # a copy
    with pytest.raises(ValueError, match="condition"):
        condition_messages(msgs, "medium")


def test_wrapper_defaults_to_high_and_takes_a_reset_option():
    env = RewardTokenPrompt(EnvMaker.of(_config())())
    obs, info = env.reset(seed=3)
    assert obs[0]["content"].startswith(HIGH + "\n") and info["reward_token"] == "high"
    obs, info = env.reset(seed=3, options={"reward_token": "low"})
    assert obs[0]["content"].startswith(LOW + "\n") and info["reward_token"] == "low"
    plain, _ = EnvMaker.of(_config())().reset(seed=3)
    assert obs[0]["content"] == f"{LOW}\n{plain[0]['content']}"


def test_conditioned_batch_token_in_prompt_never_in_loss(one_thread):
    config = _config()
    state = setup(config)
    rollouts = conditioned_rollouts(state, config, [11, 12, 13], sample_seed=5, group_offset=0)
    ids = reward_token_ids(state.tokenizer)
    assert len(rollouts) == 12
    for g in range(3):
        members = [r for r in rollouts if r.group_id == g]
        assert [r.reset_info["reward_token"] for r in members] == ["high", "high", "low", "low"]
    for r in rollouts:
        want = ids[0] if r.reset_info["reward_token"] == "high" else ids[1]
        assert r.prompt_ids.count(want) == 1 and not set(ids) & set(r.response_ids)
        assert all(m == 0 for t, m in zip(r.response_ids, r.loss_mask, strict=True) if t in ids)
    state.envs.append(EnvMaker.of(config)())  # an env made elsewhere (the critic warm-up's) joins wrapped
    assert len(conditioned_rollouts(state, config, [11, 12, 13, 14], sample_seed=5, group_offset=0)) == 16
    assert all(isinstance(e, RewardTokenPrompt) for e in state.envs)
    metrics = condition_metrics(rollouts)
    assert set(metrics) == {"rc_high_reward", "rc_high_success", "rc_low_reward", "rc_low_success",
                            "rc_zero_std_group_frac"}  # fmt: skip
    state.close()


class IgnoringPolicy(HFPolicy):
    """The tiny model that never sees the reward tokens: they are cut from every context before it samples."""

    def __init__(self, model, tokenizer, ids):
        super().__init__(model, tokenizer)
        self.ids = set(ids)

    def sample_batch(self, contexts, **kwargs):
        return super().sample_batch([[t for t in c if t not in self.ids] for c in contexts], **kwargs)


def _blind_and_plain(config, state):
    ids = reward_token_ids(state.tokenizer)
    blind = dataclasses.replace(state, policy=IgnoringPolicy(state.model, state.tokenizer, ids), envs=[])
    cond = conditioned_rollouts(blind, config, [21, 22, 23], sample_seed=9, group_offset=0)
    plain = collect_rollouts(state.policy, EnvMaker.of(config), [21, 22, 23], group_size=4,
                             config=config.rollout_config, sample_seed=9)  # fmt: skip
    assert [r.response_ids for r in cond] == [r.response_ids for r in plain]
    assert [r.turn_rewards for r in cond] == [r.turn_rewards for r in plain]
    for a, b in zip(compute_advantages(cond, config)[0], compute_advantages(plain, config)[0], strict=True):
        np.testing.assert_array_equal(a, b)
    blind.close()
    return plain


def test_a_policy_that_ignores_the_token_samples_the_plain_batch(one_thread):
    """Same task seeds and sampling seeds: the token-blind policy samples the plain run's tokens, rollout by
    rollout (the untrained model: every return 0)."""
    config = _config()
    state = setup(config)
    _blind_and_plain(config, state)
    state.close()


@pytest.mark.slow
def test_a_policy_that_ignores_the_token_is_plain_grpo(one_thread):
    """After 80 SFT steps on the oracle some episodes succeed: the rewards and GRPO's advantages of the token-blind
    policy's conditioned batch equal the plain batch's, rollout by rollout."""
    config = _config(sft_lr=3e-3)
    state = setup(config)
    oracle_only = dataclasses.replace(config, reward_conditioning=False)  # SFT on the oracle's demonstrations
    for k in range(80):
        sft_step(state, oracle_only, 0, k)
    plain = _blind_and_plain(config, state)
    assert len({r.outcome for r in plain}) > 1  # some advantages are not 0
    state.close()


def test_sft_examples_bucket_by_outcome(one_thread):
    """Chain-v0 at H=2: the oracle's episodes return 1 (high), and the random agent's that fail return 0 (low)."""
    model, tok = build_tiny_model(seed=0)
    ids = add_reward_tokens(model, tok)
    policy = HFPolicy(model, tok)
    kw = {"horizon": 2}
    trajs = [*run("agentgym/Chain-v0", "oracle", 4, seed=0, env_kwargs=kw, progress=False),
             *run("agentgym/Chain-v0", "random", 8, seed=0, env_kwargs=kw, progress=False)]  # fmt: skip
    examples = sft_examples(policy, trajs)
    returns = [sum(t.reward for t in traj.turns) for traj in trajs]
    assert {0.0, 1.0} <= set(returns)
    for traj, ex, ret in zip(trajs, examples, returns, strict=True):
        want = "high" if ret >= 0.5 else "low"
        assert ex.reset_info["reward_token"] == want
        assert ex.prompt_ids.count(ids[0] if want == "high" else ids[1]) == 1
        assert not set(ids) & set(ex.response_ids)
        assert ex.num_sampled == sum(len(policy.encode(t.action)) + 1 for t in traj.turns)
        assert len(ex.turn_spans) == len(traj.turns)
    assert [e.reset_info["reward_token"] for e in examples[:4]] == ["high"] * 4
    config = _config(lr=1e-3, sft_lr=3e-3)
    state = setup(config)
    examples = sft_examples(state.policy, trajs)
    losses = [sft_step_on(state, config, examples) for _ in range(5)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    state.close()


def test_the_trainers_warm_start_is_stage_1(tmp_path, one_thread):
    """With reward_conditioning, sft_steps play the env's rc_sft_agents in turn and step on their bucketed examples:
    the same step as sft_examples + sft_step_on on those episodes, by hand."""
    from agentgym.running.episode import make_agent, run_episode

    config = _config(sft_batch=6, lr=1e-3)
    wired, by_hand = setup(config), setup(config)
    loss, buckets = conditioned_sft_step(wired, config, 0, 0)
    seeds = config.seeds.demonstrations(0, 0).integers(0, config.task_seed_range, size=6)
    env = gymnasium.make(config.env_id, **config.env_kwargs)
    agents = [make_agent("oracle", env), make_agent("random", env)]
    trajs = [run_episode(env, agents[i % 2], seed=int(s)) for i, s in enumerate(seeds)]
    assert buckets[0::2] == ["high"] * 3 and "low" in buckets[1::2]  # the oracle always succeeds; random does not
    assert loss == sft_step_on(by_hand, config, sft_examples(by_hand.policy, trajs))
    for a, b in zip(wired.model.parameters(), by_hand.model.parameters(), strict=True):
        assert torch.equal(a, b)
    wired.close(), by_hand.close()
    out = train(_config(sft_steps=2, sft_batch=4, iterations=1, batch_tasks=1, out_dir=str(tmp_path)))
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first["iteration"] == 0 and first["rc_sft_high"] + first["rc_sft_low"] == 8 and out["iterations"] == 1
    with pytest.raises(ValueError, match="rc_sft_agents"):
        _config(rc_sft_agents=[])


def test_condition_metrics_by_hand():
    def rollout(group, cond, reward):
        r = Rollout(prompt_ids=[1], group_id=group, turn_rewards=[reward], success=reward == 1.0)
        r.reset_info = {"reward_token": cond}
        return r

    batch = [rollout(0, "high", 1.0), rollout(0, "low", 0.0), rollout(1, "high", 0.0), rollout(1, "low", 0.0)]
    assert condition_metrics(batch) == {"rc_high_reward": 0.5, "rc_high_success": 0.5, "rc_low_reward": 0.0,
                                        "rc_low_success": 0.0, "rc_zero_std_group_frac": 0.5}  # fmt: skip


def test_card():
    (card,) = collect([rc])
    assert card.name == "rc_grpo" and card.paper == cite("RC-GRPO") and card.knobs() == {"rc_high_share": 0.5}
    TrainConfig(**{**CHAIN, **card.train})  # its settings make a valid run


@pytest.mark.slow
def test_trainer_runs_rc_grpo_and_evaluates_on_high(tmp_path, one_thread):
    config = _config(iterations=1, batch_tasks=2, eval_every=1, eval_tasks=2, out_dir=str(tmp_path))
    out = train(config)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"rc_high_reward", "rc_low_reward", "rc_zero_std_group_frac", "zero_std_group_frac"} <= set(lines[-1])
    assert "eval_success_rate" in lines[-1] and out["iterations"] == 1
    assert lines[-1]["rollout_logprob_maxdiff"] < 1e-4  # the banned logits are the same in sampling and scoring
    state = setup(config)
    evaluate(state, config)
    assert len(state.eval_envs) == 2
    assert all(isinstance(env, RewardTokenPrompt) and env.condition == "high" for env in state.eval_envs)
    state.close()
