"""Credit-assignment sweep: the reference trainer on the diagnostics, env x horizon x method x seed, paired by seed.

    python bench/credit_sweep.py                                   # Chain H in {4, 8, 16}, every method, seeds 0-7
    python bench/credit_sweep.py --cells Chain:16 --methods grpo progress_td --seeds 0 1 2 --out runs/pilot
    python bench/credit_sweep.py --report-only --out runs/pilot     # the report of what has finished so far

**Warm starts at a target skill.** Every (env, seed) gets one SFT warm start on the env's oracle demonstrations at
the longest H of its cells (``--sft-horizon``; every turn position the runs will see is demonstrated), trained in
chunks until the held-out per-turn accuracy (the share of turns with ``info["correct"]``, on the eval tasks at that
H, T=1) lies inside ``--target`` +- ``--tolerance``. Each chunk is measured on ``--search-episodes`` eval tasks and a
value inside the band is confirmed on all ``--eval-episodes``. A chunk that overshoots the band is undone (back to
the last checkpoint below it) and retried with half the steps (a bisection; at one step, half the learning rate).
A seed that is not in the band after ``--sft-max-steps`` SFT steps (every step taken counts, undone ones too) is
reported as such and its runs are left out. The warm start's success, turn accuracy and accuracy by turn position
at every H of its env are stored in its ``result.json``. The tiny model's initial weights come from the seed too
(``model_seed``). Every horizon and method of a seed starts from its weights
(``init_from``) with a fresh optimizer.

**Runs.** Each RL run plays ``--iterations`` x ``--batch-tasks`` x ``--group-size`` training episodes (the branch
methods: as many sampled tokens as ``grpo``, below; ``--token-budget N``: every run stops at N sampled tokens) with
the same learning rate, epochs and minibatches for every method, and is evaluated before (the warm start) and after
on the same ``--eval-episodes`` held-out tasks with the same sampling seeds. A run the trainer stops as collapsed
(``collapse_check``: valid-action share or success halved, or the gradient norm exploded) is a reported failure, not
a data point: counted in ``collapsed``, left out of the means and of the pairs.

**Statistics.** Per (env, H, method) against ``grpo`` of the same seeds: the mean difference of final success and
of training AUC (mean training success over the iterations), each with an exact two-sided paired sign-flip test
(``agentgym.running.stats``: all 2^n sign patterns for n <= 20, else a seeded Monte-Carlo whose draw count is stated),
and Holm's correction within each family: ``--primary`` names the primary family (final success of the named methods
at the named cells); every other comparison, both endpoints, is the secondary family.

Methods (``METHODS``; the trainer's estimators):

- ``grpo``: outcome-only GRPO: the ``outcome`` reward component alone (Umbrella's and KeyDoor's distractor rewards
  do not count), z-scored in its group and given to every turn; ``rloo``: the same outcome minus the mean of the
  other group members;
- ``gtpo``: GTPO, each turn's reward-to-go (the env's whole reward) z-scored over the group's turns;
- ``progress``: GTPO plus the potential-based verified-progress reward (``progress_key="progress"``);
- ``gigpo`` / ``gigpo_obs``: GiGPO with step advantages z-scored among turns taken in the same env state (privileged:
  the hidden mistake flag included) / on the same observation (as the GiGPO paper groups);
- ``mt_grpo``: multi-turn GRPO, the verified turn signal (``info["correct"]``) z-scored among the same turn of the
  group plus the outcome z-scored over the group;
- ``turn_ppo``: PPO with a turn-level critic (V at each turn's first token, GAE over turns);
- ``progress_td`` / ``progress_gae``: the verified progress as an immediate per-turn reward (with the outcome) under
  ``turn_ppo``'s critic, TD(0) / GAE lambda 0.5; the critic is detached from the trunk, warmed by 24 value-only steps
  and has its own learning rate (1e-2);
- ``vine`` / ``tree``: branch credit (baselines/branches.py): K = 2 continuations forked from the env snapshot and
  token prefix before the eighth of the batch's turns where the policy was least sure (``branch_turns="uncertain"``,
  ``branch_frac=0.125``: forking every turn costs about 18x grpo's tokens per iteration at H = 16, so at equal
  tokens it would get 2-3 updates to grpo's 40; an eighth costs about 3x); ``vine`` uses their mean return as the
  state's value (VinePPO), ``tree`` compares
  the K + 1 actions taken in one state (turn-level groups). Both count the outcome alone. With ``--token-budget
  grpo`` (the default) each stops at the sampled tokens (main rollouts and forks) of ``grpo``'s run of the same
  cell and seed, which it waits for: the comparison is at equal sampled tokens, not equal episodes.

- ``gopo`` / ``lampo`` / ``serl``: GOPO (the outcome's rank in its group, magnitudes discarded), LamPO (pairwise
  outcome differences weighted by how likely the model found each rollout) and SERL (GRPO's advantage reweighted
  over turns by the env's feedback: invalid actions, progress changes), with their cards' defaults.

IGPO is not in the grid: its turn reward is the gain in the policy's probability of a gold answer string, and the
diagnostics have choices, not an answer to score.

Jobs run in ``--jobs`` spawned processes (one torch thread each); each finished job leaves ``result.json`` in its
directory (written atomically), so a sweep started again with the same ``--out`` skips what finished and resumes an
interrupted run from its last checkpoint. A warm start whose checkpoint is gone (results are committed, weights
are not) is redone when a run still needs it, and must equal its record. The report (``results.md``,
``results.json``, ``runs.jsonl``, ``credit_sweep.png``, ``credit_diagnostics.png`` under ``--out``) works on partial
results and lists what is missing.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from agentgym.contract.trust import checked_kwargs
from agentgym.running.stats import MAX_EXACT, holm, sign_flip_test

#: Method name -> trainer overrides.
METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"algo": "grpo", "reward_components": ["outcome"]},
    "rloo": {"algo": "rloo", "reward_components": ["outcome"]},
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
    "vine": {"algo": "grpo", "estimator": "vine", "branch_k": 2, "branch_turns": "uncertain", "branch_frac": 0.125,
             "reward_components": ["outcome"]},
    "tree": {"algo": "grpo", "estimator": "tree", "branch_k": 2, "branch_turns": "uncertain", "branch_frac": 0.125,
             "reward_components": ["outcome"]},
    # the catalogue's estimators of the second round (agentgym methods gopo, ...), with their cards' defaults
    "gopo": {"algo": "grpo", "estimator": "gopo"},
    "lampo": {"algo": "grpo", "estimator": "lampo"},
    "serl": {"algo": "grpo", "estimator": "serl"},
}  # fmt: skip
#: The methods that fork branches: they sample more tokens per iteration than the others.
BRANCH_METHODS = tuple(m for m, o in METHODS.items() if o.get("branch_k", 0) > 0)
#: The default grid: env -> horizons.
CELLS: dict[str, tuple[int, ...]] = {"Chain": (4, 8, 16)}
#: The primary family of the written plan (bench/results/credit_round2/plan.md): final success at Chain H=16.
PRIMARY = "Chain:16:progress_td,mt_grpo,vine"
#: The per-iteration numbers a run keeps for the report.
KEPT = ("iteration", "success_rate", "reward_mean", "zero_std_group_frac", "eval_success_rate", "time_rollout",
        "time_update", "sft_loss", "valid_action_frac", "entropy", "grad_norm", "grad_norm_max", "value_grad_norm",
        "explained_variance", "explained_variance_mc", "turn_accuracy", "sampled_tokens",
        "sampled_tokens_total", "stop_reason", "collapse_reason", "turn_signal_auc", "scorer_invalid_frac",
        "time_scorer")  # fmt: skip
#: The diagnostics the report draws: history key -> panel title.
DIAGNOSTICS = {"success_rate": "training success", "valid_action_frac": "valid-action share", "entropy": "entropy",
               "grad_norm": "gradient norm", "explained_variance": "explained variance (critic)",
               "zero_std_group_frac": "zero-variance groups", "turn_accuracy": "turn accuracy"}  # fmt: skip


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

    def warm_start(self, args: argparse.Namespace) -> Job:
        return Job(self.env, sft_horizon(self.env, args), self.seed)


def sft_horizon(env: str, args: argparse.Namespace) -> int:
    """The demonstrations' horizon of ``env``'s warm start: ``--sft-horizon``, else the longest H of its cells."""
    return args.sft_horizon or max(args.cells[env])


def config_overrides(job: Job, args: argparse.Namespace, out: Path, horizon: int | None = None) -> dict[str, Any]:
    """The trainer config of ``job`` (at ``horizon`` instead of the job's own when given)."""
    h = job.horizon if horizon is None else horizon
    env_kwargs = {"horizon": h, "num_options": args.num_options}
    common: dict[str, Any] = {
        "seed": job.seed,
        "model_seed": job.seed,  # seeds differ in their initial weights too, not only in data order and sampling
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
        "epochs": args.epochs,
        "lr": args.lr,
        "kl_coef": 0.0,
        "plot": False,
        "progress": False,  # worker processes would interleave their bars
        "out_dir": str(job.directory(out)),
    }
    if job.method is None:
        return {**common, "iterations": 0, "sft_lr": args.sft_lr}
    if args.distractor_reward is not None:  # the RL runs only: warm starts learn from the oracle, whatever it is
        env_kwargs = {**env_kwargs, "distractor_reward": args.distractor_reward}
        common |= {"env_kwargs": env_kwargs, "eval_env_kwargs": env_kwargs}
    sft = job.warm_start(args).directory(out) / "checkpoint.pt"
    budget = {} if token_budget(job, args, out) is None else {"max_sampled_tokens": token_budget(job, args, out)}
    table = getattr(args, "method_table", METHODS)  # a sweep built on this one (credit_signals.py) adds arms
    return {**common, **table[job.method], **budget, "iterations": args.iterations, "init_from": str(sft),
            "resume": True, "checkpoint_every": 5}  # fmt: skip


def matched_budget(job: Job, args: argparse.Namespace) -> bool:
    """Whether ``job`` gets the sampled tokens of ``grpo``'s run of its cell and seed (``--token-budget grpo``: the
    branch methods do; ``grpo`` itself and the methods that sample as much per iteration run their iterations)."""
    return args.token_budget == "grpo" and job.method in BRANCH_METHODS


def token_budget(job: Job, args: argparse.Namespace, out: Path) -> int | None:
    """The run's ``max_sampled_tokens``: ``--token-budget N`` for every run; with ``grpo`` for a branch method, the
    mean tokens per iteration of ``grpo``'s run of the same (env, H, seed) times ``--iterations`` (its total when it
    ran them all; extrapolated when it collapsed); None: no budget but the iterations."""
    if args.token_budget == "none" or (args.token_budget == "grpo" and not matched_budget(job, args)):
        return None
    if args.token_budget != "grpo":
        return int(args.token_budget)
    base = read_result(Job(job.env, job.horizon, job.seed, "grpo"), out)
    if base is None:
        raise ValueError(f"{job.name} takes grpo's token count, and grpo's run of its cell and seed has not finished")
    tokens = [h["sampled_tokens"] for h in base["history"] if h.get("iteration", 0) > 0 and "sampled_tokens" in h]
    if not tokens:
        raise ValueError(f"{job.name}: grpo's run of its cell and seed recorded no sampled tokens")
    return max(1, round(float(np.mean(tokens)) * args.iterations))


# ----------------------------------------------------------------------------------------------------------------
# warm starts at a target skill


@dataclass(frozen=True)
class Band:
    """The target per-turn skill: ``target`` +- ``tolerance`` (both ends inside)."""

    target: float
    tolerance: float

    def __post_init__(self) -> None:
        if not (0.0 < self.target < 1.0 and 0.0 < self.tolerance < min(self.target, 1.0 - self.target)):
            raise ValueError(f"the band {self.target} +- {self.tolerance} must lie inside (0, 1)")

    def where(self, accuracy: float) -> int:
        """-1 below the band, 0 inside, 1 above (a tiny slack for values printed as the band's ends)."""
        if accuracy < self.target - self.tolerance - 1e-9:
            return -1
        return 1 if accuracy > self.target + self.tolerance + 1e-9 else 0


@dataclass
class SkillSearch:
    """A bounded search for SFT weights whose per-turn accuracy lies in ``band``.

    ``sft(position, steps, lr)`` takes ``steps`` SFT steps whose demonstrations are those of ``position`` onwards;
    ``measure(full)`` is the accuracy on the search episodes (``full``: on every eval episode); ``snapshot()`` and
    ``restore(s)`` save and bring back the weights and optimizer state. :meth:`run` returns whether the band was
    reached; ``log`` holds every measurement, ``reason`` why it stopped."""

    sft: Callable[[int, int, float], None]
    measure: Callable[[bool], float]
    snapshot: Callable[[], Any]
    restore: Callable[[Any], None]
    band: Band
    chunk: int
    lr: float
    max_steps: int
    max_shrinks: int = 16
    confirm: bool = True  # a search value inside the band is measured again on every eval episode
    log: list[dict[str, Any]] = field(default_factory=list)
    position: int = 0  # SFT steps behind the current weights
    spent: int = 0  # SFT steps taken, undone ones included
    accuracy: float = math.nan
    reason: str = ""

    def _judge(self) -> int:
        acc = self.measure(False)
        entry = {"position": self.position, "spent": self.spent, "lr": self.lr, "chunk": self.chunk,
                 "accuracy": acc}  # fmt: skip
        where = self.band.where(acc)
        if where == 0 and self.confirm:
            acc = self.measure(True)
            entry["confirmed"] = acc
            where = self.band.where(acc)
        self.accuracy = acc
        self.log.append(entry)
        return where

    def run(self) -> bool:
        lo, hi = self.band.target - self.band.tolerance, self.band.target + self.band.tolerance
        where = self._judge()
        if where > 0:
            self.reason = f"per-turn accuracy {self.accuracy:.3f} is above the band [{lo:.3f}, {hi:.3f}] before SFT"
            return False
        saved, saved_at, shrinks = self.snapshot(), 0, 0
        while where != 0:
            if self.spent >= self.max_steps:
                self.reason = (f"not in the band [{lo:.3f}, {hi:.3f}] after {self.spent} SFT steps (last accuracy "
                               f"{self.accuracy:.3f}; budget {self.max_steps})")  # fmt: skip
                return False
            steps = min(self.chunk, self.max_steps - self.spent)
            self.sft(self.position, steps, self.lr)
            self.position += steps
            self.spent += steps
            where = self._judge()
            if where < 0:
                saved, saved_at = self.snapshot(), self.position
            elif where > 0:  # overshot: back to the last weights below the band, smaller chunk (then lr)
                self.restore(saved)
                self.position = saved_at
                shrinks += 1
                if shrinks > self.max_shrinks:
                    self.reason = (f"overshot the band [{lo:.3f}, {hi:.3f}] {shrinks} times (chunk {self.chunk}, lr "
                                   f"{self.lr:.2g})")  # fmt: skip
                    return False
                if self.chunk > 1:
                    self.chunk //= 2
                else:
                    self.lr /= 2
        self.reason = f"per-turn accuracy {self.accuracy:.3f} after {self.position} SFT steps ({self.spent} taken)"
        return True


def trainer_search(state: Any, config: Any, band: Band, *, chunk: int, lr: float, max_steps: int,
                   search_episodes: int) -> SkillSearch:  # fmt: skip
    """A :class:`SkillSearch` on the real trainer: ``state``'s policy takes SFT steps of ``config``'s env, and the
    skill is the held-out per-turn accuracy (``trainer.evaluate``'s ``eval_turn_accuracy``) on the first
    ``search_episodes`` eval tasks, confirmed on all ``config.eval_tasks`` when there are more."""
    from agentgym.baselines.trainer import evaluate, sft_step

    search_config = dataclasses.replace(config, eval_tasks=min(search_episodes, config.eval_tasks))

    def sft(position: int, steps: int, step_lr: float) -> None:
        step_config = dataclasses.replace(config, sft_lr=step_lr)
        for k in range(position, position + steps):
            sft_step(state, step_config, 0, k)

    def measure(full: bool) -> float:
        result = evaluate(state, config if full else search_config)
        if "eval_turn_accuracy" not in result:
            raise ValueError(f"{config.env_id} reports no info['correct']: the warm start has no skill to measure")
        return result["eval_turn_accuracy"]

    def snapshot() -> dict[str, Any]:
        return copy.deepcopy({"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict()})

    def restore(saved: dict[str, Any]) -> None:
        state.model.load_state_dict(saved["model"])
        state.optimizer.load_state_dict(saved["optimizer"])
        state.policy.mark_stale()

    return SkillSearch(sft, measure, snapshot, restore, band, chunk=chunk, lr=lr, max_steps=max_steps,
                       confirm=search_config.eval_tasks < config.eval_tasks)  # fmt: skip


def run_warm_start(job: Job, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The skill search of ``job`` (a warm start) on the real trainer; on success its checkpoint and its evaluation
    at every H of its env."""
    from agentgym.baselines.checkpoint import save_checkpoint
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import setup

    config = load_config("tiny", overrides=config_overrides(job, args, out))
    directory = job.directory(out)
    directory.mkdir(parents=True, exist_ok=True)
    state = setup(config)
    search = trainer_search(state, config, Band(args.target, args.tolerance), chunk=args.sft_chunk, lr=args.sft_lr,
                            max_steps=args.sft_max_steps, search_episodes=args.search_episodes)  # fmt: skip
    reached = search.run()
    result: dict[str, Any] = {"job": asdict(job), "reached": reached, "reason": search.reason,
                              "sft_steps": search.position, "sft_steps_taken": search.spent, "sft_lr_final": search.lr,
                              "turn_accuracy": search.accuracy, "search": search.log, "history": []}  # fmt: skip
    if reached:
        save_checkpoint(state, config, directory / "checkpoint.pt")
        result["before"] = evaluate_start(state, job, args, out)
    state.close()
    return result


def evaluate_start(state: Any, job: Job, args: argparse.Namespace, out: Path) -> dict[int, dict[str, Any]]:
    """The warm start's held-out success, turn accuracy and accuracy by turn position at every horizon of its env
    (each with its own eval env)."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate

    before = {}
    for h in args.cells[job.env]:
        for env in state.eval_envs:  # the eval env of the previous horizon
            env.close()
        state.eval_envs.clear()
        before[h] = evaluate(state, load_config("tiny", overrides=config_overrides(job, args, out, h)))
    return before


def run_job(job: Job, args: argparse.Namespace, out: Path) -> tuple[Job, dict[str, Any]]:
    """Run ``job`` in this process and write its ``result.json``: a warm start's search and evaluation, or an RL
    run with its history and its evaluation after the last iteration (none when it collapsed)."""
    import torch

    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate, train

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if job.method is None:
        result = run_warm_start(job, args, out)
    else:
        config = load_config("tiny", overrides=config_overrides(job, args, out))
        summary = train(config)
        result = {"job": asdict(job), "history": [{k: h[k] for k in KEPT if k in h} for h in summary["history"]]}
        result["collapsed"] = next((h["collapse_reason"] for h in summary["history"] if h.get("collapse_reason")),
                                   None)  # fmt: skip
        if result["collapsed"] is None:  # a collapsed run is a failure, not a data point: no "after"
            result["after_eval"] = evaluate(summary["state"], config)
            result["after"] = result["after_eval"]["eval_success_rate"]
        summary["state"].close()
    result["seconds"] = time.perf_counter() - t0
    path = job.directory(out) / "result.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, path)
    if job.method is not None:  # a finished run needs no checkpoint (tens of MB each)
        (job.directory(out) / "checkpoint.pt").unlink(missing_ok=True)
    return job, result


def grid(args: argparse.Namespace) -> list[Job]:
    """The warm starts, then the RL runs (longest horizons first, seed by seed), so a sweep cut short has whole
    seeds of the longest cells."""
    rl = [Job(env, h, s, m) for s in args.seeds for env, hs in args.cells.items() for h in hs for m in args.methods]
    rl.sort(key=lambda j: -j.horizon)
    sft = list(dict.fromkeys(j.warm_start(args) for j in rl))
    return sft + rl


def read_result(job: Job, out: Path) -> dict[str, Any] | None:
    path = job.directory(out) / "result.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def needs(job: Job, args: argparse.Namespace) -> list[Job]:
    """The jobs whose results ``job`` waits for: an RL run's warm start, and ``grpo``'s run of its cell and seed
    when its token budget is grpo's."""
    if job.method is None:
        return []
    deps = [job.warm_start(args)]
    if matched_budget(job, args):
        deps.append(Job(job.env, job.horizon, job.seed, "grpo"))
    return deps


def stale_warm_start(job: Job, result: dict[str, Any], args: argparse.Namespace, out: Path) -> bool:
    """Whether the finished warm start ``job`` must run again for the runs that still need it: its checkpoint is
    missing (the results are committed, the weights are not) or it was not evaluated at every H of the cells."""
    evaluated = {int(h) for h in result.get("before", {})}
    return not (job.directory(out) / "checkpoint.pt").is_file() or not set(args.cells[job.env]) <= evaluated


def check_redone(job: Job, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Raise unless a redone warm start equals its record (its search, and its evaluation at every H both have):
    the runs of its seed that finished before are paired with the new ones only if they share one start."""
    new = json.loads(json.dumps(new))  # the record's form: JSON keys are strings
    same = [new[k] == old[k] for k in ("reached", "sft_steps", "sft_steps_taken", "turn_accuracy", "search")]
    same += [new["before"][h].get(k) == v for h, e in old.get("before", {}).items() if h in new.get("before", {})
             for k, v in e.items()]  # a newer record may hold more measurements  # fmt: skip
    if not all(same):
        raise RuntimeError(f"warm start {job.name} was redone (no checkpoint, or an H not evaluated) and differs "
                           f"from its record: {old['reason']!r} then, {new['reason']!r} now; its finished runs would "
                           "not be paired with new ones, so move them away or start a new --out")  # fmt: skip


def run_grid(args: argparse.Namespace, out: Path) -> None:
    """Run what has no ``result.json`` yet, each job once what it needs has finished (the runs of a seed whose warm
    start is not in the band are left out and reported)."""
    finished = {j: r for j in grid(args) if (r := read_result(j, out)) is not None}
    waiting = [j for j in grid(args) if j not in finished]
    recorded = {}  # warm starts to redo: their checkpoint is gone (git keeps results, not weights) or their
    for job in dict.fromkeys(j.warm_start(args) for j in waiting):  # record lacks an H of the cells
        if (r := finished.get(job)) is not None and r["reached"] and stale_warm_start(job, r, args, out):
            recorded[job] = finished.pop(job)
            waiting.insert(0, job)

    def ready(job: Job) -> bool | None:  # None: never (its warm start is out of the band)
        for dep in needs(job, args):
            if dep not in finished:
                return False
            if dep.method is None and not finished[dep]["reached"]:
                return None
        return True

    bar = tqdm(total=len(waiting), desc="sweep", unit="run")
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx) as pool:
        running: dict[Future, Job] = {}

        def submit() -> None:
            for job in list(waiting):
                verdict = ready(job)
                if verdict is None:
                    waiting.remove(job)
                    bar.update(1)
                elif verdict:
                    waiting.remove(job)
                    running[pool.submit(run_job, job, args, out)] = job

        submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                _, result = fut.result()  # a failed run stops the sweep with its traceback
                if job in recorded:
                    check_redone(job, recorded[job], result)
                finished[job] = result
                bar.update(1)
                bar.set_postfix_str(f"{job.name} {result['seconds']:.0f}s", refresh=False)
                if job.method is None and not result["reached"]:
                    tqdm.write(f"{job.name}: warm start not in the band ({result['reason']}); its runs are left out")
            submit()
    bar.close()


# ----------------------------------------------------------------------------------------------------------------
# report

ENDPOINTS = {"final": "after", "auc": "auc"}  # endpoint name -> the summarise() key it compares


def load_results(out: Path) -> tuple[dict[tuple[str, int], dict[str, Any]], list[dict[str, Any]]]:
    """The finished warm starts by (env, seed), and every finished RL run with ``before`` (its warm start's held-out
    success at its horizon) and ``after`` (None when it collapsed)."""
    starts = {}
    for p in (out / "sft").glob("*/result.json"):
        r = json.loads(p.read_text(encoding="utf-8"))
        starts[(r["job"]["env"], r["job"]["seed"])] = r
    results = []
    for p in sorted((out / "rl").glob("*/result.json")):
        r = json.loads(p.read_text(encoding="utf-8"))
        j = r["job"]
        start = starts.get((j["env"], j["seed"]), {}).get("before", {}).get(str(j["horizon"]), {})
        r.setdefault("before", start.get("eval_success_rate"))
        r.setdefault("before_turn_accuracy", start.get("eval_turn_accuracy"))
        r.setdefault("collapsed", None)
        r.setdefault("after", None)
        results.append(r)
    return starts, results


def summarise(result: dict[str, Any]) -> dict[str, float]:
    """Per run: held-out success before and after, the area under the training success curve (its mean over the
    iterations), the mean share of groups whose outcomes all tie, the held-out turn accuracy after, and the tokens
    sampled in training (main rollouts and forks)."""
    rl = [h for h in result["history"] if h.get("iteration", 0) > 0]
    nan = math.nan
    return {
        "before": nan if result.get("before") is None else result["before"],
        "after": nan if result.get("after") is None else result["after"],
        "auc": float(np.mean([h["success_rate"] for h in rl])) if rl else nan,
        "zero_var": float(np.mean([h["zero_std_group_frac"] for h in rl])) if rl else nan,
        "turn_acc": (result.get("after_eval") or {}).get("eval_turn_accuracy", nan),
        "tokens": float(sum(h.get("sampled_tokens", 0) for h in rl)),
    }


def _cells(results: list[dict[str, Any]]) -> tuple[dict, dict]:
    """(env, H, method) -> {seed: summary} of the runs that did not collapse, and -> count of those that did."""
    by: dict[tuple[str, int, str], dict[int, dict[str, float]]] = {}
    collapsed: dict[tuple[str, int, str], int] = {}
    for r in results:
        j = r["job"]
        key = (j["env"], j["horizon"], j["method"])
        if r.get("collapsed"):  # a reported failure: counted, never averaged or paired
            collapsed[key] = collapsed.get(key, 0) + 1
            continue
        by.setdefault(key, {})[j["seed"]] = summarise(r)
    return by, collapsed


def _order(methods: list[str]) -> Callable[[tuple[str, int, str]], tuple]:
    return lambda k: (k[0], k[1], methods.index(k[2]) if k[2] in methods else len(methods), k[2])


def _fmt(x: float, digits: int = 3) -> str:
    return "" if math.isnan(x) else f"{x:.{digits}f}"


def table(results: list[dict[str, Any]], methods: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table, one row per (env, H, method): seeds, collapsed count, start, final success and AUC (mean ±
    sd over seeds), turn accuracy after, zero-variance groups, and the mean paired difference of final success to
    ``grpo``; and its rows as records."""
    by, collapsed = _cells(results)
    lines = ["| env | H | method | n | collapsed | start success | final success (mean ± sd) | AUC (mean ± sd) "
             "| turn accuracy after | zero-var groups | sampled tokens | final − grpo (paired) |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    records = []
    for key in sorted(set(by) | set(collapsed), key=_order(methods)):
        env, h, method = key
        runs = by.get(key, {})
        n_collapsed = collapsed.get(key, 0)
        if not runs:  # every finished seed of the cell collapsed
            records.append({"env": env, "horizon": h, "method": method, "seeds": 0, "collapsed": n_collapsed})
            lines.append(f"| {env} | {h} | `{method}` | 0 | {n_collapsed} | | | | | | | |")
            continue
        seeds = sorted(runs)
        keys = ("before", "after", "auc", "zero_var", "turn_acc", "tokens")
        get = {k: np.array([runs[s][k] for s in seeds]) for k in keys}
        base = by.get((env, h, "grpo"), {})
        paired = [s for s in seeds if s in base]
        diff = math.nan
        if method != "grpo" and paired:
            diff = float(np.mean([runs[s]["after"] - base[s]["after"] for s in paired]))

        def sd(x: np.ndarray) -> float:
            return float(x.std(ddof=1)) if x.size > 1 else math.nan

        rec = {"env": env, "horizon": h, "method": method, "seeds": len(seeds), "collapsed": n_collapsed,
               **{f"{k}_mean": float(np.mean(v)) for k, v in get.items()}, "after_std": sd(get["after"]),
               "auc_std": sd(get["auc"]), "diff_to_grpo": diff, "paired": len(paired)}  # fmt: skip
        records.append(rec)
        lines.append(f"| {env} | {h} | `{method}` | {len(seeds)} | {n_collapsed} | {_fmt(rec['before_mean'])} | "
                     f"{_fmt(rec['after_mean'])} ± {_fmt(rec['after_std'])} | {_fmt(rec['auc_mean'])} ± "
                     f"{_fmt(rec['auc_std'])} | {_fmt(rec['turn_acc_mean'])} | {_fmt(rec['zero_var_mean'], 2)} | "
                     f"{rec['tokens_mean']:.0f} | "
                     f"{'' if math.isnan(diff) else f'{diff:+.3f} (n={len(paired)})'} |")  # fmt: skip
    return "\n".join(lines), records


def parse_primary(text: str) -> set[tuple[str, int, str]]:
    """``Chain:16:progress_td,mt_grpo;Chain:8:vine`` -> {("Chain", 16, "progress_td"), ...}; ``none`` -> empty."""
    if text.strip().lower() in ("", "none"):
        return set()
    found = set()
    for part in text.split(";"):
        env, h, methods = part.split(":")
        found |= {(env.strip(), int(h), m.strip()) for m in methods.split(",")}
    return found


def comparisons(results: list[dict[str, Any]], methods: list[str], primary: set[tuple[str, int, str]],
                samples: int = 100_000) -> list[dict[str, Any]]:  # fmt: skip
    """Every (env, H, method) against ``grpo`` of the same seeds (both runs finished, neither collapsed), for final
    success and training AUC: the mean and sd of the differences and the exact paired sign-flip p; then Holm's
    adjusted p within each family (``primary``: the final success of the named cells; ``secondary``: the rest)."""
    by, _ = _cells(results)
    rows = []
    for key in sorted(by, key=_order(methods)):
        env, h, method = key
        base = by.get((env, h, "grpo"))
        if method == "grpo" or not base:
            continue
        paired = sorted(s for s in by[key] if s in base)
        for endpoint, stat in ENDPOINTS.items():
            d = [by[key][s][stat] - base[s][stat] for s in paired]
            d = [x for x in d if not math.isnan(x)]
            if not d:
                continue
            test = sign_flip_test(d, samples=samples)
            family = "primary" if endpoint == "final" and key in primary else "secondary"
            rows.append({"family": family, "env": env, "horizon": h, "method": method, "endpoint": endpoint,
                         **asdict(test)})  # fmt: skip
    for family in ("primary", "secondary"):
        mine = [r for r in rows if r["family"] == family]
        for r, adjusted in zip(mine, holm([r["p"] for r in mine]), strict=True):
            r["p_holm"] = adjusted
            r["family_size"] = len(mine)
    return rows


def tests_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| family | env | H | method − grpo | endpoint | n | mean diff ± sd | p (two-sided) | Holm p |",
             "|---|---|---:|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: r["family"] != "primary"):
        p = f"{r['p']:.4f}" + ("" if r["exact"] else f" (MC, {r['samples']} draws)")
        sd = "" if math.isnan(r["sd"]) else f" ± {r['sd']:.3f}"
        lines.append(f"| {r['family']} | {r['env']} | {r['horizon']} | `{r['method']}` | {r['endpoint']} | {r['n']} "
                     f"| {r['mean']:+.3f}{sd} | {p} | {r['p_holm']:.4f} |")  # fmt: skip
    return "\n".join(lines)


def pivot(records: list[dict[str, Any]], methods: list[str]) -> str:
    """One row per (env, H): the start, then each method's final success (mean ± sd over seeds); the best mean of
    the row in bold."""
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
            text = f"{row[m]['after_mean']:.3f} ± {_fmt(row[m]['after_std'])}"
            out.append(f"**{text}**" if row[m]["after_mean"] == best and best > 0 else text)
        seeds = "/".join(sorted({str(r["seeds"]) for r in row.values()}))
        lines.append(f"| {env} | {h} | {seeds} | {_fmt(first['before_mean'])} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def warm_start_tables(starts: dict[tuple[str, int], dict[str, Any]]) -> str:
    """One row per warm start (in the band or not, its SFT steps, its held-out success and turn accuracy at each
    H), then the accuracy by turn position at each H, averaged over the seeds in the band."""
    lines = ["| env | seed | in band | SFT steps (taken) | last SFT lr | per H: success / turn acc. / valid share |",
             "|---|---:|---|---:|---:|---|"]  # fmt: skip
    positions: dict[tuple[str, int], list[list[float | None]]] = {}
    for (env, seed), r in sorted(starts.items()):
        per_h = "; ".join(f"H={h}: {e['eval_success_rate']:.3f} / {_fmt(e.get('eval_turn_accuracy', math.nan))} / "
                          f"{_fmt(e.get('eval_valid_action_frac', math.nan))}"
                          for h, e in sorted(r.get("before", {}).items(), key=lambda x: int(x[0])))  # fmt: skip
        band = "yes" if r["reached"] else f"no: {r['reason']}"
        lines.append(f"| {env} | {seed} | {band} | {r['sft_steps']} ({r['sft_steps_taken']}) | "
                     f"{r['sft_lr_final']:.2g} | {per_h} |")  # fmt: skip
        for h, e in r.get("before", {}).items():
            positions.setdefault((env, int(h)), []).append(e.get("eval_turn_accuracy_by_turn") or [])
    if positions:
        width = max(len(p) for ps in positions.values() for p in ps)
        lines += ["", "Warm-start turn accuracy by turn position (mean over the seeds in the band):", "",
                  "| env | H | " + " | ".join(str(t + 1) for t in range(width)) + " |",
                  "|---|---:|" + "---:|" * width]  # fmt: skip
        for (env, h), ps in sorted(positions.items()):
            cols = []
            for t in range(width):
                vals = [p[t] for p in ps if t < len(p) and p[t] is not None]
                cols.append(f"{np.mean(vals):.2f}" if vals else "")
            lines.append(f"| {env} | {h} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def missing(args: argparse.Namespace, out: Path, starts: dict, results: list[dict[str, Any]],
            primary: set[tuple[str, int, str]]) -> list[str]:  # fmt: skip
    """What the requested grid still lacks: warm starts not run or out of the band, runs not finished (by cell), and
    primary comparisons without data."""
    notes = []
    done = {(r["job"]["env"], r["job"]["horizon"], r["job"]["method"], r["job"]["seed"]) for r in results}
    for env in args.cells:
        for s in args.seeds:
            w = starts.get((env, s))
            if w is None:
                notes.append(f"warm start {env} seed {s}: not run yet")
            elif not w["reached"]:
                notes.append(f"warm start {env} seed {s}: not in the band ({w['reason']}); its runs are left out")
    for env, hs in args.cells.items():
        for h in hs:
            for m in args.methods:
                lost = [s for s in args.seeds if (env, h, m, s) not in done]
                if lost:
                    notes.append(f"{env} H={h} `{m}`: {len(args.seeds) - len(lost)} of {len(args.seeds)} seeds "
                                 f"finished (missing {', '.join(map(str, lost))})")  # fmt: skip
    have = {(r["job"]["env"], r["job"]["horizon"], r["job"]["method"]) for r in results if not r.get("collapsed")}
    for env, h, m in sorted(primary):
        if (env, h, m) not in have or (env, h, "grpo") not in have:
            notes.append(f"primary comparison {env} H={h} `{m}` − `grpo`: no finished pair")
    return notes


def design(args: argparse.Namespace, primary: set[tuple[str, int, str]], n_results: int, seconds: float) -> str:
    """The design header, from the arguments of the sweep."""
    episodes = args.iterations * args.batch_tasks * args.group_size
    budget = (
        f"{args.iterations} iterations x {args.batch_tasks} tasks x {args.group_size} rollouts = {episodes} "
        "training episodes per run"
    )
    branching = [m for m in args.methods if m in BRANCH_METHODS]
    if args.token_budget == "grpo" and branching:
        budget += (f"; the branch methods ({', '.join(f'`{m}`' for m in branching)}, K = 2 forks before the "
                   "least sure eighth of the turns) stop at the sampled tokens (main rollouts and forks) of "
                   "`grpo`'s run of the same cell and "
                   "seed, equal tokens rather than equal episodes")  # fmt: skip
    elif args.token_budget not in ("none", "grpo"):
        budget += f", every run stopping at {args.token_budget} sampled tokens"
    n = len(args.seeds)
    p_min = 2 / 2**n if n <= MAX_EXACT else None
    family = ("primary family: final success of " + ", ".join(f"`{m}` at {e} H={h}" for e, h, m in sorted(primary))
              + "; secondary family: every other comparison, final success and AUC") if primary else (
              "one family: every comparison of the report, final success and AUC")  # fmt: skip
    cells = "; ".join(f"{env} H in {{{', '.join(map(str, hs))}}}" for env, hs in args.cells.items())
    return "\n".join([
        "## Design",
        "",
        f"- Grid: {cells}; k = {args.num_options} options; methods {', '.join(f'`{m}`' for m in args.methods)}; "
        f"seeds {', '.join(map(str, args.seeds))} ({n} paired seeds)"
        + ("." if args.distractor_reward is None else f"; distractor_reward {args.distractor_reward:g} in RL runs."),
        f"- Warm start per (env, seed): SFT on the oracle's demonstrations at the longest H of the env, in chunks of "
        f"{args.sft_chunk} steps at lr {args.sft_lr:g} (halved chunk, then lr, after an overshoot), until the held-out "
        f"per-turn accuracy is {args.target} ± {args.tolerance} (search on {args.search_episodes} eval tasks, "
        f"confirmed on {args.eval_episodes}); at most {args.sft_max_steps} SFT steps, else the seed is left out.",
        f"- Budget: {budget}; lr {args.lr:g}, {args.epochs} epoch(s), minibatch {args.minibatch_size}, no KL, "
        "temperature 1; the same for every method.",
        f"- Evaluation: {args.eval_episodes} held-out tasks at T=1 with fixed sampling seeds, the same before and "
        "after and for every method.",
        "- Endpoints: final held-out success (primary) and training AUC (mean training success over the "
        "iterations), each paired by seed against `grpo`.",
        "- Test: exact two-sided paired sign-flip test of the mean difference (all 2^n sign patterns for n <= "
        f"{MAX_EXACT}, else a seeded Monte-Carlo)" + (f"; with {n} seeds the smallest attainable p is {p_min:.4f}"
                                                      if p_min else "") + f". Holm's correction: {family}.",
        "- A run the trainer stops as collapsed is a reported failure: counted, not averaged, its seed left out of "
        "that comparison.",
        f"- Compute so far: {seconds / 3600:.2f} core-hours for {n_results} runs and warm starts.",
    ])  # fmt: skip


def _curves(runs: list[dict[str, Any]], key: str) -> np.ndarray | None:
    """Runs x iterations of ``key`` (NaN where a run has no value or stopped early); None when no run has any."""
    rows = [[h.get(key) for h in r["history"] if h.get("iteration", 0) > 0] for r in runs]
    if not rows or not any(v is not None for row in rows for v in row):
        return None
    width = max(map(len, rows))
    return np.array([[np.nan if v is None else float(v) for v in row] + [np.nan] * (width - len(row))
                     for row in rows])  # fmt: skip


def plot_diagnostics(results: list[dict[str, Any]], methods: list[str], path: Path) -> None:
    """One row per (env, H), one panel per diagnostic: per method, the mean over its seeds that did not collapse
    (solid), each collapsed run thin and dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(r["job"]["env"], r["job"]["horizon"]) for r in results})
    fig, axes = plt.subplots(len(cells), len(DIAGNOSTICS), figsize=(3.0 * len(DIAGNOSTICS), 2.6 * len(cells)),
                             squeeze=False)  # fmt: skip
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    for row, (env, h) in zip(axes, cells, strict=True):
        for ax, (key, title) in zip(row, DIAGNOSTICS.items(), strict=True):
            for m in methods:
                mine = [r for r in results if (r["job"]["env"], r["job"]["horizon"], r["job"]["method"]) == (env, h, m)]
                kept = _curves([r for r in mine if not r.get("collapsed")], key)
                if kept is not None and np.isfinite(kept).any():
                    with np.errstate(all="ignore"):
                        mean = np.nanmean(kept, axis=0)
                    ax.plot(np.arange(1, mean.size + 1), mean, color=colours[m], label=m, lw=1.2,
                            marker="o" if mean.size < 5 else None, ms=3)  # fmt: skip
                failed = _curves([r for r in mine if r.get("collapsed")], key)
                for curve in [] if failed is None else failed:
                    ax.plot(np.arange(1, curve.size + 1), curve, color=colours[m], lw=0.6, ls=":")
            ax.set_title(f"{env} H={h}: {title}", fontsize=8)
            ax.tick_params(labelsize=7)
        row[0].legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("iteration", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


def plot(results: list[dict[str, Any]], methods: list[str], path: Path) -> None:
    """Row per env: final success against H (mean ± sd over seeds; one line per method) and the warm start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({r["job"]["env"] for r in results})
    fig, axes = plt.subplots(1, len(envs), figsize=(4.5 * len(envs), 3.4), squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        mine = [r for r in results if r["job"]["env"] == env]
        horizons = sorted({r["job"]["horizon"] for r in mine})
        for i, m in enumerate(methods):
            xs, ys, es = [], [], []
            for h in horizons:
                after = [r["after"] for r in mine if r["job"]["method"] == m and r["job"]["horizon"] == h
                         and not r.get("collapsed") and r.get("after") is not None]  # fmt: skip
                if after:
                    xs.append(h), ys.append(np.mean(after)), es.append(np.std(after))
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=m, color=f"C{i % 10}")
        before = {h: [r["before"] for r in mine if r["job"]["horizon"] == h and r.get("before") is not None]
                  for h in horizons}  # fmt: skip
        before = {h: float(np.mean(v)) for h, v in before.items() if v}
        ax.plot(list(before), list(before.values()), "k--", label="warm start")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{env}: held-out success after the budget", fontsize=9)
        ax.set_xlabel("H")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def report(args: argparse.Namespace, out: Path) -> str:
    """Write results.md, results.json, runs.jsonl and the plots of what has finished; return the markdown."""
    starts, results = load_results(out)
    results = [r for r in results if r["job"]["method"] in args.methods]
    primary = parse_primary(args.primary)
    seconds = sum(r.get("seconds", 0.0) for r in [*results, *starts.values()])
    parts = ["# Credit sweep", "", design(args, primary, len(results) + len(starts), seconds)]
    text, records = table(results, list(args.methods)) if results else ("", [])
    tests = comparisons(results, list(args.methods), primary, args.mc_samples) if results else []
    if results:
        parts += ["", "## Final success (mean ± sd over seeds)", "", pivot(records, list(args.methods)),
                  "", "## Every cell", "", text, "", "## Paired tests against `grpo`", "",
                  tests_table(tests) if tests else "no paired comparison yet"]  # fmt: skip
    if starts:
        parts += ["", "## Warm starts", "", warm_start_tables(starts)]
    gaps = missing(args, out, starts, results, primary)
    parts += ["", "## Missing", ""] + ([f"- {g}" for g in gaps] or ["nothing: the requested grid is complete"])
    md = "\n".join(parts) + "\n"
    (out / "results.md").write_text(md, encoding="utf-8")
    (out / "results.json").write_text(json.dumps({"cells": records, "tests": tests, "missing": gaps}, indent=1),
                                      encoding="utf-8")  # fmt: skip
    with open(out / "runs.jsonl", "w", encoding="utf-8") as fh:  # every run, compact: enough to redraw the report
        for r in results:
            rl = [h for h in r["history"] if h.get("iteration", 0) > 0]
            curves = {k: [h.get(k) for h in rl] for k in KEPT if k not in ("iteration", "collapse_reason")}
            fh.write(json.dumps({**r["job"], "before": r["before"], "after": r["after"], "collapsed": r["collapsed"],
                                 "seconds": r["seconds"], **curves}) + "\n")  # fmt: skip
    if results:
        plot(results, list(args.methods), out / "credit_sweep.png")
        plot_diagnostics(results, list(args.methods), out / "credit_diagnostics.png")
    return md


def parse_cells(text: str) -> dict[str, tuple[int, ...]]:
    """``Chain:2,4;Umbrella:8`` -> {"Chain": (2, 4), "Umbrella": (8,)}."""
    cells = {}
    for part in text.split(";"):
        env, _, hs = part.partition(":")
        cells[env.strip()] = tuple(int(h) for h in hs.split(","))
    return cells


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=parse_cells, default=CELLS, help="e.g. 'Chain:4,8,16;Umbrella:8'")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--num-options", type=int, default=2)
    parser.add_argument("--distractor-reward", type=float, help="Umbrella's and KeyDoor's distractor_reward in the RL "
                        "runs (default: the env's own); warm starts are the same whatever it is")  # fmt: skip
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--token-budget", default="grpo", help="sampled tokens per run: 'grpo' (the branch methods "
                        "get grpo's count of the same cell and seed; the others run their iterations), 'none', or N "
                        "for every run")  # fmt: skip
    parser.add_argument("--batch-tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--minibatch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--target", type=float, default=0.75, help="the warm start's held-out per-turn accuracy")
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--sft-chunk", type=int, default=20, help="SFT steps between measurements (at first)")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-max-steps", type=int, default=600, help="SFT steps a warm start may take")
    parser.add_argument("--sft-horizon", type=int, help="the demonstrations' H (default: the env's longest H)")
    parser.add_argument("--search-episodes", type=int, default=64, help="eval tasks measured after each SFT chunk")
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--primary", default=PRIMARY, help="the primary family, e.g. 'Chain:16:progress_td,mt_grpo' "
                        "('none': one family)")  # fmt: skip
    parser.add_argument("--mc-samples", type=int, default=100_000, help="sign patterns drawn when n > 20")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="runs/credit_sweep")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    try:
        Band(args.target, args.tolerance)
        parse_primary(args.primary)
    except ValueError as exc:
        parser.error(str(exc))
    small = [n for n in ("iterations", "sft_chunk", "sft_max_steps", "search_episodes", "eval_episodes", "jobs",
                         "mc_samples") if getattr(args, n) < 1]  # fmt: skip
    if small:
        parser.error(f"{', '.join(small)} must be >= 1")
    for env in args.cells if args.distractor_reward is not None else ():
        try:  # each env's own declaration of the argument decides (Chain has none; Umbrella's is a number in a range)
            checked_kwargs(f"agentgym/{env}-v0", {"distractor_reward": args.distractor_reward})
        except ValueError as exc:
            parser.error(f"--distractor-reward: {exc}")
    if args.token_budget not in ("grpo", "none") and not (args.token_budget.isdigit() and int(args.token_budget) > 0):
        parser.error(f"--token-budget takes 'grpo', 'none' or a positive number of tokens, got {args.token_budget!r}")
    if args.token_budget == "grpo" and set(args.methods) & set(BRANCH_METHODS) and "grpo" not in args.methods:
        parser.error("--token-budget grpo gives the branch methods grpo's token count: add grpo to --methods")
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
