"""CodeExec-v0 sessions in one process: the fork servers they hold and their memory, and steps/s of one env.

Run by hand (not a test)::

    python bench/bench_code_exec_sessions.py                 # 64 envs, 300 serial steps; ~20 s
    python bench/bench_code_exec_sessions.py --envs 256 --steps 1000

``--envs`` CodeExec envs (pool back-end) each make one python call (``print(1)``); then the ``_child.py --serve``
processes that are children of this process are counted and their resident memory (``VmRSS`` from /proc, summed)
is reported, before the envs are closed. Then one env steps ``--steps`` python calls of ``print(1)`` one after the
other (after 10 to warm up); steps/s counts the whole ``env.step`` (parsing, the run, the observation).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from agentgym.envs.code_exec.env import CodeExecEnv

CALL = "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": "print(1)"}}) + "</tool_call>"


def fork_servers() -> dict[int, int]:
    """``{pid: VmRSS bytes}`` of the ``_child.py --serve`` processes whose parent is this process."""
    out = {}
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        serving = any(a.endswith(b"_child.py") for a in argv) and b"--serve" in argv
        if serving and int(status["PPid"]) == me:
            out[int(pid)] = int(status.get("VmRSS", "0 kB").split()[0]) * 1024
    return out


def sessions(n: int) -> tuple[int, int]:
    """Fork servers and their summed RSS with ``n`` envs open, each after one python call."""
    envs = [CodeExecEnv(family="numbers") for _ in range(n)]
    try:
        for env in envs:
            env.reset(options={"task_index": 0})
            obs, *_ = env.step(CALL)
            assert obs[0]["content"] == "1\n", obs
        servers = fork_servers()
        return len(servers), sum(servers.values())
    finally:
        for env in envs:
            env.close()


def steps_per_second(steps: int) -> float:
    env = CodeExecEnv(family="numbers", max_turns=steps + 20)
    try:
        env.reset(options={"task_index": 0})
        for _ in range(10):
            env.step(CALL)
        start = time.perf_counter()
        for _ in range(steps):
            env.step(CALL)
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    count, rss = sessions(args.envs)
    print(f"{args.envs} envs after one call each: {count} fork server(s), {rss / 2**20:.1f} MiB resident in all")
    print(f"1 env, python print(1) serially: {steps_per_second(args.steps):.1f} steps/s")


if __name__ == "__main__":
    main()
