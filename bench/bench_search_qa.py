"""SearchQA-v0 step latency with BM25, on the default corpus and on the 100k-doc configuration.

Run by hand (not a test):

    python bench/bench_search_qa.py --preset 100k --episodes 300

Prints dataset build and index build times, and ``step`` p50/p99 for search steps and answer steps,
played by the oracle (whose queries hit the real retriever) against the same env. As a peer in the same
run, it times the same search steps through the ``rank_bm25`` back-end on a sample and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from agentgym.envs.search_qa.agents import OracleAgent
from agentgym.envs.search_qa.data import build_dataset
from agentgym.envs.search_qa.env import SearchQAEnv
from agentgym.tools.retrieval import make_retriever


def time_steps(env: SearchQAEnv, episodes: int, seed: int) -> dict[str, list[float]]:
    agent = OracleAgent()
    times: dict[str, list[float]] = {"search": [], "answer": [], "reset": []}
    for i in range(episodes):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=seed + i, options={"task_index": i})
        times["reset"].append(time.perf_counter() - t0)
        agent.reset(seed=seed + i)
        messages = list(obs)
        while True:
            action = agent.act(messages, info)
            t0 = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(action)
            times["answer" if "<answer>" in action else "search"].append(time.perf_counter() - t0)
            messages += [{"role": "assistant", "content": action}, *obs]
            if terminated or truncated:
                break
    return times


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="100k")
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--peer-episodes", type=int, default=10, help="episodes timed with rank_bm25 (slow)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    t0 = time.perf_counter()
    ds = build_dataset(args.preset, seed=args.seed)
    t_data = time.perf_counter() - t0
    results: dict[str, dict[str, float]] = {}
    for backend, episodes in (("bm25", args.episodes), ("bm25:rank_bm25", args.peer_episodes)):
        t0 = time.perf_counter()
        retriever = make_retriever(backend, ds.corpus)
        t_index = time.perf_counter() - t0
        env = SearchQAEnv(dataset=ds, retriever=retriever)
        time_steps(env, 3, args.seed)  # warm-up (JIT compilation, caches)
        times = time_steps(env, episodes, args.seed)
        results[backend] = {
            "index_build_s": t_index,
            "search_steps": len(times["search"]),
            "search_p50_ms": pct(times["search"], 50),
            "search_p99_ms": pct(times["search"], 99),
            "answer_p50_ms": pct(times["answer"], 50),
            "reset_p50_ms": pct(times["reset"], 50),
            "all_steps_p50_ms": pct(times["search"] + times["answer"], 50),
        }
    print(f"SearchQA-v0, preset {args.preset!r}: {len(ds.corpus):,} docs, {len(ds.test):,} test questions, "
          f"dataset built in {t_data:.2f} s")  # fmt: skip
    cols = ["index_build_s", "search_steps", "search_p50_ms", "search_p99_ms", "answer_p50_ms", "all_steps_p50_ms"]
    print(f"{'retriever':<16}" + "".join(f"{c:>18}" for c in cols))
    for name, row in results.items():
        print(
            f"{name:<16}" + "".join(f"{row[c]:>18.3f}" if isinstance(row[c], float) else f"{row[c]:>18}" for c in cols)
        )
    ratio = results["bm25:rank_bm25"]["search_p50_ms"] / results["bm25"]["search_p50_ms"]
    print(f"search step p50: default back-end is {ratio:,.0f}x faster than rank_bm25")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(
                {"preset": args.preset, "docs": len(ds.corpus), "dataset_build_s": t_data, **results}, f, indent=2
            )


if __name__ == "__main__":
    main()
