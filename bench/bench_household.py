"""Household-v0 speed and memory, with TextWorld measured side by side in the same run.

Run by hand (not a test)::

    python bench/bench_household.py              # about 2 minutes (includes tw-make, ~10 s)
    python bench/bench_household.py --quick      # about 30 s
    python bench/bench_household.py --tw-game games/g.z8 --out reports/household.json

Throughput is measured on one core (the process is pinned to one CPU) under the random-admissible policy: every
step the agent picks uniformly among ``info["admissible_commands"]``, so every step pays for generating them.
Episodes run to the 50-step limit and every reset draws a new task (task generation is included). The rows
are interleaved over ``--rounds`` rounds and the median is reported, as steps per wall second and per CPU
second of this process (the latter is robust to other load on the machine):

* ``engine``: ``Engine.step`` + ``admissible`` + ``anchor`` alone (the ceiling),
* ``Household-v0``: ``AgentEnv.step`` with the built-in ``random`` agent (plain prompt; the headline), the
  ``verl`` prompt, ``expert_plan=True`` (a planner call whenever the agent leaves the plan), and
  ``gymnasium.make``'s wrapped env,
* ``TextWorld``: ``textworld.start`` on a ``tw-make`` game (5 rooms, 10 objects, quest length 5) with
  admissible commands requested, and the same game through our ``TextWorld-v0`` adapter.

Memory: RSS growth of a fresh process holding ``--envs`` live Household envs (each reset once). Success: each
built-in agent on the first ``--episodes`` tasks of every split (at most 140 / 134 for the validation splits),
by task type.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.household.agents import RandomAgent
from agentgym.envs.household.engine import Engine
from agentgym.envs.household.env import HouseholdEnv
from agentgym.envs.household.world import SPLIT_SIZES, SPLITS, generate_task
from agentgym.running.runner import run, summarize

Measure = Callable[[float], tuple[int, float, float]]
SHORT = {"pick_and_place_simple": "simple", "look_at_obj_in_light": "light", "pick_clean_then_place_in_recep": "clean",
         "pick_heat_then_place_in_recep": "heat", "pick_cool_then_place_in_recep": "cool",
         "pick_two_obj_and_place": "two"}  # fmt: skip


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def timed(loop: Callable[[Callable[[], bool]], int], seconds: float) -> tuple[int, float, float]:
    """Run ``loop(keep_going)`` for about ``seconds``; returns (steps, wall s, cpu s)."""
    w0, c0 = time.perf_counter(), time.process_time()
    deadline = w0 + seconds
    steps = loop(lambda: time.perf_counter() < deadline)
    return steps, time.perf_counter() - w0, time.process_time() - c0


def env_loop(env: gym.Env, seed: int = 0) -> Measure:
    agent = RandomAgent()
    state = {"episode": seed}

    def loop(keep_going: Callable[[], bool]) -> int:
        steps = 0
        while keep_going():
            ep = state["episode"] = state["episode"] + 1
            obs, info = env.reset(seed=ep)
            agent.reset(seed=ep)
            while True:
                obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
                steps += 1
                if terminated or truncated:
                    break
        return steps

    return lambda seconds: timed(loop, seconds)


def engine_loop(seed: int = 0) -> Measure:
    rng = random.Random(seed)
    state = {"episode": seed}

    def loop(keep_going: Callable[[], bool]) -> int:
        steps = 0
        while keep_going():
            state["episode"] += 1
            eng = Engine(generate_task("valid_seen", state["episode"] % 140))
            for _ in range(50):
                adm = eng.admissible()
                eng.step(adm[int(rng.random() * len(adm))])
                eng.anchor()
                steps += 1
                if eng.won:
                    break
        return steps

    return lambda seconds: timed(loop, seconds)


def textworld_loop(game: str, seed: int = 0) -> Measure:
    import textworld

    infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True)
    env = textworld.start(game, request_infos=infos)
    rng = random.Random(seed)

    def loop(keep_going: Callable[[], bool]) -> int:
        steps = 0
        while keep_going():
            state = env.reset()
            for _ in range(50):
                adm = state["admissible_commands"]
                state, _, done = env.step(adm[int(rng.random() * len(adm))])
                steps += 1
                if done:
                    break
        return steps

    return lambda seconds: timed(loop, seconds)


def make_tw_game(folder: str) -> str | None:
    tw_make = shutil.which("tw-make", path=os.path.dirname(sys.executable)) or shutil.which("tw-make")
    if tw_make is None:
        return None
    path = os.path.join(folder, "tw_5rooms.z8")
    cmd = [tw_make, "custom", "--world-size", "5", "--nb-objects", "10", "--quest-length", "5", "--seed", "1234",
           "--output", path, "--silent"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True)
    return path if out.returncode == 0 and os.path.exists(path) else None


def memory_per_env(n: int) -> dict[str, float]:
    """RSS growth for ``n`` live envs, measured in a fresh interpreter."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import gc, json, sys; sys.path.insert(0, {here!r}); import bench_household as b;"
        "from agentgym.envs.household.env import HouseholdEnv;"
        "e = HouseholdEnv(); e.reset(seed=0); gc.collect(); r0 = b.rss_bytes(); envs = []\n"
        f"for i in range({n}):\n    env = HouseholdEnv(); env.reset(seed=i); envs.append(env)\n"
        "gc.collect(); print(json.dumps({'envs': len(envs), 'rss_growth_mb': (b.rss_bytes() - r0) / 2**20}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["kb_per_env"] = result["rss_growth_mb"] * 1024 / n
    return result


def success_table(episodes: int, seed: int) -> list[dict[str, Any]]:
    """Each agent on the first ``episodes`` tasks of each split (at most the split's size: 140 / 134 for the
    validation splits, as in ALFWorld)."""
    rows = []
    for split in SPLITS:
        n = min(episodes, SPLIT_SIZES[split])
        for agent in HouseholdEnv.agents:
            trajs = run("agentgym/Household-v0", agent, n, seed=seed, env_kwargs={"split": split}, progress=False)
            rows += [
                {"split": split, "agent": agent, "task_type": row["category"], "episodes": row["episodes"],
                 "success": row["success"], "turns": row["turns"]}
                for row in summarize(trajs)
            ]  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="per row and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--envs", type=int, default=10_000, help="live envs for the memory figure")
    parser.add_argument("--episodes", type=int, default=300, help="episodes per split and agent for success")
    parser.add_argument("--tw-game", default=None, help="a TextWorld game (default: make one with tw-make)")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU (default: the current one)")
    parser.add_argument("--quick", action="store_true", help="1 s rows, 3 rounds, 2,000 envs, 60 episodes")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.envs, args.episodes = 1.0, 3, 2_000, 60
    if hasattr(os, "sched_setaffinity"):
        cpu = args.cpu if args.cpu is not None else sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {cpu})

    rows: dict[str, Measure] = {
        "engine (step + admissible + anchor)": engine_loop(),
        "Household-v0 (random agent, plain)": env_loop(HouseholdEnv()),
        "Household-v0 (random agent, verl prompt)": env_loop(HouseholdEnv(prompt="verl")),
        "Household-v0 (expert_plan=True)": env_loop(HouseholdEnv(expert_plan=True)),
        "Household-v0 via gymnasium.make": env_loop(gym.make("agentgym/Household-v0")),
    }
    tmp = tempfile.mkdtemp(prefix="bench_household_")
    game = args.tw_game
    tw_note = ""
    try:
        import textworld  # noqa: F401

        if game is None:
            game = make_tw_game(tmp)
            tw_note = "" if game else "tw-make failed; TextWorld rows skipped"
    except ImportError:
        game, tw_note = None, "textworld is not installed (pip install textworld); TextWorld rows skipped"
    if game:
        rows["TextWorld (textworld.start + admissible)"] = textworld_loop(game)
        tw_adapter = gym.make("agentgym/TextWorld-v0", game_file=game, expert_plan=False).unwrapped
        rows["TextWorld-v0 adapter (random agent)"] = env_loop(tw_adapter)

    for measure in rows.values():  # warm-up: imports, caches, JIT-free but first-call costs
        measure(0.2)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, measure in rows.items():
            steps, wall, cpu = measure(args.seconds)
            samples[name].append((steps / wall, steps / max(cpu, 1e-9)))
    results: dict[str, Any] = {"throughput": {}, "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()}
    for name, vals in samples.items():
        results["throughput"][name] = {
            "steps_per_s_wall": statistics.median(v[0] for v in vals),
            "steps_per_s_cpu": statistics.median(v[1] for v in vals),
        }

    print(f"Throughput on one core, random-admissible policy, median of {args.rounds} rounds x {args.seconds:g} s "
          f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")  # fmt: skip
    print(f"{'':46}{'steps/s (wall)':>16}{'steps/s (cpu)':>16}")
    for name, r in results["throughput"].items():
        print(f"{name:46}{r['steps_per_s_wall']:>16,.0f}{r['steps_per_s_cpu']:>16,.0f}")
    tw = results["throughput"].get("TextWorld (textworld.start + admissible)")
    if tw:
        hh = results["throughput"]["Household-v0 (random agent, plain)"]
        results["ratio_vs_textworld"] = {k: hh[k] / tw[k] for k in ("steps_per_s_wall", "steps_per_s_cpu")}
        adapter = results["throughput"]["TextWorld-v0 adapter (random agent)"]
        results["ratio_vs_textworld_adapter"] = hh["steps_per_s_cpu"] / adapter["steps_per_s_cpu"]
        print(f"Household-v0 / TextWorld: {results['ratio_vs_textworld']['steps_per_s_wall']:,.0f}x (wall), "
              f"{results['ratio_vs_textworld']['steps_per_s_cpu']:,.0f}x (cpu); "
              f"/ TextWorld-v0 adapter: {results['ratio_vs_textworld_adapter']:,.0f}x (cpu)")  # fmt: skip
    elif tw_note:
        print(tw_note)

    mem = memory_per_env(args.envs)
    results["memory"] = mem
    print(f"Memory: {mem['envs']:,} live Household-v0 envs add {mem['rss_growth_mb']:,.0f} MB RSS "
          f"({mem['kb_per_env']:.1f} KB per env)")  # fmt: skip

    table = success_table(args.episodes, seed=0)
    results["success"] = table
    sizes = ", ".join(f"{s} {min(args.episodes, SPLIT_SIZES[s])}" for s in SPLITS)
    print(f"\nSuccess by task type (tasks per split: {sizes}; 50-step limit)")
    types = list(dict.fromkeys(r["task_type"] for r in table))
    print(f"{'split':14}{'agent':11}" + "".join(f"{SHORT.get(t, t):>9}" for t in types))
    for split in SPLITS:
        for agent in HouseholdEnv.agents:
            cells = {r["task_type"]: r for r in table if r["split"] == split and r["agent"] == agent}
            print(f"{split:14}{agent:11}" + "".join(f"{cells[t]['success']:>9.3f}" for t in types if t in cells))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
