"""The trainer hands lampo, serl, hiper and dual_track what they read (``credit.estimator_fields``): hand-built
rollouts of one group, the fields checked by hand and the advantages compared with the estimator run directly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages, estimator_fields, reference_actions
from agentgym.baselines.rollout import Rollout


def rollout(actions: list[str], rewards: list[float], infos: list[dict[str, Any]], logprobs: list[float],
            texts: list[str]) -> Rollout:  # fmt: skip
    """Two sampled tokens per turn (log-probs ``logprobs[2k:2k+2]``), one env token between turns."""
    r = Rollout(prompt_ids=[1, 2], group_id="g", reset_info={"anchor": "s0"})
    r.initial_observation = [{"role": "user", "content": "start"}]
    for k, (action, reward, info, text) in enumerate(zip(actions, rewards, infos, texts, strict=True)):
        start = len(r.response_ids)
        r.response_ids += [5, 6]
        r.loss_mask += [1, 1]
        r.rollout_logprobs += logprobs[2 * k : 2 * k + 2]
        r.turn_spans.append((start, start + 2))
        r.actions.append(action)
        r.turn_rewards.append(reward)
        r.reward_components.append({"outcome": reward})
        r.anchors.append((r.infos[-1] if r.infos else r.reset_info).get("anchor"))
        r.infos.append(info)
        r.observations.append([{"role": "user", "content": text}])
        if k < len(actions) - 1:
            r.append_observation([9])
    return r


ROLLOUTS = [
    rollout(["<subgoal>look</subgoal> look", "take key", "<subgoal>go</subgoal> open"], [0.0, 0.0, 1.0],
            [{"anchor": "s1"}, {"anchor": "s1", "phase": "exploration"}, {"exploration_reward": 0.5}],
            [-1.0, -0.5, -0.25, -0.25, -2.0, 0.0], ["You see a key.", "Nothing happens.", "Done."]),
    rollout(["open", "<subgoal>retry</subgoal> open"], [0.0, 0.0], [{"parse_error": True}, {"anchor": "s2"}],
            [-3.0, -1.0, -1.0, -1.0], ["Bad format.", "Locked."]),
]  # fmt: skip


def config(estimator: str) -> TrainConfig:
    return TrainConfig.from_dict({"env_id": "agentgym/Umbrella-v0", "algo": "grpo", "estimator": estimator})


def test_fields_from_the_rollouts():
    # lampo: the mean sampled-token log-prob: (-1 - 0.5 - 0.25 - 0.25 - 2 + 0) / 6 = -4/6; (-3 - 1 - 1 - 1) / 4 = -1.5
    assert estimator_fields(ROLLOUTS, config("lampo"))["seq_logprobs"] == pytest.approx([-4 / 6, -1.5])
    # serl (all four features, mean of 4): rollout 0: step 0 anchor s0 -> s1 (1/4); step 1 "Nothing happens." (1/4);
    # step 2 anchor s1 -> None (1/4). rollout 1: step 0 parse error, anchor s0 -> None (2/4); step 1 None -> s2 (1/4)
    assert estimator_fields(ROLLOUTS, config("serl"))["criticality"] == [[0.25, 0.25, 0.25], [0.5, 0.25]]
    assert estimator_fields(ROLLOUTS, config("hiper"))["segments"] == [[0, 0, 1], [0, 1]]
    fields = estimator_fields(ROLLOUTS, config("dual_track"))
    assert fields["phases"] == [["exploration", "exploration", "execution"], ["exploration", "execution"]]
    assert fields["exploration_rewards"] == [0.5, 0.0]
    assert estimator_fields(ROLLOUTS, config("grpo")) == {}


@pytest.mark.parametrize("name", ["lampo", "serl", "hiper", "dual_track", "gopo"])
def test_compute_advantages_runs_each_estimator_on_its_fields(name):
    adv, rets = compute_advantages(ROLLOUTS, config(name))
    assert rets is None and [a.size for a in adv] == [len(r.response_ids) for r in ROLLOUTS]
    assert all(np.isfinite(a).all() for a in adv)
    assert all(np.all(a[np.asarray(r.loss_mask) == 0] == 0) for a, r in zip(adv, ROLLOUTS, strict=True))
    # the better rollout (outcome 1) gets a positive advantage on its final (execution) turn
    assert adv[0][ROLLOUTS[0].turn_spans[-1][0]] > 0 > adv[1][ROLLOUTS[1].turn_spans[-1][0]]


def knobs(estimator: str, env_id: str = "agentgym/Umbrella-v0", env_kwargs: dict[str, Any] | None = None,
          **kw: Any) -> TrainConfig:  # fmt: skip
    return TrainConfig.from_dict({"env_id": env_id, "env_kwargs": env_kwargs or {}, "algo": "grpo",
                                  "estimator": estimator, "estimator_kwargs": kw})  # fmt: skip


def test_lampo_reference_scores_from_the_gold_answer():
    a = rollout(["<search> q </search>", "<answer> the Eiffel Tower </answer>"], [0.0, 1.0], [{}, {}],
                [-1.0] * 4, ["r", "done"])  # fmt: skip
    b = rollout(["<answer> Tower </answer>"], [0.0], [{}], [-1.0] * 2, ["done"])
    c = rollout(["<search> q </search>"], [0.0], [{}], [-1.0] * 2, ["r"])
    for r in (a, b, c):
        r.reset_info = {"gold": {"answers": ["Eiffel Tower", "la tour Eiffel"]}}
    # a: "the eiffel tower" vs "eiffel tower": LCS 2, 2L/(m+n) = 4/5; b: "tower": 2/3 (vs "la tour eiffel": 0);
    # c: no <answer>: 0
    fields = estimator_fields([a, b, c], knobs("lampo", lam=0.5))
    assert fields["reference_scores"] == pytest.approx([0.8, 2 / 3, 0.0], abs=1e-15)
    assert "reference_scores" not in estimator_fields([a, b, c], knobs("lampo"))  # lam 0 reads no gold
    c.reset_info = {}
    with pytest.raises(ValueError, match="gold"):
        estimator_fields([c], knobs("lampo", lam=0.5))


def test_hiper_subgoal_achieved_from_plan_lengths():
    r = rollout(["<subgoal>a</subgoal> x", "y", "<subgoal>b</subgoal> z"], [0.0, 0.0, 1.0],
                [{"plan_length": 3}, {"plan_length": 2}, {"plan_length": 2}], [-1.0] * 6, ["o", "o", "o"])  # fmt: skip
    r.reset_info = {"plan_length": 4}
    # segment 0 (turns 0-1): 4 -> 2, achieved (1 on turn 1); segment 1 (turn 2): 2 -> 2, not
    fields = estimator_fields([r], knobs("hiper", achieved_bonus=1.0))
    assert fields["segments"] == [[0, 0, 1]] and fields["subgoal_achieved"] == [[0.0, 1.0, 0.0]]
    assert "subgoal_achieved" not in estimator_fields([r], knobs("hiper"))
    with pytest.raises(ValueError, match="plan_length"):
        estimator_fields(ROLLOUTS, knobs("hiper", achieved_bonus=1.0))


def test_serl_off_reference_from_the_expert_plan_and_the_demonstration():
    # Household-style infos: the oracle's action is the first command of the plan of the state before each turn
    r = rollout(["go to desk 1", "look"], [0.0, 1.0], [{"expert_plan": ["open drawer 1"]}, {"expert_plan": []}],
                [-1.0] * 4, ["o", "o"])  # fmt: skip
    r.reset_info = {"expert_plan": ["go to desk 1", "open drawer 1"]}
    fields = estimator_fields([r], knobs("serl", features=["off_reference"]))
    assert fields["criticality"] == [[0.0, 1.0]]  # agrees, then "look" departs from "open drawer 1"
    # without plans: SearchQA's demonstration agent plays the task of the rollout's seed; its turns are compared
    cfg = knobs("serl", "agentgym/SearchQA-v0", {"dataset": "tiny"}, features=["off_reference"])
    s = rollout(["<search> x </search>", "<answer> y </answer>", "<answer> z </answer>", "<answer> z </answer>"],
                [0.0] * 4, [{}] * 4, [-1.0] * 8, ["o"] * 4)  # fmt: skip
    s.seed = 3
    demo = reference_actions([s], cfg)[0]
    assert len(demo) == 4 and demo[-1] is None and all(x is not None for x in demo[:3])  # its episode: 3 turns
    s.actions[0] = f"<think>first hop</think> {demo[0]}"  # the demonstration's first search: agrees
    assert estimator_fields([s], cfg)["criticality"] == [[0.0, 1.0, 1.0, 0.0]]
