"""BM25: the fast numba back-end against rank-bm25, tokenizer, adversarial queries, persistence and caching."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.tools.retrieval import Document, Hit, make_retriever
from agentgym.tools.retrieval.bm25 import (
    STOPWORDS,
    BM25Retriever,
    _tokenize_corpus_numba,
    _tokenize_corpus_python,
    tokenize,
)

pytest.importorskip("rank_bm25")

WORDS = [f"w{i}" for i in range(60)] + ["lake", "river", "film", "born", "city", "ovra"]


def random_corpus(seed: int, n_docs: int = 200, vocab: int = 40, zipf: float = 1.1) -> list[Document]:
    """Documents over a small Zipfian vocabulary (so many terms are shared and ties are common)."""
    rng = random.Random(seed)
    words = WORDS[:vocab] + sorted(STOPWORDS)[:5]
    weights = [1 / (i + 1) ** zipf for i in range(len(words))]
    docs = []
    for i in range(n_docs):
        title = " ".join(rng.choices(words, weights, k=rng.randint(0, 3)))
        text = " ".join(rng.choices(words, weights, k=rng.randint(0, 25)))
        docs.append(Document.from_title_text(f"d{i}", title, text))
    return docs


def random_queries(seed: int, n: int = 40) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices([*WORDS, "unknownword", "the", "?"], k=rng.randint(1, 8))) for _ in range(n)]


def assert_same_ranking(fast: list[Hit], ref: list[Hit], ref_scores: dict[str, float], tol: float = 1e-4) -> None:
    """Same length, scores within ``tol`` (relative for big scores), same ids in the same order.

    Ids may differ only between documents whose true (float64) scores are closer than float32 rounding can
    separate; exact ties are always ordered by corpus index in both back-ends.
    """
    assert len(fast) == len(ref), ([h.doc.id for h in fast], [h.doc.id for h in ref])
    for f, r in zip(fast, ref, strict=True):
        assert abs(f.score - r.score) <= tol * max(1.0, abs(r.score)), (f, r)
        assert abs(ref_scores[f.doc.id] - f.score) <= tol * max(1.0, abs(f.score))
        if f.doc.id != r.doc.id:  # only a float32 near-tie (never an exact tie) may be reordered
            a, b = ref_scores[f.doc.id], ref_scores[r.doc.id]
            assert a != b and abs(a - b) <= 1e-5 * max(1.0, abs(a)), (f, r, a, b)


def full_scores(ref: BM25Retriever, query: str) -> dict[str, float]:
    assert ref._rank is not None and ref._rank.bm25 is not None
    scores = ref._rank.bm25.get_scores(tokenize(query))
    return {d.id: float(s) for d, s in zip(ref.corpus, scores, strict=True)}


# ------------------------------------------------------------------------------------------------ tokenizer


def test_tokenize_lowercases_splits_and_drops_stopwords() -> None:
    assert tokenize("Who directed the film 'Ovra Lake' (1998)?") == ["directed", "film", "ovra", "lake", "1998"]
    assert tokenize("") == [] and tokenize("the of and a") == [] and tokenize("?!... --- ///") == []
    assert tokenize("snake_case x-ray") == ["snake", "case", "x", "ray"]
    assert tokenize("ÉCOLE naïve Ｆｕｌｌ") == ["école", "naïve", "full"]  # NFKC folds full-width letters


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_tokenize_fast_ascii_path_equals_the_regex_definition(text: str) -> None:
    ref = [t for t in re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).lower()) if t not in STOPWORDS]
    assert tokenize(text) == ref
    ascii_text = text.encode("ascii", "replace").decode()
    ref = [t for t in re.findall(r"[^\W_]+", ascii_text.lower()) if t not in STOPWORDS]
    assert tokenize(ascii_text) == ref


@given(st.lists(st.one_of(st.text(max_size=80), st.text('aB1 .the-ofZz\n"_', max_size=80)), max_size=12))
@settings(max_examples=200, deadline=None)
def test_numba_corpus_tokenizer_equals_python_definition(texts: list[str]) -> None:
    got = _tokenize_corpus_numba(texts)
    want = _tokenize_corpus_python(texts)
    assert got[2] == want[2]  # the vocabulary, in order of first occurrence
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_numba_corpus_tokenizer_on_many_words() -> None:
    # enough distinct words to grow the hash table several times; long words exercise the full byte comparison
    rng = random.Random(0)
    texts = [
        " ".join(f"W{rng.randrange(30_000)}{'x' * rng.randrange(12)} The OF" for _ in range(30)) for _ in range(400)
    ]
    got, want = _tokenize_corpus_numba(texts), _tokenize_corpus_python(texts)
    assert got[2] == want[2] and len(got[2]) > 5000
    np.testing.assert_array_equal(got[0], want[0])


# ------------------------------------------------------------------------------------------------ fast == rank_bm25


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("idf", ["okapi", "lucene"])
def test_fast_matches_rank_bm25_on_random_corpora(seed: int, idf: str) -> None:
    corpus = random_corpus(seed)
    fast = BM25Retriever(corpus, idf=idf)
    ref = BM25Retriever(corpus, idf=idf, backend="rank_bm25")
    queries = random_queries(seed)
    for topk in (1, 3, 10, 500):
        got, want = fast.batch_search(queries, topk), ref.batch_search(queries, topk)
        for q, f, r in zip(queries, got, want, strict=True):
            assert_same_ranking(f, r, full_scores(ref, q))
    fast.close()


@given(
    docs=st.lists(st.lists(st.sampled_from([*WORDS[:12], "the"]), max_size=12), min_size=1, max_size=30),
    queries=st.lists(st.lists(st.sampled_from([*WORDS[:14], "of"]), max_size=6), min_size=1, max_size=5),
    topk=st.integers(1, 40),
    idf=st.sampled_from(["okapi", "lucene"]),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fast_matches_rank_bm25_property(docs: list[list[str]], queries: list[list[str]], topk: int, idf: str) -> None:
    corpus = [Document(str(i), " ".join(d)) for i, d in enumerate(docs)]
    texts = [" ".join(q) for q in queries]
    fast = BM25Retriever(corpus, idf=idf, n_threads=1)
    ref = BM25Retriever(corpus, idf=idf, backend="rank_bm25")
    for q, f, r in zip(texts, fast.batch_search(texts, topk), ref.batch_search(texts, topk), strict=True):
        if ref._rank is not None and ref._rank.bm25 is not None:
            assert_same_ranking(f, r, full_scores(ref, q))
        else:
            assert f == r == []
        matching = {d.id for d in corpus if set(tokenize(d.contents)) & set(tokenize(q))}
        assert len(f) == min(topk, len(matching)) and {h.doc.id for h in f} <= matching


@given(
    seed=st.integers(0, 10_000),
    n_docs=st.integers(1, 300),
    vocab=st.integers(2, 66),
    zipf=st.floats(0.5, 2.0),
    topk=st.integers(1, 12),
    idf=st.sampled_from(["okapi", "lucene"]),
)
@settings(max_examples=60, deadline=None)
def test_pruning_changes_nothing(seed: int, n_docs: int, vocab: int, zipf: float, topk: int, idf: str) -> None:
    corpus = random_corpus(seed, n_docs=n_docs, vocab=vocab, zipf=zipf)
    queries = random_queries(seed, n=30)
    pruned = BM25Retriever(corpus, idf=idf, n_threads=1)
    assert pruned.prune
    exhaustive = BM25Retriever(corpus, idf=idf, n_threads=1, prune=False, _index=pruned._fast)
    assert pruned.batch_search(queries, topk) == exhaustive.batch_search(queries, topk)


def test_pruning_kicks_in_with_rare_and_common_terms() -> None:
    # one rare term decides the top 3; the common terms only update those candidates
    corpus = [Document(str(i), f"common{i % 3} filler{i % 5} common") for i in range(3000)]
    corpus += [Document(f"r{i}", f"rare common common{i}") for i in range(3)]
    r, plain = BM25Retriever(corpus), BM25Retriever(corpus, prune=False)
    for q in ("rare common common0 filler1", "common rare", "filler2 common1 rare rare"):
        got = r.search(q, 3)
        assert {h.doc.id for h in got} == {"r0", "r1", "r2"} and got == plain.search(q, 3)
        ref = BM25Retriever(corpus, backend="rank_bm25")
        assert_same_ranking(got, ref.search(q, 3), full_scores(ref, q))


def layered_corpus(seed: int, n_docs: int, dup: float) -> list[Document]:
    """Rare (r*), mid (m*) and common (c*) terms, so pruning starts after the short lists and the long ones are
    searched for the candidates (galloping or scanning); a ``dup`` share of documents repeat an earlier text (equal
    scores, ties broken by corpus order)."""
    rng = random.Random(seed)
    rates = {f"r{i}": 0.005 * (i + 1) for i in range(4)} | {f"m{i}": 0.05 * (i + 1) for i in range(4)}
    rates |= {f"c{i}": 0.5 + 0.15 * i for i in range(4)}
    texts: list[str] = []
    for _ in range(n_docs):
        if texts and rng.random() < dup:
            texts.append(rng.choice(texts))
            continue
        words = [w for w, p in rates.items() for _ in range(rng.randint(1, 3)) if rng.random() < p]
        texts.append(" ".join(rng.sample(words, len(words)) + ["pad"] * rng.randint(0, 20)))
    return [Document(str(i), t) for i, t in enumerate(texts)]


@given(
    seed=st.integers(0, 10_000),
    n_docs=st.integers(200, 3000),
    dup=st.sampled_from([0.0, 0.3, 0.8]),
    topk=st.sampled_from([1, 3, 10, 25, 60, 150]),
    idf=st.sampled_from(["okapi", "lucene"]),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pruning_with_many_candidates_long_lists_and_ties(
    seed: int, n_docs: int, dup: float, topk: int, idf: str
) -> None:
    corpus = layered_corpus(seed, n_docs, dup)
    rng = random.Random(seed + 1)
    vocab = [f"{c}{i}" for c in "rmc" for i in range(4)]
    queries = [" ".join(rng.choices(vocab, k=rng.randint(2, 7))) for _ in range(40)]
    queries += ["r0 c0 c1 c2 c3", "r3 m0 m1 c3 c3", "r0 r1 m3 c0 c1 c2 c3"]
    pruned = BM25Retriever(corpus, idf=idf, n_threads=1)
    exhaustive = BM25Retriever(corpus, idf=idf, n_threads=1, prune=False, _index=pruned._fast)
    for q in queries:  # topk near the number of matches of the rarest term, too
        idx = pruned._fast
        assert idx is not None
        ids = [idx.vocab[w] for w in tokenize(q) if w in idx.vocab]
        df = min((int(idx.indptr[t + 1] - idx.indptr[t]) for t in ids), default=0)
        for k in (topk, max(1, df - 1), df, df + 1):
            got, want = pruned.search_ids([q], k)[0], exhaustive.search_ids([q], k)[0]
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (q, k)
            assert got[1].dtype == np.float32


def common_corpus(seed: int, n_docs: int, dup: float) -> list[Document]:
    """Catalogue-like documents: common terms (c*: in 40-95% of them, sometimes repeated), a few rarer ones (r*)
    and padding of varied length; a ``dup`` share repeat an earlier document (exact ties)."""
    rng = random.Random(seed)
    rates = {f"c{i}": 0.4 + 0.11 * i for i in range(6)} | {f"r{i}": 0.01 * (i + 1) for i in range(3)}
    texts: list[str] = []
    for _ in range(n_docs):
        if texts and rng.random() < dup:
            texts.append(rng.choice(texts))
            continue
        words = [w for w, p in rates.items() if rng.random() < p for _ in range(rng.choice((1, 1, 1, 2, 3)))]
        texts.append(" ".join(words + [f"pad{rng.randint(0, 50)}" for _ in range(rng.randint(0, 12))]))
    return [Document(str(i), t) for i, t in enumerate(texts)]


def brute_force(toks: list[list[str]], query: str, idf_kind: str, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """Every document's BM25 score (``toks``: its tokens) in float64, straight from the module docstring's formula
    (0 where no query term occurs)."""
    n = len(toks)
    avgdl = sum(map(len, toks)) / n
    df: dict[str, int] = {}
    for t in toks:
        for w in set(t):
            df[w] = df.get(w, 0) + 1
    if idf_kind == "lucene":
        idf = {w: np.log1p((n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
    else:
        raw = {w: np.log(n - c + 0.5) - np.log(c + 0.5) for w, c in df.items()}
        floor = 0.25 * sum(raw.values()) / len(raw)
        idf = {w: v if v >= 0 else floor for w, v in raw.items()}
    scores = np.zeros(n)
    for i, t in enumerate(toks):
        for w in tokenize(query):
            tf = t.count(w)
            if tf:
                scores[i] += idf[w] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(t) / avgdl))
    return scores


@given(
    seed=st.integers(0, 10_000),
    n_docs=st.integers(50, 9000),
    dup=st.sampled_from([0.0, 0.5]),
    topk=st.sampled_from([1, 3, 10, 40]),
    idf=st.sampled_from(["okapi", "lucene"]),
)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_common_term_queries_are_exact(seed: int, n_docs: int, dup: float, topk: int, idf: str) -> None:
    """Queries whose terms are in most documents (scored window by window): the same ids and float32 scores as
    exhaustive scoring, and the top k of a float64 brute force over every document (up to float32 near-ties)."""
    corpus = common_corpus(seed, n_docs, dup)
    rng = random.Random(seed + 1)
    common = [f"c{i}" for i in range(6)]
    queries = [" ".join(rng.sample(common, rng.randint(1, 6))) for _ in range(8)] + ["c0 c5 c5 r0", "c1 c2 pad3"]
    pruned = BM25Retriever(corpus, idf=idf, n_threads=1)
    exhaustive = BM25Retriever(corpus, idf=idf, n_threads=1, prune=False, _index=pruned._fast)
    toks = [tokenize(d.contents) for d in corpus]
    for q, (ids, scores), (e_ids, e_scores) in zip(
        queries, pruned.search_ids(queries, topk), exhaustive.search_ids(queries, topk), strict=True
    ):
        assert ids.tolist() == e_ids.tolist() and scores.tobytes() == e_scores.tobytes(), q
        want = brute_force(toks, q, idf)
        matching = [i for i, t in enumerate(toks) if set(t) & set(tokenize(q))]
        assert len(ids) == min(topk, len(matching))
        np.testing.assert_allclose(scores, want[ids], rtol=1e-5)
        best = np.sort(want[matching])[::-1][: len(ids)]
        np.testing.assert_allclose(scores, best, rtol=1e-5)  # nothing left out scores higher


def test_common_terms_scoring_zero_are_still_hits() -> None:
    """okapi idf is exactly 0 for a term in half the documents: its matches score 0, and a search of it alone (a
    query of common terms, scored window by window, where a 0 is not told from no match) still returns them."""
    corpus = [Document("0", "half a"), Document("1", "x"), Document("2", "half b"), Document("3", "y")]
    for prune in (True, False):
        r = BM25Retriever(corpus, idf="okapi", prune=prune)
        hits = r.search("half", 3)
        assert [(h.doc.id, h.score) for h in hits] == [("0", 0.0), ("2", 0.0)]
        assert [h.doc.id for h in r.search("half b", 3)] == ["2", "0"]


def test_dense_pays_weighs_the_essential_postings() -> None:
    from agentgym.tools.retrieval.bm25 import SCAN_COST, _dense_pays

    def pays(dfs: list[int], bounds: list[float], n: int, share: float = 0.8, cost: int = 10) -> bool:
        return bool(_dense_pays(np.array(dfs), np.array(bounds), n, share, cost))

    # three common terms of equal bounds, the k-th score expected at 0.8 x 3 = 2.4: the first two (in bound order)
    # are non-essential, the third (700 postings) essential: 10 x 700 > 2,400 postings + a 1,000-document scan
    assert pays([900, 800, 700], [1.0, 1.0, 1.0], 1000)
    assert not pays([900, 800, 700], [1.0, 1.0, 1.0], 1000, cost=4)  # 2,800 < 3,400
    assert pays([900, 800, 700], [1.0, 1.0, 1.0], 1000, share=0.5, cost=4)  # 800 + 700 essential: 6,000 > 3,400
    # a rare term bounds above the common ones' sum (0.8 x 12 = 9.6 > 1 + 1): only its 10 postings are essential
    assert not pays([10, 900, 900], [10.0, 1.0, 1.0], 1000)
    # the boundary: essential * cost against postings + SCAN_COST * documents
    n = 1000
    df = (SCAN_COST * n) // (10 - 1) + 1  # one term: df * cost > df + scan
    assert pays([df], [1.0], n) and not pays([df - 1], [1.0], n)


def test_ties_break_by_corpus_order_and_no_match_gives_fewer_hits() -> None:
    corpus = [Document(str(i), "alpha beta") for i in range(6)] + [Document("x", "gamma"), Document("y", "delta")]
    for backend in ("fast", "rank_bm25"):
        r = BM25Retriever(corpus, backend=backend)
        assert [h.doc.id for h in r.search("beta", 4)] == ["0", "1", "2", "3"]
        assert [h.doc.id for h in r.search("gamma alpha", 10)] == ["x", "0", "1", "2", "3", "4", "5"]
        assert r.search("epsilon", 3) == [] and r.search("beta", 0) == [] and r.search("beta", -2) == []


def test_default_idf_is_lucenes(tmp_path: Path) -> None:
    """Lucene's idf by default (Search-R1's pyserini BM25): for a term in 1 of 2 one-word documents,
    log(1 + 1.5 / 1.5) = log 2, with tf saturation 1 * 2.5 / (1 + 1.5) = 1; rank-bm25's okapi idf is 0 there."""
    from agentgym.tools.retrieval.bm25 import BM25Params
    from agentgym.tools.retrieval.bm25_disk import DiskBM25

    corpus = [Document("0", "lake"), Document("1", "river")]
    assert BM25Params().idf == "lucene"
    for r in (
        BM25Retriever(corpus),
        BM25Retriever(corpus, backend="rank_bm25"),
        DiskBM25.build(corpus, tmp_path / "ix", progress=False),
    ):
        [hit] = r.search("lake", 3)
        assert hit.doc.id == "0" and hit.score == pytest.approx(np.log(2), rel=1e-6)
    assert BM25Retriever(corpus, idf="okapi").search("lake", 3)[0].score == 0.0


def test_negative_okapi_idf_uses_the_epsilon_floor_and_stays_a_hit() -> None:
    # "common" is in 3 of 4 docs -> negative raw idf -> floor = epsilon * mean idf (here negative too).
    corpus = [Document("0", "common rare"), Document("1", "common"), Document("2", "common"), Document("3", "other")]
    fast, ref = BM25Retriever(corpus, idf="okapi"), BM25Retriever(corpus, idf="okapi", backend="rank_bm25")
    for q in ("common", "rare common", "other"):
        f, r = fast.search(q, 5), ref.search(q, 5)
        assert [h.doc.id for h in f] == [h.doc.id for h in r]
        np.testing.assert_allclose([h.score for h in f], [h.score for h in r], rtol=1e-6, atol=1e-6)
    assert len(fast.search("common", 5)) == 3


def test_degenerate_corpora() -> None:
    for corpus in ([], [Document("0", "the of and"), Document("1", "?!")]):
        for backend in ("fast", "rank_bm25"):
            r = BM25Retriever(corpus, backend=backend)
            assert r.search("the lake", 3) == [] and r.batch_search(["a", "lake"], 2) == [[], []]
            assert r.batch_search([], 3) == []
    odd = [Document("s", "lake \ud800 ovra \x00"), Document("u", "Ｌａｋｅ café 湖"), Document("e", "")]
    for backend in ("fast", "rank_bm25"):
        r = BM25Retriever(odd, backend=backend)
        assert [h.doc.id for h in r.search("LAKE", 3)] == ["s", "u"] and r.search("湖", 3)[0].doc.id == "u"


# ------------------------------------------------------------------------------------------------ queries


ADVERSARIAL = [
    "",
    "   \n\t ",
    "the of and a an is",
    "?!?!... ((( ))) --- ''' \"\"",
    "x" * 1_000_000,
    "lake " * 200_000,  # a 1 MB query of one repeated term
    " ".join(f"w{i % 60} unseen{i}" for i in range(5000)),  # thousands of distinct tokens
    "🦆🦆 🌊 lake ✨",
    "\u202eekal\u202c \u200b\u200d ovra\u0301 ﬁlm ｌａｋｅ",  # bidi, zero-width, combining, ligature, full-width
    "\ud800 lone surrogate \udfff",
    "nul\x00byte\x1fcontrol",
    "Озеро 湖 بحيرة lake",
]


@pytest.mark.parametrize("query", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_queries_never_raise_and_agree(query: str) -> None:
    corpus = random_corpus(7, n_docs=120)
    fast, ref = BM25Retriever(corpus), BM25Retriever(corpus, backend="rank_bm25")
    f, r = fast.search(query, 5), ref.search(query, 5)
    assert all(isinstance(h, Hit) for h in f)
    if r:
        assert_same_ranking(f, r, full_scores(ref, query))
    else:
        assert f == []
    if not tokenize(query) or not set(tokenize(query)) & fast._fast.vocab.keys():  # type: ignore[union-attr]
        assert f == []


def test_batch_parallel_equals_single_queries_and_is_thread_safe() -> None:
    corpus = random_corpus(3, n_docs=500, vocab=60)
    queries = random_queries(3, n=300)
    r = BM25Retriever(corpus, n_threads=4)
    single = [r.search(q, 7) for q in queries]
    assert r.batch_search(queries, 7) == single
    for (ids, scores), hits in zip(r.search_ids(queries, 7, n_threads=1), single, strict=True):
        assert [corpus[i].id for i in ids.tolist()] == [h.doc.id for h in hits]
        assert scores.tolist() == [h.score for h in hits]
    results: dict[int, list[list[Hit]]] = {}

    def worker(t: int) -> None:
        results[t] = r.batch_search(queries[t::4], 7) + [r.search(q, 7) for q in queries[t::8]]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in range(6):
        assert results[t] == single[t::4] + single[t::8]
    r.close()


# ------------------------------------------------------------------------------------------------ persistence


def test_save_load_round_trip(tmp_path: Path) -> None:
    corpus = random_corpus(4)
    r = BM25Retriever(corpus, k1=1.2, b=0.6, idf="okapi")  # not the defaults
    r.save(tmp_path)
    loaded = BM25Retriever.load(tmp_path, corpus)
    assert loaded.params == r.params
    queries = random_queries(4)
    assert loaded.batch_search(queries, 10) == r.batch_search(queries, 10)
    changed = [*corpus[:-1], Document(corpus[-1].id, corpus[-1].contents + " extra")]
    with pytest.raises(ValueError, match="corpus"):
        BM25Retriever.load(tmp_path, changed)
    with pytest.raises(ValueError, match="fast"):
        BM25Retriever(corpus, backend="rank_bm25").save(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # a tampered file whose postings point outside the corpus is refused (the kernels do not bounds-check)
    with np.load(tmp_path / "bm25_index.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["post_docs"][0] = len(corpus) + 5
    np.savez(tmp_path / "bm25_index.npz", **arrays)
    with pytest.raises(ValueError, match="inconsistent"):
        BM25Retriever.load(tmp_path, corpus)


def test_cache_dir_reuses_and_invalidates(tmp_path: Path) -> None:
    corpus = random_corpus(5)
    queries = random_queries(5)
    first = BM25Retriever(corpus, cache_dir=tmp_path)
    assert not first.loaded_from_cache and len(list(tmp_path.glob("bm25-*.npz"))) == 1
    again = BM25Retriever(corpus, cache_dir=tmp_path)
    assert again.loaded_from_cache and again.batch_search(queries, 5) == first.batch_search(queries, 5)

    changed = [*corpus[:3], Document("new", "lake river ovra"), *corpus[3:]]
    rebuilt = BM25Retriever(changed, cache_dir=tmp_path)
    assert not rebuilt.loaded_from_cache and rebuilt.search("ovra lake", 1)[0].doc.id == "new"
    assert not BM25Retriever(corpus, cache_dir=tmp_path, k1=1.0).loaded_from_cache  # parameters are in the key
    assert len(list(tmp_path.glob("bm25-*.npz"))) == 3

    path = tmp_path / f"bm25-{first.cache_key()}.npz"
    path.write_bytes(path.read_bytes()[:100])  # a truncated file (e.g. a crash of some other writer)
    repaired = BM25Retriever(corpus, cache_dir=tmp_path)
    assert not repaired.loaded_from_cache and repaired.batch_search(queries, 5) == first.batch_search(queries, 5)
    assert BM25Retriever(corpus, cache_dir=tmp_path).loaded_from_cache


def test_make_retriever_specs(tmp_path: Path) -> None:
    corpus = random_corpus(6, n_docs=50)
    assert make_retriever("bm25", corpus).backend == "fast"
    assert make_retriever("bm25:rank_bm25", corpus).backend == "rank_bm25"
    from agentgym.tools.retrieval import write_corpus_jsonl

    write_corpus_jsonl(tmp_path / "c.jsonl", corpus)
    assert make_retriever("bm25", tmp_path / "c.jsonl").search("w1", 2) == make_retriever("bm25", corpus).search(
        "w1", 2
    )
    with pytest.raises(ValueError, match="unknown retriever spec"):
        make_retriever("tfidf", corpus)
    with pytest.raises(ValueError, match="backend"):
        make_retriever("bm25:nope", corpus)


# --- compiling the kernels: cached on disk, announced once ------------------------------------------------------


def run_python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (numba reads its cache settings at import), with extra environment."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def test_kernels_compile_once_per_cache_and_say_so(tmp_path: Path) -> None:
    """The first process compiles (and says so on stderr, once); the next loads the kernels from numba's on-disk
    cache (NUMBA_CACHE_DIR here; by default __pycache__ next to bm25.py, or ~/.cache/numba when that is
    read-only) and says nothing. Another module's numba function compiling is not announced."""
    from agentgym.tools.retrieval.bm25 import COMPILE_NOTICE

    code = (
        "import numba, agentgym.tools.retrieval.bm25 as b\n"
        "assert b._lower(65) == 97 and b._is_token_byte(65, 0)\n"
        "print(sum(b._lower.stats.cache_hits.values()), sum(b._lower.stats.cache_misses.values()))\n"
        "numba.njit(lambda x: x + 1)(1)\n"
    )
    cache = str(tmp_path / "numba-cache")
    cold = run_python(code, tmp_path, NUMBA_CACHE_DIR=cache)
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.count(COMPILE_NOTICE) == 1, cold.stderr
    assert cold.stdout.split() == ["0", "1"]  # compiled: a cache miss
    assert list((tmp_path / "numba-cache").rglob("bm25._lower-*.nbi"))
    warm = run_python(code, tmp_path, NUMBA_CACHE_DIR=cache)
    assert warm.returncode == 0, warm.stderr
    assert "compiling" not in warm.stderr, warm.stderr
    assert warm.stdout.split() == ["1", "0"]  # loaded from the cache


def test_kernels_work_without_a_writable_cache(tmp_path: Path) -> None:
    """With no writable cache location (read-only install, no writable home) numba would refuse cache=True at
    import; the kernels compile in each process instead, and the notice says how to keep them."""
    from agentgym.tools.retrieval.bm25 import UNCACHED_NOTICE

    code = (
        "import numba.core.caching as c\n"
        "def unwritable(self):\n"
        "    raise PermissionError(13, 'read-only', self.get_cache_path())\n"
        "c._CacheLocator.ensure_cache_path = unwritable\n"
        "import agentgym.tools.retrieval.bm25 as b\n"
        "assert b._lower(65) == 97\n"
        "print('_search_range' in b._uncached)\n"
    )
    out = run_python(code, tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    assert out.returncode == 0, out.stderr
    assert out.stderr.count(UNCACHED_NOTICE) == 1, out.stderr
    assert out.stdout.strip() == "True"


def test_search_kernels_are_ready_when_the_retriever_is_built(monkeypatch) -> None:
    """Building a fast retriever compiles (or loads) the search kernels, so the first query does not pause."""
    from agentgym.tools.retrieval import bm25

    calls = []
    real = bm25._search_range
    monkeypatch.setattr(bm25, "_search_range", lambda *args: calls.append(args) or real(*args))
    r = BM25Retriever(random_corpus(0, n_docs=20))
    assert len(calls) == 1
    assert r.search("w1", 2) and len(calls) == 2
    assert BM25Retriever([]).search("w1") == [] and len(calls) == 2  # an empty corpus never runs a kernel
