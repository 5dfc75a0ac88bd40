"""HeRL (baselines/hindsight.py): unmet criteria, the guided prompt, guided members trained under the unguided prompt
with the truncated importance weight, the bonus, determinism, the all-met judge reducing to GRPO, the card."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines import hindsight
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import turn_rewards
from agentgym.baselines.hindsight import (
    BONUS_COMPONENT,
    GuidedMember,
    HeRL,
    HindsightBatch,
    guided_members,
    guided_messages,
    truncated_weights,
)
from agentgym.baselines.rollout import HFPolicy, Rollout, RolloutConfig
from agentgym.baselines.trainer import setup, train_iteration
from agentgym.baselines.trainer_methods import MethodState
from agentgym.baselines.update import make_batch, score_batch
from agentgym.rewards.catalogue import collect
from agentgym.rewards.checklist import Checklist, Criterion
from agentgym.rewards.papers import cite
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py

ROLL = RolloutConfig(max_turns=3, max_new_tokens=6, temperature=1.0, stop=("</answer>",))
CHAIN = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2, "max_new_tokens": 6,
         "stop": ["</answer>"], "batch_tasks": 2, "group_size": 2, "kl_coef": 0.0, "plot": False,
         "progress": False, "herl_checklists": "choices"}  # fmt: skip


@pytest.fixture(scope="module")
def policy(one_thread) -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


def chain(horizon: int = 3):
    return gymnasium.make("agentgym/Chain-v0", horizon=horizon)


def played(policy: HFPolicy, seed: int, right: list[bool], group: int = 0) -> Rollout:
    """A Chain-v0 (H = len(right)) episode of task ``seed`` whose turn ``t`` answers the gold choice when
    ``right[t]``, else another option, tokenised like a demonstration (mask 1 on the actions)."""
    env = chain(len(right))
    obs, info = env.reset(seed=seed)
    gold = info["gold"]["choices"]
    r = Rollout(prompt_ids=policy.prompt_ids(obs), group_id=group, seed=seed, task_id=info.get("task_id"))
    r.initial_observation, r.reset_info = list(obs), dict(info)
    for t, ok in enumerate(right):
        action = f"<answer> {gold[t] if ok else 'nothing'} </answer>"
        tokens = [*policy.encode(action), policy.end_token_id]
        r.context_lengths.append(len(r.input_ids))
        obs, term, trunc = r.record_turn(env, tokens, [0.0] * len(tokens), action)
        if term or trunc:
            break
        r.append_observation(policy.observation_ids(obs, last_token=policy.end_token_id))
    return r


def criteria_lines(messages: list[dict]) -> list[str]:
    text = messages[-1]["content"]
    block = text.split("It missed these criteria:\n", 1)[1].split("\nTry the task again", 1)[0]
    return [line[2:] for line in block.splitlines()]


def test_guided_prompt_lists_exactly_the_unmet_criteria(policy):
    good, bad = played(policy, 11, [True, True, True]), played(policy, 11, [True, False, True], group=0)
    gold = bad.reset_info["gold"]["choices"]
    herl = HeRL(RuleJudge(), "choices")
    unmet = herl.unmet([good.to_trajectory(), bad.to_trajectory()])
    # turn 2's wrong answer is the one criterion the bad episode missed; the good one missed none
    assert unmet == [[], [f"At turn 2 the agent answered {gold[1]}."]]
    messages = guided_messages(bad.initial_observation, unmet[1], bad.actions)
    assert criteria_lines(messages) == unmet[1]
    assert messages[0]["content"].startswith(bad.initial_observation[0]["content"])  # the task, then the hindsight
    assert "Turn 2: <answer> nothing </answer>" in messages[0]["content"]  # the failed attempt
    assert bad.initial_observation[0]["content"] in messages[0]["content"] and len(messages) == 1
    with pytest.raises(ValueError, match="no unmet criteria"):
        guided_messages(bad.initial_observation, [], bad.actions)
    many = ["a", "b", "c"]
    assert criteria_lines(guided_messages([{"role": "system", "content": "s"}], many, [])) == many


def test_a_rollout_that_meets_every_criterion_gets_no_guided_sample(policy):
    good, bad = played(policy, 11, [True, True, True]), played(policy, 12, [False, True, True], group=1)
    herl = HeRL(RuleJudge(), "choices", herl_k=2)
    envs = [chain(3) for _ in range(4)]
    batch = guided_members(policy, envs, [good, bad], herl, sample_seed=3, config=ROLL)
    assert [m.origin for m in batch.members] == [1, 1]  # herl_k = 2 members, both of the failed rollout
    assert all(m.rollout.group_id == 1 and m.rollout.seed == 12 for m in batch.members)
    assert batch.metrics() == {"herl_failed": 1.0, "herl_guided": 2.0, "herl_unmet_mean": 0.5}
    only_good = guided_members(policy, envs, [good], herl, sample_seed=3, config=ROLL)
    assert only_good.members == [] and only_good.unmet == [[]]


class Undecided:
    """A judge that can give no verdict (a failed request, say)."""

    name = "undecided"

    def ask(self, questions: list[Question]) -> list[Verdict]:
        return [Verdict(None, error="no reply") for _ in questions]


def test_a_criterion_without_verdict_gets_no_guidance(policy):
    bad = played(policy, 12, [False, False, False])
    assert HeRL(Undecided(), "choices").unmet([bad.to_trajectory()]) == [[]]


def test_guided_tokens_train_under_the_unguided_prompt_with_the_truncated_ratio(policy):
    bad = played(policy, 13, [False, True, True])
    herl = HeRL(RuleJudge(), "choices", herl_k=2, herl_is_clip=1.0)
    batch = guided_members(policy, [chain(3) for _ in range(2)], [bad], herl, sample_seed=5, config=ROLL)
    assert len(batch.members) == 2
    for m in batch.members:
        r = m.rollout
        assert r.prompt_ids == bad.prompt_ids and r.initial_observation == bad.initial_observation
        assert m.guided_prompt_ids != bad.prompt_ids and len(m.guided_prompt_ids) > len(bad.prompt_ids)
        assert r.context_lengths[0] == len(bad.prompt_ids)  # its first turn's context, in unguided coordinates
        # the tokens were sampled after the guided prompt: their log-probs there are the recorded ones
        guided = Rollout(prompt_ids=m.guided_prompt_ids, response_ids=r.response_ids, loss_mask=r.loss_mask,
                         rollout_logprobs=r.rollout_logprobs)  # fmt: skip
        lp, _ = score_batch(policy.model, make_batch([guided], 0), 1.0, 4)
        p, on = len(m.guided_prompt_ids), np.asarray(r.loss_mask, dtype=bool)
        got = lp[0, p : p + len(r.response_ids)].numpy()[on]
        assert np.allclose(got, np.asarray(r.rollout_logprobs)[on], atol=1e-4)
    # the trained batch: the unguided prompt ids, then the sampled response
    rows = [bad, *batch.guided]
    tensors = make_batch(rows, 0)
    for i, r in enumerate(rows):
        assert tensors["input_ids"][i, : len(bad.prompt_ids)].tolist() == bad.prompt_ids
        assert tensors["input_ids"][i, len(bad.prompt_ids) : len(r.input_ids)].tolist() == r.response_ids
    old, _ = score_batch(policy.model, tensors, 1.0, 4)
    advs = [np.ones(len(r.response_ids)) for r in rows]
    out, stats = batch.correct(rows, advs, old)
    assert out[0] is advs[0]  # the policy's own rollout: untouched
    n_clipped = 0
    for i, m in enumerate(batch.members, start=1):
        r, on = m.rollout, np.asarray(m.rollout.loss_mask, dtype=bool)
        p = len(r.prompt_ids)
        ratio = np.exp(old[i, p : p + len(r.response_ids)].double().numpy() - np.asarray(r.rollout_logprobs))
        assert np.allclose(out[i][on], np.minimum(ratio, 1.0)[on]) and np.all(out[i][~on] == 1.0)
        n_clipped += int((ratio[on] > 1.0).sum())
    # the tiny model hardly reads the prompt: its ratios sit near 1, some above the clip, some below
    assert 0 < stats["herl_is_clip_frac"] < 1 and n_clipped > 0 and stats["herl_is_weight_mean"] < 1.0


def test_truncated_weights_by_hand():
    # ratios 0.5 / 0.25 = 2 (clipped to 1.5), 0.1 / 0.2 = 0.5, 0.3 / 0.3 = 1
    old, guided = np.log([0.5, 0.1, 0.3]), np.log([0.25, 0.2, 0.3])
    assert np.allclose(truncated_weights(old, guided, 1.5), [1.5, 0.5, 1.0])
    assert np.allclose(truncated_weights(old, guided, None), [1.0, 1.0, 1.0])  # no correction
    with pytest.raises(ValueError, match="herl_is_clip"):
        HeRL(RuleJudge(), herl_is_clip=0.0)


def hand(rewards: list[float], group: int = 0) -> Rollout:
    r = Rollout(prompt_ids=[1, 2], group_id=group)
    for k, x in enumerate(rewards):
        r.response_ids += [5, 6]
        r.loss_mask += [1, 1]
        r.rollout_logprobs += [0.0, 0.0]
        r.turn_spans.append((2 * k, 2 * k + 2))
        r.turn_rewards.append(x)
        r.reward_components.append({"outcome": x})
    return r


def test_bonus_worked_example_and_no_change_gives_zero():
    config = TrainConfig(**CHAIN, herl=True, herl_bonus=0.2)
    assert config.counted_components == ("outcome", BONUS_COMPONENT)
    herl = HeRL(RuleJudge(), "choices", herl_bonus=0.2)
    # the failed rollout returns 0.25; its guided members 1.0 and 0.5: b = 0.75 - 0.25 = 0.5, bonus 0.2 x 0.5 = 0.1
    original, other = hand([0.0, 0.25]), hand([0.0, 1.0])
    members = [GuidedMember(hand([0.0, 1.0]), 0, [9], ["c"]), GuidedMember(hand([0.5, 0.0]), 0, [9], ["c"])]
    batch = HindsightBatch(herl, [original, other], members, [["c"], []])
    assert batch.gains(config) == {0: 0.5}
    m = batch.add_bonus([original, other, *batch.guided], config)
    assert original.turn_rewards == [0.0, 0.35] and original.reward_components[-1] == {
        "outcome": 0.25,
        BONUS_COMPONENT: 0.1,
    }
    assert turn_rewards(original, config) == [0.0, 0.35] and other.turn_rewards == [0.0, 1.0]
    assert m["herl_gain_mean"] == 0.5 and m["herl_original_return"] == 0.625 and m["herl_guided_return"] == 0.75
    # guidance that changes nothing: the guided member returns what the original did, b = 0, rewards unchanged
    same, copy = hand([0.0, 0.25]), hand([0.0, 0.25])
    flat = HindsightBatch(herl, [same], [GuidedMember(copy, 0, [9], ["c"])], [["c"]])
    assert flat.gains(config) == {0: 0.0}
    flat.add_bonus([same, copy], config)
    assert same.turn_rewards == [0.0, 0.25] and turn_rewards(same, config) == [0.0, 0.25]
    # a rollout whose group dynamic sampling dropped gets no bonus
    dropped = hand([0.0, 0.25])
    HindsightBatch(herl, [dropped], members, [["c"]]).add_bonus([], config)
    assert dropped.turn_rewards == [0.0, 0.25]


def test_guided_members_are_deterministic(policy):
    bad = played(policy, 14, [False, False, True])
    herl = HeRL(RuleJudge(), "choices", herl_k=2)

    def ids(seed: int) -> list[list[int]]:
        batch = guided_members(policy, [chain(3) for _ in range(2)], [bad], herl, sample_seed=seed, config=ROLL)
        return [m.rollout.response_ids for m in batch.members]

    first = ids(7)
    assert first == ids(7) and first[0] != first[1]  # two streams, each reproducible
    assert ids(8) != first


def all_met(traj):
    """A checklist every trajectory meets (what an all-yes judge says)."""
    return [Checklist(max(len(traj.turns) - 1, 0), "", (Criterion("Anything.", rule=lambda: True),))]


def _one_iteration(**over) -> tuple[dict, list[torch.Tensor]]:
    config = TrainConfig(**{**CHAIN, **over})
    state = setup(config)
    metrics = train_iteration(state, config, 1, MethodState(()))
    return metrics, [p.detach().clone() for p in state.model.parameters()]


@pytest.mark.slow
def test_an_all_met_checklist_is_plain_grpo_and_a_failing_one_adds_members():
    plain, w_plain = _one_iteration()
    same, w_same = _one_iteration(herl=True, herl_checklists="test_hindsight:all_met")
    assert same["herl_guided"] == 0.0 and same["kept_rollouts"] == plain["kept_rollouts"] == 4
    for key in ("reward_mean", "loss", "pg_loss", "grad_norm", "entropy"):
        assert same[key] == plain[key], key
    assert all(torch.equal(a, b) for a, b in zip(w_plain, w_same, strict=True))
    guided, _ = _one_iteration(herl=True, herl_k=1)
    assert guided["herl_failed"] >= 1 and guided["kept_rollouts"] == 4 + guided["herl_guided"]
    assert guided["sampled_tokens"] > plain["sampled_tokens"]


def test_config_refuses_what_herl_cannot_run_with():
    with pytest.raises(ValueError, match="herl_k"):
        TrainConfig(**CHAIN, herl=True, herl_k=0)
    with pytest.raises(ValueError, match=r"herl .*cannot run with branch_k"):
        TrainConfig(**{**CHAIN, "stop": ["</answer>"]}, herl=True, branch_k=2, estimator="tree")
    with pytest.raises(ValueError, match="old_logprobs"):
        TrainConfig(**CHAIN, herl=True, old_logprobs="rollout")
    with pytest.raises(ValueError, match="herl_bonus"):
        TrainConfig(**CHAIN, herl=True, reward_components=("outcome",))
    with pytest.raises(ValueError, match="herl_checklists"):
        TrainConfig(**{**CHAIN, "herl_checklists": "nope"}, herl=True)
    assert TrainConfig(**CHAIN).counted_components == ("outcome",)  # off: no bonus component


def test_the_card():
    (card,) = collect([hindsight])
    assert card.name == "herl" and card.kind == "trainer" and card.paper == cite("HeRL")
    assert card.knobs() == {"herl_checklists": "tool_use", "herl_k": 1, "herl_is_clip": 2.0, "herl_bonus": 0.2}
    config = TrainConfig(**{k: v for k, v in card.train.items() if k != "env_kwargs"})
    assert config.herl and config.herl_checklists == "tool_use" and config.scorer == "cm2"
    assert not math.isnan(config.herl_bonus)
