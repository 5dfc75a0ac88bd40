"""Credit assignment in the reference trainer: which reward each turn gets, and the advantages computed from it.

All of it comes from ``agentgym.rewards``; the trainer keeps no copies:

- the dense reward ``progress_key`` is the :class:`~agentgym.rewards.wrappers.ProgressReward` wrapper on the
  training env (:class:`EnvMaker`; :func:`training_rollouts` plays each iteration's groups on those envs):
  ``progress_coef * (info[key]_t - info[key]_{t-1})`` added to each step's reward (potential-based: it telescopes
  to ``coef * final progress``);
- ``reward_wrappers`` wrap the env after it (``EnvMaker``), their cross-batch tables updated once per iteration
  (:func:`update_tables`);
- ``scorer`` runs a post-episode turn scorer (any catalogue card of kind scorer, or an import path: ``info_gain`` =
  IGPO, ``info_potential`` = TIPS, ``siop`` = SIOP, ``infopo`` = InfoPO, ``judge``, ...; baselines/components.py)
  with the current policy as the scoring model, and adds its per-turn rewards times ``scorer_coef`` (InfoPO's are
  fused into the advantages instead: :func:`infopo_advantages`);
- ``config.counted_components`` picks the reward components a turn's reward sums: for the outcome-only
  estimators (``grpo``, ``dr_grpo``, ``rloo``, ``mt_grpo``) the ``outcome`` alone by default (``reward_components``);
- critic-free algorithms take the per-turn advantages of the registered estimator ``config.estimator_name``
  (``agentgym.rewards.advantages.ESTIMATORS``: ``grpo``, ``rloo``, ``gtpo``, ``gigpo`` over the env's state anchors,
  ``gigpo_obs`` over what the agent observed, ``mt_grpo`` over the verified per-turn signal ``config.turn_signal``
  plus the outcome, ...); PPO takes token-level
  GAE (``token_gae``) or, with ``estimator="turn_ppo"``, the ``turn_ppo`` estimator over the critic's values at
  the turns' first tokens. Either way ``gamma``/``lam`` come from the config, and turn advantages reach tokens
  through ``broadcast_to_tokens`` with the explicit turn spans (``serl`` with its knob ``granularity="token"``:
  ``broadcast_to_action_tokens``, the weighted advantage on each turn's action tokens, ``Rollout.action_spans``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym.baselines.backends import amp_dtype
from agentgym.baselines.checkpoint import TrainState
from agentgym.baselines.components import (
    WrapperSpec,
    build_scorer as components_build_scorer,
    table_items,
    wrapper_specs,
)
from agentgym.baselines.config import SIGNAL_ESTIMATORS, TrainConfig
from agentgym.baselines.rollout import Rollout, autocast, collect_rollouts, derive_seed
from agentgym.rewards.advantages import (
    TurnBatch,
    broadcast_to_tokens,
    flip_signals,
    get_estimator,
    masked_whiten,
    observation_anchors,
    place_turn_rewards,
    signal_progress,
    token_gae,
)
from agentgym.rewards.advantages.tokens import broadcast_to_action_tokens

__all__ = [
    "EnvMaker",
    "clip_scales",
    "compute_advantages",
    "demo_actions",
    "extrinsic_return",
    "group_stats",
    "infopo_advantages",
    "make_tables",
    "observation_keys",
    "reference_actions",
    "reference_scores",
    "scale_components",
    "score_turns",
    "separation_auc",
    "serl_token_advantages",
    "signal_auc",
    "training_rollouts",
    "turn_rewards",
    "turn_signals",
    "update_tables",
]  # fmt: skip


@dataclass(frozen=True)
class EnvMaker:
    """Builds the trainer's env: ``gymnasium.make(env_id, **env_kwargs)``, in ``ProgressReward`` when
    ``progress_key`` is set, then in each of ``wrappers`` (``TrainConfig.reward_wrappers``, resolved) in order, the
    ones with a table given their entry of ``tables`` (one object shared by every env built, updated by the trainer
    once per iteration: :func:`update_tables`). Picklable, so env pools build it in their workers."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    progress_key: str | None = None
    progress_coef: float = 1.0
    spec: Any = None  # the driver's registration of env_id, for workers that lack it (envs registered by tests)
    wrappers: tuple[WrapperSpec, ...] = ()
    tables: tuple[Any, ...] = ()  # one per wrapper (None: it keeps no table)

    @classmethod
    def of(cls, config: TrainConfig, env_kwargs: dict[str, Any] | None = None, *, shaped: bool = True,
           tables: Sequence[Any] | None = None) -> EnvMaker:  # fmt: skip
        """The training env of ``config`` (``shaped=False``: without the dense reward and the reward wrappers, as
        evaluations play it). ``tables``: the run's tables (:func:`make_tables`; None: fresh ones)."""
        import gymnasium

        import agentgym  # noqa: F401  (registers the envs)

        kwargs = config.env_kwargs if env_kwargs is None else env_kwargs
        key = config.progress_key if shaped else None
        specs = tuple(wrapper_specs(config.reward_wrappers)) if shaped else ()
        tabs = tuple(tables) if tables is not None and shaped else tuple(s.make_table() for s in specs)
        if len(tabs) != len(specs):
            raise ValueError(f"{len(tabs)} tables for {len(specs)} reward wrappers")
        return cls(config.env_id, dict(kwargs), key, config.progress_coef, gymnasium.spec(config.env_id), specs, tabs)

    def __call__(self) -> Any:
        import gymnasium

        import agentgym  # noqa: F401

        if self.env_id not in gymnasium.registry and self.spec is not None:
            gymnasium.registry[self.env_id] = self.spec
        env = gymnasium.make(self.env_id, **self.env_kwargs)
        if self.progress_key is not None:
            from agentgym.rewards.wrappers import ProgressReward

            env = ProgressReward(env, key=self.progress_key, scale=self.progress_coef)
        for spec, table in zip(self.wrappers, self.tables, strict=True):
            env = spec.wrap(env, table)
        return env


def extrinsic_return(r: Rollout, arms: Sequence[str]) -> float:
    """An episode's return without the components named in ``arms`` (AIRS's extrinsic return)."""
    comps = r.reward_components or [{}] * len(r.turn_rewards)  # a hand-built rollout may record none
    return math.fsum(x - math.fsum(c.get(a, 0.0) for a in arms) for x, c in zip(r.turn_rewards, comps, strict=True))


def make_tables(config: TrainConfig) -> tuple[Any, ...]:
    """One fresh table per ``reward_wrappers`` entry (None for a wrapper without one)."""
    return tuple(s.make_table() for s in wrapper_specs(config.reward_wrappers))


def update_tables(config: TrainConfig, tables: Sequence[Any], rollouts: Sequence[Rollout]) -> dict[str, float]:
    """After all of an iteration's rollouts: each table's ``update`` with the items its class asks for
    (``components.table_items``: anchors, observations or transitions). Returns how many items each read."""
    out = {}
    for k, (spec, table) in enumerate(zip(wrapper_specs(config.reward_wrappers), tables, strict=True)):
        if table is not None:
            items = table_items(spec, rollouts)
            table.update(items)
            out[f"table{k}_items"] = float(len(items))
    return out


def scale_components(rollouts: Sequence[Rollout], factors: Mapping[str, float]) -> None:
    """Multiply reward components by ``factors`` (component name -> factor) in every rollout's record, in place:
    each turn's reward changes by ``(factor - 1) * component``, so components still sum to the reward. S2D's
    schedule (``TrainConfig.shaping_schedule``) scales its shaping component this way; a factor of 1 changes
    nothing (not even by rounding)."""
    factors = {k: float(v) for k, v in factors.items() if float(v) != 1.0}
    if not factors:
        return
    for r in rollouts:
        for t, comps in enumerate(r.reward_components):
            hit = {k: f for k, f in factors.items() if k in comps}
            if not hit:
                continue
            new = {k: (v * hit[k] if k in hit else v) for k, v in comps.items()}
            r.turn_rewards[t] = r.turn_rewards[t] + math.fsum(new[k] - comps[k] for k in hit)
            r.reward_components[t] = new


def training_rollouts(state: TrainState, config: TrainConfig, task_seeds: list[int], sample_seed: int,
                      group_offset: int, tables: Sequence[Any] | None = None) -> list[Rollout]:  # fmt: skip
    """``group_size`` rollouts of each task seed on the training envs of :class:`EnvMaker` (built once, kept in
    ``state.envs``: a list, or the ``env_pool`` named in the config; ``tables``: the run's reward-wrapper tables,
    which those envs keep reading)."""
    make_env = EnvMaker.of(config, tables=tables)
    per_task, options = config.groups_per_task, None
    if config.group_options:  # paired groups: each task once per options entry, the entries' groups adjacent
        task_seeds = [s for s in task_seeds for _ in range(per_task)]
        options = [dict(o) for _ in range(len(task_seeds) // per_task) for o in config.group_options]
    if config.env_pool != "list" and isinstance(state.envs, list):
        from agentgym.running.pool import make_pool

        state.envs = make_pool(config.env_pool, config.env_id, config.batch_tasks * per_task * config.group_size,
                               make_env=make_env, **config.env_pool_kwargs)  # fmt: skip
    rollouts = collect_rollouts(state.policy, make_env, task_seeds, group_size=config.group_size,
                                config=config.rollout_config, sample_seed=sample_seed,
                                group_offset=group_offset * per_task, envs=state.envs,
                                generation_batch=config.generation_batch, options=options,
                                snapshots=config.branch_k > 0)  # fmt: skip
    state.policy.sleep()  # a colocated engine gives its GPU memory back to the update
    return rollouts


def turn_rewards(r: Rollout, config: TrainConfig) -> list[float]:
    """The rewards the advantages are computed from: the (wrapped) env's per-turn rewards, or, where
    ``config.counted_components`` names components, each turn's sum of those components (by default the outcome
    alone for the outcome-only estimators: Umbrella's and KeyDoor's ``distractor`` rewards and a ``format`` penalty
    never reach GRPO's return; a step whose info names no components, as a plain gymnasium env's, counts whole);
    plus the turn scorer's rewards times ``scorer_coef`` when a scorer ran."""
    names = config.counted_components
    if names is None:
        base = list(r.turn_rewards)
    else:
        comps = r.reward_components or [{}] * len(r.turn_rewards)  # a hand-built rollout may record none
        base = [math.fsum(c.get(k, 0.0) for k in names) if c else x
                for x, c in zip(r.turn_rewards, comps, strict=True)]  # fmt: skip
    if not r.scored_rewards or config.scorer_fusion_mode == "infopo" or config.turn_signal_source == "scorer":
        return base  # InfoPO fuses advantages instead; a scorer that is the turn signal counts only through it
    return [x + config.scorer_coef * s for x, s in zip(base, r.scored_rewards, strict=True)]


def observation_keys(rollouts: Sequence[Rollout]) -> list[list[tuple[str, ...]]] | None:
    """Per rollout, the keys of what the agent observed before each turn (``gigpo_obs``'s anchors); None unless every
    rollout recorded its observations (a hand-built rollout may not)."""
    if any(len(r.observations) != len(r.turn_spans) for r in rollouts):
        return None
    return [observation_anchors(r.initial_observation, r.observations) for r in rollouts]


def turn_signals(rollouts: Sequence[Rollout], config: TrainConfig) -> list[list[float | None]] | None:
    """The per-turn signal of each rollout where the run reads one (an estimator of ``SIGNAL_ESTIMATORS``, or
    ``signal_progress_coef`` > 0), else None: the env's verified signal (``config.turn_signal`` read from the step
    infos), or with ``turn_signal_source="scorer"`` the turn scorer's rewards (None where it could not score a turn);
    then corrupted at ``turn_signal_flip``. A batch in which no turn reports the signal is an error (the env does not
    report that key), never a silent fall back to the outcome."""
    src = config.turn_signal
    if config.estimator_name not in SIGNAL_ESTIMATORS and config.signal_progress_coef == 0:
        return None
    if config.turn_signal_source == "scorer":
        out: list[list[float | None]] = []
        for r in rollouts:
            ok = r.scored_valid or [True] * len(r.scored_rewards)
            out.append([x if v else None for x, v in zip(r.scored_rewards, ok, strict=True)])
        if config.turn_signal_mode == "delta":
            out = [[None if x is None or p is None else x - p for p, x in zip([0.0, *row[:-1]], row, strict=True)]
                   for row in out]  # fmt: skip
    elif src is None:
        return None
    else:
        out = [src.read(r.reset_info, r.infos) for r in rollouts]
        if rollouts and all(x is None for row in out for x in row):
            raise ValueError(f"{config.estimator_name}: no turn of the batch reports info[{src.key!r}] (env "
                             f"{config.env_id}; set turn_signal_key to a key it reports)")  # fmt: skip
    if config.turn_signal_flip > 0:  # each rollout its own stream: a group's rollouts share a task seed
        rate = config.turn_signal_flip
        out = [flip_signals([row], rate, np.random.default_rng(derive_seed(config.seed, 7, r.seed, k)))[0]
               for k, (r, row) in enumerate(zip(rollouts, out, strict=True))]  # fmt: skip
    return out


def estimator_fields(rollouts: Sequence[Rollout], config: TrainConfig) -> dict[str, Any]:
    """The optional ``TurnBatch`` fields the configured estimator reads, from the rollouts: ``seq_logprobs``
    (``lampo``: the mean log-prob of each rollout's sampled tokens) and, with its knob ``lam`` > 0,
    ``reference_scores`` (:func:`reference_scores`); ``criticality`` (``serl``: ``serl_criticality`` of the step
    infos and observations, with the ``features`` knob and, for ``off_reference``, :func:`reference_actions`);
    ``segments`` (``hiper``: ``subgoal_segments`` of the actions) and, with its knob ``achieved_bonus`` set,
    ``subgoal_achieved`` (``subgoal_achieved`` of the step infos); ``phases`` and ``exploration_rewards``
    (``dual_track``: ``turn_phases`` and ``exploration_reward`` of the step infos). Empty for every other
    estimator."""
    from agentgym.rewards import advantages as adv
    from agentgym.rewards.advantages.serl import SERL_FEATURES

    name, knobs = config.estimator_name, config.estimator_kwargs
    if name == "lampo":
        sampled = [[lp for lp, m in zip(r.rollout_logprobs, r.loss_mask, strict=True) if m] for r in rollouts]
        out: dict[str, Any] = {"seq_logprobs": [math.fsum(s) / len(s) if s else 0.0 for s in sampled]}
        if knobs.get("lam"):
            out["reference_scores"] = reference_scores(rollouts, config)
        return out
    if name == "serl":
        features = tuple(knobs.get("features", SERL_FEATURES))
        refs = reference_actions(rollouts, config) if "off_reference" in features else [None] * len(rollouts)
        return {"criticality": [adv.serl_criticality(r.infos, r.observations, r.reset_info, features, r.actions, ref)
                                for r, ref in zip(rollouts, refs, strict=True)]}  # fmt: skip
    if name == "hiper":
        segments = [adv.subgoal_segments(r.actions) for r in rollouts]
        out = {"segments": segments}
        if knobs.get("achieved_bonus"):
            from agentgym.rewards.advantages.hiper import subgoal_achieved

            rows = [subgoal_achieved(s, r.reset_info, r.infos) for s, r in zip(segments, rollouts, strict=True)]
            if rollouts and all(row is None for row in rows):
                raise ValueError(f"hiper's achieved_bonus: no step of the batch reports info['plan_length'] (env "
                                 f"{config.env_id}; Household-v0 does with expert_plan=True)")  # fmt: skip
            out["subgoal_achieved"] = [row or [0.0] * len(r.infos) for row, r in zip(rows, rollouts, strict=True)]
        return out
    if name == "dual_track":
        return {"phases": [adv.turn_phases(r.infos) for r in rollouts],
                "exploration_rewards": [adv.exploration_reward(r.infos) for r in rollouts]}  # fmt: skip
    return {}


def reference_scores(rollouts: Sequence[Rollout], config: TrainConfig) -> list[float]:
    """LamPO's reference term of each rollout: ``reference_score`` (ROUGE-L F1) of its final ``<answer>`` against
    the env's gold answers (``reset_info["gold"]["answers"]``, SearchQA's); an env without them is an error."""
    from agentgym.rewards.advantages.lampo import reference_score
    from agentgym.rewards.information.common import final_answer, gold_answers

    out = []
    for r in rollouts:
        traj = r.to_trajectory(config.env_id)
        try:
            golds = gold_answers(traj)
        except ValueError as e:
            raise ValueError(f"lampo's lam > 0 needs gold answers: {e} (env {config.env_id})") from None
        out.append(reference_score(final_answer(traj), golds))
    return out


def reference_actions(rollouts: Sequence[Rollout], config: TrainConfig) -> list[list[str | None]]:
    """SERL's reference action of each turn: the oracle's command from the state the turn was played in where the
    step infos carry an expert plan (``expert_references``: Household with ``expert_plan=True``), else the env's
    demonstration agent's action at the same turn index of its own episode of the task (played once per task
    seed on an unshaped env; None past its end, and everywhere when the env has no demonstration agent)."""
    from agentgym.baselines.rollout import demonstration_agent
    from agentgym.rewards.advantages.serl import expert_references

    demos: dict[int, list[str]] = {}
    out: list[list[str | None]] = []
    for r in rollouts:
        refs = expert_references(r.reset_info, r.infos)
        if all(x is None for x in refs) and r.infos:
            if r.seed not in demos:
                demos[r.seed] = demo_actions(EnvMaker.of(config, shaped=False)(), r.seed, config.max_turns,
                                             demonstration_agent)  # fmt: skip
            demo = demos[r.seed]
            refs = [demo[t] if t < len(demo) else None for t in range(len(r.infos))]
        out.append(refs)
    return out


def demo_actions(env: Any, seed: int, max_turns: int, agent_of: Any) -> list[str]:
    """The actions of ``agent_of(env)`` (the env's demonstration agent, or None: no actions) playing the task of
    ``seed`` on ``env`` for up to ``max_turns`` turns; the env is closed afterwards."""
    try:
        obs, info = env.reset(seed=seed)
        agent = agent_of(env)
        if agent is None:
            return []
        agent.reset(seed=seed)
        messages, actions = list(obs), []
        for _ in range(max_turns):
            action = agent.act(messages, info)
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            messages += [{"role": "assistant", "content": action}, *obs]
            if terminated or truncated:
                break
        agent.close()
        return actions
    finally:
        env.close()


def separation_auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """The probability that a random ``positive`` value exceeds a random ``negative`` one (ties count half): the
    ROC AUC. None when either side is empty. A binary signal flipped at rate p separates at exactly 1 - p.

    >>> separation_auc([1.0, 0.0], [0.0]), separation_auc([2.0], [1.0, 3.0]), separation_auc([], [1.0])
    (0.75, 0.5, None)
    """
    if not positive or not negative:
        return None
    pos, neg = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    order = np.sort(neg)
    below = np.searchsorted(order, pos, side="left")
    ties = np.searchsorted(order, pos, side="right") - below
    return float((below + 0.5 * ties).sum() / (len(pos) * len(neg)))


def signal_auc(rollouts: Sequence[Rollout], config: TrainConfig) -> float | None:
    """How well the per-turn signal the run reads (its turn signal, else its scorer's rewards) separates the turns
    the env verified right from wrong (``info["correct"]`` True/False): :func:`separation_auc` over the batch's
    turns that have both. None where the env verifies no turn or the run reads no per-turn signal. The diagnostic
    that puts a judged or learned signal on the scale of a corrupted oracle (``turn_signal_flip`` p: 1 - p)."""
    rows = turn_signals(rollouts, config)
    if rows is None and config.scorer is not None:
        rows = [[x if ok else None for x, ok in zip(r.scored_rewards, r.scored_valid or [True] * len(r.scored_rewards),
                                                    strict=True)] for r in rollouts]  # fmt: skip
    if rows is None:
        return None
    right: list[float] = []
    wrong: list[float] = []
    for r, row in zip(rollouts, rows, strict=True):
        for info, x in zip(r.infos, row, strict=False):
            verdict = info.get("correct")
            if x is not None and isinstance(verdict, bool):
                (right if verdict else wrong).append(float(x))
    return separation_auc(right, wrong)


def group_stats(rollouts: Sequence[Rollout], config: TrainConfig) -> dict[Any, float]:
    """Population std per group id of the trajectory return (sum of the training turn rewards)."""
    groups: dict[Any, list[float]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(math.fsum(turn_rewards(r, config)))
    return {g: float(np.std(v)) for g, v in groups.items()}


def build_scorer(config: TrainConfig, model: Any, tokenizer: Any) -> Any:
    """The ``config.scorer`` turn scorer (a card, a fallback name or an import path; baselines/components.py), its
    ``scorer`` input the current policy weights (IGPO, TIPS, SIOP, InfoPO score with the policy itself), a judge's
    client built from ``scorer_kwargs``."""
    if config.scorer is None:
        raise ValueError("no scorer configured")
    return components_build_scorer(config.scorer, config.scorer_kwargs, model, tokenizer)


@torch.no_grad()
def score_turns(rollouts: Sequence[Rollout], config: TrainConfig, model: Any, tokenizer: Any,
                scorer: Any = None) -> dict[str, float]:  # fmt: skip
    """Run the turn scorer (``scorer``, else a fresh one from ``config``) on each group's text trajectories and store
    its per-turn rewards in ``Rollout.scored_rewards`` (a turn it could not score gets 0, is marked in
    ``Rollout.scored_valid`` and counts in ``scorer_invalid_frac``). A scorer with ``score_groups`` sees the whole
    batch at once (TIPS fits one scale over all groups; a learned scorer fits on the batch, then scores it)."""
    if scorer is None:
        scorer = build_scorer(config, model, tokenizer)
    groups: dict[Any, list[int]] = {}
    for i, r in enumerate(rollouts):
        groups.setdefault(r.group_id, []).append(i)
    trajs = {i: r.to_trajectory(config.env_id) for i, r in enumerate(rollouts)}
    for traj in trajs.values():  # enough to make the task again (PAR's demonstration references replay it)
        traj.env_kwargs = dict(config.env_kwargs)
    with autocast(model, amp_dtype(config)):
        if hasattr(scorer, "score_groups"):  # TIPS fits one scale over all groups
            scored = scorer.score_groups([[trajs[i] for i in idx] for idx in groups.values()])
        else:
            scored = [scorer([trajs[i] for i in idx]) for idx in groups.values()]
    invalid = total = 0
    for idx, scores in zip(groups.values(), scored, strict=True):
        for i, sc in zip(idx, scores, strict=True):
            scored = [bool(ok) and math.isfinite(x) for x, ok in zip(sc.rewards, sc.valid, strict=True)]
            rollouts[i].scored_rewards = [float(x) if ok else 0.0 for x, ok in zip(sc.rewards, scored, strict=True)]
            rollouts[i].scored_valid = scored
            invalid += sum(not ok for ok in sc.valid)
            total += len(sc.valid)
    flat = [x for r in rollouts for x in r.scored_rewards]
    out = {"scorer_reward_mean": float(np.mean(flat)) if flat else 0.0, "scorer_invalid_frac": invalid / max(total, 1)}
    stats = getattr(getattr(scorer, "judge", None), "stats", None)  # a judge's counters (LLMJudge: requests, ...)
    if callable(stats):
        out.update({f"judge_{k}": float(v) for k, v in stats().items()})
    fit = getattr(scorer, "last_fit", None)  # a learned scorer's last fit (pairs, losses, accuracies)
    if isinstance(fit, Mapping):
        out.update({f"scorer_fit_{k}": float(v) for k, v in fit.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})  # fmt: skip
    return out


def infopo_advantages(a_out: Sequence[np.ndarray], rollouts: Sequence[Rollout], rewards: Sequence[Sequence[float]],
                      config: TrainConfig) -> list[np.ndarray]:  # fmt: skip
    """InfoPO's gated fusion, applied by the trainer (``scorer_fusion="infopo"``, the default for
    ``CounterfactualInformationGain``): per group, ``A = A_out + beta * g * z(A_int)`` (``infopo_fuse``) with
    ``A_out`` the estimator's per-turn advantages of the outcome-side rewards (the scorer's rewards are not added to
    them), ``A_int`` the scorer's per-turn information gains ``I_t``, ``z`` over the group's turns,
    ``g = sigmoid(-std(group returns) / infopo_tau)`` and ``beta = scorer_coef``. The fusion lives here, not in a
    registered estimator, because it reads two reward streams (the outcome and the scorer's) that a ``TurnBatch``
    keeps as one; any critic-free estimator gives ``A_out``. Chosen as docs/rewards.md's example does: every turn
    is in ``z`` (mask all ones; the last turn's ``I`` is 0 by construction, an unscorable turn's 0 as stored)."""
    from agentgym.rewards.information import infopo_fuse

    groups: dict[Any, list[int]] = {}
    for i, r in enumerate(rollouts):
        groups.setdefault(r.group_id, []).append(i)
    out = [np.asarray(a, dtype=np.float64) for a in a_out]
    for idx in groups.values():
        if not all(rollouts[i].scored_rewards for i in idx):
            continue
        a = np.concatenate([out[i] for i in idx])
        b = np.concatenate([np.asarray(rollouts[i].scored_rewards, dtype=np.float64) for i in idx])
        std = float(np.std([math.fsum(rewards[i]) for i in idx]))
        fused = infopo_fuse(a, b, outcome_std=std, beta=config.scorer_coef, tau=config.infopo_tau)
        for i, part in zip(idx, np.split(fused, np.cumsum([out[i].size for i in idx])[:-1]), strict=True):
            out[i] = part
    return out


def clip_scales(rollouts: Sequence[Rollout], config: TrainConfig) -> list[np.ndarray] | None:
    """A^2TGPO's per-token clip scale (``adaptive_clip_beta`` > 0, estimator ``a2tgpo``): turn t of rollout i gets
    ``adaptive_clip_scale(r~_{i,t}, beta)``, ``r~`` the training turn rewards normalised over the group's turns
    (``turn_group_normalize``, as the a2tgpo estimator normalises them, with its ``eps``), on the turn's sampled
    tokens; 1 on every other token. None when the knob is off (the loss then clips at the global eps)."""
    if not config.adaptive_clip_beta:
        return None
    from agentgym.rewards.advantages import adaptive_clip_scale, turn_group_normalize

    eps = config.estimator_kwargs.get("eps")
    rewards = [turn_rewards(r, config) for r in rollouts]
    groups = [r.group_id for r in rollouts]
    r_tilde = turn_group_normalize(rewards, groups) if eps is None else turn_group_normalize(rewards, groups, eps)
    return [1.0 + broadcast_to_tokens(adaptive_clip_scale(rt, config.adaptive_clip_beta) - 1.0, r.turn_spans,
                                      len(r.response_ids), r.loss_mask)
            for rt, r in zip(r_tilde, rollouts, strict=True)]  # fmt: skip


def serl_token_advantages(per_turn: Sequence[np.ndarray], batch: TurnBatch, rollouts: Sequence[Rollout],
                          config: TrainConfig) -> list[np.ndarray]:  # fmt: skip
    """SERL at token granularity: each turn's action tokens (``Rollout.action_spans``, found at rollout time) get the
    estimator's ``A^GRPO_i * w_{i,t}`` (``per_turn``), the turn's other sampled tokens (its reasoning) ``A^GRPO_i``:
    serl with ``kappa=0``, which is GRPO exactly. An InfoPO fusion (a per-turn term) is refused rather than put on
    the action tokens alone, and so is a rollout whose action spans are not one per turn inside its turns (rows
    made other than by the rollout loop: record them with ``Rollout.record_outcome``'s ``action_span``)."""
    if config.scorer is not None and config.scorer_fusion_mode == "infopo":
        raise ValueError("serl's granularity='token' does not combine with the infopo scorer fusion")
    for i, r in enumerate(rollouts):
        if len(r.action_spans) != len(r.turn_spans) or not all(
            s <= a <= b <= e for (s, e), (a, b) in zip(r.turn_spans, r.action_spans, strict=True)
        ):
            raise ValueError(f"serl's granularity='token': rollout {i} records {len(r.action_spans)} action spans "
                             f"for {len(r.turn_spans)} turns, or spans outside its turns")  # fmt: skip
    # choice (granularity="token"): reasoning tokens keep A^GRPO_i (serl at kappa 0), action tokens get A^GRPO_i*w
    base = get_estimator("serl")(batch, **{**config.estimator_kwargs, "kappa": 0.0})
    return [broadcast_to_action_tokens(b, a, r.turn_spans, r.action_spans, len(r.response_ids), r.loss_mask)
            for b, a, r in zip(base, per_turn, rollouts, strict=True)]  # fmt: skip


def compute_advantages(
    rollouts: Sequence[Rollout], config: TrainConfig, values: Sequence[np.ndarray] | None = None
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Per-rollout token advantages in response coordinates (0 on env tokens), and PPO returns (else None).

    ``values``: the critic's values per response token (PPO only). Token-level PPO whitens the advantages over all
    sampled tokens of the batch (``whiten_advantages``), as does turn-level PPO after broadcasting."""
    masks = [np.asarray(r.loss_mask, dtype=np.float64) for r in rollouts]
    rewards = [turn_rewards(r, config) for r in rollouts]
    signals = turn_signals(rollouts, config)
    if config.signal_progress_coef > 0 and signals is not None:  # the progress the (corrupted/judged) signal implies
        c = config.signal_progress_coef
        rewards = [[x + c * p for x, p in zip(rew, prog, strict=True)]
                   for rew, prog in zip(rewards, signal_progress(signals), strict=True)]  # fmt: skip
    if not config.critic:
        batch = TurnBatch(rewards, [r.group_id for r in rollouts], anchors=[r.anchors for r in rollouts],
                          turn_lengths=[[e - s for s, e in r.turn_spans] for r in rollouts],
                          observations=observation_keys(rollouts),
                          turn_signals=signals if config.estimator_name in SIGNAL_ESTIMATORS else None,
                          **estimator_fields(rollouts, config))  # fmt: skip
        per_turn = get_estimator(config.estimator_name)(batch, **config.estimator_kwargs)
        if config.scorer is not None and config.scorer_fusion_mode == "infopo":
            per_turn = infopo_advantages(per_turn, rollouts, rewards, config)
        if config.estimator_name == "serl" and config.estimator_kwargs.get("granularity", "turn") == "token":
            return serl_token_advantages(per_turn, batch, rollouts, config), None
        return [broadcast_to_tokens(a, r.turn_spans, len(r.response_ids), r.loss_mask)
                for a, r in zip(per_turn, rollouts, strict=True)], None  # fmt: skip
    if values is None:
        raise ValueError("ppo needs critic values")
    advs, rets = [], []
    if config.estimator_name == "turn_ppo":  # a turn-level critic: V at each turn's first token, GAE over turns
        turn_values = [np.array([v[s] for s, _ in r.turn_spans], dtype=np.float64)
                       for r, v in zip(rollouts, values, strict=True)]  # fmt: skip
        batch = TurnBatch(rewards, [r.group_id for r in rollouts], values=turn_values)
        per_turn = get_estimator("turn_ppo")(batch, gamma=config.gamma, lam=config.lam)
        for r, a, v in zip(rollouts, per_turn, turn_values, strict=True):  # returns = advantages + values
            advs.append(broadcast_to_tokens(a, r.turn_spans, len(r.response_ids), r.loss_mask))
            rets.append(broadcast_to_tokens(a + v, r.turn_spans, len(r.response_ids), r.loss_mask))
    else:
        for r, v, m, rew in zip(rollouts, values, masks, rewards, strict=True):
            a, ret = token_gae(place_turn_rewards(rew, r.turn_spans, len(r.response_ids)), v, m, config.gamma,
                               config.lam)  # fmt: skip
            advs.append(a)
            rets.append(ret)
    if config.whiten_advantages and advs:
        flat = masked_whiten(np.concatenate(advs), np.concatenate(masks))
        advs = list(np.split(flat, np.cumsum([len(a) for a in advs])[:-1]))
    return advs, rets
