"""Env-server steps/s with N clients, to compare trees before and after a change to the server (issue 31's
per-client limits: connection caps, fair worker shares, snapshot budgets).

    python bench/bench_server_limits.py --clients 8 --seconds 10
    PYTHONPATH=/path/to/other/tree python bench/bench_server_limits.py ...   # the same against another tree

Starts ``agentgym.serving.server.serve`` (its defaults) in a subprocess on a free loopback port, serving
``agentgym/Chain-v0`` (a cheap env: the server's own cost dominates), then ``--clients`` client processes each play
episodes through one ``RemoteEnv`` (the built-in ``random`` agent's action, fixed) for ``--seconds``. Prints one
JSON line: steps (resets not counted), aggregate steps/s, per-request p50/p99 latency in ms, errors, and the
``agentgym.serving.server`` file that served (which tree). ``--rounds`` repeats the timed part and reports each round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from typing import Any

ENV_ID = "agentgym/Chain-v0"
ACTION = "<answer> gold </answer>"


def client(url: str, seconds: float, start_at: float, out: Any) -> None:
    """One client: episodes through one RemoteEnv until ``seconds`` after ``start_at``."""
    import agentgym  # noqa: F401
    from agentgym.serving.remote import EnvServerError, RemoteEnv

    env = RemoteEnv(url, ENV_ID, timeout=60.0)
    while time.time() < start_at:
        time.sleep(0.001)
    steps, errors, latencies, seed = 0, 0, [], 0
    end = start_at + seconds
    try:
        while time.time() < end:
            env.reset(seed=seed)
            seed += 1
            done = False
            while not done and time.time() < end:
                t0 = time.perf_counter()
                try:
                    _, _, terminated, truncated, _ = env.step(ACTION)
                except EnvServerError:
                    errors += 1
                    break
                latencies.append(time.perf_counter() - t0)
                steps += 1
                done = terminated or truncated
    finally:
        env.close()
    out.put({"steps": steps, "errors": errors, "latencies": latencies})


def run_round(url: str, clients: int, seconds: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 3.0 + 0.3 * clients  # every client connected and waiting before the clock starts
    procs = [ctx.Process(target=client, args=(url, seconds, start_at, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    latencies = sorted(x for r in results for x in r["latencies"])
    steps = sum(r["steps"] for r in results)

    def pct(q: float) -> float:
        return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else 0.0

    return {"steps": steps, "steps_per_s": round(steps / seconds, 1), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "errors": sum(r["errors"] for r in results)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    import agentgym.serving.server
    from agentgym.serving.server import ServerProcess

    with ServerProcess(env_ids=[ENV_ID]) as server:
        rounds = [run_round(server.url, args.clients, args.seconds) for _ in range(args.rounds)]
    print(json.dumps({"server": agentgym.serving.server.__file__, "clients": args.clients, "seconds": args.seconds,
                      "rounds": rounds}))  # fmt: skip


if __name__ == "__main__":
    main()
