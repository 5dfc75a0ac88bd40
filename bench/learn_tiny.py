"""Learning experiment: the ``tiny`` preset on CPU, outcome-only GRPO vs GRPO + a dense turn-level method.

    python bench/learn_tiny.py                       # 3 seeds x 2 arms, 2 worker processes
    python bench/learn_tiny.py --seeds 0 --iterations 4 --jobs 1 --out runs/learn_smoke

Task: SearchQA ``tiny``, the first ``--questions`` questions of the train split among the hop types that fit in 3
turns (1-hop, bridge, comparison: search, search, answer), with the randomly initialised 4M-parameter tiny Qwen2.
Each seed gets one SFT warm start on oracle demonstrations (``--sft-steps`` at ``--sft-lr``); both arms resume from
that same checkpoint, so they start from identical weights and differ only in the advantage:

- ``grpo_outcome``: GRPO on the env's outcome reward (EM of the final answer);
- ``gtpo_dense_progress``: GTPO turn returns (group-normalised per turn) over the outcome plus a dense reward, the
  difference of SearchQA's verified retrieval progress (``info["progress"]``) between turns, times
  ``--progress-coef`` (potential-based: it telescopes to ``coef * final progress``).

Every ``--eval-every`` iterations (and before the first) the policy plays every question ``--eval-samples`` times at
temperature 1 with a fixed sampling seed (``eval_success_rate``; the same draws each time). Prints a table of
success before RL, after it and the change per arm (mean +- std over seeds), writes ``results.json`` and plots the
mean +- std curves to ``learn_tiny.png`` under ``--out``. At the defaults the whole experiment takes about 12
minutes on 2 cores (measured: 698 s); docs/trainer.md reports its numbers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ARMS: dict[str, dict[str, Any]] = {
    "grpo_outcome": {"algo": "grpo"},
    "gtpo_dense_progress": {"algo": "grpo", "estimator": "gtpo", "progress_key": "progress"},
}


def common(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    env = {"dataset": "tiny", "split": "train", "hop_types": args.hop_types, "max_questions": args.questions}
    return {
        "seed": seed,
        "env_kwargs": env,
        "eval_env_kwargs": env,
        "eval_every": args.eval_every,
        "eval_tasks": args.questions * args.eval_samples,
        "eval_temperature": 1.0,
        "iterations": args.iterations,
        "max_turns": 3,
        "max_new_tokens": 16,
        "batch_tasks": args.batch_tasks,
        "group_size": args.group_size,
        "minibatch_size": 8,
        "epochs": args.epochs,
        "sft_steps": args.sft_steps,
        "sft_lr": args.sft_lr,
        "lr": args.lr,
        "kl_coef": 0.0,
        "plot": False,
        "progress": False,  # worker processes would interleave their bars
    }


def _job(kind: str, args: argparse.Namespace, seed: int, arm: str | None) -> tuple[str | None, int, list[dict]]:
    import torch

    from agentgym.baselines.trainer import load_config, train

    torch.set_num_threads(1)
    out = Path(args.out)
    if kind == "sft":  # iterations=0: warm start + the first evaluation, saved as a checkpoint
        overrides = {**common(args, seed), "iterations": 0, "out_dir": str(out / f"sft-s{seed}")}
        cfg = load_config("tiny", overrides=overrides)
        return None, seed, train(cfg)["history"]
    run_dir = out / f"{arm}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    for name in ("checkpoint.pt", "metrics.jsonl"):
        shutil.copyfile(out / f"sft-s{seed}" / name, run_dir / name)
    overrides = {**common(args, seed), **ARMS[str(arm)], "resume": True, "out_dir": str(run_dir)}
    if arm == "gtpo_dense_progress":
        overrides["progress_coef"] = args.progress_coef
    return arm, seed, train(load_config("tiny", overrides=overrides))["history"]


def run(args: argparse.Namespace) -> dict[str, dict[int, list[dict[str, Any]]]]:
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx) as pool:
        for _, seed, hist in pool.map(
            _job, ["sft"] * len(args.seeds), [args] * len(args.seeds), args.seeds, [None] * len(args.seeds)
        ):
            print(
                json.dumps(
                    {"seed": seed, **{k: hist[0].get(k) for k in ("sft_loss_first", "sft_loss", "eval_success_rate")}}
                ),
                flush=True,
            )
        jobs = [(arm, seed) for arm in ARMS for seed in args.seeds]
        results: dict[str, dict[int, list[dict[str, Any]]]] = {}
        for arm, seed, hist in pool.map(
            _job, ["rl"] * len(jobs), [args] * len(jobs), [s for _, s in jobs], [a for a, _ in jobs]
        ):
            results.setdefault(str(arm), {})[seed] = hist
            evals = [h["eval_success_rate"] for h in hist if "eval_success_rate" in h]
            print(json.dumps({"arm": arm, "seed": seed, "eval_success": evals}), flush=True)
    return results


def curve(hist: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(h["iteration"], h[key]) for h in hist if h.get(key) is not None]
    return [x for x, _ in points], [y for _, y in points]


def table(results: dict[str, dict[int, list[dict[str, Any]]]]) -> str:
    rows = ["| arm | success before RL | after RL | change | best during RL |", "|---|---:|---:|---:|---:|"]
    for arm, runs in results.items():
        first = np.array([curve(h, "eval_success_rate")[1][0] for h in runs.values()])
        last = np.array([curve(h, "eval_success_rate")[1][-1] for h in runs.values()])
        best = np.array([max(curve(h, "eval_success_rate")[1][1:]) for h in runs.values()])
        rows.append(
            f"| `{arm}` | {first.mean():.3f} +- {first.std():.3f} | {last.mean():.3f} +- {last.std():.3f} | "
            f"{(last - first).mean():+.3f} +- {(last - first).std():.3f} | {best.mean():.3f} |"
        )
    return "\n".join(rows)


def plot(results: dict[str, dict[int, list[dict[str, Any]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("eval_success_rate", "success_rate", "progress_final", "zero_std_group_frac")
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4))
    for ax, key in zip(axes, keys, strict=True):
        for arm, runs in results.items():
            curves = [curve(h, key) for h in runs.values()]
            xs = curves[0][0]
            ys = np.array([c[1] for c in curves])
            mean, std = ys.mean(0), ys.std(0)
            ax.plot(xs, mean, marker="o" if key == "eval_success_rate" else None, label=arm)
            ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
        ax.set_title(key + (" (held fixed: every question, T=1)" if key == "eval_success_rate" else ""), fontsize=9)
        ax.set_xlabel("RL iteration")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--hop-types", nargs="+", default=["1hop", "bridge", "comparison"])
    parser.add_argument("--batch-tasks", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--sft-steps", type=int, default=100)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--progress-coef", type=float, default=0.5)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--eval-samples", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="runs/learn_tiny")
    args = parser.parse_args()
    t0 = time.perf_counter()
    results = run(args)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}), encoding="utf-8")
    plot(results, out / "learn_tiny.png")
    print(table(results))
    print(f"wall time {time.perf_counter() - t0:.0f} s; plot: {out / 'learn_tiny.png'}")


if __name__ == "__main__":
    main()
