"""Advantage estimators: groups of scored rollouts -> per-turn advantages -> per-token advantages.

Framework-free (numpy in, numpy out, float64 inside; torch tensors are accepted and converted) so any RL
trainer can import it. Notation and formulas follow docs/rewards.md, 'Advantage estimators' (the notation is
defined at the top of that guide); the conventions every estimator keeps (groups, ragged per-turn arrays, the
population z-score, finite inputs, order independence) are in :mod:`agentgym.rewards.advantages.base`.
Turn-level advantages reach tokens only through :func:`broadcast_to_tokens`, with explicit turn spans.

One module per method family: ``base`` (shared helpers, ``EstimatorSpec``), ``signals`` (``TurnSignal``,
``TURN_SIGNALS``, observation keys), ``batch`` (``TurnBatch``), ``group`` (GRPO, Dr. GRPO, RLOO), ``gae`` (token
GAE, ``masked_whiten``, turn-PPO), ``tokens`` (turn <-> token spans), ``turn_level`` (GTPO, IGPO, SIOP, A^2TGPO),
``anchor_groups`` (GiGPO), ``mixed`` (MatchTIR, MAPO), ``userrl``, ``multi_turn`` (multi-turn GRPO), ``gopo``
(rank-only), ``lampo`` (pairwise, log-prob weighted), ``serl`` (feedback-reweighted), ``hiper`` (subgoal segments),
``dual_track`` (exploration/execution phases) and ``registry`` (``ESTIMATORS`` collected from the modules'
``REGISTERED`` tuples).

Estimators by name (``ESTIMATORS`` / :func:`get_estimator`), each ``fn(batch: TurnBatch, **params) ->
list[np.ndarray]`` (per-turn advantages): ``grpo``, ``dr_grpo``, ``rloo`` (trajectory-level, every turn gets
the trajectory's value), ``gtpo``, ``turn_ppo``, ``igpo``, ``siop``, ``a2tgpo``, ``gigpo`` (state anchors),
``gigpo_obs`` (observation anchors), ``matchtir``, ``mapo``, ``userrl``, ``mt_grpo`` (a verified per-turn signal
plus the outcome), ``gopo``, ``lampo``, ``serl``, ``hiper``, ``dual_track``. Token-level PPO GAE
(:func:`token_gae`) works on token arrays and is not registered.

>>> b = TurnBatch([[0.0, 1.0], [0.0, 0.0], [1.0]], group_ids=["q", "q", "r"])
>>> [a.round(4).tolist() for a in get_estimator("grpo")(b)]
[[1.0, 1.0], [-1.0, -1.0], [0.0]]
>>> broadcast_to_tokens([1.0, -0.5], [(0, 2), (4, 5)], length=6).tolist()
[1.0, 1.0, 0.0, 0.0, -0.5, 0.0]
"""

from __future__ import annotations

from agentgym.rewards.advantages.anchor_groups import gigpo
from agentgym.rewards.advantages.base import EstimatorSpec, group_zscore
from agentgym.rewards.advantages.batch import PHASES, TurnBatch
from agentgym.rewards.advantages.dual_track import dual_track_advantages, exploration_reward, turn_phases
from agentgym.rewards.advantages.faith import faith_advantages, geometric_reward, modulate
from agentgym.rewards.advantages.gae import masked_whiten, token_gae, token_gae_torch, turn_gae
from agentgym.rewards.advantages.gopo import gopo_advantages, gopo_turns, mean_ranks
from agentgym.rewards.advantages.group import dr_grpo, grpo, rloo
from agentgym.rewards.advantages.hiper import hiper_advantages, subgoal_achieved, subgoal_segments
from agentgym.rewards.advantages.lampo import lampo_advantages, reference_score, rouge_l
from agentgym.rewards.advantages.mixed import mapo_mixed, matchtir_dual
from agentgym.rewards.advantages.multi_turn import mt_grpo
from agentgym.rewards.advantages.registry import ESTIMATORS, OUTCOME_ESTIMATORS, get_estimator
from agentgym.rewards.advantages.serl import SERL_FEATURES, agrees, expert_references, serl_advantages, serl_criticality
from agentgym.rewards.advantages.signals import (
    TURN_SIGNALS,
    TurnSignal,
    flip_signals,
    observation_anchors,
    observation_key,
    signal_progress,
)
from agentgym.rewards.advantages.tokens import (
    action_char_span,
    action_token_span,
    broadcast_to_action_tokens,
    broadcast_to_tokens,
    broadcast_to_tokens_batch,
    place_turn_rewards,
)
from agentgym.rewards.advantages.turn_level import (
    a2tgpo_advantages,
    adaptive_clip_scale,
    gtpo,
    igpo_advantages,
    normalize_turn_returns,
    siop_advantages,
    turn_group_normalize,
    turn_returns,
)
from agentgym.rewards.advantages.userrl import userrl_advantages, userrl_trajectory_score, userrl_turn_credits

__all__ = [
    "ESTIMATORS",
    "OUTCOME_ESTIMATORS",
    "PHASES",
    "SERL_FEATURES",
    "TURN_SIGNALS",
    "EstimatorSpec",
    "TurnBatch",
    "TurnSignal",
    "a2tgpo_advantages",
    "action_char_span",
    "action_token_span",
    "adaptive_clip_scale",
    "agrees",
    "broadcast_to_action_tokens",
    "broadcast_to_tokens",
    "broadcast_to_tokens_batch",
    "dr_grpo",
    "dual_track_advantages",
    "expert_references",
    "exploration_reward",
    "faith_advantages",
    "flip_signals",
    "geometric_reward",
    "get_estimator",
    "gigpo",
    "gopo_advantages",
    "gopo_turns",
    "group_zscore",
    "grpo",
    "gtpo",
    "hiper_advantages",
    "igpo_advantages",
    "lampo_advantages",
    "mapo_mixed",
    "masked_whiten",
    "matchtir_dual",
    "mean_ranks",
    "modulate",
    "mt_grpo",
    "normalize_turn_returns",
    "observation_anchors",
    "observation_key",
    "place_turn_rewards",
    "reference_score",
    "rloo",
    "rouge_l",
    "serl_advantages",
    "serl_criticality",
    "signal_progress",
    "siop_advantages",
    "subgoal_achieved",
    "subgoal_segments",
    "token_gae",
    "token_gae_torch",
    "turn_gae",
    "turn_group_normalize",
    "turn_phases",
    "turn_returns",
    "userrl_advantages",
    "userrl_trajectory_score",
    "userrl_turn_credits",
]
