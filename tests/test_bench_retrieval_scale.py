"""bench/bench_retrieval_scale.py end to end at a tiny size (3,000 synthetic passages): the corpus and queries are
generated into the work folder and reused, ours is built and served in subprocesses, bm25s (when installed) and
Lucene (only when ``AGENTGYM_ANSERINI_JAR`` names Anserini 0.22.1's fat jar, with java and javac on PATH) run on the
same queries; the JSON, the table and the plot come out, and the systems agree on the top 10."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_retrieval_scale.py"
JAR = os.environ.get("AGENTGYM_ANSERINI_JAR", "")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_retrieval_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["--sizes", "3k", "--queries", "40", "--single", "10", "--work", str(tmp_path / "work"),
            "--out", str(tmp_path / "out"), *extra]  # fmt: skip
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def test_sizes_and_overlap(bench):
    assert [bench.parse_size(s) for s in ("3000", "5k", "1M", "21M", "1.5k")] == [3000, 5000, 10**6, 21 * 10**6, 1500]
    assert [bench.size_label(n) for n in (3000, 10**6, 21 * 10**6, 1234)] == ["3k", "1M", "21M", "1234"]
    for bad in ("", "-1", "0", "1G", "x"):
        with pytest.raises(Exception, match="size"):
            bench.parse_size(bad)
    assert bench.overlap([["1", "2"], [], ["3"]], [["2", "1"], [], ["4", "3"]]) == pytest.approx((1 + 1 + 0.5) / 3)
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def check_ours(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    entry = json.loads((tmp_path / "out" / "results.json").read_text())["sizes"]["3000"]
    ours = entry["systems"]["ours"]
    assert ours["build_s"] > 0 and ours["index_mb"] > 0 and ours["qps"] > 0 and ours["p99_ms"] >= ours["p50_ms"]
    assert ours["build_rss_mb"] > 50 and ours["serve_rss_mb"] > 50  # the child's own peak, not this process's
    assert (tmp_path / "out" / "scale.png").stat().st_size > 0
    assert "| ours |" in proc.stdout and "ours: build" in proc.stdout
    ids = (tmp_path / "work" / "ids-ours-3k.txt").read_text().splitlines()
    assert len(ids) == 40 and sum(len(line.split()) == 10 for line in ids) > 30
    return entry


@pytest.mark.slow
def test_tiny_run_ours(tmp_path):
    check_ours(tmp_path, run(tmp_path, "--systems", "ours"))


@pytest.mark.slow
def test_tiny_run_ours_and_bm25s_reusing_the_corpus(tmp_path):
    pytest.importorskip("bm25s")
    entry = check_ours(tmp_path, run(tmp_path, "--systems", "ours,bm25s", "--bm25s-backend", "numpy"))
    assert entry["systems"]["bm25s"]["qps"] > 0
    assert entry["overlap"]["ours vs bm25s"] > 0.95  # the same tokens and BM25 (Lucene idf): float rounding only
    corpus = tmp_path / "work" / "corpus-3000-seed0.jsonl"
    mtime = corpus.stat().st_mtime_ns
    # a second run reuses the corpus, skips bm25s where its measured memory per passage would not fit, and merges
    # into results.json
    proc = run(tmp_path, "--systems", "bm25s", "--bm25s-max-memory", "200M")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert corpus.stat().st_mtime_ns == mtime and "generating" not in proc.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(results["sizes"]) == ["3000"]
    assert "over 0.2 GiB" in results["sizes"]["3000"]["systems"]["bm25s"]["skipped"]
    assert "bm25s skipped: needs" in proc.stdout


def test_tiny_run_against_lucene(tmp_path):
    if not JAR:
        pytest.skip("set AGENTGYM_ANSERINI_JAR to Anserini 0.22.1's fat jar (see the bench's docstring) to run Lucene")
    if not (shutil.which("java") and shutil.which("javac")):
        pytest.skip("java and javac (JDK 17) are needed for Lucene")
    proc = run(tmp_path, "--systems", "ours,lucene", "--anserini-jar", JAR)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    entry = json.loads((tmp_path / "out" / "results.json").read_text())["sizes"]["3000"]
    lucene = entry["systems"]["lucene"]
    assert lucene["qps"] > 0 and lucene["index_mb"] > 0 and lucene["build_rss_mb"] > 50
    assert entry["overlap"]["ours vs lucene"] > 0.8  # Lucene rounds document lengths to one byte
    assert set(entry["ratios"]) >= {"ours/Lucene batched q/s", "ours/Lucene index size"}


def test_lucene_needs_a_jar(tmp_path):
    proc = run(tmp_path, "--systems", "lucene")
    assert proc.returncode == 2 and "--anserini-jar" in proc.stderr


COMMON_SCRIPT = SCRIPT.parent / "bench_bm25_common_terms.py"


@pytest.fixture(scope="module")
def common_bench():
    spec = importlib.util.spec_from_file_location("bench_bm25_common_terms", COMMON_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_catalogue_corpus_has_the_common_terms_it_promises(common_bench, tmp_path):
    from agentgym.tools.retrieval.bm25 import tokenize

    path, again = tmp_path / "c.jsonl", tmp_path / "d.jsonl"
    common_bench.write_catalogue(path, 3000, seed=1)
    common_bench.write_catalogue(again, 3000, seed=1)
    assert path.read_bytes() == again.read_bytes()  # seeded
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == [str(i) for i in range(3000)]
    df: dict[str, int] = {}
    for r in rows:
        for t in set(tokenize(r["contents"])):
            df[t] = df.get(t, 0) + 1
    for word, share in common_bench.COMMON.items():  # each drawn independently; "size"/"color" need a listed value
        assert abs(df[word] / 3000 - share) < 0.06, (word, df[word])
    common_bench.write_queries(path, tmp_path / "q.json", 50, 0, df, 3000)
    sets = json.loads((tmp_path / "q.json").read_text())
    assert {k: len(v) for k, v in sets.items()} == {"common": 50, "rare": 50, "mixed": 50}
    for q in sets["common"]:
        assert 2 <= len(tokenize(q)) <= 5 and all(df[t] >= 0.4 * 3000 for t in tokenize(q)), q
    for q in sets["rare"]:
        assert all(df[t] < 0.05 * 3000 for t in tokenize(q)), q
    for q in sets["mixed"]:
        toks = tokenize(q)
        assert any(df[t] < 0.05 * 3000 for t in toks) and any(df[t] >= 0.4 * 3000 for t in toks), q
    assert common_bench.recall([["1", "2"], ["3"], []], [["2", "4"], [], []]) == 0.5  # only queries Lucene answered


@pytest.mark.slow
def test_common_terms_bench_tiny_run(tmp_path):
    proc = subprocess.run([sys.executable, str(COMMON_SCRIPT), "--passages", "3k", "--queries", "20", "--systems",
                           "ours", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--label", "t"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    entry = json.loads((tmp_path / "o" / "results.json").read_text())["t"]
    assert set(entry["systems"]) == {"ours-okapi", "ours-lucene"}
    assert all(entry["systems"][s][q]["qps"] > 0 for s in entry["systems"] for q in ("common", "rare", "mixed"))
    assert "| ours-lucene |" in proc.stdout
