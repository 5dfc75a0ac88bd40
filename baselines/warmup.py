"""What runs before the policy's first update, kept out of the trainer's loop: the SFT warm start on the env's
demonstrations (:func:`sft_step`, also the loop's ``sft_steps_per_iteration``), the critic warm-up of PPO's value
head on rollouts of the starting policy (:func:`critic_warmup`, with its exact ridge refit :func:`fit_value_head` and
its Monte-Carlo targets :func:`mc_returns`, which the loop's ``explained_variance_mc`` uses too), and
:func:`warm_start`, which runs both in order for iteration 0."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentgym.baselines.backends import amp_dtype
from agentgym.baselines.checkpoint import TrainState
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import EnvMaker, build_scorer, compute_advantages, score_turns, training_rollouts
from agentgym.baselines.rollout import demonstration_episode, derive_seed
from agentgym.baselines.update import (
    TrunkValueHead,
    explained_variance,
    make_batch,
    score_batch,
    select,
    sft_update,
    sync_critic_trunk,
    value_only_loss,
)

__all__ = ["critic_warmup", "fit_value_head", "mc_returns", "sft_step", "warm_start"]


def warm_start(state: TrainState, config: TrainConfig) -> dict[str, Any]:
    """Iteration 0's training before any RL update: ``sft_steps`` SFT steps (then the KL anchor is the warm-started
    policy), then ``critic_warmup_steps`` of critic warm-up; returns their metrics (none when both are 0)."""
    warm: dict[str, Any] = {}
    if config.sft_steps > 0:
        if config.reward_conditioning:  # RC-GRPO's stage 1: count the examples of each outcome bucket too
            from agentgym.baselines.reward_conditioning import conditioned_sft_step

            steps = [conditioned_sft_step(state, config, 0, k) for k in range(config.sft_steps)]
            losses, buckets = [loss for loss, _ in steps], [b for _, bs in steps for b in bs]
            warm.update(rc_sft_high=buckets.count("high"), rc_sft_low=buckets.count("low"))
        else:
            losses = [sft_step(state, config, 0, k) for k in range(config.sft_steps)]
        warm.update(sft_loss=losses[-1], sft_loss_first=losses[0])
        if state.ref_model is not None:
            state.ref_model.load_state_dict(state.model.state_dict())
        sync_critic_trunk(state.model, state.value_head)  # a separate critic starts from the warm-started policy
    if config.critic_warmup_steps > 0:
        warm.update(critic_warmup(state, config))
    return warm


def sft_step(state: TrainState, config: TrainConfig, it: int, step: int) -> float:
    """One supervised step on ``sft_batch`` demonstrations of the env's demonstration agent (its oracle unless it
    names another): mean negative log-likelihood of the action tokens, in the RL rollouts' token layout. Returns the
    loss. ``it`` 0 is the warm start. With ``reward_conditioning``, RC-GRPO's stage 1 instead
    (``reward_conditioning.conditioned_sft_step``: mixed-quality episodes, each with its outcome's token)."""
    if config.reward_conditioning:
        from agentgym.baselines.reward_conditioning import conditioned_sft_step  # it imports this module

        return conditioned_sft_step(state, config, it, step)[0]
    rng = config.seeds.demonstrations(it, step)
    env = EnvMaker.of(config, shaped=False)()
    try:
        demos = [demonstration_episode(state.policy, env, seed=int(s), config=config.rollout_config)
                 for s in rng.integers(0, config.task_seed_range, size=config.sft_batch)]  # fmt: skip
    finally:
        env.close()
    found = [d for d in demos if d is not None]
    if not found:
        raise ValueError(f"{config.env_id} gives no demonstrations (it has no oracle agent)")
    return sft_update(state, config, found)


def mc_returns(rollouts: Sequence[Any], config: TrainConfig, values: Sequence[np.ndarray]) -> torch.Tensor:
    """The Monte-Carlo (``lam = 1``) returns of the config's critic, in sequence coordinates ``(B, L)``: the
    discounted sum of the training rewards still to come, whatever the critic predicts."""
    _, rets = compute_advantages(rollouts, dataclasses.replace(config, lam=1.0), values)
    return make_batch(rollouts, 0, returns=rets)["returns"]


def critic_warmup(state: TrainState, config: TrainConfig) -> dict[str, Any]:
    """``critic_warmup_steps`` value-only iterations from the starting policy, before its first update. Each plays one
    iteration's rollouts (``batch_tasks`` x ``group_size``, seeds from ``Seeds.critic_warmup``) and measures the
    critic's explained variance on them before fitting them (a held-out number); the targets are the Monte-Carlo
    returns. The policy takes no policy-gradient step. With a scorer, each batch is scored as the loop scores it
    (one scorer for the whole warm-up), so the returns count its rewards, or its verdicts as the turn signal.

    - ``detach_critic``: the head's inputs (the trunk's hidden states) do not change, so they are kept and the
      linear head is refitted after every step on all of them by ridge regression (``ridge`` x the number of
      tokens on the weights): the optimum that gradient steps on a fixed linear model approach, without the
      per-batch chasing of noise (Adam on 16 rollouts at a time left its explained variance at 0 or below on
      Chain). The policy's weights stay bit for bit the same.
    - otherwise: ``epochs`` (``value_epochs`` when set) x minibatches of :func:`value_only_loss` per step on that
      step's rollouts; the value loss then moves the shared trunk too (so the policy changes: the reason
      ``detach_critic`` exists), or, with ``critic_trunk="separate"``, the critic's own trunk and the head (the
      policy's weights stay bit for bit the same)."""
    if state.value_head is None:
        raise ValueError("critic_warmup needs a critic (algo='ppo')")
    model, tok, device = state.model, state.tokenizer, next(state.model.parameters()).device
    amp = amp_dtype(config)
    value_params = list(state.value_head.parameters())
    separate = isinstance(state.value_head, TrunkValueHead)
    ridge = config.detach_critic and not separate  # a fixed feature map: the exact refit
    trunk = [] if config.detach_critic or separate else state.optimizer.param_groups[0]["params"]
    evs, losses, feats, targets = [], [], [], []
    # the returns count what the loop's count: a scorer's rewards, or its verdicts as the turn signal (one scorer for
    # the warm-up, so a learned one fits across its batches; the loop builds its own)
    scorer = build_scorer(config, model, tok) if config.scorer is not None else None
    for step in range(config.critic_warmup_steps):
        task_rng, sample_seed = config.seeds.critic_warmup(step)
        task_seeds = task_rng.integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
        rollouts = training_rollouts(state, config, task_seeds, sample_seed, 0)
        if scorer is not None:
            score_turns(rollouts, config, model, tok, scorer)
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
        if ridge:  # the head's inputs in score_batch's order: minibatches of rows, row-major inside
            feats.append(torch.cat(inputs))
            targets.append(batch["returns"][m])
            losses.append(fit_value_head(state.value_head, torch.cat(feats), torch.cat(targets)))
            continue
        model.train()
        for epoch in range(config.epochs if config.value_epochs is None else config.value_epochs):
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
