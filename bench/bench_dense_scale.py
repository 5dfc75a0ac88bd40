"""Dense retrieval at scale: a memory-mapped flat index vs its IVF-PQ conversion, in bounded memory.

Synthetic unit vectors with neighbourhood structure: ``--clusters`` centres drawn from a Gaussian, each vector a
centre plus Gaussian noise (``--noise`` relative to the centre's norm), normalised; queries are database vectors
plus more noise, so their true neighbours are the vectors of their cluster. The vectors go to an ``(N, d)`` .npy, then
to a flat ``IndexFlatIP`` file (``build_flat_index``; the .npy is deleted), which is converted to IVF-PQ by
``convert_index`` in a child process whose peak RSS (``VmHWM`` after ``/proc/self/clear_refs``: imports not counted,
and the absolute peak) is compared with the flat file's size. Then, in this process: recall@10 of the compressed
index against the flat one on ``--queries`` queries, batched queries/s (``--threads`` faiss threads) and single-query
p50/p99 for both (flat: memory-mapped with ``IO_FLAG_MMAP_IFC``, its pages warmed by the batched pass).

    python bench/bench_dense_scale.py --n 2000000 --d 384 --workdir /tmp/dense_bench
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.tools.retrieval.base import parse_size

_CONVERT = """
import json, sys
from agentgym.tools.retrieval.dense_index import convert_index
import faiss
faiss.omp_set_num_threads(int(sys.argv[6]))

def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))

base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := current RSS
info = convert_index(sys.argv[1], sys.argv[2], nlist=int(sys.argv[3]), m=int(sys.argv[4]), train_size=int(sys.argv[5]),
                     max_memory=int(sys.argv[7]), progress=False)
info["peak_rss"] = status("VmHWM")
info["base_rss"] = base
print(json.dumps(info))
"""


def rss_anon() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon"))


def generate(path: Path, n: int, d: int, clusters: int, noise: float, seed: int, chunk: int = 100_000) -> np.ndarray:
    """Write the database to ``path`` (.npy) chunk by chunk; return the centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for a in range(0, n, chunk):
        r = np.random.default_rng([seed, a])
        b = min(a + chunk, n)
        x = centres[r.integers(0, clusters, b - a)] + (noise / np.sqrt(d)) * r.standard_normal((b - a, d), np.float32)
        out[a:b] = x / np.linalg.norm(x, axis=1, keepdims=True)
    out.flush()
    del out
    return centres


def queries_from(flat_index, n_queries: int, d: int, noise: float, seed: int) -> np.ndarray:
    r = np.random.default_rng([seed, 1])
    rows = r.choice(flat_index.ntotal, n_queries, replace=False)
    base = np.stack([flat_index.reconstruct(int(i)) for i in rows])
    q = base + (noise / np.sqrt(d)) * r.standard_normal(base.shape, np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def timed_search(index, q: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    t = time.perf_counter()
    _, ids = index.search(q, k)
    return ids, time.perf_counter() - t


def single_latencies(index, q: np.ndarray, k: int) -> np.ndarray:
    out = []
    for row in q:
        t = time.perf_counter()
        index.search(row[None], k)
        out.append(time.perf_counter() - t)
    return np.array(out) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--d", type=int, default=384)
    p.add_argument("--clusters", type=int, default=20_000)
    p.add_argument("--noise", type=float, default=0.6, help="noise norm relative to a centre (database)")
    p.add_argument("--query-noise", type=float, default=0.3)
    p.add_argument("--nlist", type=int, default=1024)
    p.add_argument("--m", type=int, default=48)
    p.add_argument("--train-size", type=int, default=50_000)
    p.add_argument("--nprobe", type=int, nargs="+", default=[16, 64])
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--single", type=int, default=50, help="single queries timed per index")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--k-factor", type=int, default=8, help="IndexRefine: candidates per hit re-ranked exactly")
    p.add_argument("--max-memory", type=parse_size, default="1G", help="conversion memory budget (e.g. 1G)")
    p.add_argument("--workdir", default="/tmp/dense_bench")
    p.add_argument("--keep", action="store_true", help="keep the index files")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()

    import faiss

    from agentgym.tools.retrieval.dense_index import build_flat_index, open_index

    faiss.omp_set_num_threads(args.threads)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"n": args.n, "d": args.d, "clusters": args.clusters, "load_before": os.getloadavg()}
    t = time.perf_counter()
    generate(work / "v.npy", args.n, args.d, args.clusters, args.noise, seed=0)
    res["generate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    build_flat_index(work / "v.npy", work / "flat.index", progress=False)
    res["flat_write_s"] = time.perf_counter() - t
    (work / "v.npy").unlink()
    flat_size = (work / "flat.index").stat().st_size
    res["flat_bytes"] = flat_size
    print(f"flat index: {flat_size / 2**30:.2f} GiB written in {res['flat_write_s']:.0f}s", flush=True)

    t = time.perf_counter()
    cmd = [sys.executable, "-c", _CONVERT, str(work / "flat.index"), str(work / "ivfpq.index"), str(args.nlist)]
    cmd += [str(args.m), str(args.train_size), str(args.threads), str(args.max_memory)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        print(out.stderr[-3000:], file=sys.stderr)
        return 1
    conv = json.loads(out.stdout.strip().splitlines()[-1])
    conv["wall_s"] = time.perf_counter() - t
    res["convert"] = conv
    res["ivfpq_bytes"] = (work / "ivfpq.index").stat().st_size
    print(f"converted in {conv['wall_s']:.0f}s: {json.dumps(conv['seconds'])}", flush=True)

    before = rss_anon()
    flat = open_index(work / "flat.index", mmap=True)
    q = queries_from(flat, args.queries, args.d, args.query_noise, seed=0)
    ref, flat_s = timed_search(flat, q, 10)
    res["flat_rss_anon_after_search"] = rss_anon() - before
    res["flat_qps"] = args.queries / flat_s
    lat = single_latencies(flat, q[: args.single], 10)
    res["flat_p50_ms"], res["flat_p99_ms"] = float(np.percentile(lat, 50)), float(np.percentile(lat, 99))
    print(f"flat: {res['flat_qps']:.1f} q/s, p50 {res['flat_p50_ms']:.0f} ms", flush=True)

    before = rss_anon()
    pq = open_index(work / "ivfpq.index", mmap=True)
    res["ivfpq_rss_anon_after_open"] = rss_anon() - before

    def sweep(index: Any) -> dict[int, dict[str, float]]:
        """recall@10 against the flat index, batched q/s and single-query latencies at each nprobe."""
        out = {}
        for nprobe in args.nprobe:
            faiss.extract_index_ivf(pq).nprobe = nprobe
            got, s = timed_search(index, q, 10)
            recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref, strict=True)]))
            lat = single_latencies(index, q[: max(args.single, 200)], 10)
            p50, p99 = (float(np.percentile(lat, x)) for x in (50, 99))
            out[nprobe] = {"recall@10": recall, "qps": args.queries / s, "p50_ms": p50, "p99_ms": p99}
        return out

    res["ivfpq"] = sweep(pq)
    # IVF-PQ candidates re-ranked with the exact vectors of the memory-mapped flat file (reads k * k_factor rows)
    refine = faiss.IndexRefine(pq, flat)
    refine.k_factor = args.k_factor
    res["refine"] = sweep(refine)
    res["load_after"] = os.getloadavg()

    gib = 2**30
    print()
    print(f"N={args.n:,} d={args.d} ({args.clusters:,} clusters), {args.threads} faiss threads, load before/after "
          f"{res['load_before'][0]:.1f}/{res['load_after'][0]:.1f}")  # fmt: skip
    print(f"conversion IVF{args.nlist},PQ{args.m}x8 (train {conv['train_size']:,}): {conv['wall_s']:.0f} s; peak RSS "
          f"{conv['peak_rss'] / gib:.2f} GiB ({(conv['peak_rss'] - conv['base_rss']) / gib:.2f} GiB above the "
          f"interpreter) vs flat file {flat_size / gib:.2f} GiB = {conv['peak_rss'] / flat_size:.1%}; estimate "
          f"{conv['memory_estimate'] / gib:.2f} GiB; index file {res['ivfpq_bytes'] / gib:.3f} GiB")  # fmt: skip
    print(f"{'index':<22}{'recall@10':>10}{'q/s':>10}{'x flat':>8}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'flat (mmap)':<22}{1.0:>10.3f}{res['flat_qps']:>10.1f}{1.0:>8.1f}{res['flat_p50_ms']:>10.1f}"
          f"{res['flat_p99_ms']:>10.1f}")  # fmt: skip
    for nprobe, r in res["ivfpq"].items():
        print(f"{f'ivfpq nprobe={nprobe}':<22}{r['recall@10']:>10.3f}{r['qps']:>10.1f}"
              f"{r['qps'] / res['flat_qps']:>8.1f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}")  # fmt: skip
    for nprobe, r in res["refine"].items():
        print(f"{f'+refine x{args.k_factor} np={nprobe}':<22}{r['recall@10']:>10.3f}{r['qps']:>10.1f}"
              f"{r['qps'] / res['flat_qps']:>8.1f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}")  # fmt: skip
    mib = 2**20
    grew_flat, grew_pq = res["flat_rss_anon_after_search"] / mib, res["ivfpq_rss_anon_after_open"] / mib
    print(f"flat served memory-mapped: heap (RssAnon) grew {grew_flat:.0f} MiB after a search over all "
          f"{flat_size / gib:.2f} GiB; opening ivfpq grew it {grew_pq:.0f} MiB")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    if not args.keep:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
