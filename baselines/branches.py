"""Turn credit from real branches: fork K continuations from the env state and token prefix before chosen turns.

The suite snapshots and restores any env (``agentgym.contract.branching``), so the state before a turn of a training
rollout can be revisited exactly: restore a spare env to it, give the policy the same token prefix, and sample the rest
of the episode K times with the same policy (same temperature, stop strings and turn limit). Two estimators use the
forks (docs/rewards.md, 'Branch credit: vine and tree'):

- ``vine`` (VinePPO): ``V(s_t)`` = the mean return-to-go of the K forks from ``s_t``; a main rollout's turn gets
  ``A_t = r_t + gamma * V(s_{t+1}) - V(s_t)`` (``V`` after the last turn = 0). Only the main rollouts are trained.
- ``tree`` (TreeRPO / turn-level groups): the main rollout's action at ``s_t`` and the K forks' first actions form
  one group of K + 1 actions taken in one exact state; each gets its return-to-go minus the group's mean, and the
  forks' first turns are trained on too.

Turns without forks (``branch_turns="uncertain"``) fall back to the RLOO outcome advantage of their rollout (its
return minus the mean of the other rollouts of its group: reward units, like the branch advantages).

The trainer's branch mode (``TrainConfig.branch_k > 0``): the main rollouts record the env snapshot before every turn
(``run_episodes(snapshots=True)``), :func:`grow_branches` picks the turns (:func:`choose_turns`) and runs every
fork of the batch in lockstep waves, one per turn position (:func:`run_forks`; the HF loop prefills the K forks'
shared prefix once), and :func:`branch_advantages` gives the rows to train on and their token advantages
(:func:`branch_rows`: with the minibatch size that trains them). Fork
``k`` of the main rollout ``i`` at turn ``t`` samples with ``derive_seed(sample_seed, i, t, k)``, so a batch is
reproducible whatever the generation batching.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from agentgym.baselines.config import BRANCH_ESTIMATORS, TrainConfig
from agentgym.baselines.credit import turn_rewards
from agentgym.baselines.rollout import (
    HFPolicy,
    Rollout,
    RolloutConfig,
    advance_episodes,
    check_contexts,
    derive_seed,
)
from agentgym.contract.branching import restore
from agentgym.rewards.advantages import broadcast_to_tokens, rloo
from agentgym.running.pool import SerialPool

__all__ = ["BRANCH_TURNS", "BranchSet", "branch_advantages", "branch_rows", "choose_turns", "fork_start",
           "grow_branches", "returns_to_go", "run_forks", "tree_advantages", "turn_uncertainty",
           "vine_advantages"]  # fmt: skip

#: Which turns are forked: every turn, or the ``branch_frac`` most uncertain ones (:func:`turn_uncertainty`).
BRANCH_TURNS = ("all", "uncertain")


# ----------------------------------------------------------------------------------------------------------------
# pure formulas


def returns_to_go(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """``G_t = sum_{k >= t} gamma^(k - t) r_k`` for every turn ``t`` (float64)."""
    out = np.zeros(len(rewards), dtype=np.float64)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[t]) + gamma * acc
        out[t] = acc
    return out


def vine_advantages(
    turn_rewards: Sequence[Sequence[float]],
    values: Sequence[Sequence[float | None]],
    fallback: Sequence[float],
    gamma: float = 1.0,
) -> list[np.ndarray]:
    """VinePPO's turn advantages from Monte-Carlo state values.

    ``values[i][t]`` is ``V(s_t)`` of rollout ``i`` (the mean return-to-go of its forks; None: not forked); the
    value after the last turn is 0 (the episode ended there). Per turn:

    - ``r_t + gamma * V(s_{t+1}) - V(s_t)`` when both values are known;
    - ``G_t - V(s_t)`` (the rollout's own return-to-go against the forks' value) when only ``V(s_t)`` is;
    - ``fallback[i]`` (the rollout's outcome advantage) when ``s_t`` was not forked.

    >>> [a.tolist() for a in vine_advantages([[0.0, 1.0]], [[0.25, 0.5]], [0.0])]
    [[0.25, 0.5]]
    """
    if not len(turn_rewards) == len(values) == len(fallback):
        raise ValueError("turn_rewards, values and fallback differ in length")
    out = []
    for rew, val, fb in zip(turn_rewards, values, fallback, strict=True):
        if len(rew) != len(val):
            raise ValueError(f"{len(rew)} turn rewards but {len(val)} values")
        g = returns_to_go(rew, gamma)
        v = [*val, 0.0]
        adv = np.empty(len(rew), dtype=np.float64)
        for t in range(len(rew)):
            if v[t] is None:
                adv[t] = fb
            elif v[t + 1] is None:
                adv[t] = g[t] - float(v[t])  # type: ignore[arg-type]
            else:
                adv[t] = float(rew[t]) + gamma * float(v[t + 1]) - float(v[t])  # type: ignore[arg-type]
        out.append(adv)
    return out


def tree_advantages(groups: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Turn-level group advantages: in each group (the returns-to-go of the K + 1 actions taken in one state), each
    return minus the group's mean (``math.fsum``; no division by the group's std, see docs/rewards.md).

    >>> [a.tolist() for a in tree_advantages([[1.0, 0.0, 0.0, 1.0], [0.5]])]
    [[0.5, -0.5, -0.5, 0.5], [0.0]]
    """
    out = []
    for g in groups:
        x = np.asarray(g, dtype=np.float64)
        if x.size == 0:
            raise ValueError("a turn group is empty")
        out.append(x - math.fsum(x) / x.size)
    return out


def turn_uncertainty(rollout: Rollout) -> list[float]:
    """Per turn, the surprisal of its least likely sampled token (``max -log p`` over the action's tokens, at the
    sampling temperature): a turn where the policy took a token it gave little probability is an uncertain one."""
    return [max((-rollout.rollout_logprobs[j] for j in range(s, e)), default=0.0) for s, e in rollout.turn_spans]


def choose_turns(rollouts: Sequence[Rollout], mode: str = "all", frac: float = 1.0) -> list[tuple[int, int]]:
    """The ``(rollout index, turn)`` pairs to fork, sorted: every turn (``"all"``), or the ``ceil(frac x turns)``
    turns of the batch with the highest :func:`turn_uncertainty` (``"uncertain"``; ties: the earlier pair)."""
    turns = [(i, t) for i, r in enumerate(rollouts) for t in range(len(r.turn_spans))]
    if mode == "all":
        return turns
    if mode != "uncertain":
        raise ValueError(f"branch_turns must be one of {BRANCH_TURNS}, got {mode!r}")
    if not 0.0 < frac <= 1.0:
        raise ValueError(f"branch_frac must be in (0, 1], got {frac}")
    score = {(i, t): u for i, r in enumerate(rollouts) for t, u in enumerate(turn_uncertainty(r))}
    ranked = sorted(turns, key=lambda p: (-score[p], p))
    return sorted(ranked[: math.ceil(frac * len(turns))])


# ----------------------------------------------------------------------------------------------------------------
# forks


def fork_start(main: Rollout, turn: int) -> Rollout:
    """An empty rollout at the state before ``turn`` of ``main``: its prompt is the token prefix the model saw
    there, its reset info and first observation are those the turn answered (so anchors and delta signals read
    the same state)."""
    if not 0 <= turn < len(main.context_lengths):
        raise ValueError(f"turn {turn} is not a turn of the rollout ({len(main.context_lengths)} turns)")
    r = Rollout(prompt_ids=main.input_ids[: main.context_lengths[turn]], group_id=main.group_id, seed=main.seed,
                task_id=main.task_id)  # fmt: skip
    r.initial_observation = list(main.observations[turn - 1] if turn else main.initial_observation)
    r.reset_info = dict(main.infos[turn - 1] if turn else main.reset_info)
    return r


def run_forks(
    policy: HFPolicy,
    envs: Sequence[Any],
    mains: Sequence[Rollout],
    chosen: Sequence[tuple[int, int]],
    *,
    k: int,
    sample_seed: int,
    config: RolloutConfig,
    generation_batch: int | None = None,
    share_prefill: bool = False,
) -> tuple[list[Rollout], list[tuple[int, int, int]]]:
    """``k`` continuations from the state before each chosen turn on ``envs`` (at least ``k * len(chosen)`` spare
    envs built like the mains', restored from ``Rollout.snapshots``), in lockstep waves: the forks of every turn
    position ``t`` together. Fork ``j`` of ``(i, t)`` plays at most ``config.max_turns - t`` turns and samples with
    ``derive_seed(sample_seed, i, t, j)`` (its tokens do not depend on the batching). Returns the forks and their
    origins ``(i, t, j)``, in that order."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    origins = [(i, t, j) for i, t in chosen for j in range(k)]
    if not origins:
        return [], []
    if len(envs) < len(origins):
        raise ValueError(f"{len(origins)} forks need as many envs, got {len(envs)}")
    forks = []
    for (i, t, _), env in zip(origins, envs, strict=False):
        if len(mains[i].snapshots) <= t:
            raise ValueError(f"rollout {i} has no snapshot before turn {t}: run it with snapshots=True")
        restore(env, mains[i].snapshots[t])
        forks.append(fork_start(mains[i], t))
    generators = [torch.Generator().manual_seed(derive_seed(sample_seed, i, t, j)) for i, t, j in origins]
    contexts: list[list[list[int]]] = [[] for _ in forks]
    was_training = policy.model.training
    policy.model.eval()
    try:  # one lockstep wave per turn position: similar prefix lengths, little left-padding (2x faster on Chain H=8)
        for turn in sorted({t for _, t, _ in origins}):
            rows = [m for m, (_, t, _) in enumerate(origins) if t == turn]
            wave = advance_episodes(policy, SerialPool.of_envs([envs[m] for m in rows]), [forks[m] for m in rows],
                                    [generators[m] for m in rows], turn_limits=[config.max_turns - turn] * len(rows),
                                    config=config, generation_batch=generation_batch,
                                    share_prefill=share_prefill)  # fmt: skip
            for m, ctx in zip(rows, wave, strict=True):
                contexts[m] = ctx
    finally:
        policy.model.train(was_training)
    if config.check:
        for r, ctx in zip(forks, contexts, strict=True):
            check_contexts(r, ctx)
    return forks, origins


def first_turn(fork: Rollout) -> Rollout:
    """The fork cut after its first turn (what ``tree`` trains on: its later turns have no turn group)."""
    if not fork.turn_spans:
        raise ValueError("the fork played no turn")
    end = fork.turn_spans[0][1]
    return replace(fork, response_ids=fork.response_ids[:end], loss_mask=fork.loss_mask[:end],
                   rollout_logprobs=fork.rollout_logprobs[:end], turn_spans=fork.turn_spans[:1],
                   turn_rewards=fork.turn_rewards[:1], actions=fork.actions[:1], anchors=fork.anchors[:1],
                   reward_components=fork.reward_components[:1], context_lengths=fork.context_lengths[:1],
                   turn_metrics=fork.turn_metrics[:1], observations=fork.observations[:1], infos=fork.infos[:1],
                   scored_rewards=fork.scored_rewards[:1], snapshots=[])  # fmt: skip


@dataclass
class BranchSet:
    """One iteration's main rollouts, their forks and the forks' origins ``(main index, turn, fork index)``."""

    mains: list[Rollout]
    forks: list[Rollout]
    origins: list[tuple[int, int, int]]

    @property
    def chosen(self) -> list[tuple[int, int]]:
        """The forked ``(main index, turn)`` states, sorted."""
        return sorted({(i, t) for i, t, _ in self.origins})

    @property
    def sampled_tokens(self) -> int:
        """Tokens sampled by the forks (the mains' are counted apart)."""
        return sum(f.num_sampled for f in self.forks)

    def fork_returns(self, config: TrainConfig) -> dict[tuple[int, int], list[float]]:
        """Per forked state, each fork's return (the counted rewards of its turns, discounted by ``config.gamma``)."""
        out: dict[tuple[int, int], list[float]] = {}
        for f, (i, t, _) in zip(self.forks, self.origins, strict=True):
            rew = turn_rewards(f, config)
            out.setdefault((i, t), []).append(float(returns_to_go(rew, config.gamma)[0]) if rew else 0.0)
        return out

    def values(self, config: TrainConfig) -> list[list[float | None]]:
        """``V(s_t)`` per main rollout and turn: the mean fork return (None where the turn was not forked)."""
        rets = self.fork_returns(config)
        return [[math.fsum(rets[i, t]) / len(rets[i, t]) if (i, t) in rets else None
                 for t in range(len(r.turn_spans))] for i, r in enumerate(self.mains)]  # fmt: skip

    def metrics(self, config: TrainConfig) -> dict[str, float]:
        """What the trainer logs: forks, forked turns, their tokens, the mean branch value and the share of main
        turns without forks (their advantage is the outcome fallback)."""
        vals = [v for row in self.values(config) for v in row]
        known = [v for v in vals if v is not None]
        return {
            "branch_rollouts": len(self.forks),
            "branch_turns": len(self.chosen),
            "branch_sampled_tokens": self.sampled_tokens,
            "branch_value_mean": float(np.mean(known)) if known else 0.0,
            "branch_fallback_frac": 1.0 - len(known) / max(len(vals), 1),
        }


def outcome_fallback(mains: Sequence[Rollout], config: TrainConfig) -> np.ndarray:
    """The RLOO outcome advantage of each main rollout (the sum of its counted rewards minus the mean of the other
    rollouts of its group; 0 for a group of one)."""
    outcomes = [math.fsum(turn_rewards(r, config)) for r in mains]
    return rloo(outcomes, [r.group_id for r in mains])


def branch_advantages(branches: BranchSet, config: TrainConfig) -> tuple[list[Rollout], list[np.ndarray]]:
    """The rows to train on and their token advantages (response coordinates) for ``config.estimator_name``:
    ``vine`` (the mains) or ``tree`` (the mains, then each fork cut after its first turn)."""
    mains, name = branches.mains, config.estimator_name
    if name not in BRANCH_ESTIMATORS:
        raise ValueError(f"{name!r} is not a branch estimator ({', '.join(BRANCH_ESTIMATORS)})")
    fallback = outcome_fallback(mains, config)
    rewards = [turn_rewards(r, config) for r in mains]
    rows: list[Rollout] = list(mains)
    if name == "vine":
        per_turn = vine_advantages(rewards, branches.values(config), fallback.tolist(), config.gamma)
        fork_adv: list[float] = []
    else:
        rets = branches.fork_returns(config)
        keys = sorted(rets)
        groups = tree_advantages([[returns_to_go(rewards[i], config.gamma)[t], *rets[i, t]] for i, t in keys])
        per_turn = [np.full(len(rew), fb, dtype=np.float64) for rew, fb in zip(rewards, fallback, strict=True)]
        slot: dict[tuple[int, int], np.ndarray] = {}
        for (i, t), g in zip(keys, groups, strict=True):
            per_turn[i][t] = g[0]
            slot[i, t] = g[1:]
        seen: dict[tuple[int, int], int] = {}
        fork_adv = []
        for f, (i, t, _) in zip(branches.forks, branches.origins, strict=True):
            j = seen[i, t] = seen.get((i, t), -1) + 1
            if f.turn_spans:
                rows.append(first_turn(f))
                fork_adv.append(float(slot[i, t][j]))
    advs = [broadcast_to_tokens(a, r.turn_spans, len(r.response_ids), r.loss_mask)
            for a, r in zip(per_turn, mains, strict=True)]  # fmt: skip
    for a, r in zip(fork_adv, rows[len(mains) :], strict=True):
        advs.append(broadcast_to_tokens([a], r.turn_spans, len(r.response_ids), r.loss_mask))
    return rows, advs


def branch_rows(branches: BranchSet, config: TrainConfig) -> tuple[list[Rollout], list[np.ndarray], int]:
    """The trainer's rows and token advantages (:func:`branch_advantages`) and its minibatch size: ``tree`` trains on
    the forks' first turns too, in as many optimizer steps as the main rollouts alone would take."""
    rows, advs = branch_advantages(branches, config)
    return rows, advs, math.ceil(config.minibatch_size * len(rows) / len(branches.mains))


def grow_branches(
    policy: HFPolicy,
    envs: list[Any],
    make_env: Callable[[], Any],
    mains: list[Rollout],
    config: TrainConfig,
    sample_seed: int,
) -> BranchSet:
    """The trainer's branch step: choose the turns (``branch_turns``, ``branch_frac``), fork ``branch_k``
    continuations from each on the spare envs ``envs[len(mains):]`` (grown with ``make_env`` as needed, left open)
    and return them. The HF back-end prefills the forks' shared prefixes once (``share_prefill``)."""
    chosen = choose_turns(mains, config.branch_turns, config.branch_frac)
    n, need = len(mains), len(chosen) * config.branch_k
    while len(envs) < n + need:
        envs.append(make_env())
    forks, origins = run_forks(policy, envs[n : n + need], mains, chosen, k=config.branch_k, sample_seed=sample_seed,
                               config=config.rollout_config, generation_batch=config.generation_batch,
                               share_prefill=config.rollout_backend == "hf")  # fmt: skip
    return BranchSet(list(mains), forks, origins)
