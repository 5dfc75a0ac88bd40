"""RL on a real pretrained model: SmolLM2-135M-Instruct (``--model smollm2-135m``) on Chain-v0 H=2, on CPU.

    python bench/smollm2_rl.py --measure                 # one SFT step and one RL iteration, timed (no results)
    python bench/smollm2_rl.py                           # the experiment; resumable (finished runs are skipped)
    python bench/smollm2_rl.py --report-only             # the table from the runs finished so far

Steps, in one process with one torch thread (the machine has two cores and the other one is taken):

1. ``base``: the model as shipped, on the ``--eval-tasks`` held-out tasks (``task_index`` 0..n-1, T=1): valid-action
   share and success. It answers in prose (valid share 0 on the probe), so:
2. ``sft``: a short SFT warm start on the env's oracle demonstrations (``--sft-steps`` x 4 episodes at
   ``--sft-lr``), shared by every run; evaluated the same way.
3. ``rl``: for each seed, each method (``grpo``: outcome-only GRPO; ``mt_grpo``: multi-turn GRPO, each turn's
   verified ``info["correct"]`` z-scored among the same turn of the group plus the outcome) runs ``--iterations``
   iterations of ``--batch-tasks`` x ``--group-size`` episodes from the warm start (``init_from``, fresh optimizer),
   same learning rate, same seed (so the same task draws), and is evaluated before and after on the same held-out
   tasks with the same sampling seed.

Only the top ``--trainable-layers`` decoder layers and the final norm train (``TrainConfig.trainable_layers``); the
embeddings, the tied LM head and the lower layers stay frozen: a forward + backward through the whole model costs
about a minute per 8 x 256 tokens here (docs/trainer.md), through the top layers a fraction of that.

Budget (chosen after ``--measure``, before any RL result was seen): about 60 minutes of wall time in all. Measured on
the loaded 2-core machine: an SFT step 3-4 s; an RL iteration of 4 tasks x 4 episodes 45-58 s (rollouts 17-28 s at
8-13 sampled tokens/s, update 28-30 s with the top 8 of 30 layers trainable); an evaluation on 64 tasks 69 s. So the
first budget was 4 seeds x 2 methods x 6 iterations (about 6 minutes a run, 50 in all): 4 seeds rather than 3 so
that the smallest possible p-value is 0.125, not 0.25, at the price of 6 iterations rather than 8. On 2026-12-06,
with those 4 seeds' results known, the default became seeds 0-7 (about 3 minutes a run on a quieter machine, two
runs at a time), 8 seeds as in the credit sweep, whose exact test can reach p = 2/256. The warm start stops at
the first check where a 32-task probe (tasks 64-95, not the evaluation's) reaches 35% success, so that RL has room.
The paired test is the exact two-sided sign-flip test on the per-seed differences; with n seeds its smallest possible
p-value is 2 / 2^n. Every evaluation (before: the warm start, once; after: each run) plays tasks 0-63 at T=1 with
the same sampling seed.

Each run leaves ``<name>.json`` under ``--results`` (written atomically; a run whose file exists is skipped), its
checkpoint and metrics under ``--out``; an interrupted run resumes from its last checkpoint. Writes
``results.md`` and ``results.json`` (before/after per seed and method, paired p-values, wall time, sampled tokens/s,
update time, peak RSS) under ``--results``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"algo": "grpo"},
    "mt_grpo": {"algo": "grpo", "estimator": "mt_grpo"},
}
KEPT = ("iteration", "success_rate", "reward_mean", "valid_action_frac", "zero_std_group_frac", "eval_success_rate",
        "eval_turn_accuracy", "entropy", "grad_norm", "grad_norm_max", "time_rollout", "time_update",
        "rollout_tokens_per_s", "sampled_tokens", "sft_loss", "sft_loss_first", "collapse_reason")  # fmt: skip


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0**2


def paired(diffs: list[float]) -> dict[str, Any]:
    """The exact two-sided paired sign-flip test of ``diffs`` (``agentgym.running.stats``) as a JSON row."""
    from agentgym.running.stats import sign_flip_test

    if not diffs:
        return {"n": 0, "mean": None, "p": float("nan")}
    t = sign_flip_test(diffs)
    return {"n": t.n, "mean": t.mean, "p": t.p}


def base_config(args: argparse.Namespace, **overrides: Any) -> Any:
    from agentgym.baselines.config import load_config

    env_kwargs = {"horizon": args.horizon}
    data: dict[str, Any] = {
        "model": "smollm2-135m",
        "trainable_layers": args.trainable_layers,
        "env_id": "agentgym/Chain-v0",
        "env_kwargs": env_kwargs,
        "eval_env_kwargs": env_kwargs,
        "max_turns": args.horizon,
        "max_new_tokens": 8,
        "stop": ["</answer>"],
        "batch_tasks": args.batch_tasks,
        "group_size": args.group_size,
        "minibatch_size": args.minibatch_size,
        "lr": args.lr,
        "kl_coef": 0.0,
        "sft_steps": 0,
        "sft_batch": 4,
        "sft_lr": args.sft_lr,
        "eval_tasks": args.eval_tasks,
        "eval_temperature": 1.0,
        "plot": False,
        "progress": False,
    }
    data.update(overrides)
    return load_config(None, overrides=data)


def held_out(state: Any, config: Any, first: int = 0) -> dict[str, float]:
    """Success and valid-action share on ``config.eval_tasks`` tasks from ``task_index`` ``first``, sampled as
    ``trainer.evaluate`` samples them (T=``eval_temperature``, the sampling seed of seed 0 for every run, so every
    evaluation of every run plays the same draws)."""
    from agentgym.baselines.config import Seeds
    from agentgym.baselines.credit import EnvMaker
    from agentgym.baselines.rollout import collect_rollouts

    n = config.eval_tasks
    rollouts = collect_rollouts(state.policy, EnvMaker.of(config, config.eval_env_kwargs, shaped=False),
                                list(range(first, first + n)), group_size=1,
                                config=dataclasses.replace(config.rollout_config, temperature=config.eval_temperature),
                                sample_seed=Seeds(0).evaluation(),
                                options=[{"task_index": first + i} for i in range(n)])  # fmt: skip
    state.policy.sleep()
    valid = [bool(i.get("action_valid", True)) for r in rollouts for i in r.infos]
    return {"success": float(np.mean([r.success for r in rollouts])), "valid_share": float(np.mean(valid))}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def run_base(args: argparse.Namespace) -> dict[str, Any]:
    from agentgym.baselines.trainer import setup

    path = args.results / "base.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    config = base_config(args, seed=0)
    state = setup(config)
    result = {**held_out(state, config), "seconds": time.perf_counter() - t0, "peak_rss_gb": peak_rss_gb()}
    state.close()
    write_json(path, result)
    return result


def run_sft(args: argparse.Namespace) -> dict[str, Any]:
    """SFT on oracle demonstrations until a probe of ``--sft-probe-tasks`` tasks *after* the held-out ones (task_index
    eval_tasks, ...) reaches ``--sft-target`` success, checked every ``--sft-check`` steps, at most ``--sft-steps``
    steps; then the held-out evaluation (the ``before`` of every run) and the checkpoint every run starts from."""
    from agentgym.baselines.checkpoint import save_checkpoint
    from agentgym.baselines.trainer import setup, sft_step

    path = args.results / "sft.json"
    ckpt = args.out / "sft" / "checkpoint.pt"
    if path.is_file() and ckpt.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    config = base_config(args, seed=0, iterations=0, out_dir=str(args.out / "sft"))
    state = setup(config)
    probe_config = dataclasses.replace(config, eval_tasks=args.sft_probe_tasks)
    losses, probes, step = [], [], 0
    while step < args.sft_steps:
        losses.append(sft_step(state, config, 0, step))
        step += 1
        if step % args.sft_check == 0:
            probes.append({"step": step, **held_out(state, probe_config, first=args.eval_tasks)})
            print("sft probe", probes[-1], f"loss {losses[-1]:.3f}", flush=True)
            if probes[-1]["success"] >= args.sft_target:
                break
    save_checkpoint(state, config, ckpt)
    result = {**held_out(state, config), "sft_steps": step, "sft_lr": args.sft_lr, "losses": losses,
              "probes": probes, "seconds": time.perf_counter() - t0, "peak_rss_gb": peak_rss_gb()}  # fmt: skip
    state.close()
    write_json(path, result)
    return result


def run_rl(args: argparse.Namespace, method: str, seed: int, before: dict[str, Any]) -> dict[str, Any]:
    from agentgym.baselines.trainer import train

    name = f"{method}-s{seed}"
    path = args.results / "runs" / f"{name}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    out_dir = args.out / "rl" / name
    config = base_config(args, **METHODS[method], seed=seed, iterations=args.iterations,
                         init_from=str(args.out / "sft" / "checkpoint.pt"), resume=True, out_dir=str(out_dir),
                         checkpoint_every=args.checkpoint_every)  # fmt: skip
    summary = train(config)
    after = None if summary["collapsed"] else held_out(summary["state"], config)
    summary["state"].close()
    history = [{k: h[k] for k in KEPT if k in h} for h in summary["history"]]
    steps = [h for h in history if h.get("iteration", 0) > 0]
    result = {
        "method": method, "seed": seed, "iterations": args.iterations, "collapsed": summary["collapsed"],
        "before": before["success"], "after": None if after is None else after["success"],
        "valid_before": before["valid_share"], "valid_after": None if after is None else after["valid_share"],
        "seconds_this_process": time.perf_counter() - t0,
        "time_rollout": float(sum(h["time_rollout"] for h in steps)),
        "time_update": float(sum(h["time_update"] for h in steps)),
        "sampled_tokens": int(sum(h["sampled_tokens"] for h in steps)),
        "peak_rss_gb": peak_rss_gb(), "history": history,
    }  # fmt: skip
    result["sampled_tokens_per_s"] = result["sampled_tokens"] / max(result["time_rollout"], 1e-9)
    write_json(path, result)
    (out_dir / "checkpoint.pt").unlink(missing_ok=True)  # 0.6 GB each; the warm start's is kept
    return result


def report(args: argparse.Namespace) -> dict[str, Any]:
    """``results.md`` / ``results.json`` from the finished runs."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((args.results / "runs").glob("*.json"))]
    base = json.loads((args.results / "base.json").read_text()) if (args.results / "base.json").is_file() else None
    sft = json.loads((args.results / "sft.json").read_text()) if (args.results / "sft.json").is_file() else None
    by = {(r["method"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    lines = ["# SmolLM2-135M-Instruct, Chain-v0 H=2: held-out success (T=1) before and after RL", ""]
    if base:
        lines.append(f"- base model: success {base['success']:.3f}, valid-action share {base['valid_share']:.3f}")
    if sft:
        lines.append(
            f"- SFT warm start ({sft['sft_steps']} steps x 4 demonstrations, lr {sft['sft_lr']}): success "
            f"{sft['success']:.3f}, valid-action share {sft['valid_share']:.3f} ({sft['seconds']:.0f} s)"
        )
    lines += ["", "| seed | " + " | ".join(f"{m} before | {m} after" for m in methods) + " |",
              "|---:|" + "---:|" * (2 * len(methods))]  # fmt: skip
    for s in seeds:
        cells = []
        for m in methods:
            r = by.get((m, s))
            cells += (
                ["-", "-"]
                if r is None
                else [f"{r['before']:.3f}", "collapsed" if r["after"] is None else f"{r['after']:.3f}"]
            )
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    tests: dict[str, Any] = {}
    for m in methods:
        d = [by[m, s]["after"] - by[m, s]["before"] for s in seeds if (m, s) in by and by[m, s]["after"] is not None]
        tests[f"{m}: after - before"] = paired(d)
    if len(methods) == 2:
        a, b = methods
        d = [
            by[b, s]["after"] - by[a, s]["after"]
            for s in seeds
            if (a, s) in by and (b, s) in by and by[a, s]["after"] is not None and by[b, s]["after"] is not None
        ]
        tests[f"{b} - {a}: after"] = paired(d)
    lines += ["", "Exact two-sided paired sign-flip tests (smallest possible p with n seeds: 2/2^n):", ""]
    for k, t in tests.items():
        mean = "-" if t["mean"] is None else f"{t['mean']:+.3f}"
        lines.append(
            f"- {k}: mean {mean} over n={t['n']} seeds, p = {t['p']:.3f}"
            f" (smallest possible {2 / 2 ** t['n'] if t['n'] else float('nan'):.3f})"
        )
    cost = {m: {"seconds": float(np.mean([r["seconds_this_process"] for r in runs if r["method"] == m])),
                "time_update_per_iteration": float(np.mean([r["time_update"] / r["iterations"] for r in runs
                                                            if r["method"] == m])),
                "sampled_tokens_per_s": float(np.mean([r["sampled_tokens_per_s"] for r in runs if r["method"] == m]))}
            for m in methods}  # fmt: skip
    peak = max([r["peak_rss_gb"] for r in runs] + [x["peak_rss_gb"] for x in (base, sft) if x] or [0.0])
    lines += ["", "Cost per run (one torch thread; the machine shared with other jobs):", ""]
    for m, c in cost.items():
        lines.append(
            f"- {m}: {c['seconds']:.0f} s wall per run (two held-out evaluations included), update "
            f"{c['time_update_per_iteration']:.1f} s per iteration, {c['sampled_tokens_per_s']:.1f} "
            "sampled tokens/s"
        )
    lines.append(f"- peak resident memory of the process: {peak:.2f} GB")
    text = "\n".join(lines) + "\n"
    (args.results / "results.md").write_text(text, encoding="utf-8")
    write_json(args.results / "results.json", {"base": base, "sft": {k: v for k, v in (sft or {}).items()
                                                                      if k != "history"},
                                               "runs": {f"{m}-s{s}": {k: by[m, s][k] for k in ("before", "after")}
                                                        for (m, s) in by}, "tests": tests, "cost": cost,
                                               "peak_rss_gb": peak})  # fmt: skip
    print(text)
    return tests


def measure(args: argparse.Namespace) -> None:
    """One SFT step, one evaluation and one RL iteration of each method, timed (writes nothing under --results)."""
    from agentgym.baselines.trainer import evaluate, setup, sft_step, train_iteration

    for method in METHODS:
        config = base_config(args, **METHODS[method], seed=0, iterations=1, eval_tasks=args.eval_tasks)
        state = setup(config)
        t = time.perf_counter()
        loss = sft_step(state, config, 0, 0)
        t_sft = time.perf_counter() - t
        t = time.perf_counter()
        ev = evaluate(state, config) if method == "grpo" else {}
        t_eval = time.perf_counter() - t
        t = time.perf_counter()
        m = train_iteration(state, config, 1)
        t_it = time.perf_counter() - t
        print(
            json.dumps(
                {
                    "method": method,
                    "sft_step_s": t_sft,
                    "sft_loss": loss,
                    "eval_s": t_eval,
                    **ev,
                    "iteration_s": t_it,
                    "time_rollout": m["time_rollout"],
                    "time_update": m["time_update"],
                    "rollout_tokens_per_s": m["rollout_tokens_per_s"],
                    "peak_rss_gb": peak_rss_gb(),
                }
            )
        )
        state.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--horizon", type=int, default=2)
    parser.add_argument("--batch-tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--minibatch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--sft-steps", type=int, default=48)
    parser.add_argument("--sft-check", type=int, default=6)
    parser.add_argument("--sft-target", type=float, default=0.35)
    parser.add_argument("--sft-probe-tasks", type=int, default=32)
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    parser.add_argument("--trainable-layers", type=int, default=8)
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2_rl"))
    parser.add_argument("--results", type=Path, default=Path("bench/results/smollm2_rl"))
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    if args.measure:
        measure(args)
        return 0
    if not args.report_only:
        t0 = time.perf_counter()
        print("base", run_base(args), flush=True)
        sft = run_sft(args)
        print("sft", {k: v for k, v in sft.items() if k != "history"}, flush=True)
        for seed in args.seeds:
            for method in args.methods:
                r = run_rl(args, method, seed, sft)
                print(
                    method,
                    seed,
                    "before",
                    r["before"],
                    "after",
                    r["after"],
                    f"{time.perf_counter() - t0:.0f}s",
                    flush=True,
                )
    report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
