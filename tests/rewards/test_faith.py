"""FaithRL: the StepSupport labels (the verified rule on SearchQA, the judge variant) and the ``faith`` estimator
(geometric reward, faithfulness-aware modulation): a hand-worked example and the spec's properties."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.advantages import TurnBatch, get_estimator
from agentgym.rewards.advantages.faith import faith_advantages, geometric_reward, modulate
from agentgym.rewards.catalogue import collect
from agentgym.rewards.faith import StepSupport, claim_of, supported
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict
from agentgym.running.episode import make_agent, run_episode

FAST = settings(max_examples=80, deadline=None, derandomize=True)


@st.composite
def batches(draw):
    """Outcomes in {0, 1}, support labels in {0, 1} (some None), two groups."""
    n = draw(st.integers(1, 8))
    outcomes = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    labels = [draw(st.lists(st.sampled_from([0.0, 1.0, None]), min_size=1, max_size=4)) for _ in range(n)]
    groups = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    return outcomes, labels, groups


def test_hand_worked_example():
    # outcomes (1, 1, 0), labels [1, 1], [1, 0], [1, 0], eps = 0.25:
    # R = 1 * (1 * 1)^(1/2) = 1; 1 * (1 * 0.25)^(1/2) = 0.5; 0 * ... = 0. mean 0.5, std sqrt(0.5 / 3) = 0.40825
    # A = (sqrt(1.5), 0, -sqrt(1.5)). Trajectory 1: both supported, A > 0: sqrt(1.5) each. Trajectory 2: A = 0: the
    # supported step 0, the unsupported one -max(0, kappa) = 0. Trajectory 3: A < 0: supported 0, unsupported -|A|.
    a = faith_advantages([1.0, 1.0, 0.0], [[1, 1], [1, 0], [1, 0]], ["q"] * 3, eps=0.25, adv_eps=0.0)
    s = math.sqrt(1.5)
    assert np.concatenate(a).tolist() == pytest.approx([s, s, 0.0, 0.0, 0.0, -s])
    # kappa floors the penalty: the unsupported step of trajectory 2 (A = 0) now pays 0.5
    a = faith_advantages([1.0, 1.0, 0.0], [[1, 1], [1, 0], [1, 0]], ["q"] * 3, eps=0.25, kappa=0.5, adv_eps=0.0)
    assert np.concatenate(a).tolist() == pytest.approx([s, s, 0.0, -0.5, 0.0, -s])


def test_geometric_reward():
    assert geometric_reward(1.0, [1, 0, 1, 1], eps=0.0625) == pytest.approx(0.5)  # (1 * 0.0625 * 1 * 1)^(1/4)
    assert geometric_reward(1.0, [0, 0], eps=0.0) == 0.0
    assert geometric_reward(0.0, [1, 1]) == 0.0
    assert geometric_reward(1.0, [0, 0, 0], eps=1.0) == 1.0  # eps = 1: labels ignored, R = correct
    assert geometric_reward(1.0, [None, None]) == 1.0  # nothing labelled: the outcome
    assert geometric_reward(1.0, [1, None, 0], eps=0.25) == pytest.approx(0.5)  # None steps are not counted
    with pytest.raises(ValueError, match="eps"):
        geometric_reward(1.0, [1], eps=1.5)


@FAST
@given(batches())
def test_all_supported_with_keep_negative_is_grpo_exactly(batch):
    outcomes, labels, groups = batch
    ones = [[1.0] * len(row) for row in labels]
    b = TurnBatch([[0.0] * len(row) for row in labels], groups, outcomes=outcomes, turn_signals=ones)
    grpo = get_estimator("grpo")(b)
    faith = get_estimator("faith")(b, keep_negative=1.0)
    assert all(np.array_equal(f, g) for f, g in zip(faith, grpo, strict=True))
    # by default, the same batch keeps GRPO's positive advantages and zeroes the negative ones
    default = get_estimator("faith")(b)
    assert all(np.array_equal(f, np.maximum(g, 0.0)) for f, g in zip(default, grpo, strict=True))


@FAST
@given(batches(), st.sampled_from([0.0, 0.3]), st.sampled_from([0.0, 0.5]), st.sampled_from([0.0, 0.1, 0.5]))
def test_signs(batch, kappa, keep_negative, eps):
    outcomes, labels, groups = batch
    a = faith_advantages(outcomes, labels, groups, eps=eps, kappa=kappa, keep_negative=keep_negative)
    for adv, row, correct in zip(a, labels, outcomes, strict=True):
        for x, f in zip(adv, row, strict=True):
            if f == 0.0:
                assert x <= 0.0 and x <= -kappa  # an unsupported step never gets a positive advantage
            if f == 1.0 and correct == 0.0 and keep_negative == 0.0:
                assert x == 0.0  # a supported step of a failed trajectory gets exactly 0


def test_modulate_and_errors():
    assert modulate(0.8, [1, 0, None]) == [0.8, -0.8, 0.8]
    assert modulate(-0.5, [1, 0, None], kappa=0.75) == [0.0, -0.75, -0.5]
    assert modulate(-0.5, [1], keep_negative=0.5) == [-0.25]
    with pytest.raises(ValueError, match="labels are 0, 1 or None"):
        faith_advantages([1.0], [[0.5]], ["q"])
    with pytest.raises(ValueError, match="turn_signals"):
        get_estimator("faith")(TurnBatch([[1.0]], ["q"]))


def test_claims_and_rule():
    assert claim_of("<think>x</think><answer> Mira </answer>") == ("answer", "Mira")
    assert claim_of("<search>a</search> then <answer>b</answer>") == ("answer", "b")
    assert supported("the founder", ["Zorbel was founded"])  # stems: "found" = "found"
    assert supported("", ["anything"]) and supported("the of", [])  # no content word: nothing claimed
    assert not supported("Tom Vale", ["Mira Quell"])


def _episode(seed: int, actions: Sequence[str]) -> Trajectory:
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    obs, info = env.reset(seed=seed)
    turns = []
    for action in actions:
        o, r, term, trunc, step_info = env.step(action)
        turns.append(Turn(action, o, r, term, trunc, step_info))
        if term or trunc:
            break
    return Trajectory("agentgym/SearchQA-v0", seed, info["task_id"], "scripted", obs, info, turns)


def test_searchqa_verified_rule():
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    oracle = run_episode(env, make_agent("oracle", env), seed=3)
    assert StepSupport()([oracle])[0].rewards == [1.0] * len(oracle.turns)
    gold = oracle.reset_info["gold"]
    query = gold["oracle_queries"][0]
    # a made-up answer is unsupported; the gold answer is supported by the gold facts even before any search, and
    # by the retrieved passages alone once they are read (use_gold=False)
    wrong = _episode(3, [f"<search>{query}</search>", "<answer> Tom Vale </answer>"])
    assert StepSupport()([wrong])[0].rewards == [1.0, 0.0]
    blind = _episode(3, [f"<answer>{gold['answers'][0]}</answer>"])
    assert StepSupport()([blind])[0].rewards == [1.0]
    assert StepSupport(use_gold=False)([blind])[0].rewards == [0.0]
    hops = _episode(3, [f"<search>{q}</search>" for q in gold["oracle_queries"]] + [f"<answer>{gold['answers'][0]}"
                                                                                    "</answer>"])  # fmt: skip
    assert StepSupport(use_gold=False)([hops])[0].rewards == [1.0] * len(hops.turns)


class _Scripted:
    """A judge that answers every question with the same verdict (an all-yes judge, or one that always fails)."""

    name = "scripted"

    def __init__(self, verdict: Verdict):
        self.verdict = verdict
        self.asked: list[Question] = []

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        self.asked += questions
        return [self.verdict for _ in questions]


def test_judge_variant():
    query = _episode(3, []).reset_info["gold"]["oracle_queries"][0]
    wrong = _episode(3, [f"<search>{query}</search>", "<answer> Tom Vale </answer>"])
    gold = wrong.reset_info["gold"]
    assert StepSupport()([_episode(3, ["<search>nothing here</search>"])])[0].rewards == [0.0]  # an unrelated query
    # the rule judge is the verified rule
    assert StepSupport(RuleJudge())([wrong])[0].rewards == StepSupport()([wrong])[0].rewards == [1.0, 0.0]
    yes = _Scripted(Verdict(1.0))
    assert StepSupport(yes)([wrong])[0].rewards == [1.0, 1.0]
    # the judge reads the evidence and the step, never the gold: before any search its prompt holds no gold fact
    assert all(q.kind == "yesno" and "supported" in q.prompt for q in yes.asked)
    assert all(str(v) not in yes.asked[0].prompt for v in gold["hop_answers"] + gold["answers"])
    seen = "\n".join(m["content"] for m in wrong.initial_observation + wrong.turns[0].observation)
    assert seen in yes.asked[1].prompt
    failed = StepSupport(_Scripted(Verdict(None, error="down")))([wrong])[0]
    assert failed.valid == [False, False] and all(math.isnan(x) for x in failed.rewards)
    assert failed.extras["errors"] == {"0": "down", "1": "down"}


def test_all_yes_judge_gives_grpo_on_succeeding_trajectories():
    outcomes, groups = [1.0, 0.0, 1.0, 0.0], ["q"] * 4
    labels = [[1.0, 1.0]] * 4  # an all-yes judge
    b = TurnBatch([[0.0, 0.0]] * 4, groups, outcomes=outcomes, turn_signals=labels)
    grpo = get_estimator("grpo")(b)
    faith = get_estimator("faith")(b)
    assert [f.tolist() for f in faith] == [grpo[0].tolist(), [0.0, 0.0], grpo[2].tolist(), [0.0, 0.0]]


def test_card():
    import agentgym.rewards.advantages.faith as module

    (card,) = collect([module])
    assert card.name == "faithrl" and card.train["estimator"] == "faith"
    assert card.knobs() == {"eps": 0.1, "kappa": 0.0, "keep_negative": 0.0, "adv_eps": 1e-6}


def test_llm_judge_over_http_gives_the_verified_labels_when_it_judges_as_the_rule_does():
    """A perfect judge reduces to the verified variant: a real loopback judge that says no exactly to the made-up
    answer gives the rule's labels, and it is asked one question per turn, without the gold."""
    from rule_judge import serve_rule_judge

    import agentgym.rewards.judge as judge_module
    from agentgym.tools.llm import LLMClient

    llm_judge = getattr(judge_module, "LLMJudge", None)
    if llm_judge is None:
        pytest.skip("no LLMJudge in agentgym.rewards.judge")
    query = _episode(3, []).reset_info["gold"]["oracle_queries"][0]
    wrong = _episode(3, [f"<search>{query}</search>", "<answer> Tom Vale </answer>"])
    with serve_rule_judge(lambda system, user: "Answer: no" if "Tom Vale" in user else "Answer: yes") as server:
        judge = llm_judge(LLMClient(server.url, api_key_env=None, max_retries=0), cache_size=0)
        scores = StepSupport(judge)([wrong])[0]
    assert scores.rewards == StepSupport()([wrong])[0].rewards == [1.0, 0.0]
    assert len(server.requests) == 2
    assert all(a not in server.requests[0] for a in wrong.reset_info["gold"]["answers"])
