"""Hybrid retrieval by reciprocal-rank fusion (RRF) of several retrievers over the same corpus."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Document, Hit, Retriever

__all__ = ["HybridRetriever"]


class HybridRetriever(Retriever):
    """Fuse ranked lists: ``score(d) = sum_i weights[i] / (k + rank_i(d))`` with ranks from 1.

    Each retriever contributes its top ``max(depth, topk)`` hits; documents are identified by ``Document.id``.
    Equal fused scores are ordered by the best rank the document got in any list, then by the position of the
    retriever that gave that rank (the order of ``retrievers``): deterministic for deterministic inputs.
    The fused score is the hit's ``score``.

    Args:
        retrievers: the retrievers to fuse (e.g. BM25 and dense).
        k: the RRF constant (60 in Cormack et al. 2009).
        weights: one weight per retriever (default all 1).
        depth: hits taken from each retriever per query.
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        k: float = 60.0,
        weights: Sequence[float] | None = None,
        depth: int = 100,
    ) -> None:
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        if weights is not None and len(weights) != len(retrievers):
            raise ValueError(f"got {len(weights)} weights for {len(retrievers)} retrievers")
        if k < 0:
            raise ValueError(f"the RRF constant k must be >= 0, got {k}")
        self.retrievers = list(retrievers)
        self.k = float(k)
        self.weights = [float(w) for w in weights] if weights is not None else [1.0] * len(self.retrievers)
        self.depth = int(depth)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        queries = list(queries)
        if topk <= 0:
            return [[] for _ in queries]
        depth = max(self.depth, topk)
        per_retriever = [r.batch_search(queries, depth) for r in self.retrievers]
        return [self.fuse([lists[q] for lists in per_retriever], topk) for q in range(len(queries))]

    def fuse(self, ranked: Sequence[Sequence[Hit]], topk: int) -> list[Hit]:
        """Fuse one query's ranked lists (one per retriever) into the top ``topk`` hits."""
        fused: dict[str, float] = {}
        best: dict[str, tuple[int, int]] = {}  # doc id -> (best rank, retriever index)
        docs: dict[str, Document] = {}
        for r, (hits, w) in enumerate(zip(ranked, self.weights, strict=True)):
            seen: set[str] = set()
            for rank, hit in enumerate(hits, 1):
                key = hit.doc.id
                if key in seen:  # a retriever listing a doc twice counts once, at its best rank
                    continue
                seen.add(key)
                fused[key] = fused.get(key, 0.0) + w / (self.k + rank)
                if key not in best or (rank, r) < best[key]:
                    best[key] = (rank, r)
                docs.setdefault(key, hit.doc)
        order = sorted(fused, key=lambda d: (-fused[d], *best[d]))
        return [Hit(docs[d], fused[d]) for d in order[:topk]]

    def close(self) -> None:
        for r in self.retrievers:
            r.close()
