"""SCRIBE (docs/grounded-rewards.md, 'SCRIBE'): the worked example by hand (both segmentations, both placements),
unroutable spans invalid and never 0, k-check rubric scores on the grid {0, 1/k, ..., 1}, a failed verdict
invalidating its span, and Household-v0's expert meeting every check of its library."""

import math

import gymnasium as gym
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import skills
from agentgym.rewards.catalogue import collect
from agentgym.rewards.skills import LIBRARIES, Check, Prototype, SkillRubricScorer, route, segment
from agentgym.rewards.verdicts import RuleJudge, Verdict

GOLD = {"supporting_doc_ids": ["d1", "d2"], "hop_entities": ["Ada Vell"], "hop_answers": ["Orrin"],
        "answers": ["Orrin"]}  # fmt: skip


def turn(action, content, **info):
    valid = info.pop("valid", True)
    return Turn(action, [{"role": "user", "content": content}] if content else [], 0.0, False, False,
                {"gold": GOLD, "action_valid": valid, **info})  # fmt: skip


def searchqa_trajectory():
    """t0: a good hop search (3/3); t1: no tag (unroutable); t2: an off-chain search (1/3: only well formed);
    t3: a wrong answer that a passage mentions (2/3: well formed, seen, not correct)."""
    turns = [
        turn("<search> Ada Vell </search>", "Doc 1 Ada Vell ...", progress=0.5, retrieved_doc_ids=["d1"]),
        turn("I think", "invalid action", progress=0.5, valid=False),
        turn("<search> weather </search>", "Doc 1 Zed is sunny", progress=0.5, retrieved_doc_ids=["d9"]),
        turn("<answer> Zed </answer>", "", progress=0.5, answer="Zed", metrics={"em": 0.0}),
    ]
    return Trajectory("agentgym/SearchQA-v0", 0, "q", "a", [{"role": "user", "content": "Who?"}],
                      {"gold": GOLD, "progress": 0.0}, turns=turns)  # fmt: skip


@pytest.mark.parametrize("segmentation", ["runs", "turn"])
def test_worked_example_by_hand(segmentation):
    """r_span = [1, NaN, 1/3, 2/3]; mean over the valid spans 2/3; lambda = 0.3 gives 0.2 on the last turn."""
    (scores,) = SkillRubricScorer(coef=0.3, segmentation=segmentation)([searchqa_trajectory()])
    r = scores.extras["r_span"]
    assert r[0] == 1.0 and math.isnan(r[1]) and r[2] == pytest.approx(1 / 3) and r[3] == pytest.approx(2 / 3)
    assert [s[2] for s in scores.extras["spans"]] == ["search one hop", None, "search one hop", "verify a candidate"]
    assert scores.rewards[:3] == [0.0, 0.0, 0.0] and scores.rewards[3] == pytest.approx(0.2)
    assert scores.all_valid


def test_per_span_placement_has_the_same_total():
    (scores,) = SkillRubricScorer(coef=0.3, assign="span")([searchqa_trajectory()])
    assert scores.rewards == pytest.approx([0.3 * 1 / 3, 0.0, 0.3 * (1 / 3) / 3, 0.3 * (2 / 3) / 3])
    assert math.fsum(scores.rewards) == pytest.approx(0.2)


def test_consecutive_turns_of_one_prototype_form_one_span():
    traj = searchqa_trajectory()
    traj.turns[1] = turn("<search> Orrin </search>", "Doc 2", progress=1.0, retrieved_doc_ids=["d2"])
    spans = segment(traj, LIBRARIES["search_qa"], "runs")
    assert [(s.start, s.end, s.prototype) for s in spans] == [(0, 3, "search one hop"), (3, 4, "verify a candidate")]


def test_an_unroutable_span_is_invalid_not_zero():
    traj = searchqa_trajectory()
    traj.turns = traj.turns[1:2]  # only the untagged turn
    (scores,) = SkillRubricScorer()([traj])
    assert math.isnan(scores.extras["r_span"][0])
    assert scores.valid == [False] and math.isnan(scores.rewards[0])
    assert route("I think", LIBRARIES["search_qa"]) is None


class Scripted:
    """Answers yes/no from a fixed stream of bits (None: cannot answer)."""

    name = "scripted"

    def __init__(self, bits):
        self.bits = list(bits)

    def ask(self, questions):
        return [Verdict(b) if b is not None else Verdict(None, error="down")
                for b, _ in zip(self.bits, questions, strict=False)]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.lists(st.booleans(), min_size=6, max_size=6))
def test_a_k_check_rubric_scores_on_the_grid(k, bits):
    proto = Prototype("act", "anything", ("act",), tuple(Check(f"check {i}") for i in range(k)))
    traj = Trajectory("x", 0, "t", "a", [], {}, turns=[Turn("act now", [], 0.0, False, False, {})])
    (scores,) = SkillRubricScorer(judge=Scripted([float(b) for b in bits[:k]]), coef=1.0, prototypes=[proto])([traj])
    r = scores.extras["r_span"][0]
    assert 0.0 <= r <= 1.0 and r * k == pytest.approx(round(r * k)) and r == pytest.approx(sum(bits[:k]) / k)


def test_a_failed_verdict_invalidates_its_span_only():
    proto = Prototype("act", "anything", ("act",), (Check("c1"), Check("c2")))
    turns = [Turn("act", [], 0.0, False, False, {}), Turn("idle", [], 0.0, False, False, {}),
             Turn("act", [], 0.0, False, False, {})]  # fmt: skip
    traj = Trajectory("x", 0, "t", "a", [], {}, turns=turns)
    (scores,) = SkillRubricScorer(judge=Scripted([1.0, None, 1.0, 0.0]), coef=1.0, prototypes=[proto])([traj])
    assert math.isnan(scores.extras["r_span"][0]) and scores.extras["r_span"][2] == 0.5
    assert scores.rewards == [0.0, 0.0, 0.5]


def test_a_check_without_a_rule_is_unknown_to_the_rule_judge():
    proto = Prototype("act", "anything", ("act",), (Check("judge me"),))
    traj = Trajectory("x", 0, "t", "a", [], {}, turns=[Turn("act", [], 0.0, False, False, {})])
    (scores,) = SkillRubricScorer(judge=RuleJudge(), prototypes=[proto])([traj])
    assert scores.valid == [False]


def household_episode(index, expert):
    env = gym.make("agentgym/Household-v0", split="train", state_facts=True, expert_plan=True)
    obs, info = env.reset(seed=0, options={"task_index": index})
    traj = Trajectory("agentgym/Household-v0", 0, info["task_id"], "x", obs, info)
    for t in range(len(info["expert_plan"]) + 2):
        action = info["expert_plan"][0] if expert else sorted(info["admissible_commands"])[(5 * t + 3) % 7]
        obs, r, term, trunc, info = env.step(action)
        traj.turns.append(Turn(action, obs, r, term, trunc, info))
        if term or trunc:
            break
    return traj


@pytest.mark.parametrize("index", range(8))
def test_household_expert_meets_every_check(index):
    (expert,) = SkillRubricScorer(coef=1.0)([household_episode(index, True)])
    assert set(expert.extras["r_span"]) == {1.0}, expert.extras
    assert expert.rewards[-1] == 1.0
    (other,) = SkillRubricScorer(coef=1.0)([household_episode(index, False)])
    assert other.rewards[-1] < 1.0 or math.isnan(other.rewards[-1])


def test_card():
    (card,) = collect([skills])
    assert card.name == "scribe" and card.load() is SkillRubricScorer
    assert {"coef", "segmentation", "assign", "library"} <= set(card.knobs())


def test_an_all_yes_llm_judge_meets_every_check_of_routable_spans():
    from rule_judge import serve_rule_judge

    from agentgym.rewards.judge import LLMJudge
    from agentgym.tools.llm import LLMClient

    with serve_rule_judge(lambda system, user: "Answer: yes") as server:
        judge = LLMJudge(LLMClient(server.url, api_key_env=None, max_retries=0))
        (scores,) = SkillRubricScorer(judge=judge, coef=0.3)([searchqa_trajectory()])
    r = scores.extras["r_span"]
    assert r[0] == r[2] == r[3] == 1.0 and math.isnan(r[1]) and scores.rewards[-1] == pytest.approx(0.3)
    assert any("skill 'verify a candidate'" in q for q in server.requests)
