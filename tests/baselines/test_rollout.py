"""The reference token-in/token-out rollout: masks, fixed-base observation tokens, log-probs, determinism."""

from __future__ import annotations

import dataclasses

import gymnasium
import pytest
import torch

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.rollout import HFPolicy, RolloutConfig, check_contexts, collect_rollouts
from agentgym.baselines.update import make_batch, score_batch

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py


@pytest.fixture(scope="module")
def policy(one_thread) -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


def search_env():
    return gymnasium.make("agentgym/SearchQA-v0", dataset="tiny")


CONFIG = RolloutConfig(max_turns=2, max_new_tokens=8, temperature=1.0)


@pytest.fixture(scope="module")
def rollouts(policy):
    return collect_rollouts(policy, search_env, [5, 9], group_size=2, config=CONFIG, sample_seed=1)


def test_mask_is_one_only_on_sampled_tokens(policy, rollouts):
    assert len(rollouts) == 4
    for r in rollouts:
        check_contexts(r, [])  # mask == spans, lengths agree
        assert len(r.turn_spans) == len(r.turn_rewards) == len(r.context_lengths) == 2
        assert r.num_sampled == sum(e - s for s, e in r.turn_spans)
        assert r.turn_end_indices == [e - 1 for _, e in r.turn_spans]
        for i, (m, lp) in enumerate(zip(r.loss_mask, r.rollout_logprobs, strict=True)):
            assert (lp < 0) if m else (lp == 0.0), i
        # the tokens between the turns are the env's: the closing <|end|>, the user observation, <|assistant|>
        (_, e0), (s1, _) = r.turn_spans
        between = policy.tokenizer.convert_ids_to_tokens(r.response_ids[e0:s1])
        assert between[-1] == "<|assistant|>" and "<|user|>" in between
        # the model saw exactly prompt + response up to each turn's start
        assert r.context_lengths == [len(r.prompt_ids) + s for s, _ in r.turn_spans]


def test_groups_share_seed_and_group_id(rollouts):
    assert [r.group_id for r in rollouts] == [0, 0, 1, 1]
    assert [r.seed for r in rollouts] == [5, 5, 9, 9]
    assert rollouts[0].prompt_ids == rollouts[1].prompt_ids != rollouts[2].prompt_ids
    assert rollouts[0].response_ids != rollouts[1].response_ids  # different samples within a group


def test_rollouts_are_reproducible(policy, rollouts):
    again = collect_rollouts(policy, search_env, [5, 9], group_size=2, config=CONFIG, sample_seed=1)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in rollouts]


def test_fixed_base_trick_matches_full_template(policy):
    first = [{"role": "user", "content": "Who founded Ovra?"}]
    answer = "<search> ovra founder </search>"
    obs = [{"role": "user", "content": "<information> doc 1 </information>"}]
    eos = policy.tokenizer.eos_token_id
    ids = policy.prompt_ids(first) + policy.encode(answer) + [eos] + policy.observation_ids(obs, last_token=eos)
    full = policy.prompt_ids([*first, {"role": "assistant", "content": answer}, *obs])
    assert ids == full
    # a turn that stopped on a stop string (no eos sampled) gets the template's closing tokens from the env side
    ids2 = policy.prompt_ids(first) + policy.encode(answer) + policy.observation_ids(obs)
    assert ids2 == full


def test_check_contexts_catches_drift(rollouts):
    r = dataclasses.replace(rollouts[0], response_ids=list(rollouts[0].response_ids))
    contexts = [r.input_ids[:n] for n in r.context_lengths]
    check_contexts(r, contexts)
    r.response_ids[r.turn_spans[1][0] - 1] += 1  # tamper with an observation token
    with pytest.raises(AssertionError, match="differ"):
        check_contexts(r, contexts)
    bad = dataclasses.replace(rollouts[0], loss_mask=[1] * len(rollouts[0].loss_mask))
    with pytest.raises(AssertionError, match="sampled"):
        check_contexts(bad, [])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_logprobs_equal_trainer_recomputation(policy, temperature):
    config = dataclasses.replace(CONFIG, temperature=temperature)
    rs = collect_rollouts(policy, search_env, [3], group_size=2, config=config, sample_seed=7)
    batch = make_batch(rs, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(policy.model, batch, temperature, minibatch_size=2)
    on = batch["loss_mask"] > 0
    assert int(on.sum()) == sum(r.num_sampled for r in rs)
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-5, rtol=0)
    if temperature != 1.0:  # the scaling matters: T=1 log-probs are different numbers
        lp1, _ = score_batch(policy.model, batch, 1.0, minibatch_size=2)
        assert (lp1[on] - batch["rollout_logprobs"][on]).abs().max() > 1e-3


def test_batched_generation_matches_one_row_at_a_time(policy, rollouts):
    """Lockstep generation in one left-padded batch draws the same tokens as generating each row alone: every row
    has its own generator, and padding does not change a row's distribution."""
    one_by_one = collect_rollouts(
        policy, search_env, [5, 9], group_size=2, config=CONFIG, sample_seed=1, generation_batch=1
    )
    assert [r.response_ids for r in one_by_one] == [r.response_ids for r in rollouts]
    for a, b in zip(one_by_one, rollouts, strict=True):
        assert a.rollout_logprobs == pytest.approx(b.rollout_logprobs, abs=1e-5)


def test_sample_batch_respects_each_rows_budget_and_greedy_is_deterministic(policy):
    contexts = [policy.prompt_ids([{"role": "user", "content": text}]) for text in ("hi", "a much longer question")]
    gens = [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)]
    out = policy.sample_batch(contexts, budgets=[3, 7], temperature=0.0, stop=(), generators=gens)
    assert [len(t) for t, _, _ in out] == [3, 7] or any(f == "eos" for _, _, f in out)
    again = [
        policy.sample(c, max_new_tokens=b, temperature=0.0, stop=(), generator=g)
        for c, b, g in zip(contexts, [3, 7], gens, strict=True)
    ]
    assert [t for t, _, _ in again] == [t for t, _, _ in out]


def test_envs_pool_is_reused_and_left_open(policy):
    pool: list = []
    first = collect_rollouts(policy, search_env, [5], group_size=2, config=CONFIG, sample_seed=1, envs=pool)
    assert len(pool) == 2
    kept = list(pool)
    collect_rollouts(policy, search_env, [9], group_size=2, config=CONFIG, sample_seed=1, envs=pool)
    assert pool == kept  # no new envs
    assert first[0].seed == 5
    indexed = collect_rollouts(
        policy, search_env, [0, 0], group_size=1, config=CONFIG, envs=pool, options=[{"task_index": 1}, None]
    )
    assert indexed[0].task_id != indexed[1].task_id or indexed[0].task_id is None
    for env in pool:
        env.close()


def test_household_demonstrations_come_from_the_oracle_agent(policy):
    """Envs without gold answers in their reset info get demonstrations from their built-in oracle agent, played
    turn by turn: on Household the teacher-forced episode wins, in the prompt's <action> format."""
    from agentgym.baselines.rollout import demonstration_episode

    env = gymnasium.make("agentgym/Household-v0", prompt="verl")
    config = RolloutConfig(max_turns=30, max_new_tokens=64, max_total_tokens=10**6)
    demo = demonstration_episode(policy, env, seed=3, config=config)
    assert demo is not None and demo.success and demo.terminated
    assert all("<action>" in a for a in demo.actions)
    check_contexts(demo, [demo.input_ids[:n] for n in demo.context_lengths])
    assert demo.turn_end_indices == [e - 1 for _, e in demo.turn_spans]
    for (s, e), action in zip(demo.turn_spans, demo.actions, strict=True):
        assert demo.response_ids[s:e] == [*policy.encode(action), policy.end_token_id]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["serial", "thread", "ray"])
def test_rollouts_step_through_any_pool(policy, rollouts, kind):
    if kind == "ray":
        pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentgym-suite[ray]')")
    from agentgym.running.pool import make_pool

    options = {"num_cpus": 0.5, "init_kwargs": {"num_cpus": 2, "include_dashboard": False}} if kind == "ray" else {}
    with make_pool(kind, "agentgym/SearchQA-v0", 4, env_kwargs={"dataset": "tiny"}, **options) as pool:
        again = collect_rollouts(policy, search_env, [5, 9], group_size=2, config=CONFIG, sample_seed=1, envs=pool)
        assert [r.to_dict() for r in again] == [r.to_dict() for r in rollouts]  # same tokens, same env replies
        with pytest.raises(ValueError, match="4 slots, 6 rollouts"):
            collect_rollouts(policy, search_env, [5, 9, 11], group_size=2, config=CONFIG, envs=pool)
