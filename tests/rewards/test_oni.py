"""ONI (docs/grounded-rewards.md, 'ONI'): steps never wait for the judge (they complete while a blocked judge has
answered nothing), seen anchors return their label and unseen ones 0, labels are frozen per batch, the queue and
the cache are bounded, a failed verdict leaves no label, copies and pickles work, and the thread shuts down cleanly.
No test measures time: a judge that blocks on an event stands for a slow one (one that sleeps a second per call)."""

import copy
import pickle
import threading

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.rewards import oni
from agentgym.rewards.catalogue import collect
from agentgym.rewards.oni import AnnotationTable, Annotator, LearnedBonus
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict


class GatedJudge:
    """Answers by rule, but only once ``gate`` is set: until then every call blocks (a judge slower than any step)."""

    name = "gated"

    def __init__(self):
        self.gate = threading.Event()
        self.calls = 0
        self.answered = 0

    def ask(self, questions):
        self.calls += 1
        self.gate.wait()
        out = RuleJudge().ask(questions)
        self.answered += len(out)
        return out


def searchqa(table, coef=1.0):
    return LearnedBonus(gym.make("agentgym/SearchQA-v0", dataset="tiny"), table, coef=coef)


def play(env, seed, queries):
    """Reset, then search each query (an index into the oracle queries, or a string); the step infos."""
    _, info = env.reset(seed=seed)
    out = []
    for q in queries:
        text = info["gold"]["oracle_queries"][q] if isinstance(q, int) else q
        out.append(env.step(f"<search>{text}</search>"))
    return out


def test_steps_complete_while_the_judge_has_answered_nothing():
    judge = GatedJudge()
    table = AnnotationTable(judge)
    env = searchqa(table)
    steps = [s for seed in range(4) for s in play(env, seed, [0, "nothing relevant", 1])]
    assert len(steps) == 12 and judge.answered == 0  # every step returned; the judge is still blocked
    assert all(s[-1]["reward_components"]["oni"] == 0.0 for s in steps)
    assert table.annotator.pending > 0
    judge.gate.set()
    table.annotator.wait_idle()
    assert judge.answered == table.annotator.answered > 0
    table.close()
    assert not table.annotator._thread.is_alive()


def test_seen_anchors_return_their_label_unseen_zero_frozen_per_batch():
    table = AnnotationTable()
    env = searchqa(table, coef=0.5)
    good = str(play(env, 3, [0])[0][-1]["anchor"])
    bad = str(play(env, 3, ["zzz qqq"])[0][-1]["anchor"])
    table.annotator.wait_idle()
    labels = table.annotator.labels()
    assert labels[good] == 1.0 and labels[bad] == 0.0  # above the reset's progress / not
    again = play(env, 3, [0])  # the snapshot is the one taken before the labels came: still 0
    assert again[0][1] == 0.0
    table.update([good, bad])
    assert [play(env, 3, [q])[0][1] for q in (0, "zzz qqq")] == [0.5, 0.0]
    unseen = play(env, 4, [0])  # another question: its anchor was never labelled in this snapshot
    assert unseen[0][-1]["anchor"] not in table.snapshot().labels and unseen[0][1] == 0.0
    table.close()


def test_the_queue_is_bounded_and_a_known_key_is_asked_once():
    annotator = Annotator(RuleJudge(), maxsize=2, autostart=False)
    q = Question("yesno", "?", rule=lambda: True)
    # not started: nothing leaves the queue until wait_idle starts the thread, so what fits is exact
    assert [annotator.submit(k, q) for k in "abcde"] == [True, True, False, False, False]
    assert annotator.dropped == 3 and not annotator.submit("a", q)
    annotator.wait_idle()
    assert annotator.labels() == {"a": 1.0, "b": 1.0}
    assert not annotator.submit("a", q)  # labelled: never asked again
    annotator.close()


def test_the_cache_is_bounded_oldest_first():
    annotator = Annotator(RuleJudge(), cache_size=3, batch=1)
    for k in "abcde":
        annotator.submit(k, Question("yesno", k, rule=lambda: False))
        annotator.wait_idle()
    assert list(annotator.labels()) == ["c", "d", "e"]
    annotator.close()


class Flaky:
    name = "flaky"

    def ask(self, questions):
        return [Verdict(None, error="down") for _ in questions]


def test_a_failed_verdict_leaves_no_label():
    annotator = Annotator(Flaky())
    annotator.submit("a", Question("yesno", "?", rule=lambda: True))
    annotator.wait_idle()
    assert annotator.labels() == {} and annotator.failed == 1 and annotator.pending == 0
    annotator.close()


def test_close_refuses_later_submits_and_is_idempotent():
    annotator = Annotator()
    annotator.submit("a", Question("yesno", "?", rule=lambda: True))
    annotator.close()
    assert not annotator._thread.is_alive() and annotator.labels() == {"a": 1.0}
    assert not annotator.submit("b", Question("yesno", "?", rule=lambda: True))
    annotator.close()


def test_table_copies_and_pickles_with_its_labels():
    table = AnnotationTable()
    env = searchqa(table)
    play(env, 3, [0])
    table.annotator.wait_idle()
    table.update()
    for clone in (copy.deepcopy(table), pickle.loads(pickle.dumps(table))):
        assert clone.snapshot().labels == table.snapshot().labels and clone.updates == 1
        assert clone.annotator.labels() == table.annotator.labels()
    table.close()


def test_the_bonus_needs_an_anchor():
    env = LearnedBonus(gym.make("CartPole-v1"), None)
    env.reset(seed=0)
    with pytest.raises(KeyError, match="anchor"):
        env.step(0)


def test_card():
    (card,) = collect([oni])
    assert card.name == "oni" and card.load() is LearnedBonus and "coef" in card.knobs()


def test_an_llm_judge_over_http_annotates_in_the_background():
    """The table's judge from a config spec (an endpoint): a served rule judge says yes to observations that show
    passages (an <information> block) and no otherwise; the labels arrive asynchronously and reach the next batch."""
    from rule_judge import serve_rule_judge

    def reply(system, user):
        return "Answer: yes" if "<information>" in user and "Doc 1" in user else "Answer: no"

    with serve_rule_judge(reply) as server:
        table = AnnotationTable({"base_url": server.url, "api_key_env": None, "max_retries": 0})
        env = searchqa(table, coef=0.5)
        anchor = play(env, 3, [0])[0][-1]["anchor"]
        table.annotator.wait_idle()
        table.update()
        assert table.snapshot().label(anchor) == 1.0 and len(server.requests) == 1
        assert play(env, 3, [0])[0][1] == 0.5
        table.close()


def test_table_judge_specs():
    assert isinstance(AnnotationTable("rule").annotator.judge, RuleJudge)
    with pytest.raises(ValueError, match="endpoint URL"):
        AnnotationTable("gpt-4")
    with pytest.raises(ValueError, match="takes no"):
        AnnotationTable({"base_url": "http://127.0.0.1:1/v1", "colour": "red"})
