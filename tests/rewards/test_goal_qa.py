"""QG/QA (docs/grounded-rewards.md, 'QG/QA'): the cloze questions, the worked example by hand (a wrong answer scores
0), the total bounded by #questions, a failed score invalid, a trajectory containing the goal's words beating an
uninformative one, and the tiny policy model as the QA model end to end.

The tiny model is randomly initialised, so it cannot answer questions; the comparison of trajectories uses
``CopyQA``, a deterministic QA model that reads the answer off the trajectory: a candidate token's probability grows
with how often the trajectory mentions it, unless the question already does (a cloze answer is what the episode
mentions and the question leaves out). That is the behaviour the reward asks of any QA model, in its simplest form."""

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("transformers")

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import goal_qa
from agentgym.rewards.answer_scoring import AnswerScorer
from agentgym.rewards.catalogue import collect
from agentgym.rewards.goal_qa import GoalQAScorer, cloze_questions, goal_and_spans
from agentgym.tools.tiny_model import build_tiny_tokenizer

GOLD = {"description": "put a hot cup in countertop.", "object": "cup", "receptacle": "countertop",
        "goal_facts": [{"name": "cup", "attributes": {"location": "countertop", "temperature": "hot"}}]}  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def household(actions_and_observations):
    turns = [Turn(a, [{"role": "user", "content": o}], 0.0, False, False, {}) for a, o in actions_and_observations]
    return Trajectory("agentgym/Household-v0", 0, "t", "a", [{"role": "user", "content": "Your task is to: " +
                      GOLD["description"]}], {"gold": GOLD}, turns=turns)  # fmt: skip


class TableQA(AnswerScorer):
    """Scores each candidate by a fixed log-prob per token, whatever the question (read back with the tokenizer)."""

    def __init__(self, tokenizer, table):
        self.tokenizer, self.table = tokenizer, table

    def logprobs(self, prefix, cuts, suffixes):
        out = []
        for s in suffixes:
            answer = self.tokenizer.decode([i for i, k in zip(s.ids, s.scored, strict=True) if k]).strip()
            out.append(np.full(sum(s.scored), self.table[answer], dtype=np.float64))
        return out


class CopyQA(AnswerScorer):
    """p(token) = (1 + 9 * count in the trajectory * [token not in the question]) / Z over the vocabulary."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def logprobs(self, prefix, cuts, suffixes):
        out = []
        for cut, s in zip(cuts, suffixes, strict=True):
            seen = Counter(prefix[:cut])
            question = {i for i, k in zip(s.ids, s.scored, strict=True) if not k}
            z = len(self.tokenizer) + 9 * sum(c for t, c in seen.items() if t not in question)
            out.append(np.array([math.log((1 + 9 * seen[t] * (t not in question)) / z)
                                 for t, k in zip(s.ids, s.scored, strict=True) if k]))  # fmt: skip
        return out


def test_cloze_questions_mask_each_span_once():
    assert cloze_questions("put a hot cup in countertop.", ["cup", "Cup", "sink", "hot"]) == [
        ("put a hot ___ in countertop.", "cup"), ("put a ___ cup in countertop.", "hot")]  # fmt: skip
    goal, spans = goal_and_spans(household([]))
    assert goal == GOLD["description"] and spans == ["cup", "countertop", "hot"]


def test_worked_example_by_hand(tok):
    """Candidates cup, countertop, hot with p = 0.5, 0.3, 0.2 for every question. 'put a hot ___ in countertop.'
    (cup): argmax cup, right, +0.5; the countertop and hot questions: argmax cup, wrong, 0 each. r = 0.5 on the last
    turn."""
    table = {"cup": math.log(0.5), "countertop": math.log(0.3), "hot": math.log(0.2)}
    traj = household([("look", "You see a cup."), ("take cup 1", "You pick it up.")])
    (scores,) = GoalQAScorer(TableQA(tok, table), tok)([traj])
    assert scores.extras["candidates"] == ["cup", "countertop", "hot"]
    assert scores.extras["correct"] == [True, False, False]
    assert scores.extras["p"] == pytest.approx([0.5, 0.3, 0.2])
    assert scores.rewards[0] == 0.0 and scores.rewards[1] == pytest.approx(0.5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-20, 0), min_size=3, max_size=3), st.floats(0.1, 3.0))
def test_the_total_is_at_most_the_number_of_questions(tok, logps, coef):
    table = dict(zip(["cup", "countertop", "hot"], logps, strict=True))
    (scores,) = GoalQAScorer(TableQA(tok, table), tok, coef=coef)([household([("look", "ok")])])
    assert 0.0 <= scores.rewards[-1] <= coef * 3 + 1e-9
    # only right answers pay, each its own p
    expected = sum(p for p, right in zip(scores.extras["p"], scores.extras["correct"], strict=True) if right)
    assert scores.rewards[-1] == pytest.approx(coef * expected)


def test_a_failed_score_is_invalid(tok):
    table = {"cup": math.nan, "countertop": -1.0, "hot": -2.0}
    (scores,) = GoalQAScorer(TableQA(tok, table), tok)([household([("look", "ok"), ("look", "ok")])])
    assert scores.valid == [True, False] and math.isnan(scores.rewards[-1])


def test_a_trajectory_with_the_goals_words_beats_an_uninformative_one(tok):
    scorer = GoalQAScorer(CopyQA(tok), tok)
    informed = household([("take cup 1 from cabinet 1", "You pick up the cup 1 from the cabinet 1."),
                          ("heat cup 1 with microwave 1", "You heat the cup 1 using the microwave 1. It is hot."),
                          ("put cup 1 in/on countertop 1", "You put the cup 1 in/on the countertop 1.")])  # fmt: skip
    blank = household([("look", "Nothing happens."), ("inventory", "You are not carrying anything.")])
    (a, b) = scorer([informed, blank])
    assert a.rewards[-1] > b.rewards[-1]
    assert all(a.extras["correct"]) and a.rewards[-1] > 1.0


def test_the_goal_never_reaches_the_qa_context(tok):
    seen = []

    class Spy(TableQA):
        def logprobs(self, prefix, cuts, suffixes):
            seen.append(self.tokenizer.decode(prefix[: cuts[0]]))
            return super().logprobs(prefix, cuts, suffixes)

    table = {"cup": -1.0, "countertop": -2.0, "hot": -3.0}
    GoalQAScorer(Spy(tok, table), tok)([household([("look", "You see a sofa.")])])
    assert "countertop" not in seen[0] and "sofa" in seen[0]


def test_searchqa_questions_and_task_level_candidates(tok):
    gold = {"hop_entities": ["Ada Vell"], "hop_answers": ["Orrin"], "answers": ["Orrin"]}
    prompt = [{"role": "user", "content": "Answer the question. Question: Where was Ada Vell born?"}]
    traj = Trajectory("agentgym/SearchQA-v0", 0, "q", "a", prompt, {"gold": gold},
                      turns=[Turn("<answer> Orrin </answer>", [], 1.0, True, False, {})])  # fmt: skip
    qs, cands = GoalQAScorer(TableQA(tok, {}), tok).questions(traj)
    assert qs == [("Where was ___ born?", "Ada Vell")] and cands == ["Ada Vell", "Orrin"]
    gold["hop_answers"], gold["answers"] = [], []  # a single candidate would always be right: no question
    assert GoalQAScorer(TableQA(tok, {}), tok).questions(traj) == ([], ["Ada Vell"])


def test_no_question_no_reward(tok):
    traj = household([("look", "ok")])
    traj.reset_info = {"gold": {"description": "tidy up.", "object": "cup", "receptacle": "sink"}}
    (scores,) = GoalQAScorer(TableQA(tok, {}), tok)([traj])
    assert scores.rewards == [0.0] and scores.extras["questions"] == []


@pytest.mark.slow
def test_the_tiny_policy_answers_end_to_end():
    """The trainer's set-up: the policy itself (the tiny model) as the QA model on a real Household episode."""
    import gymnasium as gym

    import agentgym  # noqa: F401
    from agentgym.rewards.answer_scoring import LocalAnswerScorer
    from agentgym.running.runner import run_episode
    from agentgym.tools.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(seed=0)
    env = gym.make("agentgym/Household-v0", split="train", state_facts=True, max_turns=4)
    from agentgym.envs.household.agents import HeuristicAgent

    traj = run_episode(env, HeuristicAgent(), seed=0, env_id="agentgym/Household-v0")
    (scores,) = GoalQAScorer(LocalAnswerScorer(model, tokenizer), tokenizer)([traj])
    n = len(scores.extras["questions"])
    assert n >= 2 and len(scores.extras["candidates"]) > n
    assert scores.all_valid and 0.0 <= scores.rewards[-1] <= n


def test_card():
    (card,) = collect([goal_qa])
    assert card.name == "goal_qa" and card.load() is GoalQAScorer and {"coef", "length_norm"} <= set(card.knobs())
