"""Prepared GPU run of the reference trainer (UNTESTED ON GPU: written on a CPU-only machine).

    python bench/gpu_train.py --model /path/to/local/Qwen2.5-0.5B-Instruct --iterations 3
    python bench/gpu_train.py --model tiny --device cpu --dtype float32 --env-dataset tiny --iterations 1 \
        --batch-tasks 1 --group-size 2 --max-new-tokens 8      # CPU dry run of the code path (done)

Loads a local model directory (never downloads), trains a few GRPO iterations on SearchQA with the reference
trainer on CUDA, and prints per iteration: rollout tokens/s (sampled tokens / rollout time), update tokens/s,
the step-time breakdown (rollout vs update) and peak GPU memory. The rollout back-end is the reference HF
KV-cache loop (one sequence at a time), so rollout throughput is a floor, not what vLLM would reach.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from agentgym.baselines.trainer import load_config, setup, train_iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local model directory ('tiny' for a CPU dry run)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--env-dataset", default="small")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--batch-tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--minibatch-size", type=int, default=4)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    config = load_config(
        overrides={
            "model": args.model,
            "device": args.device,
            "dtype": args.dtype,
            "algo": args.algo,
            "env_kwargs": {"dataset": args.env_dataset},
            "batch_tasks": args.batch_tasks,
            "group_size": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "minibatch_size": args.minibatch_size,
            "iterations": args.iterations,
            "lr": 1e-6,
            "kl_coef": 0.001,
            "plot": False,
        }
    )
    t0 = time.perf_counter()
    state = setup(config)
    if cuda:
        torch.cuda.synchronize()
    print(
        f"setup {time.perf_counter() - t0:.1f}s  params {sum(p.numel() for p in state.model.parameters()) / 1e6:.0f}M"
    )
    for it in range(1, config.iterations + 1):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        m = train_iteration(state, config, it)
        if cuda:
            torch.cuda.synchronize()
        row = {
            "iteration": it,
            "step_s": round(time.perf_counter() - t, 2),
            "rollout_s": round(m["time_rollout"], 2),
            "update_s": round(m.get("time_update", 0.0), 2),
            "rollout_tok_s": round(m["rollout_tokens_per_s"], 1),
            "update_tok_s": round(m.get("update_tokens_per_s", 0.0), 1),
            "sampled_tokens": m["sampled_tokens"],
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
            "reward": m["reward_mean"],
            "logprob_maxdiff": m.get("rollout_logprob_maxdiff"),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
