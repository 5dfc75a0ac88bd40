"""Credit on the seed papers' envs: outcome-only ``grpo`` against ``mt_grpo`` reading the env's verified turn signal
(``TURN_SIGNALS``), env x arm x seed, paired by seed (issue 34; the plan: bench/results/credit_envs/PLAN.md).

    nice -n 10 python bench/credit_envs.py --out bench/results/credit_envs          # the planned grid
    python bench/credit_envs.py --envs agentgym/Sokoban-v0 --seeds 0 1 --iterations 2 --out runs/pilot
    python bench/credit_envs.py --envs agentgym/Shop-v0 --env-config 'agentgym/Shop-v0={"max_new_tokens": 96}'
    python bench/credit_envs.py --report-only --out bench/results/credit_envs       # the report of what finished

**Warm starts.** Each (env, seed) gets one warm start: the tiny model with ``model_seed = seed``, then the env's
fixed number of SFT steps on its oracle's demonstrations (``EnvSetting.sft_steps``), evaluated on the held-out eval
tasks. Every arm of that seed starts from its checkpoint (``init_from``) with a fresh optimizer. **Gate:** a warm
start whose held-out valid-action share is 0 can give no arm a reward or a turn signal (every advantage is zero, no
update is taken), so its seed is untestable and its RL runs are not run (``--no-gate`` runs them anyway).

**Runs.** ``--iterations`` x ``--batch-tasks`` x ``--group-size`` training episodes per run, with the same learning
rate, epochs and minibatches for every arm (the arms are ``bench/credit_sweep.py``'s ``METHODS``). Each run is
evaluated after its last iteration on the same ``--eval-tasks`` held-out tasks as its warm start, at T = 1 with one
sampling seed (``--eval-seed``) for every run. A run the trainer stops as collapsed is a reported failure, not a data
point.

**Statistics.** Per env and arm against ``grpo`` of the same seeds: the mean paired difference of final held-out
success (the primary family, one comparison per env and arm), training AUC and held-out final progress (the
secondary family), each with an exact two-sided paired sign-flip test (``agentgym.running.stats``) and Holm's
correction within its family.

Jobs run in ``--jobs`` spawned processes (one torch thread each). Each finished job writes ``result.json`` in its
folder (atomically), so a run started again with the same ``--out`` skips what finished and resumes an interrupted
RL run from its last checkpoint; a warm start whose checkpoint is gone (results are committed, weights are not) is
redone when a run still needs it and must equal its record. Each finished job also appends a line to
``records.jsonl`` and prints it. The report (``REPORT.md``, ``results.json``, ``credit_envs.png``) is computed from
the ``result.json`` files alone and works on partial results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

if str(Path(__file__).resolve().parent) not in sys.path:  # bench/ is no package: the credit sweep is a sibling
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from credit_sweep import KEPT, METHODS, _curves, _fmt

from agentgym.running.stats import MAX_EXACT, holm, sign_flip_test


@dataclass(frozen=True)
class EnvSetting:
    """How one env is played: its arguments (training; ``eval_env_kwargs`` for the held-out tasks, None: the same),
    the rollout's turn and token limits, and the warm start's SFT steps."""

    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    eval_env_kwargs: Mapping[str, Any] | None = None
    max_turns: int = 8
    max_new_tokens: int = 64
    max_total_tokens: int = 4096
    stop: tuple[str, ...] = ()
    sft_steps: int = 100

    def __post_init__(self) -> None:
        small = [n for n in ("max_turns", "max_new_tokens", "max_total_tokens", "sft_steps") if getattr(self, n) < 1]
        if small:
            raise ValueError(f"{', '.join(small)} must be >= 1")

    def merged(self, change: Mapping[str, Any]) -> EnvSetting:
        """This setting with ``change``'s fields. ``env_kwargs`` is merged key by key, into ``eval_env_kwargs`` too
        (where the eval tasks have their own); ``eval_env_kwargs`` is merged key by key after that."""
        known = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(change) - set(known))
        if unknown:
            raise ValueError(f"unknown env setting(s) {unknown}; known: {known}")
        out = dict(change)
        train = dict(out.get("env_kwargs") or {})
        out["env_kwargs"] = {**self.env_kwargs, **train}
        evals = None if self.eval_env_kwargs is None else {**self.eval_env_kwargs, **train}
        if out.get("eval_env_kwargs") is not None:
            evals = {**(evals or out["env_kwargs"]), **out["eval_env_kwargs"]}
        out["eval_env_kwargs"] = evals
        if "stop" in out:
            out["stop"] = tuple(out["stop"])
        return dataclasses.replace(self, **out)

    def eval_kwargs(self) -> dict[str, Any]:
        return dict(self.env_kwargs if self.eval_env_kwargs is None else self.eval_env_kwargs)


#: The planned settings (PLAN.md). Sokoban at 6x6-2: with one box ``boxes_on_target`` is 1 only on the solving (final)
#: turn, whose mt_grpo term is the outcome's, so at 6x6-1 mt_grpo is grpo exactly. Eval rooms come from another
#: level seed (never trained on).
SETTINGS: Mapping[str, EnvSetting] = MappingProxyType({
    "agentgym/Sokoban-v0": EnvSetting(
        env_kwargs={"size": "6x6-2", "num_levels": 200, "level_seed": 0, "max_turns": 12},
        eval_env_kwargs={"size": "6x6-2", "num_levels": 200, "level_seed": 1, "max_turns": 12},
        max_turns=12, max_new_tokens=8, stop=("</answer>",), sft_steps=300),
    "agentgym/SQL-v0": EnvSetting(max_turns=4, max_new_tokens=72, sft_steps=100),
})  # fmt: skip
ENVS = tuple(SETTINGS)
ARMS = ("grpo", "mt_grpo")
#: Endpoint -> (what it compares, its family).
ENDPOINTS = {"final": ("after", "primary"), "auc": ("auc", "secondary"), "progress": ("after_progress", "secondary")}


@dataclass(frozen=True)
class Job:
    """The warm start of (env, seed) when ``arm`` is None, else one RL run."""

    env: str
    seed: int
    arm: str | None = None

    @property
    def name(self) -> str:
        slug = self.env.rpartition("/")[2]
        return f"{slug}-s{self.seed}" + ("" if self.arm is None else f"-{self.arm}")

    def directory(self, out: Path) -> Path:
        return out / ("warm" if self.arm is None else "rl") / self.name

    @property
    def warm_start(self) -> Job:
        return Job(self.env, self.seed)


def setting_of(env: str, args: argparse.Namespace) -> EnvSetting:
    """The env's planned setting (or the defaults for an env without one) with its ``--env-config`` applied."""
    base = SETTINGS.get(env, EnvSetting())
    return base.merged(args.env_config[env]) if env in args.env_config else base


def config_overrides(job: Job, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The trainer config of ``job``."""
    s = setting_of(job.env, args)
    common: dict[str, Any] = {
        "seed": job.seed,
        "model_seed": job.seed,  # seeds differ in their initial weights, not only in data and sampling
        "env_id": job.env,
        "env_kwargs": dict(s.env_kwargs),
        "eval_env_kwargs": s.eval_kwargs(),
        "eval_tasks": args.eval_tasks,
        "eval_temperature": 1.0,
        "max_turns": s.max_turns,
        "max_new_tokens": s.max_new_tokens,
        "max_total_tokens": s.max_total_tokens,
        "stop": list(s.stop),
        "batch_tasks": args.batch_tasks,
        "group_size": args.group_size,
        "minibatch_size": args.minibatch_size,
        "epochs": args.epochs,
        "lr": args.lr,
        "kl_coef": 0.0,
        "sft_lr": args.sft_lr,
        "sft_batch": args.sft_batch,
        "plot": False,
        "progress": False,  # worker processes would interleave their bars
        "out_dir": str(job.directory(out) / "train"),
    }
    if job.arm is None:
        return {**common, "iterations": 0}
    ckpt = job.warm_start.directory(out) / "checkpoint.pt"
    return {**common, **METHODS[job.arm], "iterations": args.iterations, "init_from": str(ckpt), "resume": True,
            "checkpoint_every": 5}  # fmt: skip


def eval_config(config: Any, args: argparse.Namespace) -> Any:
    """``config`` evaluated with the one sampling seed of every run (``--eval-seed``): the same draws everywhere."""
    return dataclasses.replace(config, seed=args.eval_seed)


def run_warm_start(job: Job, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The SFT steps of ``job`` on the env's oracle, its checkpoint, and its held-out evaluation."""
    from agentgym.baselines.checkpoint import save_checkpoint
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate, setup
    from agentgym.baselines.warmup import sft_step

    config = load_config("tiny", overrides=config_overrides(job, args, out))
    state = setup(config)
    steps = setting_of(job.env, args).sft_steps
    losses = [sft_step(state, config, 0, k) for k in range(steps)]
    save_checkpoint(state, config, job.directory(out) / "checkpoint.pt")
    before = evaluate(state, eval_config(config, args))
    state.close()
    return {"job": asdict(job), "sft_steps": steps, "sft_loss": losses, "before": before,
            "playable": before["eval_valid_action_frac"] > 0}  # fmt: skip


def run_rl(job: Job, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One RL run from its warm start; its history and, unless it collapsed, its held-out evaluation after."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate, train

    config = load_config("tiny", overrides=config_overrides(job, args, out))
    summary = train(config)
    result: dict[str, Any] = {"job": asdict(job),
                              "history": [{k: h[k] for k in KEPT if k in h} for h in summary["history"]]}  # fmt: skip
    result["collapsed"] = next((h["collapse_reason"] for h in summary["history"] if h.get("collapse_reason")), None)
    if result["collapsed"] is None:  # a collapsed run is a failure, not a data point: no "after"
        result["after_eval"] = evaluate(summary["state"], eval_config(config, args))
    summary["state"].close()
    return result


def run_job(job: Job, args: argparse.Namespace, out: Path) -> tuple[Job, dict[str, Any]]:
    """Run ``job`` in this process and write its ``result.json`` (with its start and end time)."""
    import torch

    torch.set_num_threads(1)
    job.directory(out).mkdir(parents=True, exist_ok=True)
    start, t0 = time.time(), time.perf_counter()
    result = run_warm_start(job, args, out) if job.arm is None else run_rl(job, args, out)
    result |= {"seconds": time.perf_counter() - t0, "started": start, "ended": time.time()}
    path = job.directory(out) / "result.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, path)
    if job.arm is not None:  # a finished run needs no checkpoint
        for name in ("checkpoint.pt", "methods.pt"):
            (job.directory(out) / "train" / name).unlink(missing_ok=True)
    return job, result


def grid(args: argparse.Namespace) -> list[Job]:
    """Seed by seed: the warm starts of every env, then the RL runs, so a run cut short has whole seeds."""
    jobs = []
    for s in args.seeds:
        jobs += [Job(env, s) for env in args.envs]
        jobs += [Job(env, s, arm) for env in args.envs for arm in args.arms]
    return jobs


def read_result(job: Job, out: Path) -> dict[str, Any] | None:
    path = job.directory(out) / "result.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def record(job: Job, result: dict[str, Any]) -> dict[str, Any]:
    """The streamed line of a finished job."""
    line: dict[str, Any] = {**asdict(job), "seconds": round(result["seconds"], 1)}
    if job.arm is None:
        before = result["before"]
        return line | {"success": before["eval_success_rate"], "valid": before["eval_valid_action_frac"],
                       "playable": result["playable"], "sft_loss_last": result["sft_loss"][-1]}  # fmt: skip
    s = summarise(result)
    return line | {"after": s["after"], "auc": s["auc"], "collapsed": result["collapsed"]}


def run_grid(args: argparse.Namespace, out: Path) -> None:
    """Run what has no ``result.json`` yet; an RL run waits for its warm start and is dropped when the gate shuts
    its seed out."""
    jobs = grid(args)
    finished = {j: r for j in jobs if (r := read_result(j, out)) is not None}
    waiting = [j for j in jobs if j not in finished]
    redo: dict[Job, dict[str, Any]] = {}  # warm starts whose checkpoint is gone while a run still needs it
    for warm in dict.fromkeys(j.warm_start for j in waiting if j.arm is not None):
        if warm in finished and not (warm.directory(out) / "checkpoint.pt").is_file():
            redo[warm] = finished.pop(warm)
            waiting.insert(0, warm)

    def ready(job: Job) -> bool | None:  # None: never (its seed is shut out by the gate)
        if job.arm is None:
            return True
        warm = finished.get(job.warm_start)
        if warm is None:
            return False
        return True if warm["playable"] or args.no_gate else None

    records = out / "records.jsonl"
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx) as pool:
        running: dict[Future, Job] = {}

        def submit() -> None:
            for job in list(waiting):
                verdict = ready(job)
                if verdict is None:
                    waiting.remove(job)
                    print(json.dumps({**asdict(job), "skipped": "its warm start's valid-action share is 0"}),
                          flush=True)  # fmt: skip
                elif verdict and len(running) < args.jobs:
                    waiting.remove(job)
                    running[pool.submit(run_job, job, args, out)] = job

        submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                _, result = fut.result()  # a failed job stops the grid with its traceback
                if job in redo:
                    check_redone(job, redo[job], result)
                finished[job] = result
                line = json.dumps(record(job, result))
                with open(records, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
                print(line, flush=True)
            submit()


def check_redone(job: Job, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Raise unless a redone warm start equals its record (its SFT losses and its held-out evaluation)."""
    new = json.loads(json.dumps(new))
    if new["sft_loss"] != old["sft_loss"] or new["before"] != old["before"]:
        raise RuntimeError(f"warm start {job.name} was redone (its checkpoint is gone) and differs from its "
                           "record; its finished runs would not pair with new ones: move them away or use a new "
                           "--out")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# report


Warm = dict[tuple[str, int], dict[str, Any]]  # (env, seed) -> a warm start's result.json
Runs = dict[tuple[str, int, str], dict[str, Any]]  # (env, seed, arm) -> an RL run's result.json


def load_results(out: Path, args: argparse.Namespace) -> tuple[Warm, Runs]:
    """The recorded warm starts by (env, seed) and RL runs by (env, seed, arm) of the requested grid."""
    warm, runs = {}, {}
    for job in grid(args):
        r = read_result(job, out)
        if r is None:
            continue
        if job.arm is None:
            warm[(job.env, job.seed)] = r
        else:
            runs[(job.env, job.seed, job.arm)] = r
    return warm, runs


def summarise(result: dict[str, Any]) -> dict[str, float]:
    """Per run: held-out success and final progress after (NaN when it collapsed), training AUC (the mean training
    success over its iterations) and its mean share of groups whose outcomes all tie."""
    rl = [h for h in result["history"] if h.get("iteration", 0) > 0]
    after = result.get("after_eval") or {}
    return {
        "after": after.get("eval_success_rate", math.nan),
        "after_progress": after.get("eval_progress", math.nan),
        "auc": float(np.mean([h["success_rate"] for h in rl])) if rl else math.nan,
        "zero_var": float(np.mean([h["zero_std_group_frac"] for h in rl])) if rl else math.nan,
    }


def paired_seeds(env: str, arm: str, runs: Runs, seeds: list[int]) -> list[int]:
    """The seeds where ``arm`` and ``grpo`` both finished without collapsing."""
    ok = [(env, s, a) in runs and not runs[(env, s, a)]["collapsed"] for s in seeds for a in (arm, "grpo")]
    return [s for s, a, b in zip(seeds, ok[0::2], ok[1::2], strict=True) if a and b]


def comparisons(args: argparse.Namespace, runs: Runs) -> list[dict[str, Any]]:
    """Per env, arm (not ``grpo``) and endpoint: the paired differences' test; Holm within each family."""
    rows = []
    for env in args.envs:
        for arm in args.arms:
            if arm == "grpo":
                continue
            seeds = paired_seeds(env, arm, runs, list(args.seeds))
            if not seeds:
                continue
            for endpoint, (key, family) in ENDPOINTS.items():
                mine = [summarise(runs[(env, s, arm)])[key] for s in seeds]
                base = [summarise(runs[(env, s, "grpo")])[key] for s in seeds]
                d = [a - b for a, b in zip(mine, base, strict=True)]
                test = sign_flip_test(d)
                rows.append({"family": family, "env": env, "arm": arm, "endpoint": endpoint, "seeds": seeds,
                             "diffs": d, "ahead": sum(x > 0 for x in d), "behind": sum(x < 0 for x in d),
                             **asdict(test)})  # fmt: skip
    for family in ("primary", "secondary"):
        mine = [r for r in rows if r["family"] == family]
        for r, adjusted in zip(mine, holm([r["p"] for r in mine]), strict=True):
            r["p_holm"] = adjusted
            r["family_size"] = len(mine)
    return rows


def _ms(values: list[float], digits: int = 3) -> str:
    """mean ± sd (sample sd; the mean alone for one value; empty for none)."""
    if not values:
        return ""
    mean = _fmt(float(np.mean(values)), digits)
    return mean if len(values) == 1 else f"{mean} ± {_fmt(float(np.std(values, ddof=1)), digits)}"


def design(args: argparse.Namespace) -> str:
    """The design header, from the arguments."""
    n = len(args.seeds)
    episodes = args.iterations * args.batch_tasks * args.group_size
    lines = ["## Design", "",
             "**EXPLORATORY** (PLAN.md, committed before the run): sizes fit a one-hour CPU budget, no effect size was "
             "predicted; a small p here is a lead for a confirmatory round, not a finding.", "",
             f"- Arms: {', '.join(f'`{a}`' for a in args.arms)} (bench/credit_sweep.py `METHODS`); seeds "
             f"{', '.join(map(str, args.seeds))} ({n} paired seeds; tiny model, `model_seed` = seed).",
             "- Envs:"]  # fmt: skip
    for env in args.envs:
        s = setting_of(env, args)
        held = "" if s.eval_env_kwargs is None else f", eval `{json.dumps(s.eval_kwargs(), sort_keys=True)}`"
        lines.append(f"  - `{env}`: `{json.dumps(dict(s.env_kwargs), sort_keys=True)}`{held}; max {s.max_turns} "
                     f"turns, {s.max_new_tokens} new tokens a turn; warm start {s.sft_steps} SFT steps on the "
                     f"oracle (batch {args.sft_batch}, lr {args.sft_lr:g}).")  # fmt: skip
    p_min = f"; with {n} seeds the smallest attainable p is {2 / 2**n:.4f}" if n <= MAX_EXACT else ""
    lines += [
        f"- Budget per run: {args.iterations} iterations x {args.batch_tasks} tasks x {args.group_size} rollouts = "
        f"{episodes} training episodes; lr {args.lr:g}, {args.epochs} epoch(s), minibatch {args.minibatch_size}, "
        "no KL, T = 1.",
        f"- Evaluation: {args.eval_tasks} held-out tasks at T = 1, one sampling seed ({args.eval_seed}) for every "
        "run: the warm start (before) and each run (after) play the same draws.",
        "- Gate: a seed whose warm start has a held-out valid-action share of 0 is untestable; its RL runs are "
        + ("run anyway (`--no-gate`)." if args.no_gate else "not run."),
        "- Endpoints: final held-out success (primary family: one comparison per env and arm); training AUC (mean "
        "training success over the iterations) and held-out final progress (secondary family).",
        "- Test: exact two-sided paired sign-flip test of the mean difference against `grpo` (all 2^n sign "
        f"patterns){p_min}; Holm's correction within each family.",
    ]
    return "\n".join(lines)


def render(args: argparse.Namespace, out: Path) -> tuple[str, dict[str, Any]]:
    """The report's markdown and its tests, computed from the recorded ``result.json`` files alone (nothing written)."""
    warm, runs = load_results(out, args)
    tests = comparisons(args, runs)
    parts = ["# Credit on the seed papers' envs: `grpo` vs the env's verified turn signal", "", design(args), "",
             "## Final held-out success and training AUC (mean ± sd over seeds)", "", summary_table(args, warm, runs),
             "", "## Paired tests against `grpo`", "", tests_table(tests) if tests else "no paired comparison yet",
             "", "## Per seed", "", seed_table(args, warm, runs), "", "![training success per iteration and "
             "held-out success per seed](credit_envs.png)", "", "## Warm starts", "", warm_table(args, warm), "",
             "## Compute", "", compute(warm, runs), "", "## Missing", ""]  # fmt: skip
    gaps = missing(args, warm, runs)
    parts += [f"- {g}" for g in gaps] or ["nothing: the requested grid is complete (the gate's exclusions above)"]
    return "\n".join(parts) + "\n", {"tests": tests, "missing": gaps}


def report(args: argparse.Namespace, out: Path) -> str:
    """Write REPORT.md, results.json and the plot (when a run finished) of what has finished; return the markdown."""
    md, results = render(args, out)
    (out / "REPORT.md").write_text(md, encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    warm, runs = load_results(out, args)
    if runs:
        plot(args, warm, runs, out / "credit_envs.png")
    return md


def summary_table(args: argparse.Namespace, warm: Warm, runs: Runs) -> str:
    lines = ["| env | seeds playable | warm start success | arm | runs | collapsed | final success | AUC | "
             "final progress | zero-var groups |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for env in args.envs:
        starts = [warm[(env, s)] for s in args.seeds if (env, s) in warm]
        playable = f"{sum(w['playable'] for w in starts)} of {len(starts)}"
        start = _ms([w["before"]["eval_success_rate"] for w in starts])
        mine_all = [(arm, [runs[(env, s, arm)] for s in args.seeds if (env, s, arm) in runs]) for arm in args.arms]
        if not any(rs for _, rs in mine_all):
            lines.append(f"| {env} | {playable} | {start} | (no run) | 0 | | | | | |")
            continue
        for arm, rs in mine_all:
            kept = [summarise(r) for r in rs if not r["collapsed"]]
            cols = [_ms([k[key] for k in kept]) for key in ("after", "auc", "after_progress")]
            zero = _fmt(float(np.mean([k["zero_var"] for k in kept])), 2) if kept else ""
            lines.append(f"| {env} | {playable} | {start} | `{arm}` | {len(rs)} | {len(rs) - len(kept)} | "
                         f"{' | '.join(cols)} | {zero} |")  # fmt: skip
    return "\n".join(lines)


def tests_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| family | env | arm − `grpo` | endpoint | n | mean diff ± sd | ahead / behind / tied | p (exact) | "
             "Holm p |", "|---|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: r["family"] != "primary"):
        sd = "" if math.isnan(r["sd"]) else f" ± {r['sd']:.3f}"
        p = f"{r['p']:.4f}" + ("" if r["exact"] else f" (MC, {r['samples']} draws)")
        tied = r["n"] - r["ahead"] - r["behind"]
        lines.append(f"| {r['family']} | {r['env']} | `{r['arm']}` | {r['endpoint']} | {r['n']} | "
                     f"{r['mean']:+.4f}{sd} | {r['ahead']} / {r['behind']} / {tied} | {p} | "
                     f"{r['p_holm']:.4f} |")  # fmt: skip
    return "\n".join(lines)


def seed_table(args: argparse.Namespace, warm: Warm, runs: Runs) -> str:
    """Per env and seed: the warm start's held-out success, each arm's final success (AUC), and the paired
    difference of each arm to ``grpo``."""
    others = [a for a in args.arms if a != "grpo"]
    lines = ["| env | seed | warm start | " + " | ".join(f"`{a}` final (AUC)" for a in args.arms) + " | "
             + " | ".join(f"`{a}` − `grpo`" for a in others) + " |",
             "|---|---:|---:|" + "---:|" * (len(args.arms) + len(others))]  # fmt: skip
    for env in args.envs:
        for s in args.seeds:
            w = warm.get((env, s))
            if w is None or not any((env, s, a) in runs for a in args.arms):
                continue
            cells, finals = [], {}
            for a in args.arms:
                r = runs.get((env, s, a))
                if r is None:
                    cells.append("")
                elif r["collapsed"]:
                    cells.append("collapsed")
                else:
                    k = summarise(r)
                    finals[a] = k["after"]
                    cells.append(f"{_fmt(k['after'])} ({_fmt(k['auc'])})")
            diffs = [f"{finals[a] - finals['grpo']:+.4f}" if a in finals and "grpo" in finals else "" for a in others]
            lines.append(f"| {env} | {s} | {_fmt(w['before']['eval_success_rate'])} | " + " | ".join(cells + diffs)
                         + " |")  # fmt: skip
    return "\n".join(lines)


def warm_table(args: argparse.Namespace, warm: Warm) -> str:
    lines = ["| env | seed | SFT steps | last SFT loss | held-out success | valid-action share | final progress | "
             "gate |", "|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for env in args.envs:
        for s in args.seeds:
            w = warm.get((env, s))
            if w is None:
                continue
            b = w["before"]
            gate = "playable" if w["playable"] else "untestable (no valid action)"
            lines.append(f"| {env} | {s} | {w['sft_steps']} | {w['sft_loss'][-1]:.3f} | {_fmt(b['eval_success_rate'])} "
                         f"| {_fmt(b['eval_valid_action_frac'])} | {_fmt(b['eval_progress'])} | {gate} |")  # fmt: skip
    return "\n".join(lines)


def compute(warm: Warm, runs: Runs) -> str:
    """Process time, and the wall time from the first job's start to the last job's end."""
    done = [*warm.values(), *runs.values()]
    if not done:
        return "nothing has run"
    seconds = sum(r["seconds"] for r in done)
    wall = max(r["ended"] for r in done) - min(r["started"] for r in done)
    return (f"{len(warm)} warm starts and {len(runs)} RL runs: {seconds / 60:.1f} process-minutes (warm starts "
            f"{sum(r['seconds'] for r in warm.values()) / 60:.1f}), {wall / 60:.1f} minutes of wall time from the "
            "first start to the last end (an interrupted and resumed grid counts its pause).")  # fmt: skip


def missing(args: argparse.Namespace, warm: Warm, runs: Runs) -> list[str]:
    """Warm starts and runs of the grid not recorded (a gated seed's runs are not missing: they are not run)."""
    notes = []
    for env in args.envs:
        for s in args.seeds:
            w = warm.get((env, s))
            if w is None:
                notes.append(f"warm start {env} seed {s}: not run yet")
                continue
            lost = [a for a in args.arms if (env, s, a) not in runs]
            if lost and (w["playable"] or args.no_gate):
                notes.append(f"{env} seed {s}: {', '.join(f'`{a}`' for a in lost)} not finished")
        starts = [warm[(env, s)] for s in args.seeds if (env, s) in warm]
        if starts and not args.no_gate and not any(w["playable"] for w in starts):
            notes.append(f"{env}: untestable: no warm start has a valid action, so no arm can get a reward or a turn "
                         "signal (the gate)")  # fmt: skip
    return notes


def plot(args: argparse.Namespace, warm: Warm, runs: Runs, path: Path) -> None:
    """Per env with runs: training success per iteration (mean over the seeds that did not collapse, each seed thin)
    and held-out success before and after per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = [e for e in args.envs if any(k[0] == e for k in runs)]
    fig, axes = plt.subplots(len(envs), 2, figsize=(10, 3.2 * len(envs)), squeeze=False)
    colours = {a: f"C{i % 10}" for i, a in enumerate(args.arms)}
    for (curve_ax, eval_ax), env in zip(axes, envs, strict=True):
        for k, arm in enumerate(args.arms):
            seeds = [s for s in args.seeds if (env, s, arm) in runs and not runs[(env, s, arm)]["collapsed"]]
            rs = [runs[(env, s, arm)] for s in seeds]
            curves = _curves(rs, "success_rate")
            if curves is None:
                continue
            x = np.arange(1, curves.shape[1] + 1)
            for row in curves:
                curve_ax.plot(x, row, color=colours[arm], lw=0.5, alpha=0.3)
            with np.errstate(all="ignore"):
                curve_ax.plot(x, np.nanmean(curves, axis=0), color=colours[arm], lw=2, label=f"{arm} (n={len(rs)})")
            after = [summarise(runs[(env, s, arm)])["after"] for s in seeds]
            before = [warm[(env, s)]["before"]["eval_success_rate"] for s in seeds]
            offset = (k - (len(args.arms) - 1) / 2) * 0.15
            for b, a in zip(before, after, strict=True):
                eval_ax.plot([offset, 1 + offset], [b, a], color=colours[arm], lw=0.8, alpha=0.6, marker="o", ms=3)
            eval_ax.plot([offset, 1 + offset], [np.mean(before), np.mean(after)], color=colours[arm], lw=2.5,
                         label=f"{arm}: mean")  # fmt: skip
        curve_ax.set_title(f"{env}: training success per iteration", fontsize=9)
        curve_ax.set_xlabel("iteration", fontsize=8)
        curve_ax.legend(fontsize=7)
        eval_ax.set_xticks([0, 1], ["warm start", "after RL"])
        eval_ax.set_title(f"{env}: held-out success ({args.eval_tasks} tasks), per seed", fontsize=9)
        eval_ax.legend(fontsize=7)
        for ax in (curve_ax, eval_ax):
            ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------------
# arguments


def parse_env_config(text: str) -> tuple[str, dict[str, Any]]:
    """``'agentgym/Shop-v0={"max_new_tokens": 96}'`` -> ("agentgym/Shop-v0", {"max_new_tokens": 96})."""
    env, sep, body = text.partition("=")
    if not sep or not env.strip():
        raise argparse.ArgumentTypeError(f"--env-config takes ENV_ID=JSON, got {text!r}")
    try:
        change = json.loads(body)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--env-config {env}: not JSON ({exc})") from exc
    if not isinstance(change, dict):
        raise argparse.ArgumentTypeError(f"--env-config {env}: a JSON object of EnvSetting fields, got {body!r}")
    return env.strip(), change


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), help="env ids (an env without a planned setting "
                        "gets EnvSetting's defaults, changed by --env-config)")  # fmt: skip
    parser.add_argument("--env-config", type=parse_env_config, action="append", default=[],
                        help="ENV_ID=JSON: EnvSetting fields of one env (env_kwargs merged key by key)")  # fmt: skip
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--batch-tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--minibatch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-batch", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=128)
    parser.add_argument("--eval-seed", type=int, default=0, help="the sampling seed of every evaluation")
    parser.add_argument("--no-gate", action="store_true", help="run the arms of seeds whose warm start never acts "
                        "validly")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="runs/credit_envs")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    args.env_config = dict(args.env_config)
    stray = sorted(set(args.env_config) - set(args.envs))
    if stray:
        parser.error(f"--env-config for env(s) not in --envs: {', '.join(stray)}")
    small = [n for n in ("iterations", "batch_tasks", "group_size", "minibatch_size", "epochs", "sft_batch",
                         "eval_tasks", "jobs") if getattr(args, n) < 1]  # fmt: skip
    if small:
        parser.error(f"{', '.join(small)} must be >= 1")
    if "grpo" not in args.arms:
        parser.error("every arm is compared with grpo: add grpo to --arms")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.envs)) != len(args.envs):
        parser.error("--seeds and --envs must not repeat")
    from agentgym.rewards.advantages import TURN_SIGNALS

    if "mt_grpo" in args.arms:
        lacking = [e for e in args.envs if e not in TURN_SIGNALS]
        if lacking:
            parser.error(f"mt_grpo reads TURN_SIGNALS, which has no entry for {', '.join(lacking)}")
    for env in args.envs:
        try:
            setting_of(env, args)
        except (TypeError, ValueError) as exc:
            parser.error(f"--env-config {env}: {exc}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_grid(args, out)
    print(report(args, out))


if __name__ == "__main__":
    main()
