"""In-memory BM25Retriever at scale: the kernel before the window path (bm25.py of commit e367176~1) against the
current one, on the same index in the same process, 2 threads, one warm pass then one timed pass per query set; the
ids and scores are compared. WORK is bench_bm25_common_terms.py's ``--work`` after a ``--corpus wiki`` run::

    git show e367176~1:tools/retrieval/bm25.py > /tmp/bm25_old.py
    python bench/results/bm25_common_terms/mem_before_after.py WORK/wiki-2000000-seed0.jsonl \\
        WORK/queries-200-seed0-of-wiki-2M.json okapi /tmp/bm25_old.py
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

from agentgym.tools.retrieval import bm25 as new
from agentgym.tools.retrieval.corpus import CorpusFile


def main(corpus_path: str, queries_path: str, idf: str, old_path: str) -> None:
    spec = importlib.util.spec_from_file_location("agentgym.tools.retrieval.bm25_old", old_path)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)
    with CorpusFile.open(corpus_path, None, progress=False) as c:
        docs = [d for batch in c.iter_batches(65536) for d in batch]
    t0 = time.perf_counter()
    after = new.BM25Retriever(docs, idf=idf, n_threads=2)
    print("build", round(time.perf_counter() - t0, 1), flush=True)
    fields = ("vocab", "indptr", "post_docs", "post_imp", "doc_len", "n_docs")
    index = old._FastIndex(**{f: getattr(after._fast, f) for f in fields})
    before = old.BM25Retriever(docs, idf=idf, n_threads=2, _index=index)
    res = {}
    for name, qs in json.loads(Path(queries_path).read_text(encoding="utf-8")).items():
        got = {}
        for label, r in (("before", before), ("after", after)):
            r.search_ids(qs, 10)  # warm
            t0 = time.perf_counter()
            hits = r.search_ids(qs, 10)
            got[label] = (hits, len(qs) / (time.perf_counter() - t0))
        same = all(
            np.array_equal(a[0], b[0]) and a[1].tobytes() == b[1].tobytes()
            for a, b in zip(got["before"][0], got["after"][0], strict=True)
        )
        res[name] = {"before_qps": got["before"][1], "after_qps": got["after"][1], "identical": same}
        print(name, idf, f"before {got['before'][1]:.1f} q/s, after {got['after'][1]:.1f} q/s, identical {same}")
    print(json.dumps(res))


if __name__ == "__main__":
    main(*sys.argv[1:5])
