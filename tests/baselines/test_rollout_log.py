"""rollouts.jsonl (baselines/rollout_log.py): the trainer's episodes with the per-token advantages the update used."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages, make_tables, training_rollouts
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.rollout_log import ROLLOUTS_FILE, log_rollouts, read_rollouts, token_texts
from agentgym.baselines.trainer import setup, train
from agentgym.tools.tiny_model import build_tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py

TOY_ID = "agentgym_test/RolloutLogToy-v0"


class RolloutLogToy(gymnasium.Env):
    """Two turns; the reward is the share of distinct words (so a random policy's siblings differ), with the
    verified signals ``correct`` and ``progress`` and an invalid empty action."""

    def __init__(self, max_turns: int = 2):
        self.max_turns, self.turn = max_turns, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return [{"role": "user", "content": f"say many words ({seed})"}], {"task_id": str(seed), "progress": 0.0}

    def step(self, action: str):
        self.turn += 1
        reward = min(len(set(action.split())), 10) / 10.0
        done = self.turn >= self.max_turns
        info: dict[str, Any] = {"reward_components": {"words": reward}, "correct": reward >= 0.3,
                                "progress": self.turn / self.max_turns, "action_valid": bool(action.strip()),
                                "parse_error": None if action.strip() else "empty"}  # fmt: skip
        if done:
            info["success"] = reward >= 0.5
        return ([] if done else [{"role": "user", "content": "more"}]), reward, done, False, info


if TOY_ID not in gymnasium.registry:
    gymnasium.register(id=TOY_ID, entry_point=RolloutLogToy, disable_env_checker=True)


def config_of(tmp_path: Path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {"env_id": TOY_ID, "env_kwargs": {}, "batch_tasks": 2, "group_size": 2, "max_turns": 2,
                            "max_new_tokens": 4, "minibatch_size": 2, "iterations": 1, "lr": 1e-3, "plot": False,
                            "progress": False, "reward_components": "all",
                            "out_dir": str(tmp_path / "run")}  # fmt: skip
    return TrainConfig.from_dict({**base, **kw})


def first_batch(config: TrainConfig) -> list[Rollout]:
    """Iteration 1's rollouts, played again from a fresh setup (the run's seeds make them the run's)."""
    state = setup(config)
    seeds = config.seeds.tasks(1).integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
    rollouts = training_rollouts(state, config, seeds, config.seeds.sampling(1), 0, make_tables(config))
    state.close()
    return rollouts


def same_f32(logged: list[float | None], values: np.ndarray) -> bool:
    """The logged numbers, read as float32, are exactly ``values`` as float32 (the update's tensor)."""
    return np.array_equal(np.asarray(logged, dtype=np.float32), np.asarray(values, dtype=np.float32))


@pytest.mark.slow
def test_the_log_holds_the_episodes_and_the_advantages_the_update_used(tmp_path):
    """Iterations 1 and 3 of 3 are logged (every 2nd), 3 rollouts each (one whole group, then one of the next);
    each turn's tokens join into its action, and its advantages are those compute_advantages gives on the same
    batch (float32, as the update's tensor holds them); rloo's are logged beside them, turn_ppo is skipped with
    its reason."""
    config = config_of(tmp_path, iterations=3, log_rollouts_every=2, log_rollouts_max=3,
                       log_advantages_of=["rloo", "turn_ppo"])  # fmt: skip
    history = train(config)["history"]
    assert [h.get("rollouts_logged") for h in history] == [3, None, 3]
    path = Path(config.out_dir) / ROLLOUTS_FILE
    records = list(read_rollouts(path))
    assert [(r["iteration"], r["rollout"]) for r in records] == [(1, 0), (1, 1), (1, 2), (3, 0), (3, 1), (3, 2)]
    assert sum(len(line) for line in path.read_bytes().splitlines(keepends=True)[:3]) == history[0][
        "rollouts_log_bytes"]  # fmt: skip

    rollouts = first_batch(config)
    advs, _ = compute_advantages(rollouts, config)
    rloo, _ = compute_advantages(rollouts, dataclasses.replace(config, estimator="rloo"))
    assert any(np.any(a != 0) for a in advs), "a batch without advantages would test nothing"
    tok = build_tiny_tokenizer()
    first = list(read_rollouts(path, iteration=1))
    assert [r["group_id"] for r in first] == [rollouts[i].group_id for i in range(3)]
    assert rollouts[0].group_id == rollouts[1].group_id != rollouts[2].group_id
    for rec in first:
        r = rollouts[rec["rollout"]]
        assert (rec["task_id"], rec["seed"], rec["env_id"], rec["success"]) == (r.task_id, r.seed, TOY_ID, r.success)
        assert rec["return"] == pytest.approx(r.outcome)
        assert rec["advantages_skipped"].keys() == {"turn_ppo"} and "critic" in rec["advantages_skipped"]["turn_ppo"]
        assert len(rec["turns"]) == len(r.turn_spans)
        for k, (turn, (s, e)) in enumerate(zip(rec["turns"], r.turn_spans, strict=True)):
            assert turn["action"] == r.actions[k] == "".join(turn["tokens"])
            assert turn["tokens"] == token_texts(tok, r.response_ids[s:e]) and len(turn["tokens"]) == e - s
            assert same_f32(turn["advantages"], advs[rec["rollout"]][s:e])
            assert turn["advantages_by"].keys() == {"rloo"}
            assert same_f32(turn["advantages_by"]["rloo"], rloo[rec["rollout"]][s:e])
            assert turn["reward"] == r.turn_rewards[k]
            assert turn["reward_components"] == {"words": r.turn_rewards[k]}
            assert turn["correct"] == r.infos[k]["correct"] and turn["progress"] == (k + 1) / 2
            assert turn["observation_before"] == (r.initial_observation if k == 0 else r.observations[k - 1])
            assert "scored_reward" not in turn  # no scorer ran
        assert rec["turns"][-1]["success"] == r.success


def hand_rollout(group: int, action: str, reward: float) -> Rollout:
    """A one-turn rollout recorded as the rollout loop records it, with a real tokenizer's ids."""
    tok = build_tiny_tokenizer()
    ids = tok.encode(action, add_special_tokens=False)
    r = Rollout(prompt_ids=[1, 2], group_id=group, seed=group, task_id=str(group))
    r.initial_observation = [{"role": "user", "content": "go"}]
    r.response_ids, r.loss_mask, r.rollout_logprobs = list(ids), [1] * len(ids), [0.0] * len(ids)
    r.turn_spans, r.action_spans, r.actions = [(0, len(ids))], [(0, len(ids))], [action]
    r.turn_rewards, r.reward_components = [reward], [{"outcome": reward}]
    r.infos, r.observations, r.anchors, r.terminated = [{"success": reward > 0}], [[]], [None], True
    return r


def log(tmp_path: Path, it: int, rollouts: list[Rollout], advs: list[np.ndarray] | None = None, **kw: Any
        ) -> dict[str, float]:  # fmt: skip
    config = config_of(tmp_path, **kw)
    advs = compute_advantages(rollouts, config)[0] if advs is None else advs
    return log_rollouts(config, it, rollouts, advs, build_tiny_tokenizer())


def test_a_torn_last_line_is_skipped_and_cut_by_the_next_write(tmp_path):
    rollouts = [hand_rollout(0, "red blue", 1.0), hand_rollout(0, "red", 0.0)]
    log(tmp_path, 1, rollouts)
    path = tmp_path / "run" / ROLLOUTS_FILE
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:40])  # a kill mid-write of iteration 2
    assert [r["iteration"] for r in read_rollouts(path)] == [1, 1]
    log(tmp_path, 2, rollouts)
    lines = path.read_bytes().splitlines(keepends=True)
    assert [json.loads(line)["iteration"] for line in lines] == [1, 1, 2, 2]
    assert [r["rollout"] for r in read_rollouts(path, iteration=2)] == [0, 1]


def test_a_resumed_run_replaces_the_iterations_past_its_checkpoint(tmp_path):
    rollouts = [hand_rollout(0, "red blue", 1.0), hand_rollout(0, "red", 0.0)]
    for it in (1, 2, 3):
        log(tmp_path, it, rollouts)
    log(tmp_path, 2, rollouts[:1], log_rollouts_max=1)  # resumed from iteration 1's checkpoint
    path = tmp_path / "run" / ROLLOUTS_FILE
    assert [(r["iteration"], r["rollout"]) for r in read_rollouts(path)] == [(1, 0), (1, 1), (2, 0)]
    assert log(tmp_path, 2, rollouts, log_rollouts_every=3) == {}  # resumed again, logging 1, 4, 7, ...: 2 is not
    assert [(r["iteration"], r["rollout"]) for r in read_rollouts(path)] == [(1, 0), (1, 1)]


def test_the_cap_keeps_whole_groups_and_the_size_budget_stops_the_log(tmp_path):
    rollouts = [hand_rollout(g, "a b c"[: 1 + 2 * (i % 2)], float(i % 2)) for g in range(3) for i in range(2)]
    assert log(tmp_path, 1, rollouts, log_rollouts_max=4)["rollouts_logged"] == 4
    path = tmp_path / "run" / ROLLOUTS_FILE
    assert [r["group_id"] for r in read_rollouts(path)] == [0, 0, 1, 1]
    assert log(tmp_path, 2, rollouts, log_rollouts_every=0) == {}
    assert log(tmp_path, 4, rollouts, log_rollouts_every=2) == {}  # iterations 1, 3, 5, ...
    assert log(tmp_path, 3, rollouts, log_rollouts_every=2, log_rollouts_max=4)["rollouts_logged"] == 4
    with pytest.warns(UserWarning, match="log_rollouts_max_mb"):
        assert log(tmp_path, 5, rollouts, log_rollouts_max_mb=1e-6, log_rollouts_every=2)["rollouts_logged"] == 0
    assert [r["iteration"] for r in read_rollouts(path)] == [1] * 4 + [3] * 4


def test_records_are_strict_ascii_json_whatever_the_episode_holds(tmp_path):
    r = hand_rollout(0, "red", 1.0)
    r.actions = ["red \ud800"]  # a lone surrogate, as a decode can give
    r.turn_rewards = [float("nan")]
    r.reward_components = [{"outcome": float("inf")}]
    r.initial_observation = [{"role": "user", "content": "x" * 20_000}]
    other = hand_rollout(0, "blue", 0.0)
    log(tmp_path, 1, [r, other], [np.full(len(r.response_ids), np.nan), np.zeros(len(other.response_ids))])
    line = (tmp_path / "run" / ROLLOUTS_FILE).read_bytes().splitlines()[0]
    assert line.isascii()
    turn = json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the record"))["turns"][0]
    assert turn["reward"] is None and turn["reward_components"] == {"outcome": None}
    assert turn["advantages"] == [None] * len(r.response_ids)
    assert turn["action"] == "red \ud800"
    assert len(turn["observation_before"][0]["content"]) < 17_000


def test_unknown_estimators_to_compare_are_refused_when_the_config_is_built(tmp_path):
    with pytest.raises(ValueError, match="log_advantages_of: unknown estimators"):
        config_of(tmp_path, log_advantages_of=["no_such_estimator"])
    with pytest.raises(ValueError, match="log_advantages_of must be list"):
        config_of(tmp_path, log_advantages_of="grpo")
    with pytest.raises(ValueError, match="log_rollouts_every"):
        config_of(tmp_path, log_rollouts_every=-1)


@pytest.mark.slow
def test_branch_forks_name_the_rollout_and_turn_they_fork_from(tmp_path):
    """tree with branch_k=2 on Chain: the mains come first (fork_of null), then each fork's trained first turn, whose
    observation is the one its origin's turn answered; its group is its origin's."""
    config = TrainConfig.from_dict({"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2,
                                    "max_new_tokens": 6, "stop": ["</answer>"], "batch_tasks": 1, "group_size": 2,
                                    "minibatch_size": 2, "estimator": "tree", "branch_k": 2, "iterations": 1,
                                    "log_rollouts_max": 64, "log_advantages_of": ["grpo"], "plot": False,
                                    "progress": False, "out_dir": str(tmp_path / "run")})  # fmt: skip
    train(config)
    records = list(read_rollouts(tmp_path / "run" / ROLLOUTS_FILE))
    mains = [r for r in records if r["fork_of"] is None]
    forks = [r for r in records if r["fork_of"] is not None]
    assert [r["rollout"] for r in mains] == [0, 1] and len(forks) >= 2
    for f in forks:
        origin = records[f["fork_of"]["rollout"]]
        assert origin["fork_of"] is None and f["group_id"] == origin["group_id"]
        assert f["fork_of"]["k"] in (0, 1) and len(f["turns"]) == 1
        turn = f["fork_of"]["turn"]
        assert f["turns"][0]["observation_before"] == origin["turns"][turn]["observation_before"]
        assert "grpo" in f["advantages_skipped"] and "advantages_by" not in f["turns"][0]
    assert all(r["turns"][0]["advantages_by"].keys() == {"grpo"} for r in mains)


@pytest.mark.slow
def test_a_ppo_run_with_a_scorer_logs_the_scorer_and_a_critic_free_comparison(tmp_path):
    """PPO (a critic warmed up first) with the rule judge as turn scorer on Chain: each judged turn carries the
    scorer's reward, and grpo's advantages are logged beside PPO's (the critic's knobs do not block them)."""
    config = TrainConfig.from_dict({"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2,
                                    "max_new_tokens": 6, "stop": ["</answer>"], "batch_tasks": 1, "group_size": 2,
                                    "minibatch_size": 2, "algo": "ppo", "critic_warmup_steps": 1, "iterations": 1,
                                    "scorer": "turn_verdict", "scorer_kwargs": {"judge": "rule", "context": "turn"},
                                    "log_advantages_of": ["grpo"], "plot": False, "progress": False,
                                    "out_dir": str(tmp_path / "run")})  # fmt: skip
    train(config)
    records = list(read_rollouts(tmp_path / "run" / ROLLOUTS_FILE))
    assert len(records) == 2
    for rec in records:
        assert rec["advantages_skipped"] == {}
        for turn in rec["turns"]:
            assert isinstance(turn["scored_reward"], float)
            assert len(turn["advantages_by"]["grpo"]) == len(turn["tokens"]) == len(turn["advantages"])


def test_a_kill_at_any_byte_loses_at_most_the_last_record(tmp_path):
    """Whatever byte a kill stops the file at, the reader gives the records written whole before it, in order."""
    rollouts = [hand_rollout(0, "red blue \u00e9", 1.0), hand_rollout(0, "red", 0.0)]
    for it in range(1, 4):
        log(tmp_path, it, rollouts)
    whole = (tmp_path / "run" / ROLLOUTS_FILE).read_bytes()
    expected = [(it, i) for it in range(1, 4) for i in (0, 1)]
    path = tmp_path / "killed.jsonl"

    @settings(max_examples=100, deadline=None)
    @given(st.integers(0, len(whole)))
    def killed_at(cut: int) -> None:
        path.write_bytes(whole[:cut])
        read = [(r["iteration"], r["rollout"]) for r in read_rollouts(path)]
        whole_lines = whole[: cut + 1 if whole[cut : cut + 1] == b"\n" else cut].count(b"\n")  # only "\n" lost: whole
        assert read == expected[:whole_lines]

    killed_at()
