"""Where a run's turn signal comes from (the env's verified info key, corrupted at a known rate, or a turn scorer's
judged or learned rewards), the progress a binary signal implies, and the persistent scorers a learned signal needs."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages, turn_rewards, turn_signals
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer_methods import MethodState
from agentgym.envs.diagnostics.agents import RandomAgent
from agentgym.envs.diagnostics.chain import ChainEnv
from agentgym.envs.diagnostics.umbrella import UmbrellaEnv
from agentgym.rewards.advantages import signal_progress

CHAIN = {"env_id": "agentgym/Chain-v0", "estimator": "mt_grpo"}


def rollout(correct: list[bool | None], *, scored: list[float] | None = None, valid: list[bool] | None = None,
            outcome: float = 0.0, group: str = "g", seed: int = 3) -> Rollout:  # fmt: skip
    """A hand-built rollout of len(correct) one-token turns whose last turn pays ``outcome``."""
    n = len(correct)
    r = Rollout(prompt_ids=[1], group_id=group, seed=seed)
    r.infos = [{"correct": c} for c in correct]
    r.turn_rewards = [0.0] * (n - 1) + [outcome]
    r.reward_components = [{}] * (n - 1) + [{"outcome": outcome}]
    r.turn_spans = [(t, t + 1) for t in range(n)]
    r.response_ids = list(range(n))
    r.loss_mask = [1] * n
    r.scored_rewards = list(scored or [])
    r.scored_valid = list(valid or [])
    return r


@pytest.mark.parametrize("env_cls", [ChainEnv, UmbrellaEnv])
def test_signal_progress_of_the_verified_signal_is_the_envs_progress(env_cls):
    """Fed the diagnostics' info["correct"], signal_progress gives exactly their info["progress"] increments, on
    episodes of a random agent (mistakes, invalid replies and distractor stages included)."""
    for seed in range(30):
        env = env_cls(horizon=6, num_options=3)
        agent = RandomAgent(malformed=0.1)
        obs, info = env.reset(seed=seed)
        agent.reset(seed=seed)
        correct, progress = [], [info["progress"]]
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(agent.act(obs, info))
            correct.append(info["correct"])
            progress.append(info["progress"])
            done = term or trunc
        rows = [[None if c is None else float(c) for c in correct]]
        expected = [b - a for a, b in itertools.pairwise(progress)]
        assert signal_progress(rows)[0] == pytest.approx(expected, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0, None]), min_size=1, max_size=12), min_size=1, max_size=4))
def test_signal_progress_sums_to_whether_every_signal_passed(rows):
    for row, rewards in zip(rows, signal_progress(rows), strict=True):
        passed = all(x != 0.0 for x in row) and any(x is not None for x in row)
        assert math.fsum(rewards) == pytest.approx(1.0 if passed else 0.0)


def test_signal_progress_refuses_a_non_binary_signal():
    with pytest.raises(ValueError, match="not a binary signal"):
        signal_progress([[1.0, 0.5]])


def test_a_scorer_signal_is_read_with_its_unscored_turns_missing_and_not_added_to_the_rewards():
    base = {**CHAIN, "scorer": "info_gain", "turn_signal_source": "scorer"}
    config = TrainConfig(**base)
    r = rollout([True, False, True], scored=[1.0, 0.0, 1.0], valid=[True, False, True], outcome=1.0)
    assert turn_signals([r], config) == [[1.0, None, 1.0]]
    assert turn_rewards(r, config) == [0.0, 0.0, 1.0]  # the scorer counts through the signal only
    assert turn_rewards(r, TrainConfig(**{**base, "turn_signal_source": "info"})) == [1.0, 0.0, 2.0]
    delta = TrainConfig(**base, turn_signal_mode="delta")
    assert turn_signals([rollout([None] * 3, scored=[0.5, 0.75, 0.25])], delta) == [[0.5, 0.25, -0.5]]


def test_signal_source_settings_are_checked():
    with pytest.raises(ValueError, match="turn_signal_source 'scorer' needs a scorer"):
        TrainConfig(**CHAIN, turn_signal_source="scorer")
    with pytest.raises(ValueError, match="turn_signal_source must be"):
        TrainConfig(**CHAIN, turn_signal_source="judge")
    with pytest.raises(ValueError, match="turn_signal_flip needs a reader"):
        TrainConfig(env_id="agentgym/Chain-v0", estimator="gtpo", turn_signal_flip=0.1)
    with pytest.raises(ValueError, match="signal_progress_coef must be"):
        TrainConfig(**CHAIN, signal_progress_coef=-1.0)
    TrainConfig(env_id="agentgym/Chain-v0", algo="ppo", estimator="turn_ppo", signal_progress_coef=1.0,
                turn_signal_flip=0.3)  # fmt: skip


def test_signal_progress_joins_the_training_rewards_from_the_corrupted_signal():
    """turn_ppo's rewards gain coef x the signal's progress; with every signal flipped, a clean episode's progress
    becomes that of an episode failed at turn 1 (a reward of 0 then, every later turn 0)."""
    base = {"env_id": "agentgym/Chain-v0", "algo": "ppo", "estimator": "turn_ppo", "signal_progress_coef": 2.0,
            "whiten_advantages": False, "gamma": 1.0, "lam": 1.0}  # fmt: skip
    r = rollout([True, True, True, True], outcome=1.0)
    values = [np.zeros(4)]
    advs, _ = compute_advantages([r], TrainConfig(**base), values)
    # rewards: 2 x 0.25 per turn, plus the outcome 1 on the last turn; returns-to-go with V = 0
    assert advs[0].tolist() == pytest.approx([3.0, 2.5, 2.0, 1.5])
    advs, _ = compute_advantages([r], TrainConfig(**base, turn_signal_flip=1.0), values)
    assert advs[0].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])


class Counting:
    """A learned scorer stand-in for the state-keeping contract: it counts the batches it has seen."""

    persistent = True

    def __init__(self) -> None:
        self.seen = 0

    def state_dict(self) -> dict:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.seen = state["seen"]


def test_a_persistent_scorer_is_built_once_and_its_state_survives_a_resume(tmp_path: Path):
    methods, builds = MethodState(), []

    def build() -> Counting:
        builds.append(1)
        return Counting()

    first = methods.turn_scorer(build)
    first.seen = 5
    assert methods.turn_scorer(build) is first and len(builds) == 1
    methods.save(tmp_path / "methods.pt")
    resumed = MethodState.load(tmp_path / "methods.pt")
    assert resumed.turn_scorer(build).seen == 5 and len(builds) == 2
    plain = MethodState()
    a, b = plain.turn_scorer(object), plain.turn_scorer(object)
    assert a is not b  # a scorer without persistent = True is built afresh each iteration


def test_signal_auc_of_a_flipped_oracle_is_one_minus_the_flip_rate():
    """The trainer's turn_signal_auc diagnostic: 1.0 for the verified signal itself; about 1 - p when each signal is
    flipped at rate p (binomial: 4,000 right and 4,000 wrong turns, sd under 0.01); None without a signal to read."""
    from agentgym.baselines.credit import separation_auc, signal_auc

    batch = [rollout([True, False] * 2000, seed=s) for s in range(2)]
    assert signal_auc(batch, TrainConfig(**CHAIN)) == 1.0
    for p in (0.1, 0.3, 0.5):
        assert abs(signal_auc(batch, TrainConfig(**CHAIN, turn_signal_flip=p)) - (1 - p)) < 0.03
    assert signal_auc(batch, TrainConfig(env_id="agentgym/Chain-v0", estimator="gtpo")) is None
    scored = rollout([True, False, True], scored=[0.9, 0.2, 0.1], valid=[True, True, False])
    # the scorer's rewards where no turn signal is read: 0.9 (right) beats 0.2 (wrong); the unscored turn is left out
    assert signal_auc([scored], TrainConfig(env_id="agentgym/Chain-v0", estimator="gtpo", scorer="info_gain")) == 1.0
    assert separation_auc([0.0, 1.0], [0.5]) == 0.5


def test_score_turns_reports_the_judges_counters_and_the_learned_scorers_fit():
    """A scorer's judge counters (``judge.stats()``) and a learned scorer's ``last_fit`` numbers join the iteration's
    metrics, next to the scorer's mean reward and invalid share."""
    from agentgym.baselines.credit import score_turns
    from agentgym.rewards.base import TurnScores
    from agentgym.rewards.judge import TurnVerdictScorer
    from agentgym.rewards.verdicts import RuleJudge

    class CountingJudge(RuleJudge):
        def stats(self) -> dict[str, int]:
            return {"requests": 3, "cache_hits": 1, "failures": 0}

    class Fitted:
        def __init__(self) -> None:
            self.judge = CountingJudge()
            self.last_fit = {"pairs": 4, "loss_after": 0.5, "converged": True, "note": "text"}

        def __call__(self, group):
            return [TurnScores("fitted", [1.0] * len(t.turns)) for t in group]

    r = rollout([True, False])
    r.initial_observation, r.observations, r.actions = [{"role": "user", "content": "go"}], [[], []], ["a", "b"]
    metrics = score_turns([r], TrainConfig(**CHAIN), None, None, Fitted())
    assert metrics == {"scorer_reward_mean": 1.0, "scorer_invalid_frac": 0.0, "judge_requests": 3.0,
                       "judge_cache_hits": 1.0, "judge_failures": 0.0, "scorer_fit_pairs": 4.0,
                       "scorer_fit_loss_after": 0.5}  # fmt: skip
    assert TurnVerdictScorer.persistent  # the trainer keeps it, so its judge's cache lasts the run


@pytest.mark.slow
def test_a_critic_warmed_on_the_judged_signal_equals_one_warmed_on_the_verified_signal(tmp_path: Path):
    """progress_td reading the rule judge's verdicts (turn_signal_source='scorer') warms its critic on the same returns
    as progress_td reading info['correct']: the warm-up scores its batches as the loop does (it used to find no
    verdicts there and fail on the progress they imply)."""
    from agentgym.baselines.trainer import train

    base = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 3}, "algo": "ppo", "estimator": "turn_ppo",
            "lam": 0.0, "value_lr": 1e-2, "reward_components": ["outcome"], "signal_progress_coef": 1.0,
            "critic_warmup_steps": 2, "detach_critic": True, "batch_tasks": 2, "group_size": 2, "max_turns": 3,
            "max_new_tokens": 6, "stop": ["</answer>"], "iterations": 1, "plot": False, "progress": False}  # fmt: skip
    judged = {"scorer": "turn_verdict", "scorer_kwargs": {"judge": "rule", "context": "turn"},
              "turn_signal_source": "scorer"}  # fmt: skip
    runs = {}
    for name, extra in (("info", {}), ("judge", judged)):
        train(TrainConfig.from_dict({**base, **extra, "out_dir": str(tmp_path / name)}))
        runs[name] = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    def numbers(line: dict) -> dict:  # what the runs computed, without clocks, the judge's counters and the log's size
        return {k: v for k, v in line.items() if isinstance(v, int | float) and not k.startswith(("time", "judge_",
                "scorer_", "rollouts_")) and "per_s" not in k}  # fmt: skip

    warm_info, warm_judge = numbers(runs["info"][0]), numbers(runs["judge"][0])
    assert any("warmup" in k for k in warm_info) and warm_info == warm_judge  # the critic's warm-up
    after_info, after_judge = numbers(runs["info"][1]), numbers(runs["judge"][1])
    assert after_info == {k: after_judge[k] for k in after_info}  # and the first iteration after it
