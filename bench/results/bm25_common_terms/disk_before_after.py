"""DiskBM25 at scale: the search kernel before the window path (postings.py of commit e367176~1) against the current
one, on the same index in the same process, 2 threads, one warm pass then one timed pass per query set (the first
``N`` queries of each); the ids and scores are compared. WORK is bench_bm25_common_terms.py's ``--work``::

    git show e367176~1:tools/retrieval/postings.py > /tmp/postings_old.py
    python bench/results/bm25_common_terms/disk_before_after.py WORK/wiki-2000000-seed0.jsonl \\
        WORK/wiki-2000000.offsets WORK/ours-wiki-2M-okapi WORK/queries-200-seed0-of-wiki-2M.json \\
        /tmp/postings_old.py 100
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

from agentgym.tools.retrieval import bm25_disk
from agentgym.tools.retrieval.bm25_disk import DiskBM25
from agentgym.tools.retrieval.corpus import CorpusFile


def main(corpus: str, offsets: str, index: str, queries: str, old_path: str, n: str) -> None:
    spec = importlib.util.spec_from_file_location("agentgym.tools.retrieval.postings_old", old_path)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)
    kernels = {"before": old.search_range, "after": bm25_disk.search_range}
    with CorpusFile.open(corpus, offsets, progress=False) as c:
        r = DiskBM25(index, c, n_threads=2)
        res = {}
        for name, qs in json.loads(Path(queries).read_text(encoding="utf-8")).items():
            qs = qs[: int(n)]
            got = {}
            for label, kernel in kernels.items():
                bm25_disk.search_range = kernel  # DiskBM25 looks the kernel up here at each search
                r.search_ids(qs, 10)  # warm
                t0 = time.perf_counter()
                hits = r.search_ids(qs, 10)
                got[label] = (hits, len(qs) / (time.perf_counter() - t0))
            same = all(
                np.array_equal(a[0], b[0]) and a[1].tobytes() == b[1].tobytes()
                for a, b in zip(got["before"][0], got["after"][0], strict=True)
            )
            res[name] = {"before_qps": got["before"][1], "after_qps": got["after"][1], "identical": same}
            print(f"{Path(index).name} {name}: before {got['before'][1]:.1f} q/s, after {got['after'][1]:.1f} q/s, "
                  f"identical {same}", flush=True)  # fmt: skip
    print(json.dumps({Path(index).name: res}))


if __name__ == "__main__":
    main(*sys.argv[1:7])
