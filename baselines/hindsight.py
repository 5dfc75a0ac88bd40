"""HeRL: hindsight-guided resampling. A failed rollout's unmet rubric criteria, told back to the policy, steer a new
sample of the same task; the guided samples train as extra members of the task's group under the unguided prompt.

One iteration of the trainer's HeRL mode (``TrainConfig.herl``), read top to bottom:

1. **Unmet criteria** (:meth:`HeRL.unmet`): a checklist judge (``agentgym.rewards.checklist.ChecklistScorer``: its
   ``herl_checklists`` builder, its judge ``herl_judge``, the rule judge by default) scores every criterion of every
   rollout. A rollout is *failed* when at least one criterion scored 0; its unmet criteria are those, in checklist
   order. A criterion the judge gave no verdict on (NaN) is neither met nor listed, and a rollout with any such
   criterion gets no guidance (what it missed is not known). A rollout that meets every criterion gets none either.
2. **Guided prompt** (:func:`guided_messages`): the task's first observation with a hindsight block appended to its
   last user message: the failed attempt's actions, then ``It missed these criteria:`` and one ``- criterion``
   line per unmet criterion (:data:`HINDSIGHT`).
3. **Guided resampling** (:func:`guided_members`): ``herl_k`` new episodes per failed rollout, each on a spare env
   reset with the rollout's task seed (the same task: the reset observation must equal the original's), the policy
   given the guided prompt, sampled with the trainer's rollout loop (``rollout.advance_episodes``: same
   temperature, stop strings, turn limit). Member ``j`` of the failed rollout at batch index ``i`` samples with
   ``derive_seed(sample_seed, HERL_TAG, i, j)``.
4. **Under the unguided prompt** (:func:`under_prompt`): each guided episode's prompt tokens are replaced with the
   original's (unguided) prompt tokens, its response tokens (sampled and env tokens) kept as they are, and it joins
   the original's group (same ``group_id``). The trainer scores, rewards and normalises it like any group member;
   its ``rollout_logprobs`` stay the guided sampler's, ``log pi_guided(a_t | guided prompt, a_<t)``.
5. **Bonus** (:meth:`HindsightBatch.add_bonus`): a failed rollout whose guidance was sampled gets
   ``herl_bonus * b`` on its last turn's reward, ``b = mean_j R(guided_j) - R(original)``, ``R`` the training
   return (``credit.turn_rewards`` summed: env reward components counted, plus the turn scorer's). ``b`` is signed:
   guidance that made things worse lowers the original's reward; guidance that changed nothing gives ``b = 0``.
6. **Off-policy correction** (:meth:`HindsightBatch.correct`): a guided member's sampled token ``t`` gets its
   advantage times the truncated importance weight ``w_t = min(pi_old(a_t | unguided) / pi_guided(a_t | guided),
   herl_is_clip)``, ``pi_old`` the trainer's recomputed log-probs of the batch (the unguided prompt). The PPO ratio
   itself stays ``pi_theta / pi_old`` under the unguided prompt (so it starts at 1 and clips as usual);
   ``herl_is_clip=None`` trains the guided tokens as if on-policy (weight 1).

>>> guided_messages([{"role": "user", "content": "Pick a colour."}], ["At turn 1 the agent answered red."],
...                 ["<answer> blue </answer>"])[0]["content"].splitlines()[-3:]
['It missed these criteria:', '- At turn 1 the agent answered red.', 'Try the task again and meet every criterion.']
>>> weights = truncated_weights([math.log(0.5), math.log(0.1)], [math.log(0.25), math.log(0.2)], 1.5)
>>> [round(float(w), 12) for w in weights]
[1.5, 0.5]
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import EnvMaker, turn_rewards
from agentgym.baselines.rollout import HFPolicy, Rollout, RolloutConfig, advance_episodes, check_contexts, derive_seed
from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.catalogue import Method
from agentgym.rewards.checklist import CHECKLISTS, Checklist, ChecklistBuilder, ChecklistScorer, Criterion, rule_judge
from agentgym.rewards.papers import cite
from agentgym.rewards.verdicts import Judge
from agentgym.running.pool import SerialPool

__all__ = [
    "BONUS_COMPONENT",
    "HERL_TAG",
    "HINDSIGHT",
    "METHODS",
    "GuidedMember",
    "HeRL",
    "HindsightBatch",
    "choice_checklists",
    "guided_members",
    "guided_messages",
    "herl_checklist_builder",
    "hindsight_step",
    "truncated_weights",
    "under_prompt",
]  # fmt: skip

#: The seed tag of the guided samples' streams (they differ from the main rollouts' and the forks').
HERL_TAG = 7_937
#: The reward component the bonus is recorded under (counted wherever HeRL is on: ``TrainConfig.counted_components``).
BONUS_COMPONENT = "herl_bonus"
#: The hindsight block appended to the last user message of the guided prompt.
HINDSIGHT = ("\n\nHindsight: an earlier attempt at this task fell short.\nThe earlier attempt:\n{attempt}\n"
             "It missed these criteria:\n{criteria}\nTry the task again and meet every criterion.")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# checklists


def choice_checklists(traj: Trajectory) -> list[Checklist]:
    """A checklist of the diagnostics' gold choices (Chain-v0, Umbrella-v0, KeyDoor-v0: ``reset_info["gold"]``):
    one criterion per decisive stage ``t``, "At turn t+1 the agent answered CHOICE.", met when turn ``t`` was
    played and the env marked it right (``info["correct"] is True``). One checklist, on the last turn.

    ``ValueError`` for a trajectory without the diagnostics' gold."""
    gold = traj.reset_info.get("gold")
    if not isinstance(gold, dict) or "choices" not in gold:
        raise ValueError(f"the 'choices' checklist needs the diagnostics' reset_info['gold']['choices'] (env "
                         f"{traj.env_id!r} gives none); pass another checklist builder")  # fmt: skip
    decisive = gold.get("decisive") or [True] * len(gold["choices"])
    criteria = []
    for t, (choice, on) in enumerate(zip(gold["choices"], decisive, strict=True)):
        if on:
            rule = lambda t=t: t < len(traj.turns) and traj.turns[t].info.get("correct") is True
            criteria.append(Criterion(f"At turn {t + 1} the agent answered {choice}.", "the agent's answer",
                                      rule, "choices"))  # fmt: skip
    return [Checklist(max(len(traj.turns) - 1, 0), "", tuple(criteria))]


def herl_checklist_builder(name: str) -> ChecklistBuilder:
    """The builder ``herl_checklists`` names: ``"choices"`` (:func:`choice_checklists`), a name of
    ``agentgym.rewards.checklist.CHECKLISTS`` (``"tool_use"``), or an import path ``"pkg.module:function"``."""
    if name == "choices":
        return choice_checklists
    if name in CHECKLISTS:
        return CHECKLISTS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise ValueError(f"herl_checklists must be 'choices', one of {', '.join(CHECKLISTS)} or 'pkg.module:function',"
                         f" got {name!r}")  # fmt: skip
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"herl_checklists {name!r} is not callable")
    return obj


# ----------------------------------------------------------------------------------------------------------------
# pure parts


def guided_messages(messages: Sequence[Mapping[str, Any]], unmet: Sequence[str], attempt: Sequence[str]
                    ) -> list[dict[str, Any]]:  # fmt: skip
    """A copy of ``messages`` (a task's first observation) whose last user message ends with :data:`HINDSIGHT`:
    the failed ``attempt`` (its actions, one ``Turn k:`` line each) and one ``- criterion`` line per ``unmet``
    criterion, in order. A conversation without a user message gets the block as a new user message."""
    if not unmet:
        raise ValueError("no unmet criteria: a rollout that meets every criterion gets no guidance")
    lines = "\n".join(f"Turn {k + 1}: {a}" for k, a in enumerate(attempt)) or "(no action)"
    block = HINDSIGHT.format(attempt=lines, criteria="\n".join(f"- {c}" for c in unmet))
    out = [dict(m) for m in messages]
    users = [i for i, m in enumerate(out) if m.get("role") == "user"]
    if not users:
        return [*out, {"role": "user", "content": block.lstrip()}]
    out[users[-1]]["content"] = f"{out[users[-1]].get('content') or ''}{block}"
    return out


def truncated_weights(old_logprobs: Sequence[float] | np.ndarray, guided_logprobs: Sequence[float] | np.ndarray,
                      clip: float | None) -> np.ndarray:  # fmt: skip
    """Per token, ``min(exp(old - guided), clip)``: the importance ratio of the trained policy under the unguided
    prompt against the guided sampler, truncated at ``clip`` (None: all ones, no correction)."""
    old, guided = np.asarray(old_logprobs, dtype=np.float64), np.asarray(guided_logprobs, dtype=np.float64)
    if old.shape != guided.shape:
        raise ValueError(f"{old.shape} old log-probs but {guided.shape} guided ones")
    if clip is None:
        return np.ones_like(old)
    return np.minimum(np.exp(old - guided), float(clip))


def under_prompt(guided: Rollout, prompt_ids: Sequence[int], initial_observation: Sequence[Mapping[str, Any]]
                 ) -> Rollout:  # fmt: skip
    """``guided`` with ``prompt_ids`` (the unguided prompt) in place of its own prompt and ``initial_observation``
    as its first observation; its response tokens, masks, log-probs and spans stay as sampled, its per-turn context
    lengths shift by the prompts' difference."""
    shift = len(prompt_ids) - len(guided.prompt_ids)
    return dataclasses.replace(guided, prompt_ids=list(prompt_ids), initial_observation=[dict(m) for m in
                               initial_observation], context_lengths=[c + shift for c in guided.context_lengths],
                               snapshots=[])  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# the mode


@dataclass(frozen=True)
class HeRL:
    """HeRL's settings: the ``judge`` that checks the criteria of the ``herl_checklists`` builder (see
    :func:`herl_checklist_builder`), ``herl_k`` guided samples per failed rollout, the truncation ``herl_is_clip``
    of the importance weight (None: no correction) and the bonus weight ``herl_bonus``. Knob names are the
    ``TrainConfig`` fields."""

    judge: Judge = field(default_factory=rule_judge)
    herl_checklists: str = "tool_use"
    herl_k: int = 1
    herl_is_clip: float | None = 2.0
    herl_bonus: float = 0.2

    def __post_init__(self) -> None:
        if self.herl_k < 1:
            raise ValueError(f"herl_k must be >= 1, got {self.herl_k}")
        if self.herl_is_clip is not None and not self.herl_is_clip > 0:
            raise ValueError(f"herl_is_clip must be > 0 or None, got {self.herl_is_clip}")

    @classmethod
    def of(cls, config: TrainConfig) -> HeRL:
        """The settings of ``config`` (its ``herl_*`` fields; the judge built from ``herl_judge``)."""
        from agentgym.baselines.components import make_judge

        return cls(make_judge(config.herl_judge), config.herl_checklists, config.herl_k, config.herl_is_clip,
                   config.herl_bonus)  # fmt: skip

    def unmet(self, trajectories: Sequence[Trajectory]) -> list[list[str]]:
        """Per trajectory, the criteria it missed (score 0), in checklist order; empty when it met every one or
        when the judge gave no verdict on any criterion (it is then not known what it missed)."""
        scorer = ChecklistScorer(self.judge, herl_checklist_builder(self.herl_checklists))
        out: list[list[str]] = []
        for res in scorer.criterion_scores(trajectories):
            if any(math.isnan(s) for s in res.scores):
                out.append([])
            else:
                out.append([t for t, s in zip(res.texts, res.scores, strict=True) if s == 0.0])
        return out


@dataclass
class GuidedMember:
    """One guided sample: its ``rollout`` (already under the unguided prompt), the batch index ``origin`` of the
    failed rollout it resamples, the ``guided_prompt_ids`` it was sampled after and the ``unmet`` criteria listed."""

    rollout: Rollout
    origin: int
    guided_prompt_ids: list[int]
    unmet: list[str]


@dataclass
class HindsightBatch:
    """An iteration's guided members (:func:`guided_members`) and what the trainer does with them."""

    herl: HeRL
    originals: list[Rollout]
    members: list[GuidedMember] = field(default_factory=list)
    unmet: list[list[str]] = field(default_factory=list)

    @property
    def guided(self) -> list[Rollout]:
        """The guided members' rollouts, in order (what joins the batch)."""
        return [m.rollout for m in self.members]

    def metrics(self) -> dict[str, float]:
        """``herl_failed`` (rollouts with an unmet criterion), ``herl_guided`` (guided members) and
        ``herl_unmet_mean`` (unmet criteria per rollout)."""
        return {"herl_failed": float(sum(bool(u) for u in self.unmet)), "herl_guided": float(len(self.members)),
                "herl_unmet_mean": float(np.mean([len(u) for u in self.unmet])) if self.unmet else 0.0}  # fmt: skip

    def gains(self, config: TrainConfig) -> dict[int, float]:
        """``b_i = mean_j R(guided_ij) - R(original_i)`` per failed rollout ``i`` with guided members, ``R`` the
        training return (``credit.turn_rewards`` summed, ``math.fsum``)."""
        by: dict[int, list[float]] = {}
        for m in self.members:
            by.setdefault(m.origin, []).append(math.fsum(turn_rewards(m.rollout, config)))
        return {i: math.fsum(v) / len(v) - math.fsum(turn_rewards(self.originals[i], config)) for i, v in by.items()}

    def add_bonus(self, rollouts: Sequence[Rollout], config: TrainConfig) -> dict[str, float]:
        """Add ``herl_bonus * b_i`` (:meth:`gains`) to the last turn's reward of each failed rollout still in
        ``rollouts`` (dynamic sampling may have dropped its group), recorded as the component
        :data:`BONUS_COMPONENT` where the turn records components. Returns the metrics: the mean training return
        and success of the policy's own rollouts (``herl_original_*``: the batch's ``reward_mean`` and
        ``success_rate`` count the guided members too), the guided members' mean return and the mean gain."""
        gains = self.gains(config)
        kept = {id(r) for r in rollouts}
        orig = [math.fsum(turn_rewards(r, config)) for r in self.originals]
        guided = [math.fsum(turn_rewards(r, config)) for r in self.guided]
        for i, b in gains.items():
            r = self.originals[i]
            if id(r) not in kept or not r.turn_rewards or self.herl.herl_bonus == 0.0:
                continue
            extra = self.herl.herl_bonus * b
            r.turn_rewards[-1] += extra
            if r.reward_components and r.reward_components[-1]:
                comps = r.reward_components[-1]
                comps[BONUS_COMPONENT] = comps.get(BONUS_COMPONENT, 0.0) + extra
        return {"herl_original_return": float(np.mean(orig)) if orig else 0.0,
                "herl_original_success": float(np.mean([r.success for r in self.originals])) if orig else 0.0,
                "herl_guided_return": float(np.mean(guided)) if guided else 0.0,
                "herl_gain_mean": float(np.mean(list(gains.values()))) if gains else 0.0}  # fmt: skip

    def correct(self, rollouts: Sequence[Rollout], advantages: Sequence[np.ndarray], old_logprobs: torch.Tensor
                ) -> tuple[list[np.ndarray], dict[str, float]]:  # fmt: skip
        """The guided members' token advantages times :func:`truncated_weights` of the trainer's ``old_logprobs``
        (``(B, L)``, sequence coordinates, the batch's rows in the order of ``rollouts``: the unguided prompt)
        against their ``rollout_logprobs`` (the guided sampler's); every other row as it is. Returns the advantages
        and the weights' mean and clipped share over the guided members' sampled tokens."""
        guided = {id(r) for r in self.guided}
        out, weights, clipped = [], [], []
        for row, (r, adv) in enumerate(zip(rollouts, advantages, strict=True)):
            if id(r) not in guided:
                out.append(adv)
                continue
            p, n = len(r.prompt_ids), len(r.response_ids)
            old = old_logprobs[row, p : p + n].double().numpy()
            w = truncated_weights(old, r.rollout_logprobs, self.herl.herl_is_clip)
            on = np.asarray(r.loss_mask, dtype=bool)
            w = np.where(on, w, 1.0)
            out.append(np.asarray(adv, dtype=np.float64) * w)
            weights += w[on].tolist()
            if self.herl.herl_is_clip is not None:
                clipped += (np.exp(old - np.asarray(r.rollout_logprobs))[on] > self.herl.herl_is_clip).tolist()
        metrics = {"herl_is_weight_mean": float(np.mean(weights)) if weights else 1.0,
                   "herl_is_clip_frac": float(np.mean(clipped)) if clipped else 0.0}  # fmt: skip
        return out, metrics


def guided_members(policy: HFPolicy, envs: Sequence[Any], rollouts: Sequence[Rollout], herl: HeRL, *,
                   sample_seed: int, config: RolloutConfig, env_id: str = "",
                   generation_batch: int | None = None) -> HindsightBatch:  # fmt: skip
    """Steps 1-4 of the module docstring on the batch ``rollouts``: the unmet criteria of each, then ``herl_k``
    guided episodes per failed one on ``envs`` (spare envs, at least ``herl_k`` per failed rollout, built like the
    training envs), in lockstep, returned under the unguided prompt."""
    unmet = herl.unmet([r.to_trajectory(env_id) for r in rollouts])
    todo = [(i, j) for i, u in enumerate(unmet) if u for j in range(herl.herl_k)]
    batch = HindsightBatch(herl, list(rollouts), unmet=unmet)
    if not todo:
        return batch
    if len(envs) < len(todo):
        raise ValueError(f"{len(todo)} guided episodes need as many envs, got {len(envs)}")
    pool = SerialPool.of_envs(list(envs)[: len(todo)])
    starts = []
    for (i, _), out in zip(todo, pool.reset([rollouts[i].seed for i, _ in todo]), strict=True):
        if out.error is not None:
            raise RuntimeError(f"guided episode of rollout {i}: {out.error}")
        if list(out.observation) != list(rollouts[i].initial_observation):
            raise RuntimeError(f"rollout {i}: a reset with its task seed gives another task; HeRL resamples the same "
                               "task (an env whose reset depends on more than the seed cannot use it)")  # fmt: skip
        messages = guided_messages(out.observation, unmet[i], rollouts[i].actions)
        r = Rollout(prompt_ids=policy.prompt_ids(messages), group_id=rollouts[i].group_id, seed=rollouts[i].seed,
                    task_id=out.info.get("task_id"))  # fmt: skip
        r.initial_observation, r.reset_info = list(messages), dict(out.info)
        starts.append(r)
    generators = [torch.Generator().manual_seed(derive_seed(sample_seed, HERL_TAG, i, j)) for i, j in todo]
    was_training = policy.model.training
    policy.model.eval()
    try:
        contexts = advance_episodes(policy, pool, starts, generators, turn_limits=[config.max_turns] * len(todo),
                                    config=config, generation_batch=generation_batch)  # fmt: skip
    finally:
        policy.model.train(was_training)
    for (i, _), r, ctx in zip(todo, starts, contexts, strict=True):
        if config.check:
            check_contexts(r, ctx)
        if not r.turn_spans:  # the guided prompt left no room to sample: nothing to train on
            continue
        member = under_prompt(r, rollouts[i].prompt_ids, rollouts[i].initial_observation)
        batch.members.append(GuidedMember(member, i, list(r.prompt_ids), list(unmet[i])))
    return batch


def hindsight_step(state: Any, config: TrainConfig, rollouts: Sequence[Rollout], sample_seed: int,
                   tables: Sequence[Any] | None = None) -> HindsightBatch:  # fmt: skip
    """The trainer's HeRL hook after the rollouts: :func:`guided_members` of the batch on spare envs
    ``state.envs[len(rollouts):]`` (grown with the training env maker, left open)."""
    herl = HeRL.of(config)
    envs = state.envs
    n, need = len(rollouts), len(rollouts) * config.herl_k  # enough for every rollout failing
    make_env = EnvMaker.of(config, tables=tables)
    while len(envs) < n + need:
        envs.append(make_env())
    batch = guided_members(state.policy, envs[n : n + need], rollouts, herl, sample_seed=sample_seed,
                           config=config.rollout_config, env_id=config.env_id,
                           generation_batch=config.generation_batch)  # fmt: skip
    state.policy.sleep()
    return batch


# ----------------------------------------------------------------------------------------------------------------
# the catalogue's card (agentgym methods herl): knobs are TrainConfig fields (agentgym train --set KNOB=VALUE)

METHODS: tuple[Method, ...] = (
    Method("herl", "HeRL", "trainer",
           "hindsight-guided resampling: failed rollouts' unmet rubric criteria told back to the policy, the guided "
           "samples trained as extra group members under the unguided prompt, plus an improvement bonus",
           needs=("judge", "group"), paper=cite("HeRL"), code="agentgym.baselines.hindsight:HeRL",
           choices=("failed = at least one checklist criterion judged unmet; a rollout with a criterion the judge "
                    "could not decide gets no guidance; one that meets every criterion gets none",
                    "the guided prompt: the first observation with a hindsight block appended to its last user "
                    "message: the failed attempt's actions (one line per turn) and one '- criterion' line per unmet "
                    "criterion",
                    "herl_k = 1 guided episode per failed rollout, same task seed, the training sampler's "
                    "temperature, stop strings and turn limit; it joins the failed rollout's group",
                    "trained under the unguided prompt: the guided prompt tokens are swapped for the original's, "
                    "the response tokens kept",
                    "off-policy correction: each guided token's advantage x min(pi_old(a|unguided) / "
                    "pi_guided(a|guided), herl_is_clip), truncated importance sampling with herl_is_clip = 2 "
                    "(None: weight 1); the PPO ratio stays pi_theta / pi_old under the unguided prompt",
                    "bonus: herl_bonus = 0.2 x b on the failed rollout's last turn, b = mean R(guided) - R(original), "
                    "R the training return; signed (guidance that hurt lowers it), 0 when guidance changed nothing",
                    "checklists: 'tool_use' (the verified ToolUse-v0 checklist), 'choices' (the diagnostics' gold "
                    "choices) or an import path; judge: herl_judge ('rule' or an LLM judge endpoint)"),
           train={"algo": "grpo", "herl": True, "herl_checklists": "tool_use", "herl_judge": "rule",
                  "scorer": "cm2", "scorer_kwargs": {"judge": "rule"}, "estimator": "grpo",
                  "env_id": "agentgym/ToolUse-v0", "env_kwargs": {}, "stop": ["</tool_call>"]},
           knobs_into="config"),
)  # fmt: skip
