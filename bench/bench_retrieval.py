"""Retrieval benchmark: agentgym's fast BM25 against rank-bm25 (and bm25s when installed), plus dense MiniLM + faiss.

Run by hand::

    python bench/bench_retrieval.py --corpus random --out runs/bench_retrieval.json
    python bench/bench_retrieval.py --corpus searchqa          # the SearchQA "100k" preset
    python bench/bench_retrieval.py --corpus path/to/corpus.jsonl --queries-file questions.jsonl

All BM25 back-ends index the same tokens (agentgym's tokenizer) and are measured in the same run on the same
queries: index build time, single-query latency (p50/p99, one thread) and batched throughput (all cores and one
thread). rank-bm25 has no inverted index (~5 queries/s on 100k docs), so it runs on a subset of the queries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.tools.retrieval import Document, load_corpus_jsonl
from agentgym.tools.retrieval.bm25 import STOPWORDS, BM25Retriever, tokenize

# ----------------------------------------------------------------------------------------------- corpora


def synthetic_corpus(
    n_docs: int = 100_000, mean_len: int = 60, vocab: int = 300_000, zipf_s: float = 1.0, seed: int = 0
) -> tuple[list[Document], list[np.ndarray], np.ndarray]:
    """A Zipf-Mandelbrot corpus: token ranks ~ 1/(r + 2.7)^s, the most frequent ranks are English stop words
    (so, as in real text, about a third of the tokens are dropped by the tokenizer), the rest pseudo-words."""
    rng = np.random.default_rng(seed)
    syllables = [c + v + e for c in "bcdfghjklmnprstvwz" for v in "aeiou" for e in ("", "n")]

    def word(r: int) -> str:
        r += len(syllables)  # at least two syllables
        out = []
        while r:
            out.append(syllables[r % len(syllables)])
            r //= len(syllables)
        return "".join(out)

    stop = sorted(STOPWORDS)
    rng.shuffle(stop)
    words = np.array(stop + [word(r) for r in range(vocab - len(stop))], dtype=object)
    p = 1.0 / (np.arange(vocab) + 2.7) ** zipf_s
    cdf = np.cumsum(p) / p.sum()
    lens = rng.poisson(mean_len, n_docs).clip(5)
    ids = np.searchsorted(cdf, rng.random(int(lens.sum())))
    offsets = np.concatenate([[0], np.cumsum(lens)])
    docs, doc_tokens = [], []
    for i in range(n_docs):
        toks = ids[offsets[i] : offsets[i + 1]]
        doc_tokens.append(toks)
        w = words[toks]
        docs.append(Document(str(i), f'"{w[0].title()} {w[1]}"\n' + " ".join(w[2:])))
    return docs, doc_tokens, words


def synthetic_queries(docs: Sequence[Document], n: int, seed: int) -> list[str]:
    """Question-like queries: 3-6 content words of a random document, wrapped in stop words."""
    rng = np.random.default_rng(seed + 1)
    out = []
    while len(out) < n:
        toks = tokenize(docs[int(rng.integers(len(docs)))].contents)
        if len(toks) < 3:
            continue
        k = min(len(toks), int(rng.integers(3, 7)))
        pick = sorted(rng.choice(len(toks), k, replace=False).tolist())
        out.append("what is the " + " ".join(toks[j] for j in pick) + "?")
    return out


def load_corpus(args: argparse.Namespace) -> tuple[str, list[Document], list[str]]:
    if args.corpus == "random":
        docs, _, _ = synthetic_corpus(args.docs, seed=args.seed)
        return (
            f"random Zipf corpus ({args.docs:,} docs, ~60 tokens/doc)",
            docs,
            synthetic_queries(docs, args.queries, args.seed),
        )
    if args.corpus == "searchqa":
        try:
            from agentgym.envs.search_qa.data import DatasetConfig, build_dataset
        except ImportError as e:
            print(f"SearchQA dataset unavailable ({e}); falling back to the random corpus", file=sys.stderr)
            args.corpus = "random"
            return load_corpus(args)
        ds = build_dataset(DatasetConfig.preset("100k"), seed=args.seed)
        questions = [ex.question for ex in [*ds.test, *ds.train]][: args.queries]
        return "SearchQA 100k preset", list(ds.corpus), questions
    docs = load_corpus_jsonl(args.corpus)
    if args.queries_file:
        with open(args.queries_file, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        questions = [str(r.get("question", r.get("query", ""))) for r in rows][: args.queries]
    else:
        questions = synthetic_queries(docs, args.queries, args.seed)
    return f"{args.corpus} ({len(docs):,} docs)", docs, questions


# ----------------------------------------------------------------------------------------------- timing


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def latencies(fn: Callable[[str], Any], queries: Sequence[str]) -> dict[str, float]:
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        lat.append(time.perf_counter() - t0)
    a = np.asarray(lat) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean())}


def throughput(fn: Callable[[Sequence[str]], Any], queries: Sequence[str], repeat: int = 3) -> float:
    best = min(timed(lambda: fn(queries))[1] for _ in range(repeat))
    return len(queries) / best


# ----------------------------------------------------------------------------------------------- back-ends


def bench_fast(docs: list[Document], queries: list[str], topk: int) -> dict[str, Any]:
    BM25Retriever([Document("0", "warm up the numba kernels"), Document("1", "kernels")]).search("kernels")
    r, build = timed(lambda: BM25Retriever(docs, idf="okapi"))  # rank-bm25's idf: its scores are compared below
    idx = r._fast
    assert idx is not None
    res: dict[str, Any] = {
        "build_s": build,
        "vocab": len(idx.vocab),
        "postings": int(idx.post_docs.size),
        "index_mb": (idx.post_docs.nbytes + idx.post_imp.nbytes + idx.indptr.nbytes) / 2**20,
    }
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _, res["save_s"] = timed(lambda: r.save(tmp))
        _, res["load_s"] = timed(lambda: BM25Retriever.load(tmp, docs))
    r.batch_search(queries[:50], topk)
    res.update(latencies(lambda q: r.search(q, topk), queries[:2000]))
    n_cpu = r.n_threads
    res["threads"] = n_cpu
    res["batch_qps"] = throughput(lambda qs: r.batch_search(qs, topk), queries)
    r.n_threads = 1
    res["batch_qps_1thread"] = throughput(lambda qs: r.batch_search(qs, topk), queries)
    r.n_threads = n_cpu
    res["retriever"] = r
    return res


def bench_rank_bm25(tokens: list[list[str]], t_tokenize: float, queries: list[str], topk: int) -> dict[str, Any] | None:
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        return None
    index, build = timed(lambda: BM25Okapi(tokens, k1=1.5, b=0.75, epsilon=0.25))
    build += t_tokenize  # it indexes our tokens; agentgym's build time includes tokenizing

    def search(q: str) -> np.ndarray:
        scores = index.get_scores(tokenize(q))
        top = np.argpartition(-scores, topk)[:topk]
        return top[np.argsort(-scores[top], kind="stable")]

    res: dict[str, Any] = {"build_s": build, **latencies(search, queries)}
    res["batch_qps"] = res["batch_qps_1thread"] = 1e3 / res["mean_ms"]  # no batch API, no parallelism
    res["index"] = index
    return res


def bench_bm25s(
    tokens: list[list[str]], t_tokenize: float, queries: list[str], topk: int, n_cpu: int
) -> dict[str, Any] | None:
    try:
        import bm25s
    except ImportError:
        return None
    r = bm25s.BM25(k1=1.5, b=0.75)  # bm25s' default "lucene" idf
    _, build = timed(lambda: r.index(tokens, show_progress=False))
    qtoks = [tokenize(q) or ["\x00"] for q in queries]  # bm25s rejects empty queries

    def batch(qs: Sequence[list[str]], n_threads: int) -> Any:
        return r.retrieve(list(qs), k=topk, show_progress=False, n_threads=n_threads)

    batch(qtoks[:20], 1)
    res: dict[str, Any] = {"build_s": build + t_tokenize}
    lat = []
    for q in qtoks[:1000]:
        t0 = time.perf_counter()
        batch([q], 1)
        lat.append(time.perf_counter() - t0)
    a = np.asarray(lat) * 1e3
    res.update(p50_ms=float(np.percentile(a, 50)), p99_ms=float(np.percentile(a, 99)), mean_ms=float(a.mean()))
    res["batch_qps"] = len(qtoks) / min(timed(lambda: batch(qtoks, n_cpu))[1] for _ in range(2))
    res["batch_qps_1thread"] = len(qtoks) / min(timed(lambda: batch(qtoks, 1))[1] for _ in range(2))
    return res


class _Precomputed:
    """An encoder that returns already computed corpus embeddings (and encodes anything else)."""

    def __init__(self, encoder: Any, first_text: str, embeddings: np.ndarray) -> None:
        self.encoder, self.first_text, self.embeddings = encoder, first_text, embeddings
        self.id, self.dim, self.batch_size = encoder.id, encoder.dim, encoder.batch_size

    def encode(self, texts: Sequence[str], show_progress: bool | None = None) -> np.ndarray:
        if len(texts) == len(self.embeddings) and texts and texts[0] == self.first_text:
            return self.embeddings
        return self.encoder.encode(texts, show_progress=False)


def bench_dense(docs: list[Document], queries: list[str], topk: int, n_docs: int) -> dict[str, Any] | None:
    try:
        from agentgym.tools.retrieval.dense import DenseRetriever, MiniLMEncoder
    except ImportError as e:
        print(f"dense: skipped ({e})", file=sys.stderr)
        return None
    sub = docs[:n_docs]
    enc, load_s = timed(lambda: MiniLMEncoder(batch_size=64))
    enc.encode([d.contents for d in sub[:64]])  # warm-up
    emb, encode_s = timed(lambda: enc.encode([d.contents for d in sub]))
    res: dict[str, Any] = {"docs": len(sub), "model_load_s": load_s, "encode_docs_per_s": len(sub) / encode_s}
    encoder = _Precomputed(enc, sub[0].contents if sub else "", emb)  # index builds reuse the measured embeddings
    qs = queries[:500]
    for kind in ("flat", "hnsw", "ivf"):
        r, build = timed(lambda kind=kind: DenseRetriever(sub, encoder, index=kind))
        res[f"{kind}_build_s"] = build
        res[f"{kind}_batch_qps"] = throughput(lambda q, r=r: r.batch_search(q, topk), qs, repeat=1)
        res[f"{kind}_p50_ms"] = latencies(lambda q, r=r: r.search(q, topk), qs[:100])["p50_ms"]
    res["query_encode_qps"] = throughput(lambda q: enc.encode(q), qs, repeat=1)
    return res


# ----------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="random", help="'random', 'searchqa' or a corpus JSONL path")
    ap.add_argument("--docs", type=int, default=100_000, help="documents in the random corpus")
    ap.add_argument("--queries", type=int, default=2000, help="queries for the fast back-ends")
    ap.add_argument("--queries-file", help="JSONL with 'question' (FlashRAG) for a corpus path")
    ap.add_argument("--rank-queries", type=int, default=20, help="queries for rank-bm25 (slow)")
    ap.add_argument("--topk", type=int, default=10)
    ap.add_argument("--dense-docs", type=int, default=1000, help="corpus prefix for dense (0 = skip dense)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)

    load_before = os.getloadavg()[0]
    (name, docs, queries), t_corpus = timed(lambda: load_corpus(args))
    print(f"corpus: {name}; {len(queries):,} queries; built in {t_corpus:.1f}s")
    tokens, t_tok = timed(lambda: [tokenize(d.contents) for d in docs])
    print(f"tokenized in {t_tok:.1f}s: {np.mean([len(t) for t in tokens]):.1f} indexed tokens/doc")

    results: dict[str, Any] = {}
    fast = bench_fast(docs, queries, args.topk)
    retriever = fast.pop("retriever")
    results["agentgym-fast"] = fast
    print(f"fast: vocab {fast['vocab']:,}, {fast['postings']:,} postings, index {fast['index_mb']:.0f} MB")
    rank = bench_rank_bm25(tokens, t_tok, queries[: args.rank_queries], args.topk)
    if rank is not None:
        index = rank.pop("index")
        agree = 0
        for q in queries[: args.rank_queries]:  # the same top-k scores as the reference library?
            want = np.sort(index.get_scores(tokenize(q)))[::-1][: args.topk]
            want = want[want > 0]  # (only matching documents are hits; no okapi floor on a corpus this size)
            _, scores = retriever.search_ids([q], args.topk)[0]
            agree += len(scores) == len(want) and bool(np.allclose(scores, want, rtol=1e-4, atol=1e-4))
        results["rank-bm25"] = rank
        fast["agrees_with_rank_bm25"] = f"{agree}/{args.rank_queries}"
    peer = bench_bm25s(tokens, t_tok, queries, args.topk, fast["threads"])
    if peer is not None:
        results["bm25s"] = peer
    retriever.close()

    cols = [("build_s", "build s", ".2f"), ("p50_ms", "p50 ms", ".3f"), ("p99_ms", "p99 ms", ".3f"),
            ("batch_qps", f"batch q/s ({fast['threads']} thr)", ",.0f"), ("batch_qps_1thread", "batch q/s (1 thr)",
            ",.0f")]  # fmt: skip
    print()
    print(f"{'BM25 back-end':<16}" + "".join(f"{title:>22}" for _, title, _ in cols))
    print(f"(build times include tokenizing: {t_tok:.1f}s of Python for the peers, which index agentgym's tokens)")
    for backend, row in results.items():
        print(f"{backend:<16}" + "".join(f"{format(row[k], fmt):>22}" for k, _, fmt in cols))
    if "rank-bm25" in results:
        print(f"(rank-bm25 on {args.rank_queries} queries; fast agrees with it on {fast['agrees_with_rank_bm25']})")
    print()
    ratios: dict[str, float] = {}
    for peer_name in ("rank-bm25", "bm25s"):
        if peer_name in results:
            p = results[peer_name]
            ratios[f"fast/{peer_name} batch q/s"] = fast["batch_qps"] / p["batch_qps"]
            ratios[f"fast/{peer_name} batch q/s, 1 thread"] = fast["batch_qps_1thread"] / p["batch_qps_1thread"]
            ratios[f"{peer_name}/fast p50 latency"] = p["p50_ms"] / fast["p50_ms"]
            ratios[f"{peer_name}/fast build time"] = p["build_s"] / fast["build_s"]
    for k, v in ratios.items():
        print(f"  {k:<40} {v:>10,.1f}x")
    print(f"  fast index save / load: {fast['save_s']:.2f}s / {fast['load_s']:.2f}s")
    targets = {
        "batch >= 1,000 q/s": fast["batch_qps"] >= 1000,
        ">= 100x rank-bm25": ratios.get("fast/rank-bm25 batch q/s", 0) >= 100,
        "p50 < 1 ms": fast["p50_ms"] < 1.0,
    }
    print("  targets: " + ", ".join(f"{k}: {'met' if ok else 'MISSED'}" for k, ok in targets.items()))

    if args.dense_docs > 0:
        dense = bench_dense(docs, queries, args.topk, args.dense_docs)
        if dense is not None:
            results["dense"] = dense
            print()
            print(
                f"dense (all-MiniLM-L6-v2, CPU, first {dense['docs']:,} docs: encoding all {len(docs):,} on this "
                f"machine would take ~{len(docs) / dense['encode_docs_per_s'] / 60:.0f} min)"
            )
            print(f"  encode: {dense['encode_docs_per_s']:,.0f} docs/s; queries {dense['query_encode_qps']:,.0f}/s")
            print(f"{'  index':<16}{'build s':>12}{'batch q/s':>14}{'p50 ms':>10}")
            for kind in ("flat", "hnsw", "ivf"):
                print(
                    f"  {kind:<14}{dense[f'{kind}_build_s']:>12.2f}{dense[f'{kind}_batch_qps']:>14,.0f}"
                    f"{dense[f'{kind}_p50_ms']:>10.2f}"
                )

    load_after = os.getloadavg()[0]
    if max(load_before, load_after) > 1.0:
        print(f"\nnote: the machine was busy (load average {load_before:.1f} -> {load_after:.1f}): numbers are noisy")
    if args.out:
        meta = {
            "load_average": [load_before, load_after],
            "corpus": name,
            "n_docs": len(docs),
            "n_queries": len(queries),
            "topk": args.topk,
            "indexed_tokens_per_doc": float(np.mean([len(t) for t in tokens])),
            "cpus": fast["threads"],
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results, "ratios": ratios, "targets": targets}, f, indent=2)
        print(f"\nwrote {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
