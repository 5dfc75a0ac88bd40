"""Rollout throughput of the reference trainer: batched lockstep generation vs one sequence at a time.

    python bench/bench_rollout.py                     # tiny model on CPU, SearchQA tiny, 1 thread
    python bench/bench_rollout.py --model /path/to/Qwen2.5-0.5B-Instruct --device cuda --rollouts 256

Runs the same batch of rollouts (same task seeds, same sampling seeds) with ``generation_batch=1`` (the naive
loop: each episode's turn generated alone) and with every running episode in one left-padded batch, and prints
sampled tokens/s for both and their ratio. Both draw the same tokens (each row has its own generator), so the
work is identical.
"""

from __future__ import annotations

import argparse
import time

import torch

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.rollout import HFPolicy, RolloutConfig, collect_rollouts
from agentgym.baselines.update import build_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--dataset", default="tiny")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import gymnasium

    import agentgym  # noqa: F401

    dtype = "float32" if args.model == "tiny" else "bfloat16"
    model, tok = build_policy(TrainConfig(model=args.model, device=args.device, dtype=dtype))
    policy = HFPolicy(model.eval(), tok)
    envs: list = []

    def factory():
        return gymnasium.make("agentgym/SearchQA-v0", dataset=args.dataset, split="train")

    config = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens)
    seeds = list(range(args.rollouts // args.group_size))
    collect_rollouts(policy, factory, seeds[:1], group_size=2, config=config, envs=envs)  # warm-up, env pool
    rows = []
    for label, chunk in (("one at a time", 1), ("batched lockstep", None)):
        t0 = time.perf_counter()
        rs = collect_rollouts(
            policy, factory, seeds, group_size=args.group_size, config=config, envs=envs, generation_batch=chunk
        )
        dt = time.perf_counter() - t0
        tokens = sum(r.num_sampled for r in rs)
        rows.append((label, len(rs), tokens, dt, tokens / dt))
    print("| generation | rollouts | sampled tokens | seconds | tokens/s |")
    print("|---|---:|---:|---:|---:|")
    for label, n, tokens, dt, tps in rows:
        print(f"| {label} | {n} | {tokens} | {dt:.2f} | {tps:,.0f} |")
    print(f"batched / one at a time: {rows[1][4] / rows[0][4]:.1f}x")


if __name__ == "__main__":
    main()
