"""Cost of one call of every registered advantage estimator (``ESTIMATORS``) beside GRPO's, on one batch.

Run by hand (not a test)::

    python bench/bench_estimators.py                    # 64 rollouts x 16 turns, 8 groups of 8, 200 repeats
    python bench/bench_estimators.py --rollouts 256 --turns 32 --repeats 50

The batch has random rewards and every optional ``TurnBatch`` field filled (anchors, critic values, turn lengths,
observations, verified signals, sequence log-probs, criticality, subgoal segments, phases, exploration rewards), so
each estimator runs on its own inputs. The estimators are called round-robin (one call of each per round, so load on
the machine hits them alike) and the table gives the median ms per call, GRPO's median from the same rounds, the
ratio to GRPO and whether the call is under the budget (``--budget-ms``, 5 ms by default). The exit code is 1 when
any estimator is over it.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np


def make_batch(rollouts: int, turns: int, group_size: int, seed: int) -> Any:
    """A batch of ``rollouts`` trajectories of ``turns`` turns, groups of ``group_size``, every field filled."""
    from agentgym.rewards.advantages import TurnBatch

    rng = np.random.default_rng(seed)
    n, t = rollouts, turns
    rewards = [rng.choice([0.0, 0.0, 0.5, 1.0], size=t) for _ in range(n)]
    return TurnBatch(
        rewards,
        [i // group_size for i in range(n)],
        outcomes=rng.integers(0, 2, size=n).astype(float),
        anchors=[[f"s{x}" for x in rng.integers(0, 6, size=t)] for _ in range(n)],
        values=[rng.normal(size=t + 1) for _ in range(n)],
        turn_lengths=[rng.integers(5, 60, size=t) for _ in range(n)],
        observations=[[f"o{x}" for x in rng.integers(0, 6, size=t)] for _ in range(n)],
        turn_signals=[[None if x < 0.2 else float(x > 0.6) for x in rng.random(t)] for _ in range(n)],
        seq_logprobs=rng.uniform(-3.0, 0.0, size=n),
        criticality=[rng.random(t) for _ in range(n)],
        segments=[np.cumsum(rng.random(t) < 0.3) for _ in range(n)],
        phases=[["exploration"] * (t - 1) + ["execution"] for _ in range(n)],
        exploration_rewards=rng.random(n),
    )


def bench(batch: Any, repeats: int) -> dict[str, list[float]]:
    """Milliseconds per call of each estimator, ``repeats`` round-robin rounds (after one warm-up call each)."""
    from agentgym.rewards.advantages import ESTIMATORS

    times: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    for fn in ESTIMATORS.values():
        fn(batch)
    for _ in range(repeats):
        for name, fn in ESTIMATORS.items():
            start = time.perf_counter()
            fn(batch)
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rollouts", type=int, default=64)
    p.add_argument("--turns", type=int, default=16)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--budget-ms", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    batch = make_batch(args.rollouts, args.turns, args.group_size, args.seed)
    times = bench(batch, args.repeats)
    med = {name: statistics.median(v) for name, v in times.items()}
    groups = -(-args.rollouts // args.group_size)
    print(f"{args.rollouts} rollouts x {args.turns} turns, {groups} groups of {args.group_size}; "
          f"median of {args.repeats} round-robin calls; {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")  # fmt: skip
    print(f"| estimator | median ms | GRPO ms | x GRPO | under {args.budget_ms:g} ms |")
    print("|---|---:|---:|---:|---|")
    over = []
    for name, ms in med.items():
        ok = ms < args.budget_ms
        over += [] if ok else [name]
        print(f"| `{name}` | {ms:.3f} | {med['grpo']:.3f} | {ms / med['grpo']:.1f} | {'yes' if ok else 'NO'} |")
    if over:
        print(f"over budget: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
