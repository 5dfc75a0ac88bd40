"""Env pools: env steps/s through SerialPool, ThreadPool and RayPool in the same run, and RayPool's scaling curve.

Run by hand (not a test; needs Ray: pip install 'agentgym-suite[ray]')::

    python bench/bench_pools.py                 # about 2 minutes on 2 cores
    python bench/bench_pools.py --quick         # about 1 minute
    python bench/bench_pools.py --out reports/pools --actors 1 2 4 8 16

1. **Overhead.** ``--slots`` envs of Household-v0 and of SearchQA-v0 (``small`` preset, BM25) are stepped for
   ``--seconds`` each through every pool, asynchronously as a trainer or ``EnvPool.play`` would: each slot's next
   call is submitted as soon as ``collect`` returns its outcome. Actions cycle through a fixed list (SearchQA: two
   searches and an answer; Household: eight commands, some invalid, until the 50-turn limit), and an ended episode
   is reset, so every pool does the same work. ``bare`` steps the same envs in a plain loop in this process (no
   pool): the ceiling. Printed: steps/s, the ratio to SerialPool, and each pool's cost per step beyond bare.
2. **Scaling.** A simulated slow env takes ``--delay`` s per step, either sleeping (I/O-bound: a sandbox, a remote
   retriever or simulator) or spinning the CPU for that much CPU time (CPU-bound), on 1, 2, 4, ... Ray actors;
   each actor reserves ``min(1, cores / actors)`` CPUs so that all of them are placed. Speed-up = steps/s over
   1 actor's. Sleeping envs scale with the actors (a sleeping actor holds no core), spinning ones until the cores
   run out.

Writes ``bench_pools.json`` and ``scaling.png`` under ``--out`` and prints both tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.env import AgentEnv, StepResult
from agentgym.running.pool import EnvPool, RayPool, SerialPool, ThreadPool

HOUSEHOLD_ACTIONS = ["look", "inventory", "go to countertop 1", "examine countertop 1", "go to cabinet 1",
                     "open cabinet 1", "go to fridge 1", "open fridge 1"]  # fmt: skip
SEARCH_ACTIONS = ["<search> who founded the company </search>", "<search> where was the founder born </search>",
                  "<answer> Fort Nastuk </answer>"]  # fmt: skip
ENVS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "Household-v0": ("agentgym/Household-v0", {}, HOUSEHOLD_ACTIONS),
    "SearchQA-v0": ("agentgym/SearchQA-v0", {"dataset": "small"}, SEARCH_ACTIONS),
}
SLOW = "bench/Slow-v0"


class SlowEnv(AgentEnv):
    """Takes ``delay`` seconds per step: sleeping (``mode="sleep"``) or spinning the CPU for ``delay`` seconds of CPU
    time (``mode="spin"``)."""

    num_tasks = 1

    def __init__(self, *, delay: float = 0.02, mode: str = "sleep", max_turns: int = 1000):
        super().__init__(max_turns=max_turns)
        self.delay, self.mode = delay, mode

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"role": "user", "content": "wait"}], {"gold": {}}

    def _step(self, action: str) -> StepResult:
        if self.mode == "sleep":
            time.sleep(self.delay)
        else:  # CPU time, not wall time: a descheduled spinner still owes its full share of work
            end = time.thread_time() + self.delay
            while time.thread_time() < end:
                pass
        return StepResult([{"role": "user", "content": f"done {self.turn}"}])


def drive(pool: EnvPool, actions: list[str], seconds: float) -> tuple[int, float]:
    """Step every slot of ``pool`` for ``seconds`` (reset when an episode ends); returns (steps, elapsed)."""
    turn = [0] * len(pool)
    for slot in range(len(pool)):
        pool.submit_reset(slot, seed=slot)
    steps, start = 0, time.perf_counter()
    end = start + seconds
    while pool.in_flight:
        for out in pool.collect():
            if out.error is not None:
                raise RuntimeError(out.error)
            if out.kind == "step":
                steps += 1
            if time.perf_counter() >= end:
                continue
            if out.done:
                pool.submit_reset(out.slot)
            else:
                pool.submit_step(out.slot, actions[turn[out.slot] % len(actions)])
                turn[out.slot] += 1
    return steps, time.perf_counter() - start


def bare(env_id: str, kwargs: dict[str, Any], n: int, actions: list[str], seconds: float) -> tuple[int, float]:
    """The same work without a pool: ``n`` envs stepped round-robin in a plain loop."""
    envs = [gym.make(env_id, **kwargs) for _ in range(n)]
    for slot, env in enumerate(envs):
        env.reset(seed=slot)
    turn, steps, start = [0] * n, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for slot, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(actions[turn[slot] % len(actions)])
            turn[slot] += 1
            steps += 1
            if terminated or truncated:
                env.reset()
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    return steps, elapsed


def overhead(args: argparse.Namespace, cores: int) -> list[dict[str, Any]]:
    rows = []
    for name, (env_id, kwargs, actions) in ENVS.items():
        steps, elapsed = bare(env_id, kwargs, args.slots, actions, args.seconds)
        rows.append({"env": name, "pool": "bare (no pool)", "steps_per_s": steps / elapsed})
        makers = {
            "SerialPool": lambda env_id=env_id, kwargs=kwargs: SerialPool(env_id, args.slots, env_kwargs=kwargs),
            "ThreadPool": lambda env_id=env_id, kwargs=kwargs: ThreadPool(env_id, args.slots, env_kwargs=kwargs),
            "RayPool": lambda env_id=env_id, kwargs=kwargs: RayPool(
                env_id, args.slots, env_kwargs=kwargs, num_cpus=min(1.0, cores / args.slots)
            ),
        }
        for label, make in makers.items():
            with make() as pool:
                drive(pool, actions, min(1.0, args.seconds))  # warm-up (first calls, caches)
                steps, elapsed = drive(pool, actions, args.seconds)
            rows.append({"env": name, "pool": label, "steps_per_s": steps / elapsed})
        ceiling = rows[-4]["steps_per_s"]
        serial = rows[-3]["steps_per_s"]
        for row in rows[-4:]:
            row["vs_serial"] = row["steps_per_s"] / serial
            row["us_per_step_over_bare"] = 1e6 * (1 / row["steps_per_s"] - 1 / ceiling)
    return rows


def scaling(args: argparse.Namespace, cores: int) -> list[dict[str, Any]]:
    if SLOW not in gym.registry:
        gym.register(SLOW, entry_point=SlowEnv)  # a class of __main__: Ray ships it to the actors by value
    rows = []
    for mode in ("sleep", "spin"):
        base = None
        for n in args.actors:
            kwargs = {"delay": args.delay, "mode": mode}
            with RayPool(SLOW, n, env_kwargs=kwargs, num_cpus=min(1.0, cores / n)) as pool:
                drive(pool, ["x"], 0.3)
                steps, elapsed = drive(pool, ["x"], args.seconds)
            rate = steps / elapsed
            base = base or rate
            ideal = n if mode == "sleep" else min(n, cores)
            rows.append({"mode": mode, "actors": n, "steps_per_s": rate, "speedup": rate / base, "ideal": ideal})
    return rows


def plot(rows: list[dict[str, Any]], cores: int, delay: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for mode, color, label in (("sleep", "tab:blue", "sleeping env (I/O-bound)"), ("spin", "tab:red", "spinning env")):
        part = [r for r in rows if r["mode"] == mode]
        xs = [r["actors"] for r in part]
        ax.plot(xs, [r["speedup"] for r in part], "o-", color=color, label=f"{label}, measured")
        ax.plot(xs, [r["ideal"] for r in part], ":", color=color, label=f"{label}, ideal")
    ax.axvline(cores, color="grey", lw=0.8, ls="--")
    ax.text(cores, 1, f" {cores} cores", color="grey", va="bottom")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("Ray actors (one env each)")
    ax.set_ylabel("speed-up over 1 actor (env steps/s)")
    ax.set_title(f"RayPool scaling: {1000 * delay:.0f} ms per step")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=4, help="envs per pool in the overhead table")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per row")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per step of the slow env")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--quick", action="store_true", help="2 s per row")
    parser.add_argument("--out", default="reports/pools")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 2.0
    import ray

    cores = os.cpu_count() or 1
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        table = overhead(args, cores)
        curve = scaling(args, cores)
    finally:
        ray.shutdown()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot(curve, cores, args.delay, out / "scaling.png")
    machine = {"cores": cores, "python": platform.python_version(), "ray": ray.__version__, "slots": args.slots}
    record = {"machine": machine, "overhead": table, "scaling": curve}
    (out / "bench_pools.json").write_text(json.dumps(record, indent=1))

    print(f"\n{cores} cores, {args.slots} slots per pool, asynchronous stepping, {args.seconds:.0f} s per row\n")
    print("| env | pool | steps/s | vs SerialPool | µs per step beyond bare |")
    print("|---|---|---:|---:|---:|")
    for r in table:
        print(f"| {r['env']} | {r['pool']} | {r['steps_per_s']:,.0f} | {r['vs_serial']:.2f}x | "
              f"{r['us_per_step_over_bare']:,.0f} |")  # fmt: skip
    print(f"\nRayPool scaling, {1000 * args.delay:.0f} ms per step (speed-up over 1 actor; ideal in brackets)\n")
    print("| actors | CPUs per actor | sleeping env steps/s | speed-up | spinning env steps/s | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.actors:
        s, c = ({r["mode"]: r for r in curve if r["actors"] == n}[m] for m in ("sleep", "spin"))
        print(f"| {n} | {min(1.0, cores / n):.3g} | {s['steps_per_s']:,.0f} | {s['speedup']:.2f}x ({s['ideal']}) | "
              f"{c['steps_per_s']:,.0f} | {c['speedup']:.2f}x ({c['ideal']}) |")  # fmt: skip
    print(f"\nwrote {out / 'bench_pools.json'} and {out / 'scaling.png'}")


if __name__ == "__main__":
    main()
