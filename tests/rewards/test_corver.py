"""CorVer (docs/grounded-rewards.md, 'CorVer'): on SearchQA-v0's tiny corpus a sentence copied from a supporting
document gets 1, a pair that never co-occurs 0, a sentence without a pair is neutral; one corpus lookup per sentence
with a pair; the worked example by hand; the sentence splitter's spans; and SearchQA-v0's entity names."""

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import corver
from agentgym.rewards.catalogue import collect
from agentgym.rewards.corver import CooccurrenceIndex, CorpusVerifier, sentences


@pytest.fixture(scope="module")
def tiny():
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    inner = env.unwrapped
    index = CooccurrenceIndex(inner.entity_names(), [f"{d.title} {d.text}" for d in inner.dataset.corpus])
    yield inner, index
    env.close()


def test_a_sentence_copied_from_a_supporting_document_gets_one(tiny):
    env, index = tiny
    checked = 0
    for ex in env.examples[:20]:
        for doc_id in ex.supporting_doc_ids:
            for _, _, s in sentences(env.dataset.doc(doc_id).text):
                if index.pair(s) is not None:
                    assert index.verify(s) == 1.0, s
                    checked += 1
    assert checked >= 20


def test_a_pair_that_never_cooccurs_gets_zero(tiny):
    env, index = tiny
    a, b = "Krubrar Zemgozis", "Deidoustam"
    assert not any(a in d.text and b in d.text for d in env.dataset.corpus)  # checked on the raw corpus
    assert any(a in d.text for d in env.dataset.corpus) and any(b in d.text for d in env.dataset.corpus)
    assert index.verify(f"{a} was born in {b}.") == 0.0


def test_a_sentence_without_a_pair_is_neutral(tiny):
    _, index = tiny
    assert index.verify("I should search for the founder.") is None
    assert index.verify("Barnogra Motors makes books.") is None  # one name only


def test_one_lookup_per_sentence_with_a_pair(tiny):
    _, index = tiny
    before = index.lookups
    text = ("<think>Barnogra Motors was founded by Krubrar Zemgozis. I will look it up. Krubrar Zemgozis was born in "
            "Trolkend.</think>")  # fmt: skip
    verifier = CorpusVerifier(index=index)
    traj = Trajectory("agentgym/SearchQA-v0", 0, "q", "a", [], {}, turns=[Turn(text, [], 0.0, False, False, {})])
    verifier([traj])
    assert index.lookups - before == 2


def test_worked_example_by_hand():
    """Passages: 'Ada Vell was born in Orrin.' and 'Kest is a river.' Turn 0 claims Ada Vell - Orrin (v = 1) and says
    nothing checkable; turn 1 claims Ada Vell - Kest (v = 0). mean v = 1/2; coef 0.2: r = [0.2 * (1 - 1/2),
    0.2 * (0 - 1/2)] = [0.1, -0.1]; uncentred [0.2, 0]."""
    index = CooccurrenceIndex(["Ada Vell", "Orrin", "Kest"], ["Ada Vell was born in Orrin.", "Kest is a river."])
    turns = [Turn("<think>Ada Vell comes from Orrin. Let me check.</think><search>Ada Vell</search>", [], 0.0,
                  False, False, {}),
             Turn("<answer>Ada Vell swam in the Kest.</answer>", [], 0.0, True, False, {})]  # fmt: skip
    traj = Trajectory("x", 0, "q", "a", [], {}, turns=turns)
    (scores,) = CorpusVerifier(index=index, coef=0.2)([traj])
    assert scores.rewards == pytest.approx([0.1, -0.1]) and scores.extras["mean_v"] == 0.5
    first = scores.extras["sentences"][0]
    assert [(turns[0].action[a:b], v) for a, b, v in first] == [
        ("Ada Vell comes from Orrin.", 1.0), ("Let me check.", None), ("Ada Vell", None)]  # fmt: skip
    (raw,) = CorpusVerifier(index=index, coef=0.2, center=False)([traj])
    assert raw.rewards == pytest.approx([0.2, 0.0])


def test_n_passages_threshold():
    index = CooccurrenceIndex(["A Name", "B Name"], ["A Name and B Name.", "B Name met A Name.", "A Name alone."])
    assert index.count("A Name", "B Name") == 2
    assert index.verify("A Name knows B Name.", n=2) == 1.0 and index.verify("A Name knows B Name.", n=3) == 0.0


def test_the_scorer_builds_the_index_from_the_env():
    action = "<think>Barnogra Motors was founded by Krubrar Zemgozis.</think><search>x</search>"
    traj = Trajectory("agentgym/SearchQA-v0", 0, "q", "a", [], {}, turns=[Turn(action, [], 0.0, False, False, {})])
    (scores,) = CorpusVerifier(corpus_kwargs={"dataset": "tiny"}, center=False, coef=1.0)([traj])
    assert scores.rewards == [1.0]


def test_longest_name_wins():
    index = CooccurrenceIndex(["Orrin", "Orrin City", "Kest"], ["Orrin City lies on the Kest."])
    assert index.mentions("Orrin City and Kest") == ["Orrin City", "Kest"]


def test_card():
    (card,) = collect([corver])
    assert card.name == "corver" and card.load() is CorpusVerifier and {"n", "coef", "center"} <= set(card.knobs())
