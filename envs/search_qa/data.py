"""SearchQA data: a seeded synthetic knowledge base rendered into a Search-R1 corpus, plus multi-hop questions.

``build_dataset(config, seed)`` is a pure function of ``(config, seed)`` (all randomness from
``numpy.random.default_rng(seed)``): the same inputs give byte-identical corpora and questions.

>>> ds = build_dataset("tiny", seed=0)
>>> ex = ds.test[0]
>>> ex.id, ex.hops == len(ex.supporting_doc_ids) == len(ex.oracle_queries)
('test-00000', True)
>>> any(a in ds.doc(ex.supporting_doc_ids[-1]).contents for a in ex.golden_answers)
True

Hop types: ``1hop`` (one relation), ``bridge`` (two chained relations, e.g. "Where was the director of the film Y
born?"), ``comparison`` (two entities, "Who was born earlier, A or B?") and ``multihop`` (3-4 chained relations).
Test questions are anchored on their own subset of entities (the first entity a question names), so train and
test never share a question. See ``kb`` for the entities and distractors, ``questions`` for the templates.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.envs.search_qa.config import HOP_TYPES as HOP_TYPES, DatasetConfig as DatasetConfig
from agentgym.envs.search_qa.kb import KINDS, KnowledgeBase, RenderedCorpus, build_kb, render_corpus
from agentgym.envs.search_qa.questions import COMPARISONS, PATHS, Draft, draft_chain, draft_comparison
from agentgym.tools.retrieval.base import Document, write_corpus_jsonl, write_jsonl_atomic

SPLITS: tuple[str, ...] = ("train", "test")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class QAExample:
    """One question with its golden answers and privileged supervision.

    ``supporting_doc_ids`` and ``oracle_queries`` have one entry per hop, in hop order; an oracle query names the
    hop's entity (for later hops, the bridge entity the question does not name) and the relation.
    ``hop_entities`` are those entities' names, ``hop_answers`` what each hop's document states (the next
    entity, or the final / compared value); both are empty for loaded benchmark files.
    """

    id: str
    question: str
    golden_answers: tuple[str, ...]
    hop_type: str
    hops: int
    supporting_doc_ids: tuple[str, ...]
    oracle_queries: tuple[str, ...]
    split: str
    template: str = ""
    hop_entities: tuple[str, ...] = ()
    hop_answers: tuple[str, ...] = ()
    #: the same question in other words, with the same answers ("" where there is none: loaded benchmark files)
    rewording: str = ""

    def gold(self) -> dict[str, Any]:
        """The privileged record for ``info["gold"]`` (JSON-serialisable)."""
        return {
            "answers": list(self.golden_answers),
            "hop_type": self.hop_type,
            "hops": self.hops,
            "supporting_doc_ids": list(self.supporting_doc_ids),
            "oracle_queries": list(self.oracle_queries),
            "hop_entities": list(self.hop_entities),
            "hop_answers": list(self.hop_answers),
        }

    def to_json(self) -> dict[str, Any]:
        """FlashRAG question row: ``id``, ``question``, ``golden_answers`` and everything else in ``metadata``."""
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": {
                "hop_type": self.hop_type,
                "hops": self.hops,
                "supporting_doc_ids": list(self.supporting_doc_ids),
                "oracle_queries": list(self.oracle_queries),
                "template": self.template,
                "hop_entities": list(self.hop_entities),
                "hop_answers": list(self.hop_answers),
                **({"rewording": self.rewording} if self.rewording else {}),
            },
        }


@dataclass
class QADataset:
    """A corpus plus train/test questions. ``config``/``seed`` are ``None`` for loaded benchmark files."""

    config: DatasetConfig | None
    seed: int | None
    corpus: Sequence[Document]  # a list, or a CorpusFile for corpora too big to hold (load_flashrag(stream=True))
    train: list[QAExample]
    test: list[QAExample]
    _by_id: dict[str, Document] | None = field(default=None, init=False, repr=False, compare=False)

    def split(self, name: str) -> list[QAExample]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; choose 'train' or 'test'")
        return self.train if name == "train" else self.test

    def doc(self, doc_id: str) -> Document:
        """The passage with id ``doc_id`` (a ``CorpusFile`` corpus is looked up in its own id index)."""
        if hasattr(self.corpus, "get"):
            return self.corpus.get(doc_id)
        if self._by_id is None or len(self._by_id) != len(self.corpus):
            self._by_id = {d.id: d for d in self.corpus}
        return self._by_id[doc_id]

    def example(self, example_id: str) -> QAExample:
        """The question with id ``example_id`` (either split)."""
        for ex in (*self.test, *self.train):
            if ex.id == example_id:
                return ex
        raise KeyError(example_id)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``corpus.jsonl``, ``train.jsonl``, ``test.jsonl`` (FlashRAG layout) and ``meta.json``, atomically.

        Reload with ``flashrag.load_saved(directory)`` (both splits, config and seed) or ``load_flashrag``.
        """
        directory = Path(directory)
        write_corpus_jsonl(directory / "corpus.jsonl", self.corpus)
        for name in SPLITS:
            write_jsonl_atomic(directory / f"{name}.jsonl", (ex.to_json() for ex in self.split(name)))
        meta = {
            "format": "agentgym.search_qa",
            "version": FORMAT_VERSION,
            "seed": self.seed,
            "config": None if self.config is None else dataclasses.asdict(self.config),
            "counts": {"corpus": len(self.corpus), "train": len(self.train), "test": len(self.test)},
        }
        write_jsonl_atomic(directory / "meta.json", [meta])  # one JSON object on one line

    def stats(self) -> dict[str, Any]:
        """Document count and questions per split and hop type."""
        out: dict[str, Any] = {"docs": len(self.corpus)}
        for name in SPLITS:
            by_type: dict[str, int] = {}
            for ex in self.split(name):
                by_type[ex.hop_type] = by_type.get(ex.hop_type, 0) + 1
            out[name] = by_type
        return out


def config_from_dict(d: dict[str, Any]) -> DatasetConfig:
    """Inverse of ``dataclasses.asdict`` for ``DatasetConfig`` (``hop_mix`` may come back as lists from JSON)."""
    return DatasetConfig(**d)


def _anchor_pools(kb: KnowledgeBase, frac: float, rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    """Per split, per kind: the entity indices that may be named first in a question."""
    pools: dict[str, dict[str, np.ndarray]] = {"train": {}, "test": {}}
    for kind in KINDS:
        n = len(kb[kind])
        perm = rng.permutation(n)
        n_test = min(n - 1, max(1, round(n * frac)))
        pools["test"][kind] = np.sort(perm[:n_test])
        pools["train"][kind] = np.sort(perm[n_test:])
    return pools


def _draw(
    kb: KnowledgeBase, hop_type: str, pool: dict[str, np.ndarray], four_hop: float, rng: np.random.Generator
) -> Draft | None:
    """One random attempt at a question of ``hop_type`` anchored in ``pool`` (``None``: try again)."""
    if hop_type == "comparison":
        cmp = COMPARISONS[int(rng.integers(len(COMPARISONS)))]
        anchors = pool[cmp.kind]
        if len(anchors) < 2:
            return None
        a, b = (int(anchors[i]) for i in rng.integers(0, len(anchors), size=2))
        return draft_comparison(kb, cmp, a, b, rng)
    hops = {"1hop": 1, "bridge": 2}.get(hop_type) or (4 if rng.random() < four_hop else 3)
    paths = PATHS[hops]
    path = paths[int(rng.integers(len(paths)))]
    anchors = pool[path[0].split(".")[0]]
    if len(anchors) == 0:
        return None
    return draft_chain(kb, path, int(anchors[int(rng.integers(len(anchors)))]), rng)


def generate_questions(
    kb: KnowledgeBase, rendered: RenderedCorpus, config: DatasetConfig, rng: np.random.Generator
) -> dict[str, list[QAExample]]:
    """Questions for both splits (test first), with the exact ``hop_mix`` counts and no shared question."""
    pools = _anchor_pools(kb, config.test_anchor_fraction, rng)
    seen_keys: set[tuple] = set()
    seen_text: set[str] = set()
    out: dict[str, list[QAExample]] = {}
    for split in ("test", "train"):
        n = config.n_test if split == "test" else config.n_train
        counts = config.hop_counts(n)
        types = [t for t in HOP_TYPES for _ in range(counts.get(t, 0))]
        order = rng.permutation(len(types)).tolist()
        examples: list[QAExample] = []
        for i, j in enumerate(order):
            hop_type = types[j]
            for _ in range(2000):
                draft = _draw(kb, hop_type, pools[split], config.four_hop_fraction, rng)
                if draft is not None and draft.key not in seen_keys and draft.question not in seen_text:
                    break
            else:
                raise ValueError(
                    f"could not generate {counts[hop_type]} distinct {hop_type!r} questions for split {split!r}; "
                    "use more entities or fewer questions"
                )
            seen_keys.add(draft.key)
            seen_text.add(draft.question)
            page = rendered.page_doc
            examples.append(
                QAExample(
                    id=f"{split}-{i:05d}",
                    question=draft.question,
                    golden_answers=draft.answers,
                    hop_type=draft.hop_type,
                    hops=len(draft.hop_entities),
                    supporting_doc_ids=tuple(str(int(page[k][e])) for k, e in draft.hop_entities),
                    oracle_queries=draft.queries,
                    split=split,
                    template=draft.template,
                    hop_entities=tuple(kb[k].names[e] for k, e in draft.hop_entities),
                    hop_answers=draft.hop_answers,
                    rewording=draft.rewording,
                )
            )
        out[split] = examples
    return out


def build_dataset(config: DatasetConfig | str = "small", seed: int = 0) -> QADataset:
    """Build the knowledge base, its corpus and both question splits from ``numpy.random.default_rng(seed)``."""
    if isinstance(config, str):
        config = DatasetConfig.preset(config)
    rng = np.random.default_rng(seed)
    kb = build_kb(config, rng)
    rendered = render_corpus(kb, config, rng)
    splits = generate_questions(kb, rendered, config, rng)
    return QADataset(config=config, seed=seed, corpus=rendered.docs, train=splits["train"], test=splits["test"])
