"""OPRL and SWEET-RL (baselines/learned_critics.py): the worked example, the property tests of their specs, the
privileged critic's learning on a toy where the gold names the right action, and runs inside the trainer."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.components import build_scorer
from agentgym.baselines.config import load_config
from agentgym.baselines.credit import score_turns, training_rollouts
from agentgym.baselines.learned_critics import (
    GOLD_HEADER,
    METHODS,
    OPRLScorer,
    SweetRLScorer,
    gold_message,
    pair_loss,
    preference_pairs,
    trajectory_outcome,
    turn_values,
    with_gold,
)
from agentgym.baselines.trainer import setup, train_iteration
from agentgym.baselines.trainer_methods import MethodState
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.advantages.multi_turn import mt_grpo
from agentgym.rewards.answer_scoring import render_trajectory
from agentgym.rewards.catalogue import collect
from agentgym.tools.tiny_model import build_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")
CHAIN = "agentgym/Chain-v0"


def play(task: int, rng: random.Random, horizon: int = 2, noise: float = 0.5) -> Trajectory:
    """One Chain-v0 episode of task ``task`` with options picked by ``rng`` (a stand-in for a sampling policy)."""
    env = gymnasium.make(CHAIN, horizon=horizon, noise=noise)
    obs, info = env.reset(seed=task, options={"task_index": task})
    traj = Trajectory(CHAIN, task, str(task), "random", obs, info)
    done = False
    while not done:
        options = obs[-1]["content"].rsplit("Options:", 1)[1].strip(" .").split()
        action = f"<answer> {rng.choice(options)} </answer>"
        obs, reward, terminated, truncated, step_info = env.step(action)
        traj.turns.append(Turn(action, obs, reward, terminated, truncated, step_info))
        done = terminated or truncated
    return traj


def batch(tasks: range, group: int, seed: int, **kw: Any) -> list[list[Trajectory]]:
    rng = random.Random(seed)
    return [[play(t, rng, **kw) for _ in range(group)] for t in tasks]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


@pytest.fixture(scope="module")
def groups():
    return batch(range(6), 4, seed=1)


# ------------------------------------------------------------------------------------------------ worked example


def test_worked_example_by_hand():
    """docs/learned-critics.md's example: two rollouts of one task, two turns each, beta = 0.5. Token log-ratios
    log(pi_phi / pi_ref): tau+ (success) [0.2, -0.1 | 0.3], tau- (failure) [-0.4 | 0.1, 0.4]."""
    plus = 0.5 * turn_values(torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64), [2, 1], "sum")
    minus = 0.5 * turn_values(torch.tensor([-0.4, 0.1, 0.4], dtype=torch.float64), [1, 2], "sum")
    assert plus.tolist() == pytest.approx([0.05, 0.15]) and minus.tolist() == pytest.approx([-0.2, 0.25])
    # trajectory DPO: -log sigmoid(0.2 - 0.05) = log(1 + e^-0.15)
    loss = pair_loss(plus.sum()[None], minus.sum()[None])
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-0.15)))
    assert float(loss) == pytest.approx(0.6210, abs=1e-4)
    # A = A_ep + omega * z(r_t), omega = 1: outcomes z = (+1, -1); turn 1 z(0.05, -0.2) = (+1, -1); turn 2
    # z(0.15, 0.25) = (-1, +1): the failed rollout's better second turn cancels its episode advantage there
    a = mt_grpo([1.0, 0.0], [plus.tolist(), minus.tolist()], ["q", "q"], final_turn="both", eps=0.0)
    assert np.allclose(a[0], [2.0, 0.0]) and np.allclose(a[1], [-2.0, 0.0])
    # SWEET-RL's parametrisation: the mean over each turn's tokens, beta = 1
    sweet = turn_values(torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64), [2, 1], "mean")
    assert sweet.tolist() == pytest.approx([0.05, 0.3])


def test_pairs_and_outcomes():
    assert preference_pairs([1.0, 0.0, 1.0, 0.5], 0, np.random.default_rng(0)) == [(0, 1), (0, 3), (2, 1), (2, 3),
                                                                                    (3, 1)]  # fmt: skip
    drawn = preference_pairs([1.0, 0.0, 1.0, 0.5], 2, np.random.default_rng(0))
    assert len(drawn) == 2 and set(drawn) <= {(0, 1), (0, 3), (2, 1), (2, 3), (3, 1)}
    assert preference_pairs([1.0, 1.0], 0, np.random.default_rng(0)) == []  # a tied group gives no pair
    t = Trajectory(CHAIN, 0, "0", "x", [], {}, turns=[
        Turn("a", [], 0.3, False, False, {"reward_components": {"format": 0.3}}),
        Turn("b", [], 1.0, True, False, {"reward_components": {"outcome": 1.0}})])  # fmt: skip
    assert trajectory_outcome(t) == 1.0 and trajectory_outcome(t, "nope") == pytest.approx(1.3)


# ------------------------------------------------------------------------------------------------ OPRL


def test_oprl_before_any_step_is_grpo(tiny, groups):
    """pi_phi = pi_ref: every r_t is exactly 0, so A = A_ep + omega * z(r_t) is GRPO's advantage on every turn."""
    scorer = OPRLScorer(*tiny, steps=0)
    scored = scorer.score_groups(groups)
    assert all(r == 0.0 for g in scored for s in g for r in s.rewards) and scorer.last_fit["pairs"] > 0
    for g, scores in zip(groups, scored, strict=True):
        outcomes = [trajectory_outcome(t) for t in g]
        a = mt_grpo(outcomes, [s.rewards for s in scores], [0] * len(g), final_turn="both")
        want = grpo(outcomes, [0] * len(g))
        assert all(np.array_equal(x, np.full(len(t.turns), w)) for x, w, t in zip(a, want, g, strict=True))


@pytest.mark.slow
def test_oprl_turn_rewards_sum_to_the_trajectory_log_ratio(tiny, groups):
    """After training (pi_phi != pi_ref), sum_t r_t is beta times the log-ratio of all the trajectory's action tokens,
    computed here by one plain forward of each model over the whole sequence (no batching, no logits_to_keep)."""
    model, tok = tiny
    scorer = OPRLScorer(model, tok, steps=2, lr=1e-3, beta=0.5, batch_size=3)
    scored = scorer.score_groups(groups)
    for traj, s in zip(groups[0], scored[0], strict=True):
        r = render_trajectory(traj, tok)
        ids = torch.tensor([r.ids])
        positions = [p for t in r.turns for p in range(*t.action_content)]
        with torch.no_grad():
            lp = [torch.log_softmax(m(ids).logits[0].double(), -1) for m in (scorer.lm.model, scorer.lm.reference)]
        whole = sum(float(lp[0][p - 1, r.ids[p]] - lp[1][p - 1, r.ids[p]]) for p in positions)
        assert len(s.rewards) == len(traj.turns) and any(x != 0.0 for x in s.rewards)
        assert math.fsum(s.rewards) == pytest.approx(0.5 * whole, abs=1e-4)
    assert not any(p.requires_grad for p in scorer.lm.reference.parameters())
    assert all(torch.equal(a, b) for a, b in zip(scorer.lm.reference.parameters(), model.parameters(), strict=True))


@pytest.mark.slow
def test_oprl_dpo_loss_falls_on_a_separable_toy(tiny):
    """Chain-v0 pairs (every success over every failure of a task) are separable by their action tokens: the
    trajectory DPO loss falls and the training pairs end up ranked right (26 pairs: 0.693 -> 0.042). Called under
    no_grad, as the trainer's score_turns calls it: the fit turns gradients back on for itself."""
    toy = batch(range(8), 4, seed=3, horizon=1)
    scorer = OPRLScorer(*tiny, steps=6, lr=1e-3, beta=1.0, pairs_per_group=0)
    with torch.no_grad():
        scorer.score_groups(toy)
    fit = scorer.last_fit
    assert fit["pairs"] >= 8 and fit["loss_before"] == pytest.approx(math.log(2))
    assert fit["loss_after"] < 0.5 * fit["loss_before"] and fit["accuracy_after"] == 1.0


@pytest.mark.slow
def test_the_scorer_persists_its_state(tiny, groups):
    """state_dict / load_state_dict carry pi_phi, pi_ref, the optimiser and the fit count: a restored scorer scores
    as the original does, and its next pair draws follow from the same (seed, fits)."""
    model, tok = tiny
    a = OPRLScorer(model, tok, steps=1, lr=1e-3)
    a.score_groups(groups)
    b = OPRLScorer(model, tok, steps=1, lr=1e-3)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.fits == 1
    ra, rb = a.score_groups(groups), b.score_groups(groups)
    assert [s.rewards for g in ra for s in g] == [s.rewards for g in rb for s in g]


# ------------------------------------------------------------------------------------------------ SWEET-RL


def test_gold_goes_to_the_critic_alone(tiny, groups):
    """The critic's text starts with the rendered gold; the trajectory it was given is left as it was."""
    traj = groups[0][0]
    before = copy.deepcopy(traj)
    scorer = SweetRLScorer(*tiny, steps=0)
    text = scorer.text_of(traj)
    assert text.initial_observation[0] == {"role": "system", "content": gold_message(traj.reset_info["gold"])}
    assert text.initial_observation[1:] == traj.initial_observation and traj == before
    sys_first = Trajectory(CHAIN, 0, "0", "x", [{"role": "system", "content": "Be brief."}], {})
    assert with_gold(sys_first, "G").initial_observation == [{"role": "system", "content": "Be brief.\n\nG"}]
    assert SweetRLScorer(*tiny, show_gold=False).text_of(traj) is traj
    with pytest.raises(ValueError, match="reset_info"):
        scorer.text_of(Trajectory(CHAIN, 0, "0", "x", traj.initial_observation, {}))


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def sweet_config(tmp_path, **kw: Any):
    overrides = {"env_id": CHAIN, "env_kwargs": {"horizon": 2, "noise": 0.5}, "out_dir": str(tmp_path),
                 "batch_tasks": 2, "group_size": 3, "max_turns": 2, "max_new_tokens": 8, "plot": False,
                 "progress": False, "scorer": "agentgym.baselines.learned_critics:SweetRLScorer",
                 "scorer_kwargs": {"steps": 1, "lr": 1e-3}, "estimator": "mt_grpo",
                 "estimator_kwargs": {"final_turn": "both"}, "turn_signal_source": "scorer", **kw}  # fmt: skip
    return load_config("tiny", overrides=overrides)


@pytest.mark.slow
def test_the_policy_never_reads_gold(tmp_path):
    """On the trainer's own rollouts (Chain-v0, whose reset info holds the gold choices), no policy input holds the
    gold message, while every critic input does; scoring leaves the rollouts' text as it was."""
    config = sweet_config(tmp_path)
    state = setup(config)
    rollouts = training_rollouts(state, config, [11, 12], sample_seed=5, group_offset=0)
    before = copy.deepcopy([(r.initial_observation, r.reset_info, r.observations, r.input_ids) for r in rollouts])
    scorer = build_scorer(config.scorer, config.scorer_kwargs, state.model, state.tokenizer)
    assert isinstance(scorer, SweetRLScorer) and scorer.lm.tokenizer is state.tokenizer
    metrics = score_turns(rollouts, config, state.model, state.tokenizer, scorer)
    assert metrics["scorer_invalid_frac"] == 0.0 and scorer.fits == 1
    header = state.tokenizer(GOLD_HEADER, add_special_tokens=False)["input_ids"]
    for r in rollouts:
        gold = state.tokenizer(gold_message(r.reset_info["gold"]), add_special_tokens=False)["input_ids"]
        assert not _contains(r.input_ids, header) and not _contains(r.input_ids, gold)
        assert "training-time" not in state.tokenizer.decode(r.input_ids)
        critic_ids = list(scorer.lm.encode(scorer.text_of(r.to_trajectory(CHAIN))).ids)
        assert _contains(critic_ids, header) and _contains(critic_ids, gold)  # the check can fail: the critic has it
        assert len(r.scored_rewards) == len(r.turn_spans)
    assert before == [(r.initial_observation, r.reset_info, r.observations, r.input_ids) for r in rollouts]


@pytest.mark.slow
def test_sweet_rl_is_deterministic_under_a_seed(tiny, groups):
    """The same seed, model and batch give the same critic, the same fit numbers and the same turn advantages
    (also for the tiny critic, whose weights the seed draws)."""
    for kw in ({}, {"critic": "tiny", "seed": 3}):
        runs = [SweetRLScorer(*tiny, steps=2, lr=1e-3, pairs_per_group=2, **kw) for _ in range(2)]
        out = [[s.rewards for g in r.score_groups(groups) for s in g] for r in runs]
        assert out[0] == out[1] and runs[0].last_fit == runs[1].last_fit and runs[0].last_fit["pairs"] > 0


def sweet_learning(tiny: tuple[Any, Any], show_gold: bool, iterations: int) -> dict[str, dict[str, float]]:
    """A SWEET-RL critic (the tiny model) fitted ``iterations`` times, each on a fresh batch of 16 training tasks x 4
    random rollouts of Chain-v0 with one stage of two options and noise 0.5 (the shown signal names the right option
    half the time; only the gold always does). Its pair loss and accuracy on 60 held-out tasks x 4 rollouts, before
    and after, over all of them and over the tasks whose signal misleads (where following the signal ranks pairs
    wrong: only the gold can rank them right)."""
    held = batch(range(100_000, 100_060), 4, seed=7, horizon=1)
    misled = [g for g in held if g[0].reset_info["gold"]["misleading"][0]]
    scorer = SweetRLScorer(*tiny, steps=4, lr=3e-3, beta=1.0, pairs_per_group=0, batch_size=64, show_gold=show_gold)
    out = {"before": scorer.evaluate(held)}
    for it in range(iterations):
        scorer.score_groups(batch(range(16 * it, 16 * it + 16), 4, seed=it, horizon=1))
    return {**out, "after": scorer.evaluate(held), "misled": scorer.evaluate(misled)}


@pytest.mark.slow
def test_sweet_rl_critic_learns_from_gold(tiny):
    """Where only the gold names the right option, the critic's pair accuracy on held-out tasks rises from chance and
    its Bradley-Terry loss falls, also on the tasks whose signal misleads, which a critic reading the signal would
    rank wrong (docs/learned-critics.md, 'Does the critic use the gold?': about 0.7 after 40 to 80 fits, not 1; the
    same critic without the gold stays near 0.5)."""
    got = sweet_learning(tiny, show_gold=True, iterations=40)
    before, after, misled = got["before"], got["after"], got["misled"]
    assert before["accuracy"] == 0.5 and before["loss"] == pytest.approx(math.log(2)) and before["pairs"] >= 100, got
    assert after["accuracy"] >= 0.65 and after["loss"] < math.log(2) - 0.1, got
    assert misled["pairs"] >= 30 and misled["accuracy"] >= 0.6, got


# ------------------------------------------------------------------------------------------------ cards, trainer


def test_cards():
    cards = {c.name: c for c in collect([__import__("agentgym.baselines.learned_critics", fromlist=["x"])])}
    assert set(cards) == {"oprl", "sweet_rl"} and {c.name for c in METHODS} == set(cards)
    assert cards["oprl"].load() is OPRLScorer and cards["sweet_rl"].load() is SweetRLScorer
    assert {"beta", "lr", "steps", "pairs_per_group"} <= set(cards["oprl"].knobs())
    assert "policy" not in cards["oprl"].knobs() and "critic" in cards["sweet_rl"].knobs()
    for card in cards.values():
        assert card.paper is not None and card.choices and card.train["turn_signal_source"] == "scorer"


@pytest.mark.slow
def test_the_trainer_keeps_one_scorer_across_iterations(tmp_path):
    """Two iterations of the trainer with OPRL (mt_grpo reading its rewards as the turn signal): the scorer is built
    once (persistent) and fits on each iteration's batch."""
    config = sweet_config(tmp_path, scorer="agentgym.baselines.learned_critics:OPRLScorer")
    state, methods = setup(config), MethodState()
    m1 = train_iteration(state, config, 1, methods)
    scorer = methods.scorer
    m2 = train_iteration(state, config, 2, methods)
    assert isinstance(scorer, OPRLScorer) and methods.scorer is scorer and scorer.fits == 2
    assert m1["scorer_invalid_frac"] == m2["scorer_invalid_frac"] == 0.0
