"""Sokoban-v0 speed against gym-sokoban and GEM, measured in the same run.

Run by hand (not a test)::

    python bench/bench_sokoban.py                                   # Sokoban-v0 and the naive baseline only
    python -m venv /tmp/peers && /tmp/peers/bin/pip install gym-sokoban gem-llm
    python bench/bench_sokoban.py --peer-python /tmp/peers/bin/python --out reports/sokoban.json

Per size (``levels.PRESETS``): the one-time build of a ``--levels``-room set (generation by reverse play plus the
exact solver's distance table of every room); ``reset`` p50 / p95 over ``--resets`` resets on random tasks (a lookup
in the built set); steps/s of ``env.step`` under uniformly random moves in ``<answer>`` tags (episodes reset when
they end; only step calls are timed); and a naive baseline that generates and solves a fresh room at every reset
(``levels.generate_room``). The peers run in ``--peer-python`` (a separate venv: gym-sokoban needs the old ``gym``)
with the same sizes: gym-sokoban's ``SokobanEnv(dim_room, num_boxes)`` (its default ``rgb_array`` observation) and
GEM's ``SokobanEnv(dim_room, num_boxes)`` (text, ``\\boxed{up}`` actions); a peer's resets stop after ``--peer-budget``
seconds a size (at least 3), and its step limit is lifted for the steps/s loop so that only solved rooms reset.
One process, one thread, numbers on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from agentgym.envs.sokoban.env import LEVEL_CACHE, SokobanEnv
from agentgym.envs.sokoban.levels import PRESETS, generate_room

WORDS = ("Up", "Down", "Left", "Right")

PEER = r"""
import json, sys, time, random, statistics, warnings
warnings.filterwarnings("ignore")
sizes, steps, budget = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
out = {}
def measure(make, reset, step):
    env, t0, resets = make(), time.perf_counter(), []
    while len(resets) < 3 or (time.perf_counter() - t0 < budget and len(resets) < 200):
        t = time.perf_counter(); reset(env); resets.append(time.perf_counter() - t)
    rng, n, spent = random.Random(0), 0, 0.0
    reset(env)
    while n < steps:
        t = time.perf_counter(); done = step(env, rng.randrange(4)); spent += time.perf_counter() - t; n += 1
        if done:
            reset(env)
    return {"reset_p50_ms": 1e3 * statistics.median(resets), "resets": len(resets), "steps_per_s": n / spent}
for name, (h, w, b) in sizes.items():
    row = {}
    try:
        from gym_sokoban.envs.sokoban_env import SokobanEnv as GS
        def gs_reset(env):
            for _ in range(20):
                try:
                    return env.reset()
                except (RuntimeError, RuntimeWarning):
                    pass
        def gs_step(env, a):
            r = env.step(a + 1)
            return r[2] or (len(r) > 4 and r[3])
        make = lambda: GS(dim_room=(h, w), num_boxes=b, max_steps=10**9, reset=False)
        row["gym-sokoban"] = measure(make, gs_reset, gs_step)
    except Exception as e:
        row["gym-sokoban"] = {"error": repr(e)[:200]}
    try:
        from gem.envs.game_env.sokoban.sokoban import SokobanEnv as GEM
        words = ["up", "down", "left", "right"]
        def gem_step(env, a):
            r = env.step("\\boxed{" + words[a] + "}")
            return r[2] or r[3]
        row["gem"] = measure(lambda: GEM(dim_room=(h, w), num_boxes=b, max_turns=10**9), lambda e: e.reset(), gem_step)
    except Exception as e:
        row["gem"] = {"error": repr(e)[:200]}
    out[name] = row
print("PEER-RESULTS " + json.dumps(out))
"""


def ours(size: str, levels: int, resets: int, steps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    env = SokobanEnv(size=size, num_levels=levels)
    build = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    times = []
    for _ in range(resets):
        i = int(rng.integers(levels))
        t = time.perf_counter()
        env.reset(options={"task_index": i})
        times.append(time.perf_counter() - t)
    n, spent = 0, 0.0
    env.reset(options={"task_index": 0})
    moves = [f"<answer>{WORDS[int(a)]}</answer>" for a in rng.integers(4, size=steps)]
    while n < steps:
        t = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(moves[n])
        spent += time.perf_counter() - t
        n += 1
        if terminated or truncated:
            env.reset(options={"task_index": int(rng.integers(levels))})
    times.sort()
    return {"build_s": build, "reset_p50_ms": 1e3 * statistics.median(times),
            "reset_p95_ms": 1e3 * times[int(0.95 * (len(times) - 1))], "steps_per_s": n / spent}  # fmt: skip


def naive(size: str, count: int) -> dict[str, Any]:
    h, w, b = PRESETS[size]
    times = []
    for i in range(count):
        t = time.perf_counter()
        generate_room(h, w, b, 12345, i)
        times.append(time.perf_counter() - t)
    return {"reset_p50_ms": 1e3 * statistics.median(times), "resets": count}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", default=list(PRESETS))
    ap.add_argument("--levels", type=int, default=100)
    ap.add_argument("--resets", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--naive-resets", type=int, default=20)
    ap.add_argument("--peer-python", default=None, help="a Python with gym-sokoban and gem-llm installed")
    ap.add_argument("--peer-steps", type=int, default=5000)
    ap.add_argument("--peer-budget", type=float, default=20.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows: dict[str, dict[str, Any]] = {}
    for size in args.sizes:
        rows[size] = {"Sokoban-v0": ours(size, args.levels, args.resets, args.steps),
                      "naive (generate per reset)": naive(size, args.naive_resets)}  # fmt: skip
        print(json.dumps({size: rows[size]}), flush=True)
    LEVEL_CACHE.clear()
    if args.peer_python:
        sizes = {s: PRESETS[s] for s in args.sizes}
        proc = subprocess.run([args.peer_python, "-c", PEER, json.dumps(sizes), str(args.peer_steps),
                               str(args.peer_budget)], capture_output=True, text=True, check=True)  # fmt: skip
        line = next(x for x in proc.stdout.splitlines() if x.startswith("PEER-RESULTS "))  # gym prints to stdout too
        for size, peers in json.loads(line.split(" ", 1)[1]).items():
            rows[size].update(peers)
    print("| size | env | reset p50 (ms) | steps/s | steps/s ratio (ours / it) |")
    print("|---|---|---|---|---|")
    for size, envs in rows.items():
        mine = envs["Sokoban-v0"]["steps_per_s"]
        for name, r in envs.items():
            if "error" in r:
                print(f"| {size} | {name} | error: {r['error']} | | |")
                continue
            sps = r.get("steps_per_s")
            ratio = f"{mine / sps:.1f}x" if sps else ""
            print(f"| {size} | {name} | {r['reset_p50_ms']:.3f} | {f'{sps:,.0f}' if sps else ''} | {ratio} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"argv": sys.argv[1:], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
