"""BM25 at scale: agentgym's on-disk BM25 (``DiskBM25``) against Lucene (Anserini) and ``bm25s``, on seeded
synthetic wiki-18-shaped corpora of growing size (issue 22: Search-R1's wiki-18 is 21M passages).

Run by hand (the corpora and Lucene's input are made once in ``--work`` and reused; indexes are rebuilt each run)::

    python bench/bench_retrieval_scale.py --sizes 1M --anserini-jar JAR --work /tmp/scale --out runs/scale
    python bench/bench_retrieval_scale.py --sizes 1M,5M,21M --anserini-jar JAR --work /tmp/scale --out runs/scale

Getting the Lucene jar (never downloaded by this script): Anserini 0.22.1's fat jar runs on Java 17 (newer Anserini
needs Java 21) and ships inside the pyserini wheel::

    pip download --no-deps pyserini==0.22.1 -d /tmp/pyserini
    unzip -j /tmp/pyserini/pyserini-0.22.1-py3-none-any.whl 'pyserini/resources/jars/*.jar' -d /tmp/pyserini
    # -> /tmp/pyserini/anserini-0.22.1-fatjar.jar; java and javac (JDK 17) must be on PATH

Every system runs in its own subprocess (its peak RSS is its own: ``ru_maxrss`` from ``wait4``), one at a time, on
the same queries (``synthetic.write_queries``, seeded, half of them drawn from a passage), top 10:

- **ours**: ``build_index`` of the corpus file under ``--max-memory`` (build time includes CorpusFile's offsets
  pass), then ``DiskBM25`` memory-mapped: batched queries/s with ``--threads`` threads (``search_ids``: ids and
  scores; and ``batch_search``: ``Hit``s with passages read from the corpus file), single-query p50/p99 (one
  thread). Warm: one untimed batched pass first, so the index is in the page cache.
- **Lucene**: ``IndexCollection`` (JsonCollection, ``-threads``, ``-pretokenized``) over the corpus tokenised by
  agentgym's tokenizer (so both systems index the same terms; writing that input is not timed), then a small Java
  class compiled here with ``javac`` against the jar: ``IndexSearcher`` with ``BM25Similarity(k1, b)``, no query
  cache, each query a BooleanQuery of SHOULD TermQuerys built inside the timed loop, the top 10's ``id`` field read;
  one untimed batched pass, then batched queries/s on ``--threads`` threads and single-query latencies. JVM start
  and index opening are not in the query figures (they are reported apart).
- **bm25s**: ``bm25s.BM25(k1, b, method="lucene", backend="numba")`` (its fastest back-end) over the same tokens
  (build = its tokenizer on the pretokenized text + ``index``), ``retrieve(n_threads=--threads)`` batched and one
  query at a time; at each size whose memory, extrapolated linearly from the largest peak RSS per passage measured
  so far (this run or an earlier one in ``--out``; before any, :data:`BM25S_BYTES_PER_PASSAGE`), fits in
  ``--bm25s-max-memory`` (default: 90% of MemAvailable), else skipped with the reason.

Ours ranks with ``--idf lucene`` by default (Lucene's idf; Lucene also drops BM25's constant ``k1 + 1`` and rounds
document lengths to one byte), so the overlap@10 between the systems measures only those scoring differences.
The table per size, the growth across sizes and the ratios against Lucene (measured in the same run) are printed;
``--out`` gets ``results.json`` (merged with earlier runs, keyed by size) and ``scale.png`` (queries/s and build
time against size).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOPK = 10
BM25S_BYTES_PER_PASSAGE = 4200
"""bm25s' peak RSS per passage over :data:`BASE_RSS`, measured at 1M synthetic passages (4,179 MiB in all): the
estimate until this run or an earlier one in ``--out`` has measured it at some size."""
BASE_RSS = 256 << 20
"""Bytes of a bm25s process before its index (interpreter, numpy, numba, bm25s), with margin."""
LUCENE_PARTS = 8  # Anserini indexes one input file per thread: several files so that every thread has work

JAVA_SOURCE = r"""
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.FSDirectory;

public class ScaleBench {
  static IndexSearcher searcher;
  static List<String> queries;
  static String[][] ids;
  static int k;

  static void one(int i) throws Exception {
    BooleanQuery.Builder b = new BooleanQuery.Builder();
    for (String tok : queries.get(i).split(" ")) {
      if (!tok.isEmpty()) b.add(new TermQuery(new Term("contents", tok)), BooleanClause.Occur.SHOULD);
    }
    TopDocs td = searcher.search(b.build(), k);
    StoredFields sf = searcher.storedFields();
    String[] r = new String[td.scoreDocs.length];
    for (int j = 0; j < r.length; j++) r[j] = sf.document(td.scoreDocs[j].doc).get("id");
    ids[i] = r;
  }

  static double batched(int threads) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    AtomicInteger next = new AtomicInteger();
    long t0 = System.nanoTime();
    List<Future<?>> fs = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      fs.add(pool.submit(() -> {
        for (int i = next.getAndIncrement(); i < queries.size(); i = next.getAndIncrement()) one(i);
        return null;
      }));
    }
    for (Future<?> f : fs) f.get();
    double s = (System.nanoTime() - t0) / 1e9;
    pool.shutdown();
    return s;
  }

  public static void main(String[] a) throws Exception {
    long t0 = System.nanoTime();
    searcher = new IndexSearcher(DirectoryReader.open(FSDirectory.open(Paths.get(a[0]))));
    searcher.setSimilarity(new BM25Similarity(Float.parseFloat(a[3]), Float.parseFloat(a[4])));
    searcher.setQueryCache(null);
    queries = Files.readAllLines(Paths.get(a[1]));
    k = Integer.parseInt(a[5]);
    int threads = Integer.parseInt(a[6]);
    int nSingle = Math.min(Integer.parseInt(a[7]), queries.size());
    ids = new String[queries.size()][];
    double open = (System.nanoTime() - t0) / 1e9;
    double warm = batched(threads);
    double batch = batched(threads);
    StringBuilder lat = new StringBuilder();
    for (int i = 0; i < nSingle; i++) {
      long s = System.nanoTime();
      one(i);
      lat.append(i == 0 ? "" : ",").append((System.nanoTime() - s) / 1e6);
    }
    StringBuilder out = new StringBuilder();
    for (String[] r : ids) out.append(String.join(" ", r)).append('\n');
    Files.writeString(Paths.get(a[2]), out.toString());
    System.out.println("{\"open_s\": " + open + ", \"warm_s\": " + warm + ", \"batched_s\": " + batch
        + ", \"lat_ms\": [" + lat + "]}");
  }
}
"""

# Child programs (``python -c``); each prints one JSON line last. argv: [1] a JSON object of arguments.
CHILD_PRELUDE = """\
import json, sys, time
import numpy as np
A = json.loads(sys.argv[1])
def pct(lat):
    lat = np.sort(np.asarray(lat, float))
    return (float(np.percentile(lat, 50)), float(np.percentile(lat, 99))) if lat.size else (float("nan"),) * 2
"""

OURS_BUILD = """\
from agentgym.tools.retrieval.bm25 import BM25Params
from agentgym.tools.retrieval.bm25_disk import build_index
from agentgym.tools.retrieval.corpus import CorpusFile
t0 = time.perf_counter()
with CorpusFile.open(A["corpus"], A["corpus_index"], progress=False) as c:
    t_open = time.perf_counter() - t0
    build_index(c, A["index"], params=BM25Params(k1=A["k1"], b=A["b"], idf=A["idf"]), max_memory=A["max_memory"],
                progress=False)
print(json.dumps({"build_s": time.perf_counter() - t0, "corpus_open_s": t_open}))
"""

OURS_SERVE = """\
from agentgym.tools.retrieval.bm25_disk import DiskBM25
from agentgym.tools.retrieval.corpus import CorpusFile
qs = [json.loads(line)["question"] for line in open(A["queries"], encoding="utf-8")]
t0 = time.perf_counter()
corpus = CorpusFile.open(A["corpus"], A["corpus_index"], progress=False)
r = DiskBM25(A["index"], corpus, n_threads=A["threads"])
t_open = time.perf_counter() - t0
r.search_ids(qs, A["k"])  # warm: page cache and workspaces
t0 = time.perf_counter(); res = r.search_ids(qs, A["k"]); t_ids = time.perf_counter() - t0
t0 = time.perf_counter(); r.batch_search(qs, A["k"]); t_hits = time.perf_counter() - t0
lat, lat_hits = [], []
for q in qs[: A["single"]]:
    t0 = time.perf_counter(); r.search_ids([q], A["k"]); lat.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter(); r.search(q, A["k"]); lat_hits.append((time.perf_counter() - t0) * 1e3)
with open(A["ids_out"], "w") as f:
    f.writelines(" ".join(map(str, ids.tolist())) + "\\n" for ids, _ in res)
p50, p99 = pct(lat); h50, h99 = pct(lat_hits)
print(json.dumps({"open_s": t_open, "qps": len(qs) / t_ids, "qps_hits": len(qs) / t_hits, "p50_ms": p50,
                  "p99_ms": p99, "p50_hits_ms": h50, "p99_hits_ms": h99}))
"""

PRETOKENIZE = """\
import os
from agentgym.tools.retrieval.bm25 import tokenize
from agentgym.tools.retrieval.corpus import CorpusFile
out = A["dir"]
with CorpusFile.open(A["corpus"], A["corpus_index"], progress=False) as c:
    n = len(c); parts = A["parts"]; per = -(-n // parts) if n else 1
    for p in range(parts):
        tmp = os.path.join(out, f".part{p:02d}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for batch in c.iter_batches(8192, start=min(n, p * per), stop=min(n, (p + 1) * per)):
                f.writelines(json.dumps({"id": d.id, "contents": " ".join(tokenize(d.contents))}) + "\\n"
                             for d in batch)
        os.replace(tmp, os.path.join(out, f"part{p:02d}.jsonl"))
qs = [json.loads(line)["question"] for line in open(A["queries"], encoding="utf-8")]
tmp = A["queries_out"] + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    f.writelines(" ".join(tokenize(q)) + "\\n" for q in qs)
os.replace(tmp, A["queries_out"])
print(json.dumps({"docs": n}))
"""

BM25S = """\
import glob
import bm25s
t0 = time.perf_counter()
texts, ids = [], []
for path in sorted(glob.glob(A["dir"] + "/part*.jsonl")):
    for line in open(path, encoding="utf-8"):
        row = json.loads(line); ids.append(row["id"]); texts.append(row["contents"])
t_read = time.perf_counter() - t0
t0 = time.perf_counter()
tok = bm25s.tokenize(texts, lower=False, token_pattern=r"\\S+", stopwords=None, show_progress=False)
del texts
r = bm25s.BM25(k1=A["k1"], b=A["b"], method="lucene", backend=A["backend"])
r.index(tok, show_progress=False)
del tok
t_build = time.perf_counter() - t0
qs = [line.split() or ["\\x00"] for line in open(A["queries"], encoding="utf-8").read().splitlines()]
k = A["k"]
def run(batch, n_threads):
    kk = min(k, len(ids))
    return r.retrieve(batch, k=kk, show_progress=False, n_threads=n_threads)
run(qs, A["threads"])  # warm
t0 = time.perf_counter(); docs, scores = run(qs, A["threads"]); t_batch = time.perf_counter() - t0
run(qs[:1], 1)  # warm: bm25s compiles its one-thread path on first use
lat = []
for q in qs[: A["single"]]:
    t0 = time.perf_counter(); run([q], 1); lat.append((time.perf_counter() - t0) * 1e3)
with open(A["ids_out"], "w") as f:
    for row_d, row_s in zip(docs.tolist(), scores.tolist()):
        f.write(" ".join(ids[d] for d, s in zip(row_d, row_s) if s > 0) + "\\n")
p50, p99 = pct(lat)
print(json.dumps({"read_s": t_read, "build_s": t_build, "qps": len(qs) / t_batch, "p50_ms": p50, "p99_ms": p99}))
"""


@dataclass
class Child:
    """What one subprocess did: its last stdout line as JSON, wall seconds and peak RSS (MiB)."""

    result: dict[str, Any]
    seconds: float
    maxrss_mb: float


def run_child(cmd: list[str], log: Path, cwd: Path | None = None) -> Child:
    """Run ``cmd`` to completion (stdout and stderr to ``log``); its own peak RSS from ``wait4``."""
    with open(log, "w", encoding="utf-8") as f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}); the end of {log}:\n{text[-3000:]}")
    result: dict[str, Any] = {}
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            break
    return Child(result, seconds, usage.ru_maxrss / 1024)


def bm25s_bytes_per_passage(rss_mb: float, n: int) -> float:
    """Peak RSS per passage over :data:`BASE_RSS` (the interpreter and libraries), so tiny sizes do not inflate it."""
    return max(rss_mb * 2**20 - BASE_RSS, 0.0) / n


def run_python(code: str, args: dict[str, Any], log: Path) -> Child:
    return run_child([sys.executable, "-c", CHILD_PRELUDE + code, json.dumps(args)], log, cwd=ROOT.parent)


def parse_size(text: str) -> int:
    """``"1M"`` -> 1000000, ``"5k"`` -> 5000, ``"3000"`` -> 3000 (decimal units: passages)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (use e.g. 3000, 5k, 1M)")
    n = int(float(m.group(1)) * {"": 1, "k": 1000, "m": 1_000_000}[m.group(2).lower()])
    if n < 1:
        raise argparse.ArgumentTypeError(f"size must be >= 1, got {text!r}")
    return n


def size_label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def read_ids(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def overlap(a: list[list[str]], b: list[list[str]]) -> float:
    """Mean over queries of |A & B| / max(|A|, |B|) of the two top-k id lists (queries with no hit in both: 1)."""
    vals = [len(set(x) & set(y)) / max(len(x), len(y)) if (x or y) else 1.0 for x, y in zip(a, b, strict=True)]
    return sum(vals) / len(vals) if vals else float("nan")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def load_info() -> str:
    try:
        return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "load average unknown"


def mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# ----------------------------------------------------------------------------------------------- stages


def ensure_data(work: Path, n: int, seed: int, n_queries: int) -> tuple[Path, Path]:
    """The corpus and queries of size ``n`` in ``work`` (generated once, atomically, then reused)."""
    corpus = work / f"corpus-{n}-seed{seed}.jsonl"
    queries = work / f"queries-{n_queries}-seed{seed}-of-{n}.jsonl"
    gen = [sys.executable, "-m", "agentgym.tools.retrieval.synthetic"]
    if not corpus.exists():
        say(f"{size_label(n)}: generating {corpus.name}")
        run_child([*gen, "corpus", str(corpus), "--passages", str(n), "--seed", str(seed), "--no-progress"],
                  work / "gen.log", cwd=ROOT.parent)  # fmt: skip
    if not queries.exists():
        run_child([*gen, "queries", str(queries), "--n", str(n_queries), "--seed", str(seed), "--passages", str(n),
                   "--corpus-seed", str(seed)], work / "gen.log", cwd=ROOT.parent)  # fmt: skip
    return corpus, queries


def ensure_pretokenized(work: Path, tag: str, corpus: Path, queries: Path, corpus_index: Path) -> tuple[Path, Path]:
    """Lucene's and bm25s' input: the corpus and queries tokenised by agentgym's tokenizer (made once)."""
    folder = work / f"pretok-{tag}"
    q_out = folder / f"{queries.stem}.txt"
    done = folder / "done"
    if not (done.exists() and q_out.exists() and done.read_text() == corpus.name):
        say(f"{tag}: writing the pretokenized corpus for Lucene and bm25s (not timed)")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        run_python(PRETOKENIZE, {"corpus": str(corpus), "corpus_index": str(corpus_index), "dir": str(folder),
                                 "parts": LUCENE_PARTS, "queries": str(queries), "queries_out": str(q_out)},
                   work / "pretok.log")  # fmt: skip
        done.write_text(corpus.name)
    return folder, q_out


def bench_ours(work: Path, tag: str, corpus: Path, queries: Path, corpus_index: Path, a: argparse.Namespace) -> dict:
    index = work / f"ours-{tag}"
    shutil.rmtree(index, ignore_errors=True)
    say(f"{tag}: ours: build (max memory {a.max_memory / 2**30:.1f} GiB)")
    common = {"corpus": str(corpus), "corpus_index": str(corpus_index), "index": str(index)}
    b = run_python(OURS_BUILD, {**common, "k1": a.k1, "b": a.b, "idf": a.idf, "max_memory": a.max_memory},
                   work / "ours-build.log")  # fmt: skip
    res = {"build_s": b.seconds, "build_rss_mb": b.maxrss_mb, "index_mb": dir_mb(index)}
    say(f"{tag}: ours: built in {b.seconds:.1f} s, peak RSS {b.maxrss_mb:,.0f} MiB, {res['index_mb']:,.0f} MiB; "
        "serving")  # fmt: skip
    s = run_python(OURS_SERVE, {**common, "queries": str(queries), "k": TOPK, "threads": a.threads,
                                "single": a.single, "ids_out": str(work / f"ids-ours-{tag}.txt")},
                   work / "ours-serve.log")  # fmt: skip
    res.update(s.result, serve_rss_mb=s.maxrss_mb)
    if not a.keep_indexes:
        shutil.rmtree(index, ignore_errors=True)
    return res


def bench_lucene(work: Path, tag: str, pretok: Path, q_tok: Path, a: argparse.Namespace) -> dict:
    jar = str(a.anserini_jar)
    classes = work / "java"
    if not (classes / "ScaleBench.class").exists():
        classes.mkdir(exist_ok=True)
        (classes / "ScaleBench.java").write_text(JAVA_SOURCE, encoding="utf-8")
        run_child(["javac", "-cp", jar, "-d", str(classes), str(classes / "ScaleBench.java")], work / "javac.log")
    index = work / f"lucene-{tag}"
    shutil.rmtree(index, ignore_errors=True)
    say(f"{tag}: Lucene: IndexCollection, {a.threads} threads, pretokenized")
    b = run_child(["java", "-cp", jar, "io.anserini.index.IndexCollection", "-collection", "JsonCollection",
                   "-input", str(pretok), "-index", str(index), "-generator", "DefaultLuceneDocumentGenerator",
                   "-threads", str(a.threads), "-pretokenized", "-quiet"], work / "lucene-build.log")  # fmt: skip
    res = {"build_s": b.seconds, "build_rss_mb": b.maxrss_mb, "index_mb": dir_mb(index)}
    say(f"{tag}: Lucene: built in {b.seconds:.1f} s, peak RSS {b.maxrss_mb:,.0f} MiB, {res['index_mb']:,.0f} MiB; "
        "serving")  # fmt: skip
    ids_out = work / f"ids-lucene-{tag}.txt"
    cmd = ["java", "-cp", f"{jar}{os.pathsep}{classes}", "ScaleBench", str(index), str(q_tok), str(ids_out),
           str(a.k1), str(a.b), str(TOPK), str(a.threads), str(a.single)]  # fmt: skip
    s = run_child(cmd, work / "lucene-serve.log")
    n_q = len(q_tok.read_text(encoding="utf-8").splitlines())
    lat = sorted(s.result["lat_ms"])
    res.update(open_s=s.result["open_s"], qps=n_q / s.result["batched_s"], serve_rss_mb=s.maxrss_mb,
               p50_ms=percentile(lat, 50), p99_ms=percentile(lat, 99))  # fmt: skip
    if not a.keep_indexes:
        shutil.rmtree(index, ignore_errors=True)
    return res


def percentile(sorted_vals: list[float], q: float) -> float:
    """numpy's default (linear) percentile of an ascending list."""
    if not sorted_vals:
        return float("nan")
    pos = (len(sorted_vals) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def bench_bm25s(work: Path, tag: str, pretok: Path, q_tok: Path, a: argparse.Namespace) -> dict:
    say(f"{tag}: bm25s: read, tokenize, index, retrieve")
    c = run_python(BM25S, {"dir": str(pretok), "queries": str(q_tok), "k": TOPK, "k1": a.k1, "b": a.b,
                           "backend": a.bm25s_backend,
                           "threads": a.threads, "single": a.single, "ids_out": str(work / f"ids-bm25s-{tag}.txt")},
                   work / "bm25s.log")  # fmt: skip
    return {**c.result, "rss_mb": c.maxrss_mb}


# ----------------------------------------------------------------------------------------------- report


def print_size(n: int, r: dict[str, Any]) -> None:
    print(f"\n### {size_label(n)} passages ({r['corpus_mb']:,.0f} MB corpus, {r['queries']:,} queries, top {TOPK}; "
          f"{r['load']})\n")  # fmt: skip
    print("| system | build s | build peak RSS MiB | index MiB | batched q/s | p50 ms | p99 ms | serve peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in r["systems"].items():
        if "skipped" in s:
            print(f"| {name} | skipped: {s['skipped']} |||||||")
            continue
        build_rss = s.get("build_rss_mb", s.get("rss_mb", float("nan")))
        serve_rss = s.get("serve_rss_mb", s.get("rss_mb", float("nan")))
        index = f"{s['index_mb']:,.0f}" if "index_mb" in s else "in RAM"
        print(f"| {name} | {s['build_s']:.1f} | {build_rss:,.0f} | {index} | {s['qps']:,.1f} | {s['p50_ms']:.2f} | "
              f"{s['p99_ms']:.2f} | {serve_rss:,.0f} |")  # fmt: skip
    ours = r["systems"].get("ours", {})
    if "qps_hits" in ours:
        print(f"\nours with Hits (passages read from the corpus file): {ours['qps_hits']:,.1f} q/s batched, "
              f"p50 {ours['p50_hits_ms']:.2f} ms, p99 {ours['p99_hits_ms']:.2f} ms")  # fmt: skip
    for key, val in r.get("ratios", {}).items():
        print(f"{key}: {val:.2f}")
    for key, val in r.get("overlap", {}).items():
        print(f"overlap@{TOPK} {key}: {val:.3f}")


def ratios(systems: dict[str, dict[str, Any]]) -> dict[str, float]:
    ours, luc = systems.get("ours"), systems.get("lucene")
    if not ours or not luc or "skipped" in luc:
        return {}
    return {
        "ours/Lucene batched q/s": ours["qps"] / luc["qps"],
        "Lucene/ours p50 latency": luc["p50_ms"] / ours["p50_ms"],
        "Lucene/ours build time": luc["build_s"] / ours["build_s"],
        "ours/Lucene index size": ours["index_mb"] / luc["index_mb"],
    }


def print_growth(results: dict[str, Any]) -> None:
    sizes = sorted(results["sizes"], key=int)
    if len(sizes) < 2:
        return
    print("\n### growth across sizes\n")
    print("| system | metric | " + " | ".join(size_label(int(s)) for s in sizes) + " |")
    print("|---|---|" + "---:|" * len(sizes))
    names = dict.fromkeys(name for s in sizes for name in results["sizes"][s]["systems"])
    for name in names:
        for metric in ("build_s", "qps", "p50_ms", "index_mb"):
            cells = []
            for s in sizes:
                v = results["sizes"][s]["systems"].get(name, {}).get(metric)
                cells.append(f"{v:,.1f}" if isinstance(v, int | float) else "-")
            print(f"| {name} | {metric} | " + " | ".join(cells) + " |")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results["sizes"], key=int)
    names = dict.fromkeys(name for s in sizes for name in results["sizes"][s]["systems"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in ((axes[0], "qps", "batched queries/s"), (axes[1], "build_s", "build seconds")):
        for name in names:
            pts = [(int(s), results["sizes"][s]["systems"].get(name, {}).get(metric)) for s in sizes]
            pts = [(x, y) for x, y in pts if isinstance(y, int | float)]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("passages")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("BM25 at scale (synthetic wiki-18-shaped corpora)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    from agentgym.tools.retrieval.base import parse_size as parse_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,5M,21M", help="comma-separated passage counts (3000, 5k, 1M)")
    parser.add_argument("--work", type=Path, required=True, help="corpora, inputs and indexes (reused across runs)")
    parser.add_argument("--out", type=Path, required=True, help="results.json and scale.png go here")
    parser.add_argument("--anserini-jar", type=Path, default=None, help="Anserini 0.22.1 fat jar (see the docstring)")
    parser.add_argument("--systems", default="ours,lucene,bm25s")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--single", type=int, default=500, help="queries timed one at a time (p50/p99)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-memory", type=parse_bytes, default=parse_bytes("8G"), help="ours' build budget")
    parser.add_argument("--bm25s-max-memory", type=parse_bytes, default=None,
                        help="skip bm25s where its extrapolated peak RSS exceeds this (default: 90%% of "
                        "MemAvailable)")  # fmt: skip
    parser.add_argument("--bm25s-backend", default="numba", choices=["numba", "numpy"],
                        help="bm25s' back-end (numba: its fastest, compiles ~30 s a process)")  # fmt: skip
    parser.add_argument("--k1", type=float, default=1.5)
    parser.add_argument("--b", type=float, default=0.75)
    parser.add_argument("--idf", default="lucene", choices=["lucene", "okapi"], help="ours' idf (Lucene's: lucene)")
    parser.add_argument("--keep-indexes", action="store_true", help="keep the built indexes in --work")
    a = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in a.sizes.split(",")]
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    if unknown := set(systems) - {"ours", "lucene", "bm25s"}:
        parser.error(f"unknown systems {sorted(unknown)}")
    if "lucene" in systems and a.anserini_jar is None:
        parser.error("--anserini-jar is needed for lucene (or leave lucene out of --systems)")
    if a.anserini_jar is not None and not a.anserini_jar.is_file():
        parser.error(f"{a.anserini_jar}: no such file")
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    out_json = a.out / "results.json"
    results: dict[str, Any] = {"sizes": {}}
    if out_json.exists():
        results = json.loads(out_json.read_text(encoding="utf-8"))
    results["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    # bytes of bm25s' peak RSS per passage: the largest seen at any size run so far (this run or earlier ones)
    ran = [e["systems"].get("bm25s", {}) for e in results["sizes"].values()]
    per_doc = [bm25s_bytes_per_passage(s["rss_mb"], int(n)) for n, s in zip(results["sizes"], ran, strict=True)
               if "rss_mb" in s]  # fmt: skip
    bm25s_per_doc = max(per_doc) if per_doc else float(BM25S_BYTES_PER_PASSAGE)
    for n in sizes:
        tag = size_label(n)
        corpus, queries = ensure_data(a.work, n, a.seed, a.queries)
        corpus_index = a.work / f"{corpus.stem}.offsets"
        entry: dict[str, Any] = {"corpus_mb": corpus.stat().st_size / 2**20, "queries": a.queries,
                                 "load": load_info(), "systems": {}, "threads": a.threads, "idf_ours": a.idf,
                                 "k1": a.k1, "b": a.b, "date": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
        say(f"{tag}: {entry['corpus_mb']:,.0f} MB corpus; {entry['load']}")
        ids: dict[str, list[list[str]]] = {}
        if "ours" in systems:
            entry["systems"]["ours"] = bench_ours(a.work, tag, corpus, queries, corpus_index, a)
            ids["ours"] = read_ids(a.work / f"ids-ours-{tag}.txt")
        if "lucene" in systems or "bm25s" in systems:
            pretok, q_tok = ensure_pretokenized(a.work, tag, corpus, queries, corpus_index)
        if "lucene" in systems:
            entry["systems"]["lucene"] = bench_lucene(a.work, tag, pretok, q_tok, a)
            ids["lucene"] = read_ids(a.work / f"ids-lucene-{tag}.txt")
        if "bm25s" in systems:
            limit = a.bm25s_max_memory or int(0.9 * mem_available())
            need = BASE_RSS + bm25s_per_doc * n
            if need > limit:
                reason = (f"needs ~{need / 2**30:.1f} GiB ({bm25s_per_doc:,.0f} B of RSS per passage x {n:,} + base), "
                          f"over {limit / 2**30:.1f} GiB")  # fmt: skip
                say(f"{tag}: bm25s skipped: {reason}")
                entry["systems"]["bm25s"] = {"skipped": reason}
            else:
                try:
                    entry["systems"]["bm25s"] = s = bench_bm25s(a.work, tag, pretok, q_tok, a)
                except RuntimeError as e:  # killed for memory, most likely: say so and go on
                    say(f"{tag}: bm25s failed: {str(e).splitlines()[0]}")
                    entry["systems"]["bm25s"] = {"skipped": f"failed: {str(e).splitlines()[0]}"}
                else:
                    per_doc.append(bm25s_bytes_per_passage(s["rss_mb"], n))
                    bm25s_per_doc = max(per_doc)
                    ids["bm25s"] = read_ids(a.work / f"ids-bm25s-{tag}.txt")
        names = list(ids)
        entry["overlap"] = {f"{x} vs {y}": overlap(ids[x], ids[y]) for i, x in enumerate(names) for y in names[i + 1 :]}
        entry["ratios"] = ratios(entry["systems"])
        entry["load_after"] = load_info()
        results["sizes"][str(n)] = entry
        out_json.write_text(json.dumps(results, indent=1), encoding="utf-8")
        print_size(n, entry)
    print_growth(results)
    plot(results, a.out / "scale.png")
    say(f"wrote {out_json} and {a.out / 'scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
