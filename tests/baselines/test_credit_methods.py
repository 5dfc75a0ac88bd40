"""Issue 21's methods in the reference trainer: outcome-only means the outcome alone (Umbrella's distractor rewards
never reach GRPO), ``mt_grpo`` reads the env's verified per-turn signal, ``gigpo_obs`` groups by what the agent saw,
the config checks the new knobs, and a 2-iteration smoke run of each new estimator on Chain H=2."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages, group_stats, turn_rewards
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer import train
from agentgym.envs.diagnostics.chain import ChainEnv
from agentgym.envs.diagnostics.umbrella import UmbrellaEnv
from agentgym.rewards.advantages import TurnSignal

R3 = math.sqrt(3.0)


def scripted(env: Any, words: list[str], group: Any, task_index: int = 0) -> Rollout:
    """A rollout of the real env, the agent's turns given as option words (two tokens each, one env token between)."""
    obs, info = env.reset(options={"task_index": task_index})
    r = Rollout(prompt_ids=[1, 2], group_id=group, task_id=info.get("task_id"))
    r.initial_observation, r.reset_info = list(obs), dict(info)
    for word in words:
        obs, terminated, truncated = r.record_turn(env, [5, 6], [-1.0, -1.0], f"<answer> {word} </answer>")
        if not (terminated or truncated):
            r.append_observation([9])
    return r


def config(**kw: Any) -> TrainConfig:
    return TrainConfig.from_dict({"env_id": "agentgym/Umbrella-v0", "env_kwargs": {"horizon": 3}, **kw})


def per_turn(advantages: list[np.ndarray], rollouts: list[Rollout]) -> list[list[float]]:
    return [[float(a[s]) for s, _ in r.turn_spans] for a, r in zip(advantages, rollouts, strict=True)]


# -- outcome-only means the outcome alone -------------------------------------------------------------------------


def test_umbrella_distractor_rewards_no_longer_reach_grpo():
    env = UmbrellaEnv(horizon=3, distractor_reward=0.6)
    # a task whose two distractor stages each have a paying (+0.6) and a costing (-0.6) option
    index = next(i for i in range(100) if all(len(set(s.payoffs)) == 2 for s in env.task(i).stages[1:]))
    stages = env.task(index).stages
    right = stages[0].answer
    wrong = next(o for o in stages[0].options if o != right)
    best = [s.options[int(np.argmax(s.payoffs))] for s in stages[1:]]
    worst = [s.options[int(np.argmin(s.payoffs))] for s in stages[1:]]
    rollouts = [
        scripted(env, [right, *worst], "a", index),  # outcome 1, distractors -1.2: env return -0.2
        scripted(env, [wrong, *best], "a", index),  # outcome 0, distractors +1.2: env return 1.2
        scripted(env, [right, *best], "b", index),  # both right: the outcome ties,
        scripted(env, [right, *worst], "b", index),  # the distractors do not
    ]
    assert [round(r.outcome, 6) for r in rollouts] == [-0.2, 1.2, 2.2, -0.2]
    grpo = config(algo="grpo")
    assert grpo.counted_components == ("outcome",)
    assert [turn_rewards(r, grpo) for r in rollouts] == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]] + [[0.0, 0.0, 1.0]] * 2
    adv, _ = compute_advantages(rollouts, grpo)
    # the right first turn gets +1, the wrong one -1 (eps 1e-6); the tied group gets exactly 0 whatever it earned
    assert np.allclose(per_turn(adv, rollouts), [[1.0] * 3, [-1.0] * 3, [0.0] * 3, [0.0] * 3], atol=1e-5)
    assert all(np.all(a[2:] == 0) for a in adv[2:])
    assert group_stats(rollouts, grpo) == {"a": 0.5, "b": 0.0}
    for algo in ("rloo", "dr_grpo"):
        a, _ = compute_advantages(rollouts, config(algo=algo))
        assert per_turn(a, rollouts)[0][0] > 0 > per_turn(a, rollouts)[1][0] and np.all(a[2] == 0)
    # the old behaviour, the env's whole reward, is one knob away: then the distractors decide GRPO's sign
    old, _ = compute_advantages(rollouts, config(algo="grpo", reward_components="all"))
    assert np.allclose(per_turn(old, rollouts), [[-1.0] * 3, [1.0] * 3, [1.0] * 3, [-1.0] * 3], atol=1e-5)
    # dense estimators keep the env's per-turn rewards by default
    assert config(algo="grpo", estimator="gtpo").counted_components is None
    assert turn_rewards(rollouts[0], config(algo="grpo", estimator="gtpo")) == pytest.approx([0.0, -0.6, 0.4])


def test_reward_components_knob():
    assert config(algo="grpo", progress_key="progress").counted_components == ("outcome", "progress")
    assert config(algo="ppo").counted_components is None
    assert config(algo="grpo", estimator="mt_grpo").counted_components == ("outcome",)
    named = TrainConfig.from_dict({"env_id": "agentgym/Umbrella-v0", "reward_components": ["outcome", "distractor"]})
    assert named.counted_components == ("outcome", "distractor")  # a JSON list becomes a tuple
    for bad, message in [
        ({"reward_components": "outcome"}, "'auto', 'all' or a list"),
        ({"reward_components": ()}, "at least one component"),
        ({"reward_components": ("outcome", "")}, "at least one component"),
        ({"reward_components": ("outcome",), "progress_key": "progress"}, "leaves out"),
        ({"turn_signal_mode": "sum"}, "turn_signal_mode"),
        ({"estimator": "mt_grpo", "env_id": "agentgym/Clarify-v0", "env_kwargs": {}}, "needs a verified per-turn"),
    ]:
        with pytest.raises(ValueError, match=message):
            config(**bad)


def test_turn_signal_resolution():
    assert config().turn_signal == TurnSignal("correct")
    search = {"env_id": "agentgym/SearchQA-v0", "env_kwargs": {"dataset": "tiny"}}
    assert config(**search).turn_signal == TurnSignal("supporting_recall", "delta")
    assert config(**search, turn_signal_key="progress").turn_signal == TurnSignal("progress", "value")
    assert config(**search, turn_signal_mode="value").turn_signal == TurnSignal("supporting_recall", "value")
    tool = config(env_id="agentgym/ToolUse-v0", env_kwargs={}, estimator="mt_grpo", turn_signal_key="ok")
    assert tool.turn_signal == TurnSignal("ok")


# -- mt_grpo and gigpo_obs through the trainer's credit path ----------------------------------------------------


def chain_rollouts() -> list[Rollout]:
    env = ChainEnv(horizon=2)
    right = [s.answer for s in env.task(0).stages]
    wrong = [next(o for o in s.options if o != s.answer) for s in env.task(0).stages]
    plays = [[right[0], right[1]], [right[0], wrong[1]], [wrong[0], right[1]], [wrong[0], wrong[1]]]
    return [scripted(env, p, "g") for p in plays]


def test_mt_grpo_and_gigpo_obs_read_the_rollouts_signal_and_observations():
    rollouts = chain_rollouts()
    chain = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "algo": "grpo"}
    # mt_grpo: info["correct"] = (1, 1, 0, 0) at turn 1 -> z (1, 1, -1, -1) plus A^O = z(R = 1, 0, 0, 0) =
    # (sqrt3, -1/sqrt3, -1/sqrt3, -1/sqrt3); the final turn gets A^O alone (eps 0)
    mt, _ = compute_advantages(rollouts, TrainConfig.from_dict({**chain, "estimator": "mt_grpo",
                                                                 "estimator_kwargs": {"eps": 0.0}}))  # fmt: skip
    want = [[1 + R3, R3], [1 - 1 / R3, -1 / R3], [-1 - 1 / R3, -1 / R3], [-1 - 1 / R3, -1 / R3]]
    assert np.allclose(per_turn(mt, rollouts), want)
    assert all(a[2] == 0 and a[0] == a[1] for a in mt)  # env token 0, a turn's tokens share its advantage
    # gigpo_obs: at turn 2 all four saw the same observation (state anchors split them by the hidden mistake flag)
    obs, _ = compute_advantages(rollouts, TrainConfig.from_dict({**chain, "estimator": "gigpo_obs",
                                                                  "estimator_kwargs": {"eps": 0.0}}))  # fmt: skip
    assert np.allclose(per_turn(obs, rollouts), [[2 * R3, 2 * R3]] + [[-2 / R3, -2 / R3]] * 3)
    state, _ = compute_advantages(rollouts, TrainConfig.from_dict({**chain, "estimator": "gigpo",
                                                                    "estimator_kwargs": {"eps": 0.0}}))  # fmt: skip
    assert np.allclose(per_turn(state, rollouts), [[2 * R3, R3 + 1], [-2 / R3, -1 / R3 - 1]] + [[-2 / R3, -1 / R3]] * 2)
    # a signal key the env never reports is an error, not a silent fall back to GRPO
    missing = TrainConfig.from_dict({**chain, "estimator": "mt_grpo", "turn_signal_key": "hits"})
    with pytest.raises(ValueError, match="no turn of the batch reports info\\['hits'\\]"):
        compute_advantages(rollouts, missing)


# -- smoke: 2 iterations of each new estimator on Chain H=2 from a short warm start ----------------------------


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    """SFT on Chain H=2's oracle demonstrations (100 steps, about 15 s): the policy answers in format often enough
    that groups differ (a random tiny model's replies are all invalid: every signal and outcome ties)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("warm")
    summary = train(TrainConfig.from_dict({**SMOKE, "iterations": 0, "sft_steps": 100, "sft_lr": 3e-3,
                                           "out_dir": str(out)}))  # fmt: skip
    summary["state"].close()
    yield out / "checkpoint.pt"
    torch.set_num_threads(before)


SMOKE: dict[str, Any] = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "batch_tasks": 2,
                         "group_size": 4, "max_turns": 2, "max_new_tokens": 8, "stop": ["</answer>"],
                         "minibatch_size": 8, "lr": 1e-3, "plot": False, "progress": False}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["mt_grpo", "gigpo_obs"])
def test_two_iterations_of_each_new_estimator(warm_start, tmp_path, estimator):
    summary = train(TrainConfig.from_dict({**SMOKE, "estimator": estimator, "iterations": 2,
                                           "init_from": str(warm_start), "out_dir": str(tmp_path)}))  # fmt: skip
    summary["state"].close()
    history = summary["history"]
    assert len(history) == 2
    for h in history:
        assert all(math.isfinite(v) for v in h.values() if isinstance(v, float))
    assert history[0]["valid_action_frac"] > 0.25  # the warm start answers in format
    assert history[0]["grad_norm"] > 0  # non-zero advantages reached the update
