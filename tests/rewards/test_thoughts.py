"""TP-GRPO's thought segments: the spec's worked example, the capability-adaptive weight, unlabelled turns, and the
trainer's scorer (labels from the env's info, the running success rate)."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import TurnScores
from agentgym.rewards.catalogue import collect
from agentgym.rewards.process import ComponentScorer, TransformedScorer
from agentgym.rewards.thoughts import ThoughtScorer, ThoughtSegments, thoughts


def test_spec_example_three_thoughts_split_after_turns_two_and_four():
    labels = [1, 1, 0, 0, 1]
    assert thoughts(labels) == [(0, 2, 1.0), (2, 4, 0.0), (4, 5, 1.0)]
    r = ThoughtSegments()(labels)
    # shares 2/5, 2/5, 1/5 with signs +, -, +; every turn of a thought gets the thought's reward
    assert r == [0.4, 0.4, -0.4, -0.4, 0.2]
    assert r[0] == r[1] and r[2] == r[3] and r[1] != r[2] and r[3] != r[4]
    assert ThoughtSegments(share=False)(labels) == [1.0, 1.0, -1.0, -1.0, 1.0]


def test_capability_adaptive_weight():
    assert ThoughtSegments(p_hat=1.0)([1, 1, 0, 0, 1]) == [0.0] * 5  # p_hat = 1: outcome only
    assert ThoughtSegments(p_hat=0.75)([1, 0]) == [0.125, -0.125]  # w = 0.25, shares 1/2
    with pytest.raises(ValueError, match="p_hat"):
        ThoughtSegments(p_hat=1.5)


def test_threshold_unlabelled_turns_and_scores():
    # a judge's scores: >= 0.5 is right; the NaN turn is invalid and splits [0.9, nan, 0.8] into two thoughts
    r = ThoughtSegments()([0.9, float("nan"), 0.8, 0.1])
    assert r[0] == pytest.approx(1 / 3) and math.isnan(r[1]) and r[2] == pytest.approx(1 / 3)
    assert r[3] == pytest.approx(-1 / 3)
    scores = ThoughtSegments()(TurnScores("judge", [1.0, float("nan")]))
    assert scores.valid == [True, False] and scores.rewards[0] == 1.0


def _traj(labels: list[bool | None], success: bool) -> Trajectory:
    turns = [Turn("a", [], 0.0, k == len(labels) - 1, False, {"correct": x}) for k, x in enumerate(labels)]
    turns[-1].info = {**turns[-1].info, "success": success}
    return Trajectory("e", 0, "t", "x", [], {}, turns)


def test_scorer_reads_info_labels_and_tracks_the_success_rate():
    scorer = ThoughtScorer(momentum=0.5)
    group = [_traj([True, True, False], False), _traj([True, True, True], True)]
    (first,) = scorer.score_groups([group])
    # the first batch's rate is p_hat = 1/2: w = 1/2; thoughts [T, T], [F] -> +2/3, -1/3; [T, T, T] -> +1
    assert first[0].rewards == pytest.approx([1 / 3, 1 / 3, -1 / 6]) and first[1].rewards == pytest.approx([0.5] * 3)
    assert first[0].extras["p_hat"] == 0.5
    # a batch where every rollout succeeds: p_hat <- 0.5 * 0.5 + 0.5 * 1 = 0.75
    second = scorer.score_group([_traj([True, False], True)])
    assert scorer.p_hat == 0.75 and second[0].rewards == pytest.approx([0.125, -0.125])
    # a run that always succeeds from the start: p_hat = 1, outcome only
    assert ThoughtScorer().score_group([_traj([False, True], True)])[0].rewards == [0.0, 0.0]
    # a turn without a label (a distractor stage: correct is None) is invalid, never a silent 0
    s = ThoughtScorer().score_group([_traj([True, None], False)])[0]
    assert s.valid == [True, False]


def test_over_any_label_scorer_and_on_chain():
    env = gym.make("agentgym/Chain-v0", horizon=3)
    obs, info = env.reset(options={"task_index": 0})
    turns = []
    for action in ["<answer> red </answer>", "<answer> purple </answer>", "<answer> nothing </answer>"]:
        o, r, term, trunc, step_info = env.step(action)
        turns.append(Turn(action, o, r, term, trunc, step_info))
    traj = Trajectory("agentgym/Chain-v0", 0, info["task_id"], "scripted", obs, info, turns)
    labels = ComponentScorer("correct", source="info")([traj])[0].rewards
    assert labels == [1.0, 0.0, 0.0]
    composed = TransformedScorer(ComponentScorer("correct", source="info"), ThoughtSegments(), "tp")([traj])[0]
    assert composed.rewards == pytest.approx([1 / 3, -2 / 3, -2 / 3])
    assert ThoughtScorer(labels="info:correct").score_group([traj])[0].rewards == composed.rewards


def test_card_and_knobs():
    import agentgym.rewards.thoughts as module

    (card,) = collect([module])
    assert card.name == "tp_grpo" and card.knobs() == {"labels": "info:correct", "share": True, "threshold": 0.5,
                                                       "momentum": 0.1}  # fmt: skip
    with pytest.raises(ValueError, match="labels"):
        ThoughtScorer(labels="correct")
