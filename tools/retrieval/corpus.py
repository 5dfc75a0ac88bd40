"""Streaming, random access to Search-R1 / FlashRAG corpus JSONL files of any size (wiki-18: 21M passages, 14 GB).

The row rules live here (``parse_row``, ``iter_documents``, ``CorpusFormatError``); ``load_corpus`` of the SearchQA
env reads whole files with them, and ``CorpusFile`` keeps only an index of byte offsets (8 bytes per passage, plus
16 bytes per passage for an id map when ids are not the row numbers ``"0".."N-1"``) and reads rows with
``os.pread`` on demand, from any number of threads.

Rows are ``{"id", "contents"}`` (``"\\"Title\\"\\nText"``) or ``{"id", "title", "text"}``; blank lines are skipped,
a UTF-8 BOM may open line 1, line ends may be CRLF and the last line needs no newline. Ids must be unique.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "corpus.jsonl"
>>> rows = [{"id": "0", "contents": '"Lake Ovra"\\nA lake.'}, {}, {"id": "1", "title": "T", "text": "x"}]
>>> _ = path.write_text("\\n".join(json.dumps(r) if r else "" for r in rows) + "\\n")
>>> with CorpusFile.open(path, progress=False) as corpus:
...     len(corpus), corpus[0].title, corpus.get("1").contents
(2, 'Lake Ovra', '"T"\\nx')
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base import Document, save_npy_atomic

PathLike = str | os.PathLike[str]

#: Longest accepted line (bytes, without its newline): a malformed file must not make us allocate without bound.
MAX_LINE_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
_INDEX_VERSION = 1
_EDGE_BYTES = 1 << 20  # the fingerprint hashes the first and last MB of the file
_READ_BLOCK = 8 << 20  # bytes per pread when iterating


class CorpusFormatError(ValueError):
    """A corpus file is not valid Search-R1 / FlashRAG JSONL; the message starts with ``path:line``."""


def _fail(path: PathLike, lineno: int | None, message: str) -> CorpusFormatError:
    where = f"{path}:{lineno}" if lineno is not None else f"{path}"
    return CorpusFormatError(f"{where}: {message}")


def parse_row(raw: bytes, path: PathLike = "<corpus>", lineno: int = 1) -> Document | None:
    """One corpus line (bytes, with or without its line end) as a ``Document``; ``None`` for a blank line.

    >>> parse_row(b'{"id": 3, "title": "T", "text": "x"}\\r\\n')
    Document(id='3', contents='"T"\\nx')
    >>> parse_row(b'{"id": "0"}', "c.jsonl", 7)
    Traceback (most recent call last):
    ...
    agentgym.tools.retrieval.corpus.CorpusFormatError: c.jsonl:7: a corpus row needs a string 'contents' ...
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(path, lineno, "not valid UTF-8") from None
    if lineno == 1:
        line = line.removeprefix("\ufeff")
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise _fail(path, lineno, f"not valid JSON ({e.msg})") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise _fail(path, lineno, f"not valid JSON ({e})") from None
    except RecursionError:
        raise _fail(path, lineno, "not valid JSON (nested too deeply)") from None
    if not isinstance(row, dict):
        raise _fail(path, lineno, f"expected a JSON object, got {type(row).__name__}")
    return _row_document(row, path, lineno)


def _row_document(row: dict[str, Any], path: PathLike, lineno: int) -> Document:
    if "id" not in row:
        raise _fail(path, lineno, "a corpus row needs an 'id'")
    doc_id = str(row["id"])
    contents = row.get("contents")
    if isinstance(contents, str):
        return Document(doc_id, contents)
    text = row.get("text")
    if isinstance(text, str):
        return Document.from_title_text(doc_id, str(row.get("title", "")), text)
    raise _fail(path, lineno, "a corpus row needs a string 'contents' (or 'title' and 'text')")


def _open_fd(path: PathLike) -> int:
    """A read-only descriptor of the regular file ``path`` (opened non-blocking, so a FIFO cannot hang us)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise CorpusFormatError(f"{path}: cannot open ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CorpusFormatError(f"{path}: cannot open (not a regular file)")
    return fd


def _open_binary(path: PathLike, buffering: int = -1) -> Any:
    return os.fdopen(_open_fd(path), "rb", buffering=buffering)


def iter_lines(f: Any, path: PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, int, bytes]]:
    """``(line number, byte offset, raw line)`` of every line of the binary file ``f``; a line longer than
    ``max_line_bytes`` (without its newline) raises ``CorpusFormatError`` after reading at most that much of it."""
    limit = max_line_bytes + 1
    pos = 0
    lineno = 0
    readline = f.readline
    while line := readline(limit):
        lineno += 1
        if len(line) == limit and line[-1] != 10:
            raise _fail(path, lineno, f"line longer than {max_line_bytes} bytes")
        yield lineno, pos, line
        pos += len(line)


def iter_documents(path: PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Document]]:
    """``(line number, Document)`` for every non-blank row of a corpus file, validated (ids are not checked for
    uniqueness here)."""
    with _open_binary(path, 1 << 20) as f:
        for lineno, _, line in iter_lines(f, path, max_line_bytes):
            doc = parse_row(line, path, lineno)
            if doc is not None:
                yield lineno, doc


def id_hash(doc_id: str) -> int:
    """A stable 64-bit hash of a document id (for the id map and duplicate detection).

    >>> id_hash("0") == id_hash("0") != id_hash("00")
    True
    """
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class FileFingerprint:
    """What an on-disk index must match to be reused: size, mtime and a hash of the first and last MB."""

    size: int
    mtime_ns: int
    edges: str

    @classmethod
    def of(cls, fd: int) -> FileFingerprint:
        st = os.fstat(fd)
        h = hashlib.blake2b(digest_size=16)
        h.update(os.pread(fd, min(_EDGE_BYTES, st.st_size), 0))
        tail = max(0, st.st_size - _EDGE_BYTES)
        h.update(os.pread(fd, st.st_size - tail, tail))
        return cls(size=st.st_size, mtime_ns=st.st_mtime_ns, edges=h.hexdigest())


@dataclass(frozen=True)
class _Index:
    """``offsets``: N+1 uint64 (row starts, then the end of the data); id map (sorted hashes, rows) or None when
    the ids are ``"0".."N-1"``."""

    offsets: np.ndarray
    hashes: np.ndarray | None
    rows: np.ndarray | None
    max_row_bytes: int


class CorpusFile:
    """Random access to a corpus JSONL without holding it: ``len``, ``corpus[i]``, ``get(id)``, iteration and
    ``iter_batches``. Thread safe (every read is one ``os.pread``). Open it with ``CorpusFile.open``.

    The file must not change while it is open: a read that finds it changed raises ``CorpusFormatError``.
    """

    def __init__(self, path: PathLike, fd: int, index: _Index, fingerprint: FileFingerprint, built: bool) -> None:
        self.path = Path(path)
        self._fd = fd
        self._offsets = index.offsets
        self._hashes = index.hashes
        self._rows = index.rows
        self._max_row = max(index.max_row_bytes, 1)
        self._fingerprint = fingerprint
        self._n = len(index.offsets) - 1
        #: True when ``open`` built the index (by a pass over the file), False when it loaded a saved one.
        self.built = built

    @property
    def fingerprint(self) -> FileFingerprint:
        """What identifies the file this corpus reads (size, mtime and a hash of its first and last MB): indexes
        built from it record this and refuse another file."""
        return self._fingerprint

    # --- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: PathLike,
        index_dir: PathLike | None = None,
        *,
        progress: bool = True,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> CorpusFile:
        """Index ``path`` (one streaming pass, validating every row and checking ids are unique), or load the index
        saved in ``index_dir`` when it belongs to this very file (else rebuild it there)."""
        fd = _open_fd(path)
        try:
            fingerprint = FileFingerprint.of(fd)
            index = _load_index(Path(index_dir), fingerprint) if index_dir is not None else None
            built = index is None
            if index is None:
                index = _build_index(path, fd, fingerprint.size, progress, max_line_bytes)
                if FileFingerprint.of(fd) != fingerprint:
                    raise CorpusFormatError(f"{path}: the file changed while it was being indexed")
                if index_dir is not None:
                    _save_index(Path(index_dir), index, fingerprint)
            return cls(path, fd, index, fingerprint, built)
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> CorpusFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            os.close(fd)

    # --- reading ---------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    @property
    def ids_are_row_numbers(self) -> bool:
        """True when row ``i`` has id ``str(i)`` (as in wiki-18): ``get`` then needs no id map."""
        return self._hashes is None

    def _check_unchanged(self) -> None:
        st = os.fstat(self._fd)
        if st.st_size != self._fingerprint.size or st.st_mtime_ns != self._fingerprint.mtime_ns:
            raise CorpusFormatError(f"{self.path}: the file changed since it was indexed; open it again")

    def _span(self, i: int) -> tuple[int, int]:
        """Where row ``i`` starts and how many bytes to read: up to the next row, never more than the longest row
        (blank lines may lie between rows)."""
        start = int(self._offsets[i])
        return start, min(int(self._offsets[i + 1]) - start, self._max_row)

    def __getitem__(self, i: int) -> Document:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"corpus indices are integers, not {type(i).__name__}")
        n = self._n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range for a corpus of {n}")
        self._check_unchanged()
        start, span = self._span(int(i))
        data = os.pread(self._fd, span, start)
        return self._parse(data, int(i))

    def _parse(self, data: bytes, i: int) -> Document:
        end = data.find(b"\n")
        doc = parse_row(data if end < 0 else data[: end + 1], self.path, 0)  # line 1's BOM is skipped by its offset
        if doc is None:
            raise CorpusFormatError(f"{self.path}: row {i} is blank; the file changed since it was indexed")
        return doc

    def get(self, doc_id: str) -> Document:
        """The document with id ``doc_id``; ``KeyError`` when there is none."""
        if self._hashes is None:
            if doc_id.isascii() and doc_id.isdigit() and (doc_id == "0" or doc_id[0] != "0"):
                i = int(doc_id)
                if i < self._n:
                    return self[i]
            raise KeyError(doc_id)
        assert self._rows is not None
        h = np.uint64(id_hash(doc_id))
        k = int(np.searchsorted(self._hashes, h, side="left"))
        while k < len(self._hashes) and self._hashes[k] == h:
            doc = self[int(self._rows[k])]
            if doc.id == doc_id:
                return doc
            k += 1
        raise KeyError(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        if not isinstance(doc_id, str):
            return False
        try:
            self.get(doc_id)
        except KeyError:
            return False
        return True

    def iter_batches(self, batch_size: int = 1024, start: int = 0, stop: int | None = None) -> Iterator[list[Document]]:
        """Rows ``start..stop`` in order, as lists of up to ``batch_size`` documents (reads blocks of ~8 MB)."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        stop = self._n if stop is None else min(stop, self._n)
        for a in range(max(start, 0), stop, batch_size):
            yield self._read_rows(a, min(a + batch_size, stop))

    def _read_rows(self, a: int, b: int) -> list[Document]:
        self._check_unchanged()
        out: list[Document] = []
        offsets = self._offsets
        while a < b:
            first = int(offsets[a])
            # as many rows as fit in one block (always at least one)
            last = int(np.searchsorted(offsets[a + 1 : b + 1], first + _READ_BLOCK, side="right")) + a
            last = min(max(last, a + 1), b)
            length = min(int(offsets[last]) - first, _READ_BLOCK + self._max_row)
            block = os.pread(self._fd, length, first)
            starts = (offsets[a:last] - first).tolist()
            ends = (offsets[a + 1 : last + 1] - first).tolist()
            for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
                out.append(self._parse(block[s:e], a + j))
            a = last
        return out

    def __iter__(self) -> Iterator[Document]:
        for batch in self.iter_batches(1024):
            yield from batch


# --- building, saving and loading the index ------------------------------------------------------------------


_BLOCK_ROWS = 1 << 16


class _U64Column:
    """Append-only little-endian uint64s in fixed blocks of anonymous ``mmap`` memory: growing never copies what it
    holds, and ``to_array`` hands each block back to the OS as it copies it, so it peaks at the result plus one
    block (one growing buffer would briefly exist twice at each reallocation, and freed heap memory may stay)."""

    def __init__(self) -> None:
        self._blocks: list[mmap.mmap] = []
        self._used = 0  # bytes used in the last block
        self._new_block()

    def _new_block(self) -> None:
        self._blocks.append(mmap.mmap(-1, 8 * _BLOCK_ROWS))
        self._used = 0

    def __len__(self) -> int:
        return (len(self._blocks) - 1) * _BLOCK_ROWS + self._used // 8

    def append_bytes(self, value: bytes) -> None:
        """Append one value given as 8 little-endian bytes."""
        if self._used == 8 * _BLOCK_ROWS:
            self._new_block()
        self._blocks[-1][self._used : self._used + 8] = value
        self._used += 8

    def append(self, value: int) -> None:
        self.append_bytes(value.to_bytes(8, "little"))

    def to_array(self) -> np.ndarray:
        out = np.empty(len(self), dtype=np.uint64)
        pos = 0
        for k, block in enumerate(self._blocks):
            count = _BLOCK_ROWS if k < len(self._blocks) - 1 else self._used // 8
            view = np.frombuffer(block, dtype="<u8", count=count)
            out[pos : pos + count] = view
            del view
            block.close()
            pos += count
        self._blocks = []
        return out


def _build_index(path: PathLike, fd: int, size: int, progress: bool, max_line_bytes: int) -> _Index:
    from tqdm.auto import tqdm

    offsets = _U64Column()
    hashes = _U64Column()  # 64-bit id hashes, kept only once an id is not its row number
    sequential = True
    n = 0
    max_row = 0
    error: CorpusFormatError | None = None
    with (
        os.fdopen(os.dup(fd), "rb", buffering=1 << 20) as f,
        tqdm(total=size, unit="B", unit_scale=True, desc="indexing corpus", disable=not progress) as bar,
    ):
        f.seek(0)
        shown = 0
        end = 0
        try:
            for lineno, pos, line in iter_lines(f, path, max_line_bytes):
                end = pos + len(line)
                doc = parse_row(line, path, lineno)
                if end - shown >= 1 << 22:
                    bar.update(end - shown)
                    shown = end
                if doc is None:
                    continue
                offsets.append(pos + 3 if lineno == 1 and line.startswith(_BOM) else pos)
                if len(line) > max_row:
                    max_row = len(line)
                if sequential and doc.id != str(n):
                    sequential = False
                    for j in range(n):
                        hashes.append_bytes(hashlib.blake2b(str(j).encode(), digest_size=8).digest())
                if not sequential:
                    hashes.append_bytes(
                        hashlib.blake2b(doc.id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                    )
                n += 1
        except CorpusFormatError as e:
            error = e
        bar.update(end - shown)
    offsets.append(end)
    off = offsets.to_array()
    if sequential:
        if error is not None:
            raise error
        return _Index(off, None, None, max_row)
    sorted_h = hashes.to_array()
    order = np.argsort(sorted_h, kind="stable")
    sorted_h.sort()  # in place: the build peaks at 24 bytes per row (offsets, hashes, order)
    _check_duplicates(path, fd, off, sorted_h, order, max_row)
    if error is not None:
        raise error
    return _Index(off, sorted_h, order.view(np.uint64), max_row)


def _read_id(fd: int, offsets: np.ndarray, i: int, path: PathLike, max_row: int) -> str:
    start, stop = int(offsets[i]), int(offsets[i + 1])
    data = os.pread(fd, min(stop - start, max_row), start)
    end = data.find(b"\n")
    doc = parse_row(data if end < 0 else data[: end + 1], path, 0)
    assert doc is not None
    return doc.id


def _check_duplicates(
    path: PathLike, fd: int, offsets: np.ndarray, sorted_h: np.ndarray, order: np.ndarray, max_row: int
) -> None:
    """Raise for the first row (in file order) whose id an earlier row already has. Equal hashes are confirmed by
    reading the rows, so a 64-bit collision is never reported as a duplicate."""
    same = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
    first_dup: tuple[int, str] | None = None
    k = 0
    while k < len(same):
        # one run of equal hashes: positions lo..hi in sorted order (rows ascending: the sort is stable)
        lo = int(same[k])
        hi = lo + 1
        while k + 1 < len(same) and int(same[k + 1]) == hi:
            k += 1
            hi += 1
        k += 1
        seen: set[str] = set()
        for pos in range(lo, hi + 1):
            row = int(order[pos])
            doc_id = _read_id(fd, offsets, row, path, max_row)
            if doc_id in seen:
                if first_dup is None or row < first_dup[0]:
                    first_dup = (row, doc_id)
                break
            seen.add(doc_id)
    if first_dup is not None:
        row, doc_id = first_dup
        raise _fail(path, _line_of(fd, int(offsets[row])), f"duplicate document id {doc_id!r}")


def _line_of(fd: int, offset: int) -> int:
    """The 1-based line number of the line starting at byte ``offset`` (counts newlines before it)."""
    count, pos = 0, 0
    while pos < offset:
        block = os.pread(fd, min(_READ_BLOCK, offset - pos), pos)
        if not block:
            break
        count += block.count(b"\n")
        pos += len(block)
    return count + 1


def _index_files(index_dir: Path) -> dict[str, Path]:
    return {
        "meta": index_dir / "corpus_index.json",
        "offsets": index_dir / "corpus_offsets.npy",
        "hashes": index_dir / "corpus_id_hashes.npy",
        "rows": index_dir / "corpus_id_rows.npy",
    }


def _load_index(index_dir: Path, fingerprint: FileFingerprint) -> _Index | None:
    """The saved index if its meta file matches ``fingerprint`` and the arrays look right; else None."""
    files = _index_files(index_dir)
    try:
        meta = json.loads(files["meta"].read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("version") != _INDEX_VERSION:
            return None
        if meta.get("file") != asdict(fingerprint):
            return None
        n = meta["rows"]
        offsets = np.load(files["offsets"], mmap_mode="r", allow_pickle=False)
        if offsets.dtype != np.uint64 or offsets.shape != (n + 1,) or int(offsets[-1]) > fingerprint.size:
            return None
        max_row = meta["max_row_bytes"]
        if not isinstance(max_row, int) or not 0 <= max_row <= fingerprint.size:
            return None
        if meta.get("sequential_ids"):
            return _Index(offsets, None, None, max_row)
        hashes = np.load(files["hashes"], mmap_mode="r", allow_pickle=False)
        rows = np.load(files["rows"], mmap_mode="r", allow_pickle=False)
        if hashes.dtype != np.uint64 or rows.dtype != np.uint64 or hashes.shape != (n,) or rows.shape != (n,):
            return None
        return _Index(offsets, hashes, rows, max_row)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_index(index_dir: Path, index: _Index, fingerprint: FileFingerprint) -> None:
    """Write the arrays (temp name, then rename), the meta file last: a crash leaves no meta that vouches for them."""
    index_dir.mkdir(parents=True, exist_ok=True)
    files = _index_files(index_dir)
    files["meta"].unlink(missing_ok=True)
    save_npy_atomic(files["offsets"], index.offsets)
    if index.hashes is not None and index.rows is not None:
        save_npy_atomic(files["hashes"], index.hashes)
        save_npy_atomic(files["rows"], index.rows)
    meta = {
        "version": _INDEX_VERSION,
        "file": asdict(fingerprint),
        "rows": len(index.offsets) - 1,
        "sequential_ids": index.hashes is None,
        "max_row_bytes": index.max_row_bytes,
    }
    fd, tmp = tempfile.mkstemp(dir=index_dir, prefix=".corpus_index.json.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(meta, f)
        os.replace(tmp, files["meta"])
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
