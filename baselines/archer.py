"""ArCHer (hierarchical multi-turn RL): an off-policy turn-level critic over a replay buffer, and a token actor.

High level (turns): a replay buffer of turn transitions ``(h_t, a_t, r_t, h_{t+1}, done)`` (:class:`ReplayBuffer`,
bounded, first in first out) trains ``Q(h, a)`` and ``V(h)`` by off-policy TD against target copies ``Qbar``,
``Vbar`` (Polyak averaging with ``tau``, :func:`polyak`):

    Q(h_t, a_t) <- r_t + gamma * (1 - done_t) * Vbar(h_{t+1})
    V(h_t)      <- E_{a ~ pi} Qbar(h_t, a)   (one sample: the transition's own action a_t)

Low level (tokens): a policy gradient on this iteration's rollouts where every sampled token of turn ``t`` gets the
turn's advantage ``A_t = Q(h_t, a_t) - V(h_t)`` (the online heads), through the trainer's clipped surrogate
(``update.minibatch_loss``).

The heads (:class:`TurnCritic`) read hidden states: ``V(h)`` the one at the last token of the context ``h`` (what the
model had read when it began the turn), ``Q(h, a)`` the one at the action's last token. ``archer_trunk="shared"``:
the policy's own last hidden states, detached (the critic never moves the policy); ``"separate"``: a copy of the
policy's decoder that the TD loss trains (its target copy is Polyak-averaged with the heads).

``agentgym train`` runs it with ``algo="archer"`` (:func:`archer_train_iteration`, called by the trainer's
``train_iteration``); the buffer, the critic, its target copy and its optimizer live in ``MethodState.extra["archer"]``
(:class:`ArcherState`), saved beside each checkpoint, so a resumed run continues with them.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym.baselines.backends import amp_dtype
from agentgym.baselines.branches import returns_to_go
from agentgym.baselines.checkpoint import TrainState
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import make_tables, training_rollouts, turn_rewards, update_tables
from agentgym.baselines.rollout import Rollout, autocast, derive_seed
from agentgym.baselines.trainer_methods import MethodState
from agentgym.baselines.update import explained_variance, make_batch, minibatch_loss, score_batch, select
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

__all__ = ["METHODS", "ArcherState", "Features", "ReplayBuffer", "Transition", "TurnCritic", "actor_advantages",
           "archer_train_iteration", "polyak", "td_step", "token_advantages", "transitions"]  # fmt: skip

#: Seed tags (``derive_seed(config.seed, it, tag, ...)``) of the buffer's batches and of the heads' initialisation.
_SAMPLE_TAG, _INIT_TAG = 21, 22


@dataclass(frozen=True)
class Transition:
    """One turn: the context ``h_t`` the model read, its action ``a_t`` (sampled tokens), the turn's reward, the next
    context ``h_{t+1}`` (it starts with ``h_t + a_t``; empty when ``done``) and whether the episode ended there."""

    context: tuple[int, ...]
    action: tuple[int, ...]
    reward: float
    next_context: tuple[int, ...]
    done: bool


@dataclass
class ReplayBuffer:
    """A bounded FIFO buffer of transitions: past ``capacity`` the oldest leave first."""

    capacity: int
    items: list[Transition] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")

    def __len__(self) -> int:
        return len(self.items)

    def add(self, new: Sequence[Transition]) -> None:
        self.items.extend(new)
        del self.items[: max(0, len(self.items) - self.capacity)]

    def sample(self, n: int, generator: torch.Generator) -> list[Transition]:
        """``min(n, len)`` distinct transitions, uniformly at random from ``generator`` (without replacement)."""
        if not self.items:
            raise ValueError("the buffer is empty")
        order = torch.randperm(len(self.items), generator=generator)[: min(n, len(self.items))]
        return [self.items[i] for i in order.tolist()]


def transitions(rollout: Rollout, rewards: Sequence[float]) -> list[Transition]:
    """A rollout's turns as transitions, with per-turn ``rewards``. The last turn is ``done`` whether the episode
    terminated or was cut at ``max_turns`` (the run's horizon: nothing follows it, ``Vbar`` = 0 there)."""
    ids, p, n = rollout.input_ids, len(rollout.prompt_ids), len(rollout.turn_spans)
    if len(rewards) != n or len(rollout.context_lengths) < n:
        raise ValueError(f"{n} turns, {len(rewards)} rewards, {len(rollout.context_lengths)} contexts")
    out = []
    for t, (s, e) in enumerate(rollout.turn_spans):
        c = rollout.context_lengths[t]
        if c != p + s:
            raise ValueError(f"turn {t}: the context ends at {c}, the turn starts at {p + s}")
        done = t == n - 1
        nxt = () if done else tuple(ids[: rollout.context_lengths[t + 1]])
        out.append(Transition(tuple(ids[:c]), tuple(ids[p + s : p + e]), float(rewards[t]), nxt, done))
    return out


def _head(size: int, hidden: int, generator: torch.Generator) -> torch.nn.Module:
    """A linear head, zero-initialised (0 everywhere at the start), or with ``hidden`` > 0 an MLP ``size -> hidden ->
    1`` (tanh) whose first layer draws from ``generator`` and whose last is zero."""
    last = torch.nn.Linear(hidden or size, 1)
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    if hidden == 0:
        return last
    first = torch.nn.Linear(size, hidden)
    with torch.no_grad():
        first.weight.copy_(torch.randn(hidden, size, generator=generator) / math.sqrt(size))
        first.bias.zero_()
    return torch.nn.Sequential(first, torch.nn.Tanh(), last)


class TurnCritic(torch.nn.Module):
    """``Q(h, a)`` and ``V(h)`` heads on ``size``-wide features; ``trunk``: a decoder of the critic's own (None: the
    features come from elsewhere, e.g. the policy's detached hidden states)."""

    def __init__(self, size: int, hidden: int = 0, trunk: torch.nn.Module | None = None, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.q = _head(size, hidden, gen)
        self.v = _head(size, hidden, gen)
        self.trunk = trunk


@torch.no_grad()
def polyak(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """``theta_bar <- (1 - tau) * theta_bar + tau * theta`` for every parameter (``tau`` = 1: a copy)."""
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    for tp, p in zip(target.parameters(), online.parameters(), strict=True):
        tp.mul_(1.0 - tau).add_(p.detach(), alpha=tau)


@dataclass
class Features:
    """Per transition: the features ``V`` reads (``h``), those ``Q`` reads (``ha``) and those of the next context
    (``next``; zeros where the transition is done), each ``(B, size)``."""

    h: torch.Tensor
    ha: torch.Tensor
    next: torch.Tensor


#: ``featurize(critic, batch)``: the features of a batch of transitions for a critic (its own trunk, or another's).
Featurize = Callable[[TurnCritic, Sequence[Transition]], Features]


def td_step(
    online: TurnCritic,
    target: TurnCritic,
    optimizer: torch.optim.Optimizer,
    batch: Sequence[Transition],
    featurize: Featurize,
    *,
    gamma: float,
    tau: float,
    max_grad_norm: float = math.inf,
) -> dict[str, float]:
    """One TD step on ``batch``, then the Polyak update of ``target``: the loss is
    ``0.5 * mean (Q(h, a) - y_Q)^2 + 0.5 * mean (V(h) - y_V)^2`` with ``y_Q = r + gamma * (1 - done) * Vbar(h')`` and
    ``y_V = Qbar(h, a)`` (the transition's own action as the one sample of ``E_{a ~ pi}``). A critic without a
    trunk of its own reads the same features for ``target`` as for ``online``."""
    dev = next(online.parameters()).device
    f = featurize(online, batch)
    with torch.no_grad():
        ft = f if online.trunk is None else featurize(target, batch)
        r = torch.tensor([t.reward for t in batch], dtype=torch.float32, device=dev)
        live = torch.tensor([0.0 if t.done else 1.0 for t in batch], dtype=torch.float32, device=dev)
        y_q = r + gamma * live * target.v(ft.next.detach()).squeeze(-1)
        y_v = target.q(ft.ha.detach()).squeeze(-1)
    q, v = online.q(f.ha).squeeze(-1), online.v(f.h).squeeze(-1)
    q_loss, v_loss = 0.5 * ((q - y_q) ** 2).mean(), 0.5 * ((v - y_v) ** 2).mean()
    optimizer.zero_grad(set_to_none=True)
    (q_loss + v_loss).backward()
    norm = float(torch.nn.utils.clip_grad_norm_(list(online.parameters()), max_grad_norm))
    optimizer.step()
    polyak(target, online, tau)
    return {"q_loss": float(q_loss.detach()), "v_loss": float(v_loss.detach()), "critic_grad_norm": norm,
            "q_mean": float(q.detach().mean()), "v_mean": float(v.detach().mean())}  # fmt: skip


def _pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)


def hidden_states(decoder: Any, seqs: Sequence[Sequence[int]], pad_id: int, amp: torch.dtype | None = None
                  ) -> torch.Tensor:  # fmt: skip
    """The decoder's last hidden states ``(B, L, size)`` of right-padded ``seqs`` (float32)."""
    ids, mask = _pad(seqs, pad_id, next(decoder.parameters()).device)
    with autocast(decoder, amp):
        return decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state.float()


def model_featurize(model: Any, pad_id: int, amp: torch.dtype | None = None) -> Featurize:
    """Features from hidden states: the policy's decoder, detached, for a critic without a trunk; the critic's own
    trunk (with gradient) otherwise. One forward per transition over ``h'`` (which starts with ``h + a``), or over
    ``h + a`` when done."""

    def featurize(critic: TurnCritic, batch: Sequence[Transition]) -> Features:
        seqs = [t.context + t.action if t.done else t.next_context for t in batch]
        if critic.trunk is None:
            with torch.no_grad():
                hid = hidden_states(model.get_decoder(), seqs, pad_id, amp)
        else:
            hid = hidden_states(critic.trunk, seqs, pad_id, amp)
        rows = torch.arange(len(batch), device=hid.device)

        def at(pos: list[int]) -> torch.Tensor:
            return torch.tensor(pos, dtype=torch.long, device=hid.device)

        h = hid[rows, at([len(t.context) - 1 for t in batch])]
        ha = hid[rows, at([len(t.context) + len(t.action) - 1 for t in batch])]
        nxt = hid[rows, at([len(s) - 1 for s in seqs])]
        done = torch.tensor([t.done for t in batch], device=hid.device)
        return Features(h, ha, torch.where(done[:, None], torch.zeros_like(nxt), nxt))

    return featurize


@torch.no_grad()
def actor_advantages(critic: TurnCritic, model: Any, rollouts: Sequence[Rollout], pad_id: int,
                     amp: torch.dtype | None = None) -> list[list[tuple[float, float]]]:  # fmt: skip
    """Per rollout, per turn: ``(Q(h_t, a_t), V(h_t))`` from the online heads (one forward per rollout)."""
    decoder = critic.trunk if critic.trunk is not None else model.get_decoder()
    hid = hidden_states(decoder, [r.input_ids for r in rollouts], pad_id, amp)
    out = []
    for i, r in enumerate(rollouts):
        p = len(r.prompt_ids)
        h = torch.tensor([r.context_lengths[t] - 1 for t in range(len(r.turn_spans))], dtype=torch.long)
        ha = torch.tensor([p + e - 1 for _, e in r.turn_spans], dtype=torch.long)
        q = critic.q(hid[i, ha.to(hid.device)]).squeeze(-1).tolist() if len(ha) else []
        v = critic.v(hid[i, h.to(hid.device)]).squeeze(-1).tolist() if len(h) else []
        out.append(list(zip(q, v, strict=True)))
    return out


def token_advantages(rollouts: Sequence[Rollout], qv: Sequence[Sequence[tuple[float, float]]],
                     baseline: str = "none") -> list[np.ndarray]:  # fmt: skip
    """Response-coordinate advantages: every sampled token of turn ``t`` gets ``Q_t - V_t`` (0 elsewhere).
    ``baseline="mean"``: minus the mean of that over the batch's sampled tokens (a constant token-level baseline)."""
    out = []
    for r, turns in zip(rollouts, qv, strict=True):
        a = np.zeros(len(r.response_ids))
        for (s, e), (q, v) in zip(r.turn_spans, turns, strict=True):
            a[s:e] = q - v
        out.append(a)
    if baseline == "mean":
        on = [a[np.asarray(r.loss_mask, dtype=bool)] for a, r in zip(out, rollouts, strict=True)]
        b = float(np.concatenate(on).mean()) if any(len(x) for x in on) else 0.0
        out = [np.where(np.asarray(r.loss_mask, dtype=bool), a - b, 0.0) for a, r in zip(out, rollouts, strict=True)]
    elif baseline != "none":
        raise ValueError(f"token baseline must be 'none' or 'mean', got {baseline!r}")
    return out


@dataclass
class ArcherState:
    """What ArCHer keeps across iterations: the buffer, the online critic, its target copy and its optimizer."""

    buffer: ReplayBuffer
    critic: TurnCritic
    target: TurnCritic
    optimizer: torch.optim.Optimizer

    @classmethod
    def build(cls, model: Any, config: TrainConfig) -> ArcherState:
        """Fresh heads (zero at the start: every advantage 0), a trunk copied from the policy's decoder with
        ``archer_trunk="separate"``, the target an exact copy, and AdamW at ``archer_critic_lr``."""
        trunk = copy.deepcopy(model.get_decoder()) if config.archer_trunk == "separate" else None
        if trunk is not None:
            trunk.requires_grad_(True)
        critic = TurnCritic(model.config.hidden_size, config.archer_hidden, trunk, derive_seed(config.seed, _INIT_TAG))
        critic = critic.to(next(model.parameters()).device)
        target = copy.deepcopy(critic).requires_grad_(False)
        opt = torch.optim.AdamW(critic.parameters(), lr=config.archer_critic_lr, weight_decay=0.0)
        return cls(ReplayBuffer(config.archer_buffer), critic, target, opt)


def _actor_update(state: TrainState, config: TrainConfig, it: int, rollouts: Sequence[Rollout],
                  advs: Sequence[np.ndarray]) -> dict[str, float]:  # fmt: skip
    """``epochs`` x minibatches of the trainer's clipped surrogate with the given token advantages (a step whose
    gradient is exactly 0 is skipped where ``skip_zero_grad_steps``, as the trainer does)."""
    model, pad, device = state.model, state.tokenizer.pad_token_id, next(state.model.parameters()).device
    amp = amp_dtype(config)
    batch = make_batch(rollouts, pad, advantages=advs, mask_truncated=config.mask_truncated,
                       with_turns=config.ratio_level == "turn")  # fmt: skip
    model.eval()
    batch["old_logprobs"], _ = score_batch(model, batch, config.temperature, config.minibatch_size, amp=amp)
    if config.kl_coef > 0 and state.ref_model is not None:
        batch["ref_logprobs"], _ = score_batch(state.ref_model, batch, config.temperature, config.minibatch_size,
                                               amp=amp)  # fmt: skip
    model.train()
    params = state.optimizer.param_groups[0]["params"]
    logs: dict[str, list[float]] = {k: [] for k in ("loss", "pg_loss", "approx_kl", "clip_frac", "entropy")}
    norms, skipped = [], 0
    for epoch in range(config.epochs):
        order = torch.randperm(len(rollouts), generator=config.seeds.minibatches(it, epoch))
        for start in range(0, len(rollouts), config.minibatch_size):
            mb = {k: v.to(device) for k, v in select(batch, order[start : start + config.minibatch_size]).items()}
            out = minibatch_loss(model, None, mb, config)
            state.optimizer.zero_grad(set_to_none=True)
            out["loss"].backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)))
            if config.skip_zero_grad_steps and norms[-1] == 0.0:  # Q = V everywhere: nothing to step (as the trainer)
                skipped += 1
            else:
                state.optimizer.step()
            for k in logs:
                logs[k].append(float(out[k].detach()))
    model.eval()
    state.policy.mark_stale()
    return {**{k: float(np.mean(v)) for k, v in logs.items()}, "grad_norm": float(np.mean(norms)),
            "grad_norm_max": float(np.max(norms)), "skipped_steps": skipped}  # fmt: skip


def archer_train_iteration(state: TrainState, config: TrainConfig, it: int, methods: MethodState | None = None
                           ) -> dict[str, Any]:  # fmt: skip
    """ArCHer's iteration ``it`` (1-based) under ``agentgym train`` (``algo="archer"``): ``batch_tasks`` x
    ``group_size`` rollouts of the current policy; their turns join the buffer; ``archer_critic_steps`` TD steps on
    ``archer_batch`` transitions drawn from it (:func:`td_step`, each followed by the Polyak update with
    ``archer_tau``); then, past ``archer_warmup`` iterations, the actor's epochs on this iteration's rollouts with
    ``A_t = Q(h_t, a_t) - V(h_t)`` on every token of turn ``t``. ``methods``: carries :class:`ArcherState` in
    ``extra["archer"]`` (None: a fresh one, a run of this one iteration)."""
    methods = methods if methods is not None else MethodState(make_tables(config))
    t0 = time.perf_counter()
    model, pad, amp = state.model, state.tokenizer.pad_token_id, amp_dtype(config)
    arch = methods.extra.get("archer")
    if arch is None:
        arch = methods.extra["archer"] = ArcherState.build(model, config)
    task_seeds = config.seeds.tasks(it).integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
    rollouts = training_rollouts(state, config, task_seeds, config.seeds.sampling(it), (it - 1) * config.batch_tasks,
                                 methods.tables)  # fmt: skip
    t_rollout = time.perf_counter() - t0
    played = [r for r in rollouts if r.turn_spans]
    rewards = [turn_rewards(r, config) for r in played]
    held_out: dict[str, float] = {}
    if played and len(arch.buffer):  # the critic on turns it has not trained on: Q against the return-to-go
        qv = actor_advantages(arch.critic, model, played, pad, amp)
        qs = np.array([q for turns in qv for q, _ in turns])
        g = np.concatenate([returns_to_go(rw, config.gamma) for rw in rewards])
        held_out = {"archer_q_ev": explained_variance(qs, g), "archer_q_mae": float(np.abs(qs - g).mean())}
    arch.buffer.add([tr for r, rw in zip(played, rewards, strict=True) for tr in transitions(r, rw)])
    valid = [bool(i.get("action_valid", True)) for r in rollouts for i in r.infos] or [True]
    metrics: dict[str, Any] = {
        "iteration": it,
        "reward_mean": float(np.mean([r.outcome for r in rollouts])),
        "success_rate": float(np.mean([r.success for r in rollouts])),
        "turns_mean": float(np.mean([len(r.turn_spans) for r in rollouts])),
        "valid_action_frac": float(np.mean(valid)),
        "sampled_tokens": sum(r.num_sampled for r in rollouts),
        "archer_buffer": len(arch.buffer),
        "time_rollout": t_rollout,
    }
    metrics.update(update_tables(config, methods.tables, rollouts))  # the reward wrappers' tables learn the batch
    metrics.update(held_out)
    featurize = model_featurize(model, pad, amp)
    arch.critic.train()
    logs: dict[str, list[float]] = {}
    for step in range(config.archer_critic_steps if len(arch.buffer) else 0):
        gen = torch.Generator().manual_seed(derive_seed(config.seed, it, _SAMPLE_TAG, step))
        out = td_step(arch.critic, arch.target, arch.optimizer, arch.buffer.sample(config.archer_batch, gen), featurize,
                      gamma=config.gamma, tau=config.archer_tau, max_grad_norm=config.max_grad_norm)  # fmt: skip
        for k, v in out.items():
            logs.setdefault(k, []).append(v)
    arch.critic.eval()
    metrics.update({k: float(np.mean(v)) for k, v in logs.items()})
    if played and it > config.archer_warmup:
        qv = actor_advantages(arch.critic, model, played, pad, amp)
        advs = token_advantages(played, qv, config.archer_token_baseline)
        turn_a = [q - v for turns in qv for q, v in turns]
        metrics.update(archer_adv_mean=float(np.mean(turn_a)), archer_adv_std=float(np.std(turn_a)))
        metrics.update(_actor_update(state, config, it, played, advs))
    metrics["time_iteration"] = time.perf_counter() - t0
    return metrics


METHODS: tuple[Method, ...] = (
    Method("archer", "ArCHer", "trainer",
           "hierarchical off-policy turn-level critic (Q, V, target copies, replay buffer) with a token actor",
           needs=("learned_model",), paper=cite("ArCHer"), code="agentgym.baselines.archer:archer_train_iteration",
           choices=("the buffer: the last archer_buffer = 1024 turn transitions (FIFO), each iteration's turns "
                    "added after its rollouts; archer_critic_steps = 16 TD steps an iteration on archer_batch = 32 "
                    "distinct transitions drawn uniformly",
                    "V(h) <- Qbar(h, a) with a the transition's own (buffer) action as the one sample of "
                    "E_{a~pi}, not a fresh action of the current policy; one Q head (no double-Q minimum)",
                    "targets: copies of the heads (and of a separate trunk), Polyak tau = archer_tau = 0.1 after "
                    "every TD step; the last turn of an episode is done (terminated or cut at max_turns): "
                    "Vbar = 0 after it",
                    "the heads: linear (archer_hidden = 0; > 0 an MLP), zero-initialised, V on the hidden state at "
                    "the context's last token, Q at the action's last token; archer_trunk = 'shared' reads the "
                    "policy's hidden states detached (the critic never moves the policy), 'separate' a decoder "
                    "copy trained by the TD loss; AdamW at archer_critic_lr = 1e-3",
                    "the actor: this iteration's on-policy rollouts, A_t = Q(h_t, a_t) - V(h_t) of the online "
                    "heads on every token of turn t, the trainer's clipped surrogate (epochs x minibatches); no "
                    "token-level baseline (archer_token_baseline = 'none'; 'mean' subtracts the batch's token mean); "
                    "archer_warmup = 0 critic-only iterations first"),
           train={"algo": "archer", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2},
                  "stop": ["</answer>"], "archer_critic_steps": 4, "archer_batch": 8},
           knobs_into="config"),
)  # fmt: skip
