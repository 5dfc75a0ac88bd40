"""SERL's two insertion granularities in the trainer (``credit.compute_advantages``): ``turn`` puts
``A^GRPO_i * w_{i,t}`` on every sampled token of turn t, ``token`` only on the turn's action tokens
(``Rollout.action_spans``, recorded by the rollout loop) and ``A^GRPO_i`` on its other tokens. Hand-built rollouts
with hand-computed tokens; the properties (kappa = 0 is GRPO at both granularities, reasoning tokens exactly
A^GRPO, action tokens A^GRPO * w, no sign flips); the spans the rollout loop records; a 2-iteration training run."""

from __future__ import annotations

import json
from typing import Any

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages
from agentgym.baselines.rollout import HFPolicy, Rollout, RolloutConfig, collect_rollouts, demonstration_episode
from agentgym.rewards.advantages import grpo
from agentgym.rewards.advantages.tokens import action_token_span

FAST = settings(max_examples=40, deadline=None, derandomize=True)


def rollout(turns: list[tuple[int, int, int]], invalid: list[bool], outcome: float) -> Rollout:
    """Turn k has ``turns[k] = (n, a, b)``: n sampled tokens, its action the tokens ``[a, b)`` of them; one env
    token between turns; the outcome on the last turn; ``invalid[k]``: the step's parse error."""
    r = Rollout(prompt_ids=[1, 2], group_id="g")
    for k, ((n, a, b), bad) in enumerate(zip(turns, invalid, strict=True)):
        start = len(r.response_ids)
        r.response_ids += [5] * n
        r.loss_mask += [1] * n
        r.rollout_logprobs += [-1.0] * n
        r.turn_spans.append((start, start + n))
        r.action_spans.append((start + a, start + b))
        r.actions.append("x")
        reward = outcome if k == len(turns) - 1 else 0.0
        r.turn_rewards.append(reward)
        r.reward_components.append({"outcome": reward})
        r.anchors.append(None)
        r.infos.append({"parse_error": True} if bad else {})
        r.observations.append([{"role": "user", "content": "ok"}])
        if k < len(turns) - 1:
            r.append_observation([9])
    return r


def config(**knobs: Any) -> TrainConfig:
    return TrainConfig.from_dict({"env_id": "agentgym/Umbrella-v0", "algo": "grpo", "estimator": "serl",
                                  "estimator_kwargs": {"features": ["invalid"], "eps": 0.0, **knobs}})  # fmt: skip


# R = [1, 0] in one group, eps = 0: A^GRPO = [1, -1]; kappa = 1, c = the invalid flag.
# rollout 0: c = [1, 0] -> w = [2, 1] / 1.5 = [4/3, 2/3] -> A = [4/3, 2/3]
# rollout 1: c = [0, 1] -> w = [1, 2] / 1.5 = [2/3, 4/3] -> A = -w = [-2/3, -4/3]
PAIR = [rollout([(4, 2, 4), (3, 0, 3)], [True, False], 1.0), rollout([(3, 1, 3), (2, 1, 2)], [False, True], 0.0)]


def test_turn_and_token_granularity_by_hand():
    turn, _ = compute_advantages(PAIR, config(granularity="turn"))
    # every sampled token of a turn gets its A; the env token between the turns 0
    assert turn[0].tolist() == pytest.approx([4 / 3] * 4 + [0.0] + [2 / 3] * 3, abs=1e-15)
    assert turn[1].tolist() == pytest.approx([-2 / 3] * 3 + [0.0] + [-4 / 3] * 2, abs=1e-15)
    default, _ = compute_advantages(PAIR, config())
    assert all(np.array_equal(a, b) for a, b in zip(turn, default, strict=True))  # "turn" is the default
    token, _ = compute_advantages(PAIR, config(granularity="token"))
    # rollout 0: turn 0 reasoning tokens 0-1 keep A^GRPO = 1, action tokens 2-3 get 4/3; turn 1 is all action: 2/3
    assert token[0].tolist() == pytest.approx([1.0, 1.0, 4 / 3, 4 / 3, 0.0, 2 / 3, 2 / 3, 2 / 3], abs=1e-15)
    # rollout 1: turn 0 = [-1 | -2/3, -2/3]; turn 1 = [-1 | -4/3]
    assert token[1].tolist() == pytest.approx([-1.0, -2 / 3, -2 / 3, 0.0, -1.0, -4 / 3], abs=1e-15)


def test_kappa_zero_is_grpo_at_both_granularities():
    grpo_cfg = TrainConfig.from_dict({"env_id": "agentgym/Umbrella-v0", "algo": "grpo", "estimator": "grpo",
                                      "estimator_kwargs": {"eps": 0.0}})  # fmt: skip
    want, _ = compute_advantages(PAIR, grpo_cfg)
    for granularity in ("turn", "token"):
        got, _ = compute_advantages(PAIR, config(kappa=0.0, granularity=granularity))
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True)), granularity


@st.composite
def groups(draw):
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        turns = []
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 4))
            a = draw(st.integers(0, n))
            turns.append((n, a, draw(st.integers(a, n))))
        invalid = draw(st.lists(st.booleans(), min_size=len(turns), max_size=len(turns)))
        rows.append(rollout(turns, invalid, draw(st.sampled_from([0.0, 0.5, 1.0]))))
    return rows


@FAST
@given(groups(), st.floats(0, 5))
def test_reasoning_tokens_keep_grpo_and_action_tokens_get_the_weight(rows, kappa):
    token, _ = compute_advantages(rows, config(kappa=kappa, granularity="token"))
    turn, _ = compute_advantages(rows, config(kappa=kappa, granularity="turn"))
    a_grpo = grpo([r.outcome for r in rows], ["g"] * len(rows), 0.0)
    for r, tk, tn, ag in zip(rows, token, turn, a_grpo, strict=True):
        for (s, e), (a, b) in zip(r.turn_spans, r.action_spans, strict=True):
            assert np.all(tk[s:a] == ag) and np.all(tk[b:e] == ag)  # reasoning: A^GRPO exactly
            assert np.array_equal(tk[a:b], tn[a:b])  # action: A^GRPO * w, the turn granularity's value
            assert np.all(np.sign(tk[s:e]) == np.sign(ag))  # no sign flips
        off = np.asarray(r.loss_mask) == 0
        assert np.all(tk[off] == 0) and np.isfinite(tk).all()


def test_token_granularity_needs_the_action_spans():
    bare = rollout([(2, 0, 2)], [False], 1.0)
    bare.action_spans = []  # a row made without recording them
    with pytest.raises(ValueError, match="action spans"):
        compute_advantages([bare, PAIR[1]], config(granularity="token"))
    compute_advantages([bare, PAIR[1]], config(granularity="turn"))  # the turn granularity does not read them
    with pytest.raises(ValueError, match="granularity"):
        compute_advantages(PAIR, config(granularity="tokens"))


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


def test_the_rollout_loop_records_the_action_tokens(policy):
    """Only when asked (RolloutConfig.action_spans, set by the trainer for serl at token granularity): finding the
    action takes a few decodes a turn. Unasked, each turn is its action whole."""
    make = lambda: gymnasium.make("agentgym/SearchQA-v0", dataset="tiny")
    plain = collect_rollouts(policy, make, [5], group_size=3, config=RolloutConfig(max_turns=2, max_new_tokens=12),
                             sample_seed=2)  # fmt: skip
    assert all(r.action_spans == r.turn_spans for r in plain)
    cfg = RolloutConfig(max_turns=2, max_new_tokens=12, action_spans=True)
    for r in collect_rollouts(policy, make, [5], group_size=3, config=cfg, sample_seed=2):
        assert len(r.action_spans) == len(r.turn_spans) and r.to_dict()["action_spans"] == [
            list(s) for s in r.action_spans
        ]
        for (s, e), (a, b) in zip(r.turn_spans, r.action_spans, strict=True):
            assert (a - s, b - s) == action_token_span(r.response_ids[s:e], policy.decode)
    # a demonstration turn: "<search> ... </search>" then <|end|>, all of it the action
    env = gymnasium.make("agentgym/SearchQA-v0", dataset="tiny")
    demo = demonstration_episode(policy, env, seed=5, config=cfg)
    assert demo is not None and demo.action_spans == demo.turn_spans
    env.close()
    # a turn with reasoning before its action: the action's tokens only
    r = Rollout(prompt_ids=[1])
    tokens = policy.encode("<think> who </think> <search> paris </search>")
    from agentgym.running.pool import Outcome

    r.record_outcome(tokens, [-1.0] * len(tokens), policy.decode(tokens), Outcome(0, "step", [], 0.0, False, False, {}),
                     action_token_span(tokens, policy.decode))  # fmt: skip
    assert r.action_spans == [(3, 6)] and r.turn_spans == [(0, 6)]
    with pytest.raises(ValueError, match="outside"):
        r.record_outcome([7], [-1.0], "x", Outcome(0, "step", [], 0.0, False, False, {}), (0, 2))


@pytest.mark.slow
def test_two_iterations_train_at_token_granularity(tmp_path, capsys):
    from agentgym.cli import main as cli_main

    sets = ["granularity=token", "batch_tasks=1", "group_size=2", "plot=false", "progress=false", "max_turns=2",
            "max_new_tokens=8"]  # fmt: skip
    argv = ["train", "--preset", "tiny", "--method", "serl", "--iterations", "2", "--out-dir", str(tmp_path)]
    assert cli_main([*argv, *(a for s in sets for a in ("--set", s))]) == 0, capsys.readouterr().err
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["estimator"] == "serl" and saved["estimator_kwargs"]["granularity"] == "token"
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(np.isfinite(v) for line in lines for v in json.loads(line).values()
                                   if isinstance(v, float))  # fmt: skip
