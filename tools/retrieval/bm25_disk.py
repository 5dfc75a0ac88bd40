"""BM25 that builds in bounded memory and serves from disk: the scoring, ranking and result policy of
:class:`~agentgym.tools.retrieval.bm25.BM25Retriever` (see that module's docstring), for corpora that do not fit in RAM
(Search-R1's wiki-18: 21M passages).

**Build** (:func:`build_index`, :meth:`DiskBM25.build`): the documents are read in chunks (from a ``CorpusFile`` or
any sequence of ``Document``), each tokenised by bm25.py's numba tokenizer. A chunk's local terms are interned into
one global vocabulary (an open-addressing hash table over the terms' UTF-8 bytes, in numpy arrays: about 100 bytes
per distinct term with df, no Python object per term), so terms are numbered in order of first occurrence as in the
in-memory index; the chunk's postings (global term, doc id, tf), sorted by term, and its doc lengths go to
temporary files. The merge then walks the global term range in blocks of postings, gathers each block's postings
from every chunk (chunks in corpus order, so doc ids ascend within a term), computes the float32 impacts with the
global N, avgdl and df exactly as the in-memory index does (for the block maxima), and packs the postings into
compressed blocks (postings.py: bit-packed doc gaps and term frequencies, 128 postings a block, with each block's
last doc and largest impact).

Chunk sizes follow ``max_memory``: before each chunk the build reads its resident set size and takes
``(max_memory - rss - room for the vocabulary to double) / BYTES_PER_DOC`` documents (``BYTES_PER_DOC`` was
measured on wiki-18-shaped synthetic passages, ~100 words: the transient memory of tokenising and sorting one chunk,
per document, with margin), at least 1024; merge blocks take
``(max_memory - rss) / BYTES_PER_POSTING`` postings. The global vocabulary, df and the doc lengths (4 bytes per
document) stay in memory for the whole build and count against the budget. A budget below the interpreter's
baseline plus those cannot be met: the build then goes on with the smallest chunks and blocks (1024 documents, 65536
postings) and overshoots by up to their size, and many small chunks make the merge slow.

**Folder** (format 2; files written to temporary names and renamed; ``meta.json`` last, after removing the old one):
``meta.json`` (format, params, tokenizer, stop words, N, avgdl, corpus identity, sizes), ``indptr.npy`` (int64,
V+1: postings per term), ``term_blocks.npy`` (int64, V+1), the blocks ``block_last.npy`` (uint32), ``block_max.npy``
(float32), ``block_bits.npy`` (uint8, 2 a block), ``block_off.npy`` (int64) and ``words.npy`` (uint32, the packed
bits), ``term_max.npy`` (float32, V), ``idf.npy`` (float64, V), ``norm.npy`` (float64, N: each document's
``k1 * (1 - b + b * |d| / avgdl)``) and the vocabulary ``vocab_table.npy`` / ``vocab_blob.npy`` /
``vocab_start.npy`` / ``vocab_len.npy``. Impacts are recomputed from tf, idf and norm at query time by the in-memory
index's float64 operations, so they are bit-identical to it.

**Serve** (:class:`DiskBM25`): the arrays are opened with ``np.load(mmap_mode="r")`` (page cache, shared between
processes) and searched by postings.py's block-max MaxScore kernel (document-at-a-time, decoding only the blocks a
candidate can fall in; queries of common terms window by window), so results equal ``BM25Retriever``'s, ids and
float32 scores. Opening checks the meta against
the corpus and the code (format, tokenizer, stop words, params when given), the arrays' dtypes and shapes, and decodes
every block once (the kernels do not bounds-check); a mismatch raises :class:`IndexMismatchError`
(``open_or_build`` rebuilds instead, so a format-1 folder is rebuilt). Hits' documents are read from the corpus on
demand.

CLI: ``python -m agentgym.tools.retrieval.bm25_disk build CORPUS.jsonl INDEX_DIR [--max-memory 4G]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .base import Document, Hit, Retriever, corpus_fingerprint, parse_size, save_npy_atomic
from .bm25 import (
    STOPWORDS,
    TOKENIZER_VERSION,
    BM25Params,
    _available_cpus,
    _csr_from_tokens,
    _idf,
    _intern,
    _kernel,
    _rehash,
    _tokenize_corpus_raw,
    _WorkspacePool,
    run_queries,
    tokenize,
)
from .corpus import CorpusFile
from .postings import BLOCK, pack_blocks, search_range, validate

__all__ = ["BYTES_PER_DOC", "BYTES_PER_POSTING", "FORMAT_VERSION", "DiskBM25", "IndexMismatchError", "build_index"]

FORMAT_VERSION = 2
BYTES_PER_DOC = 10_000
"""Transient build memory per document of a chunk (measured on ~100-word passages: ~3 KB marginal, ~6.5 KB all-in
at 20k-document chunks; plus margin)."""
BYTES_PER_POSTING = 170
"""Transient merge memory per posting of a block (gathered ids, tf, destinations, the float64 impact terms and the
packing buffer)."""
_MIN_CHUNK_DOCS = 1024  # fewer, larger runs: the merge visits every run once per block
_MIN_BLOCK_POSTINGS = 1 << 16
_ARRAYS = {
    "indptr": np.int64,
    "term_blocks": np.int64,
    "block_last": np.uint32,
    "block_max": np.float32,
    "block_bits": np.uint8,
    "block_off": np.int64,
    "words": np.uint32,
    "term_max": np.float32,
    "idf": np.float64,
    "norm": np.float64,
    "vocab_table": np.int64,
    "vocab_blob": np.uint8,
    "vocab_start": np.int64,
    "vocab_len": np.int32,
}
_FNV_OFFSET_U64 = np.uint64(0xCBF29CE484222325)  # bm25.py's _intern hashes: FNV-1a over the UTF-8 bytes
_FNV_PRIME_U64 = np.uint64(0x100000001B3)


class IndexMismatchError(ValueError):
    """An index folder does not belong to this corpus / these params / this code, or its files are damaged."""


def _rss() -> int:
    """Resident set size of this process in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _corpus_identity(corpus: Sequence[Document]) -> dict[str, Any]:
    """What the index must match: a ``CorpusFile``'s file fingerprint (size, mtime, edge hash; no full read), or
    ``corpus_fingerprint`` of an in-memory sequence."""
    if isinstance(corpus, CorpusFile):
        return {"n": len(corpus), "file": asdict(corpus.fingerprint)}
    return {"n": len(corpus), "docs": corpus_fingerprint(corpus)}


def _read_docs(corpus: Sequence[Document], a: int, b: int) -> list[Document]:
    if isinstance(corpus, CorpusFile):
        return next(corpus.iter_batches(b - a, start=a, stop=b))
    return [corpus[i] for i in range(a, b)]


# ----------------------------------------------------------------------------------------------- build


@_kernel
def _intern_words(src, starts, lens, table, blob, wstart, wlen, n_words, used):  # pragma: no cover - compiled
    """Intern the words ``src[starts[i]:starts[i]+lens[i]]`` (capacity of blob/wstart/wlen ensured by the caller);
    returns (global id per word, table, n_words, used)."""
    out = np.empty(starts.size, np.int64)
    for i in range(starts.size):
        s = starts[i]
        e = s + lens[i]
        t, new = _intern(src, s, e, table, blob, wstart, n_words, used)
        if new:
            wlen[n_words] = e - s
            used += e - s
            n_words += 1
            if 2 * n_words > table.shape[0]:
                table = _rehash(table)
        out[i] = t
    return out, table, n_words, used


def _grown(a: np.ndarray, need: int) -> np.ndarray:
    if need <= a.shape[0]:
        return a
    new = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    new[: a.shape[0]] = a
    return new


@dataclass
class _Vocab:
    """The global vocabulary while building: bm25.py's hash table layout, numbered in order of first occurrence."""

    table: np.ndarray = field(default_factory=lambda: np.full((1 << 12, 3), -1, np.int64))
    blob: np.ndarray = field(default_factory=lambda: np.empty(1 << 16, np.uint8))
    start: np.ndarray = field(default_factory=lambda: np.empty(1 << 12, np.int64))
    length: np.ndarray = field(default_factory=lambda: np.empty(1 << 12, np.int32))
    n: int = 0
    used: int = 0

    def growth_bytes(self) -> int:
        """The most one chunk can add while the vocabulary's arrays double (old and new copies at once)."""
        return 2 * (self.table.nbytes + self.blob.nbytes + self.start.nbytes + self.length.nbytes)

    def add(self, src: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Global ids of the given words (new ones are added)."""
        self.blob = _grown(self.blob, self.used + int(lens.sum()))
        self.start = _grown(self.start, self.n + len(starts))
        self.length = _grown(self.length, self.n + len(starts))
        ids, self.table, n, used = _intern_words(
            src, starts.astype(np.int64), lens.astype(np.int64), self.table, self.blob, self.start, self.length,
            self.n, self.used,
        )  # fmt: skip
        self.n, self.used = int(n), int(used)
        return ids


def _npy_header(dtype: np.dtype, n: int) -> bytes:
    """A 128-byte ``.npy`` (version 1.0) header of a 1-D array: the same length whatever ``n``, so it can be
    written first and rewritten once the length is known."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n,)})
    body = text.encode("latin1").ljust(128 - 10 - 1) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


class _NpyWriter:
    """Writes a 1-D ``.npy`` piece by piece to a temporary name; ``commit`` checks the length (when ``n`` was
    given), writes the header and renames it."""

    def __init__(self, path: Path, dtype: Any, n: int | None = None) -> None:
        self.path, self.n, self.dtype, self.done = path, n, np.dtype(dtype), 0
        fd, self.tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        self.f = os.fdopen(fd, "wb")
        self.f.write(_npy_header(self.dtype, 0))

    def write(self, a: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(a, self.dtype).tobytes())
        self.done += len(a)

    def commit(self) -> None:
        if self.n is not None and self.done != self.n:
            self.f.close()
            raise RuntimeError(f"{self.path}: wrote {self.done} of {self.n} values")
        self.f.seek(0)
        self.f.write(_npy_header(self.dtype, self.done))
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.f.close()
        Path(self.tmp).unlink(missing_ok=True)


def _read_raw(path: Path, dtype: Any, a: int, b: int) -> np.ndarray:
    """Values ``a..b`` of a raw binary file (read into the heap, not mapped)."""
    dtype = np.dtype(dtype)
    with open(path, "rb") as f:
        f.seek(a * dtype.itemsize)
        return np.fromfile(f, dtype, b - a)


@dataclass
class _Run:
    """One chunk's postings in raw files, sorted by global term, and the merge's cursor into them."""

    path: Path  # files path.terms (int32 [u], ascending), path.ptr (int64 [u + 1]), path.docs (uint32), path.tf
    n_terms: int
    pos: int = 0  # terms before `pos` are merged
    next_term: int = 0  # the term at `pos` (when pos < n_terms)

    def take(self, t1: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The run's terms below ``t1`` from the cursor on, with their ``ptr`` slice; advances the cursor."""
        if self.pos >= self.n_terms or self.next_term >= t1:
            return None
        window = 4096
        while True:  # read a growing window of terms until one is >= t1 (memory: about the block's size)
            terms = _read_raw(self.path.with_suffix(".terms"), np.int32, self.pos, min(self.n_terms, self.pos + window))
            n = int(np.searchsorted(terms, t1))
            if n < len(terms) or self.pos + len(terms) == self.n_terms:
                break
            window *= 4
        terms = terms[:n]
        ptr = _read_raw(self.path.with_suffix(".ptr"), np.int64, self.pos, self.pos + n + 1)
        self.pos += n
        if self.pos < self.n_terms:
            self.next_term = int(_read_raw(self.path.with_suffix(".terms"), np.int32, self.pos, self.pos + 1)[0])
        return terms, ptr


def build_index(
    corpus: Sequence[Document],
    index_dir: str | os.PathLike[str],
    *,
    params: BM25Params | None = None,
    max_memory: int = 4 << 30,
    chunk_docs: int | None = None,
    progress: bool = True,
) -> Path:
    """Build the on-disk BM25 index of ``corpus`` in ``index_dir`` (see the module docstring); returns the folder.

    ``chunk_docs`` fixes the chunk size (tests); by default it follows ``max_memory`` (bytes)."""
    from tqdm.auto import tqdm

    params = params or BM25Params()
    out = Path(index_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)
    _remove_leftovers(out)
    identity = _corpus_identity(corpus)
    n_docs = len(corpus)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".build-"))
    writers: list[_NpyWriter] = []
    try:
        vocab = _Vocab()
        df = np.zeros(1 << 12, np.int64)
        runs: list[_Run] = []
        total_len = 0
        max_chunk = 0
        dl_path = tmp / "doc_len.bin"
        with (
            open(dl_path, "wb") as dl_f,
            tqdm(total=n_docs, unit="doc", unit_scale=True, desc="bm25 index", disable=not progress) as bar,
        ):
            a = 0
            while a < n_docs:
                room = max_memory - _rss() - vocab.growth_bytes()
                size = chunk_docs or max(_MIN_CHUNK_DOCS, room // BYTES_PER_DOC)
                b = min(n_docs, a + max(1, int(size)))
                max_chunk = max(max_chunk, b - a)
                texts = [d.contents for d in _read_docs(corpus, a, b)]
                term_of, doc_of, blob, starts, lengths = _tokenize_corpus_raw(texts)
                del texts
                gid = vocab.add(blob, starts, lengths)
                del blob, starts, lengths
                indptr, post_doc, post_tf = _csr_from_tokens(term_of, doc_of, len(gid))
                lens = np.bincount(doc_of, minlength=b - a).astype(np.int32)
                del term_of, doc_of
                dl_f.write(lens.tobytes())
                total_len += int(lens.sum(dtype=np.int64))
                order = np.argsort(gid, kind="stable")
                cnt = np.diff(indptr)[order]
                ptr = np.zeros(len(order) + 1, np.int64)
                np.cumsum(cnt, out=ptr[1:])
                src = np.repeat(indptr[:-1][order] - ptr[:-1], cnt) + np.arange(ptr[-1], dtype=np.int64)
                run = _Run(tmp / f"{len(runs)}.run", len(order))
                terms = gid[order].astype(np.int32)
                terms.tofile(run.path.with_suffix(".terms"))
                run.next_term = int(terms[0]) if len(terms) else 0
                ptr.tofile(run.path.with_suffix(".ptr"))
                (post_doc[src].astype(np.int64) + a).astype(np.uint32).tofile(run.path.with_suffix(".docs"))
                post_tf[src].astype(np.int32).tofile(run.path.with_suffix(".tf"))
                del indptr, post_doc, post_tf, src
                runs.append(run)
                if vocab.n > df.shape[0]:
                    df = np.concatenate([df, np.zeros(max(vocab.n, 2 * df.shape[0]) - df.shape[0], np.int64)])
                df[terms] += cnt  # terms are distinct within a chunk
                del terms, cnt, gid, order
                bar.update(b - a)
                a = b
        n_terms = vocab.n
        df = df[:n_terms].copy()
        # the vocabulary goes to disk now and leaves memory before the merge
        save_npy_atomic(out / "vocab_table.npy", vocab.table)
        save_npy_atomic(out / "vocab_blob.npy", vocab.blob[: vocab.used])
        save_npy_atomic(out / "vocab_start.npy", vocab.start[:n_terms])
        save_npy_atomic(out / "vocab_len.npy", vocab.length[:n_terms])
        del vocab
        avgdl = float(total_len) / n_docs if n_docs else 0.0
        norm = params.k1 * (1 - params.b + params.b * np.fromfile(dl_path, np.int32) / (avgdl or 1.0))
        idf = _idf(df, n_docs, params)
        indptr = np.zeros(n_terms + 1, np.int64)
        np.cumsum(df, out=indptr[1:])
        n_post = int(indptr[-1])
        term_blocks = np.zeros(n_terms + 1, np.int64)
        np.cumsum((df + BLOCK - 1) // BLOCK, out=term_blocks[1:])
        n_blocks = int(term_blocks[-1])
        w_last = _NpyWriter(out / "block_last.npy", np.uint32, n_blocks)
        w_max = _NpyWriter(out / "block_max.npy", np.float32, n_blocks)
        w_bits = _NpyWriter(out / "block_bits.npy", np.uint8, 2 * n_blocks)
        w_off = _NpyWriter(out / "block_off.npy", np.int64, n_blocks + 1)
        w_words = _NpyWriter(out / "words.npy", np.uint32)
        writers += [w_last, w_max, w_bits, w_off, w_words]
        n_words = 0
        term_max = np.zeros(n_terms, np.float32)
        t0 = 0
        with tqdm(total=n_post, unit="post", unit_scale=True, desc="bm25 merge", disable=not progress) as bar:
            while t0 < n_terms:
                budget = max(_MIN_BLOCK_POSTINGS, (max_memory - _rss()) // BYTES_PER_POSTING)
                t1 = int(np.searchsorted(indptr, indptr[t0] + budget, side="right")) - 1
                t1 = min(max(t1, t0 + 1), n_terms)
                base = int(indptr[t0])
                m = int(indptr[t1]) - base
                docs = np.empty(m, np.uint32)
                tf = np.empty(m, np.int32)
                fill = indptr[t0:t1] - base
                for run in runs:
                    got = run.take(t1)
                    if got is None:
                        continue
                    rterms, rptr = got
                    p0, p1 = int(rptr[0]), int(rptr[-1])
                    terms = rterms.astype(np.int64) - t0
                    cnt = np.diff(rptr)
                    dest = np.repeat(fill[terms] - (rptr[:-1] - p0), cnt) + np.arange(p1 - p0, dtype=np.int64)
                    docs[dest] = _read_raw(run.path.with_suffix(".docs"), np.uint32, p0, p1)
                    tf[dest] = _read_raw(run.path.with_suffix(".tf"), np.int32, p0, p1)
                    fill[terms] += cnt
                    del dest, terms, rterms, rptr
                imp = _impacts(docs, tf, np.repeat(idf[t0:t1], df[t0:t1]), norm, params)
                term_max[t0:t1] = np.maximum.reduceat(imp, indptr[t0:t1] - base)
                nb = int(term_blocks[t1] - term_blocks[t0])
                last, bmax = np.empty(nb, np.uint32), np.empty(nb, np.float32)
                bits, off = np.empty(2 * nb, np.uint8), np.empty(nb, np.int64)
                words = np.zeros(2 * m + nb + 1, np.uint32)
                used = pack_blocks(docs, tf, imp, indptr[t0 : t1 + 1] - base, last, bmax, bits, off, words)
                w_last.write(last)
                w_max.write(bmax)
                w_bits.write(bits)
                w_off.write(off + n_words)
                w_words.write(words[:used])
                n_words += int(used)
                del docs, tf, imp, words
                bar.update(m)
                t0 = t1
        w_off.write(np.array([n_words], np.int64))
        w_words.write(np.zeros(1, np.uint32))  # the spare word: every value is read with one 64-bit load
        for w in writers:
            w.commit()
        writers.clear()
        save_npy_atomic(out / "indptr.npy", indptr)
        save_npy_atomic(out / "term_blocks.npy", term_blocks)
        save_npy_atomic(out / "term_max.npy", term_max)
        save_npy_atomic(out / "idf.npy", idf)
        save_npy_atomic(out / "norm.npy", norm)
        meta = {
            "format": FORMAT_VERSION,
            "tokenizer": TOKENIZER_VERSION,
            "stopwords": sorted(STOPWORDS),
            "params": asdict(params),
            "corpus": identity,
            "n_docs": n_docs,
            "n_terms": n_terms,
            "n_postings": n_post,
            "n_blocks": n_blocks,
            "avgdl": avgdl,
            "build": {"max_memory": max_memory, "chunks": len(runs), "max_chunk_docs": max_chunk},
        }
        fd, tmp_meta = tempfile.mkstemp(dir=out, prefix=".meta.json.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp_meta, out / "meta.json")
        return out
    finally:
        for w in writers:
            w.abort()
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_leftovers(folder: Path) -> None:
    """Delete what a killed build of this folder left (its temporary directory and files; only our own names).
    Two builds into one folder at once are not supported."""
    names = [*_ARRAYS, "meta"]
    for p in folder.iterdir():
        if p.name.startswith(".build-") and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.name.endswith(".tmp") and any(p.name.startswith(f".{n}.") for n in names) and p.is_file():
            p.unlink(missing_ok=True)


def _impacts(docs: np.ndarray, tf_int: np.ndarray, idf_post: np.ndarray, norm: np.ndarray, params: BM25Params
             ) -> np.ndarray:  # fmt: skip
    """float32 impacts, by the very float64 operations of bm25.py's ``_FastIndex.build`` (bit-identical)."""
    tf = tf_int.astype(np.float64)
    return (idf_post * (tf * (params.k1 + 1) / (tf + norm[docs]))).astype(np.float32)


# ----------------------------------------------------------------------------------------------- serve


@_kernel
def _lookup_terms(buf, starts, lens, table, blob, wstart, wlen, n_terms):  # pragma: no cover - compiled
    """The term number of each word ``buf[starts[i]:starts[i]+lens[i]]`` (UTF-8 bytes of a token) in the vocabulary
    hash table written by the build (``_intern``'s layout), or -1. The arrays are data from files: a row naming a
    term or a span out of range never matches, and probing stops after one pass over the table."""
    out = np.full(starts.size, -1, np.int64)
    size = table.shape[0]
    mask = size - 1
    n_blob = blob.size
    for i in range(starts.size):
        s = starts[i]
        length = lens[i]
        h = _FNV_OFFSET_U64
        prefix = np.uint64(0)
        for q in range(length):
            c = np.uint64(buf[s + q])
            h = (h ^ c) * _FNV_PRIME_U64
            if q < 8:
                prefix |= c << np.uint64(8 * q)
        hs = np.int64(h)
        ps = np.int64(prefix)
        slot = np.int64(h & np.uint64(mask))
        for _ in range(size):
            packed = table[slot, 1]
            if packed < 0:
                break
            if table[slot, 0] == hs and (packed >> 32) == length and table[slot, 2] == ps:
                t = packed & 0xFFFFFFFF
                if t < n_terms and wlen[t] == length and wstart[t] >= 0 and wstart[t] + length <= n_blob:
                    a = wstart[t]
                    same = True
                    for q in range(length):
                        if blob[a + q] != buf[s + q]:
                            same = False
                            break
                    if same:
                        out[i] = t
                        break
            slot = (slot + 1) & mask
    return out


def _load(folder: Path, name: str) -> np.ndarray:
    try:
        a = np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise IndexMismatchError(f"{folder}: cannot read {name}.npy ({e}); rebuild the index") from None
    if a.dtype != _ARRAYS[name] or (a.ndim != 1 and name != "vocab_table"):
        raise IndexMismatchError(f"{folder}: {name}.npy has the wrong type or shape; rebuild the index")
    return np.asarray(a)  # a plain ndarray view of the mapping (numba takes it as any array)


def _expected_meta(corpus: Sequence[Document], params: BM25Params | None) -> dict[str, Any]:
    expect: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "tokenizer": TOKENIZER_VERSION,
        "stopwords": sorted(STOPWORDS),
        "corpus": _corpus_identity(corpus),
        "n_docs": len(corpus),
    }
    if params is not None:
        expect["params"] = asdict(params)
    return expect


class DiskBM25(Retriever):
    """BM25 served from an index folder written by :func:`build_index` (memory-mapped), over ``corpus``.

    Args:
        index_dir: the folder.
        corpus: the documents it was built from (checked); hits' documents are read from it on demand.
        params: when given, the index must have been built with these (else :class:`IndexMismatchError`).
        n_threads: threads for ``batch_search`` (default: the CPUs available to this process).
        prune: MaxScore pruning (exact either way).
    """

    def __init__(
        self,
        index_dir: str | os.PathLike[str],
        corpus: Sequence[Document],
        *,
        params: BM25Params | None = None,
        n_threads: int | None = None,
        prune: bool = True,
    ) -> None:
        folder = Path(index_dir)
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise IndexMismatchError(f"{folder}: no readable meta.json ({e}); build the index") from None
        if not isinstance(meta, dict):
            raise IndexMismatchError(f"{folder}: meta.json is not an object")
        for key, value in _expected_meta(corpus, params).items():
            if meta.get(key) != value:
                raise IndexMismatchError(f"{folder}: the BM25 index does not match ({key} differs); rebuild it")
        try:
            self.params = BM25Params(**meta["params"])
        except (TypeError, ValueError, KeyError) as e:
            raise IndexMismatchError(f"{folder}: bad params in meta.json ({e})") from None
        self.corpus = corpus
        self.owns_corpus = False  # close() closes the corpus too (make_retriever sets it for a file it opened)
        self.folder = folder
        self.n_docs = len(corpus)
        self.prune = prune
        self.n_threads = max(1, n_threads or _available_cpus())
        a = {name: _load(folder, name) for name in _ARRAYS}
        self._check(a, meta)
        self.indptr, self.term_max = a["indptr"], a["term_max"]
        self._ix = (
            a["indptr"], a["term_blocks"], a["block_last"], a["block_max"], a["block_bits"], a["block_off"],
            a["words"], a["term_max"], a["idf"], a["norm"], np.array([self.params.k1 + 1], np.float64),
        )  # fmt: skip
        self._table, self._blob, self._start, self._len = (
            a["vocab_table"], a["vocab_blob"], a["vocab_start"], a["vocab_len"],
        )  # fmt: skip
        self.n_terms = len(self.term_max)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._workspaces = _WorkspacePool(self.n_docs)
        self._search_ids([""], 1, 1)  # compile (or load) the kernels now, not at the first query

    def _check(self, a: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Shapes and bounds the kernels rely on (they do not bounds-check: every block is decoded once); sets
        ``avgdl`` and ``nonneg``."""
        n, v, p, nb, avgdl = (meta.get(key) for key in ("n_docs", "n_terms", "n_postings", "n_blocks", "avgdl"))
        table = a["vocab_table"]
        ok = (
            isinstance(v, int)
            and isinstance(p, int)
            and isinstance(nb, int)
            and isinstance(avgdl, float)
            and avgdl >= 0
            and a["indptr"].shape == (v + 1,)
            and a["term_blocks"].shape == (v + 1,)
            and a["term_max"].shape == (v,)
            and a["idf"].shape == (v,)
            and a["vocab_start"].shape == (v,)
            and a["vocab_len"].shape == (v,)
            and a["block_last"].shape == (nb,)
            and a["block_max"].shape == (nb,)
            and a["norm"].shape == (n,)
            and table.ndim == 2
            and table.shape[1] == 3
            and table.shape[0] >= 1
            and table.shape[0] & (table.shape[0] - 1) == 0
            and int(a["indptr"][0]) == 0
            and int(a["indptr"][-1]) == p
            and validate(a["indptr"], a["term_blocks"], a["block_last"], a["block_bits"], a["block_off"], a["words"], n)
        )
        if not ok:
            raise IndexMismatchError(f"{self.folder}: inconsistent BM25 index arrays; rebuild the index")
        self.avgdl = avgdl
        self.nonneg = bool(v == 0 or a["idf"].min() >= 0)  # impacts have their idf's sign: the bounds hold

    # -- construction

    @classmethod
    def build(
        cls,
        corpus: Sequence[Document],
        index_dir: str | os.PathLike[str],
        *,
        params: BM25Params | None = None,
        max_memory: int = 4 << 30,
        chunk_docs: int | None = None,
        progress: bool = True,
        n_threads: int | None = None,
        prune: bool = True,
    ) -> DiskBM25:
        """Build the index (:func:`build_index`) and open it."""
        params = params or BM25Params()
        build_index(corpus, index_dir, params=params, max_memory=max_memory, chunk_docs=chunk_docs, progress=progress)
        return cls(index_dir, corpus, params=params, n_threads=n_threads, prune=prune)

    @classmethod
    def open_or_build(
        cls,
        corpus: Sequence[Document],
        index_dir: str | os.PathLike[str],
        *,
        params: BM25Params | None = None,
        max_memory: int = 4 << 30,
        progress: bool = True,
        n_threads: int | None = None,
        prune: bool = True,
    ) -> DiskBM25:
        """Open the index in ``index_dir`` when it matches ``corpus`` and ``params``; else (re)build it there."""
        params = params or BM25Params()
        try:
            return cls(index_dir, corpus, params=params, n_threads=n_threads, prune=prune)
        except IndexMismatchError:
            return cls.build(
                corpus, index_dir, params=params, max_memory=max_memory, progress=progress, n_threads=n_threads,
                prune=prune,
            )  # fmt: skip

    # -- vocabulary

    def term_id(self, token: str) -> int:
        """The term number of ``token`` (as :func:`tokenize` produces it), or -1 when it is not indexed."""
        return int(self._term_ids([token])[0])

    def _term_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """The term numbers of ``tokens`` (-1 for those not indexed), looked up in one compiled call."""
        data = [t.encode("utf-8", "surrogatepass") for t in tokens]
        lens = np.fromiter(map(len, data), np.int64, len(data))
        starts = np.zeros(len(data), np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        buf = np.frombuffer(b"".join(data), np.uint8)
        return _lookup_terms(buf, starts, lens, self._table, self._blob, self._start, self._len, self.n_terms)

    def _encode(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tokenized = [tokenize(q) for q in queries]
        ids = iter(self._term_ids([tok for toks in tokenized for tok in toks]).tolist())
        ptr = [0]
        terms: list[int] = []
        weights: list[float] = []
        for toks in tokenized:
            counts: dict[int, int] = {}  # first-occurrence order, as the in-memory index encodes queries
            for _, t in zip(toks, ids, strict=False):
                if t >= 0:
                    counts[t] = counts.get(t, 0) + 1
            terms.extend(counts)
            weights.extend(counts.values())
            ptr.append(len(terms))
        return np.asarray(ptr, np.int64), np.asarray(terms, np.int64), np.asarray(weights, np.float32)

    # -- search

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        return self._hits(self._search_ids([query], max(0, int(topk)), 1))[0]

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        return self._hits(self._search_ids(list(queries), max(0, int(topk)), self.n_threads))

    def search_ids(self, queries: Sequence[str], topk: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(corpus indices, scores)`` per query, like ``BM25Retriever.search_ids``."""
        return self._search_ids(list(queries), max(0, int(topk)), self.n_threads)

    def _hits(self, results: list[tuple[np.ndarray, np.ndarray]]) -> list[list[Hit]]:
        corpus = self.corpus
        return [
            [Hit(corpus[i], float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]
            for ids, scores in results
        ]

    def _search_ids(self, queries: list[str], topk: int, n_threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
        nq = len(queries)
        k = min(topk, self.n_docs)
        encoded = self._encode(queries)
        return run_queries(self._ix, self.prune and self.nonneg, encoded, nq, k, self._workspaces, self._executor,
                           n_threads, kernel=search_range)  # fmt: skip

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.n_threads, thread_name_prefix="bm25disk")
            return self._pool

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        if self.owns_corpus:
            self.corpus.close()  # type: ignore[attr-defined]  # a CorpusFile


# ----------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentgym.tools.retrieval.bm25_disk")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the on-disk BM25 index of a corpus JSONL")
    b.add_argument("corpus")
    b.add_argument("index_dir")
    b.add_argument("--max-memory", type=parse_size, default="4G", help="peak memory budget of the build (e.g. "
                   "2G, 512M)")  # fmt: skip
    b.add_argument("--corpus-index-dir", default=None, help="where CorpusFile keeps its offsets (default: none)")
    b.add_argument("--k1", type=float, default=1.5)
    b.add_argument("--b", type=float, default=0.75)
    b.add_argument("--idf", default="lucene", choices=["lucene", "okapi"], help="Lucene's (default) or rank-bm25's")
    args = parser.parse_args(argv)
    try:
        params = BM25Params(k1=args.k1, b=args.b, idf=args.idf)
        with CorpusFile.open(args.corpus, args.corpus_index_dir) as corpus:
            build_index(corpus, args.index_dir, params=params, max_memory=args.max_memory)
    except (ValueError, OSError) as e:  # CorpusFormatError and IndexMismatchError are ValueErrors
        parser.error(str(e))  # one line, exit 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
