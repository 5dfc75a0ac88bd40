"""SQL-v0 speed: steps per second and reset time, per built-in agent, on one process.

Run by hand (not a test)::

    python bench/bench_sql.py                 # about 10 s
    python bench/bench_sql.py --episodes 2000

Each row plays ``--episodes`` episodes (every reset draws a new task, so database building and question generation
are included whenever an episode reaches a database not yet cached) with one built-in agent, and reports env steps
per wall second counting only the env's ``reset`` and ``step`` (the agent's time is excluded), the median reset, and
the agent's success rate. The ``hostile`` row submits a recursive-CTE bomb every step (each one runs to the step
budget): the worst case of a step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.sql.env import SQLEnv

BOMB = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"


def measure(agent_name: str | None, episodes: int) -> dict[str, float]:
    env = SQLEnv()
    agent = SQLEnv.agents[agent_name]() if agent_name else None
    steps, env_time, resets, wins = 0, 0.0, [], 0
    rng = np.random.default_rng(0)
    for ep in range(episodes):
        index = int(rng.integers(env.num_tasks))
        t0 = time.perf_counter()
        obs, info = env.reset(seed=ep, options={"task_index": index})
        resets.append(time.perf_counter() - t0)
        env_time += resets[-1]
        messages = list(obs)
        if agent is not None:
            agent.reset(seed=ep)
        done = False
        while not done:
            if agent is None:
                action = f"<tool_call>{json.dumps({'name': 'run_query', 'arguments': {'sql': BOMB}})}</tool_call>"
            else:
                action = agent.act(messages, info)
            messages.append({"role": "assistant", "content": action})
            t0 = time.perf_counter()
            obs, _, term, trunc, info = env.step(action)
            env_time += time.perf_counter() - t0
            steps += 1
            messages += obs
            done = term or trunc
        wins += bool(info.get("success"))
    env.close()
    return {"steps_per_s": steps / env_time, "reset_ms_p50": 1e3 * statistics.median(resets),
            "success": wins / episodes, "steps": steps}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=500)
    args = parser.parse_args()
    print("| agent | steps/s | reset p50 (ms) | success | steps |")
    print("|---|---:|---:|---:|---:|")
    for name in ("oracle", "heuristic", "random", None):
        episodes = args.episodes if name else max(1, args.episodes // 50)
        r = measure(name, episodes)
        print(f"| {name or 'hostile (CTE bomb each step)'} | {r['steps_per_s']:,.0f} | {r['reset_ms_p50']:.2f} | "
              f"{r['success']:.3f} | {r['steps']} |")  # fmt: skip


if __name__ == "__main__":
    main()
