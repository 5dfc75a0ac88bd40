"""SearchQA end to end on a wiki-18-sized corpus, through the retrieval server (issue 22).

Run by hand (not a test; a fast test runs it at a tiny size)::

    python bench/searchqa_at_scale.py --passages 100000 --out /tmp/sqa100k         # a minute or two
    python bench/searchqa_at_scale.py --passages 1000000 --out /tmp/sqa1m --workers 2
    python bench/searchqa_at_scale.py --out /data/sqa21m --max-memory 8G             # 21M passages: hours

Steps:

1. **data**: SearchQA's generated knowledge base (``--dataset`` preset, ``--data-seed``) is written with
   ``QADataset.save``; its passages (ids renamed ``kb-<id>``, questions' supporting ids with them) are mixed into
   ``--passages`` synthetic wiki-18 passages (``synthetic.write_corpus``, ids ``"0".."N-1"``) at seeded positions.
2. **index**: ``python -m agentgym.tools.retrieval.bm25_disk build`` in a child process under ``--max-memory``:
   wall time and the child's peak RSS.
3. **server**: ``agentgym serve-retriever CORPUS --retriever bm25:disk --index-dir ... --workers W`` for each W of
   ``--load-workers`` (a load test each: ``--clients`` threads with their own connections for ``--load-seconds``,
   queries/s and latency p50/p99) and ``--workers`` for the episodes; peak RSS and private memory of its processes.
4. **episodes**: the built-in agents (``--agents``) play ``--episodes`` SearchQA episodes through
   ``retriever="remote:URL"`` (no corpus in the env's process), and the same agents the same seeds on the small
   in-memory corpus (``bm25``). Reported: success rate on each, env step latency p50/p99 (search steps) and
   gold@k: the share of gold hops whose supporting passage is in the top k of the oracle's query for that hop.

Prints one JSON object (also written to ``OUT/report.json``). ``--keep`` keeps the corpus and index in ``--out``
(else they are deleted at the end: at 21M they are ~11 GB and ~3 GB); ``--reuse`` starts from them (steps 3-4; step 2
too when the index is missing, e.g. deleted after a change of its format).
The server runs with ``--log-level warning`` (no access log).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np


@dataclasses.dataclass
class Layout:
    """The files of one run under ``out``."""

    out: Path

    @property
    def corpus(self) -> Path:
        return self.out / "corpus.jsonl"

    @property
    def questions(self) -> Path:
        return self.out / "test.jsonl"

    @property
    def index(self) -> Path:
        return self.out / "index"


def write_data(layout: Layout, passages: int, dataset: str, data_seed: int, seed: int) -> dict[str, Any]:
    """Write the mixed corpus and the remapped test questions; returns counts and timings."""
    from agentgym.envs.search_qa.data import build_dataset
    from agentgym.tools.retrieval.base import write_jsonl_atomic
    from agentgym.tools.retrieval.synthetic import write_corpus

    started = time.monotonic()
    ds = build_dataset(dataset, seed=data_seed)
    layout.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.out) as tmp:
        synthetic = Path(tmp) / "synthetic.jsonl"
        write_corpus(synthetic, passages, seed=seed, progress=passages >= 1_000_000)
        rng = np.random.default_rng(seed)
        # before which synthetic row each knowledge-base passage goes (sorted: one streaming pass)
        where = np.sort(rng.integers(0, passages + 1, size=len(ds.corpus)))
        order = rng.permutation(len(ds.corpus))
        kb_rows = [
            json.dumps({"id": f"kb-{ds.corpus[j].id}", "contents": ds.corpus[j].contents}, ensure_ascii=False) + "\n"
            for j in order.tolist()
        ]
        tmp_out = layout.corpus.with_suffix(".tmp")
        with open(synthetic, "rb") as src, open(tmp_out, "wb") as dst:
            k = 0
            for row, line in enumerate(src):
                while k < len(kb_rows) and where[k] == row:
                    dst.write(kb_rows[k].encode("utf-8"))
                    k += 1
                dst.write(line)
            for rest in kb_rows[k:]:
                dst.write(rest.encode("utf-8"))
        os.replace(tmp_out, layout.corpus)
    test = [
        dataclasses.replace(ex, supporting_doc_ids=tuple(f"kb-{d}" for d in ex.supporting_doc_ids)) for ex in ds.test
    ]
    write_jsonl_atomic(layout.questions, (ex.to_json() for ex in test))
    return {
        "passages": passages,
        "kb_passages": len(ds.corpus),
        "questions": len(test),
        "corpus_bytes": layout.corpus.stat().st_size,
        "write_s": round(time.monotonic() - started, 2),
    }


def build_index(layout: Layout, max_memory: str) -> dict[str, Any]:
    """The disk BM25 index, built in a child process: wall time and the child's peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    cmd = [sys.executable, "-m", "agentgym.tools.retrieval.bm25_disk", "build", str(layout.corpus), str(layout.index),
           "--max-memory", max_memory, "--corpus-index-dir", str(layout.index / "corpus")]  # fmt: skip
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    meta = json.loads((layout.index / "meta.json").read_text())
    size = sum(p.stat().st_size for p in layout.index.glob("*.npy"))
    return {
        "build_s": round(wall, 2),
        # ru_maxrss of children is the largest of any child so far (KB): the build is the first big one
        "build_peak_rss_mb": round(max(peak_kb, before) / 1024, 1),
        "max_memory": max_memory,
        "index_bytes": size,
        "postings": meta.get("n_postings"),
        "terms": meta.get("n_terms"),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Server:
    """``agentgym serve-retriever`` with ``bm25:disk`` in a child process."""

    layout: Layout
    workers: int
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def __enter__(self) -> Server:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "agentgym.cli", "serve-retriever", str(self.layout.corpus), "--retriever",
               "bm25:disk", "--index-dir", str(self.layout.index), "--workers", str(self.workers), "--port",
               str(port), "--log-level", "warning"]  # fmt: skip
        log = open(self.layout.out / f"server-{self.workers}.log", "wb")
        with log:
            self.proc = subprocess.Popen([*cmd, "--header-timeout", "10"], stdout=log, stderr=log,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        deadline = time.monotonic() + 600
        seen: set[int] = set()
        while len(seen) < self.workers:  # up when every worker has answered
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not come up: see {self.layout.out}/server-{self.workers}.log")
            try:
                seen.add(httpx.get(self.url + "/health", timeout=2).json()["pid"])
            except httpx.TransportError:
                time.sleep(0.2)
        return self

    def memory(self) -> dict[str, Any]:
        """Peak RSS (VmHWM) of the parent and of each worker, and the workers' private memory."""
        assert self.proc is not None

        def field(pid: int, name: str, path: str = "status") -> int:
            with open(f"/proc/{pid}/{path}") as f:
                return sum(int(line.split()[1]) for line in f if line.split(":")[0] in name.split("+"))

        kids = [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        return {
            "parent_peak_rss_mb": round(field(self.proc.pid, "VmHWM") / 1024, 1),
            "worker_peak_rss_mb": [round(field(p, "VmHWM") / 1024, 1) for p in kids],
            "worker_private_mb": [
                round(field(p, "Private_Clean+Private_Dirty", "smaps_rollup") / 1024, 1) for p in kids
            ],
            "worker_anonymous_mb": [round(field(p, "Anonymous", "smaps_rollup") / 1024, 1) for p in kids],
        }

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def load_test(url: str, queries: Sequence[str], clients: int, seconds: float, topk: int = 3) -> dict[str, Any]:
    """``clients`` threads, each with its own connection, sending one query per request for ``seconds``."""
    stop = time.monotonic() + seconds
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients

    def client(i: int) -> None:
        rng = random.Random(i)
        with httpx.Client(base_url=url, timeout=60) as http:
            while time.monotonic() < stop:
                q = queries[rng.randrange(len(queries))]
                t = time.perf_counter()
                r = http.post("/retrieve", json={"queries": [q], "topk": topk})
                latencies[i].append(time.perf_counter() - t)
                errors[i] += r.status_code != 200

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    lat = np.array([x for per in latencies for x in per]) * 1000
    return {
        "clients": clients,
        "requests": int(lat.size),
        "errors": int(sum(errors)),
        "qps": round(lat.size / wall, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
        "p99_ms": round(float(np.percentile(lat, 99)), 2) if lat.size else None,
    }


def play(env: Any, agent_name: str, episodes: int) -> dict[str, Any]:
    """``episodes`` episodes (seeds 0..) of one built-in agent: success, step latency of searches, recall."""
    agent = type(env).agents[agent_name]()
    successes, recall, steps = [], [], []
    for seed in range(episodes):
        obs, info = env.reset(seed=seed)
        agent.reset(seed=seed)
        messages = list(obs)
        while True:
            action = agent.act(messages, info)
            t = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(action)
            if "retrieved_doc_ids" in info:
                steps.append(time.perf_counter() - t)
            messages += [{"role": "assistant", "content": action}, *obs]
            if terminated or truncated:
                break
        successes.append(bool(info.get("success", info.get("metrics", {}).get("em", 0.0) == 1.0)))
        recall.append(float(info.get("supporting_recall", 0.0)))
    ms = np.array(steps) * 1000
    return {
        "episodes": episodes,
        "success_rate": round(float(np.mean(successes)), 4),
        "supporting_recall": round(float(np.mean(recall)), 4),
        "search_steps": int(ms.size),
        "step_p50_ms": round(float(np.percentile(ms, 50)), 2) if ms.size else None,
        "step_p99_ms": round(float(np.percentile(ms, 99)), 2) if ms.size else None,
    }


def gold_at_k(retriever: Any, questions: Sequence[Any], topk: int, prefix: str = "") -> float:
    """Share of gold hops whose supporting passage is in the top ``topk`` of that hop's oracle query."""
    pairs = [
        (q, f"{prefix}{d}") for ex in questions for q, d in zip(ex.oracle_queries, ex.supporting_doc_ids, strict=False)
    ]
    if not pairs:
        return float("nan")
    hits = retriever.batch_search([q for q, _ in pairs], topk)
    return round(sum(d in {h.doc.id for h in hs} for (_, d), hs in zip(pairs, hits, strict=True)) / len(pairs), 4)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=21_000_000, help="synthetic wiki-18 passages (wiki-18: 21M)")
    p.add_argument("--out", default=None, help="working folder (default: a temporary one)")
    p.add_argument("--dataset", default="small", help="SearchQA preset whose knowledge base is mixed in")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="synthetic corpus and mixing positions")
    p.add_argument("--max-memory", default="8G", help="index build budget")
    p.add_argument("--workers", type=int, default=2, help="server workers for the episodes")
    p.add_argument("--load-workers", default="1,2", help="worker counts to load-test (empty: none)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--load-seconds", type=float, default=10.0)
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--agents", default="heuristic,oracle")
    p.add_argument("--topk", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the corpus and index")
    p.add_argument(
        "--reuse", action="store_true", help="use what a --keep run left in --out (the index is built if missing)"
    )
    args = p.parse_args(argv)

    from agentgym.envs.search_qa.data import build_dataset
    from agentgym.envs.search_qa.env import SearchQAEnv
    from agentgym.tools.retrieval import RemoteRetriever

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="searchqa-at-scale-"))
    layout = Layout(out)
    report: dict[str, Any] = {"args": vars(args), "load_avg": os.getloadavg(), "cpus": os.cpu_count()}
    try:
        if args.reuse and layout.corpus.exists() and layout.questions.exists():
            report["data"] = "reused from an earlier run with --keep"
        else:
            report["data"] = write_data(layout, args.passages, args.dataset, args.data_seed, args.seed)
        if args.reuse and (layout.index / "meta.json").exists():
            report["index"] = "reused from an earlier run with --keep"
        else:
            report["index"] = build_index(layout, args.max_memory)
        report["load"] = []
        worker_counts = [int(w) for w in args.load_workers.split(",") if w.strip()]
        queries = [json.loads(line)["question"] for line in layout.questions.read_text().splitlines()]
        for w in worker_counts:
            with Server(layout, w) as server:
                report["load"].append({"workers": w, **load_test(server.url, queries, args.clients,
                                                                  args.load_seconds, args.topk)})  # fmt: skip
        small = build_dataset(args.dataset, seed=args.data_seed)
        with Server(layout, args.workers) as server:
            report["server_up"] = {"workers": args.workers}
            remote = RemoteRetriever(server.url)
            report["gold_at_k"] = {
                "k": args.topk,
                "big_remote": gold_at_k(remote, small.test, args.topk, prefix="kb-"),
            }
            remote.close()
            report["episodes"] = {}
            for name in args.agents.split(","):
                big = SearchQAEnv(questions_path=str(layout.questions), retriever=f"remote:{server.url}",
                                  topk=args.topk)  # fmt: skip
                try:
                    report["episodes"][name] = {"big_remote": play(big, name, args.episodes)}
                finally:
                    big.close()
            report["server_memory"] = server.memory()
        env_small = SearchQAEnv(dataset=small, topk=args.topk)
        try:
            report["gold_at_k"]["small_in_memory"] = gold_at_k(env_small.retriever, small.test, args.topk)
            for name in args.agents.split(","):
                report["episodes"][name]["small_in_memory"] = play(env_small, name, args.episodes)
        finally:
            env_small.close()
        report["bench_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        report["load_avg_end"] = os.getloadavg()
        (out / "report.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
    finally:
        if not args.keep:
            for path in (layout.corpus, layout.index):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
