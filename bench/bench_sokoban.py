"""Sokoban-v0 speed against gym-sokoban and GEM, measured in the same run.

Run by hand (not a test)::

    python bench/bench_sokoban.py                                   # Sokoban-v0 and the naive baseline only
    python -m venv /tmp/peers && /tmp/peers/bin/pip install gym-sokoban gem-llm
    python bench/bench_sokoban.py --peer-python /tmp/peers/bin/python --out reports/sokoban.json

Per size (``levels.PRESETS``): the one-time build of a ``--levels``-room set (generation by reverse play plus the
exact solver's distance table of every room); ``reset`` p50 / p95 over ``--resets`` resets on random tasks (a lookup
in the built set); steps/s of ``env.step`` under uniformly random moves in ``<answer>`` tags, made before the clock
starts (episodes reset when they end; the clock runs over each run of steps between resets, so only step calls and
the loop around them are timed, the same loop for every env); and a naive baseline that generates and solves a fresh
room at every reset (``levels.generate_room``). Sokoban-v0 is measured three times: one env for the whole run (it
keeps the states it has shown, so a state it meets again costs a lookup), the same env playing the same moves again
(every state known), and a fresh env for every episode (no state carried over from an earlier episode). The peers run
in ``--peer-python`` (a separate venv: gym-sokoban needs the old ``gym``) with the same sizes and the same loop:
gym-sokoban's ``SokobanEnv(dim_room, num_boxes)`` (its default ``rgb_array`` observation, integer actions) and GEM's
``SokobanEnv(dim_room, num_boxes)`` (text, ``\\boxed{up}`` actions); a peer's resets stop after ``--peer-budget``
seconds a size (at least 3), and its step limit is lifted for the steps/s loop so that only solved rooms reset.
``--think-chars N`` puts N characters of reasoning before each text answer (ours and GEM's). ``--clock cpu`` (the
default) reads the process's CPU time, which other processes on a shared machine do not inflate; ``--clock wall``
reads wall time. One process, one thread, numbers on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from agentgym.envs.sokoban.env import LEVEL_CACHE, SokobanEnv
from agentgym.envs.sokoban.levels import PRESETS, generate_room

WORDS = ("Up", "Down", "Left", "Right")
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}

PEER = r"""
import json, sys, time, random, statistics, warnings
warnings.filterwarnings("ignore")
sizes, steps, budget = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
clock, think = {"cpu": time.process_time, "wall": time.perf_counter}[sys.argv[4]], sys.argv[5]
out = {}
def resets_of(env, reset):
    t0, resets = time.perf_counter(), []
    while len(resets) < 3 or (time.perf_counter() - t0 < budget and len(resets) < 200):
        t = clock(); reset(env); resets.append(clock() - t)
    return {"reset_p50_ms": 1e3 * statistics.median(resets), "resets": len(resets)}
for name, (h, w, b) in sizes.items():
    row = {}
    rng = random.Random(0)
    moves = [rng.randrange(4) for _ in range(steps)]
    try:
        from gym_sokoban.envs.sokoban_env import SokobanEnv as GS
        def gs_reset(env):
            for _ in range(20):
                try:
                    return env.reset()
                except (RuntimeError, RuntimeWarning):
                    pass
        env = GS(dim_room=(h, w), num_boxes=b, max_steps=10**9, reset=False)
        row["gym-sokoban"] = resets_of(env, gs_reset)
        actions, n, spent, r = [a + 1 for a in moves], 0, 0.0, None
        gs_reset(env)
        while n < steps:  # the loop of bench_sokoban.run_steps (gym's 4-tuple: done is r[2])
            t = clock()
            while n < steps:
                r = env.step(actions[n]); n += 1
                if r[2] or (len(r) > 4 and r[3]):
                    break
            spent += clock() - t
            if r[2] or (len(r) > 4 and r[3]):
                gs_reset(env)
        row["gym-sokoban"]["steps_per_s"] = n / spent
    except Exception as e:
        row["gym-sokoban"] = {"error": repr(e)[:200]}
    try:
        from gem.envs.game_env.sokoban.sokoban import SokobanEnv as GEM
        words = ["up", "down", "left", "right"]
        env = GEM(dim_room=(h, w), num_boxes=b, max_turns=10**9)
        row["gem"] = resets_of(env, lambda e: e.reset())
        actions, n, spent, r = [think + "\\boxed{" + words[a] + "}" for a in moves], 0, 0.0, None
        env.reset()
        while n < steps:  # the loop of bench_sokoban.run_steps
            t = clock()
            while n < steps:
                r = env.step(actions[n]); n += 1
                if r[2] or r[3]:
                    break
            spent += clock() - t
            if r[2] or r[3]:
                env.reset()
        row["gem"]["steps_per_s"] = n / spent
    except Exception as e:
        row["gem"] = {"error": repr(e)[:200]}
    out[name] = row
print("PEER-RESULTS " + json.dumps(out))
"""


def reasoning(chars: int) -> str:
    """``chars`` characters of ASCII reasoning to put before an answer (empty for 0)."""
    if chars <= 0:
        return ""
    filler = ("I look at the grid: the box is next to the wall, so I walk around it first. " * (chars // 40 + 1))[
        : max(chars - 17, 0)
    ]
    return f"<think>{filler}</think>"


def run_steps(
    make: Callable[[], SokobanEnv], levels: int, moves: list[str], rng: np.random.Generator, clock: Callable[[], float],
    fresh: bool,
) -> float:  # fmt: skip
    """Steps/s of ``moves`` played in order; a new env from ``make`` for each episode when ``fresh``."""
    env = make()
    env.reset(options={"task_index": 0})
    n, spent, total, r = 0, 0.0, len(moves), None
    while n < total:
        step = env.step
        t = clock()
        while n < total:
            r = step(moves[n])
            n += 1
            if r[2] or r[3]:
                break
        spent += clock() - t
        if r is not None and (r[2] or r[3]):
            if fresh:
                env = make()
            env.reset(options={"task_index": int(rng.integers(levels))})
    return n / spent


def ours(size: str, levels: int, resets: int, steps: int, clock: Callable[[], float], think: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    env = SokobanEnv(size=size, num_levels=levels)
    build = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    times = []
    for _ in range(resets):
        i = int(rng.integers(levels))
        t = clock()
        env.reset(options={"task_index": i})
        times.append(clock() - t)
    moves = [f"{think}<answer>{WORDS[int(a)]}</answer>" for a in rng.integers(4, size=steps)]
    times.sort()
    out = {"build_s": build, "reset_p50_ms": 1e3 * statistics.median(times),
           "reset_p95_ms": 1e3 * times[int(0.95 * (len(times) - 1))]}  # fmt: skip

    def make() -> SokobanEnv:
        return SokobanEnv(size=size, num_levels=levels)

    shared = make()
    out["steps_per_s"] = run_steps(lambda: shared, levels, moves, np.random.default_rng(1), clock, fresh=False)
    again = run_steps(lambda: shared, levels, moves, np.random.default_rng(1), clock, fresh=False)
    fresh = run_steps(make, levels, moves, np.random.default_rng(1), clock, fresh=True)
    return {"Sokoban-v0": out, "Sokoban-v0, fresh env per episode": {"steps_per_s": fresh},
            "Sokoban-v0, the same moves again": {"steps_per_s": again}}  # fmt: skip


def naive(size: str, count: int, clock: Callable[[], float]) -> dict[str, Any]:
    h, w, b = PRESETS[size]
    times = []
    for i in range(count):
        t = clock()
        generate_room(h, w, b, 12345, i)
        times.append(clock() - t)
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
    ap.add_argument("--think-chars", type=int, default=0, help="reasoning before each text answer (ours and GEM's)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    clock, think = CLOCKS[args.clock], reasoning(args.think_chars)
    rows: dict[str, dict[str, Any]] = {}
    for size in args.sizes:
        rows[size] = {**ours(size, args.levels, args.resets, args.steps, clock, think),
                      "naive (generate per reset)": naive(size, args.naive_resets, clock)}  # fmt: skip
        print(json.dumps({size: rows[size]}), flush=True)
    LEVEL_CACHE.clear()
    if args.peer_python:
        sizes = {s: PRESETS[s] for s in args.sizes}
        proc = subprocess.run([args.peer_python, "-c", PEER, json.dumps(sizes), str(args.peer_steps),
                               str(args.peer_budget), args.clock, think], capture_output=True, text=True,
                              check=True)  # fmt: skip
        line = next(x for x in proc.stdout.splitlines() if x.startswith("PEER-RESULTS "))  # gym prints to stdout too
        for size, peers in json.loads(line.split(" ", 1)[1]).items():
            rows[size].update(peers)
    print(f"clock: {args.clock}; reasoning before each text answer: {len(think)} characters")
    print("| size | env | reset p50 (ms) | steps/s | Sokoban-v0 / it | Sokoban-v0 fresh env per episode / it |")
    print("|---|---|---|---|---|---|")
    for size, envs in rows.items():
        mine, cold = envs["Sokoban-v0"]["steps_per_s"], envs["Sokoban-v0, fresh env per episode"]["steps_per_s"]
        for name, r in envs.items():
            if "error" in r:
                print(f"| {size} | {name} | error: {r['error']} | | | |")
                continue
            sps = r.get("steps_per_s")
            reset = f"{r['reset_p50_ms']:.3f}" if "reset_p50_ms" in r else ""
            ratios = f"{mine / sps:.1f}x | {cold / sps:.1f}x" if sps else " | "
            print(f"| {size} | {name} | {reset} | {f'{sps:,.0f}' if sps else ''} | {ratios} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"argv": sys.argv[1:], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
