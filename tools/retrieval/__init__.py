"""Retrieval back-ends for search environments: BM25 (fast numba index or rank-bm25), dense (MiniLM + faiss),
hybrid (reciprocal-rank fusion), a client of Search-R1's ``/retrieve`` API and a compatible server; streaming access
to corpus files of any size (``CorpusFile``), BM25 built in bounded memory and served from disk (``DiskBM25``) and a
synthetic wiki-18-shaped corpus (``synthetic``).

>>> from agentgym.tools.retrieval import Document, make_retriever
>>> docs = [Document("0", '"Lake Ovra"\\nLake Ovra lies in Tessaly.'), Document("1", '"Mount Kell"\\nA peak.')]
>>> [h.doc.id for h in make_retriever("bm25", docs).search("Where is lake Ovra?")]
['0']

Heavy dependencies (numba, torch, transformers, faiss, fastapi) load on first use of the class that needs them.
"""

from __future__ import annotations

import importlib
import inspect
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
from .corpus import CorpusFile, CorpusFormatError

if TYPE_CHECKING:
    from .bm25 import BM25Retriever, tokenize
    from .bm25_disk import DiskBM25
    from .dense import DenseRetriever, MiniLMEncoder
    from .hybrid import HybridRetriever
    from .remote import RemoteRetriever, RetrievalServerError
    from .server import create_app, serve_retriever

__all__ = [
    "BM25Retriever",
    "CorpusFile",
    "CorpusFormatError",
    "DenseRetriever",
    "DiskBM25",
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
    "DiskBM25": "bm25_disk",
    "DenseRetriever": "dense",
    "MiniLMEncoder": "dense",
    "HybridRetriever": "hybrid",
    "RemoteRetriever": "remote",
    "RetrievalServerError": "remote",
    "create_app": "server",
    "serve_retriever": "server",
}


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
    constructor; for ``hybrid`` each goes to every constructor that takes it (:func:`_options`: ``cache_dir`` to
    both retrievers, BM25 / dense / RRF options to their owner), and one that none takes raises ``TypeError``.
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

        owners = (BM25Retriever, DenseRetriever, HybridRetriever)
        unknown = set(kwargs).difference(*map(_options, owners))
        if unknown:
            raise TypeError(f"unknown hybrid retriever options: {sorted(unknown)}")
        bm25_kw, dense_kw, hybrid_kw = ({k: v for k, v in kwargs.items() if k in _options(c)} for c in owners)
        bm25 = BM25Retriever(docs, **bm25_kw)
        dense = DenseRetriever(docs, **dense_kw)
        return HybridRetriever([bm25, dense], **hybrid_kw)
    raise ValueError(f"unknown retriever spec {spec!r}: use bm25, bm25:rank_bm25, dense, hybrid or remote:URL")
