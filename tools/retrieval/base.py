"""Documents, hits and the retriever interface shared by every retrieval back-end.

Corpora use the Search-R1 / FlashRAG JSONL form: one ``{"id": "0", "contents": "\\"Title\\"\\nText..."}``
per line, where the first line of ``contents`` is the title (surrounding quotes stripped).

>>> doc = Document("7", '"Lake Ovra"\\nLake Ovra is a lake.')
>>> doc.title, doc.text
('Lake Ovra', 'Lake Ovra is a lake.')
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Document:
    """A corpus passage: ``contents`` is ``"\\"Title\\"\\nText"`` as in Search-R1 corpora."""

    id: str
    contents: str

    @property
    def title(self) -> str:
        return self.contents.split("\n", 1)[0].strip().strip('"')

    @property
    def text(self) -> str:
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) > 1 else ""

    @classmethod
    def from_title_text(cls, id: str, title: str, text: str) -> Document:
        return cls(id=id, contents=f'"{title}"\n{text}')

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "contents": self.contents}


@dataclass(frozen=True)
class Hit:
    """One retrieved document and its score (higher is better)."""

    doc: Document
    score: float


class Retriever:
    """Interface of every retriever: ``search`` one query or ``batch_search`` many."""

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        return self.batch_search([query], topk)[0]

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (HTTP clients, thread pools)."""

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_corpus_jsonl(path: str | os.PathLike[str]) -> list[Document]:
    """Read a Search-R1 / FlashRAG corpus (``{"id", "contents"}`` per line; ``title``+``text`` also accepted)."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if "contents" in row:
                docs.append(Document(str(row["id"]), str(row["contents"])))
            elif "text" in row:
                docs.append(Document.from_title_text(str(row["id"]), str(row.get("title", "")), str(row["text"])))
            else:
                raise ValueError(f"{path}:{lineno}: a corpus row needs 'contents' (or 'title' and 'text')")
    return docs


def write_jsonl_atomic(path: str | os.PathLike[str], rows: Iterable[dict]) -> None:
    """Write rows as JSONL to ``path`` atomically (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_corpus_jsonl(path: str | os.PathLike[str], docs: Iterable[Document]) -> None:
    """Write a corpus in Search-R1 JSONL form, atomically."""
    write_jsonl_atomic(path, (d.to_json() for d in docs))


def corpus_fingerprint(docs: Iterable[Document]) -> str:
    """A hex digest of the ids and contents of ``docs`` (in order): the corpus part of index cache keys."""
    h = hashlib.blake2b(digest_size=16)
    n = 0
    for d in docs:
        h.update(d.id.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(d.contents.encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
        n += 1
    h.update(str(n).encode())
    return h.hexdigest()


def cache_key(*parts: object) -> str:
    """A short stable hex key for cache file names, from JSON-serialisable parts."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.blake2b(blob.encode(), digest_size=10).hexdigest()


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary file name next to ``path``; on success it is renamed onto ``path`` (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_npy_atomic(path: str | os.PathLike[str], array: Any) -> None:
    """Write ``array`` to ``path`` as a ``.npy`` file (no pickles), atomically (:func:`atomic_output`)."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)


def parse_size(text: str) -> int:
    """``"4G"``, ``"512M"``, ``"1.5G"`` or a plain byte count -> bytes; an argparse type (a bad size is a usage
    error: ``ArgumentTypeError``, a ``ValueError``).

    >>> parse_size("512M"), parse_size("1.5GB"), parse_size("1000")
    (536870912, 1610612736, 1000)
    """
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body = text.strip().upper().removesuffix("B")
    scale = units.get(body[-1:], 1)
    try:
        value = float(body[:-1] if scale > 1 else body)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a positive size such as 4G or 512M, got {text!r}")
    return int(value * scale)


def positive_int(text: str) -> int:
    """An integer >= 1 (argparse type: anything else is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
