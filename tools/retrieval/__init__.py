"""Retrieval back-ends for search environments: BM25 (fast numba index or rank-bm25), dense (MiniLM + faiss),
hybrid (reciprocal-rank fusion), a client of Search-R1's ``/retrieve`` API and a compatible server.

>>> from agentgym.tools.retrieval import Document, make_retriever
>>> docs = [Document("0", '"Lake Ovra"\\nLake Ovra lies in Tessaly.'), Document("1", '"Mount Kell"\\nA peak.')]
>>> [h.doc.id for h in make_retriever("bm25", docs).search("Where is lake Ovra?")]
['0']

Heavy dependencies (numba, torch, transformers, faiss, fastapi) load on first use of the class that needs them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import (
    Document,
    Hit,
    Retriever,
    corpus_fingerprint,
    load_corpus_jsonl,
    write_corpus_jsonl,
    write_jsonl_atomic,
)

if TYPE_CHECKING:
    from .bm25 import BM25Retriever, tokenize
    from .dense import DenseRetriever, MiniLMEncoder
    from .hybrid import HybridRetriever
    from .remote import RemoteRetriever, RetrievalServerError
    from .server import create_app, serve_retriever

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "Document",
    "Hit",
    "HybridRetriever",
    "MiniLMEncoder",
    "RemoteRetriever",
    "RetrievalServerError",
    "Retriever",
    "corpus_fingerprint",
    "create_app",
    "load_corpus_jsonl",
    "make_retriever",
    "serve_retriever",
    "tokenize",
    "write_corpus_jsonl",
    "write_jsonl_atomic",
]

_LAZY = {
    "BM25Retriever": "bm25",
    "tokenize": "bm25",
    "DenseRetriever": "dense",
    "MiniLMEncoder": "dense",
    "HybridRetriever": "hybrid",
    "RemoteRetriever": "remote",
    "RetrievalServerError": "remote",
    "create_app": "server",
    "serve_retriever": "server",
}

_BM25_KEYS = frozenset({"k1", "b", "epsilon", "idf", "backend", "n_threads"})
_DENSE_KEYS = frozenset({"encoder", "index", "batch_size", "hnsw_m", "ef_search", "nlist", "nprobe", "show_progress"})
_HYBRID_KEYS = frozenset({"k", "weights", "depth"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_retriever(
    spec: str, corpus: Sequence[Document] | str | os.PathLike[str] | None = None, **kwargs: Any
) -> Retriever:
    """Build a retriever from a spec string.

    Specs: ``"bm25"`` (fast back-end), ``"bm25:rank_bm25"``, ``"dense"`` (flat; also ``"dense:hnsw"``,
    ``"dense:ivf"``), ``"hybrid"`` (BM25 + dense fused by RRF) and ``"remote:http://host:port"``. ``corpus`` is a
    list of documents or the path of a corpus JSONL (not needed for ``remote``). Keyword arguments go to the
    constructor; for ``hybrid`` they are routed by name (``cache_dir`` to both, BM25 / dense / RRF options to
    their owner).
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

        unknown = set(kwargs) - _BM25_KEYS - _DENSE_KEYS - _HYBRID_KEYS - {"cache_dir"}
        if unknown:
            raise TypeError(f"unknown hybrid retriever options: {sorted(unknown)}")
        shared = {"cache_dir": kwargs["cache_dir"]} if "cache_dir" in kwargs else {}
        bm25 = BM25Retriever(docs, **shared, **{k: v for k, v in kwargs.items() if k in _BM25_KEYS})
        dense = DenseRetriever(docs, **shared, **{k: v for k, v in kwargs.items() if k in _DENSE_KEYS})
        return HybridRetriever([bm25, dense], **{k: v for k, v in kwargs.items() if k in _HYBRID_KEYS})
    raise ValueError(f"unknown retriever spec {spec!r}: use bm25, bm25:rank_bm25, dense, hybrid or remote:URL")
