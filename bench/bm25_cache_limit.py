"""``DiskBM25`` when its index does not fit in the page cache: the same queries with a warm cache and with the
process's memory (page cache included) capped below the index size.

Run by hand, as root on Linux (it creates a memory cgroup, v1 or v2), on an index a build left, e.g. the one
``bench/searchqa_at_scale.py --keep`` keeps::

    python bench/bm25_cache_limit.py --corpus /data/sqa21m/corpus.jsonl --index-dir /data/sqa21m/index \\
        --corpus-index-dir /data/sqa21m/index/corpus --queries queries.jsonl --limit 1G

Each setting runs in a fresh child process: first the index files' pages are dropped from the page cache
(``posix_fadvise(DONTNEED)``), then the child opens the index (which reads every block once) and times ``--n``
queries one at a time and then in one batch over ``--threads`` threads. Reported per setting: queries/s, p50/p99,
major page faults per query (reads from disk) and the ratio of the capped to the warm queries/s. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

_CHILD = """
import json, resource, sys, time
import numpy as np
from agentgym.tools.retrieval.bm25_disk import DiskBM25
from agentgym.tools.retrieval.corpus import CorpusFile

corpus_path, index_dir, corpus_index_dir, queries_path, n, threads = sys.argv[1:7]
queries = [json.loads(line)["question"] for line in open(queries_path, encoding="utf-8")][: int(n)]
corpus = CorpusFile.open(corpus_path, corpus_index_dir, progress=False)
t0 = time.perf_counter()
disk = DiskBM25(index_dir, corpus, n_threads=int(threads))
opened = time.perf_counter() - t0
faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
lat = []
for q in queries:
    t = time.perf_counter()
    disk.search_ids([q], 10)
    lat.append(time.perf_counter() - t)
single_faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults0
t = time.perf_counter()
disk.search_ids(queries, 10)
batched = time.perf_counter() - t
lat_ms = np.array(lat) * 1e3
print(json.dumps({"open_s": round(opened, 2), "single_qps": round(len(queries) / sum(lat), 1),
                  "p50_ms": round(float(np.median(lat_ms)), 2), "p99_ms": round(float(np.quantile(lat_ms, 0.99)), 2),
                  "batched_qps": round(len(queries) / batched, 1),
                  "major_faults_per_query": round(single_faults / len(queries), 2)}))
"""


def _cgroup(name: str, limit: int) -> tuple[Path, Path]:
    """A memory cgroup capped at ``limit`` bytes (v2 if mounted, else v1): (its folder, its procs file)."""
    for root, knob in ((Path("/sys/fs/cgroup/unified"), "memory.max"), (Path("/sys/fs/cgroup"), "memory.max"),
                       (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes")):  # fmt: skip
        if (root / "cgroup.procs").exists() and ((root / "cgroup.controllers").exists() or knob.endswith("bytes")):
            folder = root / name
            try:
                folder.mkdir(exist_ok=True)
                (folder / knob).write_text(str(limit))
                return folder, folder / "cgroup.procs"
            except OSError:
                continue
    raise SystemExit("no writable memory cgroup here (run as root on Linux)")


def _drop(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _run(args: argparse.Namespace, procs: Path | None) -> dict[str, Any]:
    files = sorted(Path(args.index_dir).glob("*.npy"))
    _drop(files)
    cmd = [sys.executable, "-c", _CHILD, args.corpus, args.index_dir, args.corpus_index_dir, args.queries, str(args.n),
           str(args.threads)]  # fmt: skip

    def enter() -> None:  # in the child, before exec: join the cgroup
        if procs is not None:
            procs.write_text(str(os.getpid()))

    out = subprocess.run(cmd, check=True, capture_output=True, text=True, preexec_fn=enter).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--index-dir", required=True)
    p.add_argument("--corpus-index-dir", required=True)
    p.add_argument("--queries", required=True, help="JSONL with a 'question' per line")
    p.add_argument("--limit", default="1G", help="memory cap of the capped run (page cache included)")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    from agentgym.tools.retrieval.base import parse_size

    limit = parse_size(args.limit)
    index_bytes = sum(f.stat().st_size for f in Path(args.index_dir).glob("*.npy"))
    warm = _run(args, None)
    warm = _run(args, None)  # the first run only brought the corpus offsets and the kernels' cache in
    folder, procs = _cgroup(f"agentgym-bm25-{os.getpid()}", limit)
    try:
        capped = _run(args, procs)
    finally:
        folder.rmdir()
    report = {
        "index_bytes": index_bytes,
        "limit_bytes": limit,
        "load_avg": os.getloadavg(),
        "warm": warm,
        "capped": capped,
        "capped_over_warm_single_qps": round(capped["single_qps"] / warm["single_qps"], 3),
        "capped_over_warm_batched_qps": round(capped["batched_qps"] / warm["batched_qps"], 3),
        "self_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
