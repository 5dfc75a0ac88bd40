"""Steps/s of ToolUse-v0 and BFCL-v0 on a normal workload, to check that bounding the tool worlds costs nothing.

The oracle plays N tasks of each ToolUse world and N BFCL tasks (its gold turns, prepared outside the timing), and the
random agent plays as many; only ``step`` is timed. Run it on two trees to compare them (the numbers depend on the
machine; run both on the same one, one after the other)::

    python bench/bench_bounded_worlds.py [--tasks 150] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.tool_use.agents import hermes


def plans(env: Any, tasks: int) -> list[list[str]]:
    """The oracle's actions for tasks ``0..tasks-1``: each gold turn's calls as one Hermes turn, or its reply."""
    out = []
    for i in range(tasks):
        _, info = env.reset(options={"task_index": i})
        out.append([hermes(t["calls"]) if t["calls"] else t["reply"] for t in info["gold"]["turns"]])
    return out


def oracle_rate(env: Any, actions: list[list[str]]) -> float:
    """Steps per second of ``step`` alone over every plan."""
    seconds, steps = 0.0, 0
    for i, plan in enumerate(actions):
        env.reset(options={"task_index": i})
        start = time.perf_counter()
        for action in plan:
            *_, terminated, truncated, _ = env.step(action)
            steps += 1
            if terminated or truncated:
                break
        seconds += time.perf_counter() - start
    return steps / seconds


def random_rate(env: Any, tasks: int) -> float:
    """Steps per second of ``step`` alone with the env's random agent."""
    agent = env.agents["random"]()
    seconds, steps = 0.0, 0
    for i in range(tasks):
        agent.reset(seed=i)
        obs, info = env.reset(options={"task_index": i})
        messages, done = list(obs), False
        while not done:
            action = agent.act(messages, info)
            start = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(action)
            seconds += time.perf_counter() - start
            steps += 1
            messages += [{"role": "assistant", "content": action}, *obs]
            done = terminated or truncated
    return steps / seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many passes")
    args = parser.parse_args(argv)
    rows: list[tuple[str, float]] = []
    for world in ("filesystem", "bank", "calendar"):
        env = gym.make("agentgym/ToolUse-v0", world=world, max_turns=20).unwrapped
        actions = plans(env, args.tasks)
        rows.append((f"ToolUse {world} oracle", max(oracle_rate(env, actions) for _ in range(args.repeats))))
        rows.append((f"ToolUse {world} random", max(random_rate(env, args.tasks) for _ in range(args.repeats))))
    env = gym.make("agentgym/BFCL-v0", max_turns=40).unwrapped
    if env.unavailable_reason is None:
        actions = plans(env, args.tasks)
        rows.append(("BFCL oracle", max(oracle_rate(env, actions) for _ in range(args.repeats))))
        rows.append(("BFCL random", max(random_rate(env, args.tasks) for _ in range(args.repeats))))
    for name, rate in rows:
        print(f"{name:28s} {rate:10,.0f} steps/s")


if __name__ == "__main__":
    main()
