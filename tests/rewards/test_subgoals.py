"""CALM (docs/grounded-rewards.md, 'CALM'): the worked example by hand, each subgoal paying at most once (so the total
is at most beta * #subgoals), unknown verdicts marked invalid, and the planner's decomposition with the rule judge
reproducing the planner's completion turns on Household-v0 (every task type)."""

import math

import gymnasium as gym
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import subgoals as subgoals_module
from agentgym.rewards.catalogue import collect
from agentgym.rewards.subgoals import SubgoalScorer, first_yes
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict

TAKE = {"text": "take an apple", "require": [{"name": "apple", "attributes": {"location": "agent"}}]}
HEAT = {"text": "heat the apple", "require": [{"name": "apple", "attributes": {"temperature": "hot"}}]}


def facts(location, temperature="room temperature"):
    return {"state_facts": [{"name": "apple", "attributes": {"location": location, "temperature": temperature}}]}


def trajectory(states, plan=(TAKE, HEAT)):
    turns = [Turn(f"action {t}", [{"role": "user", "content": f"obs {t}"}], 0.0, False, False, facts(*s))
             for t, s in enumerate(states)]  # fmt: skip
    return Trajectory("e", 0, "t", "a", [{"role": "user", "content": "heat an apple"}],
                      {"gold": {"subgoals": list(plan)}, **facts("table")}, turns=turns)  # fmt: skip


def test_worked_example_by_hand():
    """Turns: go (table), take (agent), heat (agent, hot), put down (table, hot), take again (agent, hot).
    take pays at turn 1 only (turn 4 re-achieves it), heat at turn 2: beta = 0.25 gives [0, .25, .25, 0, 0]."""
    states = [("table",), ("agent",), ("agent", "hot"), ("table", "hot"), ("agent", "hot")]
    (scores,) = SubgoalScorer(beta=0.25)([trajectory(states)])
    assert scores.rewards == [0.0, 0.25, 0.25, 0.0, 0.0]
    assert scores.extras["achieved_at"] == [1, 2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["table", "agent", "fridge"]), st.sampled_from(["hot", "cold"])),
                min_size=1, max_size=12), st.floats(0.01, 5.0))  # fmt: skip
def test_each_subgoal_pays_at_most_once(states, beta):
    (scores,) = SubgoalScorer(beta=beta)([trajectory(states)])
    paid = [t for t in scores.extras["achieved_at"] if t is not None]
    assert sum(r > 0 for r in scores.rewards) <= 2
    assert math.fsum(scores.rewards) == pytest.approx(beta * len(paid))
    assert math.fsum(scores.rewards) <= 2 * beta + 1e-12


class Unsure:
    """A judge that cannot answer the question about one (turn, subgoal) and answers the rest by the rule."""

    name = "unsure"

    def __init__(self, turn, subgoal):
        self.turn, self.subgoal = turn, subgoal

    def ask(self, questions):
        out = RuleJudge().ask(questions)
        unsure = (f"action:\naction {self.turn}\n", f"Subgoal: {self.subgoal}\n")
        return [Verdict(None, error="no answer") if all(s in q.prompt for s in unsure) else v
                for q, v in zip(questions, out, strict=True)]  # fmt: skip


def test_an_unknown_verdict_makes_the_turns_it_decides_invalid():
    """take is achieved at turn 1; the judge cannot say for turn 0: turns 0 and 1 are unknown (NaN), the heat
    reward at turn 2 is still paid."""
    states = [("table",), ("agent",), ("agent", "hot")]
    (scores,) = SubgoalScorer(judge=Unsure(0, "take an apple"), beta=1.0)([trajectory(states)])
    assert scores.valid == [False, False, True]
    assert math.isnan(scores.rewards[0]) and math.isnan(scores.rewards[1]) and scores.rewards[2] == 1.0


def test_a_text_subgoal_without_a_rule_is_invalid_under_the_rule_judge():
    (scores,) = SubgoalScorer(decompose=lambda traj: ["heat the apple"])([trajectory([("table",), ("agent",)])])
    assert scores.valid == [False, False]


def test_first_yes():
    assert first_yes([0.0, 0.0]) == (None, [])
    assert first_yes([None, 1.0, 0.0]) == (None, [0, 1])


class CountingJudge:
    """Answers by rule, counting the questions (a judge sees every (turn, subgoal) once)."""

    name = "counting"

    def __init__(self):
        self.questions: list[Question] = []

    def ask(self, questions):
        self.questions += questions
        return RuleJudge().ask(questions)


def expert_trajectory(env, task_index):
    obs, info = env.reset(seed=0, options={"task_index": task_index})
    traj = Trajectory("agentgym/Household-v0", 0, info["task_id"], "expert", obs, info)
    plan = list(info["expert_plan"])
    for action in plan:
        obs, r, term, trunc, step_info = env.step(action)
        traj.turns.append(Turn(action, obs, r, term, trunc, step_info))
    assert traj.turns[-1].info["won"]
    return traj, plan


def planner_completion_turns(task_type, target, plan):
    """When the planner's plan completes each of its subgoals, read from its commands alone: the take of a target
    object, the heat/cool/clean command, the put; for the light task the last command (the lamp lights up)."""
    takes = [i for i, c in enumerate(plan) if c.startswith(f"take {target} ")]
    puts = [i for i, c in enumerate(plan) if c.startswith(f"put {target} ") or c.startswith(f"move {target} ")]
    if task_type == "look_at_obj_in_light":
        return [takes[0], len(plan) - 1]
    if task_type == "pick_two_obj_and_place":
        return [takes[0], puts[0], takes[1], puts[1]]
    verbs = [i for i, c in enumerate(plan) if c.split()[0] in ("heat", "cool", "clean")]
    return [takes[0], *verbs[:1], puts[-1]]


def test_planner_decomposition_reproduces_the_planner_completion_turns():
    env = gym.make("agentgym/Household-v0", split="train", state_facts=True, expert_plan=True)
    seen: dict[str, int] = {}
    for index in range(60):
        traj, plan = expert_trajectory(env, index)
        kind = traj.reset_info["task_type"]
        if seen.get(kind, 0) >= 2:
            continue
        seen[kind] = seen.get(kind, 0) + 1
        judge = CountingJudge()
        (scores,) = SubgoalScorer(judge=judge, beta=1.0)([traj])
        expected = planner_completion_turns(kind, traj.reset_info["gold"]["object"], plan)
        assert scores.extras["achieved_at"] == expected, (kind, plan)
        assert len(judge.questions) == len(plan) * len(expected)
        assert scores.rewards == [float(expected.count(t)) for t in range(len(plan))]
    assert len(seen) == 6


def test_missing_subgoals_are_an_error():
    traj = trajectory([("table",)])
    traj.reset_info["gold"] = {}
    with pytest.raises(KeyError, match="state_facts=True"):
        SubgoalScorer()([traj])


def test_card():
    (card,) = collect([subgoals_module])
    assert card.name == "calm" and card.load() is SubgoalScorer and "beta" in card.knobs()


def test_an_all_yes_llm_judge_pays_every_subgoal_once_on_the_first_turn():
    """An LLM judge over HTTP (a served rule judge that always says yes): each subgoal's first yes is turn 0."""
    from rule_judge import serve_rule_judge

    from agentgym.rewards.judge import LLMJudge
    from agentgym.tools.llm import LLMClient

    with serve_rule_judge(lambda system, user: "Answer: yes") as server:
        judge = LLMJudge(LLMClient(server.url, api_key_env=None, max_retries=0))
        states = [("table",), ("agent",), ("agent", "hot")]
        (scores,) = SubgoalScorer(judge=judge, beta=0.5)([trajectory(states)])
    assert scores.rewards == [1.0, 0.0, 0.0] and scores.extras["achieved_at"] == [0, 0]
    assert "Subgoal: take an apple" in "".join(server.requests)


def test_an_llm_decomposition_with_a_perfect_llm_judge_reproduces_the_verified_rewards():
    """decomposition='llm': a served model lists the subgoals (asked once per task) and judges each transition
    from the prompt alone (yes for 'take' at the take step, for 'heat' at the heat step). With that perfect judge the
    rewards equal the rule judge's on the gold subgoals (the verified variant)."""
    from rule_judge import serve_rule_judge

    from agentgym.rewards.judge import LLMJudge
    from agentgym.tools.llm import LLMClient

    def reply(system, user):
        if "Break the task below into" in user:
            return "1. take an apple\n2. heat the apple"
        take = "Subgoal: take an apple" in user and "action:\naction 1\n" in user
        heat = "Subgoal: heat the apple" in user and "action:\naction 2\n" in user
        return "Answer: yes" if take or heat else "Answer: no"

    states = [("table",), ("agent",), ("agent", "hot"), ("table", "hot")]
    trajs = [trajectory(states), trajectory(states)]  # two rollouts of one task: one decomposition request
    with serve_rule_judge(reply) as server:
        client = LLMClient(server.url, api_key_env=None, max_retries=0)
        scorer = SubgoalScorer(judge=LLMJudge(client), beta=0.25, decomposition="llm", client=client)
        scores = scorer(trajs)
        asked = sum("Break the task below into" in r for r in server.requests)
    (verified,) = SubgoalScorer(beta=0.25)([trajectory(states)])
    assert [s.rewards for s in scores] == [verified.rewards] * 2 == [[0.0, 0.25, 0.25, 0.0]] * 2
    assert scores[0].extras["subgoals"] == ["take an apple", "heat the apple"] and asked == 1


def test_a_failed_decomposition_marks_the_trajectory_invalid():
    (scores,) = SubgoalScorer(decompose=lambda traj: None)([trajectory([("table",), ("agent",)])])
    assert scores.valid == [False, False] and all(math.isnan(r) for r in scores.rewards)
    with pytest.raises(ValueError, match="needs a client"):
        SubgoalScorer(decomposition="llm")
