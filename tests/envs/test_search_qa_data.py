"""SearchQA synthetic data: determinism, hop mix, answerability, uniqueness, splits, retrieval, FlashRAG files."""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import pytest

from agentgym.envs.search_qa.data import HOP_TYPES, DatasetConfig, QADataset, QAExample, build_dataset
from agentgym.envs.search_qa.flashrag import FlashRAGFormatError, load_flashrag, load_saved
from agentgym.envs.search_qa.kb import TEMPLATE_WORDS, build_kb
from agentgym.envs.search_qa.names import REAL_NAMES, invented_words
from agentgym.envs.search_qa.questions import COMPARISONS, RELATIONS, SECOND_WORDINGS
from agentgym.grading.answers import normalize_answer


@pytest.fixture(scope="module")
def tiny() -> QADataset:
    return build_dataset("tiny", seed=0)


@pytest.fixture(scope="module")
def small() -> QADataset:
    return build_dataset("small", seed=0)


def digest(ds: QADataset) -> str:
    h = hashlib.sha256()
    for d in ds.corpus:
        h.update(json.dumps(d.to_json()).encode())
    for ex in ds.train + ds.test:
        h.update(json.dumps(ex.to_json()).encode())
    return h.hexdigest()


def number(s: str) -> int:
    return int(s.replace(",", "").removesuffix(" km"))


# --- determinism ------------------------------------------------------------------------------------------


def test_same_seed_is_identical_and_other_seeds_differ(tiny, small):
    assert digest(build_dataset("tiny", seed=0)) == digest(tiny)
    assert digest(build_dataset("small", seed=0)) == digest(small)
    other = build_dataset("tiny", seed=1)
    assert digest(other) != digest(tiny)
    assert [d.contents for d in other.corpus] != [d.contents for d in tiny.corpus]
    assert [e.question for e in other.test] != [e.question for e in tiny.test]


def test_identical_across_processes_and_hash_seeds(tiny):
    code = (
        "import hashlib, json; from agentgym.envs.search_qa.data import build_dataset; ds = build_dataset('tiny', 0); "
        "h = hashlib.sha256(); [h.update(json.dumps(d.to_json()).encode()) for d in ds.corpus]; "
        "[h.update(json.dumps(e.to_json()).encode()) for e in ds.train + ds.test]; print(h.hexdigest())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code], env={"PYTHONHASHSEED": s}, capture_output=True, text=True, check=True
        ).stdout.strip()
        for s in ("1", "2")
    }
    assert outs == {digest(tiny)}


def test_global_random_state_untouched():
    py_state, np_state = random.getstate(), np.random.get_state()
    build_dataset("tiny", seed=3)
    assert random.getstate() == py_state
    after = np.random.get_state()
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]


# --- sizes and speed --------------------------------------------------------------------------------------


def test_preset_sizes_and_build_time(tiny, small):
    t0 = time.perf_counter()
    build_dataset("tiny", seed=5)
    t1 = time.perf_counter()
    build_dataset("small", seed=5)
    t2 = time.perf_counter()
    assert t1 - t0 < 10.0  # hang guards (~0.04 s and ~1 s here): a loaded machine must still pass
    assert t2 - t1 < 60.0
    assert 300 <= len(tiny.corpus) < 1000
    assert 2000 <= len(small.corpus) < 10000
    assert (len(small.train), len(small.test)) == (2000, 2000)


@pytest.mark.slow
def test_100k_preset_reaches_100k_docs_quickly():
    t0 = time.perf_counter()
    ds = build_dataset("100k", seed=0)
    elapsed = time.perf_counter() - t0
    assert len(ds.corpus) >= 100_000
    assert elapsed < 300, f"100k preset took {elapsed:.1f}s"  # a hang guard
    assert len(ds.test) == DatasetConfig.preset("100k").n_test


def test_config_validation():
    with pytest.raises(ValueError, match="unknown preset"):
        DatasetConfig.preset("huge")
    with pytest.raises(ValueError, match="n_people"):
        DatasetConfig(n_people=1)
    with pytest.raises(ValueError, match="hop_mix"):
        DatasetConfig(hop_mix=(("5hop", 1.0),))
    with pytest.raises(ValueError, match="n_people must be >= n_companies"):
        DatasetConfig(n_people=10, n_companies=20)
    with pytest.raises(ValueError, match="could not generate"):
        build_dataset(DatasetConfig(n_people=4, n_cities=4, n_companies=2, n_films=2, n_rivers=2, n_countries=2,
                                    event_docs=0, n_train=10, n_test=200))  # fmt: skip
    assert sum(DatasetConfig().hop_counts(7).values()) == 7


# --- structure of the questions ---------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_hop_mix_and_fields(preset, tiny, small):
    ds = tiny if preset == "tiny" else small
    for split in ("train", "test"):
        examples = ds.split(split)
        counts = Counter(e.hop_type for e in examples)
        assert counts == {t: n for t, n in ds.config.hop_counts(len(examples)).items() if n}
        assert set(counts) == set(HOP_TYPES)
        for i, ex in enumerate(examples):
            assert ex.id == f"{split}-{i:05d}" and ex.split == split
            assert ex.hops == len(ex.supporting_doc_ids) == len(ex.oracle_queries) == len(ex.hop_entities)
            assert len(ex.hop_answers) == ex.hops
            assert ex.hops == {"1hop": 1, "bridge": 2, "comparison": 2}.get(ex.hop_type, ex.hops)
            assert ex.hop_type != "multihop" or ex.hops in (3, 4)
            assert ex.golden_answers and all(a.strip() for a in ex.golden_answers)
            assert len({normalize_answer(a) for a in ex.golden_answers}) == len(ex.golden_answers)
            gold = ex.gold()
            assert json.loads(json.dumps(gold)) == gold
            assert {"answers", "hop_type", "hops", "supporting_doc_ids", "oracle_queries"} <= set(gold)
    assert {e.hops for e in ds.test if e.hop_type == "multihop"} == {3, 4}


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_every_question_is_answerable_from_its_supporting_docs(preset, tiny, small):
    ds = tiny if preset == "tiny" else small
    for ex in ds.train + ds.test:
        docs = [ds.doc(d) for d in ex.supporting_doc_ids]
        assert len(set(ex.supporting_doc_ids)) == ex.hops  # no page visited twice
        for doc, entity, fact, query in zip(docs, ex.hop_entities, ex.hop_answers, ex.oracle_queries, strict=True):
            assert doc.title == entity  # hop k's document is the page of hop k's entity ...
            assert fact in doc.text  # ... and states what the hop needs
            assert query.startswith(entity + " ")  # the oracle query names that entity
        assert ex.hop_entities[0] in ex.question
        if ex.hop_type == "comparison":
            assert ex.golden_answers[0] in ex.hop_entities and ex.hop_entities[1] in ex.question
            winner = ex.hop_entities.index(ex.golden_answers[0])
            values = [number(v) for v in ex.hop_answers]
            assert values[0] != values[1]
            want_more = ex.template.endswith(":more")
            assert values[winner] == (max(values) if want_more else min(values))
            loser = ex.hop_entities[1 - winner]
            assert not any(normalize_answer(a) == normalize_answer(loser) for a in ex.golden_answers)
        else:
            assert ex.golden_answers[0] == ex.hop_answers[-1]
            assert ex.golden_answers[0] in docs[-1].text  # the canonical answer is stated literally
            for bridge in ex.hop_entities[1:]:
                assert bridge not in ex.question  # bridge entities must be found, not read off the question


def test_names_are_unique_invented_and_not_template_words(small):
    kb = build_kb(DatasetConfig.preset("small"), np.random.default_rng(0))
    names = [n for kind in kb.entities.values() for n in kind.names]
    assert len(names) == len(set(names))
    titles = [d.title for d in small.corpus]
    assert len(titles) == len(set(titles))
    assert [d.id for d in small.corpus] == [str(i) for i in range(len(small.corpus))]
    words = {w.lower() for n in names for w in re.findall(r"[A-Za-z]+", n)}
    name_words = words - TEMPLATE_WORDS
    assert not name_words & REAL_NAMES
    people = kb["person"]
    surnames = Counter(people.short)
    assert any(c > 1 for c in surnames.values())  # near-duplicate names exist
    for short, aliases in zip(people.short, people.aliases, strict=True):
        assert aliases == ((short,) if surnames[short] == 1 else ())  # a shared surname is never an answer


def test_invented_words_are_unique_and_respect_reserved():
    taken: set[str] = set()
    a = invented_words(np.random.default_rng(0), 500, taken=taken)
    b = invented_words(np.random.default_rng(0), 500, taken=taken, reserved=["Zomereiv"])
    assert len(set(a) | set(b)) == 1000 and "Zomereiv" not in b
    assert all(w[0].isupper() and w[1:].islower() and 4 <= len(w) <= 10 for w in a + b)


def test_train_and_test_share_no_question_or_anchor(tiny, small):
    for ds in (tiny, small):
        assert not {e.question for e in ds.train} & {e.question for e in ds.test}
        assert len({e.question for e in ds.train + ds.test}) == len(ds.train) + len(ds.test)
        assert not {e.id for e in ds.train} & {e.id for e in ds.test}
        named = {split: set() for split in ("train", "test")}
        for ex in ds.train + ds.test:
            named[ex.split].update(ex.hop_entities[:2] if ex.hop_type == "comparison" else ex.hop_entities[:1])
        assert not named["train"] & named["test"]


def test_split_and_doc_lookup(tiny):
    assert tiny.split("test") is tiny.test and tiny.split("train") is tiny.train
    with pytest.raises(ValueError):
        tiny.split("dev")
    ex = tiny.test[3]
    assert tiny.example(ex.id) == ex
    assert tiny.doc(ex.supporting_doc_ids[0]).id == ex.supporting_doc_ids[0]
    with pytest.raises(KeyError):
        tiny.doc("no-such-doc")


# --- retrieval: oracle queries find their supporting documents --------------------------------------------


def _retriever(ds: QADataset, backend: str):
    """``search(query) -> top-3 doc ids`` with the project's BM25 or with rank-bm25 (lowercase-word tokens)."""
    if backend == "agentgym":
        bm25 = pytest.importorskip("agentgym.tools.retrieval.bm25")
        retriever = bm25.BM25Retriever(ds.corpus, backend="fast")
        return lambda q: [h.doc.id for h in retriever.search(q, 3)]
    rank_bm25 = pytest.importorskip("rank_bm25")

    def tokenize(s: str) -> list[str]:
        return re.findall(r"\w+", s.lower())

    index = rank_bm25.BM25Okapi([tokenize(d.contents) for d in ds.corpus])
    ids = [d.id for d in ds.corpus]
    return lambda q: [ids[i] for i in np.argsort(-index.get_scores(tokenize(q)), kind="stable")[:3]]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["agentgym", "rank_bm25"])
def test_oracle_queries_recall_at_3(small, backend):
    search = _retriever(small, backend)
    hits: dict[str, list[bool]] = defaultdict(list)
    for ex in small.test[:500]:
        for query, doc_id in zip(ex.oracle_queries, ex.supporting_doc_ids, strict=True):
            hits[ex.hop_type].append(doc_id in search(query))
    recall = {t: sum(h) / len(h) for t, h in hits.items()}
    assert set(recall) == set(HOP_TYPES)
    assert all(r >= 0.95 for r in recall.values()), recall
    assert sum(map(sum, hits.values())) / sum(map(len, hits.values())) >= 0.98, recall


# --- FlashRAG files ---------------------------------------------------------------------------------------


def test_save_and_reload_round_trip(tmp_path, tiny):
    tiny.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"corpus.jsonl", "train.jsonl", "test.jsonl", "meta.json"}
    row = json.loads((tmp_path / "test.jsonl").read_text().splitlines()[0])
    assert set(row) == {"id", "question", "golden_answers", "metadata"}
    assert {"hop_type", "hops", "supporting_doc_ids", "oracle_queries"} <= set(row["metadata"])
    assert set(json.loads((tmp_path / "corpus.jsonl").read_text().splitlines()[0])) == {"id", "contents"}

    again = load_saved(tmp_path)
    assert again.config == tiny.config and again.seed == tiny.seed
    assert again.corpus == tiny.corpus and again.train == tiny.train and again.test == tiny.test
    test_only = load_flashrag(tmp_path / "test.jsonl", tmp_path / "corpus.jsonl")
    assert test_only.test == tiny.test and test_only.train == [] and test_only.corpus == tiny.corpus
    as_train = load_flashrag(tmp_path / "train.jsonl", None, split="train")
    assert as_train.train == tiny.train and as_train.corpus == []


def test_public_benchmark_rows(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [
        {"question": "who wrote x?", "golden_answers": ["A", "B"]},
        {"id": "hp_1", "question": "which is older?", "golden_answers": "C", "metadata": {"type": "comparison"}},
        {"id": "w_2", "question": "q3", "golden_answers": [1990], "metadata": {"type": "compositional", "level": 2}},
    ]
    path.write_text("\ufeff" + "\n".join(json.dumps(r) for r in rows) + "\n\n")
    ds = load_flashrag(path, split="test")
    a, b, c = ds.test
    assert a == QAExample("test-00000", "who wrote x?", ("A", "B"), "unknown", 0, (), (), "test")
    assert (b.id, b.golden_answers, b.hop_type) == ("hp_1", ("C",), "comparison")
    assert (c.golden_answers, c.hop_type, c.supporting_doc_ids) == (("1990",), "bridge", ())
    assert ds.config is None and ds.corpus == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q", "golden_answers": ["a"]}\n\n{"question": "q2", "golden_answers": [\n',
         r":3: not valid JSON"),
        ('["q", ["a"]]\n', r":1: expected a JSON object"),
        ('{"golden_answers": ["a"]}\n', r":1: 'question' must be a non-empty string"),
        ('{"question": "q"}\n', r":1: missing 'golden_answers'"),
        ('{"question": "q", "golden_answers": [["a"]]}\n', r":1: 'golden_answers' must be a string or a list"),
        ('{"question": "q", "golden_answers": []}\n', r":1: 'golden_answers' is empty"),
        ('{"question": "q", "golden_answers": ["a"], "metadata": [1]}\n', r":1: 'metadata' must be an object"),
        ('{"question": "q", "golden_answers": ["a"], "metadata": {"hops": "2"}}\n', r":1: 'metadata.hops'"),
        ('{"id": 1, "question": "q", "golden_answers": ["a"]}\n{"id": "1", "question": "r", "golden_answers": ["b"]}\n',
         r":2: duplicate question id '1'"),
        ('{"question": "q", "golden_answers": ["a"], "metadata": {"supporting_doc_ids": ["99"]}}\n',
         r":1: supporting document '99' is not in the corpus"),
    ],
)  # fmt: skip
def test_malformed_question_files(tmp_path, content, message):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "0", "contents": "\\"T\\"\\nx"}\n')
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(FlashRAGFormatError, match=re.escape(str(path)) + message):
        load_flashrag(path, corpus)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"contents": "x"}\n', r":1: a corpus row needs an 'id'"),
        ('{"id": "0", "contents": "\\"T\\"\\nx"}\n{"id": "1"}\n', r":2: a corpus row needs a string 'contents'"),
        ('{"id": "0", "contents": "a"}\n{"id": 0, "title": "t", "text": "b"}\n', r":2: duplicate document id '0'"),
        ('{"id": "0", "contents": "a"}\nnot json\n', r":2: not valid JSON"),
    ],
)
def test_malformed_corpus_files(tmp_path, content, message):
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "q", "golden_answers": ["a"]}\n')
    path = tmp_path / "corpus.jsonl"
    path.write_text(content)
    with pytest.raises(FlashRAGFormatError, match=re.escape(str(path)) + message):
        load_flashrag(questions, path)


def test_unreadable_files(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"question": "q", "golden_answers": ["a"]}\n{"question": "\xff"}\n')
    with pytest.raises(FlashRAGFormatError, match=r":2: not valid UTF-8"):
        load_flashrag(path)
    with pytest.raises(FlashRAGFormatError, match="cannot open"):
        load_flashrag(tmp_path / "missing.jsonl")
    (tmp_path / "corpus.jsonl").write_text('{"id": "0", "contents": "a"}\n')
    (tmp_path / "meta.json").write_text("{")
    with pytest.raises(FlashRAGFormatError, match=r"meta\.json: not a valid"):
        load_saved(tmp_path)


def test_every_question_has_a_rewording_naming_the_same_entities(small, tmp_path):
    singles = {t for r in RELATIONS.values() for ts in (r.ask, r.np) if len(ts) == 1 for t in ts}
    singles |= {t for c in COMPARISONS for ts in (c.more, c.less) if len(ts) == 1 for t in ts}
    assert singles == set(SECOND_WORDINGS)  # each lone template has its second wording, and no other template does
    for ex in small.test + small.train:
        assert ex.rewording and ex.rewording != ex.question and ex.rewording.endswith("?")
        named = ex.hop_entities if ex.hop_type == "comparison" else ex.hop_entities[:1]
        assert all(name in ex.rewording and name in ex.question for name in named), ex
    small.save(tmp_path / "d")
    assert [e.rewording for e in load_saved(tmp_path / "d").test] == [e.rewording for e in small.test]
