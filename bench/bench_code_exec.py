"""CodeExec-v0: the oracle and the random agent over N tasks per family, with the pool and the subprocess back-end.

Run by hand (not a test)::

    python bench/bench_code_exec.py                           # 500 oracle + 100 random tasks per family; ~3 min
    python bench/bench_code_exec.py --tasks 50 --random-tasks 20

Per (agent, back-end, family): success rate, env steps per second (agent, parsing, task generation and sandbox
runs all counted; one thread), and the latency of one python call as the env sees it (``CodeExecEnv.run_code``:
starting the run, writing the files, the program itself, collecting its output), p50 and mean in ms. The last
table gives subprocess / pool ratios. Tasks ``0 .. N-1`` of each family, agent seed = task index.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field

from agentgym.envs.code_exec.agents import OracleAgent, RandomAgent
from agentgym.envs.code_exec.env import CodeExecEnv
from agentgym.envs.code_exec.tasks import FAMILIES
from agentgym.tools.sandbox import RunResult

AGENTS = {"oracle": OracleAgent, "random": RandomAgent}


@dataclass
class Row:
    agent: str
    backend: str
    family: str
    episodes: int = 0
    successes: int = 0
    steps: int = 0
    seconds: float = 0.0
    calls: list[float] = field(default_factory=list)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.calls) if self.calls else float("nan")

    def mean_ms(self) -> float:
        return 1000 * statistics.fmean(self.calls) if self.calls else float("nan")


class TimedEnv(CodeExecEnv):
    """``CodeExecEnv`` that records the wall time of each python call."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.call_times: list[float] = []

    def run_code(self, code: str) -> RunResult:
        start = time.perf_counter()
        result = super().run_code(code)
        self.call_times.append(time.perf_counter() - start)
        return result


def play(agent_name: str, backend: str, family: str, tasks: int) -> Row:
    env = TimedEnv(family=family, backend=backend)
    env.sandbox.run("pass")  # start the pool before the clock (the first call waits for the fork server)
    row = Row(agent_name, backend, family)
    start = time.perf_counter()
    for index in range(tasks):
        agent = AGENTS[agent_name]()
        agent.reset(seed=index)
        obs, info = env.reset(options={"task_index": index})
        messages, done = list(obs), False
        while not done:
            action = agent.act(messages, info)
            obs, _, terminated, truncated, info = env.step(action)
            messages += [{"role": "assistant", "content": action}, *obs]
            row.steps += 1
            done = terminated or truncated
        row.episodes += 1
        row.successes += bool(info["success"])
    row.seconds = time.perf_counter() - start
    row.calls = env.call_times
    env.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500, help="oracle tasks per family")
    parser.add_argument("--random-tasks", type=int, default=100, help="random-agent tasks per family")
    parser.add_argument("--backends", default="pool,subprocess")
    args = parser.parse_args()
    backends = args.backends.split(",")

    rows: list[Row] = []
    print("| agent | back-end | family | episodes | success | steps/s | python calls | call p50 ms | call mean ms |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for agent, n in (("oracle", args.tasks), ("random", args.random_tasks)):
        for backend in backends:
            for family in FAMILIES:
                r = play(agent, backend, family, n)
                rows.append(r)
                cells = [agent, backend, family, r.episodes, f"{r.successes / r.episodes:.3f}", f"{r.steps_per_s:.1f}",
                         len(r.calls), f"{r.p50_ms():.1f}", f"{r.mean_ms():.1f}"]  # fmt: skip
                print("| " + " | ".join(map(str, cells)) + " |", flush=True)

    if {"pool", "subprocess"} <= set(backends):
        print("\n| agent | family | steps/s pool / subprocess | call p50 subprocess / pool | call mean sub. / pool |")
        print("|---|---|---:|---:|---:|")
        by_key = {(r.agent, r.backend, r.family): r for r in rows}
        for agent in AGENTS:
            for family in FAMILIES:
                pool, sub = by_key[agent, "pool", family], by_key[agent, "subprocess", family]
                print(f"| {agent} | {family} | {pool.steps_per_s / sub.steps_per_s:.2f}x | "
                      f"{sub.p50_ms() / pool.p50_ms():.2f}x | {sub.mean_ms() / pool.mean_ms():.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
