"""PPR (agentgym.rewards.principles): ReNorm's sign, monotonicity and NaN handling (hypothesis), a hand-worked
example, the rule judge reducing PPR to the verified turn signal on Chain-v0, and the principles prompt."""

import math

import gymnasium as gym
import pytest
from hypothesis import given, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import TurnScores
from agentgym.rewards.judge import render_gold
from agentgym.rewards.principles import DEFAULT_PRINCIPLES, PrincipleScorer, ReNorm
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict
from agentgym.running.runner import make_agent, run_episode

grades = st.floats(0.0, 1.0, allow_nan=False)
outcomes = st.sampled_from([0.0, 1.0])


@given(st.lists(grades, min_size=1, max_size=8), outcomes)
def test_the_sign_never_contradicts_the_outcome(p, outcome):
    r = ReNorm()(p, outcome)
    assert all(x <= 0.0 for x in r) if outcome == 0.0 else all(x >= 0.0 for x in r)
    assert all(-1.0 <= x <= 1.0 for x in r)


@given(st.lists(grades, min_size=1, max_size=8), st.floats(-3.0, 0.0), st.floats(1.0, 3.0))
def test_the_sign_holds_for_any_failure_at_or_below_0_and_success_at_or_above_1(p, failure, success):
    assert all(x <= 0.0 for x in ReNorm()(p, failure)) and all(x >= 0.0 for x in ReNorm()(p, success))


@given(grades, grades, outcomes)
def test_monotone_in_the_grade(p1, p2, outcome):
    lo, hi = sorted((p1, p2))
    assert ReNorm()([lo], outcome)[0] <= ReNorm()([hi], outcome)[0]


@given(st.lists(st.one_of(grades, st.just(math.nan)), min_size=1, max_size=6), outcomes)
def test_nan_stays_invalid(p, outcome):
    scores = ReNorm()(TurnScores("ppr", p), outcome)
    assert scores.valid == [not math.isnan(x) for x in p]
    assert all(math.isnan(r) for r, ok in zip(scores.rewards, scores.valid, strict=True) if not ok)


def test_hand_worked_example():
    """p = (0.75, 0.25, 1.0): a success gives r = p; a failure r = p - 1; offset 0.5 shifts every step by +0.5."""
    assert ReNorm()([0.75, 0.25, 1.0], outcome=1.0) == [0.75, 0.25, 1.0]
    assert ReNorm()([0.75, 0.25, 1.0], outcome=0.0) == [-0.25, -0.75, 0.0]
    assert ReNorm(offset=0.5)([0.75, 0.25, 1.0], outcome=0.0) == [0.25, -0.25, 0.5]
    with pytest.raises(ValueError, match="needs the trajectory's outcome"):
        ReNorm()([0.5])


class Grades:
    """A judge that grades by a table of prompts' last actions (a score verdict each; None: no verdict)."""

    name = "grades"

    def __init__(self, table):
        self.table = table
        self.asked = []

    def ask(self, questions):
        self.asked.append(list(questions))
        out = []
        for q in questions:
            value = self.table[q.prompt.split("### assistant\n")[-1].split("\n")[0]]
            out.append(Verdict(value) if value is not None else Verdict(None, error="no grade"))
        return out


def traj(actions, outcome):
    turns = [Turn(a, [{"role": "user", "content": "ok"}], 0.0, False, False, {}) for a in actions]
    turns[-1].info = {"reward_components": {"outcome": outcome}}
    return Trajectory("x", 0, "t", "a", [{"role": "user", "content": "task"}], {}, turns=turns)


def test_scorer_worked_example_one_batch_per_group():
    judge = Grades({"good": 0.75, "bad": 0.25, "broken": None})
    group = [traj(["good", "bad"], 1.0), traj(["bad", "broken"], 0.0)]
    win, loss = PrincipleScorer(judge)(group)
    assert len(judge.asked) == 1 and [q.kind for q in judge.asked[0]] == ["score"] * 4
    assert win.rewards == [0.75, 0.25] and win.all_valid and win.extras["p"] == [0.75, 0.25]
    assert loss.rewards[0] == -0.75 and math.isnan(loss.rewards[1]) and loss.valid == [True, False]
    assert loss.extras["errors"] == {"1": "no grade"} and loss.extras["outcome"] == 0.0
    raw = PrincipleScorer(judge, renorm=False)(group)[1]
    assert raw.rewards[0] == 0.25 and raw.valid == [True, False]


def test_prompt_lists_the_principles():
    t = traj(["good"], 1.0)
    prompt = PrincipleScorer(RuleJudge(), principles=("Be brief.", "Be right.")).prompt(t, 0)
    assert "1. Be brief.\n2. Be right.\nA turn that follows every principle gets 10" in prompt
    assert "### assistant\ngood" in prompt and "reference solution" not in prompt
    assert PrincipleScorer(RuleJudge()).principles == DEFAULT_PRINCIPLES
    with pytest.raises(ValueError, match="principles"):
        PrincipleScorer(RuleJudge(), principles=())
    assert isinstance(PrincipleScorer(RuleJudge()).questions(t)[0], Question)


def test_rule_judge_reduces_ppr_to_the_verified_signal():
    """On Chain-v0, the rule judge's p_t is info["correct"]: r_t = R + correct_t - 1 on every turn."""
    env = gym.make("agentgym/Chain-v0")
    trajs = [run_episode(env, make_agent(name, env), seed=s) for s in range(6) for name in ("oracle", "random")]
    env.close()
    outcomes = set()
    for t, s in zip(trajs, PrincipleScorer(RuleJudge())(trajs), strict=True):
        outcome = sum(turn.reward_components.get("outcome", 0.0) for turn in t.turns)
        outcomes.add(outcome)
        assert s.rewards == [outcome + float(turn.info["correct"]) - 1.0 for turn in t.turns] and s.all_valid
        assert all(r <= 0 for r in s.rewards) if outcome == 0.0 else all(r >= 0 for r in s.rewards)
    assert outcomes == {0.0, 1.0}
    shown = PrincipleScorer(RuleJudge(), show_gold=True).prompt(trajs[0], 0)
    assert render_gold(trajs[0].reset_info["gold"]) in shown


class AllYes:
    name = "all_yes"

    def ask(self, questions):
        return [Verdict(1.0) for _ in questions]


def test_an_all_yes_judge_pays_every_step_the_outcome():
    """p_t = 1 everywhere: r_t = R + 1 - 1 = R, the outcome broadcast to every step (GRPO's per-turn reward)."""
    group = [traj(["a", "b", "c"], 1.0), traj(["a"], 0.0)]
    win, loss = PrincipleScorer(AllYes())(group)
    assert win.rewards == [1.0, 1.0, 1.0] and loss.rewards == [0.0]
