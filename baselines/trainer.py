"""Reference RL trainer for multi-turn LLM agents, CleanRL style: one loop, read top to bottom.

    config (baselines/config.py) -> policy + frozen reference (+ value head for PPO) + rollout back-end
    -> [SFT warm start on the env's demonstrations] -> for each iteration:
        1. rollouts: batch_tasks tasks x group_size episodes, token-in/token-out (baselines/rollout.py)
        2. [turn scorer] -> [dynamic sampling]
        3. behaviour, reference and critic log-probs / values of the sampled tokens
        4. advantages from agentgym.rewards (baselines/credit.py)
        5. epochs x minibatches of clipped policy-gradient updates (baselines/update.py)
        6. [SFT steps] -> [held-out eval] -> metrics.jsonl, checkpoint
    -> metrics.png

Algorithms (``TrainConfig.algo``): ``grpo`` / ``dr_grpo`` / ``rloo`` are critic-free: per-turn advantages from the
registered estimator ``TrainConfig.estimator`` (default the algo's own name; ``gtpo``, ``gigpo``, ``mapo``, ...
work too), broadcast to each turn's sampled tokens. ``ppo`` trains a linear value head on the policy's last hidden
state: token-level GAE where only sampled tokens are steps, or a turn-level critic with ``estimator="turn_ppo"``.
Dense rewards: ``progress_key`` (``ProgressReward`` on the env) and ``scorer`` (IGPO, TIPS, SIOP turn scorers).
Back-ends (``rollout_backend``): ``hf``, ``vllm``, ``remote`` (baselines/backends.py).

Every random draw comes from a named stream of ``(seed, iteration, ...)`` (``Seeds``), so a run resumed from a
checkpoint reproduces the uninterrupted run exactly (on CPU with deterministic kernels).

    python -m agentgym.baselines.trainer --preset tiny --out-dir runs/tiny
    python -m agentgym.baselines.trainer --config my.toml --set algo=ppo --set iterations=20
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from agentgym.baselines.backends import amp_dtype, make_backend
from agentgym.baselines.branches import BranchSet, branch_advantages, grow_branches
from agentgym.baselines.checkpoint import (
    TrainState,
    append_metrics,
    jsonable,
    load_checkpoint,
    load_weights,
    plot_metrics,
    read_history,
    save_checkpoint,
)
from agentgym.baselines.config import PRESETS, TrainConfig, load_config
from agentgym.baselines.credit import EnvMaker, compute_advantages, group_stats, score_turns
from agentgym.baselines.rollout import collect_rollouts, demonstration_episode, derive_seed
from agentgym.baselines.update import (
    aggregate_loss,
    build_policy,
    build_value_head,
    explained_variance,
    forward_tokens,
    make_batch,
    minibatch_loss,
    score_batch,
    select,
    value_only_loss,
)

__all__ = ["PRESETS", "TrainConfig", "budget_stop", "check_collapse", "critic_warmup", "evaluate", "load_config",
           "main", "setup", "sft_step", "train", "train_iteration"]  # fmt: skip


def setup(config: TrainConfig) -> TrainState:
    """Seeded policy, frozen reference (replaced by the warm-started policy after SFT), value head for PPO, AdamW,
    and the rollout back-end."""
    torch.manual_seed(config.seed)
    model, tok = build_policy(config)
    ref_model = None
    if config.kl_coef > 0:
        ref_model, _ = build_policy(config)
        ref_model.eval().requires_grad_(False)
    value_head = build_value_head(model) if config.critic else None
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if p.requires_grad]}]  # trainable_layers
    if value_head is not None:  # the critic's own group: its learning rate (value_lr) and its own clipping
        groups.append({"params": list(value_head.parameters()), "lr": config.value_lr or config.lr})
    optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
    return TrainState(model, tok, ref_model, value_head, optimizer, make_backend(model, tok, config))


def train_iteration(state: TrainState, config: TrainConfig, it: int) -> dict[str, Any]:
    """Rollouts, advantages, updates for iteration ``it`` (1-based); returns its metrics."""
    model, tok, device = state.model, state.tokenizer, next(state.model.parameters()).device
    metrics: dict[str, Any] = {"iteration": it}

    # 1. rollouts: batch_tasks tasks x group_size episodes each (one task seed per group)
    t0 = time.perf_counter()
    task_seeds = config.seeds.tasks(it).integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
    rollouts = training_rollouts(state, config, task_seeds, config.seeds.sampling(it), (it - 1) * config.batch_tasks)
    branches: BranchSet | None = None
    if config.branch_k > 0:  # forks from the states before chosen turns (baselines/branches.py)
        branches = grow_branches(state.policy, state.envs, EnvMaker.of(config), rollouts, config,
                                 config.seeds.sampling(it))  # fmt: skip
        metrics.update(branches.metrics(config))
    t_rollout = time.perf_counter() - t0

    # 2. dense rewards from a post-episode turn scorer; drop groups whose returns all tie (no GRPO signal)
    if config.scorer is not None:
        t_s = time.perf_counter()
        metrics.update(score_turns(rollouts, config, model, tok), time_scorer=time.perf_counter() - t_s)
    sampled = sum(r.num_sampled for r in rollouts) + (branches.sampled_tokens if branches is not None else 0)
    valid = [bool(i.get("action_valid", True)) for r in rollouts for i in r.infos] or [True]
    correct = [bool(i["correct"]) for r in rollouts for i in r.infos if isinstance(i.get("correct"), bool)]
    stds = group_stats(rollouts, config)
    metrics.update(
        reward_mean=float(np.mean([r.outcome for r in rollouts])),
        success_rate=float(np.mean([r.success for r in rollouts])),
        turns_mean=float(np.mean([len(r.turn_spans) for r in rollouts])),
        truncated_frac=float(np.mean([r.truncated and not r.terminated for r in rollouts])),
        progress_final=float(np.mean([r.final_progress for r in rollouts])),
        valid_action_frac=float(np.mean(valid)),
        sampled_tokens=sampled,
        zero_std_group_frac=float(np.mean([s == 0.0 for s in stds.values()])),
        time_rollout=t_rollout,
        rollout_tokens_per_s=sampled / max(t_rollout, 1e-9),
    )
    if correct:  # the env's verified per-turn signal (the diagnostics' info["correct"])
        metrics["turn_accuracy"] = float(np.mean(correct))
    if config.dynamic_sampling:
        rollouts = [r for r in rollouts if stds[r.group_id] > 0.0]
    metrics["kept_rollouts"] = len(rollouts)
    if not rollouts:
        return {**metrics, "skipped_update": True}
    # tree trains on the forks' first turns too, in as many optimizer steps as the main rollouts alone would take
    minibatch = config.minibatch_size
    branch_advs = None
    if branches is not None:
        rollouts, branch_advs = branch_advantages(branches, config)
        minibatch = math.ceil(config.minibatch_size * len(rollouts) / len(branches.mains))

    # 3. behaviour (old) log-probs as the trainer computes them, reference log-probs, critic values
    t1 = time.perf_counter()
    batch = make_batch(rollouts, tok.pad_token_id, mask_truncated=config.mask_truncated)
    model.eval()
    amp = amp_dtype(config)
    old_lp, old_v = score_batch(model, batch, config.temperature, config.minibatch_size, state.value_head, amp)
    gap = (old_lp - batch["rollout_logprobs"]).abs() * (batch["loss_mask"] > 0)
    metrics["rollout_logprob_maxdiff"] = float(gap.max())
    if config.old_logprobs == "rollout":
        old_lp = batch["rollout_logprobs"].clone()

    # 4. advantages (and PPO returns) per response token -> sequence coordinates
    values = None if old_v is None else [old_v[i, len(r.prompt_ids) : len(r.input_ids)].double().numpy()
                                         for i, r in enumerate(rollouts)]  # fmt: skip
    advs, rets = (branch_advs, None) if branch_advs is not None else compute_advantages(rollouts, config, values)
    batch = make_batch(rollouts, tok.pad_token_id, advantages=advs, returns=rets, mask_truncated=config.mask_truncated)
    batch["old_logprobs"] = old_lp
    if config.kl_coef > 0:
        ref_lp, _ = score_batch(state.ref_model, batch, config.temperature, config.minibatch_size, amp=amp)
        batch["ref_logprobs"] = ref_lp
    if old_v is not None:
        batch["old_values"] = old_v
        m = batch["loss_mask"] > 0
        metrics["explained_variance"] = explained_variance(old_v[m].numpy(), batch["returns"][m].numpy())
        if config.lam < 1.0:  # the critic against the Monte-Carlo returns too (lam-returns contain V itself)
            mc = mc_returns(rollouts, config, values)
            metrics["explained_variance_mc"] = explained_variance(old_v[m].numpy(), mc[m].numpy())

    # 5. epochs x minibatches of clipped updates
    model.train()
    policy_params = state.optimizer.param_groups[0]["params"]
    value_params = list(state.value_head.parameters()) if state.value_head is not None else []
    keys = ("loss", "pg_loss", "value_loss", "approx_kl", "kl_ref", "clip_frac", "entropy", "grad_norm",
            "value_grad_norm")  # fmt: skip
    logs: dict[str, list[float]] = {k: [] for k in keys}
    skipped = 0  # minibatches with no gradient at all: no optimizer step (config.skip_zero_grad_steps)
    for epoch in range(config.epochs):
        order = torch.randperm(len(rollouts), generator=config.seeds.minibatches(it, epoch))
        for start in range(0, len(rollouts), minibatch):
            mb = {k: v.to(device) for k, v in select(batch, order[start : start + minibatch]).items()}
            out = minibatch_loss(model, state.value_head, mb, config)
            state.optimizer.zero_grad(set_to_none=True)
            out["loss"].backward()
            out["grad_norm"] = torch.nn.utils.clip_grad_norm_(policy_params, config.max_grad_norm)  # before clipping
            if value_params:
                out["value_grad_norm"] = torch.nn.utils.clip_grad_norm_(value_params, config.max_grad_norm)
            empty = config.skip_zero_grad_steps and float(out["grad_norm"]) == 0.0 and (
                not value_params or float(out["value_grad_norm"]) == 0.0)  # fmt: skip
            skipped += empty
            if not empty:
                state.optimizer.step()
            if not logs["loss"]:
                metrics.update(first_ratio_maxdev=float(out["ratio_maxdev"]), first_kl_ref=float(out["kl_ref"]))
            for k in logs:
                if k in out:
                    logs[k].append(float(out[k].detach()))
    model.eval()
    state.policy.mark_stale()
    t_update = time.perf_counter() - t1
    metrics.update({k: float(np.mean(v)) for k, v in logs.items() if v})
    metrics["grad_norm_max"] = float(np.max(logs["grad_norm"]))
    metrics["skipped_steps"] = skipped
    kept_tokens = sum(r.num_sampled for r in rollouts)
    metrics.update(time_update=t_update, update_tokens_per_s=kept_tokens * config.epochs / max(t_update, 1e-9))
    return metrics


def training_rollouts(state: TrainState, config: TrainConfig, task_seeds: list[int], sample_seed: int,
                      group_offset: int) -> list[Any]:  # fmt: skip
    """``group_size`` rollouts of each task seed on the training envs (built once, kept in ``state.envs``)."""
    make_env = EnvMaker.of(config)
    if config.env_pool != "list" and isinstance(state.envs, list):
        from agentgym.running.pool import make_pool

        state.envs = make_pool(config.env_pool, config.env_id, config.batch_tasks * config.group_size,
                               make_env=make_env, **config.env_pool_kwargs)  # fmt: skip
    rollouts = collect_rollouts(state.policy, make_env, task_seeds, group_size=config.group_size,
                                config=config.rollout_config, sample_seed=sample_seed, group_offset=group_offset,
                                envs=state.envs, generation_batch=config.generation_batch,
                                snapshots=config.branch_k > 0)  # fmt: skip
    state.policy.sleep()  # a colocated engine gives its GPU memory back to the update
    return rollouts


def mc_returns(rollouts: Sequence[Any], config: TrainConfig, values: Sequence[np.ndarray]) -> torch.Tensor:
    """The Monte-Carlo (``lam = 1``) returns of the config's critic, in sequence coordinates ``(B, L)``: the
    discounted sum of the training rewards still to come, whatever the critic predicts."""
    _, rets = compute_advantages(rollouts, dataclasses.replace(config, lam=1.0), values)
    return make_batch(rollouts, 0, returns=rets)["returns"]


def critic_warmup(state: TrainState, config: TrainConfig) -> dict[str, Any]:
    """``critic_warmup_steps`` value-only iterations from the starting policy, before its first update. Each plays one
    iteration's rollouts (``batch_tasks`` x ``group_size``, seeds from ``Seeds.critic_warmup``) and measures the
    critic's explained variance on them before fitting them (a held-out number); the targets are the Monte-Carlo
    returns. The policy takes no policy-gradient step.

    - ``detach_critic``: the head's inputs (the trunk's hidden states) do not change, so they are kept and the
      linear head is refitted after every step on all of them by ridge regression (``ridge`` x the number of
      tokens on the weights): the optimum that gradient steps on a fixed linear model approach, without the
      per-batch chasing of noise (Adam on 16 rollouts at a time left its explained variance at 0 or below on
      Chain). The policy's weights stay bit for bit the same.
    - otherwise: ``epochs`` x minibatches of :func:`value_only_loss` per step on that step's rollouts; the value
      loss then moves the shared trunk too (so the policy changes: the reason ``detach_critic`` exists)."""
    if state.value_head is None:
        raise ValueError("critic_warmup needs a critic (algo='ppo')")
    model, tok, device = state.model, state.tokenizer, next(state.model.parameters()).device
    amp = amp_dtype(config)
    value_params = list(state.value_head.parameters())
    trunk = [] if config.detach_critic else state.optimizer.param_groups[0]["params"]
    evs, losses, feats, targets = [], [], [], []
    for step in range(config.critic_warmup_steps):
        task_rng, sample_seed = config.seeds.critic_warmup(step)
        task_seeds = task_rng.integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
        rollouts = training_rollouts(state, config, task_seeds, sample_seed, 0)
        batch = make_batch(rollouts, tok.pad_token_id, mask_truncated=config.mask_truncated)
        model.eval()
        inputs: list[torch.Tensor] = []
        hook = state.value_head.register_forward_hook(
            lambda _m, args, _out, sink=inputs: sink.append(args[0].detach().cpu())
        )
        try:
            _, old_v = score_batch(model, batch, config.temperature, config.minibatch_size, state.value_head, amp)
        finally:
            hook.remove()
        assert old_v is not None
        values = [old_v[i, len(r.prompt_ids) : len(r.input_ids)].double().numpy() for i, r in enumerate(rollouts)]
        batch["returns"] = mc_returns(rollouts, config, values)
        m = batch["loss_mask"] > 0
        evs.append(explained_variance(old_v[m].numpy(), batch["returns"][m].numpy()))
        if config.detach_critic:  # the head's inputs in score_batch's order: minibatches of rows, row-major inside
            feats.append(torch.cat(inputs))
            targets.append(batch["returns"][m])
            losses.append(fit_value_head(state.value_head, torch.cat(feats), torch.cat(targets)))
            continue
        model.train()
        for epoch in range(config.epochs):
            gen = torch.Generator().manual_seed(derive_seed(config.seed, step, 6, 3, epoch))
            order = torch.randperm(len(rollouts), generator=gen)
            for start in range(0, len(rollouts), config.minibatch_size):
                mb = {k: v.to(device) for k, v in select(batch, order[start : start + config.minibatch_size]).items()}
                loss = value_only_loss(model, state.value_head, mb, config)
                state.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(value_params, config.max_grad_norm)
                torch.nn.utils.clip_grad_norm_(trunk, config.max_grad_norm)
                state.optimizer.step()
                losses.append(float(loss.detach()))
        model.eval()
        state.policy.mark_stale()
    return {
        "critic_warmup_steps": config.critic_warmup_steps,
        "critic_warmup_value_loss_first": losses[0] if losses else None,
        "critic_warmup_value_loss": losses[-1] if losses else None,
        "critic_warmup_explained_variance_first": evs[0] if evs else None,
        "critic_warmup_explained_variance": evs[-1] if evs else None,
    }


@torch.no_grad()
def fit_value_head(head: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor, ridge: float = 1e-3) -> float:
    """Set the linear ``head`` to the ridge-regression fit of ``y`` on ``x`` (penalty ``ridge * len(x)`` on the
    weights, none on the bias; float64); returns the fit's loss ``0.5 * mean((head(x) - y)^2)``."""
    a = torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
    reg = torch.eye(a.shape[1], dtype=torch.float64) * ridge * len(x)
    reg[-1, -1] = 0.0
    w = torch.linalg.solve(a.T @ a + reg, a.T @ y.double())
    head.weight.copy_(w[:-1].to(head.weight)[None])
    head.bias.copy_(w[-1:].to(head.bias))
    return float(0.5 * ((a @ w - y.double()) ** 2).mean())


def _fall_z(before: float, now: float, n: int) -> float:
    """One-sided two-proportion z of a fall from ``before`` to ``now``, each a share of ``n`` episodes (pooled
    variance; inf when both shares are 0 or 1 and differ, 0 when they are equal).

    >>> round(_fall_z(11 / 80, 4 / 80, 80), 2), round(_fall_z(0.5, 0.1, 80), 2)
    (1.9, 5.52)
    """
    pooled = (before + now) / 2
    se = math.sqrt(pooled * (1 - pooled) * 2 / n) if n > 0 else 0.0
    return (before - now) / se if se > 0 else (math.inf if before > now else 0.0)


def check_collapse(history: Sequence[dict[str, Any]], config: TrainConfig) -> str | None:
    """Why the run has collapsed (None: it has not), from its RL iterations' records (iteration >= 1):

    - a non-finite loss or gradient norm in the latest iteration;
    - the mean valid-action share of the latest ``collapse_window`` iterations below ``collapse_ratio`` x that of
      the first ``collapse_window`` (the start);
    - the same for training success, when the start's is at least ``collapse_min_success`` and the fall is
      significant (a one-sided two-proportion z-test over the two windows' episodes of at least
      ``collapse_success_z``): on Chain H = 8, 11 successes in 80 episodes and then 4 is a halving and noise;
    - the mean pre-clipping gradient norm of the latest window above ``collapse_grad_factor`` x the start's
      (iterations whose groups all tied, norm 0, are left out of both).

    The windows never overlap: nothing is checked before ``2 * collapse_window`` iterations."""
    rl = [h for h in history if h.get("iteration", 0) >= 1]
    if not rl:
        return None
    last = rl[-1]
    for key in ("loss", "grad_norm", "grad_norm_max"):
        if key in last and (last[key] is None or not np.isfinite(last[key])):
            return f"non-finite {key} ({last[key]}) at iteration {last['iteration']}"
    w = config.collapse_window
    if len(rl) < 2 * w:
        return None
    start, recent = rl[:w], rl[-w:]

    def span(records: Sequence[dict[str, Any]]) -> str:
        first, last = records[0]["iteration"], records[-1]["iteration"]
        return f"iteration {first}" if first == last else f"iterations {first}-{last}"

    def mean(records: Sequence[dict[str, Any]], key: str, nonzero: bool = False) -> float | None:
        vals = [float(r[key]) for r in records if r.get(key) is not None and not (nonzero and r[key] == 0)]
        return float(np.mean(vals)) if vals else None

    ratio = config.collapse_ratio
    for key, name, floor in (("valid_action_frac", "valid-action share", 0.0),
                             ("success_rate", "training success", config.collapse_min_success)):  # fmt: skip
        before, now = mean(start, key), mean(recent, key)
        if before is not None and now is not None and before > 0 and before >= floor and now < ratio * before:
            if key == "success_rate" and _fall_z(before, now, w * config.batch_tasks * config.group_size) < (
                config.collapse_success_z
            ):
                continue
            return (f"{name} fell from {before:.3f} ({span(start)}) to {now:.3f} ({span(recent)}), below "
                    f"collapse_ratio {ratio} x the start")  # fmt: skip
    before, now = mean(start, "grad_norm", True), mean(recent, "grad_norm", True)
    if before is not None and now is not None and now > config.collapse_grad_factor * before:
        return (f"gradient norm exploded from {before:.3g} ({span(start)}) to {now:.3g} ({span(recent)}), above "
                f"collapse_grad_factor {config.collapse_grad_factor} x the start")  # fmt: skip
    return None


def sft_step(state: TrainState, config: TrainConfig, it: int, step: int) -> float:
    """One supervised step on ``sft_batch`` demonstrations of the env's demonstration agent (its oracle unless it
    names another): mean negative log-likelihood of the action tokens, in the RL rollouts' token layout. Returns the
    loss. ``it`` 0 is the warm start."""
    rng = config.seeds.demonstrations(it, step)
    env = EnvMaker.of(config, shaped=False)()
    try:
        demos = [demonstration_episode(state.policy, env, seed=int(s), config=config.rollout_config)
                 for s in rng.integers(0, config.task_seed_range, size=config.sft_batch)]  # fmt: skip
    finally:
        env.close()
    demos = [d for d in demos if d is not None]
    if not demos:
        raise ValueError(f"{config.env_id} gives no demonstrations (it has no oracle agent)")
    device = next(state.model.parameters()).device
    batch = {k: v.to(device) for k, v in make_batch(demos, state.tokenizer.pad_token_id).items()}
    state.model.train()
    lp, _, _ = forward_tokens(state.model, batch["input_ids"], batch["attention_mask"], 1.0,
                              token_mask=batch["loss_mask"] > 0, amp=amp_dtype(config))  # fmt: skip
    loss = -aggregate_loss(lp, batch["loss_mask"], "token-mean")
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in state.optimizer.param_groups for p in g["params"]], config.max_grad_norm)
    lrs = [g["lr"] for g in state.optimizer.param_groups]
    for g in state.optimizer.param_groups:
        g["lr"] = config.sft_lr if config.sft_lr is not None else config.lr
    state.optimizer.step()
    for g, lr in zip(state.optimizer.param_groups, lrs, strict=True):
        g["lr"] = lr
    state.policy.mark_stale()
    state.model.eval()
    return float(loss.detach())


@torch.no_grad()
def evaluate(state: TrainState, config: TrainConfig) -> dict[str, Any]:
    """Success, reward and the valid-action share on ``eval_tasks`` episodes of the eval env (``task_index``
    ``i % num_tasks``, without the dense reward), sampled at ``eval_temperature`` with a fixed seed, so every
    evaluation plays the same draws.

    Where the env reports a verified per-turn signal (the diagnostics' ``info["correct"]``; None or absent on turns
    without one), also ``eval_turn_accuracy`` (the share of those turns that were right) and
    ``eval_turn_accuracy_by_turn`` (the same at each turn position 1, 2, ...: None where no episode had a signal)."""
    n = config.eval_tasks
    make_env = EnvMaker.of(config, config.eval_env_kwargs, shaped=False)
    if not state.eval_envs:
        state.eval_envs.append(make_env())
    num_tasks = state.eval_envs[0].unwrapped.num_tasks  # more episodes than tasks play each task again, in order
    rollouts = collect_rollouts(state.policy, make_env, list(range(n)), group_size=1,
                                config=dataclasses.replace(config.rollout_config, temperature=config.eval_temperature),
                                sample_seed=config.seeds.evaluation(), envs=state.eval_envs,
                                generation_batch=config.generation_batch,
                                options=[{"task_index": i % num_tasks} for i in range(n)])  # fmt: skip
    state.policy.sleep()
    result: dict[str, Any] = {
        "eval_success_rate": float(np.mean([r.success for r in rollouts])),
        "eval_reward_mean": float(np.mean([r.outcome for r in rollouts])),
        "eval_progress": float(np.mean([r.final_progress for r in rollouts])),
        "eval_valid_action_frac": float(
            np.mean([bool(i.get("action_valid", True)) for r in rollouts for i in r.infos] or [True])
        ),
    }
    by_turn: list[list[bool]] = [[] for _ in range(max((len(r.infos) for r in rollouts), default=0))]
    for r in rollouts:
        for t, info in enumerate(r.infos):
            if isinstance(info.get("correct"), bool):
                by_turn[t].append(info["correct"])
    if any(by_turn):
        result["eval_turn_accuracy"] = float(np.mean([c for turn in by_turn for c in turn]))
        result["eval_turn_accuracy_by_turn"] = [float(np.mean(turn)) if turn else None for turn in by_turn]
    return result


def train(config: TrainConfig) -> dict[str, Any]:
    """Run ``config.iterations`` iterations (continuing from ``out_dir/checkpoint.pt`` when ``resume``); writes
    ``metrics.jsonl``, ``checkpoint.pt``, ``config.json`` and ``metrics.png`` under ``out_dir``; returns a summary."""
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt, metrics_path = out_dir / "checkpoint.pt", out_dir / "metrics.jsonl"
    state = setup(config)
    resumed = config.resume and ckpt.is_file()
    if resumed:
        load_checkpoint(state, ckpt)
    elif config.init_from is not None:  # a warm start shared by several runs: the weights only
        load_weights(state, config.init_from)
    history = read_history(metrics_path, state.iteration) if resumed else []
    metrics_path.write_text("".join(json.dumps(h) + "\n" for h in history), encoding="utf-8")  # drop lines past it
    (out_dir / "config.json").write_text(json.dumps(asdict(config), indent=2), encoding="utf-8")

    if not resumed and (config.sft_steps > 0 or config.eval_every > 0 or config.critic_warmup_steps > 0):
        warm: dict[str, Any] = {"iteration": 0}  # iteration 0: warm start, critic warm-up, first eval
        if config.sft_steps > 0:
            losses = [sft_step(state, config, 0, k) for k in range(config.sft_steps)]
            warm.update(sft_loss=losses[-1], sft_loss_first=losses[0])
            if state.ref_model is not None:  # the KL anchor is the warm-started policy
                state.ref_model.load_state_dict(state.model.state_dict())
        if config.critic_warmup_steps > 0:
            warm.update(critic_warmup(state, config))
        if config.eval_every > 0:
            warm.update(evaluate(state, config))
        history.append(warm)
        append_metrics(metrics_path, warm)
        if (config.sft_steps > 0 or config.critic_warmup_steps > 0) and config.checkpoint_every > 0:
            save_checkpoint(state, config, ckpt)

    collapsed = next((h["collapse_reason"] for h in history if h.get("collapse_reason")), None)
    collapsed = collapsed if config.collapse_check else None  # a resumed collapsed run stops again, unless told not to
    # the token budget (max_sampled_tokens): every token sampled in the RL iterations so far, main rollouts and forks
    total = next((h["sampled_tokens_total"] for h in reversed(history) if h.get("sampled_tokens_total") is not None), 0)
    stopped = budget_stop(total, config)
    start = config.iterations + 1 if collapsed or stopped else state.iteration + 1
    bar = tqdm(total=config.iterations, initial=state.iteration, desc="train", unit="it",
               disable=not config.progress or start > config.iterations)  # fmt: skip
    for it in range(start, config.iterations + 1):
        metrics = train_iteration(state, config, it)
        total += int(metrics.get("sampled_tokens", 0))
        metrics["sampled_tokens_total"] = total
        stopped = budget_stop(total, config)
        if stopped:
            metrics["stop_reason"] = stopped
        if config.sft_steps_per_iteration > 0:
            metrics["sft_loss"] = float(np.mean([sft_step(state, config, it, k)
                                                 for k in range(config.sft_steps_per_iteration)]))  # fmt: skip
        if config.collapse_check:
            collapsed = check_collapse([*history, metrics], config)
            if collapsed:
                metrics.update(collapsed=True, collapse_reason=collapsed)
        eval_due = it % config.eval_every == 0 or it == config.iterations or stopped if config.eval_every > 0 else False
        if eval_due and not collapsed:
            metrics.update(evaluate(state, config))
        state.iteration = it
        history.append(metrics)
        append_metrics(metrics_path, metrics)
        if config.checkpoint_every > 0 and (it % config.checkpoint_every == 0 or it == config.iterations or collapsed
                                            or stopped):  # fmt: skip
            save_checkpoint(state, config, ckpt)
        shown = {"reward": metrics["reward_mean"], "success": metrics["success_rate"]}
        if "eval_success_rate" in metrics:
            shown["eval"] = metrics["eval_success_rate"]
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()}, refresh=False)
        bar.update(1)
        if collapsed or stopped:  # a collapse is a reported failure, not a data point; a spent budget ends the run
            break
    bar.close()
    state.close()
    plot = plot_metrics(history, out_dir / "metrics.png") if config.plot and history else None
    return {
        "iterations": state.iteration,
        "last": history[-1] if history else None,
        "history": history,
        "metrics_path": str(metrics_path),
        "checkpoint": str(ckpt) if ckpt.is_file() else None,
        "plot": None if plot is None else str(plot),
        "collapsed": collapsed,
        "stopped": stopped,
        "state": state,
    }


def budget_stop(total: int, config: TrainConfig) -> str | None:
    """Why the run stops for its token budget (None: it does not): ``total`` sampled tokens reached
    ``max_sampled_tokens``. A resumed run checks its count again, so raising the budget continues it."""
    if config.max_sampled_tokens is None or total < config.max_sampled_tokens:
        return None
    return f"token budget: {total} sampled tokens >= max_sampled_tokens {config.max_sampled_tokens}"


#: What a run writes into its ``out_dir``: a folder holding any of them holds a run.
RUN_FILES = ("checkpoint.pt", "metrics.jsonl", "config.json", "metrics.png")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``--preset NAME`` and/or ``--config FILE`` (JSON/TOML), ``--set key=value`` overrides (JSON values).

    Usage errors (a missing model folder, a run folder that holds a run without ``--resume`` or ``--overwrite``)
    are one line and exit 2; Ctrl-C says where the last checkpoint is (``agentgym.cli.main`` prints it, exit 130).
    """
    from agentgym.cli import OneLineParser, UserError

    parser = OneLineParser(prog="agentgym train", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS))
    parser.add_argument("--config", dest="config_file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", help="local model directory, tiny or a named model such as smollm2-135m "
                        "(overrides the preset's model)")  # fmt: skip
    parser.add_argument("--out-dir")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--resume", action="store_true", help="continue the run in the output folder")
    parser.add_argument("--overwrite", action="store_true", help="replace the run in the output folder")
    args = parser.parse_args(argv)
    if args.preset is None and args.config_file is None:
        parser.error("give --preset or --config")
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    flags = {"model": args.model, "out_dir": args.out_dir, "iterations": args.iterations, "resume": args.resume or None}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    try:
        config = load_config(args.preset, args.config_file, overrides)
    except (ValueError, KeyError, OSError) as exc:
        parser.error(str(exc.args[0]) if isinstance(exc, KeyError) else str(exc))
    if not config.model:
        raise UserError("no model: give a local model directory with --model PATH (nothing is downloaded)")
    from agentgym.tools.named_models import NAMED_MODELS, model_names

    if config.model in NAMED_MODELS:
        try:
            NAMED_MODELS[config.model].gguf_path()
        except RuntimeError as exc:
            raise UserError(str(exc)) from None
    elif config.model != "tiny" and not Path(config.model).is_dir():
        raise UserError(f"no model directory at {config.model} (--model: a local folder with config.json, or a "
                        f"named model: {', '.join(('tiny', *model_names()))})")  # fmt: skip
    out_dir = Path(config.out_dir)
    found = [name for name in RUN_FILES if (out_dir / name).is_file()]
    if found and config.resume and args.overwrite:
        raise UserError("--resume continues the run in the output folder, --overwrite replaces it: give one")
    if found and not config.resume:
        if not args.overwrite:
            raise UserError(f"{out_dir} holds a run ({', '.join(found)}); pass --resume to continue it, --overwrite "
                            "to replace it, or choose another --out-dir")  # fmt: skip
        for name in found:
            (out_dir / name).unlink()
    try:
        summary = train(config)
    except KeyboardInterrupt:
        saved = out_dir / "checkpoint.pt"
        where = f"the last checkpoint is {saved} (continue with --resume)" if saved.is_file() else "no checkpoint yet"
        raise KeyboardInterrupt(where) from None
    print(json.dumps(jsonable(summary["last"] or {}), indent=2))
    print(json.dumps({k: summary[k] for k in ("iterations", "metrics_path", "checkpoint", "plot")}, indent=2))
    evals = [(h["iteration"], h["eval_success_rate"]) for h in summary["history"] if "eval_success_rate" in h]
    if len(evals) > 1:  # what a newcomer wants to see: held-out success before RL and after
        print("held-out success: " + " -> ".join(f"{v:.3f} (iteration {i})" for i, v in evals))
    if summary["stopped"]:
        print(f"agentgym train: stopped at iteration {summary['iterations']}: {summary['stopped']}")
    if summary["collapsed"]:
        print(f"agentgym train: the run collapsed and stopped at iteration {summary['iterations']}: "
              f"{summary['collapsed']} (--set collapse_check=false runs on)", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":  # the same messages and exit codes as ``agentgym train``
    from agentgym.cli import main as cli_main

    raise SystemExit(cli_main(["train", *sys.argv[1:]]))
