"""The reference trainer: loss normalisers, GAE over interleaved env tokens, first-minibatch ratio/KL, resume, smoke."""

from __future__ import annotations

import json
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

from agentgym.baselines.config import PRESETS, TrainConfig, load_config
from agentgym.baselines.credit import compute_advantages
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer import main, setup, train, train_iteration
from agentgym.baselines.update import aggregate_loss, make_batch

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


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py


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
        "reward_components": "all",  # the toy names its reward "words", not "outcome": count it for every algo
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


def test_config_loading(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"algo": "rloo", "iterations": 3}))
    config = load_config("tiny", path, {"lr": 0.5})
    assert (config.algo, config.iterations, config.lr, config.model) == ("rloo", 3, 0.5, "tiny")
    assert load_config(overrides={"algo": "dr_grpo"}).loss_mode == "constant"
    assert load_config(overrides={"lr": 1, "stop": ["</answer>"]}).stop == ("</answer>",)  # an int is a float
    with pytest.raises(ValueError, match="unknown config key 'nope'"):
        load_config(overrides={"nope": 1})
    assert "tiny" in PRESETS


# ------------------------------------------------------------------------------------------------------------
# training runs on the toy env


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_first_minibatch_ratio_is_one_and_kl_is_zero(tmp_path, temperature):
    summary = train(toy_config(tmp_path, epochs=2, temperature=temperature, group_size=4, max_new_tokens=8))
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


@pytest.mark.parametrize("skip", [True, False])
def test_a_tied_batch_moves_no_weight_after_a_real_gradient(tmp_path, skip):
    """A GRPO batch whose groups all tie has gradient 0; with skip_zero_grad_steps it takes no optimizer step, so
    the policy stays put. Without it Adam keeps moving every weight on the momentum of the previous real gradient
    (found in the credit pilot: Chain H=16 GRPO lost a third of its per-turn skill that way)."""
    config = toy_config(tmp_path, kl_coef=0.0, skip_zero_grad_steps=skip, group_size=4, max_new_tokens=12)
    state = setup(config)
    first = train_iteration(state, config, 1)  # distinct-word rewards: a real gradient
    assert first["grad_norm"] > 0 and first["skipped_steps"] == 0
    state.envs = [ToyEnv(constant=True) for _ in state.envs]  # every reward 0.5: all groups tie
    before = {k: v.clone() for k, v in state.model.state_dict().items()}
    tied = train_iteration(state, config, 2)
    assert tied["zero_std_group_frac"] == 1.0 and tied["grad_norm"] == 0.0
    moved = any(not torch.equal(before[k], v) for k, v in state.model.state_dict().items())
    assert tied["skipped_steps"] == (4 if skip else 0)  # 8 rollouts in minibatches of 2
    assert moved is not skip
    state.close()


@pytest.mark.slow
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


@pytest.mark.slow
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
        "valid_action_frac",
        "rollout_tokens_per_s",
        "update_tokens_per_s",
    ):
        assert key in lines[-1]
    assert 0.0 <= lines[-1]["valid_action_frac"] <= 1.0
    assert (out / "checkpoint.pt").is_file() and (out / "metrics.png").stat().st_size > 0
    assert "metrics_path" in capsys.readouterr().out


@pytest.mark.slow
def test_the_trainer_steps_its_envs_through_a_pool(tmp_path):
    """env_pool="thread": the same run as the default env list (rollouts are byte-identical in every pool)."""
    runs = []
    for pool in ("list", "thread"):
        out = tmp_path / pool
        args = ["--preset", "tiny", "--out-dir", str(out), "--set", "max_new_tokens=6", "--set", "iterations=1",
                "--set", f"env_pool={pool}"]  # fmt: skip
        assert main(args) == 0
        line = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
        runs.append({k: line[k] for k in ("reward_mean", "success_rate", "approx_kl", "entropy")})
    assert runs[0] == runs[1]
    with pytest.raises(ValueError, match="env_pool"):
        TrainConfig(env_pool="processes")


def test_progress_dense_reward_is_the_progress_reward_wrapper(tmp_path):
    from agentgym.baselines.credit import EnvMaker

    config = toy_config(tmp_path, env_id="agentgym/Chain-v0", env_kwargs={"horizon": 2}, progress_key="progress",
                        progress_coef=0.2)  # fmt: skip
    env = EnvMaker.of(config)()
    _, info = env.reset(options={"task_index": 0})
    rewards = [env.step(f"<answer> {word} </answer>")[1] for word in info["gold"]["choices"]]
    assert rewards == pytest.approx([0.1, 1.1])  # 0.2 * (0.5 - 0) and 1 + 0.2 * (1 - 0.5)
    plain = EnvMaker.of(config, shaped=False)()  # evaluation and SFT envs carry no dense reward
    plain.reset(options={"task_index": 0})
    assert [plain.step(f"<answer> {w} </answer>")[1] for w in info["gold"]["choices"]] == [0.0, 1.0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algo": "grpo", "estimator": "turn_ppo"}, "needs a critic"),
        ({"algo": "ppo", "estimator": "gigpo"}, "ppo takes estimator"),
        ({"algo": "ppo", "estimator_kwargs": {"gamma": 0.5}}, "gamma and lam from the config"),
        ({"estimator": "gigpo", "estimator_kwargs": {"omgea": 0.5}}, "takes no \\['omgea'\\]"),
        ({"estimator": "nope"}, "unknown estimator 'nope'"),
        ({"rollout_backend": "sglang"}, "rollout_backend must be one of"),
        ({"env_pool": "process"}, "env_pool must be one of"),
        ({"dynamic_sampling": True, "group_size": 1}, "group_size >= 2"),
        ({"minibatch_size": 0}, "minibatch_size must be >= 1"),
        ({"init_from": "/nonexistent/checkpoint.pt"}, "no checkpoint"),
        ({"env_kwargs": "foo"}, "env_kwargs must be dict, got 'foo'"),
        ({"iterations": "3"}, "iterations must be int, got '3'"),
        ({"plot": 1}, "plot must be bool, got 1"),
        ({"env_id": "agentgym/Nope-v0"}, "env_id: .*Nope"),
    ],
)
def test_invalid_configs_fail_when_built(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        toy_config(tmp_path, **overrides)


def test_cli_config_errors_are_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "tiny", "--set", "algo=grpo", "--set", "estimator=turn_ppo", "--out-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "needs a critic" in capsys.readouterr().err.strip().splitlines()[-1]


def test_seed_streams_are_named_and_independent():
    from agentgym.baselines.config import Seeds

    a, b = Seeds(0), Seeds(1)
    draws = {a.sampling(1), a.sampling(2), b.sampling(1), a.evaluation(), b.evaluation()}
    assert len(draws) == 5
    assert a.tasks(3).integers(1 << 30) == Seeds(0).tasks(3).integers(1 << 30)
    assert a.demonstrations(0, 1).integers(1 << 30) != a.demonstrations(1, 0).integers(1 << 30)


@pytest.mark.slow
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


def test_held_out_evaluation_and_sft_learning_rate(tmp_path):
    """eval_every scores the same first tasks of the eval split before training and after; SFT steps use sft_lr
    and leave the RL learning rate in place."""
    config = load_config(
        "tiny",
        overrides={
            "out_dir": str(tmp_path / "ev"),
            "iterations": 1,
            "max_turns": 2,
            "max_new_tokens": 3,
            "batch_tasks": 1,
            "sft_steps": 1,
            "sft_batch": 1,
            "sft_lr": 5e-3,
            "lr": 1e-4,
            "eval_every": 1,
            "eval_tasks": 3,
            "eval_env_kwargs": {"dataset": "tiny", "split": "test"},
            "plot": False,
        },
    )
    summary = train(config)
    warm, it1 = summary["history"]
    for rec in (warm, it1):
        assert {"eval_success_rate", "eval_reward_mean", "eval_progress"} <= set(rec)
        assert 0.0 <= rec["eval_success_rate"] <= 1.0
    assert summary["state"].optimizer.param_groups[0]["lr"] == 1e-4
    assert summary["state"].envs == []  # closed at the end


def test_evaluation_plays_the_first_tasks_of_the_split_in_order(tmp_path):
    from agentgym.baselines.trainer import evaluate, setup

    config = load_config(
        "tiny",
        overrides={"out_dir": str(tmp_path / "e"), "max_turns": 1, "max_new_tokens": 2, "eval_tasks": 4},
    )
    state = setup(config)
    first = evaluate(state, config)
    tasks = [env.unwrapped.example.id for env in state.eval_envs]
    env = gymnasium.make(config.env_id, **config.env_kwargs)
    expected = [env.reset(seed=0, options={"task_index": i})[1]["task_id"] for i in range(4)]
    assert tasks == expected
    assert evaluate(state, config) == first  # greedy, fixed tasks: the same numbers again


def test_gpu_presets_need_a_local_model_and_load_one(tmp_path):
    """The Qwen2.5 presets never download: without --model they stop with a clear error; with a local directory
    (here the tiny model saved to disk, on CPU, cut down) the same preset trains."""
    from agentgym.tools.tiny_model import save_tiny_model

    assert {"qwen2.5-0.5b", "qwen2.5-1.5b"} <= set(PRESETS)
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
        config = load_config(name)
        assert config.device == "cuda" and config.amp_dtype == "bfloat16" and config.model == ""
        assert config.env_kwargs["split"] == "train" and config.eval_env_kwargs["split"] == "test"
    with pytest.raises(ValueError, match="--model PATH"):
        main(["--preset", "qwen2.5-0.5b", "--out-dir", str(tmp_path / "none")])
    model_dir = save_tiny_model(tmp_path / "model", seed=0)
    small = [
        'device="cpu"',
        "amp_dtype=null",
        'env_kwargs={"dataset": "tiny", "split": "train"}',
        'eval_env_kwargs={"dataset": "tiny", "split": "test"}',
        "eval_tasks=2",
        "batch_tasks=1",
        "group_size=2",
        "max_turns=1",
        "max_new_tokens=3",
        "minibatch_size=2",
    ]
    args = ["--preset", "qwen2.5-0.5b", "--model", str(model_dir), "--iterations", "1"]
    args += ["--out-dir", str(tmp_path / "r")]
    assert main([*args, *[a for s in small for a in ("--set", s)], "--set", "plot=false"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [0, 1] and "eval_success_rate" in lines[1]


def test_mixed_precision_keeps_float32_master_weights(tmp_path):
    """amp_dtype runs the forwards under autocast (bfloat16 on CPU here); weights and optimizer stay float32 and
    the first-minibatch ratio is still 1 (old log-probs are recomputed under the same autocast)."""
    summary = train(toy_config(tmp_path, amp_dtype="bfloat16", gradient_checkpointing=True, kl_coef=0.0))
    m = summary["last"]
    assert all(p.dtype == torch.float32 for p in summary["state"].model.parameters())
    assert np.isfinite(m["loss"]) and m["first_ratio_maxdev"] < 1e-3


def test_turn_level_critic_ppo(tmp_path):
    """ppo + turn_ppo: the value target of every token of a turn is that turn's GAE return (one value per turn)."""
    r = hand_rollout([0.0, 1.0])
    values = np.zeros(len(r.response_ids))
    (s0, e0), (s1, e1) = r.turn_spans
    values[s0], values[s1] = 0.25, 0.5
    config = toy_config(tmp_path, algo="ppo", estimator="turn_ppo", gamma=1.0, lam=1.0, whiten_advantages=False)
    advs, rets = compute_advantages([r], config, [values])
    # turn GAE with gamma = lam = 1: A_1 = 1 - 0.5, A_0 = 0 + 0.5 - 0.25 + A_1 = 0.75; returns = A + V
    assert advs[0][s0:e0].tolist() == [0.75] * (e0 - s0) and advs[0][s1:e1].tolist() == [0.5] * (e1 - s1)
    assert rets[0][s0:e0].tolist() == [1.0] * (e0 - s0) and rets[0][s1:e1].tolist() == [1.0] * (e1 - s1)
    assert advs[0][e0:s1].tolist() == [0.0] * (s1 - e0)  # env tokens
    summary = train(toy_config(tmp_path, algo="ppo", estimator="turn_ppo"))
    assert np.isfinite(summary["last"]["value_loss"])
    with pytest.raises(ValueError, match="turn_ppo"):
        toy_config(tmp_path, algo="ppo", estimator="gtpo")


@pytest.mark.parametrize("scorer", ["info_gain", "info_potential", "siop"])
def test_turn_scorer_runs_inside_the_trainer(tmp_path, scorer):
    """IGPO / TIPS / SIOP score each iteration's rollouts with the current policy; their per-turn rewards join the
    env's before the estimator (igpo reads them as information-gain turns + outcome)."""
    config = load_config(
        "tiny",
        overrides={
            "out_dir": str(tmp_path / scorer),
            "iterations": 1,
            "max_turns": 2,
            "max_new_tokens": 4,
            "batch_tasks": 1,
            "group_size": 3,
            "scorer": scorer,
            "estimator": "igpo" if scorer == "info_gain" else "gtpo",
            "plot": False,
        },
    )
    m = train(config)["last"]
    assert m["scorer_invalid_frac"] == 0.0 and np.isfinite(m["scorer_reward_mean"]) and m["time_scorer"] > 0
    if scorer == "info_potential":  # TIPS emits shaping even without an answer; its rewards are not all zero
        assert m["scorer_reward_mean"] != 0.0
    with pytest.raises(ValueError, match="unknown scorer 'nope'"):
        load_config("tiny", overrides={"scorer": "nope"})


def test_rollouts_convert_to_text_trajectories():
    from agentgym.baselines.rollout import HFPolicy, RolloutConfig, collect_rollouts
    from agentgym.tools.tiny_model import build_tiny_model

    policy = HFPolicy(*build_tiny_model(seed=0))

    def factory():
        return gymnasium.make("agentgym/SearchQA-v0", dataset="tiny")

    (r,) = collect_rollouts(policy, factory, [4], group_size=1, config=RolloutConfig(max_turns=2, max_new_tokens=4))
    traj = r.to_trajectory("agentgym/SearchQA-v0")
    assert [t.action for t in traj.turns] == r.actions and traj.reset_info["gold"]["answers"]
    assert traj.initial_observation[0]["role"] in ("system", "user") and traj.total_reward == r.outcome
    assert traj.turns[-1].terminated == r.terminated and traj.turns[-1].truncated == r.truncated
