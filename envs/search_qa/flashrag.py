"""Load FlashRAG / Search-R1 question files and corpora (NQ, HotpotQA, ... or what ``QADataset.save`` wrote).

Question rows: ``{"id"?, "question", "golden_answers", "metadata"?}`` (``golden_answers`` may be a single string).
Our own ``metadata`` keys (``hop_type``, ``hops``, ``supporting_doc_ids``, ``oracle_queries``, ``template``,
``hop_entities``, ``hop_answers``, ``rewording``) are read back when present; for other files ``hop_type`` comes from
``metadata["type"]`` (HotpotQA / 2Wiki style) or is ``"unknown"``, and the supervision fields are empty.
Corpus rows: ``{"id", "contents"}`` (``"\\"Title\\"\\nText"``) or ``{"id", "title", "text"}``.
Malformed input raises ``FlashRAGFormatError`` naming ``path:line``.

>>> import tempfile, pathlib
>>> from agentgym.envs.search_qa.data import build_dataset
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> build_dataset("tiny").save(d)
>>> ds = load_flashrag(d / "test.jsonl", d / "corpus.jsonl")
>>> ds.test == build_dataset("tiny").test
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any

from agentgym.envs.search_qa.data import SPLITS, QADataset, QAExample, config_from_dict
from agentgym.tools.retrieval.base import Document
from agentgym.tools.retrieval.corpus import CorpusFile, CorpusFormatError, iter_documents

PathLike = str | os.PathLike[str]

#: ``metadata["type"]`` values of public multi-hop datasets -> our hop types.
_TYPE_MAP: dict[str, str] = {
    "comparison": "comparison",
    "bridge_comparison": "comparison",
    "bridge": "bridge",
    "compositional": "bridge",
    "inference": "bridge",
}


class FlashRAGFormatError(CorpusFormatError):
    """A question or corpus file is not valid FlashRAG / Search-R1 JSONL; the message starts with ``path:line``.

    Corpus rows follow ``agentgym.tools.retrieval.corpus`` (``load_corpus`` re-raises its ``CorpusFormatError`` as
    this class, so ``except FlashRAGFormatError`` catches both).
    """


def _rows(path: PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of a JSONL file."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as e:
        raise FlashRAGFormatError(f"{path}: cannot open ({e.strerror})") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise FlashRAGFormatError(f"{path}:{lineno}: not valid UTF-8") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise FlashRAGFormatError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise FlashRAGFormatError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            yield lineno, row


def _str_list(value: Any, where: str, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise FlashRAGFormatError(f"{where}: {field!r} must be a string or a list of strings")
    return tuple(str(v) for v in value)


def load_corpus(path: PathLike) -> list[Document]:
    """Read a whole corpus JSONL (rows as in ``agentgym.tools.retrieval.corpus``); ids must be unique.

    For corpora too big to hold, use ``agentgym.tools.retrieval.corpus.CorpusFile``.
    """
    docs: list[Document] = []
    seen: set[str] = set()
    try:
        for lineno, doc in iter_documents(path):
            if doc.id in seen:
                raise FlashRAGFormatError(f"{path}:{lineno}: duplicate document id {doc.id!r}")
            seen.add(doc.id)
            docs.append(doc)
    except FlashRAGFormatError:
        raise
    except CorpusFormatError as e:
        raise FlashRAGFormatError(str(e)) from None
    return docs


def load_questions(path: PathLike, split: str = "test", doc_ids: Container[str] | None = None) -> list[QAExample]:
    """Read a FlashRAG question JSONL as ``QAExample`` rows (missing ids become ``f"{split}-{i:05d}"``).

    With ``doc_ids`` (a set of ids, or a ``CorpusFile``: anything supporting ``in``), every
    ``metadata["supporting_doc_ids"]`` entry must name a document of the corpus.
    """
    out: list[QAExample] = []
    seen: set[str] = set()
    for lineno, row in _rows(path):
        where = f"{path}:{lineno}"
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise FlashRAGFormatError(f"{where}: 'question' must be a non-empty string")
        if "golden_answers" not in row:
            raise FlashRAGFormatError(f"{where}: missing 'golden_answers'")
        answers = _str_list(row["golden_answers"], where, "golden_answers")
        if not answers:
            raise FlashRAGFormatError(f"{where}: 'golden_answers' is empty")
        meta = row.get("metadata") or {}
        if not isinstance(meta, dict):
            raise FlashRAGFormatError(f"{where}: 'metadata' must be an object")
        ex_id = str(row["id"]) if row.get("id") is not None else f"{split}-{len(out):05d}"
        if ex_id in seen:
            raise FlashRAGFormatError(f"{where}: duplicate question id {ex_id!r}")
        seen.add(ex_id)
        support = _str_list(meta.get("supporting_doc_ids", []), where, "metadata.supporting_doc_ids")
        queries = _str_list(meta.get("oracle_queries", []), where, "metadata.oracle_queries")
        if doc_ids is not None and (missing := [d for d in support if d not in doc_ids]):
            raise FlashRAGFormatError(f"{where}: supporting document {missing[0]!r} is not in the corpus")
        hop_type = meta.get("hop_type") or _TYPE_MAP.get(str(meta.get("type", "")).lower(), "unknown")
        hops = meta.get("hops", len(support))
        if not isinstance(hops, int) or isinstance(hops, bool) or hops < 0:
            raise FlashRAGFormatError(f"{where}: 'metadata.hops' must be a non-negative integer")
        out.append(
            QAExample(
                id=ex_id,
                question=question,
                golden_answers=answers,
                hop_type=str(hop_type),
                hops=hops,
                supporting_doc_ids=support,
                oracle_queries=queries,
                split=split,
                template=str(meta.get("template", "")),
                hop_entities=_str_list(meta.get("hop_entities", []), where, "metadata.hop_entities"),
                hop_answers=_str_list(meta.get("hop_answers", []), where, "metadata.hop_answers"),
                rewording=str(meta.get("rewording", "")),
            )
        )
    return out


def open_corpus(path: PathLike, index_dir: PathLike | None = None) -> CorpusFile:
    """A corpus too big to hold, opened as a ``CorpusFile`` (offsets saved in ``index_dir`` when given); format
    errors raise ``FlashRAGFormatError``."""
    try:
        return CorpusFile.open(path, index_dir, progress=False)
    except FileNotFoundError as e:
        raise FlashRAGFormatError(f"{path}: cannot open ({e.strerror})") from None
    except FlashRAGFormatError:
        raise
    except CorpusFormatError as e:
        raise FlashRAGFormatError(str(e)) from None


def load_flashrag(
    questions_path: PathLike,
    corpus_path: PathLike | None = None,
    split: str = "test",
    *,
    stream: bool = False,
    corpus_index_dir: PathLike | None = None,
) -> QADataset:
    """A ``QADataset`` whose ``split`` holds the questions of ``questions_path`` (the other split is empty).

    ``corpus_path`` may be ``None`` when retrieval happens elsewhere (e.g. a remote Search-R1 server); then
    supporting document ids are not checked and ``corpus`` is empty. With ``stream=True`` the corpus is not read
    into memory: ``corpus`` is a ``CorpusFile`` (:func:`open_corpus`, offsets kept in ``corpus_index_dir``) and
    supporting ids are looked up in it.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose 'train' or 'test'")
    corpus: Any = []
    doc_ids: Container[str] | None = None
    if corpus_path is not None and stream:
        corpus = doc_ids = open_corpus(corpus_path, corpus_index_dir)
    elif corpus_path is not None:
        corpus = load_corpus(corpus_path)
        doc_ids = {d.id for d in corpus}
    try:
        examples = load_questions(questions_path, split=split, doc_ids=doc_ids)
    except BaseException:
        if isinstance(corpus, CorpusFile):
            corpus.close()
        raise
    return QADataset(
        config=None,
        seed=None,
        corpus=corpus,
        train=examples if split == "train" else [],
        test=examples if split == "test" else [],
    )


def load_saved(directory: PathLike) -> QADataset:
    """Reload a directory written by ``QADataset.save`` (corpus, both splits and, from ``meta.json``, config/seed)."""
    directory = Path(directory)
    corpus = load_corpus(directory / "corpus.jsonl")
    doc_ids = {d.id for d in corpus}
    splits = {
        name: load_questions(directory / f"{name}.jsonl", split=name, doc_ids=doc_ids)
        if (directory / f"{name}.jsonl").exists()
        else []
        for name in SPLITS
    }
    config, seed = None, None
    if (meta_path := directory / "meta.json").exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            config = config_from_dict(meta["config"]) if meta.get("config") else None
            seed = meta.get("seed")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise FlashRAGFormatError(f"{meta_path}: not a valid dataset meta file ({e})") from None
    return QADataset(config=config, seed=seed, corpus=corpus, train=splits["train"], test=splits["test"])
