"""Serving big corpora: ``make_retriever("bm25:disk")`` over a corpus file, the multi-worker retrieval server
(real processes on loopback), SearchQA without holding the corpus, and the end-to-end bench at a tiny size."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from agentgym.tools.retrieval import (
    CorpusFile,
    Document,
    RemoteRetriever,
    disk_index_dirs,
    load_corpus_jsonl,
    make_retriever,
)
from agentgym.tools.retrieval.bm25 import BM25Retriever
from agentgym.tools.retrieval.bm25_disk import DiskBM25, IndexMismatchError
from agentgym.tools.retrieval.synthetic import write_corpus, write_queries

ROOT = Path(__file__).resolve().parents[2]


def queries_of(path: Path) -> list[str]:
    return [json.loads(line)["question"] for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------ make_retriever


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    d = tmp_path_factory.mktemp("small")
    write_corpus(d / "c.jsonl", 1500, seed=5, vocab_size=20_000, progress=False)
    write_queries(d / "q.jsonl", 60, seed=6, n_passages=1500, corpus_seed=5, vocab_size=20_000)
    return d / "c.jsonl", queries_of(d / "q.jsonl")


def test_disk_spec_over_a_path_streams_and_equals_bm25(tmp_path: Path, small: tuple[Path, list[str]]) -> None:
    path, queries = small
    disk = make_retriever("bm25:disk", path, cache_dir=tmp_path)
    assert isinstance(disk, DiskBM25) and isinstance(disk.corpus, CorpusFile)  # never a list
    ref = BM25Retriever(load_corpus_jsonl(path), n_threads=1)
    assert disk.batch_search(queries, 5) == ref.batch_search(queries, 5)
    folder, offsets = disk_index_dirs(path, tmp_path)
    assert disk.folder == folder and offsets is not None and any(offsets.iterdir())
    built = (folder / "meta.json").stat().st_mtime_ns
    again = make_retriever("bm25:disk", str(path), cache_dir=tmp_path, build=False)  # opened, not rebuilt
    assert (folder / "meta.json").stat().st_mtime_ns == built and again.search(queries[0]) == disk.search(queries[0])
    assert not again.corpus.built  # type: ignore[attr-defined]  # the saved offsets were used
    # an explicit index_dir keeps the offsets in a subfolder the BM25 build leaves alone
    own = make_retriever("bm25:disk", path, index_dir=tmp_path / "own", max_memory=64 << 20)
    assert (tmp_path / "own" / "meta.json").exists() and any((tmp_path / "own" / "corpus").iterdir())
    assert own.search(queries[1], 3) == ref.search(queries[1], 3)
    for r in (disk, again, own):
        r.close()
        assert r.corpus._fd == -1  # the CorpusFile make_retriever opened is closed with the retriever
    docs = CorpusFile.open(path, progress=False)
    theirs = make_retriever("bm25:disk", docs, cache_dir=tmp_path)
    theirs.close()
    assert docs._fd >= 0 and docs[0].id  # a corpus the caller passed stays the caller's
    docs.close()


@pytest.mark.slow
def test_disk_spec_over_documents_and_its_options(tmp_path: Path) -> None:
    docs = [Document("a", '"Lake Ovra"\nLake Ovra lies in Tessaly.'), Document("b", '"Mount Kell"\nA peak.'),
            Document("c", '"Tessaly"\nA land of lakes.')]  # fmt: skip
    r = make_retriever("bm25:disk", docs)  # no folder named: a temporary one, removed with the retriever
    ref = BM25Retriever(docs)
    assert [h.doc.id for h in r.search("where is lake ovra", 2)] == [h.doc.id for h in ref.search("lake ovra", 2)]
    folder = r.folder  # type: ignore[attr-defined]
    assert folder.exists()
    r.close()
    del r
    import gc

    gc.collect()
    assert not folder.exists()
    cached = make_retriever("BM25:Disk", docs, cache_dir=tmp_path)
    assert cached.folder == disk_index_dirs(docs, tmp_path)[0]  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="unknown bm25:disk retriever options"):
        make_retriever("bm25:disk", docs, backend="fast")
    with pytest.raises(ValueError, match="needs index_dir or cache_dir"):
        make_retriever("bm25:disk", docs, build=False)
    with pytest.raises(IndexMismatchError):  # build=False never builds
        make_retriever("bm25:disk", docs, index_dir=tmp_path / "empty", build=False)
    other = [*docs, Document("d", '"X"\nlake')]
    with pytest.raises(IndexMismatchError):  # an index of another corpus is refused ...
        make_retriever("bm25:disk", other, index_dir=cached.folder, build=False)  # type: ignore[attr-defined]
    rebuilt = make_retriever("bm25:disk", other, index_dir=cached.folder)  # type: ignore[attr-defined]
    assert len(rebuilt.corpus) == 4  # type: ignore[attr-defined]  # ... or rebuilt
    assert type(make_retriever("bm25", docs)).__name__ == "BM25Retriever"  # the other specs are unchanged


# ------------------------------------------------------------------------------------------ the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    index: Path
    corpus: Path
    pids: set[int] = field(default_factory=set)

    def worker_pids(self, n: int, timeout: float = 60) -> set[int]:
        """Ask /health on fresh connections until ``n`` distinct workers have answered."""
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < n:
            assert time.monotonic() < deadline, f"only {len(seen)} workers answered: {self.log.read_text()[-2000:]}"
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                health = httpx.get(self.url + "/health", timeout=2, headers=self.headers).json()
                assert health["documents"] == self.documents
                seen.add(health["pid"])
            except httpx.TransportError:
                time.sleep(0.1)
        return seen

    documents: int = 0
    headers: dict[str, str] = field(default_factory=dict)


def serve(
    corpus: Path, index: Path, tmp: Path, workers: int, documents: int, *extra: str, token: str | None = None
) -> Served:
    port = free_port()
    log = tmp / f"server-{port}.log"
    cmd = [sys.executable, "-m", "agentgym.cli", "serve-retriever", str(corpus), "--retriever", "bm25:disk",
           "--index-dir", str(index), "--workers", str(workers), "--port", str(port), "--max-memory", "256M",
           *extra]  # fmt: skip
    with open(log, "wb") as f:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"AGENTGYM_TOKEN": token} if token else {})}
        proc = subprocess.Popen(cmd, stdout=f, stderr=f, env=env)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    served = Served(proc, f"http://127.0.0.1:{port}", log, index, corpus, documents=documents, headers=headers)
    served.pids = served.worker_pids(workers)
    return served


def stop(served: Served, sig: int = signal.SIGTERM) -> None:
    if served.proc.poll() is None:
        served.proc.send_signal(sig)
        try:
            served.proc.wait(30)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait()


N_BIG = 50_000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    d = tmp_path_factory.mktemp("big")
    write_corpus(d / "c.jsonl", N_BIG, seed=7, progress=False)
    write_queries(d / "q.jsonl", 200, seed=8, n_passages=N_BIG, corpus_seed=7)
    return d / "c.jsonl", queries_of(d / "q.jsonl")


@pytest.mark.slow
def test_small_server_two_workers_answer_equally_and_stop_cleanly(
    small: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, queries = small
    served = serve(path, tmp_path / "index", tmp_path, 2, 1500, token="s3cret")  # the token reaches every worker
    try:
        assert len(served.pids) == 2 and set(children(served.proc.pid)) == served.pids
        assert "s3cret" not in " ".join(Path(f"/proc/{p}/cmdline").read_text() for p in served.pids)
        for _ in range(6):  # fresh connections, whichever worker takes them
            assert httpx.get(served.url + "/health", timeout=5).status_code == 401
        with CorpusFile.open(path, tmp_path / "index" / "corpus", progress=False) as corpus:
            local = DiskBM25(tmp_path / "index", corpus, n_threads=1)
            with RemoteRetriever(served.url, headers=served.headers) as remote:
                assert remote.batch_search(queries, 4) == local.batch_search(queries, 4)
            local.close()
    finally:
        stop(served)
    assert served.proc.returncode == 0
    assert not any(alive(p) for p in served.pids)


@pytest.fixture(scope="module")
def two_workers(big: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    d = tmp_path_factory.mktemp("served")
    served = serve(big[0], d / "index", d, 2, N_BIG)
    yield served
    stop(served)


@pytest.mark.slow
def test_two_workers_answer_and_equal_the_in_process_index(two_workers: Served, big: tuple[Path, list[str]]) -> None:
    _, queries = big
    assert len(two_workers.pids) == 2 and set(children(two_workers.proc.pid)) == two_workers.pids
    log = two_workers.log.read_text()
    assert "index ready" in log and "serving on" in log
    with CorpusFile.open(two_workers.corpus, two_workers.index / "corpus", progress=False) as corpus:
        local = DiskBM25(two_workers.index, corpus, n_threads=1)
        remote = RemoteRetriever(two_workers.url)
        for topk in (1, 5):  # scores too: the server sends them, float32 -> float -> JSON -> float is exact
            assert remote.batch_search(queries, topk) == local.batch_search(queries, topk)
        # Search-R1's wire format, unchanged
        body = httpx.post(two_workers.url + "/retrieve", json={"queries": queries[:2], "topk": 2}).json()
        assert set(body) == {"result"} and all(set(d) == {"id", "contents"} for hits in body["result"] for d in hits)
        remote.close()
        local.close()


def _smaps(pid: int) -> list[tuple[str, dict[str, int]]]:
    """``(path, fields in kB)`` per mapping of ``/proc/PID/smaps``."""
    out: list[tuple[str, dict[str, int]]] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if "-" in parts[0] and not parts[0].endswith(":"):
            out.append((parts[5] if len(parts) > 5 else "", {}))
        elif parts[0].endswith(":") and len(parts) >= 2 and parts[1].isdigit():
            out[-1][1][parts[0][:-1]] = int(parts[1])
    return out


@pytest.mark.slow
def test_workers_share_the_mapped_index(two_workers: Served) -> None:
    index_bytes = sum(p.stat().st_size for p in two_workers.index.glob("*.npy"))
    postings = (two_workers.index / "words.npy").stat().st_size
    assert index_bytes > 10 << 20  # big enough to tell (megabytes)
    for pid in two_workers.pids:
        maps = [f for p, f in _smaps(pid) if p.startswith(str(two_workers.index))]
        assert len(maps) >= 9

        def total(*names: str, maps: list[dict[str, int]] = maps) -> int:
            return sum(f.get(n, 0) for f in maps for n in names) << 10

        # the worker read all its postings (opening checks them) from the page cache: file pages shared with the
        # parent and the other worker (dirty when the build has just written them), never an anonymous copy
        assert total("Shared_Clean", "Shared_Dirty") > postings // 2
        assert total("Anonymous") == 0
        rollup = {
            line.split(":")[0]: int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
        }
        # the worker's own memory: the interpreter and its libraries (~100 MB here), no copy of the index
        assert rollup["Anonymous"] << 10 < 400 << 20


@pytest.mark.slow
def test_a_dead_worker_is_reported_and_replaced(two_workers: Served) -> None:
    victim = min(two_workers.pids)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        kids = set(children(two_workers.proc.pid))
        if len(kids) == 2 and victim not in kids:
            break
        assert time.monotonic() < deadline, two_workers.log.read_text()[-2000:]
        time.sleep(0.1)
    assert f"worker pid {victim} exited with code -9" in two_workers.log.read_text()
    two_workers.pids = two_workers.worker_pids(2)
    assert victim not in two_workers.pids


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_stopping_the_server_leaves_no_worker(
    sig: int, big: tuple[Path, list[str]], two_workers: Served, tmp_path: Path
) -> None:
    served = serve(big[0], two_workers.index, tmp_path, 2, N_BIG)  # the index exists: opened, not rebuilt
    workers = set(children(served.proc.pid))
    assert workers == served.pids
    served.proc.send_signal(sig)
    code = served.proc.wait(30)
    assert code == (-9 if sig == signal.SIGKILL else 0), served.log.read_text()[-2000:]
    deadline = time.monotonic() + 20  # SIGKILL: the kernel tells the orphans (PR_SET_PDEATHSIG)
    while any(alive(p) for p in workers):
        assert time.monotonic() < deadline, f"workers left behind: {[p for p in workers if alive(p)]}"
        time.sleep(0.1)
    assert "index ready" in served.log.read_text() and "bm25 index" not in served.log.read_text()


def test_serve_retriever_arguments_are_checked_before_loading(tmp_path: Path) -> None:
    from agentgym.tools.retrieval.server import serve_retriever

    missing = tmp_path / "missing.jsonl"  # never opened: every check comes first
    with pytest.raises(ValueError, match="need retriever='bm25:disk'"):
        serve_retriever(missing, retriever="bm25", workers=2)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        serve_retriever(missing, retriever="bm25:disk", workers=0)
    with pytest.raises(ValueError, match="without a bearer token"):
        serve_retriever(missing, retriever="bm25:disk", host="0.0.0.0", workers=2)
    for bad in (["--workers", "0"], ["--max-memory", "lots"]):
        run = subprocess.run([sys.executable, "-m", "agentgym.cli", "serve-retriever", str(missing), *bad],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert run.returncode == 2 and "Traceback" not in run.stderr and "error:" in run.stderr


# ------------------------------------------------------------------------------------------ SearchQA


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentgym.envs.search_qa.data import build_dataset

    d = tmp_path_factory.mktemp("tiny")
    build_dataset("tiny").save(d)
    return d


def oracle_run(env, seeds: range) -> list[tuple[list[str], float]]:  # type: ignore[no-untyped-def]
    from agentgym.envs.search_qa.agents import OracleAgent

    agent, out = OracleAgent(), []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        agent.reset(seed=seed)
        msgs, seen = list(obs), []
        while True:
            action = agent.act(msgs, info)
            obs, reward, terminated, truncated, info = env.step(action)
            seen += info.get("retrieved_doc_ids", [])
            msgs += [{"role": "assistant", "content": action}, *obs]
            if terminated or truncated:
                out.append((seen, float(reward)))
                break
    return out


def test_searchqa_remote_without_a_corpus_and_disk_with_one(saved_tiny: Path, tmp_path: Path) -> None:
    from agentgym.envs.search_qa.env import SearchQAEnv
    from agentgym.envs.search_qa.flashrag import FlashRAGFormatError
    from agentgym.tools.retrieval.server import create_app
    from agentgym.tools.serving import BackgroundServer

    questions, corpus = str(saved_tiny / "test.jsonl"), str(saved_tiny / "corpus.jsonl")
    reference = SearchQAEnv(questions_path=questions, corpus_path=corpus)  # in memory, as before
    want = oracle_run(reference, range(8))
    assert all(r == 1.0 for _, r in want)

    disk = SearchQAEnv(questions_path=questions, corpus_path=corpus, retriever="bm25:disk", cache_dir=str(tmp_path))
    assert isinstance(disk.dataset.corpus, CorpusFile) and isinstance(disk.retriever, DiskBM25)
    assert oracle_run(disk, range(8)) == want
    for ex in disk.examples[:4]:  # supporting passages come from the file, the same as from the list
        for doc_id in ex.supporting_doc_ids:
            assert disk.dataset.doc(doc_id) == reference.dataset.doc(doc_id)
    with pytest.raises(KeyError):
        disk.dataset.doc("no-such-doc")
    with BackgroundServer(create_app(disk.retriever)) as server:
        remote = SearchQAEnv(questions_path=questions, retriever=f"remote:{server.url}")  # no corpus_path
        assert remote.dataset.corpus == []
        assert oracle_run(remote, range(8)) == want
        remote.close()
    disk.close()
    reference.close()
    assert any(p.name.startswith("corpus-") for p in tmp_path.iterdir())  # offsets kept for the next open

    with pytest.raises(ValueError, match="must be given together"):  # a local retriever needs the corpus
        SearchQAEnv(questions_path=questions, retriever="bm25:disk")
    rows = [json.loads(line) for line in Path(questions).read_text().splitlines()]
    rows[0]["metadata"]["supporting_doc_ids"] = ["no-such-doc"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(FlashRAGFormatError, match="'no-such-doc' is not in the corpus"):  # checked with `in`
        SearchQAEnv(questions_path=str(bad), corpus_path=corpus, retriever="bm25:disk")
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_bytes(Path(corpus).read_bytes()[:-20])
    with pytest.raises(FlashRAGFormatError):
        SearchQAEnv(questions_path=questions, corpus_path=str(truncated), retriever="bm25:disk")


# ------------------------------------------------------------------------------------------ the bench


def run_bench(out: Path, *options: str) -> dict:  # type: ignore[type-arg]
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "searchqa_at_scale.py"), "--dataset", "tiny", "--max-memory", "256M",
         "--out", str(out), *options],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert json.loads((out / "report.json").read_text()) == report
    assert not (out / "corpus.jsonl").exists() and not (out / "index").exists()  # cleaned up
    return report


@pytest.mark.slow
def test_bench_runs_at_a_tiny_size(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "--passages", "1000", "--episodes", "4", "--load-workers", "", "--workers", "2")
    assert report["data"]["passages"] == 1000 and report["index"]["build_s"] > 0 and report["load"] == []
    oracle = report["episodes"]["oracle"]
    assert oracle["big_remote"]["success_rate"] == oracle["small_in_memory"]["success_rate"] == 1.0
    assert oracle["big_remote"]["search_steps"] > 0 and oracle["big_remote"]["step_p50_ms"] > 0
    assert 0 < report["gold_at_k"]["big_remote"] <= 1 and 0 < report["gold_at_k"]["small_in_memory"] <= 1
    assert len(report["server_memory"]["worker_private_mb"]) == 2


@pytest.mark.slow
def test_bench_load_test_one_and_two_workers(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "--passages", "1500", "--episodes", "2", "--agents", "heuristic",
                       "--load-workers", "1,2", "--clients", "4", "--load-seconds", "1", "--workers", "1")  # fmt: skip
    assert [row["workers"] for row in report["load"]] == [1, 2]
    assert all(row["requests"] > 0 and row["errors"] == 0 and row["p99_ms"] >= row["p50_ms"] for row in report["load"])


def test_cli_passes_the_scale_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym import cli
    from agentgym.tools.retrieval import server as server_module

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(server_module, "serve_retriever", lambda corpus, **kw: calls.append(kw))
    argv = ["serve-retriever", "c.jsonl", "--retriever", "bm25:disk", "--index-dir", "ix", "--max-memory", "1.5G",
            "--workers", "2", "--log-level", "warning"]  # fmt: skip
    assert cli.main(argv) == 0 and cli.main(["serve-retriever", "c.jsonl"]) == 0
    assert {k: calls[0][k] for k in ("retriever", "index_dir", "max_memory", "workers", "log_level")} == {
        "retriever": "bm25:disk", "index_dir": "ix", "max_memory": 3 << 29, "workers": 2, "log_level": "warning",
    }  # fmt: skip
    assert not {"workers", "index_dir", "max_memory"} & set(calls[1])  # the in-memory path gets what it got before
