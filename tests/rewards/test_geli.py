"""GELI: the decomposition's worked example, recovery of known additive turn contributions, the sum matching the
dialogue reward on the fit data, the local term's pull, bounded replay, and real user-simulation dialogues."""

from __future__ import annotations

import pickle
import random

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.catalogue import collect
from agentgym.rewards.geli import GELIScorer
from agentgym.running.episode import make_agent, run_episode


def _dialogue(infos: list[dict], reward: float) -> Trajectory:
    turns = [Turn(f"say {k}", [], 0.0, False, False, dict(info)) for k, info in enumerate(infos)]
    turns[-1].info["reward_components"] = {"outcome": reward}
    return Trajectory("e", 0, "t", "x", [], {}, turns)


def test_worked_example():
    # every turn's reward is w (features: bias). L(w) = (1 - 2w)^2 + w^2 + lam (w^2 + (w - 1)^2 + w^2):
    # lam = 0: 10w - 4 = 0, w = 0.4; lam = 1: 16w - 6 = 0, w = 0.375
    group = [_dialogue([{"satisfaction": 0.0}, {"satisfaction": 1.0}], 1.0), _dialogue([{"satisfaction": 0.0}], 0.0)]
    plain = GELIScorer(features=("bias",), lam=0.0, ridge=0.0)(group)
    assert [s.rewards for s in plain] == [pytest.approx([0.4, 0.4]), pytest.approx([0.4])]
    shaped = GELIScorer(features=("bias",), lam=1.0, ridge=0.0)(group)
    assert [s.rewards for s in shaped] == [pytest.approx([0.375, 0.375]), pytest.approx([0.375])]


def _toy(n: int, seed: int) -> list[Trajectory]:
    """Dialogues whose reward is additive: 0.5 per turn, +2 per turn with a = 1, -1 per turn with b = 1."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        infos = [{"a": rng.randint(0, 1), "b": rng.randint(0, 1)} for _ in range(rng.randint(1, 5))]
        out.append(_dialogue(infos, sum(0.5 + 2 * i["a"] - i["b"] for i in infos)))
    return out


def test_lambda_zero_recovers_additive_contributions():
    group = _toy(30, seed=0)
    scorer = GELIScorer(features=("bias", "info:a", "info:b"), lam=0.0, ridge=0.0)
    scores = scorer(group)
    assert scorer.theta is not None and scorer.theta.tolist() == pytest.approx([0.5, 2.0, -1.0])
    for traj, s in zip(group, scores, strict=True):
        truth = [0.5 + 2 * t.info["a"] - t.info["b"] for t in traj.turns]
        assert s.rewards == pytest.approx(truth)
        assert sum(s.rewards) == pytest.approx(traj.turns[-1].info["reward_components"]["outcome"])
    assert scorer.last_fit["mse_global"] == pytest.approx(0.0, abs=1e-12)


def test_local_term_pulls_towards_the_local_signal():
    # the local signal disagrees with the additive truth; a huge lam makes r_theta follow it where it can
    group = _toy(30, seed=1)
    for traj in group:
        for t in traj.turns:
            t.info["satisfaction"] = float(t.info["b"])
    scorer = GELIScorer(features=("info:a", "info:b"), lam=1e6, ridge=0.0)
    scores = scorer(group)
    for traj, s in zip(group, scores, strict=True):
        assert s.rewards == pytest.approx([float(t.info["b"]) for t in traj.turns], abs=1e-3)
    assert scorer.last_fit["mse_local"] < 1e-6 < scorer.last_fit["mse_global"]


def test_replay_is_bounded_and_the_scorer_persists():
    scorer = GELIScorer(features=("bias", "info:a", "info:b"), replay=5)
    assert GELIScorer.persistent
    for seed in range(4):
        scorer.score_groups([_toy(3, seed)])
        assert scorer.memory == min(5, 3 * (seed + 1)) and scorer.last_fit["dialogues"] == scorer.memory
    copy = pickle.loads(pickle.dumps(scorer))
    assert copy.memory == 5 and np.array_equal(copy.theta, scorer.theta)
    with pytest.raises(ValueError, match="unknown features"):
        GELIScorer(features=("colour",))


def test_state_dict_resumes_the_replay_and_the_fit():
    # what the trainer saves with a checkpoint: a resumed run scores the next batch as the uninterrupted one does
    scorer, resumed = GELIScorer(replay=5), GELIScorer(replay=5)
    scorer.score_groups([_toy(4, seed=0)])
    resumed.load_state_dict(pickle.loads(pickle.dumps(scorer.state_dict())))
    assert resumed.memory == 4 and np.array_equal(resumed.theta, scorer.theta)
    nxt = _toy(3, seed=1)
    assert [s.rewards for s in resumed.score_groups([nxt])[0]] == [s.rewards for s in scorer.score_groups([nxt])[0]]
    assert resumed.memory == scorer.memory == 5


def test_user_sim_dialogues_sum_to_the_reward():
    env = gym.make("agentgym/Clarify-v0")
    group = [run_episode(env, make_agent(a, env), seed=s) for a in ("oracle", "heuristic", "random") for s in (0, 1)]
    scorer = GELIScorer(lam=0.0, ridge=1e-9)  # the default text features: more of them than dialogues
    for traj, s in zip(group, scorer(group), strict=True):
        assert sum(s.rewards) == pytest.approx(sum(t.reward_components.get("outcome", 0.0) for t in traj.turns),
                                               abs=1e-4)  # fmt: skip
        assert s.extras["local"] == [t.info["satisfaction"] for t in traj.turns]
    shaped = GELIScorer(lam=1.0)
    shaped(group)
    assert shaped.last_fit["mse_global"] < 0.1


def test_card():
    import agentgym.rewards.geli as module

    (card,) = collect([module])
    assert card.name == "geli" and card.knobs()["lam"] == 1.0 and card.train["env_id"] == "agentgym/Clarify-v0"
