"""DiskBM25: built in chunks and served from memory-mapped files, it ranks exactly like BM25Retriever."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.tools.retrieval.base import Document
from agentgym.tools.retrieval.bm25 import BM25Params, BM25Retriever
from agentgym.tools.retrieval.bm25_disk import DiskBM25, IndexMismatchError, build_index
from agentgym.tools.retrieval.corpus import CorpusFile
from agentgym.tools.retrieval.synthetic import write_corpus, write_queries

WORDS = ["lake", "Lake", "river", "film", "the", "of", "été", "ÉTÉ", "ﬁlm", "naïve", "東京", "x1", "1998", "born", ""]


def assert_same(disk: DiskBM25, ref: BM25Retriever, queries: list[str], topk: int) -> None:
    pairs = zip(disk.search_ids(queries, topk), ref.search_ids(queries, topk), strict=True)
    for q, ((di, ds), (ri, rs)) in zip(queries, pairs, strict=True):
        assert di.tolist() == ri.tolist(), q
        np.testing.assert_allclose(ds, rs, rtol=1e-6, atol=1e-6)
    for q in queries[:5]:
        assert [(h.doc, h.score) for h in disk.search(q, topk)] == [(h.doc, h.score) for h in ref.search(q, topk)]


texts = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)
documents = st.lists(st.tuples(texts, texts), min_size=1, max_size=25)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    docs=documents,
    queries=st.lists(texts, min_size=1, max_size=6),
    chunk=st.integers(1, 30),
    idf=st.sampled_from(["okapi", "lucene"]),
    topk=st.integers(0, 8),
)
def test_matches_in_memory_index(tmp_path: Path, docs, queries, chunk, idf, topk) -> None:
    corpus = [Document.from_title_text(str(i), t, x) for i, (t, x) in enumerate(docs)]
    ref = BM25Retriever(corpus, idf=idf, n_threads=1)
    folder = tmp_path / f"ix{chunk}{idf}"
    disk = DiskBM25.build(corpus, folder, params=BM25Params(idf=idf), chunk_docs=chunk, progress=False, n_threads=2)
    assert_same(disk, ref, [*queries, "lake river lake", "the of", "été ÉTÉ 東京"], topk)


SMALL_VOCAB = [f"w{i}" for i in range(14)]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    n_docs=st.integers(130, 700),
    seed=st.integers(0, 2**31),
    queries=st.lists(
        st.lists(st.sampled_from(SMALL_VOCAB), min_size=1, max_size=7).map(" ".join), min_size=1, max_size=5
    ),
    topk=st.integers(1, 40),
)
def test_long_posting_lists_match_in_memory_index(tmp_path: Path, n_docs, seed, queries, topk) -> None:
    """Posting lists of several blocks (a 14-word vocabulary over hundreds of documents), where block-max pruning
    skips and decodes blocks: the same ids and float32 scores as the in-memory index, pruned or not."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(SMALL_VOCAB) + 1)
    corpus = [
        Document.from_title_text(str(i), "", " ".join(rng.choice(SMALL_VOCAB, rng.integers(1, 25), p=p / p.sum())))
        for i in range(n_docs)
    ]
    ref = BM25Retriever(corpus, n_threads=1)
    folder = tmp_path / f"ix{seed}"
    disk = DiskBM25.build(corpus, folder, chunk_docs=97, progress=False, n_threads=1)
    exhaustive = DiskBM25(folder, corpus, prune=False, n_threads=1)
    for q, (ri, rs), (di, ds), (ei, es) in zip(
        queries,
        ref.search_ids(queries, topk),
        disk.search_ids(queries, topk),
        exhaustive.search_ids(queries, topk),
        strict=True,
    ):
        assert di.tolist() == ri.tolist() == ei.tolist(), q
        assert ds.tobytes() == rs.tobytes() == es.tobytes(), q  # bit-identical scores


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    n_docs=st.integers(20, 9000),
    seed=st.integers(0, 2**31),
    topk=st.sampled_from([1, 3, 10, 40]),
    idf=st.sampled_from(["okapi", "lucene"]),
)
def test_common_term_queries_match_exhaustive_scoring(tmp_path: Path, n_docs, seed, topk, idf) -> None:
    """Terms in 40-95% of the documents, over several windows of documents and many blocks: the window-by-window
    scoring gives the ids and float32 scores of the in-memory index without pruning."""
    rng = np.random.default_rng(seed)
    rates = np.array([0.4, 0.55, 0.7, 0.85, 0.95, 0.02])
    words = np.array(["c0", "c1", "c2", "c3", "c4", "r0"])
    corpus = []
    for i in range(n_docs):
        present = words[rng.random(len(words)) < rates]
        toks = [w for w in present.tolist() for _ in range(int(rng.integers(1, 4)))]
        corpus.append(Document.from_title_text(str(i), "", " ".join(toks + ["pad"] * int(rng.integers(0, 15)))))
    ref = BM25Retriever(corpus, idf=idf, n_threads=1, prune=False)
    disk = DiskBM25.build(corpus, tmp_path / f"ix{seed}{idf}", params=BM25Params(idf=idf), chunk_docs=4000,
                          progress=False, n_threads=1)  # fmt: skip
    queries = ["c0 c1 c2 c3 c4", "c4", "c2 c3", "c0 c0 c4", "c1 c4 pad", "c0 c1 r0", "r0 c3"]
    for q, (ri, rs), (di, ds) in zip(queries, ref.search_ids(queries, topk), disk.search_ids(queries, topk),
                                     strict=True):  # fmt: skip
        assert di.tolist() == ri.tolist(), q
        assert ds.tobytes() == rs.tobytes(), q


def test_common_term_windows_that_cannot_win_are_skipped_exactly(tmp_path: Path) -> None:
    """The best documents come first (short, with the terms repeated): the later windows' block maxima cannot beat
    the top 10, so they are skipped, the cursors moved past them, and the results are still exhaustive scoring's
    (equal scores by corpus order)."""
    from agentgym.tools.retrieval.bm25 import WINDOW

    n = 3 * WINDOW + 300
    texts = ["c0 c0 c0 c1 c1 c1" if i < 40 else "c0 c1 " + "pad " * (3 + i % 7) for i in range(n)]
    texts[2 * WINDOW + 5] = "c0 c0 c0 c0 c1 c1 c1 c1"  # one better document in the third window
    texts[n - 1] = "c1 c1 c1 c1"  # and at the very end
    corpus = [Document.from_title_text(str(i), "", t) for i, t in enumerate(texts)]
    ref = BM25Retriever(corpus, n_threads=1, prune=False)
    disk = DiskBM25.build(corpus, tmp_path / "ix", progress=False, n_threads=1)
    for q in ("c0 c1", "c1 c0 c0", "c1"):
        (ri, rs), (di, ds) = ref.search_ids([q], 10)[0], disk.search_ids([q], 10)[0]
        assert di.tolist() == ri.tolist() and ds.tobytes() == rs.tobytes(), q
    assert disk.search_ids(["c0 c1"], 10)[0][0].tolist() == [2 * WINDOW + 5, *range(9)]


def test_common_terms_scoring_zero_are_still_hits(tmp_path: Path) -> None:
    """okapi idf is exactly 0 for a term in half the documents: a query of it alone still returns its matches."""
    corpus = [Document("0", "half a"), Document("1", "x"), Document("2", "half b"), Document("3", "y")]
    disk = DiskBM25.build(corpus, tmp_path / "ix", params=BM25Params(idf="okapi"), progress=False)
    assert [(h.doc.id, h.score) for h in disk.search("half", 3)] == [("0", 0.0), ("2", 0.0)]
    assert [h.doc.id for h in disk.search("half b", 3)] == ["2", "0"]


def test_queries_with_many_terms_go_term_at_a_time(tmp_path: Path) -> None:
    """A query with more distinct terms than DAAT_MAX_TERMS (an untrusted client can send thousands) is scored
    term-at-a-time, with the same results."""
    from agentgym.tools.retrieval.postings import DAAT_MAX_TERMS

    words = [f"t{i}" for i in range(3 * DAAT_MAX_TERMS)]
    rng = np.random.default_rng(0)
    corpus = [Document.from_title_text(str(i), "", " ".join(rng.choice(words, 12))) for i in range(400)]
    ref = BM25Retriever(corpus, n_threads=1)
    disk = DiskBM25.build(corpus, tmp_path / "ix", progress=False)
    queries = [" ".join(words[: 2 * DAAT_MAX_TERMS]), " ".join(words[:DAAT_MAX_TERMS]), " ".join(words * 3)]
    for (ri, rs), (di, ds) in zip(ref.search_ids(queries, 10), disk.search_ids(queries, 10), strict=True):
        assert di.tolist() == ri.tolist() and ds.tobytes() == rs.tobytes()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    name=st.sampled_from(["words", "block_bits", "block_off", "block_last", "term_blocks", "indptr"]),
    where=st.floats(0, 1),
    value=st.integers(0, 255),
)
def test_damaged_postings_never_crash(tmp_path: Path, name, where, value) -> None:
    """A byte of the packed postings changed anywhere: opening refuses the folder, or every search still runs (the
    kernels never read out of bounds). Index files are untrusted input."""
    rng = np.random.default_rng(1)
    corpus = [Document.from_title_text(str(i), "", " ".join(rng.choice(SMALL_VOCAB, 9))) for i in range(300)]
    folder = tmp_path / "ix"
    if not (folder / "meta.json").exists():
        build_index(corpus, folder, progress=False)
    path = folder / f"{name}.npy"
    original = path.read_bytes()
    data = bytearray(original)
    i = 128 + int(where * (len(data) - 129))
    data[i] = value
    path.write_bytes(bytes(data))
    try:
        disk = DiskBM25(folder, corpus)
    except IndexMismatchError:
        pass
    else:
        for q in [" ".join(SMALL_VOCAB), "w0 w1", "w13", " ".join(SMALL_VOCAB * 8)]:
            disk.search(q, 7)
    finally:
        path.write_bytes(original)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[CorpusFile, list[str]]:
    d = tmp_path_factory.mktemp("syn")
    write_corpus(d / "c.jsonl", 3000, seed=3, vocab_size=20_000, progress=False)
    write_queries(d / "q.jsonl", 300, seed=4, n_passages=3000, corpus_seed=3, vocab_size=20_000)
    queries = [json.loads(line)["question"] for line in (d / "q.jsonl").read_text().splitlines()]
    return CorpusFile.open(d / "c.jsonl", progress=False), queries


@pytest.mark.parametrize("chunk", [1000, 1, None])
def test_synthetic_corpus(tmp_path: Path, synthetic, chunk: int | None) -> None:
    corpus, queries = synthetic
    ref = BM25Retriever(list(corpus), n_threads=2)
    if chunk == 1:  # one document per chunk: slow-ish, so a prefix of the corpus
        sub = [corpus[i] for i in range(300)]
        ref = BM25Retriever(sub, n_threads=2)
        disk = DiskBM25.build(sub, tmp_path / "ix", chunk_docs=1, progress=False)
    else:  # None: sized by a budget just above this process's size, i.e. the minimum chunk
        disk = DiskBM25.build(corpus, tmp_path / "ix", chunk_docs=chunk, max_memory=1, progress=False)
        assert json.loads((tmp_path / "ix" / "meta.json").read_text())["build"]["chunks"] >= 3
    assert_same(disk, ref, queries, 10)
    for topk in (1, 100):
        assert_same(disk, ref, queries[:50], topk)
    hits = disk.batch_search(queries[:3], 2)
    assert all(isinstance(h.doc, Document) for hs in hits for h in hs)


def test_refuses_foreign_or_damaged_folders(tmp_path: Path) -> None:
    corpus = [Document.from_title_text(str(i), "t", f"lake river {i}") for i in range(50)]
    folder = tmp_path / "ix"
    build_index(corpus, folder, chunk_docs=7, progress=False)
    DiskBM25(folder, corpus)
    other = [*corpus[:-1], Document.from_title_text("49", "t", "lake")]
    with pytest.raises(IndexMismatchError, match="corpus"):
        DiskBM25(folder, other)
    with pytest.raises(IndexMismatchError, match="params"):
        DiskBM25(folder, corpus, params=BM25Params(k1=1.2))
    meta = json.loads((folder / "meta.json").read_text())
    for key, value in [("tokenizer", "other"), ("format", 99)]:
        (folder / "meta.json").write_text(json.dumps({**meta, key: value}))
        with pytest.raises(IndexMismatchError, match=key):
            DiskBM25(folder, corpus)
    (folder / "meta.json").write_text(json.dumps(meta))
    # a truncated array, one of the wrong type, then postings whose ids leave the corpus
    data = (folder / "words.npy").read_bytes()
    (folder / "words.npy").write_bytes(data[:-8])
    with pytest.raises(IndexMismatchError):
        DiskBM25(folder, corpus)
    np.save(folder / "block_last.npy", np.load(folder / "block_max.npy"))
    with pytest.raises(IndexMismatchError, match="wrong type"):
        DiskBM25(folder, corpus)
    DiskBM25.build(corpus, folder, chunk_docs=7, progress=False)
    words = np.load(folder / "words.npy")
    words[0] = 0xFFFFFFFF
    np.save(folder / "words.npy", words)
    with pytest.raises(IndexMismatchError, match="inconsistent"):
        DiskBM25(folder, corpus)
    # open_or_build rebuilds what does not match; a missing meta is refused
    fixed = DiskBM25.open_or_build(corpus, folder, progress=False)
    assert [h.doc.id for h in fixed.search("lake 7", 1)] == ["7"]
    (folder / "meta.json").unlink()
    with pytest.raises(IndexMismatchError, match="meta"):
        DiskBM25(folder, corpus)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_empty_corpus_and_stopword_only(tmp_path: Path) -> None:
    corpus = [Document.from_title_text("0", "the", "of the"), Document("1", "")]
    disk = DiskBM25.build(corpus, tmp_path / "ix", progress=False)
    assert disk.search("the lake", 3) == [] and disk.batch_search(["", "of"], 3) == [[], []]
    assert disk.term_id("lake") == -1


_PEAK = """
import sys
from agentgym.tools.retrieval.corpus import CorpusFile
from agentgym.tools.retrieval.bm25 import BM25Retriever
from agentgym.tools.retrieval.bm25_disk import build_index

def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))

corpus = CorpusFile.open(sys.argv[1], progress=False)
tiny = [corpus[0], corpus[1]]  # load the numba kernels (their code is baseline, not build memory)
BM25Retriever(tiny) if sys.argv[3] == "memory" else build_index(tiny, sys.argv[2], progress=False)
with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM (the peak) to the current RSS: imports not counted
    f.write("5")
base = status("VmRSS:")
if sys.argv[3] == "disk":
    build_index(corpus, sys.argv[2], max_memory=base + int(sys.argv[4]), progress=False)
else:
    BM25Retriever(list(corpus))
print(base, status("VmHWM:"))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_build_memory_is_bounded(tmp_path: Path) -> None:
    """Peak RSS of a build stays under baseline + budget, and grows far less than the in-memory build's over a 5x
    larger corpus."""
    write_corpus(tmp_path / "big.jsonl", 50_000, seed=0, progress=False)
    write_corpus(tmp_path / "small.jsonl", 10_000, seed=0, progress=False)
    budget = 64 << 20
    script = textwrap.dedent(_PEAK)

    def peak(name: str, kind: str) -> tuple[int, int]:
        args = [sys.executable, "-c", script, str(tmp_path / name), str(tmp_path / f"ix-{name}"), kind, str(budget)]
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()
        return int(out[-2]), int(out[-1])

    peak("small.jsonl", "disk")  # kernels compiled and cached before anything is measured
    peak("small.jsonl", "memory")
    base_s, disk_small = peak("small.jsonl", "disk")
    base_b, disk_big = peak("big.jsonl", "disk")
    assert disk_small <= base_s + budget and disk_big <= base_b + budget, (disk_small - base_s, disk_big - base_b)
    mem_s, mem_small = peak("small.jsonl", "memory")
    mem_b, mem_big = peak("big.jsonl", "memory")
    growth_disk = (disk_big - base_b) - (disk_small - base_s)
    growth_mem = (mem_big - mem_b) - (mem_small - mem_s)
    assert growth_disk < 0.5 * growth_mem, (growth_disk >> 20, growth_mem >> 20)


def test_build_removes_leftovers_of_a_killed_build(tmp_path: Path) -> None:
    corpus = [Document.from_title_text(str(i), "t", f"lake {i}") for i in range(5)]
    folder = tmp_path / "ix"
    (folder / ".build-old").mkdir(parents=True)
    (folder / ".build-old" / "0.run.docs").write_bytes(b"x")
    (folder / ".words.npy.abc.tmp").write_bytes(b"x")
    (folder / ".notes.tmp").write_text("not ours")
    DiskBM25.build(corpus, folder, progress=False)
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == [".notes.tmp"]


def test_cli_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    """A bad --max-memory, a missing corpus or a malformed one: a usage error (exit 2, one error line), never a
    traceback."""
    from agentgym.tools.retrieval.bm25_disk import main

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "0", "contents": "\\"T\\"\\nhello"}\n' + "[" * 5000 + "\n")
    for argv, message in ((["--max-memory", "lots"], "expected a positive size"),
                          (["--max-memory=-1G"], "expected a positive size"),
                          ([], "c.jsonl:2: not valid JSON")):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            main(["build", str(corpus), str(tmp_path / "ix"), *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert message in err[-1] and "Traceback" not in "\n".join(err)
    with pytest.raises(SystemExit) as exc:
        main(["build", str(tmp_path / "missing.jsonl"), str(tmp_path / "ix")])
    assert exc.value.code == 2 and "cannot open" in capsys.readouterr().err


def test_damaged_vocabulary_never_matches_or_reads_out_of_bounds(tmp_path: Path) -> None:
    """The vocabulary files are data: a word span out of range, or a hash table with no free row, never matches
    and never reads past an array (the compiled lookup does not bounds-check otherwise)."""
    corpus = [Document.from_title_text(str(i), f"Lake {i}", f"lake ovra number {i}") for i in range(20)]
    folder = tmp_path / "ix"
    DiskBM25.build(corpus, folder, progress=False)
    good = DiskBM25(folder, corpus)
    lake = good.term_id("lake")
    assert lake >= 0 and good.term_id("ovra") >= 0 and good.term_id("nope") == -1
    start = np.load(folder / "vocab_start.npy")
    start[lake] = 1 << 40  # the word's bytes out of range
    np.save(folder / "vocab_start.npy", start)
    disk = DiskBM25(folder, corpus)
    assert disk.term_id("lake") == -1 and disk.search("lake", 3) == [] and disk.term_id("ovra") >= 0
    table = np.load(folder / "vocab_table.npy")
    table[:, 1] = (1 << 32) | 5  # every row full: probing ends after one pass
    np.save(folder / "vocab_table.npy", table)
    disk = DiskBM25(folder, corpus)
    assert disk.term_id("lake") == -1 and disk.batch_search(["lake ovra", "x"], 3) == [[], []]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pruned_search_on_disk_is_exact_with_many_candidates_and_ties(tmp_path: Path, seed: int) -> None:
    """The pruned kernel's galloping/scanning candidate phase on the memory-mapped (uint32) postings: the same ids,
    order and float32 scores as without pruning and as the in-memory index, ties (repeated texts) included."""
    rng = np.random.default_rng(seed)
    vocab = [f"r{i}" for i in range(4)] + [f"m{i}" for i in range(4)] + [f"c{i}" for i in range(4)]
    rates = np.array([0.005, 0.01, 0.015, 0.02, 0.05, 0.1, 0.15, 0.2, 0.5, 0.65, 0.8, 0.95])
    texts: list[str] = []
    for _ in range(2500):
        if texts and rng.random() < 0.3:  # a repeated text: equal scores, broken by corpus order
            texts.append(texts[int(rng.integers(len(texts)))])
            continue
        words = [w for w, p in zip(vocab, rates, strict=True) if rng.random() < p for _ in range(rng.integers(1, 4))]
        texts.append(" ".join([*rng.permutation(words).tolist(), *["pad"] * int(rng.integers(0, 20))]))
    corpus = [Document(str(i), t) for i, t in enumerate(texts)]
    queries = [" ".join(rng.choice(vocab, int(rng.integers(2, 7))).tolist()) for _ in range(60)]
    queries += ["r0 c0 c1 c2 c3", "r3 m0 m1 c3 c3", "r0 r1 m3 c0 c1 c2 c3"]
    disk = DiskBM25.build(corpus, tmp_path / "ix", progress=False, n_threads=2)
    plain = DiskBM25(tmp_path / "ix", corpus, n_threads=2, prune=False)
    ref = BM25Retriever(corpus, n_threads=2)
    for topk in (1, 10, 40, 200):
        got, want, mem = disk.search_ids(queries, topk), plain.search_ids(queries, topk), ref.search_ids(queries, topk)
        for q, (g, w, r) in zip(queries, zip(got, want, mem, strict=True), strict=True):
            for a, b in ((g, w), (g, r)):
                assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[1].dtype == b[1].dtype, (q, topk)


@settings(max_examples=60, deadline=None)
@given(
    lists=st.lists(
        st.tuples(
            st.sets(st.integers(0, 2**32 - 2), min_size=1, max_size=300),
            st.integers(1, 2**31 - 1),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_packed_blocks_round_trip(lists) -> None:
    """Any ascending doc ids below 2**32 and any tf from 1 to 2**31 - 1 (widths up to 32 bits) pack into blocks that
    validate and decode to the same postings, each block recording its last doc and its largest impact."""
    from agentgym.tools.retrieval.postings import BLOCK, _decode, pack_blocks, validate

    docs = np.concatenate([np.sort(np.fromiter(ids, np.int64)) for ids, _ in lists]).astype(np.uint32)
    rng = np.random.default_rng(len(docs))
    tf = np.concatenate([rng.integers(1, top, len(ids), endpoint=True) for ids, top in lists]).astype(np.int32)
    imp = rng.random(len(docs)).astype(np.float32)
    dfs = np.array([len(ids) for ids, _ in lists], np.int64)
    starts = np.concatenate([[0], np.cumsum(dfs)])
    term_blocks = np.concatenate([[0], np.cumsum((dfs + BLOCK - 1) // BLOCK)])
    nb = int(term_blocks[-1])
    last, bmax = np.empty(nb, np.uint32), np.empty(nb, np.float32)
    bits, off = np.empty(2 * nb, np.uint8), np.empty(nb + 1, np.int64)
    words = np.zeros(2 * len(docs) + nb + 1, np.uint32)
    used = pack_blocks(docs, tf, imp, starts, last, bmax, bits, off[:-1], words)
    off[-1] = used
    words = np.concatenate([words[:used], np.zeros(1, np.uint32)])
    assert validate(starts, term_blocks, last, bits, off, words, 2**32)
    ix = (starts, term_blocks, last, bmax, bits, off, words)
    bufd, buft = np.empty(BLOCK, np.int64), np.empty(BLOCK, np.int64)
    for t in range(len(lists)):
        got_d, got_t = [], []
        for b in range(term_blocks[t], term_blocks[t + 1]):
            n = _decode(ix, term_blocks[t], b, dfs[t], bufd, buft)
            got_d += bufd[:n].tolist()
            got_t += buft[:n].tolist()
            a = starts[t] + (b - term_blocks[t]) * BLOCK
            assert last[b] == docs[a + n - 1] and bmax[b] == imp[a : a + n].max()
        assert got_d == docs[starts[t] : starts[t + 1]].tolist() and got_t == tf[starts[t] : starts[t + 1]].tolist()
    if bits[0] > 0:  # the first gap off by one: every later doc of the block moves, and its last doc no longer matches
        words[0] ^= 1
        assert not validate(starts, term_blocks, last, bits, off, words, 2**32)
