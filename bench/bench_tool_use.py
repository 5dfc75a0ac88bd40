"""ToolUse-v0 throughput: env steps/s per world and call format, against calling the world's methods directly.

For each world, the oracle plays N tasks (every gold turn: tool-call turns and replies) with its turns written as
Hermes ``<tool_call>`` text and, in a second pass, as OpenAI assistant messages (JSON text); the random agent plays
the same tasks. The baseline replays the same gold calls straight on a fresh world object (no parsing, no schema
check, no copy-on-call, no state checks), so the ratio is what the env's contract costs per call ("us/call (env)"
is step time over calls, replies and their state checks included; resets, which generate the task and replay its
gold, are timed apart).

    python bench/bench_tool_use.py [--tasks 300]
"""

from __future__ import annotations

import argparse
import json
import time

from agentgym.agents.tool_calls import calls_message
from agentgym.envs.tool_use.agents import RandomAgent, hermes
from agentgym.envs.tool_use.env import ToolUseEnv
from agentgym.envs.tool_use.tasks import build_world, make_task, run_calls
from agentgym.envs.tool_use.worlds import WORLDS
from agentgym.running.runner import format_table


def gold_actions(env: ToolUseEnv, index: int, native: bool) -> list[str]:
    _, info = env.reset(options={"task_index": index})
    out = []
    for turn in info["gold"]["turns"]:
        action = hermes(turn["calls"]) if turn["calls"] else turn["reply"]
        out.append((calls_message(action) if native else None) or action)
    return out


def oracle_pass(world: str, tasks: int, native: bool) -> dict[str, float]:
    """Seconds in reset and in step, steps, calls and the success rate; actions are prepared outside the timing."""
    env = ToolUseEnv(world=world)
    plans = [gold_actions(env, i, native) for i in range(tasks)]
    out = {"reset_s": 0.0, "step_s": 0.0, "steps": 0, "calls": 0, "wins": 0}
    for i, plan in enumerate(plans):
        start = time.perf_counter()
        env.reset(options={"task_index": i})
        mid = time.perf_counter()
        for action in plan:
            _, _, terminated, _, info = env.step(action)
        out["step_s"] += time.perf_counter() - mid
        out["reset_s"] += mid - start
        out["steps"] += len(plan)
        out["calls"] += int(info["metrics"]["calls"])
        out["wins"] += bool(terminated and info["success"])
    return out


def random_pass(world: str, tasks: int) -> tuple[float, int]:
    env, agent = ToolUseEnv(world=world, max_turns=10), RandomAgent()
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
            messages += [{"role": "assistant", "content": action}, *obs]
            steps += 1
            done = terminated or truncated
    return seconds, steps


def direct_pass(world: str, tasks: int) -> tuple[float, int]:
    """The same gold calls on a bare world object: the floor the env's per-call cost is compared with."""
    records = [make_task(world, i) for i in range(tasks)]
    seconds, calls = 0.0, 0
    for task in records:
        start = time.perf_counter()
        w = build_world(task)
        for ins in task["instructions"]:
            run_calls(w, ins["calls"])
        seconds += time.perf_counter() - start
        calls += sum(len(ins["calls"]) for ins in task["instructions"])
    return seconds, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    rows = []
    for world in WORLDS:
        d_s, d_calls = direct_pass(world, args.tasks)
        per_direct = d_s / d_calls
        for native in (False, True):
            r = oracle_pass(world, args.tasks, native)
            rows.append({"world": world, "agent": "oracle", "format": "openai" if native else "hermes",
                         "success": r["wins"] / args.tasks, "steps/s": r["steps"] / r["step_s"],
                         "ms/reset": 1e3 * r["reset_s"] / args.tasks, "us/call (env)": 1e6 * r["step_s"] / r["calls"],
                         "us/call (direct)": 1e6 * per_direct,
                         "ratio": r["step_s"] / r["calls"] / per_direct})  # fmt: skip
        s, steps = random_pass(world, args.tasks)
        rows.append({"world": world, "agent": "random", "format": "hermes", "steps/s": steps / s})
    cols = ["world", "agent", "format", "success", "steps/s", "ms/reset", "us/call (env)", "us/call (direct)", "ratio"]
    print(format_table(rows, cols))
    print(json.dumps({"tasks": args.tasks}))


if __name__ == "__main__":
    main()
