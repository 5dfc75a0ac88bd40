"""IPR (iterative step-level process refinement): forks along the expert path, Monte-Carlo step rewards, step DPO.

At each state ``s_t`` of an expert (demonstration) episode, restored from its snapshot, the policy takes its own
action. Each of the two actions gets a Monte-Carlo step reward: ``Q(s_t, a) = r + gamma * mean`` of the returns of
``k`` policy continuations from the state the action led to (``r`` alone when the episode ended there, or no turn is
left). Where the expert's ``Q`` beats the agent's by more than ``margin``, the step is a contrastive pair, the
expert's action preferred (:func:`expert_step_pairs`). :func:`ipr_loss` is step-level DPO on those pairs plus an SFT
term on the preferred actions.

``agentgym train`` runs it with ``algo="ipr"`` (:func:`ipr_train_iteration`, called by the trainer's
``train_iteration``): each iteration the reference becomes the policy the iteration starts from (IPR's iterative
scheme: round ``k`` is trained against round ``k - 1``'s agent), then :func:`ipr_iteration` on ``batch_tasks`` tasks.
The env needs a demonstration agent (an expert) and snapshots: Chain-v0, Household-v0 (``expert_plan``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from agentgym.baselines.branches import returns_to_go, run_forks
from agentgym.baselines.checkpoint import TrainState
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import EnvMaker
from agentgym.baselines.rollout import HFPolicy, Rollout, RolloutConfig, demonstration_episode, derive_seed
from agentgym.baselines.update import forward_tokens, make_batch
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

__all__ = ["METHODS", "ExpertForks", "StepPair", "action_logprobs", "expert_step_pairs", "ipr_iteration", "ipr_loss",
           "ipr_train_iteration", "step_dpo_loss"]  # fmt: skip

#: Seed tags of the agent's actions and of the continuations after the expert's and the agent's actions.
_AGENT, _AFTER_EXPERT, _AFTER_AGENT = 1, 2, 3


@dataclass
class StepPair:
    """One contrastive step: the expert's token prefix before turn ``turn``, the expert's action (preferred) and the
    agent's, with their Monte-Carlo step rewards."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    q_chosen: float
    q_rejected: float
    turn: int
    expert: int  # index of the expert episode


@dataclass
class ExpertForks:
    """What :func:`expert_step_pairs` sampled and estimated: the expert episodes, the agent's action at each of
    their states (a fork played to the end), ``Q`` of both actions per (expert, turn), and the pairs."""

    experts: list[Rollout]
    agent: list[Rollout]
    origins: list[tuple[int, int]]  # (expert, turn) of each agent fork
    q_expert: dict[tuple[int, int], float] = field(default_factory=dict)
    q_agent: dict[tuple[int, int], float] = field(default_factory=dict)
    pairs: list[StepPair] = field(default_factory=list)
    sampled_tokens: int = 0  # the policy's tokens: agent actions and every continuation


def _mean_returns(forks: Sequence[Rollout], origins: Sequence[tuple[int, int, int]], gamma: float,
                  reward: Callable[[Rollout], list[float]]) -> dict[tuple[int, int], float]:  # fmt: skip
    """Per forked (row, turn): the mean discounted return of its forks."""
    out: dict[tuple[int, int], list[float]] = {}
    for f, (i, t, _) in zip(forks, origins, strict=True):
        rew = reward(f)
        out.setdefault((i, t), []).append(float(returns_to_go(rew, gamma)[0]) if rew else 0.0)
    return {key: math.fsum(v) / len(v) for key, v in out.items()}


def expert_step_pairs(
    policy: HFPolicy,
    make_env: Callable[[], Any],
    task_seeds: Sequence[int],
    config: RolloutConfig,
    sample_seed: int,
    *,
    k: int = 4,
    margin: float = 0.0,
    gamma: float = 1.0,
    reward: Callable[[Rollout], list[float]] | None = None,
) -> ExpertForks:
    """IPR's data step on the tasks ``task_seeds``: each task's expert episode (the env's demonstration agent,
    :func:`~agentgym.baselines.rollout.demonstration_episode`, with snapshots); at every expert state the policy's own
    action (one fork); ``k`` continuations after each expert action and after each agent action; ``Q`` of both; a
    pair where ``Q_expert - Q_agent > margin`` (unstated in the paper: margin 0, any strict gap; knob) and the agent's
    action text differs from the expert's. ``reward``: a rollout's per-turn rewards (default: the env's). Envs are
    made with ``make_env`` and closed here."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    reward = reward or (lambda r: list(r.turn_rewards))
    envs: list[Any] = []

    def spare(n: int) -> list[Any]:
        while len(envs) < n:
            envs.append(make_env())
        return envs[:n]

    try:
        experts = []
        for seed in task_seeds:
            env = spare(1)[0]
            demo = demonstration_episode(policy, env, seed=int(seed), config=config, snapshots=True)
            if demo is None:
                raise ValueError("the env has no demonstration agent: IPR needs an expert")
            experts.append(demo)
        states = [(e, t) for e, r in enumerate(experts) for t in range(len(r.turn_spans))]
        # the agent's action at each expert state, played to the end (its later states are forked below)
        agent, agent_origins = run_forks(policy, spare(len(states)), experts, states, k=1,
                                         sample_seed=derive_seed(sample_seed, _AGENT), config=config,
                                         snapshots=True)  # fmt: skip
        # k continuations after the expert's action (the expert's next state) and after the agent's
        after_e = [(e, t + 1) for e, t in states if t + 1 < len(experts[e].turn_spans)]
        forks_e, orig_e = run_forks(policy, spare(len(after_e) * k), experts, after_e, k=k,
                                    sample_seed=derive_seed(sample_seed, _AFTER_EXPERT), config=config)  # fmt: skip
        after_a = [(a, 1) for a, f in enumerate(agent) if len(f.turn_spans) > 1]
        forks_a, orig_a = run_forks(policy, spare(len(after_a) * k), agent, after_a, k=k,
                                    sample_seed=derive_seed(sample_seed, _AFTER_AGENT), config=config,
                                    offsets=[t for _, t, _ in agent_origins])  # fmt: skip
    finally:
        for env in envs:
            env.close()
    out = ExpertForks(experts, agent, [(e, t) for e, t, _ in agent_origins])
    v_e, v_a = _mean_returns(forks_e, orig_e, gamma, reward), _mean_returns(forks_a, orig_a, gamma, reward)
    for a, (e, t) in enumerate(out.origins):
        r_e, r_a = reward(experts[e]), reward(agent[a])
        out.q_expert[e, t] = float(r_e[t]) + gamma * v_e.get((e, t + 1), 0.0)
        out.q_agent[e, t] = (float(r_a[0]) if r_a else 0.0) + gamma * v_a.get((a, 1), 0.0)
        if not agent[a].turn_spans or agent[a].actions[0] == experts[e].actions[t]:
            continue  # the same action: nothing to prefer
        if out.q_expert[e, t] - out.q_agent[e, t] > margin:
            s, end = experts[e].turn_spans[t]
            a_end = agent[a].turn_spans[0][1]
            out.pairs.append(StepPair(prompt_ids=experts[e].input_ids[: experts[e].context_lengths[t]],
                                      chosen_ids=experts[e].response_ids[s:end],
                                      rejected_ids=agent[a].response_ids[:a_end], q_chosen=out.q_expert[e, t],
                                      q_rejected=out.q_agent[e, t], turn=t, expert=e))  # fmt: skip
    out.sampled_tokens = sum(f.num_sampled for f in (*agent, *forks_e, *forks_a))
    return out


def step_dpo_loss(
    chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor, beta: float
) -> torch.Tensor:
    """Per pair, ``-log sigmoid(beta * ((pi_w - ref_w) - (pi_l - ref_l)))`` from the actions' summed log-probs."""
    return -F.logsigmoid(beta * ((chosen - ref_chosen) - (rejected - ref_rejected)))


def action_logprobs(model: Any, pairs: Sequence[StepPair], pad_id: int, temperature: float = 1.0) -> torch.Tensor:
    """``(2, n)``: the summed log-probs of each pair's chosen (row 0) and rejected (row 1) action given its prefix,
    at ``temperature`` (the policy's sampling distribution)."""
    rows = [Rollout(prompt_ids=p.prompt_ids, response_ids=list(ids), loss_mask=[1] * len(ids),
                    rollout_logprobs=[0.0] * len(ids))
            for p, ids in [*((p, p.chosen_ids) for p in pairs), *((p, p.rejected_ids) for p in pairs)]]  # fmt: skip
    batch = make_batch(rows, pad_id)
    device = next(model.parameters()).device
    lp, _, _ = forward_tokens(model, batch["input_ids"].to(device), batch["attention_mask"].to(device), temperature,
                              token_mask=batch["loss_mask"].to(device))  # fmt: skip
    return (lp * batch["loss_mask"].to(device)).sum(-1).view(2, len(pairs))


def ipr_loss(
    model: Any,
    ref_model: Any,
    pairs: Sequence[StepPair],
    pad_id: int,
    *,
    beta: float = 0.1,
    sft_coef: float = 1.0,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Step-level DPO over the pairs (mean) plus ``sft_coef`` x the token-mean negative log-likelihood of the
    preferred (expert) actions (unstated in the paper: SFT on the pairs' expert actions, weight 1; knobs ``beta``,
    ``sft_coef``). ``ref_model``: the frozen reference (no gradient)."""
    if not pairs:
        raise ValueError("no pairs")
    lp = action_logprobs(model, pairs, pad_id, temperature)
    with torch.no_grad():
        ref = action_logprobs(ref_model, pairs, pad_id, temperature)
    dpo = step_dpo_loss(lp[0], lp[1], ref[0], ref[1], beta).mean()
    tokens = sum(len(p.chosen_ids) for p in pairs)
    return dpo - sft_coef * lp[0].sum() / max(tokens, 1)


def ipr_iteration(
    policy: HFPolicy,
    ref_model: Any,
    optimizer: torch.optim.Optimizer,
    make_env: Callable[[], Any],
    task_seeds: Sequence[int],
    config: RolloutConfig,
    sample_seed: int,
    *,
    k: int = 4,
    margin: float = 0.0,
    beta: float = 0.1,
    sft_coef: float = 1.0,
    epochs: int = 1,
    max_grad_norm: float = 1.0,
    gamma: float = 1.0,
) -> dict[str, float]:
    """One IPR iteration on ``task_seeds``: the pairs (:func:`expert_step_pairs`), then ``epochs`` full-batch steps of
    :func:`ipr_loss` on ``policy.model`` against the frozen ``ref_model`` (gradient clipped to ``max_grad_norm``).
    Returns what a trainer would log: pairs, states, the mean Q gap of the pairs, sampled tokens, the losses and
    gradient norms, and how the agent's actions from the expert states fared (their episodes' mean return from that
    state on, success and valid-action share)."""
    data = expert_step_pairs(policy, make_env, task_seeds, config, sample_seed, k=k, margin=margin, gamma=gamma)
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    valid = [bool(i.get("action_valid", True)) for r in data.agent for i in r.infos] or [True]
    out = {"ipr_pairs": float(len(data.pairs)), "ipr_states": float(len(data.origins)),
           "ipr_q_gap": math.fsum(p.q_chosen - p.q_rejected for p in data.pairs) / max(len(data.pairs), 1),
           "ipr_sampled_tokens": float(data.sampled_tokens),
           "agent_return_mean": math.fsum(math.fsum(r.turn_rewards) for r in data.agent) / max(len(data.agent), 1),
           "agent_success_rate": math.fsum(float(r.success) for r in data.agent) / max(len(data.agent), 1),
           "agent_valid_action_frac": math.fsum(valid) / len(valid)}  # fmt: skip
    if not data.pairs:
        return out
    model = policy.model
    model.train()
    params = [q for group in optimizer.param_groups for q in group["params"]]
    for epoch in range(epochs):
        loss = ipr_loss(model, ref_model, data.pairs, pad, beta=beta, sft_coef=sft_coef, temperature=config.temperature)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))  # before clipping
        optimizer.step()
        out["ipr_loss_first" if epoch == 0 else "ipr_loss_last"] = float(loss.detach())
        out["grad_norm"] = max(out.get("grad_norm", 0.0), norm)
    model.eval()
    policy.mark_stale()
    return out


def ipr_train_iteration(state: TrainState, config: TrainConfig, it: int) -> dict[str, Any]:
    """IPR's iteration ``it`` (1-based) under ``agentgym train`` (``algo="ipr"``): the reference model becomes the
    current policy (the iterative scheme: this round's DPO is against the agent the round starts from; round 1: the
    starting, possibly SFT-warm-started, policy), then :func:`ipr_iteration` on ``batch_tasks`` task seeds of the
    iteration's task stream with the config's ``ipr_*`` knobs, ``epochs`` steps, ``gamma`` and ``max_grad_norm``.
    ``reward_mean`` / ``success_rate`` / ``valid_action_frac`` are those of the agent's actions from the expert
    states (the trainer's progress bar and collapse check read them)."""
    if state.ref_model is None:
        raise ValueError("algo 'ipr' needs the reference model (setup builds it)")
    t0 = time.perf_counter()
    state.ref_model.load_state_dict(state.model.state_dict())
    task_seeds = config.seeds.tasks(it).integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
    out = ipr_iteration(state.policy, state.ref_model, state.optimizer, EnvMaker.of(config), task_seeds,
                        config.rollout_config, config.seeds.sampling(it), k=config.ipr_k, margin=config.ipr_margin,
                        beta=config.ipr_beta, sft_coef=config.ipr_sft_coef, epochs=config.epochs,
                        max_grad_norm=config.max_grad_norm, gamma=config.gamma)  # fmt: skip
    metrics: dict[str, Any] = {"iteration": it, **out}
    metrics.update(reward_mean=out["agent_return_mean"], success_rate=out["agent_success_rate"],
                   valid_action_frac=out["agent_valid_action_frac"], sampled_tokens=int(out["ipr_sampled_tokens"]),
                   time_iteration=time.perf_counter() - t0)  # fmt: skip
    if "ipr_loss_first" in out:
        metrics["loss"] = out.get("ipr_loss_last", out["ipr_loss_first"])
    return metrics


METHODS: tuple[Method, ...] = (
    Method("ipr", "IPR", "branch", "forks along the expert path, step-level DPO on Monte-Carlo values",
           needs=("expert", "snapshots", "outcome"), paper=cite("IPR"),
           code="agentgym.baselines.ipr:ipr_train_iteration",
           choices=("Q(s_t, a) = r + gamma x the mean return of k policy continuations from the state a led to (r "
                    "alone at the episode's end), for the expert's and the agent's action alike (knobs ipr_k = 4, "
                    "gamma)",
                    "a pair where Q_expert - Q_agent > margin, margin 0 (knob ipr_margin); an agent action whose text "
                    "equals the expert's gives none",
                    "the loss: step DPO (beta 0.1) + sft_coef 1 x the token-mean NLL of the expert actions "
                    "(ipr_loss; knobs ipr_beta, ipr_sft_coef); the paper's trajectory-level DPO term is left out",
                    "iterations (algo='ipr'): the reference is refreshed to the policy each iteration starts from; "
                    "batch_tasks expert episodes an iteration, epochs full-batch steps on their pairs; under agentgym "
                    "train all knobs are TrainConfig fields (--set ipr_k=8)"),
           train={"algo": "ipr", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "stop": ["</answer>"],
                  "ipr_k": 2},
           knobs_into="config"),
)  # fmt: skip
