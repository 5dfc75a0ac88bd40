"""Credit-assignment sweep: the reference trainer on the diagnostics, env x horizon x method x seed.

    python bench/credit_sweep.py                         # the README's grid, 2 worker processes, resumable
    python bench/credit_sweep.py --cells Chain:2,4 --methods grpo progress --seeds 0 --iterations 4 --out runs/smoke
    python bench/credit_sweep.py --report-only           # the table and plot of what has finished so far

Every (env, seed) gets one SFT warm start on the env's oracle demonstrations at H = ``--sft-horizon``
(``--sft-steps`` at ``--sft-lr``: short of teaching the task, so the policy answers in the right format but is right
on only part of the turns), and every horizon and method of that seed starts from those same weights
(``init_from``) with a fresh optimizer: the per-turn skill at the start is the same at every H. Each run then
plays ``--iterations`` x ``--batch-tasks`` x ``--group-size`` training episodes (the sample budget) with the tiny
randomly initialised Qwen2 and is evaluated before and after on the same ``--eval-episodes`` held-out tasks at T=1.

Methods (``METHODS``; the trainer's estimators, all with the same learning rate and batch):

- ``grpo``: outcome-only GRPO, the episode's outcome (the ``outcome`` reward component alone: Umbrella's and
  KeyDoor's distractor rewards do not count) z-scored in its group and given to every turn;
- ``rloo``: the return minus the mean of the other group members;
- ``gtpo``: GTPO, each turn's reward-to-go z-scored over the group's turns (env rewards only);
- ``progress``: GTPO over the env rewards plus the potential-based verified-progress reward
  (``progress_key="progress"``: the difference of ``info["progress"]`` between turns);
- ``gigpo``: GiGPO, the episode advantage plus step advantages z-scored among turns taken in the same state (the
  diagnostics' anchors are the full env state, the hidden mistake flag included: privileged);
- ``gigpo_obs``: GiGPO with the step advantages z-scored among turns taken on the same observation (what the agent
  saw, as the GiGPO paper groups);
- ``mt_grpo``: multi-turn GRPO, each turn's verified signal (``info["correct"]``; None on distractor stages)
  z-scored among the same turn of the group, plus the outcome z-scored over the group (the final turn: the outcome
  alone);
- ``turn_ppo``: PPO with a turn-level critic (V at each turn's first token, GAE over turns);
- ``progress_td`` / ``progress_gae``: the verified progress as an immediate per-turn reward (with the outcome) under
  ``turn_ppo``'s critic, TD(0) (``lam`` 0) / GAE ``lam`` 0.5; the critic is detached from the trunk, warmed by 24
  value-only steps from the warm start and has its own learning rate (1e-2: at 1e-3 and below its explained
  variance fell below 0 during RL on Chain H=2).

A run the trainer stops as collapsed (``collapse_check``: its valid-action share or success halved, or its gradient
norm exploded) is a reported failure, not a data point: the table counts it in ``collapsed`` and leaves it out of
the means and of the paired differences.

IGPO is not in the grid: its turn reward is the gain in the policy's probability of a gold answer string, and the
diagnostics have choices, not an answer to score.

Jobs run in ``--jobs`` spawned processes (one torch thread each). Each finished job leaves ``result.json`` in its
directory (written atomically), so an interrupted sweep started again with the same ``--out`` skips what finished
and resumes an interrupted run from its last checkpoint. Writes ``results.md`` (the table), ``results.json`` (its rows),
``runs.jsonl`` (every run's start, end and curves) and ``credit_sweep.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

#: Method name -> trainer overrides.
METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"algo": "grpo"},
    "rloo": {"algo": "rloo"},
    "gtpo": {"algo": "grpo", "estimator": "gtpo"},
    "progress": {"algo": "grpo", "estimator": "gtpo", "progress_key": "progress"},
    "gigpo": {"algo": "grpo", "estimator": "gigpo"},
    "gigpo_obs": {"algo": "grpo", "estimator": "gigpo_obs"},
    "mt_grpo": {"algo": "grpo", "estimator": "mt_grpo"},
    "turn_ppo": {"algo": "ppo", "estimator": "turn_ppo"},
    "progress_td": {"algo": "ppo", "estimator": "turn_ppo", "progress_key": "progress", "lam": 0.0,
                    "reward_components": ["outcome", "progress"], "detach_critic": True, "critic_warmup_steps": 24,
                    "value_lr": 1e-2},
    "progress_gae": {"algo": "ppo", "estimator": "turn_ppo", "progress_key": "progress", "lam": 0.5,
                     "reward_components": ["outcome", "progress"], "detach_critic": True, "critic_warmup_steps": 24,
                     "value_lr": 1e-2},
}  # fmt: skip
#: The default grid: env -> horizons.
CELLS: dict[str, tuple[int, ...]] = {"Chain": (2, 4, 8, 16), "Umbrella": (2, 4, 8, 16), "KeyDoor": (2, 8)}
#: The per-iteration numbers a run keeps for the report.
KEPT = ("iteration", "success_rate", "reward_mean", "zero_std_group_frac", "eval_success_rate", "time_rollout",
        "time_update", "sft_loss", "valid_action_frac", "entropy", "grad_norm", "grad_norm_max", "value_grad_norm",
        "explained_variance", "explained_variance_mc", "turn_accuracy", "collapse_reason")  # fmt: skip


@dataclass(frozen=True)
class Job:
    """One unit of work: the SFT warm start of (env, seed) when ``method`` is None (``horizon`` is then the
    demonstrations' horizon), else one RL run."""

    env: str
    horizon: int
    seed: int
    method: str | None = None

    @property
    def name(self) -> str:
        if self.method is None:
            return f"{self.env}-s{self.seed}"
        return f"{self.env}-H{self.horizon}-s{self.seed}-{self.method}"

    def directory(self, out: Path) -> Path:
        return out / ("sft" if self.method is None else "rl") / self.name

    def warm_start(self, sft_horizon: int) -> Job:
        return Job(self.env, sft_horizon, self.seed)


def config_overrides(job: Job, args: argparse.Namespace, out: Path, horizon: int | None = None) -> dict[str, Any]:
    """The trainer config of ``job`` (at ``horizon`` instead of the job's own when given)."""
    h = job.horizon if horizon is None else horizon
    env_kwargs = {"horizon": h, "num_options": args.num_options}
    common: dict[str, Any] = {
        "seed": job.seed,
        "env_id": f"agentgym/{job.env}-v0",
        "env_kwargs": env_kwargs,
        "eval_env_kwargs": env_kwargs,
        "eval_tasks": args.eval_episodes,
        "eval_temperature": 1.0,
        "max_turns": h,
        "max_new_tokens": 8,
        "max_total_tokens": 4096,
        "stop": ["</answer>"],
        "batch_tasks": args.batch_tasks,
        "group_size": args.group_size,
        "minibatch_size": args.minibatch_size,
        "lr": args.lr,
        "kl_coef": 0.0,
        "plot": False,
        "progress": False,  # worker processes would interleave their bars
        "out_dir": str(job.directory(out)),
    }
    if job.method is None:
        return {**common, "iterations": 0, "sft_steps": args.sft_steps, "sft_lr": args.sft_lr}
    sft = job.warm_start(args.sft_horizon).directory(out) / "checkpoint.pt"
    return {**common, **METHODS[job.method], "iterations": args.iterations, "init_from": str(sft), "resume": True,
            "checkpoint_every": 5}  # fmt: skip


def run_job(job: Job, args: argparse.Namespace, out: Path) -> tuple[Job, dict[str, Any]]:
    """Run ``job`` in this process and write its ``result.json``. A warm start is evaluated at every horizon of its
    env (``before``: the start of every method's run, computed once); an RL run after its last iteration."""
    import torch

    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate, train

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    config = load_config("tiny", overrides=config_overrides(job, args, out))
    summary = train(config)
    result: dict[str, Any] = {"job": asdict(job), "history": [{k: h[k] for k in KEPT if k in h}
                                                              for h in summary["history"]]}  # fmt: skip
    result["collapsed"] = next((h["collapse_reason"] for h in summary["history"] if h.get("collapse_reason")), None)
    if job.method is None:
        result["before"] = evaluate_start(summary["state"], job, args, out)
    elif result["collapsed"] is None:  # a collapsed run is a failure, not a data point: no "after"
        result["after"] = evaluate(summary["state"], config)["eval_success_rate"]
    summary["state"].close()
    result["seconds"] = time.perf_counter() - t0
    path = job.directory(out) / "result.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, path)
    if job.method is not None:  # a finished run needs no checkpoint (tens of MB each)
        (job.directory(out) / "checkpoint.pt").unlink(missing_ok=True)
    return job, result


def evaluate_start(state: Any, job: Job, args: argparse.Namespace, out: Path) -> dict[int, float]:
    """The warm start's held-out success at every horizon of its env (each with its own eval env)."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate

    before = {}
    for h in args.cells[job.env]:
        state.close()  # the eval env of the previous horizon
        before[h] = evaluate(state, load_config("tiny", overrides=config_overrides(job, args, out, h)))
    return {h: r["eval_success_rate"] for h, r in before.items()}


def reevaluate_starts(args: argparse.Namespace, out: Path) -> None:
    """Recompute ``before`` of every finished warm start from its checkpoint (``--reevaluate-starts``)."""
    import torch

    from agentgym.baselines.checkpoint import load_weights
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import setup

    torch.set_num_threads(1)
    for path in sorted((out / "sft").glob("*/result.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        job = Job(**result["job"])
        state = setup(load_config("tiny", overrides=config_overrides(job, args, out)))
        load_weights(state, job.directory(out) / "checkpoint.pt")
        result["before"] = evaluate_start(state, job, args, out)
        state.close()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result), encoding="utf-8")
        os.replace(tmp, path)
        print(job.name, result["before"], flush=True)


def grid(args: argparse.Namespace) -> list[Job]:
    """The SFT jobs, then the RL jobs of ``--seeds`` (longest horizons first), then those of ``--more-seeds``
    (at the horizons ``--more-seeds-at``), so a sweep cut short has the base grid."""
    rl = [Job(env, h, s, m) for s in args.seeds for env, hs in args.cells.items() for h in hs for m in args.methods]
    rl.sort(key=lambda j: -j.horizon)
    rl += [Job(env, h, s, m) for s in args.more_seeds for env, hs in args.cells.items() for h in hs
           if h in args.more_seeds_at for m in args.methods]  # fmt: skip
    sft = list(dict.fromkeys(j.warm_start(args.sft_horizon) for j in rl))
    return sft + rl


def run_grid(args: argparse.Namespace, out: Path) -> None:
    """Run what has no ``result.json`` yet, each RL job once its warm start exists."""
    todo = [j for j in grid(args) if not (j.directory(out) / "result.json").is_file()]
    pending = {j for j in todo if j.method is None}  # warm starts not yet written
    queue = [j for j in todo if j.method is None or j.warm_start(args.sft_horizon) not in pending]
    waiting = [j for j in todo if j not in queue]
    bar = tqdm(total=len(todo), desc="sweep", unit="run")
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx) as pool:
        running: dict[Future, Job] = {pool.submit(run_job, j, args, out): j for j in queue}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                _, result = fut.result()  # a failed run stops the sweep with its traceback
                bar.update(1)
                bar.set_postfix_str(f"{job.name} {result['seconds']:.0f}s", refresh=False)
                if job.method is None:  # its RL runs can start
                    for j in [w for w in waiting if w.warm_start(args.sft_horizon) == job]:
                        waiting.remove(j)
                        running[pool.submit(run_job, j, args, out)] = j
    bar.close()


# ----------------------------------------------------------------------------------------------------------------
# report


def load_results(out: Path) -> list[dict[str, Any]]:
    """Every finished RL run, with ``before`` (its warm start's success at its horizon) and ``after``."""
    starts = {}
    for p in (out / "sft").glob("*/result.json"):
        r = json.loads(p.read_text(encoding="utf-8"))
        starts[(r["job"]["env"], r["job"]["seed"])] = r.get("before", {})
    results = []
    for p in sorted((out / "rl").glob("*/result.json")):
        r = json.loads(p.read_text(encoding="utf-8"))
        j = r["job"]
        evals = [h["eval_success_rate"] for h in r["history"] if "eval_success_rate" in h]
        before = starts.get((j["env"], j["seed"]), {})
        r.setdefault("before", before[str(j["horizon"])] if str(j["horizon"]) in before else evals[0])
        r.setdefault("collapsed", None)
        r.setdefault("after", None if r["collapsed"] else evals[-1] if evals else None)
        results.append(r)
    return results


def summarise(result: dict[str, Any]) -> dict[str, float]:
    """Per run: eval success before and after, the area under the training success curve (its mean over the
    iterations), and the mean share of groups whose outcomes all tie."""
    rl = [h for h in result["history"] if h.get("iteration", 0) > 0]
    return {
        "before": result["before"],
        "after": result["after"],
        "auc": float(np.mean([h["success_rate"] for h in rl])),
        "zero_var": float(np.mean([h["zero_std_group_frac"] for h in rl])),
    }


def bootstrap_ci(diffs: np.ndarray, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean of ``diffs`` (resampling seeds)."""
    rng = np.random.default_rng(seed)
    means = rng.choice(diffs, size=(n, diffs.size), replace=True).mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def table(results: list[dict[str, Any]], methods: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table, one row per (env, H, method), and its rows as records."""
    by: dict[tuple[str, int, str], dict[int, dict[str, float]]] = {}
    collapsed: dict[tuple[str, int, str], int] = {}
    for r in results:
        j = r["job"]
        key = (j["env"], j["horizon"], j["method"])
        if r.get("collapsed"):  # a reported failure: counted, never averaged or paired
            collapsed[key] = collapsed.get(key, 0) + 1
            continue
        by.setdefault(key, {})[j["seed"]] = summarise(r)
    head = ("| env | H | method | seeds | collapsed | success before | after (mean ± std) | AUC | zero-var groups "
            "| after − grpo [95% CI] |")  # fmt: skip
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    records = []
    for env, h, method in sorted(by, key=lambda k: (k[0], k[1], methods.index(k[2]) if k[2] in methods else 99)):
        runs = by[(env, h, method)]
        seeds = sorted(runs)
        get = {k: np.array([runs[s][k] for s in seeds]) for k in ("before", "after", "auc", "zero_var")}
        base = by.get((env, h, "grpo"), {})
        paired = [s for s in seeds if s in base]
        diff, ci = float("nan"), (float("nan"), float("nan"))
        if method != "grpo" and paired:
            d = np.array([runs[s]["after"] - base[s]["after"] for s in paired])
            diff = float(d.mean())
            if len(paired) >= 3:
                ci = bootstrap_ci(d)
        rec = {"env": env, "horizon": h, "method": method, "seeds": len(seeds),
               "collapsed": collapsed.get((env, h, method), 0),
               **{f"{k}_mean": float(v.mean()) for k, v in get.items()}, "after_std": float(get["after"].std()),
               "diff_to_grpo": diff, "diff_ci": list(ci)}  # fmt: skip
        records.append(rec)
        cell = "" if math.isnan(diff) else f"{diff:+.3f}"
        cell += "" if math.isnan(ci[0]) else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]"
        lines.append(f"| {env} | {h} | `{method}` | {len(seeds)} | {rec['collapsed']} | {get['before'].mean():.3f} | "
                     f"{get['after'].mean():.3f} ± {get['after'].std():.3f} | {get['auc'].mean():.3f} | "
                     f"{get['zero_var'].mean():.2f} | {cell} |")  # fmt: skip
    for env, h, method in sorted(set(collapsed) - set(by)):  # every seed of the cell collapsed
        n = collapsed[(env, h, method)]
        records.append({"env": env, "horizon": h, "method": method, "seeds": 0, "collapsed": n})
        lines.append(f"| {env} | {h} | `{method}` | 0 | {n} | | | | | |")
    return "\n".join(lines), records


def pivot(records: list[dict[str, Any]], methods: list[str]) -> str:
    """One row per (env, H): the start, then each method's success after the budget (mean ± std over seeds); the
    best mean of the row in bold."""
    cells: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for rec in records:
        if rec["seeds"]:  # cells where every run collapsed have no mean to show
            cells.setdefault((rec["env"], rec["horizon"]), {})[rec["method"]] = rec
    shown = [m for m in methods if any(m in row for row in cells.values())]
    lines = ["| env | H | seeds | start | " + " | ".join(f"`{m}`" for m in shown) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(shown)]  # fmt: skip
    for (env, h), row in sorted(cells.items()):
        best = max(r["after_mean"] for r in row.values())
        first = next(iter(row.values()))
        out = []
        for m in shown:
            if m not in row:
                out.append("")
                continue
            text = f"{row[m]['after_mean']:.3f} ± {row[m]['after_std']:.3f}"
            out.append(f"**{text}**" if row[m]["after_mean"] == best and best > 0 else text)
        seeds = "/".join(sorted({str(r["seeds"]) for r in row.values()}))
        lines.append(f"| {env} | {h} | {seeds} | {first['before_mean']:.3f} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], methods: list[str], path: Path) -> None:
    """Row per env: success after the budget against H (one line per method), then the training success curves
    (mean over seeds, smoothed over 5 iterations) at each H."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({r["job"]["env"] for r in results})
    horizons = sorted({r["job"]["horizon"] for r in results})
    fig, axes = plt.subplots(len(envs), 1 + len(horizons), figsize=(3.6 * (1 + len(horizons)), 3.2 * len(envs)),
                             squeeze=False)  # fmt: skip
    colours = {m: f"C{i}" for i, m in enumerate(methods)}
    for row, env in zip(axes, envs, strict=True):
        mine = [r for r in results if r["job"]["env"] == env]
        for m in methods:
            xs, ys, es = [], [], []
            for h in horizons:
                after = [r["after"] for r in mine
                         if r["job"]["method"] == m and r["job"]["horizon"] == h and not r["collapsed"]]  # fmt: skip
                if after:
                    xs.append(h), ys.append(np.mean(after)), es.append(np.std(after))
            if xs:
                row[0].errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=m, color=colours[m])
        before = {h: np.mean([r["before"] for r in mine if r["job"]["horizon"] == h]) for h in horizons
                  if any(r["job"]["horizon"] == h for r in mine)}  # fmt: skip
        row[0].plot(list(before), list(before.values()), "k--", label="SFT start")
        row[0].set_xscale("log", base=2)
        row[0].set_title(f"{env}: success after the budget", fontsize=9)
        row[0].set_xlabel("H")
        row[0].legend(fontsize=7)
        for ax, h in zip(row[1:], horizons, strict=True):
            if not any(r["job"]["horizon"] == h for r in mine):
                ax.axis("off")  # this env was not run at this horizon
                continue
            for m in methods:
                curves = [[x["success_rate"] for x in r["history"] if x.get("iteration", 0) > 0] for r in mine
                          if r["job"]["method"] == m and r["job"]["horizon"] == h and not r["collapsed"]]  # fmt: skip
                if curves:
                    n = min(map(len, curves))
                    mean = np.mean([c[:n] for c in curves], axis=0)
                    smooth = np.convolve(mean, np.ones(5) / 5, mode="valid") if n >= 5 else mean
                    ax.plot(np.arange(len(smooth)) + 1, smooth, color=colours[m], label=m)
            ax.set_title(f"{env} H={h}: training success", fontsize=9)
            ax.set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def report(args: argparse.Namespace, out: Path) -> str:
    results = [r for r in load_results(out) if r["job"]["method"] in args.methods]
    if not results:
        return "no finished runs yet"
    text, records = table(results, list(args.methods))
    budget = args.iterations * args.batch_tasks * args.group_size
    head = (f"Budget: {budget} training episodes per run ({args.iterations} iterations x {args.batch_tasks} tasks x "
            f"{args.group_size}), SFT warm start {args.sft_steps} steps, eval {args.eval_episodes} held-out episodes "
            f"at T=1, k={args.num_options} options. Compute: {sum(r['seconds'] for r in results) / 3600:.2f} "
            f"core-hours for {len(results)} runs.")  # fmt: skip
    text = pivot(records, list(args.methods)) + "\n\n" + text
    (out / "results.md").write_text(head + "\n\n" + text + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    with open(out / "runs.jsonl", "w", encoding="utf-8") as fh:  # every run, compact: enough to redraw the report
        for r in results:
            curves = {k: [h.get(k) for h in r["history"] if h.get("iteration", 0) > 0]
                      for k in ("success_rate", "zero_std_group_frac", "valid_action_frac", "grad_norm")}  # fmt: skip
            fh.write(json.dumps({**r["job"], "before": r["before"], "after": r["after"], "collapsed": r["collapsed"],
                                 "seconds": r["seconds"], **curves}) + "\n")  # fmt: skip
    plot(results, list(args.methods), out / "credit_sweep.png")
    return head + "\n\n" + text


def parse_cells(text: str) -> dict[str, tuple[int, ...]]:
    """``Chain:2,4;Umbrella:8`` -> {"Chain": (2, 4), "Umbrella": (8,)}."""
    cells = {}
    for part in text.split(";"):
        env, _, hs = part.partition(":")
        cells[env.strip()] = tuple(int(h) for h in hs.split(","))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=parse_cells, default=CELLS, help="e.g. 'Chain:2,4,8,16;KeyDoor:2,8'")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--more-seeds", type=int, nargs="*", default=[3, 4])
    parser.add_argument("--more-seeds-at", type=int, nargs="*", default=[8], help="horizons that get --more-seeds")
    parser.add_argument("--num-options", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--batch-tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--minibatch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--sft-steps", type=int, default=110)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-horizon", type=int, default=4, help="the demonstrations' H (one warm start per seed)")
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="runs/credit_sweep")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--reevaluate-starts", action="store_true", help="recompute the warm starts' evaluations")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.reevaluate_starts:
        reevaluate_starts(args, out)
    elif not args.report_only:
        run_grid(args, out)
    print(report(args, out))


if __name__ == "__main__":
    main()
