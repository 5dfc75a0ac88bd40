"""Reference RL trainer for multi-turn LLM agents, CleanRL style: one loop, read top to bottom.

    config (baselines/config.py) -> policy + frozen reference (+ value head for PPO) + rollout back-end
    -> iteration 0: [SFT warm start on the env's demonstrations] -> [critic warm-up] (baselines/warmup.py) -> [eval]
    -> for each iteration:
        1. rollouts: batch_tasks tasks x group_size episodes, token-in/token-out (baselines/rollout.py)
           [+ forks from the states before chosen turns, for branch credit (baselines/branches.py)]
           -> [reward wrappers' tables learn the batch] -> [AIRS picks the bonus] -> [S2D weighs the shaping]
        2. [turn scorer] -> [dynamic sampling]
        3. behaviour, reference and critic log-probs / values of the sampled tokens
        4. advantages from agentgym.rewards (baselines/credit.py)
        5. epochs x minibatches of clipped policy-gradient updates (baselines/update.py)
        6. [SFT steps] -> token budget, collapse check (baselines/guards.py) -> [held-out eval] -> metrics.jsonl
    -> metrics.png

Algorithms (``TrainConfig.algo``): ``grpo`` / ``dr_grpo`` / ``rloo`` are critic-free: per-turn advantages from the
registered estimator ``TrainConfig.estimator`` (default the algo's own name; ``gtpo``, ``gigpo``, ``mapo``, ...
work too), broadcast to each turn's sampled tokens. ``ppo`` trains a linear value head on the policy's last hidden
state: token-level GAE where only sampled tokens are steps, or a turn-level critic with ``estimator="turn_ppo"``.
``ipr`` runs IPR's iterations instead (baselines/ipr.py: expert-path forks, step DPO + SFT against the policy the
iteration starts from).
Dense rewards: ``progress_key`` (``ProgressReward`` on the env), ``reward_wrappers`` (any wrapper or bonus card,
e.g. ``novelty``, ``rnd``, ``potential_shaping``) and ``scorer`` (any turn-scorer card: IGPO, TIPS, SIOP, InfoPO,
a judge; baselines/components.py). Trainer-side methods (baselines/trainer_methods.py): A^2TGPO's adaptive clip,
S2D, EPO, AIRS; AT^2PO's turn-level ratio (``ratio_level="turn"``, baselines/update.py) and T^2PO's thinking
intervention (``think_intervention``, baselines/t2po.py).
Back-ends (``rollout_backend``): ``hf``, ``vllm``, ``remote`` (baselines/backends.py).

Every random draw comes from a named stream of ``(seed, iteration, ...)`` (``Seeds``), so a run resumed from a
checkpoint reproduces the uninterrupted run exactly (on CPU with deterministic kernels).

    python -m agentgym.baselines.trainer --preset tiny --out-dir runs/tiny
    python -m agentgym.baselines.trainer --config my.toml --set algo=ppo --set iterations=20

``agentgym train`` checks the config keys, the env's arguments and the model before it builds a model or writes the run
folder (baselines/guards.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from agentgym.baselines.airs import AIRSController
from agentgym.baselines.archer import archer_train_iteration
from agentgym.baselines.backends import amp_dtype, make_backend
from agentgym.baselines.branches import BranchSet, branch_rows, grow_branches
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
from agentgym.baselines.credit import (
    EnvMaker,
    build_scorer,
    clip_scales,
    compute_advantages,
    extrinsic_return,
    group_stats,
    make_tables,
    scale_components,
    score_turns,
    signal_auc,
    training_rollouts,
    update_tables,
)
from agentgym.baselines.guards import RunGuard, check_start, claim_out_dir, undo_failed_start
from agentgym.baselines.hindsight import HindsightBatch, hindsight_step
from agentgym.baselines.ipr import ipr_train_iteration
from agentgym.baselines.reward_conditioning import (
    ConditionedEnvMaker,
    add_reward_tokens,
    condition_metrics,
    conditioned_rollouts,
)
from agentgym.baselines.rollout import collect_rollouts
from agentgym.baselines.rollout_log import log_rollouts
from agentgym.baselines.t2po import mask_thinking
from agentgym.baselines.trainer_methods import MethodState
from agentgym.baselines.update import (
    build_policy,
    build_value_head,
    explained_variance,
    make_batch,
    minibatch_loss,
    score_batch,
    select,
    sync_critic_trunk,
    value_epoch_loss,
)
from agentgym.baselines.warmup import mc_returns, sft_step, warm_start
from agentgym.cli import key_values

__all__ = ["PRESETS", "TrainConfig", "evaluate", "load_config", "main", "setup", "sft_step", "train", "train_iteration"]


def setup(config: TrainConfig) -> TrainState:
    """Seeded policy, frozen reference (replaced by the warm-started policy after SFT; IPR refreshes it every
    iteration), value head for PPO, AdamW, and the rollout back-end."""
    torch.manual_seed(config.seed)
    model, tok = build_policy(config)
    if config.reward_conditioning:  # RC-GRPO: the reward tokens join the vocabulary (baselines/reward_conditioning.py)
        add_reward_tokens(model, tok)
    ref_model = None
    if config.kl_coef > 0 or config.algo == "ipr":
        ref_model, ref_tok = build_policy(config)
        if config.reward_conditioning:
            add_reward_tokens(ref_model, ref_tok)
        ref_model.eval().requires_grad_(False)
    value_head = build_value_head(model, config.critic_trunk) if config.critic else None
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if p.requires_grad]}]  # trainable_layers
    if value_head is not None:  # the critic's own group: its learning rate (value_lr) and its own clipping
        groups.append({"params": list(value_head.parameters()), "lr": config.value_lr or config.lr})
    optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
    return TrainState(model, tok, ref_model, value_head, optimizer, make_backend(model, tok, config))


def train_iteration(state: TrainState, config: TrainConfig, it: int, methods: MethodState | None = None
                    ) -> dict[str, Any]:  # fmt: skip
    """Rollouts, advantages, updates for iteration ``it`` (1-based); returns its metrics. ``methods``: what the
    trainer-side methods keep across iterations (reward-wrapper tables, EPO's entropy EMA); pass the same object
    every iteration (None: a fresh one, i.e. a run of this one iteration). ``algo="ipr"``: IPR's iteration instead."""
    if config.algo == "ipr":  # expert-path pairs, step DPO + SFT (baselines/ipr.py)
        return ipr_train_iteration(state, config, it)
    if config.algo == "archer":  # replay-buffer TD critic, token actor on Q - V (baselines/archer.py)
        return archer_train_iteration(state, config, it, methods)
    model, tok, device = state.model, state.tokenizer, next(state.model.parameters()).device
    metrics: dict[str, Any] = {"iteration": it}
    if methods is None:
        methods = MethodState(make_tables(config))

    # 1. rollouts: batch_tasks tasks x group_size episodes each (one task seed per group)
    t0 = time.perf_counter()
    task_seeds = config.seeds.tasks(it).integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
    collect = conditioned_rollouts if config.reward_conditioning else training_rollouts  # RC-GRPO mixes the tokens
    rollouts = collect(state, config, task_seeds, config.seeds.sampling(it), (it - 1) * config.batch_tasks,
                       methods.tables)  # fmt: skip
    if config.reward_conditioning:
        metrics.update(condition_metrics(rollouts))
    # T^2PO's thinking intervention: the inserted tokens leave the loss (0 without think_intervention)
    think = mask_thinking(state.policy, rollouts, forget_rest=config.branch_k == 0)
    branches: BranchSet | None = None
    if config.branch_k > 0:  # forks from the states before chosen turns (baselines/branches.py)
        branches = grow_branches(state.policy, state.envs, EnvMaker.of(config, tables=methods.tables), rollouts,
                                 config, config.seeds.sampling(it))  # fmt: skip
        think += mask_thinking(state.policy, branches.rows, forget_rest=True)
        metrics.update(branches.metrics(config))
    if config.think_intervention:
        metrics["think_masked_tokens"] = think
    herl: HindsightBatch | None = None
    if config.herl:  # HeRL: guided resamples of the failed rollouts join their groups (baselines/hindsight.py)
        herl = hindsight_step(state, config, rollouts, config.seeds.sampling(it), methods.tables)
        rollouts = rollouts + herl.guided
        metrics.update(herl.metrics())
    t_rollout = time.perf_counter() - t0
    # the reward wrappers' tables learn from this batch only after all of it was played (siblings read one snapshot)
    metrics.update(update_tables(config, methods.tables, rollouts))
    if config.airs_arms is not None:  # AIRS: credit the last arm with the extrinsic gain, count only the next arm
        arms = config.airs_arms
        ctl = methods.extra.setdefault("airs", AIRSController.of(len(arms), config.airs_c, config.airs_window))
        ret = float(np.mean([extrinsic_return(r, arms) for r in rollouts]))
        arm = ctl.step(ret)
        scale_components(rollouts, {a: 0.0 for k, a in enumerate(arms) if k != arm})
        metrics.update(airs_arm=arm, airs_extrinsic_return=ret)
    if config.shaping_schedule is not None:  # S2D: this iteration's weight of the shaping component
        c = config.shaping_scale(it)
        scale_components(rollouts, {config.shaping_schedule.get("component", "shaping"): c})
        metrics["shaping_scale"] = c

    # 2. dense rewards from a post-episode turn scorer; drop groups whose returns all tie (no GRPO signal)
    if config.scorer is not None:
        t_s = time.perf_counter()
        scorer = methods.turn_scorer(lambda: build_scorer(config, model, tok))  # a persistent one is kept
        metrics.update(score_turns(rollouts, config, model, tok, scorer), time_scorer=time.perf_counter() - t_s)
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
        auc = signal_auc(rollouts, config)  # how well the signal the run reads tells right turns from wrong
        if auc is not None:
            metrics["turn_signal_auc"] = auc
    if config.dynamic_sampling:
        rollouts = [r for r in rollouts if stds[r.group_id] > 0.0]
    metrics["kept_rollouts"] = len(rollouts)
    if not rollouts:
        return {**metrics, "skipped_update": True}
    minibatch, branch_advs = config.minibatch_size, None
    if branches is not None:  # the rows and advantages of branch credit (tree trains the forks' first turns too)
        rollouts, branch_advs, minibatch = branch_rows(branches, config)

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
    if herl is not None:  # HeRL's bonus on the failed rollouts' last turns, before the group advantages
        metrics.update(herl.add_bonus(rollouts, config))
    advs, rets = (branch_advs, None) if branch_advs is not None else compute_advantages(rollouts, config, values)
    if herl is not None:  # guided tokens: advantage x min(pi(a|unguided) / pi(a|guided), herl_is_clip)
        advs, herl_weights = herl.correct(rollouts, advs, old_lp)
        metrics.update(herl_weights)
    # the episodes of every log_rollouts_every-th iteration, with these advantages per token (rollouts.jsonl)
    metrics.update(log_rollouts(config, it, rollouts, advs, tok, branches))
    scales = clip_scales(rollouts, config) if branch_advs is None else None  # A^2TGPO's adaptive clip
    batch = make_batch(rollouts, tok.pad_token_id, advantages=advs, returns=rets, mask_truncated=config.mask_truncated,
                       clip_scales=scales, with_turns=config.ratio_level == "turn")  # fmt: skip
    if scales is not None:
        on = batch["loss_mask"] > 0
        token_scales = batch["clip_scale"][on] if bool(on.any()) else torch.ones(1)
        metrics.update(clip_scale_mean=float(token_scales.mean()),
                       clip_scale_maxdev=float((token_scales - 1.0).abs().max()))  # fmt: skip
    batch["old_logprobs"] = old_lp
    if config.self_distill is not None:  # HINT-SD: the teacher's log-probs on the failure turns (self_distill.py)
        from agentgym.baselines.components import make_judge
        from agentgym.baselines.self_distill import add_distill_targets

        judge = make_judge(config.distill_judge) if config.self_distill == "judge" else None
        metrics.update(add_distill_targets(state.policy, model, config, rollouts, batch, judge))
    if config.kl_coef > 0:
        ref_lp, _ = score_batch(state.ref_model, batch, config.temperature, config.minibatch_size, amp=amp)
        batch["ref_logprobs"] = ref_lp
    if old_v is not None and values is not None:  # values: old_v per rollout
        batch["old_values"] = old_v
        m = batch["loss_mask"] > 0
        metrics["explained_variance"] = explained_variance(old_v[m].numpy(), batch["returns"][m].numpy())
        if config.lam < 1.0:  # the critic against the Monte-Carlo returns too (lam-returns contain V itself)
            mc = mc_returns(rollouts, config, values)
            metrics["explained_variance_mc"] = explained_variance(old_v[m].numpy(), mc[m].numpy())

    # 5. epochs x minibatches of clipped updates
    model.train()
    policy_params = state.optimizer.param_groups[0]["params"]
    own_epochs = config.value_epochs is not None  # the critic then steps in its own epochs (critic_epochs)
    value_params = list(state.value_head.parameters()) if state.value_head is not None and not own_epochs else []
    keys = ("loss", "pg_loss", "value_loss", "approx_kl", "kl_ref", "clip_frac", "entropy", "grad_norm",
            "value_grad_norm", "entropy_penalty", "distill_loss")  # fmt: skip
    ent_coef = config.ent_coef_at(it)  # EPO's phase schedule (flat by default)
    entropy_ref = methods.entropy_ema  # EPO's band centre: past iterations only
    logs: dict[str, list[float]] = {k: [] for k in keys}
    skipped = 0  # minibatches with no gradient at all: no optimizer step (config.skip_zero_grad_steps)
    for epoch in range(config.epochs):
        order = torch.randperm(len(rollouts), generator=config.seeds.minibatches(it, epoch))
        for start in range(0, len(rollouts), minibatch):
            mb = {k: v.to(device) for k, v in select(batch, order[start : start + minibatch]).items()}
            out = minibatch_loss(model, state.value_head, mb, config, ent_coef=ent_coef, entropy_ref=entropy_ref)
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
    if config.value_epochs is not None and state.value_head is not None:  # the critic's own epochs, after the policy's
        metrics.update(critic_epochs(state, config, it, batch, rollouts))
    model.eval()
    state.policy.mark_stale()
    t_update = time.perf_counter() - t1
    metrics.update({k: float(np.mean(v)) for k, v in logs.items() if v})
    metrics["grad_norm_max"] = float(np.max(logs["grad_norm"]))
    metrics["skipped_steps"] = skipped
    if config.entropy_kappa > 0 or config.ent_coef_final is not None:
        metrics.update(ent_coef=ent_coef, entropy_ema=methods.observe_entropy(metrics["entropy"], config.entropy_ema))
    kept_tokens = sum(r.num_sampled for r in rollouts)
    metrics.update(time_update=t_update, update_tokens_per_s=kept_tokens * config.epochs / max(t_update, 1e-9))
    return metrics


def critic_epochs(state: TrainState, config: TrainConfig, it: int, batch: dict[str, torch.Tensor],
                  rollouts: Sequence[Any]) -> dict[str, float]:  # fmt: skip
    """``value_epochs`` x minibatches of value-only steps (:func:`value_epoch_loss`) on iteration ``it``'s batch,
    after the policy's epochs: the critic's updates leave the policy's minibatches. Only the critic's parameters
    step (the policy's gradients stay None); returns the mean value loss and gradient norm."""
    assert state.value_head is not None and config.value_epochs is not None
    device = next(state.model.parameters()).device
    params = list(state.value_head.parameters())
    losses, norms = [], []
    for epoch in range(config.value_epochs):
        gen = config.seeds.minibatches(it, config.epochs + epoch)  # past the policy's epochs: a stream of its own
        order = torch.randperm(len(rollouts), generator=gen)
        for start in range(0, len(rollouts), config.minibatch_size):
            mb = {k: v.to(device) for k, v in select(batch, order[start : start + config.minibatch_size]).items()}
            loss = value_epoch_loss(state.model, state.value_head, mb, config)
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)))
            state.optimizer.step()
            losses.append(float(loss.detach()))
    state.optimizer.zero_grad(set_to_none=True)
    return {"value_loss": float(np.mean(losses)), "value_grad_norm": float(np.mean(norms))}


@torch.no_grad()
def evaluate(state: TrainState, config: TrainConfig) -> dict[str, Any]:
    """Success, reward and the valid-action share on ``eval_tasks`` episodes of the eval env (``task_index``
    ``i % num_tasks``, without the dense reward), sampled at ``eval_temperature`` with a fixed seed, so every
    evaluation plays the same draws.

    Where the env reports a verified per-turn signal (the diagnostics' ``info["correct"]``; None or absent on turns
    without one), also ``eval_turn_accuracy`` (the share of those turns that were right) and
    ``eval_turn_accuracy_by_turn`` (the same at each turn position 1, 2, ...: None where no episode had a signal)."""
    n = config.eval_tasks
    make_env: Any = EnvMaker.of(config, config.eval_env_kwargs, shaped=False)
    if config.reward_conditioning:  # RC-GRPO evaluates conditioned on the high-reward token
        make_env = ConditionedEnvMaker(make_env)
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
    ``metrics.jsonl``, ``checkpoint.pt``, ``config.json`` and ``metrics.png`` under ``out_dir``; returns a summary.
    A start that fails in setup or the warm start removes what it wrote; a folder without a record is no run."""
    out_dir = Path(config.out_dir)
    ckpt, metrics_path = out_dir / "checkpoint.pt", out_dir / "metrics.jsonl"
    with undo_failed_start(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        state = setup(config)
        resumed = config.resume and ckpt.is_file()
        methods_path = out_dir / "methods.pt"  # the trainer-side methods' state, written with each checkpoint
        methods = MethodState(make_tables(config))
        if resumed:
            load_checkpoint(state, ckpt)
            if methods_path.is_file():
                methods = MethodState.load(methods_path)
        elif config.init_from is not None:  # a warm start shared by several runs: the weights only
            load_weights(state, config.init_from)
            sync_critic_trunk(state.model, state.value_head)  # a separate critic starts from the loaded policy
        history = read_history(metrics_path, state.iteration) if resumed else []
        metrics_path.write_text("".join(json.dumps(h) + "\n" for h in history), encoding="utf-8")  # drop lines past it
        (out_dir / "config.json").write_text(json.dumps(asdict(config), indent=2), encoding="utf-8")

        if not resumed and (config.sft_steps > 0 or config.eval_every > 0 or config.critic_warmup_steps > 0):
            warm = {"iteration": 0, **warm_start(state, config)}  # iteration 0: SFT, critic warm-up, first eval
            if config.eval_every > 0:
                warm.update(evaluate(state, config))
            history.append(warm)
            append_metrics(metrics_path, warm)
            if (config.sft_steps > 0 or config.critic_warmup_steps > 0) and config.checkpoint_every > 0:
                save_checkpoint(state, config, ckpt)

    guard = RunGuard.of(history, config)  # the token budget and the collapse check, kept across a resume
    start = config.iterations + 1 if guard.done else state.iteration + 1
    bar = tqdm(total=config.iterations, initial=state.iteration, desc="train", unit="it",
               disable=not config.progress or start > config.iterations)  # fmt: skip
    for it in range(start, config.iterations + 1):
        metrics = train_iteration(state, config, it, methods)
        guard.count(metrics)
        if config.sft_steps_per_iteration > 0:
            metrics["sft_loss"] = float(np.mean([sft_step(state, config, it, k)
                                                 for k in range(config.sft_steps_per_iteration)]))  # fmt: skip
        guard.check(history, metrics)
        eval_due = config.eval_every > 0 and (it % config.eval_every == 0 or it == config.iterations or guard.stopped)
        if eval_due and not guard.collapsed:
            metrics.update(evaluate(state, config))
        state.iteration = it
        history.append(metrics)
        append_metrics(metrics_path, metrics)
        if config.checkpoint_every > 0 and (it % config.checkpoint_every == 0 or it == config.iterations or guard.done):
            save_checkpoint(state, config, ckpt)
            methods.save(methods_path)
        shown = {"reward": metrics["reward_mean"], "success": metrics["success_rate"]}
        if "eval_success_rate" in metrics:
            shown["eval"] = metrics["eval_success_rate"]
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()}, refresh=False)
        bar.update(1)
        if guard.done:
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
        "collapsed": guard.collapsed,
        "stopped": guard.stopped,
        "state": state,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``--preset NAME`` and/or ``--config FILE`` (JSON/TOML), ``--set key=value`` overrides (JSON values).

    Usage errors (an unknown config key, env arguments the env's constructor refuses, a missing model folder, a run
    folder that holds a run without ``--resume`` or ``--overwrite``) are one line and exit 2, before a model is built
    or the run folder is written; Ctrl-C says where the last checkpoint is (``agentgym.cli.main`` prints it, 130).
    """
    from agentgym.baselines.methods import get_method, method_overrides
    from agentgym.cli import OneLineParser, UserError

    parser = OneLineParser(prog="agentgym train", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS))
    parser.add_argument("--config", dest="config_file")
    parser.add_argument("--method", help="start from this method's settings (agentgym methods lists them); "
                        "--set KNOB=VALUE then sets its knobs")  # fmt: skip
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
    flags = {"model": args.model, "out_dir": args.out_dir, "iterations": args.iterations, "resume": args.resume or None}
    try:
        sets = key_values(args.set)
        if args.method is not None:
            sets = method_overrides(get_method(args.method), sets)
        overrides = {**sets, **{k: v for k, v in flags.items() if v is not None}}
        config = load_config(args.preset, args.config_file, overrides)
    except (ValueError, KeyError, OSError) as exc:
        parser.error(str(exc.args[0]) if isinstance(exc, KeyError) else str(exc))
    out_dir = Path(config.out_dir)
    try:  # everything checked before a model is built or the run folder is touched
        check_start(config)
        claim_out_dir(out_dir, resume=config.resume, overwrite=args.overwrite)
    except ValueError as exc:
        raise UserError(str(exc)) from None
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
