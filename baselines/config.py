"""The reference trainer's configuration: ``TrainConfig`` (every knob, checked when it is built), the presets, and
the named seed streams of a run.

>>> config = load_config("tiny", overrides={"algo": "ppo", "estimator": "turn_ppo"})
>>> config.estimator_name, config.loss_mode
('turn_ppo', 'token-mean')
>>> TrainConfig(algo="grpo", estimator="turn_ppo")
Traceback (most recent call last):
...
ValueError: estimator 'turn_ppo' needs a critic: use algo='ppo' (algo 'grpo' is critic-free)
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from agentgym.baselines.backends import BACKENDS
from agentgym.baselines.components import (
    FALLBACK_SCORERS,
    check_scorer,
    check_values,
    did_you_mean,
    make_judge,
    wrapper_specs,
)
from agentgym.baselines.rollout import RolloutConfig, derive_seed
from agentgym.rewards.advantages import ESTIMATORS, OUTCOME_ESTIMATORS, TURN_SIGNALS, TurnSignal
from agentgym.rewards.advantages.signals import SignalMode
from agentgym.running.pool import POOLS

__all__ = ["ALGOS", "BRANCH_ESTIMATORS", "BRANCH_TURNS", "CRITIC_ESTIMATORS", "CRITIC_TRUNKS", "LOSS_AGG_MODES",
           "OTHER_NAMES", "PRESETS", "RATIO_LEVELS", "SCORERS", "SCORER_FUSIONS", "SIGNAL_ESTIMATORS", "TREE_TARGETS",
           "Seeds", "TrainConfig", "did_you_mean", "load_config"]  # fmt: skip

#: ``ipr``: IPR's iterations (step-level DPO + SFT on pairs from expert-path forks, baselines/ipr.py) in place of the
#: policy-gradient update. ``archer``: ArCHer's iterations (an off-policy turn-level Q/V critic over a replay buffer,
#: the token actor on Q - V; baselines/archer.py).
ALGOS = ("grpo", "dr_grpo", "rloo", "ppo", "ipr", "archer")
#: Estimators that need a critic (``algo="ppo"``); ``None`` there is token-level GAE.
CRITIC_ESTIMATORS = ("turn_ppo",)
#: What PPO's value head reads (``critic_trunk``): the policy's last hidden state, or a copy of the policy's decoder
#: of its own that the value loss trains (baselines/update.py ``TrunkValueHead``).
CRITIC_TRUNKS = ("shared", "separate")
#: Estimators that read a verified per-turn signal (``TrainConfig.turn_signal``) from the env's ``info``.
SIGNAL_ESTIMATORS = ("mt_grpo", "faith")
#: Estimators over forks from the states before chosen turns (``branch_k`` >= 1; baselines/branches.py): ``vine``
#: (VinePPO's Monte-Carlo state values) and ``tree`` (turn-level groups of the K + 1 actions taken in one state).
BRANCH_ESTIMATORS = ("vine", "tree")
#: Which turns the branch estimators fork (``branch_turns``; baselines/branches.py ``choose_turns``).
BRANCH_TURNS = ("all", "uncertain", "tail", "prefix", "entropy")
#: What ``tree`` scores each action of a turn group by (``tree_target``; TL-GRPO's immediate and max-to-go).
TREE_TARGETS = ("return", "immediate", "max_to_go")
#: Turn scorer names that work without a catalogue card (``scorer`` also takes any card of kind "scorer" or an import
#: path "package.module:Class" of a TurnScorer subclass: baselines/components.py).
SCORERS = tuple(FALLBACK_SCORERS)
#: How a scorer's per-turn rewards reach the advantages: added to the turn rewards, or InfoPO's gated fusion.
SCORER_FUSIONS = ("auto", "add", "infopo")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "constant")
#: The importance ratio the clipped loss uses: each token's own, or AT^2PO's one ratio per turn (``ratio_level``).
RATIO_LEVELS = ("token", "turn")
#: HINT-SD (``self_distill``, baselines/self_distill.py): how the failure turn t* is picked, and which KL the
#: distillation term's gradient follows (``distill_estimator``, ``update.distill_term``).
SELF_DISTILL_SELECTORS = ("rule", "judge")
DISTILL_ESTIMATORS = ("forward", "reverse")
#: Where the rollout envs live: ``"list"`` (stepped in the trainer's thread) or an ``agentgym.running.pool`` kind.
ENV_POOLS = ("list", *POOLS)


def refuse_with(mode: str, why: str, clashes: Mapping[str, object]) -> None:
    """Refuse a mode's clashing settings: ``ValueError`` naming each of ``clashes`` that is set (truthy), and why.

    >>> refuse_with("herl", "resamples in this process", {"branch_k": 2, "env_pool 'ray'": False})
    Traceback (most recent call last):
    ValueError: herl resamples in this process: it cannot run with branch_k
    """
    named = [name for name, on in clashes.items() if on]
    if named:
        raise ValueError(f"{mode} {why}: it cannot run with {', '.join(named)}")


@dataclass
class TrainConfig:
    """Every knob of a run. ``model="tiny"`` builds ``build_tiny_model(model_seed)``; a name of
    ``agentgym.tools.named_models.NAMED_MODELS`` (``"smollm2-135m"``) loads that model; otherwise a local path.
    Invalid values and combinations raise ``ValueError`` here, not at the first iteration."""

    # environment and tasks
    env_id: str = "agentgym/SearchQA-v0"
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"dataset": "tiny"})
    batch_tasks: int = 2  # tasks (groups) per iteration
    group_size: int = 4  # rollouts per task, sharing its seed
    task_seed_range: int = 1_000_000  # task seeds are drawn from [0, task_seed_range)
    # policy and sampling
    model: str = "tiny"
    model_seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"  # model weights and optimizer state; log-probs are always computed in float32
    amp_dtype: str | None = None  # e.g. "bfloat16": forward passes under torch.autocast, float32 master weights
    gradient_checkpointing: bool = False
    # train only the top N decoder layers and the final norm; everything else (embeddings, and with them a tied LM
    # head such as SmolLM2's, the lower layers) is frozen and left out of the optimizer (None: the whole model)
    trainable_layers: int | None = None
    max_turns: int = 3
    max_new_tokens: int = 32
    max_total_tokens: int = 2048
    temperature: float = 1.0
    stop: tuple[str, ...] = ("</search>", "</answer>")
    generation_batch: int | None = None  # rows per batched generation (None: all rollouts of an iteration at once)
    rollout_backend: str = "hf"  # a name of agentgym.baselines.backends.BACKENDS: "hf", "vllm", "remote"
    backend_kwargs: dict[str, Any] = field(default_factory=dict)  # the back-end's arguments (vLLM, remote server)
    # "list" (envs stepped in this thread), or an agentgym.running.pool kind: "serial", "thread", "ray"
    env_pool: str = "list"
    env_pool_kwargs: dict[str, Any] = field(default_factory=dict)  # the pool's arguments (RayPool: address, num_cpus)
    # algorithm
    algo: str = "grpo"
    estimator: str | None = None  # turn-level estimator name (None: the algo's own; with ppo: token-level GAE)
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    progress_key: str | None = None  # dense reward: ProgressReward(key, progress_coef) wraps the env
    progress_coef: float = 1.0
    # post-episode turn scorer run each iteration: a card of kind "scorer", a SCORERS name or "pkg.module:Class"
    scorer: str | None = None
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)  # its constructor's arguments (client: a judge URL)
    scorer_coef: float = 1.0  # the scorer's weight ("add": on its rewards; "infopo": InfoPO's beta)
    # "add": coef x scorer rewards join the turn rewards; "infopo": A = A_out + coef*g*z(A_int), g = sigmoid(-std/tau)
    # over each group (InfoPO, credit.infopo_advantages); "auto": "infopo" for CounterfactualInformationGain
    scorer_fusion: str = "auto"
    infopo_tau: float = 0.05  # InfoPO's gate temperature tau
    # env reward wrappers, outermost last (after ProgressReward): [{"name": card or "pkg.module:Class", **kwargs}]
    # ("component": the wrapper's component name, "table": its cross-batch table's arguments; components.py)
    reward_wrappers: list[dict[str, Any]] = field(default_factory=list)
    # S2D: the weight c(k) of one shaping component over iterations k: {"component": "shaping", "start": k_switch,
    # "ramp": m, "final": 1.0}: 0 before start, then final (ramp 0) or a linear ramp over m iterations (credit.py)
    shaping_schedule: dict[str, Any] | None = None
    # AIRS (baselines/airs.py): each iteration only one of these reward_wrappers components counts, chosen by UCB1
    # over the extrinsic-return gain seen while each was active (None: all count)
    airs_arms: list[str] | None = None
    airs_c: float = 0.1  # AIRS's UCB1 exploration weight
    airs_window: int = 10  # AIRS: an arm's score averages its last airs_window gains
    # the reward components a turn's training reward sums: "auto" (outcome-only estimators, OUTCOME_ESTIMATORS: the
    # "outcome" alone, plus "progress" with progress_key; the others: the env's whole reward), "all", or the names
    reward_components: str | tuple[str, ...] = "auto"
    turn_signal_key: str | None = None  # mt_grpo's verified per-turn signal: an info key (None: TURN_SIGNALS[env_id])
    turn_signal_mode: str | None = None  # "value" or "delta" (None: TURN_SIGNALS' mode for its key, else "value")
    # a binary turn signal corrupted at a known rate (the noisy-signal arms of a credit experiment): each reported 0/1
    # is flipped with this probability, drawn from (seed, the rollout's task seed, its place in the batch)
    turn_signal_flip: float = 0.0
    # where the turn signal comes from: "info" (turn_signal_key / TURN_SIGNALS, the env's verified signal) or "scorer"
    # (the turn scorer's per-turn rewards: a judged or learned signal; a turn it could not score has no signal, and
    # its rewards then join the training rewards only through the signal, never added to them)
    turn_signal_source: str = "info"
    # > 0: coef x the progress a binary turn signal implies (signal_progress: Phi = the share of signalled turns passed
    # while every signal so far is 1) is added to each turn's training reward; the oracle,
    # corrupted (turn_signal_flip) or judged (turn_signal_source="scorer") signal's analogue of progress_key
    signal_progress_coef: float = 0.0
    # branch credit (BRANCH_ESTIMATORS, baselines/branches.py): branch_k forks from the env snapshot and token prefix
    # before each chosen turn: "all" turns, or "uncertain", the branch_frac of the batch's turns whose least likely
    # sampled token was least likely
    branch_k: int = 0  # 0: off
    branch_turns: str = "all"
    branch_frac: float = 0.5
    branch_tail: int = 1  # branch_turns="tail" (BranPO): fork the last branch_tail turns of each rollout
    branch_prefix: int = 1  # branch_turns="prefix" (PORTool): fork the first branch_prefix turns of each rollout
    branch_difficulty: bool = False  # BranPO: a task keeps ceil((1 - |2p - 1|) n) of its n chosen turns (p: success)
    branch_mask_ties: bool = False  # BranPO: advantage 0 at forked states whose K fork values all tie (K >= 2)
    branch_resample: int = 0  # T^2PO: resample a main rollout from its first turn without progress, up to r times
    tree_target: str = "return"  # tree's value of an action (TREE_TARGETS; TL-GRPO: "immediate", "max_to_go")
    tree_std: bool = False  # tree: divide each turn group by its std (+ 1e-6), as GRPO does
    tree_blend: float = 1.0  # PORTool: alpha A^fork + (1 - alpha) A^traj on forked turns (1: tree; 0: RLOO)
    step_bonus: float = 0.0  # PORTool: + beta * 1[action_valid] on each turn-group member's value
    branch_depth: int = 1  # AT^2PO: levels of forks of forks (tree, default tree knobs only); 1: one level
    # TL-GRPO: "best" plays each episode again from its reset state, going on from the best of K + 1 candidate actions
    # (by immediate reward) at every turn; "main": the main rollouts as sampled
    tree_continue: str = "main"
    # T^2PO's thinking intervention (baselines/t2po.py, hf back-end): sampling in windows of think_window tokens, the
    # text think_text is inserted when a window's mean surprisal changed by less than think_delta from the previous
    # window's (0: never); the inserted tokens are kept out of the loss
    think_intervention: bool = False
    think_window: int = 8
    think_delta: float = 0.05
    think_text: str = " Wait, let me think again. "
    # IPR (algo="ipr", baselines/ipr.py): ipr_k continuations per step value, a pair where the expert's Q beats the
    # agent's by more than ipr_margin; step DPO with ipr_beta + ipr_sft_coef x SFT on the expert actions
    ipr_k: int = 4
    ipr_margin: float = 0.0
    ipr_beta: float = 0.1
    ipr_sft_coef: float = 1.0
    # ArCHer (algo="archer", baselines/archer.py): a FIFO buffer of archer_buffer turn transitions; archer_critic_steps
    # TD steps an iteration on archer_batch of them, targets Polyak-averaged with archer_tau; heads linear
    # (archer_hidden > 0: an MLP) on the policy's detached hidden states ("shared") or a decoder copy ("separate");
    # the actor after archer_warmup iterations, token baseline "none" or "mean"
    archer_buffer: int = 1024
    archer_batch: int = 32
    archer_critic_steps: int = 16
    archer_tau: float = 0.1
    archer_critic_lr: float = 1e-3
    archer_hidden: int = 0
    archer_trunk: str = "shared"
    archer_token_baseline: str = "none"
    archer_warmup: int = 0
    # paired groups: each task is played as one group per entry, its resets given that entry's options (Co-Reward:
    # SearchQA's [{"wording": "original"}, {"wording": "reworded"}]); None: one group per task, no options
    group_options: list[dict[str, Any]] | None = None
    # RC-GRPO (baselines/reward_conditioning.py): reward tokens in the vocabulary, each group's prompts mixing them
    # (round(rc_high_share x group_size) high, at least one of each), evaluation conditioned on high
    reward_conditioning: bool = False
    rc_high_share: float = 0.5
    # its stage 1: the SFT steps (sft_steps, sft_steps_per_iteration) play these agents of the env in turn, each
    # episode in the prompt with the token of its outcome bucket (high when its return >= rc_threshold)
    rc_sft_agents: list[str] = field(default_factory=lambda: ["oracle", "random"])
    rc_threshold: float = 0.5
    # HeRL (baselines/hindsight.py): each rollout with a checklist criterion judged unmet (builder herl_checklists,
    # judge herl_judge) is resampled herl_k times from a prompt listing what it missed; the guided samples join its
    # group under the unguided prompt, each token's advantage x min(pi(a|unguided) / pi(a|guided), herl_is_clip)
    # (None: 1), and the failed rollout gets herl_bonus x (mean R(guided) - R(original)) (component "herl_bonus")
    herl: bool = False
    herl_k: int = 1
    herl_checklists: str = "tool_use"
    herl_judge: str | dict[str, Any] = "rule"
    herl_is_clip: float | None = 2.0
    herl_bonus: float = 0.2
    # HINT-SD (baselines/self_distill.py): on each failed rollout the turn t* a selector picks ("rule": the first bad
    # verified turn signal; "judge": distill_judge's first yes to "is this where it went wrong?"), the policy shown
    # feedback on t* as teacher, distilled into the policy on t*'s action tokens: + distill_coef x the token-mean of
    # exp(d) - d - 1 ("forward", d = log teacher - log student) or stopgrad(-d) log student ("reverse"); None: off
    self_distill: str | None = None
    distill_coef: float = 0.1
    distill_estimator: str = "forward"
    distill_judge: str | dict[str, Any] = "rule"  # the judge selector's judge: "rule" or an endpoint (make_judge)
    # the token budget: stop the run once it has sampled this many tokens (main rollouts and forks; None: no limit)
    max_sampled_tokens: int | None = None
    gamma: float = 1.0  # PPO's GAE (token-level, or over turns with estimator="turn_ppo"); vine's and tree's returns
    lam: float = 0.95
    whiten_advantages: bool = True  # PPO only
    eps_low: float = 0.2
    eps_high: float = 0.28
    # "token": each token's ratio is clipped; "turn" (AT^2PO): one ratio per turn, exp(mean token log-ratio over the
    # turn's loss tokens), clipped per turn (RATIO_LEVELS)
    ratio_level: str = "token"
    kl_coef: float = 0.0
    ent_coef: float = 0.0
    # EPO's phase schedule of ent_coef: None keeps it flat; else ent_coef for the first ent_coef_phase share of the
    # iterations, then linear to ent_coef_final at the last iteration
    ent_coef_final: float | None = None
    ent_coef_phase: float = 0.5
    # EPO's entropy smoothing: + kappa * max(0, |H - EMA(H)| - delta) on the loss, H the minibatch's token-mean
    # entropy, EMA over iterations' mean entropies with decay entropy_ema (0: off)
    entropy_kappa: float = 0.0
    entropy_delta: float = 0.1
    entropy_ema: float = 0.9
    # A^2TGPO's adaptive clip (estimator a2tgpo): turn t's clip range is eps * (1 + beta * tanh(r~_t / 2)), r~ the
    # group-normalised turn rewards (0: the global eps_low / eps_high)
    adaptive_clip_beta: float = 0.0
    vf_coef: float = 0.5
    value_clip: float = 0.2
    value_lr: float | None = None  # the value head's learning rate (None: lr); its gradient is clipped on its own
    detach_critic: bool = False  # the value head reads the trunk's hidden states detached: value loss never moves it
    critic_warmup_steps: int = 0  # value-only iterations on rollouts of the starting policy before the first update
    critic_trunk: str = "shared"  # CRITIC_TRUNKS: the head reads the policy's hidden states, or a decoder of its own
    # None: the value loss rides in the policy's epochs x minibatches; k: the critic trains alone afterwards, k epochs
    # x minibatches of value-only steps per iteration (and per warm-up step)
    value_epochs: int | None = None
    loss_agg: str | None = None  # None: token-mean (ppo, grpo, rloo) / constant (dr_grpo)
    loss_norm_const: float | None = None  # for "constant" (None: max_turns * max_new_tokens)
    old_logprobs: str = "recompute"  # or "rollout": use the sampler's log-probs as the behaviour policy
    dynamic_sampling: bool = False
    mask_truncated: bool = False
    # optimisation
    iterations: int = 10
    epochs: int = 1
    minibatch_size: int = 4  # sequences per optimizer step
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    # a minibatch whose gradient is exactly 0 (every advantage 0, no KL or entropy term: a tied group) takes no
    # optimizer step: Adam would otherwise keep moving the weights on its momentum for about 1 / (1 - beta1) steps
    # after each rare non-zero gradient, at full step size whatever that gradient's size
    skip_zero_grad_steps: bool = True
    seed: int = 0
    # collapse: stop a run whose valid-action share or success falls, or whose gradient norm explodes (trainer.py)
    collapse_check: bool = True
    collapse_window: int = 5  # iterations averaged: the first window is the start, the latest is compared with it
    collapse_ratio: float = 0.5  # collapsed when the latest valid share (or success) < ratio x the start's
    collapse_min_success: float = 0.1  # success is checked only when the start's is at least this
    collapse_success_z: float = 3.0  # and its fall must be significant: one-sided two-proportion z over the windows'
    # episodes (batch_tasks x group_size an iteration) at least this (0: the ratio alone)
    collapse_grad_factor: float = 10.0  # collapsed when the latest mean gradient norm > factor x the start's
    # SFT on the env's demonstrations (its `demo_agent`, by default its oracle)
    sft_steps: int = 0  # warm start before the first RL iteration
    sft_steps_per_iteration: int = 0  # SFT:RL ratio afterwards (SFT steps after each RL iteration)
    sft_batch: int = 4  # demonstrations per SFT step
    sft_lr: float | None = None  # learning rate of the SFT steps (None: lr)
    # held-out evaluation: the first eval_tasks tasks (task_index 0..n-1) of the env made with eval_env_kwargs
    eval_every: int = 0  # evaluate before the first iteration and every eval_every iterations (0: never)
    eval_tasks: int = 32
    eval_env_kwargs: dict[str, Any] | None = None  # None: env_kwargs
    eval_temperature: float = 0.0  # 0: greedy
    # output
    out_dir: str = "runs/agentgym"
    checkpoint_every: int = 1
    resume: bool = False
    init_from: str | None = None  # a checkpoint.pt whose policy weights start a fresh run (fresh optimizer, no SFT)
    plot: bool = True
    progress: bool = True  # a progress bar over iterations (stderr) with the latest reward/success
    # episodes for `agentgym view` (baselines/rollout_log.py, docs/trainer.md 'Seeing a run's episodes'): every Nth
    # iteration (1 included; 0: off) at most log_rollouts_max rollouts (whole groups first) go to rollouts.jsonl, and
    # nothing more once it holds log_rollouts_max_mb MiB; log_advantages_of: other critic-free estimators' advantages
    # on the same batch, for comparison
    log_rollouts_every: int = 1
    log_rollouts_max: int = 16
    log_rollouts_max_mb: float = 256.0
    log_advantages_of: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop = tuple(self.stop) if isinstance(self.stop, (list, tuple)) else self.stop
        components: object = self.reward_components  # a list when read from a JSON/TOML file
        if isinstance(components, list):
            self.reward_components = tuple(components)
        _check_types(self)
        if self.log_rollouts_every < 0 or self.log_rollouts_max < 0 or not self.log_rollouts_max_mb > 0:
            raise ValueError("log_rollouts_every and log_rollouts_max must be >= 0 and log_rollouts_max_mb > 0")
        unknown_logged = [n for n in self.log_advantages_of if n not in ESTIMATORS]
        if unknown_logged:
            raise ValueError(f"log_advantages_of: unknown estimators {unknown_logged}; known: "
                             f"{', '.join(sorted(ESTIMATORS))}")  # fmt: skip
        for name, value, known in [("algo", self.algo, ALGOS), ("loss_agg", self.loss_agg, (None, *LOSS_AGG_MODES)),
                                   ("old_logprobs", self.old_logprobs, ("recompute", "rollout")),
                                   ("env_pool", self.env_pool, ENV_POOLS), ("rollout_backend", self.rollout_backend,
                                   tuple(BACKENDS)), ("ratio_level", self.ratio_level, RATIO_LEVELS)]:  # fmt: skip
            if value not in known:
                raise ValueError(f"{name} must be one of {tuple(k for k in known if k is not None)}, got {value!r}")
        if self.algo == "ipr":
            self._check_ipr()
        elif self.algo == "archer":
            self._check_archer()
        elif self.algo == "ppo":
            if self.estimator not in (None, "ppo", *CRITIC_ESTIMATORS):
                raise ValueError(f"ppo takes estimator None (token-level GAE) or one of {CRITIC_ESTIMATORS}, "
                                 f"got {self.estimator!r}")  # fmt: skip
            if self.estimator_kwargs:
                raise ValueError("ppo's GAE takes gamma and lam from the config, not estimator_kwargs")
        else:
            if self.estimator_name not in ESTIMATORS and self.estimator_name not in BRANCH_ESTIMATORS:
                raise ValueError(f"unknown estimator {self.estimator_name!r}; known: "
                                 f"{', '.join(sorted((*ESTIMATORS, *BRANCH_ESTIMATORS)))}")  # fmt: skip
            if self.estimator_name in CRITIC_ESTIMATORS:
                raise ValueError(f"estimator {self.estimator_name!r} needs a critic: use algo='ppo' (algo "
                                 f"{self.algo!r} is critic-free)")  # fmt: skip
            fn = ESTIMATORS.get(self.estimator_name)
            params = list(inspect.signature(fn).parameters)[1:] if fn is not None else []
            unknown = sorted(set(self.estimator_kwargs) - set(params))
            if unknown:
                raise ValueError(f"estimator {self.estimator_name!r} takes no {unknown}")
            if fn is not None:
                check_values(fn, self.estimator_kwargs, f"estimator {self.estimator_name!r}")
        self._check_credit_inputs()
        self._check_branches()
        self._check_methods()
        positive = {"group_size": self.group_size, "batch_tasks": self.batch_tasks, "epochs": self.epochs,
                    "minibatch_size": self.minibatch_size, "max_turns": self.max_turns,
                    "max_new_tokens": self.max_new_tokens, "sft_batch": self.sft_batch}  # fmt: skip
        small = [k for k, v in positive.items() if v < 1]
        if small:
            raise ValueError(f"{', '.join(small)} must be >= 1")
        if self.trainable_layers is not None and self.trainable_layers < 0:
            raise ValueError(f"trainable_layers must be >= 0 or None, got {self.trainable_layers}")
        if self.critic_warmup_steps < 0 or self.collapse_window < 1:
            raise ValueError("critic_warmup_steps must be >= 0 and collapse_window >= 1")
        critic_knobs = (self.critic_warmup_steps or self.detach_critic or self.value_lr is not None
                        or self.critic_trunk != "shared" or self.value_epochs is not None)  # fmt: skip
        if critic_knobs and not self.critic:
            raise ValueError(f"critic_warmup_steps, detach_critic, value_lr, critic_trunk and value_epochs need a "
                             f"critic: use algo='ppo' (algo {self.algo!r} is critic-free)")  # fmt: skip
        if self.critic_trunk not in CRITIC_TRUNKS:
            raise ValueError(f"critic_trunk must be one of {CRITIC_TRUNKS}, got {self.critic_trunk!r}")
        if self.value_epochs is not None and self.value_epochs < 1:
            raise ValueError(f"value_epochs must be >= 1 or None, got {self.value_epochs}")
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0):
            raise ValueError(f"gamma and lam must be in [0, 1], got {self.gamma} and {self.lam}")
        if self.dynamic_sampling and self.group_size < 2:
            raise ValueError("dynamic_sampling drops groups whose rewards all tie: it needs group_size >= 2")
        if self.temperature < 0 or self.eval_temperature < 0 or self.lr <= 0 or self.kl_coef < 0:
            raise ValueError("temperatures and kl_coef must be >= 0 and lr > 0")
        if self.value_lr is not None and self.value_lr <= 0:
            raise ValueError(f"value_lr must be > 0, got {self.value_lr}")
        if self.init_from is not None and not Path(self.init_from).is_file():
            raise ValueError(f"init_from: no checkpoint at {self.init_from}")
        import gymnasium

        import agentgym  # noqa: F401  (registers the envs)

        try:
            gymnasium.spec(self.env_id)
        except gymnasium.error.Error as exc:
            raise ValueError(f"env_id: {exc}") from None

    def _check_credit_inputs(self) -> None:
        """``reward_components``, ``turn_signal_key``/``turn_signal_mode`` and the signal ``mt_grpo`` needs."""
        rc = self.reward_components
        if isinstance(rc, str):
            if rc not in ("auto", "all"):
                raise ValueError(f"reward_components must be 'auto', 'all' or a list of component names, got {rc!r}")
        elif not rc or not all(isinstance(k, str) and k for k in rc):
            raise ValueError(f"reward_components must name at least one component, got {rc!r}")
        elif self.progress_key is not None and "progress" not in rc:
            raise ValueError(f"progress_key adds the reward component 'progress', which reward_components {rc} "
                             "leaves out")  # fmt: skip
        if self.turn_signal_mode not in (None, "value", "delta"):
            raise ValueError(f"turn_signal_mode must be 'value' or 'delta', got {self.turn_signal_mode!r}")
        if not 0.0 <= self.turn_signal_flip <= 1.0:
            raise ValueError(f"turn_signal_flip is a probability in [0, 1], got {self.turn_signal_flip}")
        if self.turn_signal_source not in ("info", "scorer"):
            raise ValueError(f"turn_signal_source must be 'info' or 'scorer', got {self.turn_signal_source!r}")
        if self.signal_progress_coef < 0:
            raise ValueError(f"signal_progress_coef must be >= 0, got {self.signal_progress_coef}")
        reads = self.estimator_name in SIGNAL_ESTIMATORS or self.signal_progress_coef > 0
        if self.turn_signal_source == "scorer":
            if self.scorer is None or not reads:
                raise ValueError("turn_signal_source 'scorer' needs a scorer and a reader of the signal (estimator "
                                 f"{' or '.join(SIGNAL_ESTIMATORS)}, or signal_progress_coef > 0)")  # fmt: skip
            return
        if self.turn_signal_flip > 0 and not reads:
            raise ValueError("turn_signal_flip needs a reader of the turn signal (estimator "
                             f"{' or '.join(SIGNAL_ESTIMATORS)}, or signal_progress_coef > 0)")  # fmt: skip
        if reads and self.turn_signal is None:
            raise ValueError(f"estimator {self.estimator_name!r} needs a verified per-turn signal: set "
                             f"turn_signal_key (an info key; {self.env_id} has no entry in "
                             "agentgym.rewards.advantages.TURN_SIGNALS)")  # fmt: skip

    def _check_herl(self) -> None:
        """HeRL's knobs: guided envs in this process, the unguided old log-probs, the bonus component counted."""
        from agentgym.rewards.checklist import CHECKLISTS

        if self.herl_k < 1 or (self.herl_is_clip is not None and not self.herl_is_clip > 0):
            raise ValueError(f"herl_k must be >= 1 and herl_is_clip > 0 or None, got {self.herl_k} and "
                             f"{self.herl_is_clip}")  # fmt: skip
        refuse_with(
            "herl",
            "resamples on spare envs in this process for a policy-gradient update",
            {
                f"env_pool {self.env_pool!r}": self.env_pool != "list",
                "branch_k": self.branch_k,
                "reward_conditioning": self.reward_conditioning,
                f"algo {self.algo!r}": self.algo in ("ipr", "archer"),
            },
        )
        if self.old_logprobs != "recompute":
            raise ValueError("herl weighs guided tokens by pi(a|unguided) / pi(a|guided): it needs old_logprobs "
                             "'recompute' (the unguided log-probs)")  # fmt: skip
        rc = self.reward_components
        if not isinstance(rc, str) and self.herl_bonus != 0.0 and "herl_bonus" not in rc:
            raise ValueError(f"reward_components {list(rc)} leaves out HeRL's bonus component 'herl_bonus'")
        name = self.herl_checklists
        if name != "choices" and name not in CHECKLISTS and ":" not in name:
            raise ValueError(f"herl_checklists must be 'choices', one of {', '.join(CHECKLISTS)} or "
                             f"'pkg.module:function', got {name!r}")  # fmt: skip
        make_judge(self.herl_judge, check_only=True)

    def _check_methods(self) -> None:
        """The scorer, ``reward_wrappers``, ``shaping_schedule``, EPO's, A^2TGPO's and RC-GRPO's knobs."""
        if self.herl:  # HeRL's knobs (baselines/hindsight.py)
            self._check_herl()
        if self.group_options is not None:
            opts = self.group_options
            if not opts or not all(isinstance(o, dict) and not {"task_index", "task_id"} & set(o) for o in opts):
                raise ValueError(f"group_options must be a non-empty list of reset-option dicts without task_index "
                                 f"or task_id (the task comes from the task seed), got {opts!r}")  # fmt: skip
            refuse_with("group_options", "plays each task as several groups through the plain rollouts", {
                f"algo {self.algo!r}": self.algo in ("ipr", "archer"), "branch_k": self.branch_k, "herl": self.herl,
                "reward_conditioning": self.reward_conditioning})  # fmt: skip
        if self.reward_conditioning:
            if self.group_size < 2 or not 0.0 < self.rc_high_share < 1.0:
                raise ValueError(f"reward_conditioning needs group_size >= 2 and rc_high_share in (0, 1), got "
                                 f"{self.group_size} and {self.rc_high_share}")  # fmt: skip
            if not self.rc_sft_agents or not all(isinstance(a, str) and a for a in self.rc_sft_agents):
                raise ValueError(f"rc_sft_agents must name at least one agent of the env, got {self.rc_sft_agents!r}")
            refuse_with(
                "reward_conditioning",
                "writes its reward token into the HF loop's prompts",
                {f"rollout_backend {self.rollout_backend!r}": self.rollout_backend != "hf", "branch_k": self.branch_k},
            )
        if self.scorer_fusion not in SCORER_FUSIONS or self.infopo_tau <= 0:
            raise ValueError(f"scorer_fusion must be one of {SCORER_FUSIONS} and infopo_tau > 0, got "
                             f"{self.scorer_fusion!r} and {self.infopo_tau}")  # fmt: skip
        self._fusion = "add" if self.scorer_fusion == "auto" else self.scorer_fusion  # scorer_fusion_mode reads it
        if self.scorer is not None:
            cls = check_scorer(self.scorer, self.scorer_kwargs)
            if self.scorer_fusion == "auto":
                from agentgym.rewards.information import CounterfactualInformationGain

                infopo = isinstance(cls, type) and issubclass(cls, CounterfactualInformationGain)
                self._fusion = "infopo" if infopo else "add"
            if self._fusion == "infopo" and self.critic:
                raise ValueError("scorer_fusion 'infopo' fuses into critic-free advantages: use a critic-free algo")
            if self._fusion == "infopo" and self.dynamic_sampling:  # its gate is open only on the groups it drops
                raise ValueError("scorer_fusion 'infopo' acts on groups whose outcomes tie, which dynamic_sampling "
                                 "drops: turn one of them off")  # fmt: skip
        elif self.scorer_kwargs:
            raise ValueError("scorer_kwargs without a scorer")
        specs = wrapper_specs(self.reward_wrappers)
        self._wrapper_components = tuple(s.component for s in specs if s.component)  # counted_components reads it
        if self.env_pool == "ray" and any(s.table_cls is not None for s in specs):
            raise ValueError("reward wrappers with a table need envs in this process (env_pool list, serial or thread)")
        names = [s.component for s in specs] + (["progress"] if self.progress_key is not None else [])
        rc = self.reward_components
        if not isinstance(rc, str) and any(s.component and s.component not in rc for s in specs):
            raise ValueError(f"reward_components {rc} leaves out a reward_wrappers component {names}")
        sched = self.shaping_schedule
        if sched is not None:
            unknown = sorted(set(sched) - {"component", "start", "ramp", "final"})
            start, ramp, final = sched.get("start", 0), sched.get("ramp", 0), sched.get("final", 1.0)
            if unknown or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (start, ramp)):
                raise ValueError(f"shaping_schedule takes component, start (int >= 0), ramp (int >= 0) and final, "
                                 f"got {sched}")  # fmt: skip
            if not isinstance(final, (int, float)) or isinstance(final, bool):
                raise ValueError(f"shaping_schedule final must be a number, got {final!r}")
            if sched.get("component", "shaping") not in names:
                raise ValueError(f"shaping_schedule component {sched.get('component', 'shaping')!r} is no reward "
                                 f"component of reward_wrappers or progress_key ({names})")  # fmt: skip
        if self.airs_arms is not None:
            arms = self.airs_arms
            if len(arms) < 2 or len(set(arms)) != len(arms) or any(a not in self._wrapper_components for a in arms):
                raise ValueError(f"airs_arms must name two or more distinct reward_wrappers components "
                                 f"{list(self._wrapper_components)}, got {arms}")  # fmt: skip
        if self.airs_c < 0 or self.airs_window < 1:
            raise ValueError(f"airs_c must be >= 0 and airs_window >= 1, got {self.airs_c} and {self.airs_window}")
        if self.ent_coef_final is not None and (self.ent_coef_final < 0 or not 0.0 <= self.ent_coef_phase <= 1.0):
            raise ValueError(f"ent_coef_final must be >= 0 and ent_coef_phase in [0, 1], got {self.ent_coef_final} "
                             f"and {self.ent_coef_phase}")  # fmt: skip
        if self.entropy_kappa < 0 or self.entropy_delta < 0 or not 0.0 <= self.entropy_ema < 1.0:
            raise ValueError(f"entropy_kappa and entropy_delta must be >= 0 and entropy_ema in [0, 1), got "
                             f"{self.entropy_kappa}, {self.entropy_delta}, {self.entropy_ema}")  # fmt: skip
        if self.self_distill is not None:  # HINT-SD
            self._check_self_distill()
        if not 0.0 <= self.adaptive_clip_beta < 1.0:
            raise ValueError(f"adaptive_clip_beta must be in [0, 1), got {self.adaptive_clip_beta}")
        if self.adaptive_clip_beta and (self.critic or self.estimator_name != "a2tgpo"):
            raise ValueError(f"adaptive_clip_beta is A^2TGPO's clip: it needs estimator 'a2tgpo' (got "
                             f"{self.estimator_name!r})")  # fmt: skip

    def _check_self_distill(self) -> None:
        """HINT-SD's knobs: a selector, a verified signal for the rule (and the rule judge), the main rollouts."""
        if self.self_distill not in SELF_DISTILL_SELECTORS or self.distill_estimator not in DISTILL_ESTIMATORS:
            raise ValueError(f"self_distill must be one of {SELF_DISTILL_SELECTORS} and distill_estimator one of "
                             f"{DISTILL_ESTIMATORS}, got {self.self_distill!r} and "
                             f"{self.distill_estimator!r}")  # fmt: skip
        if self.distill_coef < 0:
            raise ValueError(f"distill_coef must be >= 0, got {self.distill_coef}")
        refuse_with(
            "self_distill",
            "distils on the main rollouts of a policy-gradient algo",
            {
                f"algo {self.algo!r}": self.algo in ("ipr", "archer"),
                "branch_k": self.branch_k,
                "reward_conditioning": self.reward_conditioning,
            },
        )
        try:
            make_judge(self.distill_judge, check_only=True)
        except ValueError as exc:
            raise ValueError(f"distill_judge: {exc}") from None
        if (self.self_distill == "rule" or self.distill_judge == "rule") and self.turn_signal is None:
            raise ValueError(f"self_distill {self.self_distill!r} with the rule needs a verified turn signal: set "
                             f"turn_signal_key ({self.env_id} has no entry in TURN_SIGNALS)")  # fmt: skip

    @property
    def scorer_fusion_mode(self) -> str:
        """``"add"`` or ``"infopo"``: ``scorer_fusion``, with ``"auto"`` resolved by the scorer's class (``"infopo"``
        for InfoPO's ``CounterfactualInformationGain``)."""
        return str(self._fusion)

    def ent_coef_at(self, iteration: int) -> float:
        """EPO's phase schedule: ``ent_coef`` through the first ``ent_coef_phase`` share of the iterations, then
        linear to ``ent_coef_final`` at the last (flat when ``ent_coef_final`` is None)."""
        if self.ent_coef_final is None:
            return self.ent_coef
        switch = self.ent_coef_phase * self.iterations
        if iteration <= switch or self.iterations <= switch:
            return self.ent_coef
        frac = min(1.0, (iteration - switch) / (self.iterations - switch))
        return self.ent_coef + frac * (self.ent_coef_final - self.ent_coef)

    def shaping_scale(self, iteration: int) -> float:
        """S2D's c(k) at iteration ``k`` (1-based): 0 before ``start``, then ``final`` at once (``ramp`` 0) or after a
        linear ramp over ``ramp`` iterations (1.0 without a schedule)."""
        sched = self.shaping_schedule
        if sched is None:
            return 1.0
        start, ramp, final = sched.get("start", 0), sched.get("ramp", 0), float(sched.get("final", 1.0))
        if iteration < start:
            return 0.0
        return final if ramp == 0 else final * min(1.0, (iteration - start + 1) / ramp)

    def _check_archer(self) -> None:
        """ArCHer's knobs: its own critic's advantages, no estimator's or branches'."""
        refuse_with(
            "algo 'archer'",
            "trains on its own critic's Q - V",
            {
                "estimator": self.estimator is not None,
                "estimator_kwargs": self.estimator_kwargs,
                "branch_k": self.branch_k,
                "scorer": self.scorer is not None,
                "dynamic_sampling": self.dynamic_sampling,
                "reward_conditioning": self.reward_conditioning,
                "think_intervention": self.think_intervention,
            },
        )
        if min(self.archer_buffer, self.archer_batch) < 1 or self.archer_critic_steps < 0 or self.archer_hidden < 0:
            raise ValueError("archer_buffer and archer_batch must be >= 1, archer_critic_steps and archer_hidden >= 0")
        if not 0.0 < self.archer_tau <= 1.0 or self.archer_critic_lr <= 0 or self.archer_warmup < 0:
            raise ValueError(f"archer_tau must be in (0, 1], archer_critic_lr > 0 and archer_warmup >= 0, got "
                             f"{self.archer_tau}, {self.archer_critic_lr} and {self.archer_warmup}")  # fmt: skip
        if self.archer_trunk not in CRITIC_TRUNKS or self.archer_token_baseline not in ("none", "mean"):
            raise ValueError(f"archer_trunk must be one of {CRITIC_TRUNKS} and archer_token_baseline 'none' or "
                             f"'mean', got {self.archer_trunk!r} and {self.archer_token_baseline!r}")  # fmt: skip

    def _check_ipr(self) -> None:
        """IPR's knobs: it forks envs in this process with the HF loop and trains no estimator's advantages."""
        refuse_with(
            "algo 'ipr'",
            "trains on its own expert-path pairs, forking envs in this process with the HF loop",
            {
                "estimator": self.estimator is not None,
                "estimator_kwargs": self.estimator_kwargs,
                "branch_k": self.branch_k,
                "scorer": self.scorer is not None,
                f"env_pool {self.env_pool!r}": self.env_pool != "list",
                f"rollout_backend {self.rollout_backend!r}": self.rollout_backend != "hf",
                "dynamic_sampling": self.dynamic_sampling,
            },
        )
        if self.ipr_k < 1 or self.ipr_beta <= 0 or self.ipr_sft_coef < 0:
            raise ValueError(f"ipr_k must be >= 1, ipr_beta > 0 and ipr_sft_coef >= 0, got {self.ipr_k}, "
                             f"{self.ipr_beta} and {self.ipr_sft_coef}")  # fmt: skip

    def _check_branches(self) -> None:
        """``branch_k`` / ``branch_turns`` / ``branch_frac`` with the branch estimators, and ``max_sampled_tokens``."""
        if self.max_sampled_tokens is not None and self.max_sampled_tokens < 1:
            raise ValueError(f"max_sampled_tokens must be >= 1 or None, got {self.max_sampled_tokens}")
        if self.branch_k < 0:
            raise ValueError(f"branch_k must be >= 0, got {self.branch_k}")
        if self.think_window < 1 or self.think_delta < 0:
            raise ValueError(f"think_window must be >= 1 and think_delta >= 0, got {self.think_window} and "
                             f"{self.think_delta}")  # fmt: skip
        if self.think_intervention and self.rollout_backend != "hf":
            raise ValueError("think_intervention samples through the HF loop: it needs rollout_backend 'hf'")
        if self.branch_turns not in BRANCH_TURNS or not 0.0 < self.branch_frac <= 1.0:
            raise ValueError(f"branch_turns must be one of {BRANCH_TURNS} and branch_frac in (0, 1], got "
                             f"{self.branch_turns!r} and {self.branch_frac}")  # fmt: skip
        if min(self.branch_tail, self.branch_prefix) < 1 or self.branch_resample < 0:
            raise ValueError("branch_tail and branch_prefix must be >= 1 and branch_resample >= 0")
        if self.tree_target not in TREE_TARGETS or not 0.0 <= self.tree_blend <= 1.0:
            raise ValueError(f"tree_target must be one of {TREE_TARGETS} and tree_blend in [0, 1], got "
                             f"{self.tree_target!r} and {self.tree_blend}")  # fmt: skip
        tree_knobs = (self.tree_target != "return", self.tree_std, self.tree_blend != 1.0, self.step_bonus != 0.0)
        if any(tree_knobs) and self.estimator_name != "tree":
            raise ValueError("tree_target, tree_std, tree_blend and step_bonus are knobs of estimator 'tree'")
        if self.branch_mask_ties and self.branch_k < 2:
            raise ValueError("branch_mask_ties compares the forks of a state: it needs branch_k >= 2")
        if self.branch_depth < 1 or (self.branch_depth > 1 and (self.estimator_name != "tree" or any(tree_knobs)
                                                                or self.branch_mask_ties)):  # fmt: skip
            raise ValueError(f"branch_depth must be >= 1; above 1 (got {self.branch_depth}) it takes estimator 'tree' "
                             "without tree_target, tree_std, tree_blend, step_bonus or branch_mask_ties")  # fmt: skip
        if self.tree_continue not in ("main", "best") or (self.tree_continue == "best" and (
                self.estimator_name != "tree" or self.tree_target != "immediate" or self.branch_depth > 1
                or self.branch_resample)):  # fmt: skip
            raise ValueError(f"tree_continue must be 'main' or 'best'; 'best' (got {self.tree_continue!r}) takes "
                             "estimator 'tree' with tree_target 'immediate', without branch_depth or "
                             "branch_resample")  # fmt: skip
        branch = self.estimator_name in BRANCH_ESTIMATORS
        if branch != (self.branch_k > 0):
            raise ValueError(f"the branch estimators {BRANCH_ESTIMATORS} need branch_k >= 1 and only they use forks "
                             f"(estimator {self.estimator_name!r}, branch_k {self.branch_k})")  # fmt: skip
        if branch and (self.env_pool != "list" or self.rollout_backend != "hf" or self.dynamic_sampling
                       or self.scorer is not None):  # fmt: skip
            raise ValueError(f"estimator {self.estimator_name!r} forks envs in this process with the HF loop: it "
                             "needs env_pool 'list' and rollout_backend 'hf', without dynamic_sampling or a "
                             "scorer")  # fmt: skip

    @property
    def estimator_name(self) -> str:
        return self.estimator or self.algo

    @property
    def groups_per_task(self) -> int:
        """How many groups each task of an iteration is played as (``len(group_options)``, else 1)."""
        return len(self.group_options) if self.group_options else 1

    @property
    def counted_components(self) -> tuple[str, ...] | None:
        """The reward components a turn's training reward sums (``baselines.credit.turn_rewards``); None: all of
        them, i.e. the (wrapped) env's reward as it is."""
        rc = self.reward_components
        if rc == "all" or (rc == "auto" and self.estimator_name not in OUTCOME_ESTIMATORS):
            return None
        if rc == "auto":  # plus the components of the operator's reward_wrappers
            extra = ("progress",) if self.progress_key is not None else ()
            return ("outcome", *extra, *self._wrapper_components, *(("herl_bonus",) if self.herl else ()))
        return tuple(rc)

    @property
    def turn_signal(self) -> TurnSignal | None:
        """Where the verified per-turn signal is read: ``turn_signal_key``, else the env's ``TURN_SIGNALS`` entry."""
        default = TURN_SIGNALS.get(self.env_id)
        # turn_signal_mode is a plain string in the config; TurnSignal refuses any but "value" and "delta"
        if self.turn_signal_key is not None:
            same = default is not None and default.key == self.turn_signal_key
            inherited = default.mode if default is not None and same else "value"
            return TurnSignal(self.turn_signal_key, cast(SignalMode, self.turn_signal_mode or inherited))
        if default is None:
            return None
        return TurnSignal(default.key, cast(SignalMode, self.turn_signal_mode or default.mode))

    @property
    def critic(self) -> bool:
        """Whether the run trains a value head."""
        return self.algo == "ppo"

    @property
    def loss_mode(self) -> str:
        return self.loss_agg or ("constant" if self.algo == "dr_grpo" else "token-mean")

    @property
    def norm_const(self) -> float:
        return float(self.loss_norm_const or self.max_turns * self.max_new_tokens)

    @property
    def rollout_config(self) -> RolloutConfig:
        return RolloutConfig(
            max_turns=self.max_turns,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            stop=self.stop,
            max_total_tokens=self.max_total_tokens,
            action_spans=self.estimator_name == "serl" and self.estimator_kwargs.get("granularity") == "token",
        )

    @property
    def seeds(self) -> Seeds:
        return Seeds(self.seed)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            hints = [f"unknown config key {k!r}{did_you_mean(k, known, OTHER_NAMES)}" for k in unknown]
            raise ValueError("; ".join(hints))
        return cls(**data)


#: Names other trainers give to these fields: a misspelling of one of them suggests the field.
OTHER_NAMES = {"learning_rate": "lr", "num_iterations": "iterations", "num_generations": "group_size",
               "ppo_epochs": "epochs", "beta": "kl_coef"}  # fmt: skip


def _check_types(config: TrainConfig) -> None:
    """Every field holds a value of its annotated type (an int where a float is asked is fine; a bool is no int):
    a value from a config file or ``--set`` of the wrong type fails here, not deep inside a run."""
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        allowed = typing.get_args(hints[f.name]) if isinstance(hints[f.name], types.UnionType) else (hints[f.name],)
        kinds = {typing.get_origin(t) or t for t in allowed}
        if float in kinds:
            kinds.add(int)
        ok = any(isinstance(value, k) and not (isinstance(value, bool) and k is not bool) for k in kinds)
        if not ok:
            names = " or ".join(getattr(k, "__name__", str(k)) for k in kinds if k is not int or float not in kinds)
            raise ValueError(f"{f.name} must be {names.replace('NoneType', 'None')}, got {value!r}")


@dataclass(frozen=True)
class Seeds:
    """The run's independent random streams, each a function of ``(seed, iteration, stream, ...)`` only, so a run
    resumed from a checkpoint draws exactly what the uninterrupted run would have."""

    seed: int

    def tasks(self, iteration: int) -> np.random.Generator:
        """The iteration's task seeds."""
        return np.random.default_rng(derive_seed(self.seed, iteration, 1))

    def sampling(self, iteration: int) -> int:
        """The rollouts' sampling seed (each row derives its own generator from it)."""
        return derive_seed(self.seed, iteration, 2)

    def minibatches(self, iteration: int, epoch: int) -> torch.Generator:
        """The order of the rollouts in the epoch's minibatches."""
        return torch.Generator().manual_seed(derive_seed(self.seed, iteration, 3, epoch))

    def demonstrations(self, iteration: int, step: int) -> np.random.Generator:
        """An SFT step's demonstration tasks (iteration 0: the warm start)."""
        return np.random.default_rng(derive_seed(self.seed, iteration, 4, step))

    def evaluation(self) -> int:
        """The held-out evaluation's sampling seed: the same at every evaluation."""
        return derive_seed(self.seed, 5)

    def critic_warmup(self, step: int) -> tuple[np.random.Generator, int]:
        """A critic warm-up step's task seeds and sampling seed."""
        return np.random.default_rng(derive_seed(self.seed, step, 6, 1)), derive_seed(self.seed, step, 6, 2)


def _gpu_preset(batch_tasks: int, minibatch_size: int, out_dir: str) -> dict[str, Any]:
    """Search-R1-style GRPO on SearchQA ``small`` for a local Qwen2.5 Instruct model (``--model PATH``)."""
    return {
        "model": "",  # a local directory, given with --model PATH
        "device": "cuda",
        "dtype": "float32",
        "amp_dtype": "bfloat16",
        "gradient_checkpointing": True,
        "env_id": "agentgym/SearchQA-v0",
        "env_kwargs": {"dataset": "small", "split": "train"},
        "eval_env_kwargs": {"dataset": "small", "split": "test"},
        "eval_every": 5,
        "eval_tasks": 200,
        "batch_tasks": batch_tasks,
        "group_size": 8,
        "max_turns": 4,
        "max_new_tokens": 256,
        "max_total_tokens": 4096,
        "estimator": "grpo",
        "eps_low": 0.2,
        "eps_high": 0.28,
        "kl_coef": 0.001,
        "lr": 1e-6,
        "minibatch_size": minibatch_size,
        "iterations": 100,
        "dynamic_sampling": True,
        "out_dir": out_dir,
    }


#: Named starting points (``load_config(preset=...)``).
PRESETS: dict[str, dict[str, Any]] = {
    # CPU smoke run: the tiny random Qwen2 on SearchQA's tiny dataset.
    "tiny": {
        "model": "tiny",
        "env_id": "agentgym/SearchQA-v0",
        "env_kwargs": {"dataset": "tiny"},
        "batch_tasks": 2,
        "group_size": 2,
        "max_turns": 2,
        "max_new_tokens": 12,
        "minibatch_size": 4,
        "iterations": 2,
        "lr": 1e-4,
        "kl_coef": 0.01,
        "out_dir": "runs/tiny",
    },
    # CPU, a few minutes: success rises visibly. Chain-v0 at H=2 (two choices, each right when it copies the turn's
    # signal), the tiny model warm-started by 110 SFT steps on the oracle (about 40% of held-out episodes right),
    # then GRPO; held-out success on 64 fixed episodes (T=1) before RL and every 10 iterations.
    "learn": {
        "model": "tiny",
        "env_id": "agentgym/Chain-v0",
        "env_kwargs": {"horizon": 2},
        "eval_env_kwargs": {"horizon": 2},
        "max_turns": 2,
        "max_new_tokens": 8,
        "stop": ["</answer>"],
        "batch_tasks": 8,
        "group_size": 4,
        "minibatch_size": 16,
        "lr": 5e-4,
        "kl_coef": 0.0,
        "sft_steps": 110,
        "sft_lr": 3e-3,
        "iterations": 40,
        "eval_every": 10,
        "eval_tasks": 64,
        "eval_temperature": 1.0,
        "out_dir": "runs/learn",
    },
    # GPU: a local Qwen2.5 Instruct checkpoint (--model PATH), Search-R1-style GRPO on SearchQA small.
    "qwen2.5-0.5b": _gpu_preset(batch_tasks=32, minibatch_size=16, out_dir="runs/qwen2.5-0.5b"),
    "qwen2.5-1.5b": _gpu_preset(batch_tasks=16, minibatch_size=8, out_dir="runs/qwen2.5-1.5b"),
}


def load_config(
    preset: str | None = None,
    config_file: str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> TrainConfig:
    """Preset, then a JSON/TOML file, then ``overrides`` (later wins)."""
    data: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise KeyError(f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
        data.update(copy.deepcopy(PRESETS[preset]))  # a config never shares (or mutates) the preset's dicts
    if config_file is not None:
        path = Path(config_file)
        if path.suffix == ".toml":
            import tomllib

            data.update(tomllib.loads(path.read_text(encoding="utf-8")))
        else:
            data.update(json.loads(path.read_text(encoding="utf-8")))
    data.update(overrides or {})
    return TrainConfig.from_dict(data)
