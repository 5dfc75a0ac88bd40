"""Corpus access benchmark: ``CorpusFile`` (an offsets index, rows read on demand) against reading the corpus into
memory (``load_corpus``, what SearchQA's retrievers do), on a synthetic wiki-18-shaped corpus made in the same run.

Run by hand::

    python bench/bench_corpus.py --passages 1000000          # about 2 minutes and 1.5 GB on the 2-core machine

Each measurement runs in a fresh subprocess, so its peak RSS (``ru_maxrss``) is its own: generating the corpus,
building the offsets index, reopening it from its saved folder, random reads by row and by id, and the in-memory
load. The table prints the ratios of time and of peak-RSS growth over the interpreter's baseline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

#: name -> the code measured (``path``, ``index`` and ``n`` are defined; it sets ``items``: the work done).
CASES = {
    "baseline (interpreter + imports)": "items = 0",
    "CorpusFile: build the offsets index": "c = CorpusFile.open(path, index, progress=False); items = len(c)",
    "CorpusFile: reopen the saved index": "c = CorpusFile.open(path, index, progress=False); items = 1",
    "CorpusFile: 200k random rows": textwrap.dedent("""\
        c = CorpusFile.open(path, index, progress=False)
        rows = np.random.default_rng(0).integers(0, len(c), 200_000)
        t0 = time.perf_counter()
        for i in rows:
            c[int(i)]
        items = len(rows)"""),
    "CorpusFile: 200k random ids (the id strings included)": textwrap.dedent("""\
        c = CorpusFile.open(path, index, progress=False)
        ids = [str(i) for i in np.random.default_rng(0).integers(0, len(c), 200_000)]
        t0 = time.perf_counter()
        for i in ids:
            c.get(i)
        items = len(ids)"""),
    "in memory: load_corpus": "docs = load_corpus(path); items = len(docs)",
}

PRELUDE = """\
import json, resource, sys, time
import numpy as np
from agentgym.envs.search_qa.flashrag import load_corpus
from agentgym.tools.retrieval.corpus import CorpusFile
path, index = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
"""
POSTLUDE = """
seconds = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "items": items, "maxrss_mb": rss}))
"""


def measure(code: str, path: Path, index: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PRELUDE + code + POSTLUDE, str(path), str(index)], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="where the corpus and its index go (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.passages < 1:
        parser.error("--passages must be >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        root.mkdir(parents=True, exist_ok=True)
        path, index = root / "corpus.jsonl", root / "index"
        gen = measure(f"from agentgym.tools.retrieval.synthetic import write_corpus\n"
                      f"write_corpus(path, {args.passages}, {args.seed}, progress=False); items = {args.passages}",
                      path, index)  # fmt: skip
        size_mb = path.stat().st_size / 2**20
        results = {name: measure(code, path, index) for name, code in CASES.items()}
    base = results.pop("baseline (interpreter + imports)")
    memory = results["in memory: load_corpus"]
    print(f"corpus: {args.passages:,} synthetic passages, {size_mb:,.0f} MB; generated in {gen['seconds']:.1f} s "
          f"({args.passages / gen['seconds']:,.0f} passages/s)\n")  # fmt: skip
    print("| step | seconds | items/s | peak RSS over baseline | RSS per passage |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        grown = max(r["maxrss_mb"] - base["maxrss_mb"], 0.0)
        rate = f"{r['items'] / r['seconds']:,.0f}" if r["items"] > 1 else "-"
        print(f"| {name} | {r['seconds']:.2f} | {rate} | {grown:,.0f} MB | "
              f"{grown * 2**20 / args.passages:.1f} B |")  # fmt: skip
    build = results["CorpusFile: build the offsets index"]
    ratio_t = memory["seconds"] / build["seconds"]
    ratio_m = (memory["maxrss_mb"] - base["maxrss_mb"]) / max(build["maxrss_mb"] - base["maxrss_mb"], 1e-9)
    print(f"\nin-memory load / CorpusFile build: {ratio_t:.1f}x the time, {ratio_m:.1f}x the memory")


if __name__ == "__main__":
    main()
