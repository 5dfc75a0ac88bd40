"""CPO's group judgement, ArenaRL's tournament and Co-Reward's cross-referred majorities: the worked examples of
docs/group-judging.md and the property tests of their specs, with judges that answer by a hidden key."""

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import catalogue, group_judging
from agentgym.rewards.advantages.gopo import gopo_advantages
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.group_judging import (
    CoReward,
    GroupJudgeScorer,
    TournamentJudge,
    bracket,
    final_answer,
    knockout_rounds,
    majority,
)
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict

KEY = re.compile(r"key=(\d+)")


def rollout(key: int, outcome: float = 0.0, answer: str | None = None, pair: str | None = None) -> Trajectory:
    """A one-turn rollout whose action carries a hidden quality ``key`` (what the key judge reads)."""
    action = f"I did my best. key={key}" + (f" <answer>{answer}</answer>" if answer is not None else "")
    turn = Turn(action, [], outcome, True, False, {"reward_components": {"outcome": outcome}})
    info = {} if pair is None else {"pair_id": pair}
    return Trajectory("e", 0, "task", "a", [{"role": "user", "content": "Do it."}], info, turns=[turn])


@dataclass
class KeyJudge:
    """Judges by the hidden keys in the prompt: rank scores key/100 in the order shown; compare A vs B by key;
    score key/100. ``bias`` adds to the first shown item's rank score (a position-biased judge). It logs the
    questions it was asked and the order of the keys it was shown."""

    bias: float = 0.0
    name: str = "key"
    kinds: list[str] = field(default_factory=list)
    shown: list[list[int]] = field(default_factory=list)

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        out = []
        for q in questions:
            keys = [int(k) for k in KEY.findall(q.prompt)]
            self.kinds.append(q.kind)
            if q.kind == "rank":
                self.shown.append(keys)
                scores = [min(1.0, k / 100 + (self.bias if n == 0 else 0.0)) for n, k in enumerate(keys)]
                out.append(Verdict(tuple(scores), reply="scores"))
            elif q.kind == "compare":
                out.append(Verdict(1.0 if keys[0] > keys[1] else 0.0 if keys[0] < keys[1] else 0.5, reply="A/B"))
            else:
                out.append(Verdict(keys[0] / 100, reply="score"))
        return out


KEYS = [37, 5, 90, 61, 12, 48]


# -- CPO ------------------------------------------------------------------------------------------------------------
def test_cpo_worked_example():
    """docs/group-judging.md, CPO: keys (40, 10, 70) shown in the seeded order the scorer picks; the judge's
    scores (.4, .1, .7) come back to their rollouts whatever the order shown. GRPO over them: mean .4, population
    std sqrt(.06), advantages (0, -1.2247, 1.2247)."""
    judge = KeyJudge()
    group = [rollout(k) for k in (40, 10, 70)]
    scores = GroupJudgeScorer(judge, seed=0)(group)
    assert [s.rewards for s in scores] == [[0.4], [0.1], [0.7]]
    assert judge.kinds == ["rank"] and sorted(judge.shown[0]) == [10, 40, 70]
    assert [scores[i].extras["position"] for i in range(3)] == [judge.shown[0].index(k) for k in (40, 10, 70)]
    assert grpo([0.4, 0.1, 0.7], [0, 0, 0]).round(4).tolist() == [0.0, -1.2247, 1.2247]


@pytest.mark.parametrize("seed", range(5))
def test_cpo_rewards_follow_the_key_whatever_the_order(seed):
    judge = KeyJudge()
    scorer = GroupJudgeScorer(judge, seed=seed)
    group = [rollout(k) for k in KEYS]
    assert [s.rewards[-1] for s in scorer(group)] == [k / 100 for k in KEYS]
    # the shown order is a seeded shuffle: not always the given one
    orders = {tuple(GroupJudgeScorer(KeyJudge(), seed=s).presentation(group)) for s in range(8)}
    assert len(orders) > 1


def test_cpo_permuting_the_group_permutes_the_rewards_even_for_a_biased_judge():
    group = [rollout(k) for k in KEYS]
    scorer = GroupJudgeScorer(KeyJudge(bias=0.3), seed=1)
    base = [s.rewards[-1] for s in scorer(group)]
    for perm in [np.random.default_rng(0).permutation(len(group)).tolist(), [5, 4, 3, 2, 1, 0]]:
        permuted = [s.rewards[-1] for s in scorer([group[i] for i in perm])]
        assert permuted == [base[i] for i in perm]
    assert max(b - k / 100 for b, k in zip(base, KEYS, strict=True)) == pytest.approx(0.3)  # the bias landed once


def test_cpo_pairwise_mode_and_the_rule_judge():
    group = [rollout(k, outcome=o) for k, o in zip(KEYS, [1, 0, 1, 1, 0, 0], strict=True)]
    pairwise = [s.rewards[-1] for s in GroupJudgeScorer(KeyJudge(), mode="pairwise")(group)]
    assert np.argsort(pairwise).tolist() == np.argsort(KEYS).tolist()
    # a perfect (rule) judge ranks by the outcome: GRPO over its rewards is GRPO over the outcomes
    rule = [s.rewards[-1] for s in GroupJudgeScorer(RuleJudge())(group)]
    assert rule == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert grpo(rule, [0] * 6) == pytest.approx(grpo([1, 0, 1, 1, 0, 0], [0] * 6))


def test_cpo_failed_verdict_is_invalid():
    @dataclass
    class Down:
        name: str = "down"

        def ask(self, questions):
            return [Verdict(None, error="timeout") for _ in questions]

    scores = GroupJudgeScorer(Down())([rollout(k) for k in KEYS[:3]])
    assert all(math.isnan(s.rewards[-1]) and not s.valid[-1] for s in scores)
    assert scores[0].extras["error"] == "timeout"


# -- ArenaRL --------------------------------------------------------------------------------------------------------
def test_bracket_and_knockout_by_hand():
    assert bracket(4) == [0, 3, 1, 2]
    # seeds (best first) with values (3, 1, 2, 0): round 1 seed 0 beats 3, seed 2 (value 2) upsets seed 1;
    # final: seed 0 beats seed 2. Matches won: (2, 0, 1, 0).
    assert knockout_rounds([3.0, 1.0, 2.0, 0.0], lambda a, b: float(a > b)) == [2, 0, 1, 0]
    # five players: byes (counted as won) for seeds 0, 1, 2 in round 1, where only seeds 3 and 4 play; 4 matches
    assert knockout_rounds([5, 4, 3, 2, 1], lambda a, b: float(a > b)) == [3, 2, 1, 1, 0]


def test_arenarl_worked_example():
    """docs/group-judging.md, ArenaRL: keys (37, 5, 90, 61) seeded by the pointwise score: 90, 61, 37, 5. Round 1:
    90 beats 5, 61 beats 37; final: 90 beats 61. Won/rounds: 37 -> 0, 5 -> 0, 90 -> 1, 61 -> 0.5; GOPO ranks them."""
    judge = KeyJudge()
    group = [rollout(k) for k in (37, 5, 90, 61)]
    scores = TournamentJudge(judge)(group)
    rewards = [s.rewards[-1] for s in scores]
    assert rewards == [0.0, 0.0, 1.0, 0.5]
    assert judge.kinds.count("compare") == 3 and judge.kinds.count("score") == 4
    assert gopo_advantages(rewards, [0] * 4).tolist() == [
        -0.6666666666666666,
        -0.6666666666666666,
        1.0,
        0.3333333333333333,
    ]


@pytest.mark.parametrize("g", [2, 3, 5, 6, 8, 11])
@pytest.mark.parametrize("seeding", ["judge", "random"])
def test_arenarl_winner_is_the_true_best_in_g_minus_1_calls(g, seeding):
    keys = np.random.default_rng(g).permutation(100)[:g].tolist()
    judge = KeyJudge()
    rewards = [s.rewards[-1] for s in TournamentJudge(judge, seeding=seeding, seed=g)([rollout(k) for k in keys])]
    assert rewards.index(1.0) == keys.index(max(keys)) and rewards.count(1.0) == 1
    assert judge.kinds.count("compare") == g - 1
    assert judge.kinds.count("score") == (g if seeding == "judge" else 0)
    if seeding == "judge":  # seeded by a perfect pointwise score, the runner-up is the second best
        assert rewards[keys.index(sorted(keys)[-2])] == pytest.approx(1 - 1 / max(1, (g - 1).bit_length()))


@pytest.mark.parametrize("positions", ["both", "random"])
def test_round_robin_recovers_the_order(positions):
    judge = KeyJudge()
    rewards = [s.rewards[-1] for s in TournamentJudge(judge, mode="round_robin", positions=positions)(
        [rollout(k) for k in KEYS])]  # fmt: skip
    assert np.argsort(rewards).tolist() == np.argsort(KEYS).tolist()
    assert rewards == pytest.approx([2 / 5, 0, 1, 4 / 5, 1 / 5, 3 / 5])
    assert judge.kinds.count("compare") == (30 if positions == "both" else 15)


def test_arenarl_permutation_and_failure():
    group = [rollout(k) for k in KEYS]
    base = [s.rewards[-1] for s in TournamentJudge(KeyJudge(), seeding="random", seed=3)(group)]
    perm = [3, 0, 5, 1, 4, 2]
    permuted = [s.rewards[-1] for s in TournamentJudge(KeyJudge(), seeding="random", seed=3)([group[i] for i in perm])]
    assert permuted == [base[i] for i in perm]

    @dataclass
    class FailsCompares(KeyJudge):
        def ask(self, questions):
            return [Verdict(None, error="x") if q.kind == "compare" else v
                    for q, v in zip(questions, super().ask(questions), strict=True)]  # fmt: skip

    scores = TournamentJudge(FailsCompares())(group)
    assert all(not s.valid[-1] for s in scores) and "no verdict" in scores[0].extras["error"]


def test_arenarl_rule_judge_ranks_by_outcome():
    group = [rollout(k, outcome=o) for k, o in zip(KEYS[:4], [0.0, 1.0, 0.0, 0.0], strict=True)]
    rewards = [s.rewards[-1] for s in TournamentJudge(RuleJudge())(group)]
    assert rewards[1] == 1.0 and all(r < 1.0 for i, r in enumerate(rewards) if i != 1)


# -- Co-Reward ------------------------------------------------------------------------------------------------------
def paired(answers_x, answers_y):
    return [rollout(0, answer=a, pair="p") for a in answers_x], [rollout(0, answer=a, pair="p") for a in answers_y]


def rewards_of(scored):
    return [[s.rewards[-1] for s in g] for g in scored]


def test_co_reward_worked_example():
    """docs/group-judging.md, Co-Reward: x's answers (Paris, Paris, Lyon, none), x''s (Paris, Lyon, Lyon, Lyon).
    x's majority is paris, x''s is lyon: x's rollouts get 1[answer = lyon] = (0, 0, 1, 0); x''s get
    1[answer = paris] = (1, 0, 0, 0)."""
    x, y = paired(["Paris", "paris", "Lyon", None], ["Paris", "Lyon", "the Lyon", "Lyon."])
    assert rewards_of(CoReward().score_groups([x, y])) == [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def test_co_reward_properties():
    scorer = CoReward()
    x, y = paired(["a"] * 4, ["a"] * 4)
    assert rewards_of(scorer.score_groups([x, y])) == [[1.0] * 4, [1.0] * 4]  # unanimous agreement
    x, y = paired(["a", "a", "b", "c"], ["b", "b", "b", "a"])
    fwd = rewards_of(scorer.score_groups([x, y]))
    assert rewards_of(scorer.score_groups([y, x])) == fwd[::-1]  # swapping x and x' swaps the rewards
    assert fwd[0][:2] == [0.0, 0.0]  # "a" agrees only with its own group's majority: 0
    assert fwd == [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]


def test_co_reward_pairs_in_a_batch_ties_and_unpaired_groups():
    x, y = paired(["a", "b"], ["a", "a"])
    lone = [rollout(0, answer="a", pair="q")]
    nopair = [rollout(0, answer="a")]
    out = CoReward().score_groups([x, lone, y, nopair])
    assert rewards_of([out[0], out[2]]) == [[1.0, 0.0], [1.0, 1.0]]  # x's tie (a, b) labels both answers
    assert rewards_of(CoReward(tie="none").score_groups([x, y]))[1] == [0.0, 0.0]
    for g in (out[1], out[3]):
        assert math.isnan(g[0].rewards[-1]) and not g[0].valid[-1]
    assert "no partner group" in out[1][0].extras["error"] and out[3][0].extras["error"] == "no pair_id"
    assert not CoReward()([x[0]])[0].valid[-1]  # one group alone cannot be scored


def test_answers_and_majority():
    turns = [
        Turn("<answer>X</answer>", [], 0.0, False, False, {}),
        Turn("<answer> The Y. </answer> ok", [], 0.0, True, False, {}),
    ]
    t = Trajectory("e", 0, "t", "a", [], {}, turns=turns)
    assert final_answer(t) == "y" and final_answer(rollout(1)) is None
    assert majority([None, None]) == frozenset()


def test_cards():
    cards = {c.name: c for c in catalogue.collect([group_judging])}
    assert set(cards) == {"cpo", "arenarl", "co_reward"}
    assert cards["arenarl"].train["estimator"] == "gopo"
    assert {"mode", "seeding", "positions", "seed"} <= set(cards["arenarl"].knobs())


def test_cpo_and_arenarl_over_a_real_llm_judge_endpoint():
    """The listwise and tournament questions through LLMJudge on a loopback server that grades by the hidden keys
    (rank: 'Scores: ...'; compare: 'Answer: A/B'; score: 'Score: N/10')."""
    from agentgym.rewards.judge import LLMJudge
    from agentgym.tools.llm import LLMClient
    from tests.rule_judge import serve_rule_judge

    def reply(system, user):
        keys = [int(k) for k in KEY.findall(user)]
        if "Response A" in user:
            return "Answer: A" if keys[0] > keys[1] else "Answer: B"
        if "Response 1" in user:
            return "Scores: " + ", ".join(f"{k / 10:g}" for k in keys)
        return f"Score: {keys[0] / 10:g}/10"

    group = [rollout(k) for k in KEYS]
    with serve_rule_judge(reply) as server:
        judge = LLMJudge(LLMClient(server.url, api_key_env=None, max_retries=0))
        cpo = [s.rewards[-1] for s in GroupJudgeScorer(judge)(group)]
        arena = [s.rewards[-1] for s in TournamentJudge(judge)(group)]
        asked = len(server.requests)
    assert cpo == pytest.approx([k / 100 for k in KEYS])
    assert arena.index(1.0) == KEYS.index(90) and arena[KEYS.index(61)] == pytest.approx(2 / 3)
    assert asked == 1 + len(KEYS) + len(KEYS) - 1  # one rank request, G seeding scores, G - 1 matches
