"""RC-GRPO: reward-conditioned GRPO. Two reward tokens, ``<|high_reward|>`` and ``<|low_reward|>``, join the
vocabulary; a rollout's prompt carries one of them, and the policy learns what each asks for.

- Stage 1, SFT (:func:`sft_examples`): each trajectory of a mixed-quality set (e.g. an oracle's and a random agent's
  episodes) is tokenised with the token of its outcome bucket (``high`` when its return is at least
  ``threshold``) in its prompt, in the RL rollouts' token layout; :func:`sft_step_on` takes one step on them. In
  ``agentgym train`` the warm start's ``sft_steps`` (and ``sft_steps_per_iteration``) are these steps when
  ``reward_conditioning`` is on (:func:`conditioned_sft_step`: the env's ``rc_sft_agents`` play in turn).
- Stage 2, GRPO (:func:`conditioned_rollouts`): each group of ``group_size`` rollouts of one task mixes the tokens,
  ``round(rc_high_share * group_size)`` of them ``high`` (at least one of each, :func:`group_tokens`); the
  advantages come from the true reward over the whole group, whatever token each rollout saw.
- Evaluation conditions on ``high`` (:class:`RewardTokenPrompt`'s default: an episode reset without the option).

The token goes at the start of the first user message (:func:`condition_messages`), so it is a prompt token and
never in the loss mask; :func:`add_reward_tokens` also bans both tokens from the policy's output (their logits are
set to ``MASKED_LOGIT`` in the LM head's output, in sampling and scoring alike), so a rollout never samples one.

>>> group_tokens(4), group_tokens(3, rc_high_share=0.5)
(['high', 'high', 'low', 'low'], ['high', 'high', 'low'])
>>> condition_messages([{"role": "user", "content": "Book a flight."}], "high")[0]["content"]
'<|high_reward|>\\nBook a flight.'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agentgym.baselines.checkpoint import TrainState
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import EnvMaker
from agentgym.baselines.rollout import HFPolicy, Rollout, derive_seed, run_episodes
from agentgym.baselines.update import sft_update
from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.running.pool import EnvPool

__all__ = [
    "HIGH",
    "LOW",
    "MASKED_LOGIT",
    "METHODS",
    "REWARD_TOKENS",
    "ConditionedEnvMaker",
    "RewardTokenPrompt",
    "add_reward_tokens",
    "condition_messages",
    "condition_metrics",
    "conditioned_rollouts",
    "conditioned_sft_step",
    "group_tokens",
    "reward_token_ids",
    "sft_examples",
    "sft_step_on",
]

HIGH = "<|high_reward|>"
LOW = "<|low_reward|>"
#: Condition name -> its token.
REWARD_TOKENS: Mapping[str, str] = {"high": HIGH, "low": LOW}
#: The logit the reward tokens get in every forward of the policy: finite (entropies stay finite), exp() is 0.
MASKED_LOGIT = -1e4


def reward_token_ids(tokenizer: Any) -> list[int]:
    """The ids of ``[HIGH, LOW]`` in ``tokenizer`` (``ValueError`` when they were not added)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (HIGH, LOW)]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        raise ValueError("the tokenizer has no reward tokens: call add_reward_tokens(model, tokenizer) first")
    return [int(i) for i in ids]


def add_reward_tokens(model: Any, tokenizer: Any) -> list[int]:
    """Add ``HIGH`` and ``LOW`` to ``tokenizer`` as special tokens, grow ``model``'s embeddings to hold them, and ban
    them from its output (a forward hook on the LM head sets their logits to ``MASKED_LOGIT``). Returns their ids.

    New embedding rows are set deterministically (the same for every model built the same way, so the policy and
    its frozen reference agree): ``mean +- s * u``, with ``mean`` the old rows' mean, ``s`` their mean distance from
    it and ``u`` a unit vector drawn from a generator seeded 0; a tokenizer that already holds the tokens (a saved
    RC-GRPO model) keeps its rows. Calling it again on the same model adds nothing."""
    added = tokenizer.add_tokens([HIGH, LOW], special_tokens=True)
    ids = reward_token_ids(tokenizer)
    emb = model.get_input_embeddings()
    if max(ids) >= emb.weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        emb = model.get_input_embeddings()
    if added:
        with torch.no_grad():
            old = emb.weight[: min(ids)].float()
            mean = old.mean(0)
            spread = (old - mean).norm(dim=1).mean()
            u = torch.randn(old.shape[1], generator=torch.Generator().manual_seed(0))
            u = u / u.norm()
            for sign, i in zip((1.0, -1.0), ids, strict=True):
                emb.weight[i] = (mean + sign * spread * u).to(emb.weight.dtype)
            head = model.get_output_embeddings()
            if head is not None and head.weight is not emb.weight:
                head.weight[ids] = head.weight[: min(ids)].mean(0).to(head.weight.dtype)
    head = model.get_output_embeddings()
    if head is not None and not getattr(head, "_reward_tokens_banned", False):
        banned = torch.tensor(ids)

        def ban(_module: Any, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
            return out.index_fill(-1, banned.to(out.device), MASKED_LOGIT)

        head.register_forward_hook(ban)
        head._reward_tokens_banned = True
    return ids


def condition_messages(messages: Sequence[Mapping[str, Any]], condition: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` with the reward token of ``condition`` (``"high"`` or ``"low"``) and a newline put
    before the first user message's text (the first message when none is a user's)."""
    if condition not in REWARD_TOKENS:
        raise ValueError(f"condition must be one of {tuple(REWARD_TOKENS)}, got {condition!r}")
    out = [dict(m) for m in messages]
    if not out:
        raise ValueError("no messages to condition")
    k = next((i for i, m in enumerate(out) if m.get("role") == "user"), 0)
    out[k]["content"] = f"{REWARD_TOKENS[condition]}\n{out[k].get('content') or ''}"
    return out


def group_tokens(group_size: int, rc_high_share: float = 0.5) -> list[str]:
    """The conditions of one group's rollouts: the first ``round(rc_high_share * group_size)`` are ``"high"``,
    clipped so that each of the two appears at least once; the rest ``"low"``."""
    if group_size < 2:
        raise ValueError(f"reward conditioning needs group_size >= 2 (both tokens in every group), got {group_size}")
    if not 0.0 < rc_high_share < 1.0:
        raise ValueError(f"rc_high_share must be in (0, 1), got {rc_high_share}")
    high = min(max(int(np.floor(rc_high_share * group_size + 0.5)), 1), group_size - 1)
    return ["high"] * high + ["low"] * (group_size - high)


class RewardTokenPrompt(gym.Wrapper):
    """Puts the reward token of ``condition`` in the env's first message (:func:`condition_messages`); the reset
    option ``reward_token`` (``"high"`` or ``"low"``) overrides it for one episode. ``info["reward_token"]`` says
    which one the episode got."""

    def __init__(self, env: gym.Env, condition: str = "high"):
        super().__init__(env)
        if condition not in REWARD_TOKENS:
            raise ValueError(f"condition must be one of {tuple(REWARD_TOKENS)}, got {condition!r}")
        self.condition = condition

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        own = dict(options or {})
        condition = own.pop("reward_token", self.condition)
        obs, info = self.env.reset(seed=seed, options=own)
        return condition_messages(obs, condition), {**info, "reward_token": condition}


@dataclass(frozen=True)
class ConditionedEnvMaker:
    """An env factory (``EnvMaker``) whose envs are wrapped in :class:`RewardTokenPrompt` (picklable, for pools)."""

    make_env: Callable[[], Any]
    condition: str = "high"

    def __call__(self) -> Any:
        return RewardTokenPrompt(self.make_env(), self.condition)


def conditioned_rollouts(state: TrainState, config: TrainConfig, task_seeds: list[int], sample_seed: int,
                         group_offset: int, tables: Sequence[Any] | None = None) -> list[Rollout]:  # fmt: skip
    """Stage 2's rollouts, in place of ``credit.training_rollouts``: ``group_size`` rollouts of each task seed on the
    trainer's envs wrapped in :class:`RewardTokenPrompt`, rollout ``j`` of a group conditioned on
    ``group_tokens(group_size, rc_high_share)[j]``. Sampling seeds are those of ``collect_rollouts``
    (``derive_seed(sample_seed, j)``), so a policy that ignores the token samples exactly the plain run's batch."""
    make_env = ConditionedEnvMaker(EnvMaker.of(config, tables=tables))
    n = len(task_seeds) * config.group_size
    if config.env_pool != "list" and isinstance(state.envs, list):
        from agentgym.running.pool import make_pool

        state.envs = make_pool(config.env_pool, config.env_id, n, make_env=make_env, **config.env_pool_kwargs)
    if isinstance(state.envs, list):  # envs another phase made (the critic warm-up's) get the wrapper too
        state.envs[:] = [e if isinstance(e, RewardTokenPrompt) else RewardTokenPrompt(e) for e in state.envs]
        while len(state.envs) < n:
            state.envs.append(make_env())
    envs = state.envs if isinstance(state.envs, EnvPool) else state.envs[:n]
    conditions = group_tokens(config.group_size, config.rc_high_share)
    policy = state.policy
    was_training = policy.model.training
    policy.model.eval()
    try:
        rollouts = run_episodes(
            policy, envs,
            seeds=[int(s) for s in task_seeds for _ in conditions],
            group_ids=[group_offset + b for b in range(len(task_seeds)) for _ in conditions],
            sample_seeds=[derive_seed(sample_seed, j) for j in range(n)],
            config=config.rollout_config, generation_batch=config.generation_batch,
            options=[{"reward_token": c} for _ in task_seeds for c in conditions],
        )  # fmt: skip
    finally:
        policy.model.train(was_training)
    policy.sleep()
    return rollouts


def condition_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Per condition, the mean return and success of a batch (``rc_high_reward``, ``rc_low_success``, ...), and the
    share of groups whose returns all tie (``rc_zero_std_group_frac``: no GRPO signal; a policy that follows its
    token makes fewer of them)."""
    out: dict[str, float] = {}
    for cond in REWARD_TOKENS:
        rs = [r for r in rollouts if r.reset_info.get("reward_token") == cond]
        if rs:
            out[f"rc_{cond}_reward"] = float(np.mean([r.outcome for r in rs]))
            out[f"rc_{cond}_success"] = float(np.mean([r.success for r in rs]))
    groups: dict[Any, list[float]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(r.outcome)
    out["rc_zero_std_group_frac"] = float(np.mean([np.std(v) == 0.0 for v in groups.values()])) if groups else 0.0
    return out


def sft_examples(policy: HFPolicy, trajectories: Sequence[Trajectory], *, threshold: float = 0.5) -> list[Rollout]:
    """Stage 1's data: each text trajectory (``agentgym run``'s records, any agent) in the RL rollouts' token
    layout, with the token of its outcome bucket in the prompt: ``high`` when its return (the sum of its turn
    rewards) is at least ``threshold``, else ``low``. Actions are tokenised with the end-of-message token (loss mask
    1, log-probs 0); the env's messages between them have mask 0. ``reset_info["reward_token"]`` holds the bucket."""
    examples = []
    for traj in trajectories:
        ret = float(sum(t.reward for t in traj.turns))
        cond = "high" if ret >= threshold else "low"
        prompt = policy.prompt_ids(condition_messages(traj.initial_observation, cond))
        r = Rollout(prompt_ids=prompt, group_id=traj.group_id, seed=traj.seed or 0, task_id=traj.task_id)
        r.initial_observation, r.reset_info = list(traj.initial_observation), {**traj.reset_info, "reward_token": cond}
        for k, turn in enumerate(traj.turns):
            tokens = [*policy.encode(turn.action), policy.end_token_id]
            start = len(r.response_ids)
            r.response_ids += tokens
            r.loss_mask += [1] * len(tokens)
            r.rollout_logprobs += [0.0] * len(tokens)
            r.turn_spans.append((start, len(r.response_ids)))
            r.action_spans.append((start, len(r.response_ids)))
            r.actions.append(turn.action)
            r.turn_rewards.append(float(turn.reward))
            r.observations.append(list(turn.observation))
            r.infos.append(dict(turn.info))
            if k + 1 < len(traj.turns):
                r.append_observation(policy.observation_ids(turn.observation, last_token=policy.end_token_id))
        r.terminated = bool(traj.turns and traj.turns[-1].terminated)
        r.truncated = bool(traj.turns and traj.turns[-1].truncated)
        r.success = ret >= threshold
        examples.append(r)
    return examples


def sft_step_on(state: TrainState, config: TrainConfig, examples: Sequence[Rollout]) -> float:
    """One supervised step on ``examples`` (:func:`sft_examples`): the mean negative log-likelihood of their action
    tokens (the trainer's warm-start loss, ``warmup.sft_step``, on given data); returns the loss."""
    if not examples:
        raise ValueError("no SFT examples")
    return sft_update(state, config, list(examples))


def conditioned_sft_step(state: TrainState, config: TrainConfig, it: int, step: int) -> tuple[float, list[str]]:
    """Stage 1 in the trainer: ``sft_batch`` episodes played by the env's ``rc_sft_agents`` in turn (episode ``i``
    by agent ``i mod len``; text episodes, the task seeds of ``warmup.sft_step``), bucketed by outcome at
    ``rc_threshold`` (:func:`sft_examples`), and one supervised step on them. Returns the loss and each example's
    bucket."""
    from agentgym.running.episode import make_agent, run_episode

    seeds = config.seeds.demonstrations(it, step).integers(0, config.task_seed_range, size=config.sft_batch)
    env = EnvMaker.of(config, shaped=False)()
    try:
        agents = [make_agent(name, env) for name in config.rc_sft_agents]
        trajs = [run_episode(env, agents[i % len(agents)], seed=int(s), env_id=config.env_id)
                 for i, s in enumerate(seeds)]  # fmt: skip
    finally:
        env.close()
    failed = [t.error for t in trajs if t.error]
    if failed:
        raise ValueError(f"reward-conditioned SFT: an episode failed: {failed[0]}")
    examples = sft_examples(state.policy, trajs, threshold=config.rc_threshold)
    return sft_update(state, config, examples), [r.reset_info["reward_token"] for r in examples]


METHODS: tuple[Method, ...] = (
    Method("rc_grpo", "RC-GRPO", "trainer",
           "reward-conditioned GRPO: <|high_reward|>/<|low_reward|> prompt tokens mixed within each group, advantages "
           "from the true reward, evaluation conditioned on high; SFT data bucketed by outcome",
           needs=("outcome", "group"), paper=cite("RC-GRPO"),
           code="agentgym.baselines.reward_conditioning:group_tokens",
           choices=("the token mix per group: round(rc_high_share x group_size) high, the rest low, at least one of "
                    "each; rc_high_share = 0.5",
                    "the token goes at the start of the first user message, followed by a newline",
                    "new embedding rows: the old rows' mean +- their mean spread along one fixed random direction; the "
                    "tokens' output logits are masked (never sampled, never in the loss)",
                    "stage 1 buckets: high when a trajectory's return >= rc_threshold = 0.5; in agentgym train the "
                    "warm start's sft_steps play the env's rc_sft_agents (oracle and random) in turn, bucketed",
                    "evaluation (and any episode without a reset option) is conditioned on high"),
           train={"algo": "grpo", "reward_conditioning": True, "rc_high_share": 0.5},
           knobs_into="config"),
)  # fmt: skip
