"""A seeded synthetic corpus in the shape of Search-R1's wiki-18, so scale benchmarks run without the 14 GB file.

Each line is ``{"id": "<i>", "contents": "\\"Title\\"\\nText"}`` with ids ``"0".."N-1"``. Passages have 90-110 words;
runs of consecutive passages (an "article", ~3 passages on average) share a title of 1-4 capitalised words. Words
follow a Zipf law (exponent ``zipf_a``, default 1.07) over ``vocab_size`` (500k) word types; the word of rank ``r`` is
a pronounceable lowercase string spelled from ``r`` (frequent words are short: ``ba``, ``be``, ...), and about one
type in ten is a capitalised "name". Some words carry a ``,`` or ``.``; passages end with ``.``.

The file is written in chunks of ``chunk_size`` passages, chunk ``k`` drawing from
``SeedSequence(seed, spawn_key=(k,))``: the same ``(n_passages, seed, knobs)`` always gives the same bytes, in flat
memory, and a corpus of N passages is the first N passages of any bigger one (same seed and knobs).

Queries (``write_queries``) are JSONL ``{"id": "q<i>", "question": "...", "source_id": "<doc id>" | null}``, about
5 words each: a share of them picked from one passage of the corpus (``source_id``), the rest drawn from the
vocabulary.

CLI: ``python -m agentgym.tools.retrieval.synthetic corpus OUT --passages N --seed S`` and
``python -m agentgym.tools.retrieval.synthetic queries OUT --n N --seed S [--passages N --corpus-seed S]``.

>>> import tempfile, pathlib, json
>>> path = pathlib.Path(tempfile.mkdtemp()) / "wiki.jsonl"
>>> write_corpus(path, 5, seed=0, vocab_size=1000, progress=False)
>>> row = json.loads(path.read_text().splitlines()[4])
>>> row["id"], 90 <= len(row["contents"].split("\\n", 1)[1].split()) <= 110
('4', True)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import atomic_output

PathLike = str | os.PathLike[str]

_CONSONANTS = "bdfghklmnprstvwz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 80 syllables: 80 + 80^2 + 80^3 > 500k words


def word_of_rank(rank: int) -> str:
    """The word type of Zipf rank ``rank`` (0 = most frequent): pronounceable, unique, short for small ranks;
    about one in ten types (ranks >= 200) is capitalised like a name.

    >>> [word_of_rank(r) for r in (0, 1, 79, 80, 6480)]
    ['ba', 'be', 'zu', 'baba', 'bababa']
    """
    if rank < 0:
        raise ValueError("rank must be >= 0")
    k = len(_SYLLABLES)
    length, first = 1, 0
    while rank >= first + k**length:
        first += k**length
        length += 1
    r = rank - first
    parts = []
    for _ in range(length):
        r, d = divmod(r, k)
        parts.append(_SYLLABLES[d])
    word = "".join(reversed(parts))
    return word.capitalize() if rank >= 200 and (rank * 2654435761) % 1000 < 100 else word


@dataclass(frozen=True)
class SyntheticSpec:
    """The knobs of the generator (all part of what makes a file reproducible)."""

    vocab_size: int = 500_000
    zipf_a: float = 1.07
    min_words: int = 90
    max_words: int = 110
    mean_article_passages: float = 3.0
    punct_rate: float = 0.08  # share of words followed by "," or "."
    chunk_size: int = 10_000

    def __post_init__(self) -> None:
        if self.vocab_size < 2:
            raise ValueError("vocab_size must be >= 2")
        if not 0 < self.zipf_a <= 4:
            raise ValueError("zipf_a must be in (0, 4]")
        if not 1 <= self.min_words <= self.max_words:
            raise ValueError("need 1 <= min_words <= max_words")
        if self.mean_article_passages < 1:
            raise ValueError("mean_article_passages must be >= 1")
        if not 0 <= self.punct_rate <= 1:
            raise ValueError("punct_rate must be in [0, 1]")
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")


@dataclass(frozen=True)
class _Vocab:
    words: np.ndarray  # object array of str, by rank
    cdf: np.ndarray  # float64 cumulative Zipf probabilities, last = 1

    @classmethod
    def build(cls, spec: SyntheticSpec) -> _Vocab:
        words = np.array([word_of_rank(r) for r in range(spec.vocab_size)], dtype=object)
        weights = np.arange(1, spec.vocab_size + 1, dtype=np.float64) ** -spec.zipf_a
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        return cls(words=words, cdf=cdf)

    def sample(self, rng: np.random.Generator, n: int, min_rank: int = 0) -> np.ndarray:
        """``n`` Zipf ranks (inverse CDF), optionally only ranks >= ``min_rank``."""
        lo = self.cdf[min_rank - 1] if min_rank > 0 else 0.0
        u = lo + rng.random(n) * (1.0 - lo)
        return np.minimum(np.searchsorted(self.cdf, u, side="right"), len(self.cdf) - 1)


@dataclass(frozen=True)
class _Chunk:
    titles: list[str]  # per passage
    texts: list[str]
    ranks: list[np.ndarray]  # the word ranks of each passage's text


def _chunk(spec: SyntheticSpec, vocab: _Vocab, seed: int, k: int, n: int) -> _Chunk:
    """Passages ``k*chunk_size ..`` (``n`` of them) of chunk ``k``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k,)))
    lengths = rng.integers(spec.min_words, spec.max_words + 1, size=n)
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    ranks = vocab.sample(rng, int(bounds[-1]))
    marks = rng.random(len(ranks))
    tokens = vocab.words[ranks]
    marks[bounds[1:] - 1] = spec.punct_rate / 2  # every passage ends with "."
    for mark, lo, hi in ((",", 0.0, spec.punct_rate / 2), (".", spec.punct_rate / 2, spec.punct_rate)):
        where = np.flatnonzero((marks >= lo) & (marks < hi))
        tokens[where] = [w + mark for w in tokens[where].tolist()]
    # articles: runs of passages sharing a title
    runs = rng.geometric(1.0 / spec.mean_article_passages, size=n)
    starts = np.cumsum(runs)
    starts = np.concatenate(([0], starts[starts < n]))
    title_len = rng.integers(1, 5, size=len(starts))
    title_ranks = vocab.sample(rng, int(title_len.sum()), min_rank=min(100, spec.vocab_size - 1))
    title_words = [w.capitalize() for w in vocab.words[title_ranks].tolist()]
    tb = np.concatenate(([0], np.cumsum(title_len))).tolist()
    titles = [" ".join(title_words[tb[j] : tb[j + 1]]) for j in range(len(starts))]
    article = np.searchsorted(starts, np.arange(n), side="right") - 1
    token_list = tokens.tolist()
    b = bounds.tolist()
    texts = []
    for i in range(n):
        text = " ".join(token_list[b[i] : b[i + 1]])
        texts.append(text[0].upper() + text[1:])
    return _Chunk([titles[a] for a in article.tolist()], texts, [ranks[b[i] : b[i + 1]] for i in range(n)])


def _chunks(n_passages: int, seed: int, spec: SyntheticSpec, vocab: _Vocab) -> Iterator[tuple[int, _Chunk]]:
    """Whole chunks, the last one cut: a corpus of N passages is the first N passages of any bigger one."""
    for k, first in enumerate(range(0, n_passages, spec.chunk_size)):
        chunk, keep = _chunk(spec, vocab, seed, k, spec.chunk_size), n_passages - first
        yield first, _Chunk(chunk.titles[:keep], chunk.texts[:keep], chunk.ranks[:keep])


def write_corpus(
    path: PathLike,
    n_passages: int,
    seed: int = 0,
    *,
    vocab_size: int = 500_000,
    zipf_a: float = 1.07,
    min_words: int = 90,
    max_words: int = 110,
    mean_article_passages: float = 3.0,
    punct_rate: float = 0.08,
    chunk_size: int = 10_000,
    progress: bool = True,
) -> None:
    """Write ``n_passages`` wiki-18-shaped passages to ``path`` (atomically, streaming, with a progress bar)."""
    if n_passages < 0:
        raise ValueError("n_passages must be >= 0")
    spec = SyntheticSpec(vocab_size, zipf_a, min_words, max_words, mean_article_passages, punct_rate, chunk_size)
    vocab = _Vocab.build(spec)
    from tqdm.auto import tqdm

    with (
        atomic_output(path) as tmp,
        open(tmp, "w", encoding="ascii", newline="\n") as f,
        tqdm(total=n_passages, unit="passage", desc="writing corpus", disable=not progress) as bar,
    ):
        for first, chunk in _chunks(n_passages, seed, spec, vocab):
            # words are [A-Za-z] plus ",." and titles are words: only the quotes and the newline need escaping
            f.write(
                "".join(
                    f'{{"id": "{first + j}", "contents": "\\"{title}\\"\\n{text}"}}\n'
                    for j, (title, text) in enumerate(zip(chunk.titles, chunk.texts, strict=True))
                )
            )
            bar.update(len(chunk.texts))


def write_queries(
    path: PathLike,
    n: int,
    seed: int = 0,
    *,
    n_passages: int = 0,
    corpus_seed: int = 0,
    matched_share: float = 0.5,
    min_words: int = 4,
    max_words: int = 6,
    max_source_chunks: int = 8,
    vocab_size: int = 500_000,
    zipf_a: float = 1.07,
    chunk_size: int = 10_000,
) -> None:
    """Write ``n`` queries as JSONL ``{"id": "q<i>", "question": str, "source_id": str | None}``.

    With ``n_passages`` (the corpus written by ``write_corpus(_, n_passages, corpus_seed)`` with the same
    ``vocab_size``, ``zipf_a`` and ``chunk_size`` and default other knobs), ``matched_share`` of the queries take
    their words (distinct, most frequent first) from one passage of that corpus, named by ``source_id``; those
    passages come from at most ``max_source_chunks`` chunks, so this stays fast on any corpus size.
    The rest are Zipf words of rank >= 50 (no function words). Words of a query are distinct (a repeated draw is
    dropped, so a query may be a word shorter than ``min_words``).
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if not 0 <= matched_share <= 1 or not 1 <= min_words <= max_words:
        raise ValueError("need 0 <= matched_share <= 1 and 1 <= min_words <= max_words")
    spec = SyntheticSpec(vocab_size=vocab_size, zipf_a=zipf_a, chunk_size=chunk_size)
    vocab = _Vocab.build(spec)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1 << 30,)))
    lengths = rng.integers(min_words, max_words + 1, size=n).tolist()
    matched = (rng.random(n) < matched_share).tolist() if n_passages > 0 else [False] * n
    n_chunks = -(-n_passages // chunk_size)
    chunk_ids = sorted(rng.choice(n_chunks, size=min(n_chunks, max_source_chunks), replace=False).tolist())
    sources: dict[int, list[np.ndarray]] = {}
    stop_rank = min(50, vocab_size - 1)
    rows = []
    for i in range(n):
        source_id = None
        if matched[i]:
            k = chunk_ids[int(rng.integers(len(chunk_ids)))]
            if k not in sources:
                sources[k] = _chunk(spec, vocab, corpus_seed, k, chunk_size).ranks[: n_passages - k * chunk_size]
            j = int(rng.integers(len(sources[k])))
            words = sources[k][j]
            content = words[words >= stop_rank]
            pool = np.unique(content if len(content) >= lengths[i] else words)
            picked = np.sort(rng.choice(len(pool), size=min(lengths[i], len(pool)), replace=False))
            ranks = pool[picked]
            source_id = str(k * chunk_size + j)
        else:
            ranks = np.unique(vocab.sample(rng, lengths[i], min_rank=stop_rank))
        question = " ".join(vocab.words[ranks].tolist())
        rows.append({"id": f"q{i}", "question": question, "source_id": source_id})
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.tools.retrieval.synthetic",
        description="Write a seeded synthetic wiki-18-shaped corpus or queries over its vocabulary.",
    )
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("corpus", help="write a corpus JSONL")
    c.add_argument("out", type=Path)
    c.add_argument("--passages", type=int, required=True)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--vocab-size", type=int, default=500_000)
    c.add_argument("--zipf-a", type=float, default=1.07)
    c.add_argument("--no-progress", action="store_true")
    q = sub.add_parser("queries", help="write a queries JSONL")
    q.add_argument("out", type=Path)
    q.add_argument("--n", type=int, required=True)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--passages", type=int, default=0, help="the corpus's passages (to draw matched queries)")
    q.add_argument("--corpus-seed", type=int, default=0)
    q.add_argument("--vocab-size", type=int, default=500_000)
    q.add_argument("--zipf-a", type=float, default=1.07)
    args = parser.parse_args(argv)
    if args.out.is_dir():
        parser.error(f"{args.out} is a directory")
    if not args.out.parent.is_dir():
        parser.error(f"{args.out.parent} is not a directory")
    try:
        if args.what == "corpus":
            if args.passages < 0:
                parser.error("--passages must be >= 0")
            write_corpus(
                args.out,
                args.passages,
                args.seed,
                vocab_size=args.vocab_size,
                zipf_a=args.zipf_a,
                progress=not args.no_progress,
            )
        else:
            if args.n < 0 or args.passages < 0:
                parser.error("--n and --passages must be >= 0")
            write_queries(
                args.out,
                args.n,
                args.seed,
                n_passages=args.passages,
                corpus_seed=args.corpus_seed,
                vocab_size=args.vocab_size,
                zipf_a=args.zipf_a,
            )
    except ValueError as e:
        parser.error(str(e))
    except OSError as e:
        parser.error(f"{args.out}: {e.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
