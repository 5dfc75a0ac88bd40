"""The reference trainer: loss normalisers, GAE over interleaved env tokens, first-minibatch ratio/KL, resume, smoke."""

from __future__ import annotations

import json
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer import (
    PRESETS,
    TrainConfig,
    aggregate_loss,
    compute_advantages,
    load_config,
    main,
    make_batch,
    train,
)

TOY_ID = "agentgym_test/TrainerToy-v0"


class ToyEnv(gymnasium.Env):
    """Two turns; reward = distinct words in the action / 10, so sibling rollouts get different rewards."""

    observation_space = gymnasium.spaces.Text(64)
    action_space = gymnasium.spaces.Text(4096)

    def __init__(self, max_turns: int = 2, constant: bool = False) -> None:
        self.max_turns = max_turns
        self.constant = constant
        self.turn = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return [{"role": "user", "content": f"say words {seed}"}], {"task_id": f"toy-{seed}", "anchor": "start"}

    def step(self, action: str):
        self.turn += 1
        reward = 0.5 if self.constant else min(len(set(action.split())), 10) / 10.0
        done = self.turn >= self.max_turns
        info = {"anchor": f"t{self.turn}", "reward_components": {"words": reward}}
        if done:
            info["success"] = reward >= 0.5
        return ([] if done else [{"role": "user", "content": "more"}]), reward, done, False, info


if TOY_ID not in gymnasium.registry:
    gymnasium.register(id=TOY_ID, entry_point=ToyEnv, disable_env_checker=True)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def toy_config(tmp_path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "env_id": TOY_ID,
        "env_kwargs": {},
        "batch_tasks": 2,
        "group_size": 2,
        "max_turns": 2,
        "max_new_tokens": 4,
        "minibatch_size": 2,
        "iterations": 1,
        "lr": 1e-3,
        "kl_coef": 0.1,
        "plot": False,
        "out_dir": str(tmp_path / "run"),
    }
    base.update(kw)
    return TrainConfig.from_dict(base)


# ------------------------------------------------------------------------------------------------------------
# pure pieces


def test_loss_normalisers_on_a_hand_example():
    x = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [7.0, 7.0, 7.0, 7.0]])
    m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    assert aggregate_loss(x, m, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate_loss(x, m, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)  # empty row skipped
    assert aggregate_loss(x, m, "constant", norm_const=5.0).item() == pytest.approx(10.0 / (3 * 5.0))
    with pytest.raises(ValueError):
        aggregate_loss(x, m, "sum")


def hand_rollout(rewards: list[float], group: int = 0) -> Rollout:
    # response: 2 sampled, 2 env tokens, 1 sampled
    return Rollout(
        prompt_ids=[7, 8, 9],
        response_ids=[10, 11, 20, 21, 12],
        loss_mask=[1, 1, 0, 0, 1],
        rollout_logprobs=[-1.0, -1.0, 0.0, 0.0, -1.0],
        turn_spans=[(0, 2), (4, 5)],
        turn_rewards=rewards,
        group_id=group,
        anchors=[None, None],
    )


def test_gae_skips_env_tokens_through_the_trainer_path(tmp_path):
    config = toy_config(tmp_path, algo="ppo", gamma=0.5, lam=0.5, whiten_advantages=False)
    r = hand_rollout([1.0, 2.0])
    values = np.array([1.0, 2.0, 9.0, 9.0, 1.0])  # env-token values are ignored
    advs, rets = compute_advantages([r], config, [values])
    # rewards land on the last sampled token of each turn: r = [0, 1, ., ., 2]
    # t=4: delta = 2 - 1 = 1 -> A=1; t=1: delta = 1 + .5*1 - 2 = -.5 -> A = -.5 + .25*1 = -.25
    # t=0: delta = 0 + .5*2 - 1 = 0 -> A = .25*(-.25) = -.0625 ; returns = A + V on sampled tokens
    assert advs[0].tolist() == pytest.approx([-0.0625, -0.25, 0.0, 0.0, 1.0])
    assert rets is not None and rets[0].tolist() == pytest.approx([0.9375, 1.75, 0.0, 0.0, 2.0])
    # arbitrary values on the env tokens change nothing
    advs2, _ = compute_advantages([r], config, [np.array([1.0, 2.0, -5.0, 3.0, 1.0])])
    assert advs2[0].tolist() == advs[0].tolist()
    # placed in sequence coordinates after the 3 prompt tokens
    batch = make_batch([r], pad_id=0, advantages=advs, returns=rets)
    assert batch["advantages"][0].tolist() == pytest.approx([0, 0, 0, -0.0625, -0.25, 0, 0, 1.0])
    assert batch["loss_mask"][0].tolist() == [0, 0, 0, 1, 1, 0, 0, 1]


def test_group_estimators_broadcast_to_sampled_tokens_only(tmp_path):
    rs = [hand_rollout([0.0, 1.0]), hand_rollout([0.0, 0.0]), hand_rollout([1.0, 0.0], group=1)]
    grpo, _ = compute_advantages(rs, toy_config(tmp_path, algo="grpo"))
    assert [a.round(4).tolist() for a in grpo] == [[1, 1, 0, 0, 1], [-1, -1, 0, 0, -1], [0, 0, 0, 0, 0]]
    rloo, _ = compute_advantages(rs, toy_config(tmp_path, algo="rloo"))
    assert rloo[0].tolist() == [1, 1, 0, 0, 1]
    config = toy_config(tmp_path, algo="grpo", estimator="gtpo", estimator_kwargs={"gamma": 0.5})
    gtpo, _ = compute_advantages(rs, config)
    assert gtpo[0][2:4].tolist() == [0, 0] and gtpo[0][0] != gtpo[0][4]  # turn-level credit differs per turn
    with pytest.raises(KeyError):
        toy_config(tmp_path, estimator="nope")


def test_config_loading(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"algo": "rloo", "iterations": 3}))
    config = load_config("tiny", path, {"lr": 0.5})
    assert (config.algo, config.iterations, config.lr, config.model) == ("rloo", 3, 0.5, "tiny")
    assert load_config(overrides={"algo": "dr_grpo"}).loss_mode == "constant"
    with pytest.raises(ValueError, match="unknown config keys"):
        load_config(overrides={"nope": 1})
    assert "tiny" in PRESETS


# ------------------------------------------------------------------------------------------------------------
# training runs on the toy env


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_first_minibatch_ratio_is_one_and_kl_is_zero(tmp_path, temperature):
    summary = train(toy_config(tmp_path, epochs=2, temperature=temperature))
    m = summary["last"]
    assert m["rollout_logprob_maxdiff"] < 1e-5
    assert m["first_ratio_maxdev"] < 1e-5
    assert m["first_kl_ref"] < 1e-7
    assert m["zero_std_group_frac"] < 1.0 and m["loss"] != 0.0
    assert m["kl_ref"] > 0.0  # the second epoch has moved away from the reference


@pytest.mark.parametrize(
    "kw",
    [
        {"algo": "ppo"},
        {"algo": "dr_grpo"},
        {"algo": "rloo", "loss_agg": "seq-mean-token-mean"},
        {"algo": "grpo", "estimator": "gigpo", "dynamic_sampling": True, "mask_truncated": True},
        {"algo": "grpo", "old_logprobs": "rollout", "kl_coef": 0.0},
    ],
)
def test_each_algorithm_runs(tmp_path, kw):
    m = train(toy_config(tmp_path, **kw))["last"]
    assert m["iteration"] == 1 and np.isfinite(m.get("loss", 0.0))
    assert 0.0 <= m.get("clip_frac", 0.0) <= 1.0
    if kw["algo"] == "ppo":
        assert "explained_variance" in m and m["value_loss"] > 0


def test_dynamic_sampling_drops_zero_variance_groups(tmp_path):
    m = train(toy_config(tmp_path, env_kwargs={"constant": True}, dynamic_sampling=True))["last"]
    assert m["zero_std_group_frac"] == 1.0 and m["kept_rollouts"] == 0 and m["skipped_update"]
    m = train(toy_config(tmp_path, env_kwargs={"constant": True}, out_dir=str(tmp_path / "nods")))["last"]
    assert m["kept_rollouts"] == 4 and m["pg_loss"] == 0.0  # kept, but GRPO advantages are all 0


def test_resume_reproduces_the_next_step(tmp_path):
    full = train(toy_config(tmp_path, iterations=2, out_dir=str(tmp_path / "a")))
    train(toy_config(tmp_path, iterations=1, out_dir=str(tmp_path / "b")))
    resumed = train(toy_config(tmp_path, iterations=2, out_dir=str(tmp_path / "b"), resume=True))
    assert resumed["iterations"] == 2 and len(resumed["history"]) == 2
    assert resumed["last"]["loss"] == full["last"]["loss"]
    pa = full["state"].model.state_dict()
    pb = resumed["state"].model.state_dict()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in lines] == [1, 2]


# ------------------------------------------------------------------------------------------------------------
# smoke: the tiny preset on SearchQA tiny, through main()


def test_tiny_preset_smoke_on_search_qa(tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["--preset", "tiny", "--out-dir", str(out), "--set", "max_new_tokens=6"]) == 0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [1, 2]
    for key in (
        "reward_mean",
        "success_rate",
        "approx_kl",
        "clip_frac",
        "entropy",
        "zero_std_group_frac",
        "rollout_tokens_per_s",
        "update_tokens_per_s",
    ):
        assert key in lines[-1]
    assert (out / "checkpoint.pt").is_file() and (out / "metrics.png").stat().st_size > 0
    assert "metrics_path" in capsys.readouterr().out


def test_progress_dense_reward_is_a_difference_of_progress(tmp_path):
    r = hand_rollout([0.0, 1.0])
    r.turn_metrics = [{"progress": 0.5}, {"progress": 1.0}]
    config = toy_config(tmp_path, progress_key="progress", progress_coef=0.2)
    from agentgym.baselines.trainer import turn_rewards

    assert turn_rewards(r, config) == pytest.approx([0.1, 1.1])
    assert turn_rewards(r, toy_config(tmp_path)) == [0.0, 1.0]


def test_sft_warm_start_on_oracle_demonstrations(tmp_path):
    config = load_config(
        "tiny",
        overrides={
            "out_dir": str(tmp_path / "sft"),
            "iterations": 1,
            "max_turns": 2,
            "max_new_tokens": 2,
            "batch_tasks": 1,
            "sft_steps": 3,
            "sft_batch": 2,
            "sft_steps_per_iteration": 1,
            "lr": 3e-3,
            "plot": False,
        },
    )
    summary = train(config)
    warm, it1 = summary["history"]
    assert warm["iteration"] == 0 and warm["sft_loss"] < warm["sft_loss_first"]
    assert it1["iteration"] == 1 and np.isfinite(it1["sft_loss"])
    assert config.kl_coef > 0 and it1["first_kl_ref"] < 1e-7  # the KL anchor is the warm-started policy
