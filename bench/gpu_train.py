"""Prepared GPU run of the reference trainer (UNTESTED ON GPU: written on a CPU-only machine).

    python bench/gpu_train.py --model /path/to/local/Qwen2.5-0.5B-Instruct --iterations 3
    python bench/gpu_train.py --preset qwen2.5-1.5b --model /path/to/Qwen2.5-1.5B-Instruct
    python bench/gpu_train.py --model /path/to/Qwen2.5-0.5B-Instruct --backend vllm  # agentgym-suite[vllm]
    python bench/gpu_train.py --model tiny --device cpu --amp-dtype none --env-dataset tiny --iterations 1 \
        --batch-tasks 1 --group-size 2 --max-new-tokens 8      # CPU dry run of the code path

Loads a local model directory (never downloads) into a GPU preset of the trainer (float32 master weights,
bfloat16 autocast, activation checkpointing), trains a few GRPO iterations on SearchQA ``small`` and prints per
iteration: rollout tokens/s (sampled tokens / rollout time; batched lockstep HF generation with a KV cache),
update tokens/s, the step-time breakdown (rollout vs update) and peak GPU memory. Sizes are cut down from the
preset so that a run fits in a few minutes.
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
    parser.add_argument("--preset", default="qwen2.5-0.5b", choices=("qwen2.5-0.5b", "qwen2.5-1.5b"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--amp-dtype", default="bfloat16", help="'none' to run in the weights' dtype")
    parser.add_argument("--backend", default="hf", choices=("hf", "vllm"), help="rollout back-end")
    parser.add_argument("--env-dataset", default="small")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--batch-tasks", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--minibatch-size", type=int, default=8)
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    config = load_config(
        args.preset,
        overrides={
            "model": args.model,
            "device": args.device,
            "amp_dtype": None if args.amp_dtype == "none" else args.amp_dtype,
            "algo": args.algo,
            "rollout_backend": args.backend,
            "env_kwargs": {"dataset": args.env_dataset, "split": "train"},
            "batch_tasks": args.batch_tasks,
            "group_size": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "minibatch_size": args.minibatch_size,
            "iterations": args.iterations,
            "dynamic_sampling": False,
            "plot": False,
        },
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
