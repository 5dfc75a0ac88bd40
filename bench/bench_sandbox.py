"""Sandbox overhead: ``print(1)`` latency per back-end against a plain ``subprocess.run([python, "-c", ...])``
measured in the same run.

Run by hand (not a test)::

    python bench/bench_sandbox.py               # about 20 s
    python bench/bench_sandbox.py --calls 50    # quicker

Rows: ``plain`` (``subprocess.run([sys.executable, "-c", "print(1)"])``, no isolation at all), ``subprocess``
(``SubprocessSandbox``: a fresh interpreter per call + namespaces, private /tmp, rlimits) and ``pooled``
(``PooledSandbox``: a warm fork server forks a fresh isolated process per call). Latency rounds are interleaved
(one call of each row per round) so load on the machine hits them alike; p50 and p99 in ms. Throughput: calls/s
with 2 client threads (the pool has 2 workers). Ratios are to ``plain``. Target: pooled p50 <= 15 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from agentgym.tools.sandbox import PooledSandbox, SubprocessSandbox

CODE = "print(1)"


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def throughput(call: Callable[[], object], n: int, workers: int = 2) -> float:
    with ThreadPoolExecutor(workers) as pool:
        t = time.perf_counter()
        list(pool.map(lambda _: call(), range(n)))
        return n / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="latency rounds (one call of each row per round)")
    args = parser.parse_args()

    sub = SubprocessSandbox()
    pooled = PooledSandbox(workers=2)

    def plain() -> object:
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
        assert out.stdout == "1\n"
        return out

    def check(box):
        def call() -> object:
            r = box.run(CODE)
            assert r.stdout == "1\n", r
            return r

        return call

    rows: dict[str, Callable[[], object]] = {"plain": plain, "subprocess": check(sub), "pooled": check(pooled)}
    try:
        for call in rows.values():  # warm up (the pool starts its servers)
            for _ in range(3):
                call()
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.calls):
            for name, call in rows.items():
                t = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t)
        rates = {name: throughput(call, max(args.calls // 2, 10)) for name, call in rows.items()}
    finally:
        pooled.close()

    base = statistics.median(times["plain"])
    print(f"{'back-end':<12}{'p50 ms':>9}{'p99 ms':>9}{'calls/s (2)':>13}{'p50 / plain':>13}")
    for name in rows:
        p50, p99 = statistics.median(times[name]), percentile(times[name], 0.99)
        print(f"{name:<12}{p50 * 1e3:>9.1f}{p99 * 1e3:>9.1f}{rates[name]:>13.1f}{p50 / base:>13.2f}")
    print(f"pooled p50 target <= 15 ms: {'met' if statistics.median(times['pooled']) <= 0.015 else 'NOT met'}")


if __name__ == "__main__":
    main()
