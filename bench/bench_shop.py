"""Shop-v0 speed and agents: catalogue build, reset and step times, the built-in agents' scores, and catalogue
search against rank-bm25 (the BM25 library WebShop's engine imports), measured in the same run.

Run by hand (not a test)::

    python bench/bench_shop.py                          # the 5k catalogue, 500 episodes an agent: about a minute
    python bench/bench_shop.py --catalogue 100k --episodes 200

Rows: the catalogue's build time (products and the search index, once per process); per agent, WebShop's mean score
and success rate (score 1.0), the mean turns, env steps per wall second counting only the env's ``reset`` and
``step`` (the agent's time excluded) and the median reset. Search: ``--queries`` instructions of the catalogue as
queries, top 50, answered by Shop-v0's index (BM25, Lucene's idf, exact top-k) and by rank-bm25's ``BM25Okapi`` over
the same tokens (when installed: ``pip install rank-bm25``), with the overlap of their top-10 sets (the idfs
differ: rank-bm25's okapi floors negative idfs).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.shop.catalogue import SIZES
from agentgym.envs.shop.env import STORE_CACHE, ShopEnv
from agentgym.tools.retrieval.bm25 import tokenize


def measure(env: ShopEnv, agent_name: str, episodes: int) -> dict[str, float]:
    agent = env.agents[agent_name]()
    steps, env_time, resets, scores, wins, turns = 0, 0.0, [], [], 0, []
    rng = np.random.default_rng(0)
    for ep in range(episodes):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=ep, options={"task_index": int(rng.integers(env.num_tasks))})
        resets.append(time.perf_counter() - t0)
        env_time += resets[-1]
        messages, total, taken = list(obs), 0.0, 0
        agent.reset(seed=ep)
        while taken < env.max_turns:
            taken += 1
            action = agent.act(messages, info)
            messages.append({"role": "assistant", "content": action})
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            env_time += time.perf_counter() - t0
            steps += 1
            messages += obs
            total += reward
            if terminated or truncated:
                break
        scores.append(total)
        wins += bool(info.get("success"))
        turns.append(taken)
    return {"score": float(np.mean(scores)), "success": wins / episodes, "turns": float(np.mean(turns)),
            "steps_per_s": steps / env_time, "reset_ms": 1e3 * statistics.median(resets)}  # fmt: skip


def search_peer(env: ShopEnv, n_queries: int) -> dict[str, float] | None:
    try:
        from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]
    except ImportError:
        return None
    data = env.store.data
    queries = [data.goal(i).instruction for i in range(min(n_queries, data.num_goals))]
    t0 = time.perf_counter()
    ours = [env.store.search(" ".join(q.lower().split())) for q in queries]
    ours_s = time.perf_counter() - t0
    peer = BM25Okapi([tokenize(p.search_text()) for p in data.products])
    asins = np.array([p.asin for p in data.products])
    t0 = time.perf_counter()
    theirs = [asins[np.argsort(-peer.get_scores(tokenize(q)), kind="stable")[:50]] for q in queries]
    peer_s = time.perf_counter() - t0
    overlap = np.mean([len(set(a[:10]) & set(b[:10].tolist())) / 10 for a, b in zip(ours, theirs, strict=True)])
    return {"ours_qps": len(queries) / ours_s, "rank_bm25_qps": len(queries) / peer_s, "top10_overlap": float(overlap)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogue", default="5k", choices=list(SIZES))
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    a = parser.parse_args()
    t0 = time.perf_counter()
    env = ShopEnv(catalogue=a.catalogue)
    build = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"Shop-v0 {a.catalogue}: {len(env.store.data.products):,} products, catalogue and index built in "
          f"{build:.2f} s, peak RSS {rss:,.0f} MiB")  # fmt: skip
    print("| agent | score | success | turns | env steps/s | reset p50 (ms) |\n|---|---|---|---|---|---|")
    for name in env.agents:
        r = measure(env, name, a.episodes)
        print(f"| {name} | {r['score']:.3f} | {r['success']:.3f} | {r['turns']:.1f} | {r['steps_per_s']:,.0f} | "
              f"{r['reset_ms']:.3f} |")  # fmt: skip
    s = search_peer(env, a.queries)
    if s is None:
        print("search: rank-bm25 is not installed (pip install rank-bm25); no peer row")
    else:
        print(f"search, top 50 of {a.queries} instructions: ours {s['ours_qps']:,.0f} q/s, rank-bm25 "
              f"{s['rank_bm25_qps']:,.1f} q/s ({s['ours_qps'] / s['rank_bm25_qps']:,.0f}x); top-10 overlap "
              f"{s['top10_overlap']:.2f}")  # fmt: skip
    STORE_CACHE.clear()


if __name__ == "__main__":
    main()
