"""Cost of the named model smollm2-135m (SmolLM2-135M-Instruct) on this machine, against the tiny test model.

    python bench/bench_smollm2.py                       # 2 torch threads, a fresh temporary model cache
    python bench/bench_smollm2.py --cache-dir ~/.cache/agentgym/models --threads 1   # a busy machine: 1 thread

Measures, for both models in the same run, each part in its own process: load time (smollm2: first from the wheel's
GGUF into an empty cache, then from the cache, as ``build_policy`` loads it), peak resident memory, sampled tokens/s
for 8 rows (the trainer's batched ``HFPolicy.sample_batch``, temperature 1, no stop strings and eos ignored, so
every row samples ``--new-tokens``) and the wall time of one forward + backward on 8 x 256 tokens in float32
(next-token cross-entropy, the whole model trainable). Prints one JSON object per model and the smollm2 / tiny
ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.rollout import HFPolicy
from agentgym.baselines.update import build_policy
from agentgym.tools.named_models import CACHE_ENV, cached_model_dir, named_model_dir

PROMPT = [{"role": "user", "content": "You are at step 1 of a chain. Options: A, B, C. Reply with one option."}]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(model: Any, tokenizer: Any, *, rows: int, new_tokens: int, seq: int, seed: int) -> dict[str, float]:
    """Sampled tokens/s for ``rows`` rows and forward + backward seconds on ``rows`` x ``seq`` tokens."""
    policy = HFPolicy(model.eval(), tokenizer)
    policy.eos_token_ids = frozenset()  # every row samples its whole budget: rows x new_tokens tokens
    context = policy.prompt_ids(PROMPT)
    generators = [torch.Generator().manual_seed(seed + i) for i in range(rows)]
    policy.sample_batch([context], budgets=[2], temperature=1.0, stop=(), generators=generators[:1])  # warm-up
    start = time.perf_counter()
    out = policy.sample_batch(
        [context] * rows, budgets=[new_tokens] * rows, temperature=1.0, stop=(), generators=generators
    )
    sample_s = time.perf_counter() - start
    sampled = sum(len(ids) for ids, _, _ in out)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (rows, seq), generator=torch.Generator().manual_seed(seed))
    start = time.perf_counter()
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    step_s = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    model.eval()
    return {
        "prompt_tokens": len(context),
        "sampled_tokens": sampled,
        "sample_s": round(sample_s, 2),
        "tokens_per_s": round(sampled / sample_s, 1),
        f"fwd_bwd_{rows}x{seq}_s": round(step_s, 2),
    }


def part(name: str, cache: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, run in its own process so that its peak resident memory is its own."""
    torch.set_num_threads(args.threads)
    out: dict[str, Any] = {}
    start = time.perf_counter()
    if name == "convert":  # the first use: GGUF -> plain checkpoint in the cache
        named_model_dir("smollm2-135m", cache)
        return {"first_load_from_gguf_s": round(time.perf_counter() - start, 2), "peak_rss_mb": round(peak_rss_mb())}
    os.environ[CACHE_ENV] = cache
    model, tok = build_policy(TrainConfig(model="tiny" if name == "tiny" else "smollm2-135m"))
    out["load_s" if name == "tiny" else "load_from_cache_s"] = round(time.perf_counter() - start, 2)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["peak_rss_after_load_mb"] = round(peak_rss_mb())
    out |= measure(model, tok, rows=args.rows, new_tokens=args.new_tokens, seq=args.seq, seed=0)
    out["peak_rss_mb"] = round(peak_rss_mb())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default=None, help="model cache (default: a fresh temporary folder)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--part", choices=["tiny", "convert", "smollm2"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part is not None:
        print(json.dumps(part(args.part, args.cache_dir, args)))
        return
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="agentgym-models-") as tmp:
        cache = args.cache_dir or tmp
        for name in ("tiny", "convert", "smollm2"):
            if name == "convert" and cached_model_dir("smollm2-135m", cache) is not None:
                continue  # a warm cache: no first load to measure
            forwarded = ["--threads", str(args.threads), "--rows", str(args.rows), "--new-tokens", str(args.new_tokens)]
            cmd = [sys.executable, __file__, "--part", name, "--cache-dir", cache, *forwarded, "--seq", str(args.seq)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    tiny, smol = results["tiny"], {}
    if "convert" in results:
        smol["first_load_from_gguf_s"] = results["convert"]["first_load_from_gguf_s"]
        smol["peak_rss_gguf_conversion_mb"] = results["convert"]["peak_rss_mb"]
    smol |= results["smollm2"]
    key = f"fwd_bwd_{args.rows}x{args.seq}_s"
    ratios = {
        "parameters": round(smol["parameters"] / tiny["parameters"], 1),
        "tokens_per_s": round(smol["tokens_per_s"] / tiny["tokens_per_s"], 3),
        key: round(smol[key] / tiny[key], 1),
        "peak_rss_mb": round(smol["peak_rss_mb"] / tiny["peak_rss_mb"], 1),
    }
    report = {"threads": args.threads, "tiny": tiny, "smollm2-135m": smol, "smollm2_over_tiny": ratios}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
