"""Env steps/s of this tree against an older revision, measured in the same run (rounds alternate old, new).

Each round starts one fresh process per tree. For each env the process plays ``--tasks`` episodes with the env's
built-in agent once to record its actions (not timed), then times ``env.step`` alone replaying them, three times,
keeping the fastest replay (resets are left out). The workloads: ToolUse-v0 (oracle: tool calls in both formats,
and replies), CodeExec-v0 (oracle: python runs on the warm sandbox pool, and answers) and CodeExec-v0 rejected
(calls the schema refuses: no sandbox run, the parse and validation path alone), SearchQA-v0 (oracle: searches and
answers). The old revision is exported with ``git archive`` into a temporary folder and imported from there.

    python bench/bench_step_throughput.py [--old 70136f3] [--rounds 5] [--tasks 40]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: name -> (env id, constructor arguments, agent, action rewrite)
WORKLOADS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "ToolUse-v0 oracle": ("agentgym/ToolUse-v0", {}, "oracle", "as is"),
    "ToolUse-v0 oracle, OpenAI format": ("agentgym/ToolUse-v0", {}, "oracle", "openai"),
    "CodeExec-v0 oracle": ("agentgym/CodeExec-v0", {}, "oracle", "as is"),
    "CodeExec-v0 rejected calls": ("agentgym/CodeExec-v0", {}, "oracle", "reject"),
    "SearchQA-v0 oracle": ("agentgym/SearchQA-v0", {}, "oracle", "as is"),
}


def _rewrite(action: str, how: str) -> str:
    from agentgym.agents.tool_calls import calls_message

    if how == "openai":
        return calls_message(action) or action
    if how == "reject":  # the same call with its arguments under a wrong name: parsed and validated, never run
        native = calls_message(action)
        return native.replace('"arguments": "{\\"', '"arguments": "{\\"x') if native else action
    return action


def worker(tasks: int, repeats: int = 3) -> dict[str, float]:
    """Steps/s of every workload in this process's agentgym (the best of ``repeats`` replays)."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.running.runner import make_agent

    out = {}
    for name, (env_id, kwargs, agent_name, how) in WORKLOADS.items():
        env = gym.make(env_id, **kwargs).unwrapped
        agent = make_agent(agent_name, env)
        plans = []
        for i in range(tasks):
            agent.reset(seed=i)
            obs, info = env.reset(options={"task_index": i})
            messages, actions, done = list(obs), [], False
            while not done:
                action = agent.act(messages, info)
                obs, _, terminated, truncated, info = env.step(action)
                messages += [{"role": "assistant", "content": action}, *obs]
                actions.append(_rewrite(action, how))
                done = terminated or truncated
            plans.append(actions)
        best_wall, best_cpu = 0.0, 0.0
        for _ in range(repeats):  # the best of a few replays: a load spike on a shared machine slows one of them
            steps, wall, cpu = 0, 0.0, 0.0
            for i, actions in enumerate(plans):
                env.reset(options={"task_index": i})
                start, start_cpu = time.perf_counter(), time.process_time()
                for action in actions:
                    *_, terminated, truncated, _ = env.step(action)
                    steps += 1
                    if terminated or truncated:
                        break
                wall += time.perf_counter() - start
                cpu += time.process_time() - start_cpu
            best_wall, best_cpu = max(best_wall, steps / wall), max(best_cpu, steps / max(cpu, 1e-9))
        env.close()
        out[f"{name}|wall"], out[f"{name}|cpu"] = best_wall, best_cpu
    return out


def export(rev: str, into: Path) -> Path:
    """``rev``'s tree, laid out so that ``import agentgym`` from ``into`` finds agentgym.envs, .tools, .baselines."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for sub in ("envs", "tools", "baselines"):
        shutil.move(str(into / sub), str(into / "agentgym" / sub))
    return into


def run_round(tree: Path | None, tasks: int) -> dict[str, float]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--tasks", str(tasks)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", default="70136f3", help="the revision to compare against")
    parser.add_argument("--new", default=None, help="a revision to measure instead of this working tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=40, help="episodes per workload per round")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.tasks)))
        return
    with tempfile.TemporaryDirectory(prefix="agentgym-old-") as tmp, tempfile.TemporaryDirectory() as tmp_new:
        old = export(args.old, Path(tmp))
        new = export(args.new, Path(tmp_new)) if args.new else None
        rounds: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            rounds["old"].append(run_round(old, args.tasks))
            rounds["new"].append(run_round(new, args.tasks))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(
        f"env steps/s, median of {args.rounds} alternating rounds ({args.tasks} episodes each); old = {args.old}, "
        f"new = {args.new or 'this working tree'}"
    )
    print("wall: elapsed time in env.step; cpu: the env process's CPU time in it (sandbox children not counted)")
    print(f"| {'workload':<34} | clock | {'old':>9} | {'new':>9} | new/old (median of paired ratios) |")
    print(f"|{'-' * 36}|-------|{'-' * 11}|{'-' * 11}|{'-' * 35}|")
    for name in WORKLOADS:
        for clock in ("wall", "cpu"):
            old_s = [r[f"{name}|{clock}"] for r in rounds["old"]]
            new_s = [r[f"{name}|{clock}"] for r in rounds["new"]]
            ratios = [n / o for n, o in zip(new_s, old_s, strict=True)]
            spread = f"{statistics.median(ratios):.3f} (range {min(ratios):.2f}-{max(ratios):.2f})"
            print(f"| {name:<34} | {clock:<5} | {statistics.median(old_s):>9.1f} | {statistics.median(new_s):>9.1f} | "
                  f"{spread:<33} |")  # fmt: skip


if __name__ == "__main__":
    main()
