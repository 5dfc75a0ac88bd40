"""CM2's ChecklistScorer: the worked example of docs/group-judging.md, evidence grounding, invalid verdicts, and the
verified ToolUse-v0 checklists on real episodes of the env's own oracle and random agents."""

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import catalogue, checklist as checklist_module
from agentgym.rewards.checklist import (
    Checklist,
    ChecklistScorer,
    Criterion,
    evidence_text,
    grounded,
    tool_use_checklists,
    user_turn_ends,
)
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict
from agentgym.running.runner import make_agent, run_episode


@dataclass
class ScriptedJudge:
    """A model-like judge (its verdicts carry a raw reply) answering each criterion from a script: criterion text ->
    (yes?, quoted span). It records how many questions it was asked."""

    script: dict[str, tuple[bool, str | None]]
    name: str = "scripted"
    asked: list[str] = field(default_factory=list)

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        out = []
        for q in questions:
            criterion = re.search(r"Criterion: (.*)", q.prompt).group(1)
            self.asked.append(criterion)
            if criterion not in self.script:
                out.append(Verdict(None, reply="?", error="no answer"))
                continue
            yes, span = self.script[criterion]
            out.append(Verdict(float(yes), evidence=span, reply=f"{'yes' if yes else 'no'}: {span}"))
        return out


def msg(role, content):
    return {"role": role, "content": content}


def worked_trajectory() -> Trajectory:
    """The worked example's conversation: two user turns over three agent turns."""
    call = '<tool_call>{"name": "transfer", "arguments": {"source": "savings", "target": "checking", "amount": 50}}'
    turns = [
        Turn(call + "</tool_call>", [msg("tool", "moved 50.00 from savings to checking")], 0.0, False, False, {}),
        Turn("Done. Checking now holds $150.00.", [msg("user", "What is my savings balance?")], 0.0, False, False, {}),
        Turn("Savings holds $20.00.", [], 0.0, True, False, {}),
    ]
    first = msg("user", "Move 50.00 from savings to checking, then tell me checking's balance.")
    return Trajectory("e", 0, "t", "a", [msg("system", "You run a bank."), first], {}, turns=turns)


WORKED_CHECKLISTS = [
    Checklist(1, "Move 50.00 ...", (Criterion("called transfer"), Criterion("states 150.00"), Criterion("thanks"))),
    Checklist(2, "What is my savings balance?", (Criterion("states 25.00"), Criterion("names savings"))),
]
WORKED_SCRIPT = {
    "called transfer": (True, "moved 50.00 from savings to checking"),
    "states 150.00": (True, "checking now holds $150.00"),  # case differs: still grounded
    "thanks": (True, "Thank you for banking with us"),  # quoted but never said: counts as no
    "states 25.00": (False, None),
    "names savings": (True, "Savings holds"),
}


@pytest.mark.parametrize(("assign", "expected"), [("end", [0.0, 0.0, 0.6]), ("turn", [0.0, 0.4, 0.2])])
def test_worked_example(assign, expected):
    """docs/group-judging.md, CM2: 3 of 5 criteria met (the thanks is quoted but never said); "end" pays 3/5 on the
    last turn, "turn" pays 2/5 where the first user turn ends and 1/5 where the second does."""
    judge = ScriptedJudge(WORKED_SCRIPT)
    scores = ChecklistScorer(judge, lambda t: WORKED_CHECKLISTS, assign=assign)([worked_trajectory()])[0]
    assert scores.rewards == pytest.approx(expected)
    assert scores.extras["criteria"] == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert judge.asked == ["called transfer", "states 150.00", "thanks", "states 25.00", "names savings"]
    assert sum(scores.rewards) == pytest.approx(0.6)


def test_evidence_must_occur_in_the_conversation():
    traj = worked_trajectory()
    text = evidence_text(traj, 2)
    assert grounded("Checking   NOW holds", text) and not grounded("Checking holds", text)
    assert not grounded("", text) and not grounded(None, text)
    # scope "agent" leaves out the system prompt and the user's messages; "all" keeps them
    assert not grounded("You run a bank", text) and grounded("You run a bank", evidence_text(traj, 2, "all"))
    assert not grounded("savings balance?", text)
    one = [Checklist(2, "r", (Criterion("states 25.00"),))]
    lying = ScriptedJudge({"states 25.00": (True, "Savings holds $25.00.")})
    assert ChecklistScorer(lying, lambda t: one)([traj])[0].rewards == [0.0, 0.0, 0.0]
    honest = ScriptedJudge({"states 25.00": (True, "Savings holds $20.00.")})  # a grounded (if wrong) yes counts
    assert ChecklistScorer(honest, lambda t: one)([traj])[0].rewards == [0.0, 0.0, 1.0]


def test_an_unquoted_yes_counts_unless_quotes_are_required():
    traj = worked_trajectory()
    one = [Checklist(2, "r", (Criterion("names savings", rule=lambda: True),))]
    model = ScriptedJudge({"names savings": (True, None)})
    assert ChecklistScorer(model, lambda t: one)([traj])[0].rewards[-1] == 1.0
    assert ChecklistScorer(model, lambda t: one, require_quote=True)([traj])[0].rewards[-1] == 0.0
    assert ChecklistScorer(RuleJudge(), lambda t: one)([traj])[0].rewards[-1] == 1.0


@pytest.mark.parametrize(("assign", "valid"), [("end", [True, True, False]), ("turn", [True, True, False])])
def test_a_missing_verdict_is_invalid_never_zero(assign, valid):
    script = {k: v for k, v in WORKED_SCRIPT.items() if k != "names savings"}  # no verdict for it
    scores = ChecklistScorer(ScriptedJudge(script), lambda t: WORKED_CHECKLISTS, assign=assign)([worked_trajectory()])
    assert scores[0].valid == valid and math.isnan(scores[0].rewards[-1])
    assert scores[0].extras["errors"] == {"4": "no answer"}
    if assign == "turn":  # the first user turn's criteria all had verdicts: its reward stands
        assert scores[0].rewards[1] == pytest.approx(0.4)


def test_user_turns_end_where_the_user_speaks():
    assert user_turn_ends(worked_trajectory()) == [1, 2]


def play(agent_name: str, n: int, variant: str = "mixed") -> list[Trajectory]:
    env = gym.make("agentgym/ToolUse-v0", variant=variant)
    agent = make_agent(agent_name, env)
    return [run_episode(env, agent, seed=i, options={"task_index": i}) for i in range(n)]


def test_verified_tool_use_oracle_scores_one_and_random_near_zero():
    """Rule judge over ToolUse's gold: every oracle episode meets its whole checklist; the random agent meets
    under a tenth of its criteria on average, and each score is a multiple of 1/|C|."""
    scorer = ChecklistScorer(RuleJudge(), "tool_use")
    oracle = [s.rewards for s in scorer(play("oracle", 90))]
    assert all(r[:-1] == [0.0] * (len(r) - 1) and r[-1] == 1.0 for r in oracle)
    random_trajs = play("random", 90)
    scores = scorer(random_trajs)
    total = [sum(s.rewards) for s in scores]
    assert sum(total) / len(total) < 0.1
    for traj, s in zip(random_trajs, scores, strict=True):
        n = sum(len(cl.criteria) for cl in tool_use_checklists(traj))
        assert s.rewards[-1] == round(s.rewards[-1] * n) / n
    assert any(0 < t < 1 for t in total)  # partial credit happens


def test_verified_checklist_items_for_a_held_instruction():
    traj = play("oracle", 1, "miss_param")[0]
    lists = tool_use_checklists(traj)
    task = traj.reset_info["gold"]["task"]
    assert len(lists) == len(task["instructions"])
    assert [cl.turn for cl in lists] == [t for t, turn in enumerate(traj.turns) if "state_check" in turn.info]
    held = traj.reset_info["gold"]["hold"]["instruction"]
    assert [c.category for c in lists[held].criteria].count("ask") == 1
    assert all(c.rule() for cl in lists for c in cl.criteria)
    # the rule judge never sees gold in the prompt it would send a model: only the conversation and the criterion
    q = ChecklistScorer().question(traj, lists[0], lists[0].criteria[0])
    assert "Criterion: The agent called" in q.prompt and q.evidence and q.kind == "yesno"


def test_an_unreached_instruction_keeps_its_criteria_unmet():
    traj = play("oracle", 1)[0]
    cut = Trajectory(traj.env_id, traj.seed, traj.task_id, traj.agent, traj.initial_observation, traj.reset_info,
                     turns=traj.turns[:1])  # fmt: skip
    lists = tool_use_checklists(cut)
    assert len(lists) == len(traj.reset_info["gold"]["task"]["instructions"])
    assert all(cl.turn == 0 for cl in lists)
    assert ChecklistScorer()([cut])[0].rewards[0] < 0.5


def test_card():
    (card,) = catalogue.collect([checklist_module])
    assert card.name == "cm2" and card.load() is ChecklistScorer
    assert set(card.knobs()) == {"checklists", "assign", "scope", "require_quote"}
    with pytest.raises(ValueError, match="assign"):
        ChecklistScorer(assign="sometimes")
    with pytest.raises(ValueError, match="unknown checklists"):
        ChecklistScorer(checklists="nope")
    with pytest.raises(ValueError, match="need ToolUse-v0's"):
        ChecklistScorer()([worked_trajectory()])


@dataclass
class PerfectJudge:
    """A model-like judge that is always right (it answers by the question's rule) and quotes the first line of the
    agent's last message in the prompt."""

    name: str = "perfect"

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        out = []
        for q in questions:
            last = q.prompt.rsplit("### assistant\n", 1)[1].split("\n")[0]
            out.append(Verdict(float(q.rule()), evidence=last, reply="quoted"))
        return out


def test_a_perfect_judge_reduces_to_the_verified_variant():
    trajs = play("random", 20) + play("oracle", 10)
    perfect = [s.rewards for s in ChecklistScorer(PerfectJudge(), assign="turn")(trajs)]
    rule = [s.rewards for s in ChecklistScorer(RuleJudge(), assign="turn")(trajs)]
    assert perfect == rule and any(sum(r) > 0 for r in rule[:20])


def test_an_all_yes_judge_reduces_to_grpo_and_scoring_leaves_the_episode_alone():
    """Every criterion judged met: every rollout gets the same 1.0, so GRPO over outcome + checklist is GRPO over
    the outcome. Scoring never touches what the policy saw or said (the gold stays in the judge's questions)."""
    from agentgym.rewards.advantages.group import grpo

    @dataclass
    class AllYes:
        name: str = "yes"

        def ask(self, questions):
            return [Verdict(1.0) for _ in questions]

    trajs = play("random", 6) + play("oracle", 2)
    before = [(t.messages, [turn.reward for turn in t.turns]) for t in trajs]
    shares = [s.rewards[-1] for s in ChecklistScorer(AllYes())(trajs)]
    assert shares == [1.0] * len(trajs)
    outcomes = [t.turns[-1].reward_components.get("outcome", 0.0) for t in trajs]
    ids = [0] * len(trajs)
    assert grpo([o + r for o, r in zip(outcomes, shares, strict=True)], ids) == pytest.approx(grpo(outcomes, ids))
    assert [(t.messages, [turn.reward for turn in t.turns]) for t in trajs] == before


def test_over_a_real_llm_judge_endpoint():
    """CM2 with LLMJudge over a loopback OpenAI-compatible server answering the worked example's criteria: the
    quotes travel through the reply ('Evidence: "..."'), and a quote of the user's own request (in the prompt, so
    the judge accepts it) still counts as no under scope "agent"."""
    from agentgym.rewards.judge import LLMJudge
    from agentgym.tools.llm import LLMClient
    from tests.rule_judge import serve_rule_judge

    script = {**WORKED_SCRIPT, "thanks": (True, "tell me checking's balance")}  # the user's words, not the agent's

    def reply(system, user):
        yes, span = script[re.search(r"Criterion: (.*)", user).group(1)]
        return f'Evidence: "{span}"\nAnswer: yes' if yes else "Nothing shows it.\nAnswer: no"

    with serve_rule_judge(reply) as server:
        judge = LLMJudge(LLMClient(server.url, api_key_env=None, max_retries=0))
        scores = ChecklistScorer(judge, lambda t: WORKED_CHECKLISTS)([worked_trajectory()])[0]
        assert len(server.requests) == 5
    assert scores.rewards == pytest.approx([0.0, 0.0, 0.6]) and scores.extras["criteria"] == [1, 1, 0, 0, 1]
    assert scores.extras["evidence"][2] == "tell me checking's balance"
