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

The papers' variants are knobs of the two (``TrainConfig``; docs/rewards.md, 'Branch credit'):

- BranPO: ``branch_turns="tail"`` (the last ``branch_tail`` turns), ``branch_difficulty`` (a task keeps
  ``ceil((1 - |2p - 1|) n)`` of its ``n`` chosen turns, ``p`` its group's success rate) and ``branch_mask_ties``
  (advantage 0 at a forked state whose K fork values all tie, and on those forks' first turns);
- TL-GRPO: ``tree_target`` (``"immediate"``: the action's own turn reward; ``"max_to_go"``: the best turn reward of
  the whole trajectory through it), ``tree_std`` (divide a turn group by its std) and ``tree_continue="best"`` (each
  episode is played again, going on from the best of K + 1 candidates at every turn, :func:`best_paths`);
- PORTool: ``branch_turns="prefix"`` (the first ``branch_prefix`` turns), ``tree_blend`` (``alpha A^fork +
  (1 - alpha) A^traj``) and ``step_bonus`` (``+ beta * 1[action_valid]`` on each group member's value);
- AT^2PO: ``branch_turns="entropy"`` (the ``branch_frac`` of turns with the highest mean full-distribution entropy,
  :func:`turn_entropy`) and ``branch_depth`` (forks of forks, :func:`grow_levels`; node value = mean of its
  children, A = V(child) - V(node), :func:`level_advantages`);
- T^2PO (turn level): ``branch_resample`` (a main rollout whose turn made no progress is played again from the
  snapshot before that turn, up to r times, :func:`resample_stalled`).

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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from agentgym.baselines.config import BRANCH_ESTIMATORS, BRANCH_TURNS, TREE_TARGETS, TrainConfig
from agentgym.baselines.credit import turn_rewards
from agentgym.baselines.rollout import (
    HFPolicy,
    Rollout,
    RolloutConfig,
    advance_episodes,
    check_contexts,
    derive_seed,
)
from agentgym.baselines.update import forward_tokens, make_batch, turn_ids, turn_mean_log_ratio
from agentgym.contract.branching import restore, snapshot
from agentgym.rewards.advantages import broadcast_to_tokens, rloo
from agentgym.rewards.advantages.base import DEFAULT_EPS
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.running.pool import Outcome, SerialPool

__all__ = ["BRANCH_TURNS", "METHODS", "TREE_TARGETS", "BranchSet", "best_paths", "branch_advantages", "branch_rows",
           "choose_turns", "fork_group_advantages", "fork_start", "grow_branches", "grow_levels", "level_advantages",
           "resample_stalled", "returns_to_go", "run_forks", "splice", "stalled_turn", "target_value",
           "tree_advantages", "turn_entropy", "turn_ids", "turn_mean_log_ratio", "turn_uncertainty",
           "vine_advantages"]  # fmt: skip

#: The seed tags of the resampled continuations (:func:`resample_stalled`) and of the deeper tree levels
#: (:func:`grow_levels`): their streams differ from the first level's forks'.
_RESAMPLE_TAG = 7_919
_LEVEL_TAG = 7_927
_BEST_TAG = 7_933


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


def tree_advantages(groups: Sequence[Sequence[float]], tree_std: bool = False) -> list[np.ndarray]:
    """Turn-level group advantages: in each group (the values of the K + 1 actions taken in one state), each value
    minus the group's mean (``math.fsum``); ``tree_std`` also divides by the group's population std + 1e-6, as GRPO
    does (off by default, see docs/rewards.md). A group whose values all tie gets exactly 0.

    >>> [a.tolist() for a in tree_advantages([[1.0, 0.0, 0.0, 1.0], [0.5]])]
    [[0.5, -0.5, -0.5, 0.5], [0.0]]
    >>> tree_advantages([[1.0, 0.0]], tree_std=True)[0].round(6).tolist()
    [0.999998, -0.999998]
    """
    out = []
    for g in groups:
        x = np.asarray(g, dtype=np.float64)
        if x.size == 0:
            raise ValueError("a turn group is empty")
        if (x == x[0]).all():
            out.append(np.zeros(x.size))
            continue
        a = x - math.fsum(x) / x.size
        out.append(a / (math.sqrt(math.fsum(a * a) / x.size) + DEFAULT_EPS) if tree_std else a)
    return out


def target_value(
    prefix: Sequence[float], rest: Sequence[float], *, tree_target: str = "return", gamma: float = 1.0
) -> float:
    """What ``tree`` scores an action by, from the rewards of the turns before its state (``prefix``) and of the
    action's turn and the turns after it (``rest``): ``"return"`` its discounted return-to-go; ``"immediate"``
    (TL-GRPO) its own turn's reward; ``"max_to_go"`` (TL-GRPO's trajectory score ``max_t r_t``) the best turn reward
    of the whole trajectory, prefix included, so an action is credited only when it raises the running best.
    An action that played no turn (``rest`` empty) has 0 to go.

    >>> [target_value([0.5], [0.0, 0.2], tree_target=k) for k in ("return", "immediate", "max_to_go")]
    [0.2, 0.0, 0.5]
    """
    if tree_target == "return":
        return float(returns_to_go(rest, gamma)[0]) if len(rest) else 0.0
    if tree_target == "immediate":  # undiscounted: the turn's own reward
        return float(rest[0]) if len(rest) else 0.0
    if tree_target == "max_to_go":  # undiscounted, as TL-GRPO's max_t r_t
        best = [*prefix, *rest]
        return float(max(best)) if best else 0.0
    raise ValueError(f"tree_target must be one of {TREE_TARGETS}, got {tree_target!r}")


def fork_group_advantages(
    values: Sequence[float],
    traj: Sequence[float],
    valid: Sequence[bool],
    *,
    tree_std: bool = False,
    tree_blend: float = 1.0,
    step_bonus: float = 0.0,
) -> np.ndarray:
    """One turn group's advantages (PORTool's blend): ``alpha * A^fork + (1 - alpha) * A^traj``, where ``A^fork`` is
    :func:`tree_advantages` of ``values[k] + beta * 1[valid[k]]`` (``alpha = tree_blend``, ``beta = step_bonus``)
    and ``traj[k]`` is the member's trajectory-relative advantage (its rollout's RLOO outcome advantage).
    ``alpha = 1`` is ``tree``; ``alpha = 0`` the RLOO advantages alone.

    >>> fork_group_advantages([1.0, 0.0], [0.5, -0.5], [True, False], tree_blend=0.5, step_bonus=1.0).tolist()
    [0.75, -0.75]
    """
    if not len(values) == len(traj) == len(valid):
        raise ValueError("values, traj and valid differ in length")
    scored = [v + step_bonus * bool(ok) for v, ok in zip(values, valid, strict=True)]
    fork = tree_advantages([scored], tree_std=tree_std)[0]
    if tree_blend == 1.0:
        return fork
    return tree_blend * fork + (1.0 - tree_blend) * np.asarray(traj, dtype=np.float64)


def turn_uncertainty(rollout: Rollout) -> list[float]:
    """Per turn, the surprisal of its least likely sampled token (``max -log p`` over the action's tokens, at the
    sampling temperature): a turn where the policy took a token it gave little probability is an uncertain one."""
    return [max((-rollout.rollout_logprobs[j] for j in range(s, e)), default=0.0) for s, e in rollout.turn_spans]


def turn_entropy(policy: HFPolicy, rollouts: Sequence[Rollout], temperature: float) -> list[list[float]]:
    """Per rollout and turn, the mean entropy of the policy's full next-token distribution over the turn's sampled
    tokens, at the sampling temperature (AT^2PO's expansion score). Computed by one scoring pass right after the
    rollouts, with the weights that sampled them (the rollout loop keeps only the sampled tokens' log-probs)."""
    out: list[list[float]] = []
    if not rollouts:
        return out
    device = next(policy.model.parameters()).device
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    was_training = policy.model.training
    policy.model.eval()
    try:
        with torch.no_grad():
            for lo in range(0, len(rollouts), 8):  # 8 rows per forward
                part = rollouts[lo : lo + 8]
                b = make_batch(part, int(pad))
                _, ent, _ = forward_tokens(policy.model, b["input_ids"].to(device), b["attention_mask"].to(device),
                                           temperature, token_mask=b["loss_mask"].to(device),
                                           amp=policy.amp_dtype)  # fmt: skip
                ent = ent.double().cpu()
                for row, r in enumerate(part):
                    p = len(r.prompt_ids)
                    out.append([float(ent[row, p + s : p + e].mean()) if e > s else 0.0 for s, e in r.turn_spans])
    finally:
        policy.model.train(was_training)
    return out


def _difficulty_keep(
    rollouts: Sequence[Rollout], chosen: list[tuple[int, int]], priority: dict[tuple[int, int], float]
) -> list[tuple[int, int]]:
    """BranPO's difficulty-aware frequency: a task whose group succeeded ``s`` times in ``G`` keeps the
    ``ceil(n (1 - |2 s / G - 1|))`` highest-priority of its ``n`` chosen turns (integer arithmetic: no rounding up of
    float noise): all of them at ``p = 1/2``, none when every rollout of the group succeeded or every one failed."""
    size: dict[Any, int] = {}
    wins: dict[Any, int] = {}
    for r in rollouts:
        size[r.group_id] = size.get(r.group_id, 0) + 1
        wins[r.group_id] = wins.get(r.group_id, 0) + bool(r.success)
    by_group: dict[Any, list[tuple[int, int]]] = {}
    for pair in chosen:
        by_group.setdefault(rollouts[pair[0]].group_id, []).append(pair)
    kept = []
    for g, pairs in by_group.items():
        n, big = len(pairs), size[g]
        keep = -(-n * (big - abs(2 * wins[g] - big)) // big)  # ceil(n (1 - |2p - 1|))
        kept += sorted(pairs, key=lambda q: (-priority[q], q))[:keep]
    return kept


def choose_turns(
    rollouts: Sequence[Rollout],
    branch_turns: str = "all",
    branch_frac: float = 1.0,
    *,
    branch_tail: int = 1,
    branch_prefix: int = 1,
    branch_difficulty: bool = False,
    entropy: Sequence[Sequence[float]] | None,
) -> list[tuple[int, int]]:
    """The ``(rollout index, turn)`` pairs to fork, sorted:

    - ``"all"``: every turn;
    - ``"uncertain"``: the ``ceil(branch_frac x turns)`` turns of the batch with the highest
      :func:`turn_uncertainty` (ties: the earlier pair);
    - ``"tail"`` (BranPO): turns ``t >= T_i - branch_tail`` of each rollout (its last ``branch_tail``);
    - ``"prefix"`` (PORTool): turns ``t < branch_prefix`` (its first ``branch_prefix``);
    - ``"entropy"`` (AT^2PO): the ``ceil(branch_frac x turns)`` turns with the highest mean entropy (``entropy``,
      per rollout and turn: :func:`turn_entropy`).

    ``entropy`` is an input (None unless the mode is ``"entropy"``). ``branch_difficulty`` (BranPO) then thins each
    task's chosen turns by its group's success rate (``_difficulty_keep``), keeping those the mode ranks first (the
    latest for tail, the earliest for prefix)."""
    if branch_turns not in BRANCH_TURNS:
        raise ValueError(f"branch_turns must be one of {BRANCH_TURNS}, got {branch_turns!r}")
    if branch_turns in ("uncertain", "entropy") and not 0.0 < branch_frac <= 1.0:
        raise ValueError(f"branch_frac must be in (0, 1], got {branch_frac}")
    if min(branch_tail, branch_prefix) < 1:
        raise ValueError(f"branch_tail and branch_prefix must be >= 1, got {branch_tail} and {branch_prefix}")
    turns = [(i, t) for i, r in enumerate(rollouts) for t in range(len(r.turn_spans))]
    if branch_turns == "entropy":
        if entropy is None or [len(e) for e in entropy] != [len(r.turn_spans) for r in rollouts]:
            raise ValueError("branch_turns='entropy' needs one entropy per turn of every rollout (turn_entropy)")
        priority = {(i, t): float(entropy[i][t]) for i, t in turns}
    elif branch_turns == "uncertain":
        priority = {(i, t): u for i, r in enumerate(rollouts) for t, u in enumerate(turn_uncertainty(r))}
    elif branch_turns == "tail":
        priority = {(i, t): float(t - len(rollouts[i].turn_spans)) for i, t in turns}  # the later, the first
    elif branch_turns == "prefix":
        priority = {(i, t): float(-t) for i, t in turns}
    else:
        priority = dict.fromkeys(turns, 0.0)
    if branch_turns in ("uncertain", "entropy"):
        chosen = sorted(turns, key=lambda p: (-priority[p], p))[: math.ceil(branch_frac * len(turns))]
    elif branch_turns == "tail":
        chosen = [(i, t) for i, t in turns if t >= len(rollouts[i].turn_spans) - branch_tail]
    elif branch_turns == "prefix":
        chosen = [(i, t) for i, t in turns if t < branch_prefix]
    else:
        chosen = turns
    if branch_difficulty:
        chosen = _difficulty_keep(rollouts, chosen, priority)
    return sorted(chosen)


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
    snapshots: bool = False,
    offsets: Sequence[int] | None = None,
) -> tuple[list[Rollout], list[tuple[int, int, int]]]:
    """``k`` continuations from the state before each chosen turn on ``envs`` (at least ``k * len(chosen)`` spare
    envs built like the mains', restored from ``Rollout.snapshots``), in lockstep waves: the forks of every turn
    position ``t`` together. Fork ``j`` of ``(i, t)`` plays at most ``config.max_turns - t`` turns and samples with
    ``derive_seed(sample_seed, i, t, j)`` (its tokens do not depend on the batching). Returns the forks and their
    origins ``(i, t, j)``, in that order. ``snapshots``: the forks record the env before each of their turns too.
    ``offsets[i]``: the episode turn at which rollout ``i``'s turn 0 was played (a fork's; 0 for a main rollout): its
    turn ``t`` is episode turn ``offsets[i] + t``, which sets the turn limit and the wave."""
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
    at = [t + (offsets[i] if offsets is not None else 0) for i, t, _ in origins]  # episode turns
    contexts: list[list[list[int]]] = [[] for _ in forks]
    was_training = policy.model.training
    policy.model.eval()
    try:  # one lockstep wave per turn position: similar prefix lengths, little left-padding (2x faster on Chain H=8)
        for turn in sorted(set(at)):
            rows = [m for m, t in enumerate(at) if t == turn]
            wave = advance_episodes(policy, SerialPool.of_envs([envs[m] for m in rows]), [forks[m] for m in rows],
                                    [generators[m] for m in rows], turn_limits=[config.max_turns - turn] * len(rows),
                                    config=config, generation_batch=generation_batch,
                                    share_prefill=share_prefill, snapshots=snapshots)  # fmt: skip
            for m, ctx in zip(rows, wave, strict=True):
                contexts[m] = ctx
    finally:
        policy.model.train(was_training)
    if config.check:
        for r, ctx in zip(forks, contexts, strict=True):
            check_contexts(r, ctx)
    return forks, origins


def first_turn(fork: Rollout, turns: int = 1) -> Rollout:
    """The fork cut after its first ``turns`` turns (what ``tree`` trains on: its later turns have no turn group)."""
    if len(fork.turn_spans) < turns or turns < 1:
        raise ValueError(f"the fork played {len(fork.turn_spans)} turns, not {turns}")
    end, n = fork.turn_spans[turns - 1][1], turns
    return replace(fork, response_ids=fork.response_ids[:end], loss_mask=fork.loss_mask[:end],
                   rollout_logprobs=fork.rollout_logprobs[:end], turn_spans=fork.turn_spans[:n],
                   action_spans=fork.action_spans[:n], turn_rewards=fork.turn_rewards[:n], actions=fork.actions[:n],
                   anchors=fork.anchors[:n],
                   reward_components=fork.reward_components[:n], context_lengths=fork.context_lengths[:n],
                   turn_metrics=fork.turn_metrics[:n], observations=fork.observations[:n], infos=fork.infos[:n],
                   scored_rewards=fork.scored_rewards[:n], snapshots=[])  # fmt: skip


def splice(main: Rollout, turn: int, cont: Rollout) -> Rollout:
    """``main`` up to the state before ``turn``, then ``cont`` (a :func:`fork_start` rollout from there, played):
    one episode, in ``main``'s token coordinates (``cont``'s context lengths already are)."""
    cut = main.context_lengths[turn] - len(main.prompt_ids)  # response tokens before the turn
    if cont.prompt_ids != main.input_ids[: main.context_lengths[turn]]:
        raise ValueError("the continuation does not start at the state before the turn")
    return replace(main, response_ids=main.response_ids[:cut] + cont.response_ids,
                   loss_mask=main.loss_mask[:cut] + cont.loss_mask,
                   rollout_logprobs=main.rollout_logprobs[:cut] + cont.rollout_logprobs,
                   turn_spans=main.turn_spans[:turn] + [(s + cut, e + cut) for s, e in cont.turn_spans],
                   action_spans=main.action_spans[:turn] + [(a + cut, b + cut) for a, b in cont.action_spans],
                   turn_rewards=main.turn_rewards[:turn] + cont.turn_rewards,
                   actions=main.actions[:turn] + cont.actions, anchors=main.anchors[:turn] + cont.anchors,
                   reward_components=main.reward_components[:turn] + cont.reward_components,
                   context_lengths=main.context_lengths[:turn] + cont.context_lengths,
                   turn_metrics=main.turn_metrics[:turn] + cont.turn_metrics,
                   observations=main.observations[:turn] + cont.observations, infos=main.infos[:turn] + cont.infos,
                   scored_rewards=[], snapshots=main.snapshots[:turn] + cont.snapshots, terminated=cont.terminated,
                   truncated=cont.truncated, success=cont.success, error=cont.error)  # fmt: skip


def stalled_turn(rollout: Rollout, start: int = 0) -> int | None:
    """The first turn ``>= start`` that made no progress (T^2PO's resampling trigger): the env's anchor after it
    equals the anchor before it or, where the env gives no anchors, its observation repeats one the episode had
    already seen. A turn that ended the episode (terminated, or a failed step) is never stalled. None: none is."""
    seen = [rollout.initial_observation]
    for t in range(len(rollout.turn_spans)):
        obs, info = rollout.observations[t], rollout.infos[t]
        before, after = rollout.anchors[t], info.get("anchor")
        last = t == len(rollout.turn_spans) - 1
        ended = last and (rollout.terminated or rollout.error is not None)
        same = after == before if before is not None and after is not None else obs in seen
        if t >= start and same and not ended:
            return t
        seen.append(obs)
    return None


def resample_stalled(
    policy: HFPolicy,
    envs: Sequence[Any],
    mains: Sequence[Rollout],
    config: RolloutConfig,
    sample_seed: int,
    *,
    branch_resample: int = 1,
    generation_batch: int | None,
) -> tuple[list[Rollout], int, int]:
    """T^2PO's turn-level resampling: up to ``branch_resample`` rounds, each main rollout with a :func:`stalled_turn`
    (from its last resampled turn on) is played again from the snapshot before that turn (one continuation, seed
    ``derive_seed(derive_seed(sample_seed, _RESAMPLE_TAG, round), i, t, 0)``), and the episode is the prefix plus the
    new continuation (:func:`splice`). The discarded turns were sampled too: the caller has counted them with the
    mains. ``envs``: spare envs, at least one per main. Returns the mains, the continuations' sampled tokens and
    the number of resamples."""
    out, start, tokens, count = list(mains), [0] * len(mains), 0, 0
    for round_ in range(branch_resample):
        todo = [(i, t) for i, r in enumerate(out) if (t := stalled_turn(r, start[i])) is not None]
        if not todo:
            break
        conts, _ = run_forks(policy, envs, out, todo, k=1, sample_seed=derive_seed(sample_seed, _RESAMPLE_TAG, round_),
                             config=config, generation_batch=generation_batch, snapshots=True)  # fmt: skip
        for (i, t), c in zip(todo, conts, strict=True):
            out[i], start[i] = splice(out[i], t, c), t
            tokens += c.num_sampled
            count += 1
    return out, tokens, count


def best_paths(
    policy: HFPolicy,
    envs: Sequence[Any],
    mains: Sequence[Rollout],
    config: RolloutConfig,
    sample_seed: int,
    *,
    k: int,
    score: Callable[[Rollout], float],
    generation_batch: int | None = None,
) -> tuple[list[Rollout], list[Rollout], list[tuple[int, int, int]], int]:
    """TL-GRPO's search: each episode is played again from its main rollout's reset state (``snapshots[0]``); at
    every turn ``t``, ``k + 1`` candidate actions are sampled from the state (seeds ``derive_seed(sample_seed,
    _BEST_TAG, i, t, j)``, one shared prefill), each steps its own copy of the env, ``score`` rates each candidate's
    one-turn rollout (its immediate reward), and the episode goes on from the best (ties: the first drawn); the others
    are that turn's forks. A path ends when its chosen action ends the episode, at ``max_turns`` or when its context
    is full. ``envs``: at least ``k + 1`` per main. Returns the paths (main coordinates), the forks (one-turn
    rollouts), their origins ``(path, turn, j)`` and the paths' sampled tokens."""
    if len(envs) < (k + 1) * len(mains):
        raise ValueError(f"{len(mains)} paths of {k + 1} candidates need {(k + 1) * len(mains)} envs, got {len(envs)}")
    paths = [fork_start(m, 0) for m in mains]
    for path, m in zip(paths, mains, strict=True):
        if not m.snapshots:
            raise ValueError("best_paths starts from the mains' first snapshots: run them with snapshots=True")
        path.snapshots = [m.snapshots[0]]
    forks: list[Rollout] = []
    origins: list[tuple[int, int, int]] = []
    live = list(range(len(mains)))
    was_training = policy.model.training
    policy.model.eval()
    try:
        for t in range(config.max_turns):
            live = [i for i in live if config.max_total_tokens - len(paths[i].input_ids) > 0]
            if not live:
                break
            rows = [(i, j) for i in live for j in range(k + 1)]
            cands = []
            for (i, _), env in zip(rows, envs, strict=False):
                restore(env, paths[i].snapshots[t])
                c = Rollout(prompt_ids=paths[i].input_ids, group_id=paths[i].group_id, seed=paths[i].seed,
                            task_id=paths[i].task_id)  # fmt: skip
                c.initial_observation = list(paths[i].observations[-1] if t else paths[i].initial_observation)
                c.reset_info = dict(paths[i].infos[-1] if t else paths[i].reset_info)
                cands.append(c)
            samples = []
            chunk = generation_batch or len(rows)
            for lo in range(0, len(rows), chunk):
                part = rows[lo : lo + chunk]
                samples += policy.sample_batch(
                    [paths[i].input_ids for i, _ in part],
                    budgets=[min(config.max_new_tokens, config.max_total_tokens - len(paths[i].input_ids))
                             for i, _ in part],
                    temperature=config.temperature, stop=config.stop,
                    generators=[torch.Generator().manual_seed(derive_seed(sample_seed, _BEST_TAG, i, t, j))
                                for i, j in part],
                    share_prefill=True)  # fmt: skip
            for c, env, (tokens, lps, _) in zip(cands, envs, samples, strict=False):
                c.context_lengths.append(len(c.input_ids))
                c.record_turn(env, tokens, lps, policy.decode(tokens))
            going = []
            for i in live:
                group = [(m, c) for m, ((r, _), c) in enumerate(zip(rows, cands, strict=True)) if r == i]
                scores = [score(c) for _, c in group]
                b = scores.index(max(scores))
                for j, (_, c) in enumerate(group):
                    if j != b:
                        forks.append(c)
                        origins.append((i, t, j))
                row, best = group[b]
                path, (tokens, lps, finish) = paths[i], samples[row]
                path.context_lengths.append(len(path.input_ids))
                out = Outcome(0, "step", best.observations[0], best.turn_rewards[0], best.terminated, best.truncated,
                              best.infos[0], best.error)  # fmt: skip
                obs, terminated, truncated = path.record_outcome(tokens, lps, best.actions[0], out)
                if terminated or truncated:
                    continue
                if t + 1 >= config.max_turns:
                    path.truncated = True  # the turn limit
                    continue
                path.snapshots.append(snapshot(envs[row]))  # the state after the chosen action: the next turn's
                path.append_observation(policy.observation_ids(obs, last_token=tokens[-1] if finish == "eos" else None))
                going.append(i)
            live = going
    finally:
        policy.model.train(was_training)
    return paths, forks, origins, sum(p.num_sampled for p in paths)


@dataclass
class BranchSet:
    """One iteration's main rollouts, their forks and the forks' origins ``(main index, turn, fork index)``."""

    mains: list[Rollout]
    forks: list[Rollout]
    origins: list[tuple[int, int, int]]
    resampled_tokens: int = 0  # tokens of T^2PO's resampled continuations (resample_stalled)
    resamples: int = 0
    # AT^2PO's deeper levels (grow_levels): forks of forks, their origins (row of ``rows``, turn, fork index) and the
    # level of every expanded node (row, turn) past the first
    sub_forks: list[Rollout] = field(default_factory=list)
    sub_origins: list[tuple[int, int, int]] = field(default_factory=list)
    levels: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def rows(self) -> list[Rollout]:
        """The mains, the first level's forks, then the deeper levels' (the row indexes of ``sub_origins``)."""
        return [*self.mains, *self.forks, *self.sub_forks]

    @property
    def chosen(self) -> list[tuple[int, int]]:
        """The forked ``(main index, turn)`` states, sorted."""
        return sorted({(i, t) for i, t, _ in self.origins})

    @property
    def sampled_tokens(self) -> int:
        """Tokens sampled by the forks and the resampled continuations (the first mains' are counted apart)."""
        return (
            sum(f.num_sampled for f in self.forks) + sum(f.num_sampled for f in self.sub_forks) + self.resampled_tokens
        )

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
        out = {
            "branch_rollouts": len(self.forks) + len(self.sub_forks),
            "branch_turns": len(self.chosen),
            "branch_sampled_tokens": self.sampled_tokens,
            "branch_value_mean": float(np.mean(known)) if known else 0.0,
            "branch_fallback_frac": 1.0 - len(known) / max(len(vals), 1),
        }
        if config.branch_mask_ties:
            out["branch_masked_frac"] = len(tied_states(self, config)) / max(len(self.chosen), 1)
        if config.branch_resample:
            out["branch_resamples"] = self.resamples
        if config.tree_continue == "best":  # TL-GRPO's trajectory score max_t r_t of the searched episodes
            out["branch_path_score"] = float(np.mean([max(turn_rewards(r, config), default=0.0) for r in self.mains]))
        return out


def outcome_fallback(mains: Sequence[Rollout], config: TrainConfig) -> np.ndarray:
    """The RLOO outcome advantage of each main rollout (the sum of its counted rewards minus the mean of the other
    rollouts of its group; 0 for a group of one)."""
    outcomes = [math.fsum(turn_rewards(r, config)) for r in mains]
    return rloo(outcomes, [r.group_id for r in mains])


def _valid(r: Rollout, turn: int) -> bool:
    """Whether the env called the turn's action valid (``info["action_valid"]``; True when it says nothing)."""
    return bool(r.infos[turn].get("action_valid", True)) if turn < len(r.infos) else True


def tree_values(branches: BranchSet, config: TrainConfig) -> dict[tuple[int, int], tuple[list[float], list[bool]]]:
    """Per forked state, the :func:`target_value` (``config.tree_target``) of the main's action and of each fork's
    first action, in fork order, and whether each action was valid (``info["action_valid"]``, default True; a fork
    that played no turn: False)."""
    rewards = [turn_rewards(r, config) for r in branches.mains]
    out: dict[tuple[int, int], tuple[list[float], list[bool]]] = {}
    for i, t in branches.chosen:
        main = branches.mains[i]
        val = target_value(rewards[i][:t], rewards[i][t:], tree_target=config.tree_target, gamma=config.gamma)
        out[i, t] = ([val], [_valid(main, t)])
    for f, (i, t, _) in zip(branches.forks, branches.origins, strict=True):
        rew = turn_rewards(f, config)
        vals, valid = out[i, t]
        vals.append(target_value(rewards[i][:t], rew, tree_target=config.tree_target, gamma=config.gamma))
        valid.append(bool(f.turn_spans) and _valid(f, 0))
    return out


def tied_states(branches: BranchSet, config: TrainConfig) -> set[tuple[int, int]]:
    """BranPO's redundant steps: the forked states whose K >= 2 forks all scored the same (the fork returns for
    ``vine``; the forks' values with the step bonus for ``tree``). Whatever the action there, the continuations
    ended alike, so the step carries no credit (the spec's other reading, repeated identical actions, is not
    built)."""
    if config.estimator_name == "vine":
        scores = {key: list(v) for key, v in branches.fork_returns(config).items()}
    else:
        scores = {key: [v + config.step_bonus * ok for v, ok in zip(*vv, strict=True)][1:]
                  for key, vv in tree_values(branches, config).items()}  # fmt: skip
    return {key for key, v in scores.items() if len(v) >= 2 and all(x == v[0] for x in v)}


def branch_advantages(branches: BranchSet, config: TrainConfig) -> tuple[list[Rollout], list[np.ndarray]]:
    """The rows to train on and their token advantages (response coordinates) for ``config.estimator_name``:
    ``vine`` (the mains) or ``tree`` (the mains, then each fork cut after its first turn), with the knobs of the
    module docstring (``tree_target``, ``tree_std``, ``tree_blend``, ``step_bonus``, ``branch_mask_ties``)."""
    mains, name = branches.mains, config.estimator_name
    if name not in BRANCH_ESTIMATORS:
        raise ValueError(f"{name!r} is not a branch estimator ({', '.join(BRANCH_ESTIMATORS)})")
    if branches.sub_forks:  # a multi-level tree (AT^2PO, branch_depth > 1)
        return _level_rows(branches, config)
    fallback = outcome_fallback(mains, config)
    rewards = [turn_rewards(r, config) for r in mains]
    masked = tied_states(branches, config) if config.branch_mask_ties else set()
    rows: list[Rollout] = list(mains)
    fork_adv: list[float] = []
    if name == "vine":
        per_turn = vine_advantages(rewards, branches.values(config), fallback.tolist(), config.gamma)
    else:
        per_turn = [np.full(len(rew), fb, dtype=np.float64) for rew, fb in zip(rewards, fallback, strict=True)]
        # A^traj of a fork (PORTool's blend): its whole episode's outcome (the main's rewards before the fork, then
        # the fork's) minus the mean outcome of the main rollouts of its group, as RLOO's baseline for a new sample
        outcomes = [math.fsum(rew) for rew in rewards]
        groups: dict[Any, list[float]] = {}
        for r, o in zip(mains, outcomes, strict=True):
            groups.setdefault(r.group_id, []).append(o)
        base = {g: math.fsum(x) / len(x) for g, x in groups.items()}
        traj: dict[tuple[int, int], list[float]] = {key: [float(fallback[key[0]])] for key in branches.chosen}
        for f, (i, t, _) in zip(branches.forks, branches.origins, strict=True):
            full = math.fsum(rewards[i][:t]) + math.fsum(turn_rewards(f, config))
            traj[i, t].append(full - base[mains[i].group_id])
        slot: dict[tuple[int, int], np.ndarray] = {}
        for key, (vals, valid) in tree_values(branches, config).items():
            g = fork_group_advantages(vals, traj[key], valid, tree_std=config.tree_std, tree_blend=config.tree_blend,
                                      step_bonus=config.step_bonus)  # fmt: skip
            per_turn[key[0]][key[1]] = g[0]
            slot[key] = g[1:]
        seen: dict[tuple[int, int], int] = {}
        for f, (i, t, _) in zip(branches.forks, branches.origins, strict=True):
            j = seen[i, t] = seen.get((i, t), -1) + 1
            if f.turn_spans:
                rows.append(first_turn(f))
                fork_adv.append(0.0 if (i, t) in masked else float(slot[i, t][j]))
    for i, t in masked:  # BranPO's redundant steps: exactly 0
        per_turn[i][t] = 0.0
    advs = [broadcast_to_tokens(a, r.turn_spans, len(r.response_ids), r.loss_mask)
            for a, r in zip(per_turn, mains, strict=True)]  # fmt: skip
    for a, r in zip(fork_adv, rows[len(mains) :], strict=True):
        advs.append(broadcast_to_tokens([a], r.turn_spans, len(r.response_ids), r.loss_mask))
    return rows, advs


def tree_nodes(branches: BranchSet) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], list[tuple[int, int]]]]:
    """The tree's nodes (row, turn) of ``branches.rows`` with their levels, and each node's children: the actions
    taken there, as (row, turn): the row's own action, then each fork's first action ``(fork row, 0)``."""
    n, m = len(branches.mains), len(branches.forks)
    levels = {node: 1 for node in branches.chosen}
    levels.update(branches.levels)
    kids: dict[tuple[int, int], list[tuple[int, int]]] = {node: [node] for node in levels}
    for k, (i, t, _) in enumerate(branches.origins):
        kids[i, t].append((n + k, 0))
    for k, (r, t, _) in enumerate(branches.sub_origins):
        kids[r, t].append((n + m + k, 0))
    return levels, kids


def level_advantages(branches: BranchSet, config: TrainConfig) -> dict[tuple[int, int], float]:
    """AT^2PO's turn-wise credit on a multi-level tree: ``V(node) = mean of its children's values``; a child's
    value is ``r + gamma * V(next node)`` when the state its action led to was expanded one level deeper, else its
    return-to-go (a leaf); each child (an action, keyed (row, turn)) gets ``V(child) - V(node)``. With one level
    every child is a leaf and this is ``tree``'s return minus the group's mean. Siblings' advantages sum to 0."""
    rows = branches.rows
    rewards = [turn_rewards(r, config) for r in rows]
    rtg = [returns_to_go(rew, config.gamma) for rew in rewards]
    levels, kids = tree_nodes(branches)
    memo: dict[tuple[int, int], float] = {}

    def child_value(child: tuple[int, int], level: int) -> float:
        row, turn = child
        if turn >= len(rewards[row]):
            return 0.0  # a fork that played no turn
        if levels.get((row, turn + 1)) == level + 1:
            return float(rewards[row][turn]) + config.gamma * node_value((row, turn + 1))
        return float(rtg[row][turn])

    def node_value(node: tuple[int, int]) -> float:
        if node not in memo:
            vals = [child_value(c, levels[node]) for c in kids[node]]
            memo[node] = math.fsum(vals) / len(vals)
        return memo[node]

    out: dict[tuple[int, int], float] = {}
    for node in sorted(levels, key=lambda q: -levels[q]):  # deepest first: shallow recursion
        vals = [child_value(c, levels[node]) for c in kids[node]]
        group = tree_advantages([vals])[0]  # exact 0 for a tied node
        for c, a in zip(kids[node], group, strict=True):
            out[c] = float(a)
    return out


def _level_rows(branches: BranchSet, config: TrainConfig) -> tuple[list[Rollout], list[np.ndarray]]:
    """``branch_advantages`` for a multi-level tree: the mains (their unforked turns: the RLOO fallback), then every
    fork of every level cut after its last turn taken at a node."""
    adv = level_advantages(branches, config)
    mains, rows = branches.mains, branches.rows
    fallback = outcome_fallback(mains, config)
    out_rows: list[Rollout] = list(mains)
    advs = []
    for i, r in enumerate(mains):
        per = [adv.get((i, t), float(fallback[i])) for t in range(len(r.turn_spans))]
        advs.append(broadcast_to_tokens(per, r.turn_spans, len(r.response_ids), r.loss_mask))
    for idx in range(len(mains), len(rows)):
        f = rows[idx]
        turns = 0
        while (idx, turns) in adv and turns < len(f.turn_spans):
            turns += 1
        if turns:
            cut = first_turn(f, turns)
            per = [adv[idx, t] for t in range(turns)]
            out_rows.append(cut)
            advs.append(broadcast_to_tokens(per, cut.turn_spans, len(cut.response_ids), cut.loss_mask))
    return out_rows, advs


def grow_levels(
    policy: HFPolicy,
    envs: list[Any],
    make_env: Callable[[], Any],
    branches: BranchSet,
    config: TrainConfig,
    sample_seed: int,
) -> BranchSet:
    """AT^2PO's multi-level tree: levels 2 .. ``branch_depth`` expand, for every node of the level above, the state
    each of its children's actions led to (the row's next turn), unless that state is a node already, with
    ``branch_k`` forks each (seeds ``derive_seed(derive_seed(sample_seed, _LEVEL_TAG, level), row, turn, j)``). The
    forks of every level but the last record snapshots."""
    rows = branches.rows
    n = len(branches.mains)
    offsets = [0] * n + [t for _, t, _ in branches.origins]  # the episode turn of each row's turn 0
    levels, kids = tree_nodes(branches)
    frontier = sorted(node for node, lvl in levels.items() if lvl == 1)
    for level in range(2, config.branch_depth + 1):
        new = sorted({(row, turn + 1) for node in frontier for row, turn in kids[node]
                      if turn + 1 < len(rows[row].turn_spans) and (row, turn + 1) not in levels})  # fmt: skip
        if not new:
            break
        need = len(new) * config.branch_k
        while len(envs) < n + need:
            envs.append(make_env())
        forks, origins = run_forks(policy, envs[n : n + need], rows, new, k=config.branch_k,
                                   sample_seed=derive_seed(sample_seed, _LEVEL_TAG, level),
                                   config=config.rollout_config, generation_batch=config.generation_batch,
                                   share_prefill=config.rollout_backend == "hf", snapshots=level < config.branch_depth,
                                   offsets=offsets)  # fmt: skip
        for node in new:
            levels[node] = branches.levels[node] = level
            kids[node] = [node]
        for f, (r, t, j) in zip(forks, origins, strict=True):
            kids[r, t].append((len(rows), 0))
            rows.append(f)
            offsets.append(offsets[r] + t)
            branches.sub_forks.append(f)
            branches.sub_origins.append((r, t, j))
        frontier = new
    return branches


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
    """The trainer's branch step: resample stalled main rollouts (``branch_resample``, T^2PO), choose the turns
    (``branch_turns`` and its knobs, :func:`choose_turns`), fork ``branch_k`` continuations from each on the spare
    envs ``envs[len(mains):]`` (grown with ``make_env`` as needed, left open) and return them. The HF back-end
    prefills the forks' shared prefixes once (``share_prefill``)."""
    n = len(mains)
    mains, extra, resamples = list(mains), 0, 0
    if config.tree_continue == "best":  # TL-GRPO: new episodes along the best candidate of every turn
        need = (config.branch_k + 1) * n
        while len(envs) < n + need:
            envs.append(make_env())
        paths, forks, origins, extra = best_paths(policy, envs[n : n + need], mains, config.rollout_config,
                                                  sample_seed, k=config.branch_k,
                                                  score=lambda c: math.fsum(turn_rewards(c, config)),
                                                  generation_batch=config.generation_batch)  # fmt: skip
        return BranchSet(paths, forks, origins, resampled_tokens=extra)
    if config.branch_resample:
        while len(envs) < 2 * n:
            envs.append(make_env())
        mains, extra, resamples = resample_stalled(policy, envs[n : 2 * n], mains, config.rollout_config, sample_seed,
                                                   branch_resample=config.branch_resample,
                                                   generation_batch=config.generation_batch)  # fmt: skip
    entropy = turn_entropy(policy, mains, config.temperature) if config.branch_turns == "entropy" else None
    chosen = choose_turns(mains, config.branch_turns, config.branch_frac, branch_tail=config.branch_tail,
                          branch_prefix=config.branch_prefix, branch_difficulty=config.branch_difficulty,
                          entropy=entropy)  # fmt: skip
    need = len(chosen) * config.branch_k
    while len(envs) < n + need:
        envs.append(make_env())
    forks, origins = run_forks(policy, envs[n : n + need], mains, chosen, k=config.branch_k, sample_seed=sample_seed,
                               config=config.rollout_config, generation_batch=config.generation_batch,
                               share_prefill=config.rollout_backend == "hf",
                               snapshots=config.branch_depth > 1)  # fmt: skip
    branches = BranchSet(mains, forks, origins, resampled_tokens=extra, resamples=resamples)
    if config.branch_depth > 1:
        grow_levels(policy, envs, make_env, branches, config, sample_seed)
    return branches


# ----------------------------------------------------------------------------------------------------------------
# the catalogue's cards (agentgym methods): knobs are TrainConfig fields (agentgym train --set KNOB=VALUE)

_SAME = "forks continue with the training policy's temperature, stop strings and turn limit (max_turns - t left)"
_FALLBACK = "a main turn without forks gets its rollout's RLOO outcome advantage (reward units, like the forks')"
METHODS: tuple[Method, ...] = (
    Method("vine", "VinePPO", "branch", "Monte-Carlo state values from K forks, TD advantages, no critic",
           needs=("snapshots", "outcome", "group"), paper=cite("VinePPO"),
           code="agentgym.baselines.branches:vine_advantages",
           choices=(_SAME, "V after the last turn is 0; A_t = G_t - V(s_t) where s_(t+1) was not forked", _FALLBACK,
                    "which turns: branch_turns (all, uncertain, tail, prefix, entropy) and branch_frac"),
           train={"algo": "grpo", "estimator": "vine", "branch_k": 4}, knobs_into="config"),
    Method("tree", "TreeRPO", "branch", "turn-level groups: the main action and K forks' first actions at one state",
           needs=("snapshots", "outcome", "group"), paper=cite("TreeRPO"),
           code="agentgym.baselines.branches:tree_advantages",
           choices=(_SAME, "each member's return-to-go minus the group mean, no std (knob tree_std)", _FALLBACK,
                    "the forks' first turns are trained too; minibatches grow so the optimizer steps stay the same"),
           train={"algo": "grpo", "estimator": "tree", "branch_k": 4}, knobs_into="config"),
    Method("branpo", "BranPO", "branch", "tail branching with difficulty-aware frequency and redundant-step masking",
           needs=("snapshots", "outcome", "group"), paper=cite("BranPO"),
           code="agentgym.baselines.branches:choose_turns",
           choices=("tail: the last branch_tail turns of each rollout (a count, not a fraction; knob branch_tail)",
                    "difficulty: a task keeps ceil((1 - |2p - 1|) n) of its n chosen turns, p its group's success "
                    "rate: none for an all-solved or all-failed group (knob branch_difficulty)",
                    "masking: advantage exactly 0 at a forked state whose K >= 2 fork values all tie, and on those "
                    "forks' first turns; repeated identical actions are not masked (knob branch_mask_ties)",
                    "the credit is tree's turn groups (estimator vine takes the same knobs)"),
           train={"algo": "grpo", "estimator": "tree", "branch_k": 2, "branch_turns": "tail", "branch_tail": 2,
                  "branch_difficulty": True, "branch_mask_ties": True}, knobs_into="config"),
    Method("tl_grpo", "TL-GRPO", "branch", "same-state groups scored by immediate or best-to-go turn reward",
           needs=("snapshots", "group"), paper=cite("TL-GRPO"), code="agentgym.baselines.branches:target_value",
           choices=("max_to_go scores a member by max_t r_t over its whole trajectory, the shared prefix included "
                    "(undiscounted), so only actions that raise the running best get credit",
                    "immediate: the action's own turn reward, undiscounted (knob tree_target)",
                    "z-scored with the population std + 1e-6 (knob tree_std)",
                    "the episode goes on from the best of the K + 1 candidates of each turn (ties: the first drawn), "
                    "replayed from the main rollout's reset state; the main rollouts themselves are sampled (and "
                    "counted) but not trained (knob tree_continue='best'; 'main' continues the main rollout)",
                    "the paper's iterative-optimisation env is not in the suite: any env whose turns pay a reward "
                    "works (e.g. Chain with progress_key='progress')"),
           train={"algo": "grpo", "estimator": "tree", "branch_k": 4, "tree_target": "immediate", "tree_std": True,
                  "tree_continue": "best"}, knobs_into="config"),
    Method("portool", "PORTool", "branch", "prefix tree of tool-call rollouts, fork and trajectory blend",
           needs=("snapshots", "outcome", "group", "turn_signal"), paper=cite("PORTool"),
           code="agentgym.baselines.branches:fork_group_advantages",
           choices=("forks at the first branch_prefix turns of each rollout (knob branch_prefix)",
                    "alpha = 0.5 (knob tree_blend); A^traj: the RLOO outcome advantage (a fork: its whole episode's "
                    "outcome minus its group's mean main outcome)",
                    "step bonus beta = 0.1 on info['action_valid'] (knob step_bonus); the fork term z-scored "
                    "(knob tree_std)",
                    "a step's 'mean outcome of the leaves below' is its own continuation's return (one leaf each)"),
           train={"algo": "grpo", "estimator": "tree", "branch_k": 2, "branch_turns": "prefix", "branch_prefix": 2,
                  "tree_blend": 0.5, "step_bonus": 0.1, "tree_std": True}, knobs_into="config"),
    Method("at2po", "AT^2PO", "branch", "entropy-guided multi-level turn trees with turn-wise credit",
           needs=("snapshots", "outcome", "group"), paper=cite("AT^2PO"),
           code="agentgym.baselines.branches:choose_turns",
           choices=("expansion: the branch_frac of the batch's turns with the highest mean full-distribution "
                    "entropy, by one scoring pass with the rollouts' weights (knobs branch_turns='entropy', "
                    "branch_frac)",
                    "levels 2 .. branch_depth expand the state after every child action of the level above (a "
                    "state that is a node already is not expanded twice), branch_k forks each (knob branch_depth)",
                    "node value = mean of its children; a child's value = r + gamma V(next node) when its next "
                    "state was expanded one level deeper, else its return-to-go; A = V(child) - V(node); depth 1 "
                    "is tree",
                    "turn-level objective: one importance ratio per turn, exp(mean token log-ratio over the turn's "
                    "loss tokens) (the geometric mean of the token ratios), clipped with the same eps_low/eps_high "
                    "and given to every token of the turn; the loss aggregation stays per token (knob ratio_level)"),
           train={"algo": "grpo", "estimator": "tree", "branch_k": 2, "branch_turns": "entropy", "branch_frac": 0.5,
                  "branch_depth": 2, "ratio_level": "turn"},
           knobs_into="config"),
    Method("t2po", "T^2PO", "branch", "thinking intervention (token level) and resampling turns without progress",
           needs=("snapshots", "anchors"), paper=cite("T^2PO"),
           code="agentgym.baselines.branches:resample_stalled",
           choices=("no progress: the anchor after a turn equals the anchor before it, else its observation repeats "
                    "one already seen; a turn that ended the episode never counts",
                    "the episode is played again from the snapshot before the first such turn, up to r times per "
                    "rollout (knob branch_resample); the discarded turns count in sampled_tokens",
                    "runs in the branch mode (tree or vine credit over the resampled rollouts)",
                    "thinking intervention (baselines/t2po.py, hf back-end): a window's marginal uncertainty is the "
                    "mean surprisal -log p of its w sampled tokens (a one-sample entropy estimate); when it changed "
                    "by less than delta from the previous window's, the text is inserted (w = 8, delta = 0.05 nats, "
                    "text ' Wait, let me think again. '; knobs think_window, think_delta, think_text)",
                    "the inserted tokens (log-prob 0) get loss_mask 0 in main rollouts and forks before the batch is "
                    "built; delta = 0 never intervenes (knob think_intervention)"),
           train={"algo": "grpo", "estimator": "tree", "branch_k": 2, "branch_turns": "uncertain",
                  "branch_resample": 2, "think_intervention": True}, knobs_into="config"),
)  # fmt: skip
