"""Reference RL trainer for multi-turn LLM agents, CleanRL style: one file, read top to bottom.

    config -> model + frozen reference (+ value head for PPO) -> [SFT warm start on oracle demonstrations]
    -> for each iteration:
        rollouts (token-in/token-out, batched lockstep generation, ``baselines/rollout.py``) -> [turn scorer]
        -> advantages -> [dynamic sampling] -> old/ref log-probs -> epochs x minibatches of clipped
        policy-gradient updates -> [SFT steps] -> [held-out eval] -> metrics, checkpoint
    -> metrics.jsonl + metrics.png

Algorithms (``TrainConfig.algo``):
- ``grpo`` / ``dr_grpo`` / ``rloo``: critic-free. Per-turn advantages come from a turn-level estimator of
  ``agentgym.rewards.advantages`` (``TrainConfig.estimator``, default = the algo's own name; any registered name
  works: ``gtpo``, ``gigpo``, ``mapo``, ...), broadcast to the turn's sampled tokens with explicit turn spans.
- ``ppo``: a linear value head on the policy's last hidden state (shared trunk); token-level GAE where only sampled
  tokens are steps (``token_gae`` carries ``nextvalue``/``lastgaelam`` across env tokens), each turn's reward on
  its last sampled token; clipped value loss; advantages whitened over the batch's sampled tokens. With
  ``estimator="turn_ppo"`` the critic is turn-level instead: ``V`` at each turn's first token, GAE over turns
  (``turn_gae``), the turn's advantage and return broadcast to its tokens.

Dense turn rewards: ``progress_key`` (a potential difference of an env ``info`` entry, e.g. SearchQA's verified
retrieval progress) and ``scorer`` (``info_gain`` = IGPO, ``info_potential`` = TIPS, ``siop`` = SIOP from
``agentgym.rewards.information``, scored with the current policy after each batch of rollouts); both are added
to the env's per-turn rewards before the estimator sees them.

Shared pieces: clip-higher (``eps_low``/``eps_high``); k3 KL to a frozen reference, ``exp(ref - lp) - (ref - lp) - 1``,
added to the per-token loss with ``kl_coef``; entropy bonus; loss aggregation (``token-mean``,
``seq-mean-token-mean``, ``constant``: token sum / (rows * ``loss_norm_const``), Dr. GRPO's normaliser); dynamic
sampling (drop groups whose outcome rewards all tie: they carry no GRPO signal); optional masking of truncated
episodes; gradient clipping. All log-probs use ``log_softmax(logits / temperature)``, as the rollout records them.

Everything the run draws (task seeds, sampling, minibatch order) is derived from ``(seed, iteration, ...)``, so a
run resumed from a checkpoint reproduces the uninterrupted run exactly (on CPU with deterministic kernels).

    python -m agentgym.baselines.trainer --preset tiny --out-dir runs/tiny
    python -m agentgym.baselines.trainer --config my.toml --set algo=ppo --set iterations=20
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from agentgym.baselines.rollout import (
    HFPolicy,
    Rollout,
    RolloutConfig,
    autocast,
    collect_rollouts,
    demonstration_episode,
    derive_seed,
)
from agentgym.rewards.advantages import (
    TurnBatch,
    broadcast_to_tokens,
    get_estimator,
    masked_whiten,
    place_turn_rewards,
    token_gae,
    turn_gae,
)

__all__ = [
    "PRESETS",
    "TrainConfig",
    "aggregate_loss",
    "compute_advantages",
    "load_config",
    "main",
    "train",
]

ALGOS = ("grpo", "dr_grpo", "rloo", "ppo")
#: Post-episode turn scorers of ``agentgym.rewards.information`` the trainer can run with the policy as scorer model.
SCORERS = ("info_gain", "info_potential", "siop")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "constant")


# ----------------------------------------------------------------------------------------------------------------
# config


@dataclass
class TrainConfig:
    """Every knob of a run. ``model="tiny"`` builds ``build_tiny_model(model_seed)``; otherwise a local path."""

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
    max_turns: int = 3
    max_new_tokens: int = 32
    max_total_tokens: int = 2048
    temperature: float = 1.0
    stop: tuple[str, ...] = ("</search>", "</answer>")
    generation_batch: int | None = None  # rows per batched generation (None: all rollouts of an iteration at once)
    rollout_backend: str = "hf"  # "hf" (transformers KV-cache loop) or "vllm" (colocated engine, optional extra)
    env_pool: str = "list"  # "list" (envs stepped in this thread), or an agentgym.pool kind: "serial", "thread", "ray"
    env_pool_kwargs: dict[str, Any] = field(default_factory=dict)  # the pool's arguments (RayPool: address, num_cpus)
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)  # VLLMPolicy arguments (gpu_memory_utilization, ...)
    # algorithm
    algo: str = "grpo"
    estimator: str | None = None  # turn-level estimator name for critic-free algos (None: same as algo)
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    progress_key: str | None = None  # dense turn reward: += progress_coef * (info[key]_t - info[key]_{t-1})
    progress_coef: float = 1.0
    scorer: str | None = None  # post-episode turn scorer run on the policy each iteration (SCORERS), added to turns
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)
    scorer_coef: float = 1.0
    gamma: float = 1.0
    lam: float = 0.95
    whiten_advantages: bool = True  # PPO only
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.0
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    value_clip: float = 0.2
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
    seed: int = 0
    # SFT on oracle demonstrations (envs whose reset info has an oracle, e.g. SearchQA)
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

    def __post_init__(self) -> None:
        self.stop = tuple(self.stop)
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        if self.loss_agg is not None and self.loss_agg not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg must be one of {LOSS_AGG_MODES}, got {self.loss_agg!r}")
        if self.old_logprobs not in ("recompute", "rollout"):
            raise ValueError(f"old_logprobs must be 'recompute' or 'rollout', got {self.old_logprobs!r}")
        if self.algo != "ppo":
            get_estimator(self.estimator_name)  # fail early on a bad name
        elif self.estimator not in (None, "ppo", "turn_ppo"):
            raise ValueError(f"ppo takes estimator None (token-level GAE) or 'turn_ppo', got {self.estimator!r}")
        if self.env_pool not in ("list", "serial", "thread", "ray"):
            raise ValueError(f"env_pool must be 'list', 'serial', 'thread' or 'ray', got {self.env_pool!r}")
        if self.rollout_backend not in ("hf", "vllm"):
            raise ValueError(f"rollout_backend must be 'hf' or 'vllm', got {self.rollout_backend!r}")
        if self.scorer is not None and self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {SCORERS}, got {self.scorer!r}")
        if self.group_size < 1 or self.batch_tasks < 1 or self.minibatch_size < 1:
            raise ValueError("group_size, batch_tasks and minibatch_size must be >= 1")

    @property
    def estimator_name(self) -> str:
        return self.estimator or self.algo

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
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {unknown}")
        return cls(**data)


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


# ----------------------------------------------------------------------------------------------------------------
# model pieces


def build_policy(config: TrainConfig) -> tuple[Any, Any]:
    """(model, tokenizer) on ``config.device`` in ``config.dtype``. Never downloads: ``model`` is ``"tiny"`` or a
    local directory."""
    if not config.model:
        raise ValueError("no model: give a local model directory with --model PATH (nothing is downloaded)")
    if config.model == "tiny":
        from agentgym.tools.tiny_model import build_tiny_model

        model, tok = build_tiny_model(config.model_seed)
    else:
        from transformers import AutoModelForCausalLM

        from agentgym.tools.tiny_model import load_tokenizer

        tok = load_tokenizer(config.model)
        model = AutoModelForCausalLM.from_pretrained(config.model, local_files_only=True)
    model = model.to(device=config.device, dtype=getattr(torch, config.dtype))
    if config.gradient_checkpointing:
        # active in train mode only, so sampling keeps its KV cache (transformers 5 renamed the method)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    return model, tok


def amp_dtype(config: TrainConfig) -> torch.dtype | None:
    return None if config.amp_dtype is None else getattr(torch, config.amp_dtype)


def build_value_head(model: Any) -> torch.nn.Linear:
    """A linear critic on the last hidden state, zero-initialised (V = 0 at the start, deterministic)."""
    head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head.to(next(model.parameters()).device)


def forward_tokens(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    value_head: torch.nn.Module | None = None,
    token_mask: torch.Tensor | None = None,
    amp: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token ``(logprobs, entropy, values)`` in sequence coordinates ``(B, L)``: entry ``t`` is about token ``t``
    given tokens ``< t`` (entry 0 is 0). Log-probs/entropy of ``softmax(logits / temperature)`` (T=1 if greedy).

    Only the positions where ``token_mask`` is set (default: every real token) go through the LM head; the others
    are 0. In multi-turn rollouts most tokens are observations, so scoring only the sampled ones saves most of the
    ``(tokens, vocab)`` logits. Assumes ``logits = lm_head(decoder(...).last_hidden_state)`` (Llama/Qwen/Mistral
    style); a model with logit soft-capping falls back to the full forward. ``amp``: autocast dtype of the forward
    (the log-softmax is float32 either way)."""
    scale = temperature if temperature > 0 else 1.0
    sel = (attention_mask if token_mask is None else token_mask).bool().clone()
    sel[:, 0] = False
    rows, cols = sel.nonzero(as_tuple=True)
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    with autocast(model, amp):
        if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None):
            out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
            hidden = out.hidden_states[-1]
            logits = out.logits[rows, cols - 1]
        else:
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
            logits = head(hidden[rows, cols - 1])
    logp = torch.log_softmax(logits.float() / scale, dim=-1)
    lp_sel = logp.gather(-1, input_ids[rows, cols][:, None]).squeeze(-1)
    ent_sel = -(logp.exp() * logp).sum(-1)
    zeros = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    lp = zeros.index_put((rows, cols), lp_sel)
    entropy = zeros.index_put((rows, cols), ent_sel)
    values = None
    if value_head is not None:
        v_sel = value_head(hidden[rows, cols - 1].float()).squeeze(-1)
        values = zeros.index_put((rows, cols), v_sel)
    return lp, entropy, values


# ----------------------------------------------------------------------------------------------------------------
# loss aggregation


def aggregate_loss(values: torch.Tensor, mask: torch.Tensor, mode: str, norm_const: float = 1.0) -> torch.Tensor:
    """Reduce per-token losses ``(B, L)`` over mask-1 tokens:

    - ``token-mean``: ``sum(x * m) / sum(m)`` (every token of the minibatch weighs the same);
    - ``seq-mean-token-mean``: mean over rows (with any mask-1 token) of each row's token mean;
    - ``constant``: ``sum(x * m) / (B * norm_const)`` (Dr. GRPO: no length bias).
    """
    m = mask.to(values.dtype)
    total = (values * m).sum()
    if mode == "token-mean":
        return total / m.sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        per_row = m.sum(-1)
        keep = per_row > 0
        if not bool(keep.any()):
            return total * 0.0
        return ((values * m).sum(-1)[keep] / per_row[keep]).mean()
    if mode == "constant":
        return total / (values.shape[0] * norm_const)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; known: {LOSS_AGG_MODES}")


# ----------------------------------------------------------------------------------------------------------------
# advantages


def group_stats(rollouts: Sequence[Rollout], config: TrainConfig) -> dict[Any, float]:
    """Population std per group id of the trajectory return (sum of the training turn rewards)."""
    groups: dict[Any, list[float]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(math.fsum(turn_rewards(r, config)))
    return {g: float(np.std(v)) for g, v in groups.items()}


def turn_rewards(r: Rollout, config: TrainConfig) -> list[float]:
    """The env's per-turn rewards, plus the progress-difference dense reward when ``progress_key`` is set
    (a potential-based term with potential 0 at reset)."""
    out = list(r.turn_rewards)
    if config.progress_key is not None:
        prev = 0.0
        for k, metrics in enumerate(r.turn_metrics):
            now = float(metrics.get(config.progress_key, prev))
            out[k] += config.progress_coef * (now - prev)
            prev = now
    if r.scored_rewards:
        out = [x + config.scorer_coef * s for x, s in zip(out, r.scored_rewards, strict=True)]
    return out


def build_scorer(config: TrainConfig, model: Any, tokenizer: Any) -> Any:
    """The ``config.scorer`` turn scorer over the current policy weights (IGPO scores with the policy itself)."""
    from agentgym.rewards.answer_scoring import LocalAnswerScorer
    from agentgym.rewards.information import InformationGain, InformationPotential, SelfInducedOutcomePotential

    cls = {"info_gain": InformationGain, "info_potential": InformationPotential, "siop": SelfInducedOutcomePotential}
    return cls[config.scorer](LocalAnswerScorer(model, tokenizer), **config.scorer_kwargs)  # type: ignore[index]


@torch.no_grad()
def score_turns(rollouts: Sequence[Rollout], config: TrainConfig, model: Any, tokenizer: Any) -> dict[str, float]:
    """Run the turn scorer on each group's text trajectories and store its per-turn rewards in
    ``Rollout.scored_rewards`` (a turn it could not score gets 0 and counts in ``scorer_invalid_frac``)."""
    scorer = build_scorer(config, model, tokenizer)
    groups: dict[Any, list[int]] = {}
    for i, r in enumerate(rollouts):
        groups.setdefault(r.group_id, []).append(i)
    trajs = {i: r.to_trajectory(config.env_id) for i, r in enumerate(rollouts)}
    with autocast(model, amp_dtype(config)):
        if hasattr(scorer, "score_groups"):  # TIPS fits one scale over all groups
            scored = scorer.score_groups([[trajs[i] for i in idx] for idx in groups.values()])
        else:
            scored = [scorer([trajs[i] for i in idx]) for idx in groups.values()]
    invalid = total = 0
    for idx, scores in zip(groups.values(), scored, strict=True):
        for i, sc in zip(idx, scores, strict=True):
            rewards = [float(x) if ok and math.isfinite(x) else 0.0 for x, ok in zip(sc.rewards, sc.valid, strict=True)]
            rollouts[i].scored_rewards = rewards
            invalid += sum(not ok for ok in sc.valid)
            total += len(sc.valid)
    flat = [x for r in rollouts for x in r.scored_rewards]
    return {
        "scorer_reward_mean": float(np.mean(flat)) if flat else 0.0,
        "scorer_invalid_frac": invalid / max(total, 1),
    }


def compute_advantages(
    rollouts: Sequence[Rollout], config: TrainConfig, values: Sequence[np.ndarray] | None = None
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Per-rollout token advantages in response coordinates (0 on env tokens), and PPO returns (else None).

    Critic-free: ``get_estimator(config.estimator_name)`` over a ``TurnBatch`` of the env's per-turn rewards, then
    ``broadcast_to_tokens`` with the explicit turn spans. PPO: ``place_turn_rewards`` + ``token_gae`` per rollout
    with ``values`` (response coordinates), whitened over all sampled tokens of the batch."""
    masks = [np.asarray(r.loss_mask, dtype=np.float64) for r in rollouts]
    if config.algo == "ppo":
        if values is None:
            raise ValueError("ppo needs critic values")
        advs, rets = [], []
        for r, v, m in zip(rollouts, values, masks, strict=True):
            if config.estimator == "turn_ppo":  # turn-level critic: V at each turn's start, GAE over turns
                turn_v = np.array([v[s] for s, _ in r.turn_spans], dtype=np.float64)
                ta, tret = turn_gae(np.asarray(turn_rewards(r, config)), turn_v, config.gamma, config.lam)
                a = broadcast_to_tokens(ta, r.turn_spans, len(r.response_ids), r.loss_mask)
                ret = broadcast_to_tokens(tret, r.turn_spans, len(r.response_ids), r.loss_mask)
            else:
                rewards = place_turn_rewards(turn_rewards(r, config), r.turn_spans, len(r.response_ids))
                a, ret = token_gae(rewards, v, m, config.gamma, config.lam)
            advs.append(a)
            rets.append(ret)
        if config.whiten_advantages and advs:
            flat = masked_whiten(np.concatenate(advs), np.concatenate(masks))
            cuts = np.cumsum([len(a) for a in advs])[:-1]
            advs = list(np.split(flat, cuts))
        return advs, rets
    batch = TurnBatch(
        [turn_rewards(r, config) for r in rollouts],
        [r.group_id for r in rollouts],
        anchors=[r.anchors for r in rollouts],
        turn_lengths=[[e - s for s, e in r.turn_spans] for r in rollouts],
    )
    per_turn = get_estimator(config.estimator_name)(batch, **config.estimator_kwargs)
    advs = [
        broadcast_to_tokens(a, r.turn_spans, len(r.response_ids), r.loss_mask)
        for a, r in zip(per_turn, rollouts, strict=True)
    ]
    return advs, None


# ----------------------------------------------------------------------------------------------------------------
# batching


def pad_rows(rows: Sequence[Sequence[float]], length: int, value: float, dtype: torch.dtype) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(list(row), dtype=dtype)
    return out


def make_batch(
    rollouts: Sequence[Rollout],
    pad_id: int,
    *,
    advantages: Sequence[np.ndarray] | None = None,
    returns: Sequence[np.ndarray] | None = None,
    mask_truncated: bool = False,
) -> dict[str, torch.Tensor]:
    """Right-padded tensors ``(B, L)`` in sequence coordinates (prompt + response); response-coordinate arrays are
    shifted by each row's prompt length. ``loss_mask`` is 0 on prompts, env tokens, padding (and on truncated
    episodes when ``mask_truncated``)."""
    length = max(len(r.input_ids) for r in rollouts)

    def seq(r: Rollout, resp: Sequence[float]) -> list[float]:
        return [0.0] * len(r.prompt_ids) + list(resp)

    def mask_of(r: Rollout) -> list[float]:
        if mask_truncated and r.truncated and not r.terminated:
            return [0.0] * len(r.input_ids)
        return seq(r, r.loss_mask)

    batch = {
        "input_ids": pad_rows([r.input_ids for r in rollouts], length, pad_id, torch.long),
        "attention_mask": pad_rows([[1] * len(r.input_ids) for r in rollouts], length, 0, torch.long),
        "loss_mask": pad_rows([mask_of(r) for r in rollouts], length, 0.0, torch.float32),
        "rollout_logprobs": pad_rows([seq(r, r.rollout_logprobs) for r in rollouts], length, 0.0, torch.float32),
    }
    if advantages is not None:
        batch["advantages"] = pad_rows(
            [seq(r, a) for r, a in zip(rollouts, advantages, strict=True)], length, 0.0, torch.float32
        )
    if returns is not None:
        batch["returns"] = pad_rows(
            [seq(r, a) for r, a in zip(rollouts, returns, strict=True)], length, 0.0, torch.float32
        )
    return batch


def select(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rows ``idx`` of every tensor, trimmed to the longest selected row."""
    sub = {k: v[idx] for k, v in batch.items()}
    length = int(sub["attention_mask"].sum(-1).max().item())
    return {k: v[:, :length] for k, v in sub.items()}


@torch.no_grad()
def score_batch(
    model: Any,
    batch: dict[str, torch.Tensor],
    temperature: float,
    minibatch_size: int,
    value_head: torch.nn.Module | None = None,
    amp: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and values) of every row, computed in minibatches, padded to the batch length."""
    n, length = batch["input_ids"].shape
    device = next(model.parameters()).device
    lps = torch.zeros(n, length)
    vals = torch.zeros(n, length) if value_head is not None else None
    for start in range(0, n, minibatch_size):
        idx = torch.arange(start, min(n, start + minibatch_size))
        mb = select(batch, idx)
        lp, _, v = forward_tokens(
            model,
            mb["input_ids"].to(device),
            mb["attention_mask"].to(device),
            temperature,
            value_head,
            token_mask=mb["loss_mask"].to(device) > 0,
            amp=amp,
        )
        lps[idx, : lp.shape[1]] = lp.cpu()
        if vals is not None and v is not None:
            vals[idx, : v.shape[1]] = v.cpu()
    return lps, vals


# ----------------------------------------------------------------------------------------------------------------
# checkpoints and metrics


@dataclass
class TrainState:
    model: Any
    tokenizer: Any
    ref_model: Any
    value_head: torch.nn.Linear | None
    optimizer: torch.optim.Optimizer
    iteration: int = 0  # iterations completed
    envs: Any = field(default_factory=list)  # rollout envs (a list, or an agentgym.pool.EnvPool), reused
    policy: Any = None  # the sampling back-end when it keeps state (vLLM engine); None: a fresh HFPolicy per use
    eval_envs: list[Any] = field(default_factory=list)


def save_checkpoint(state: TrainState, config: TrainConfig, path: Path) -> None:
    """Atomic write (temp file + rename) of the policy, value head, optimizer, iteration and config."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": state.model.state_dict(),
        "value_head": None if state.value_head is None else state.value_head.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "ref_model": None if state.ref_model is None else state.ref_model.state_dict(),
        "iteration": state.iteration,
        "config": asdict(config),
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(state: TrainState, path: Path) -> None:
    payload = torch.load(path, map_location=next(state.model.parameters()).device, weights_only=False)
    state.model.load_state_dict(payload["model"])
    if state.value_head is not None and payload["value_head"] is not None:
        state.value_head.load_state_dict(payload["value_head"])
    state.optimizer.load_state_dict(payload["optimizer"])
    if state.ref_model is not None and payload.get("ref_model") is not None:
        state.ref_model.load_state_dict(payload["ref_model"])
    state.iteration = int(payload["iteration"])


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    var = float(np.var(target))
    return float("nan") if var == 0 else 1.0 - float(np.var(target - pred)) / var


def plot_metrics(history: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """A grid of the main curves (PNG); None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    keys = [
        "reward_mean",
        "success_rate",
        "eval_success_rate",
        "loss",
        "approx_kl",
        "kl_ref",
        "clip_frac",
        "entropy",
        "zero_std_group_frac",
        "explained_variance",
        "grad_norm",
        "rollout_tokens_per_s",
    ]
    fig, axes = plt.subplots(3, 4, figsize=(16, 9))
    for ax, key in zip(axes.flat, keys, strict=True):
        points = [(h["iteration"], h[key]) for h in history if h.get(key) is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o")
        ax.set_title(key)
        ax.set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------------------------
# one iteration


def train_iteration(state: TrainState, config: TrainConfig, it: int) -> dict[str, Any]:
    """Rollouts, advantages, updates for iteration ``it`` (1-based); returns its metrics."""
    model, tok, device = state.model, state.tokenizer, next(state.model.parameters()).device
    metrics: dict[str, Any] = {"iteration": it}

    # 1. rollouts: batch_tasks tasks x group_size rollouts, seeds derived from (seed, iteration)
    rng = np.random.default_rng(derive_seed(config.seed, it, 1))
    task_seeds = rng.integers(0, config.task_seed_range, size=config.batch_tasks).tolist()
    t0 = time.perf_counter()
    policy = sampling_policy(state, config)
    if config.env_pool != "list" and isinstance(state.envs, list):
        from agentgym.pool import make_pool

        state.envs = make_pool(config.env_pool, config.env_id, config.batch_tasks * config.group_size,
                               env_kwargs=config.env_kwargs, **config.env_pool_kwargs)  # fmt: skip
    rollouts = collect_rollouts(
        policy,
        _env_factory(config),
        task_seeds,
        group_size=config.group_size,
        config=config.rollout_config,
        sample_seed=derive_seed(config.seed, it, 2),
        group_offset=(it - 1) * config.batch_tasks,
        envs=state.envs,
        generation_batch=config.generation_batch,
    )
    policy.sleep()  # a colocated engine gives its GPU memory back to the update
    t_rollout = time.perf_counter() - t0
    if config.scorer is not None:  # dense turn rewards from a post-episode scorer over the current policy
        t_s = time.perf_counter()
        metrics.update(score_turns(rollouts, config, model, tok))
        metrics["time_scorer"] = time.perf_counter() - t_s
    sampled = sum(r.num_sampled for r in rollouts)
    stds = group_stats(rollouts, config)
    metrics.update(
        reward_mean=float(np.mean([r.outcome for r in rollouts])),
        success_rate=float(np.mean([r.success for r in rollouts])),
        turns_mean=float(np.mean([len(r.turn_spans) for r in rollouts])),
        truncated_frac=float(np.mean([r.truncated and not r.terminated for r in rollouts])),
        progress_final=float(np.mean([r.final_progress for r in rollouts])),
        train_return_mean=float(np.mean([math.fsum(turn_rewards(r, config)) for r in rollouts])),
        sampled_tokens=sampled,
        zero_std_group_frac=float(np.mean([s == 0.0 for s in stds.values()])),
        time_rollout=t_rollout,
        rollout_tokens_per_s=sampled / max(t_rollout, 1e-9),
    )

    # 2. dynamic sampling: drop groups whose outcomes all tie (no GRPO signal)
    if config.dynamic_sampling:
        rollouts = [r for r in rollouts if stds[r.group_id] > 0.0]
    metrics["kept_rollouts"] = len(rollouts)
    kept_tokens = sum(r.num_sampled for r in rollouts)
    if not rollouts:
        metrics["skipped_update"] = True
        return metrics

    t1 = time.perf_counter()
    batch = make_batch(rollouts, tok.pad_token_id, mask_truncated=config.mask_truncated)

    # 3. behaviour (old) log-probs, reference log-probs, values
    model.eval()
    amp = amp_dtype(config)
    old_lp, old_v = score_batch(model, batch, config.temperature, config.minibatch_size, state.value_head, amp)
    diff = (old_lp - batch["rollout_logprobs"]).abs() * (batch["loss_mask"] > 0)
    metrics["rollout_logprob_maxdiff"] = float(diff.max().item())
    if config.old_logprobs == "rollout":
        old_lp = batch["rollout_logprobs"].clone()
    ref_lp = None
    if config.kl_coef > 0:
        ref_lp, _ = score_batch(state.ref_model, batch, config.temperature, config.minibatch_size, amp=amp)

    # 4. advantages (and PPO returns) in response coordinates -> sequence coordinates
    values_resp = None
    if old_v is not None:
        values_resp = [old_v[i, len(r.prompt_ids) : len(r.input_ids)].double().numpy() for i, r in enumerate(rollouts)]
    advs, rets = compute_advantages(rollouts, config, values_resp)
    batch = make_batch(rollouts, tok.pad_token_id, advantages=advs, returns=rets, mask_truncated=config.mask_truncated)
    batch["old_logprobs"] = old_lp
    if ref_lp is not None:
        batch["ref_logprobs"] = ref_lp
    if old_v is not None:
        batch["old_values"] = old_v
        m = batch["loss_mask"] > 0
        metrics["explained_variance"] = explained_variance(old_v[m].numpy(), batch["returns"][m].numpy())

    # 5. epochs x minibatches of clipped updates
    model.train()
    params = [p for g in state.optimizer.param_groups for p in g["params"]]
    logs: dict[str, list[float]] = {
        k: [] for k in ("loss", "pg_loss", "value_loss", "approx_kl", "kl_ref", "clip_frac", "entropy", "grad_norm")
    }
    first: dict[str, float] = {}
    n = len(rollouts)
    for epoch in range(config.epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(derive_seed(config.seed, it, 3, epoch)))
        for start in range(0, n, config.minibatch_size):
            mb = {k: v.to(device) for k, v in select(batch, order[start : start + config.minibatch_size]).items()}
            out = minibatch_loss(model, state.value_head, mb, config)
            state.optimizer.zero_grad(set_to_none=True)
            out["loss"].backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            state.optimizer.step()
            for k in logs:
                if k == "grad_norm":
                    logs[k].append(float(grad_norm))
                elif k in out:
                    logs[k].append(float(out[k].detach()))
            if not first:
                first = {"first_ratio_maxdev": float(out["ratio_maxdev"]), "first_kl_ref": float(out["kl_ref"])}
    model.eval()
    if state.policy is not None:
        state.policy.mark_stale()
    t_update = time.perf_counter() - t1
    metrics.update({k: float(np.mean(v)) for k, v in logs.items() if v})
    metrics.update(first)
    metrics.update(time_update=t_update, update_tokens_per_s=kept_tokens * config.epochs / max(t_update, 1e-9))
    return metrics


def sft_step(state: TrainState, config: TrainConfig, *key: int) -> float:
    """One supervised step on ``sft_batch`` oracle demonstrations (task seeds derived from ``key``): mean negative
    log-likelihood of the action tokens, same token layout as RL rollouts. Returns the loss."""
    rng = np.random.default_rng(derive_seed(config.seed, *key))
    policy = HFPolicy(state.model, state.tokenizer, amp_dtype=amp_dtype(config))
    env = _env_factory(config)()
    try:
        demos = [
            demonstration_episode(policy, env, seed=int(s), config=config.rollout_config)
            for s in rng.integers(0, config.task_seed_range, size=config.sft_batch)
        ]
    finally:
        env.close()
    demos = [d for d in demos if d is not None]
    if not demos:
        raise ValueError(f"{config.env_id} gives no oracle demonstrations (reset info without gold answers)")
    device = next(state.model.parameters()).device
    batch = {k: v.to(device) for k, v in make_batch(demos, state.tokenizer.pad_token_id).items()}
    state.model.train()
    lp, _, _ = forward_tokens(
        state.model,
        batch["input_ids"],
        batch["attention_mask"],
        1.0,
        token_mask=batch["loss_mask"] > 0,
        amp=amp_dtype(config),
    )
    loss = -aggregate_loss(lp, batch["loss_mask"], "token-mean")
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in state.optimizer.param_groups for p in g["params"]], config.max_grad_norm)
    lrs = [g["lr"] for g in state.optimizer.param_groups]
    for g in state.optimizer.param_groups:
        g["lr"] = config.sft_lr if config.sft_lr is not None else config.lr
    state.optimizer.step()
    for g, lr in zip(state.optimizer.param_groups, lrs, strict=True):
        g["lr"] = lr
    if state.policy is not None:
        state.policy.mark_stale()
    state.model.eval()
    return float(loss.detach())


@torch.no_grad()
def evaluate(state: TrainState, config: TrainConfig) -> dict[str, float]:
    """Success and reward on ``eval_tasks`` episodes of the eval env (``task_index`` ``i % num_tasks``), sampled at
    ``eval_temperature`` with a fixed seed, so successive evaluations score the same tasks the same way."""
    n = config.eval_tasks
    policy = sampling_policy(state, config)
    make_eval_env = _env_factory(config, config.eval_env_kwargs)
    if not state.eval_envs:
        state.eval_envs.append(make_eval_env())
    num_tasks = state.eval_envs[0].unwrapped.num_tasks  # more episodes than tasks play each task again, in order
    rollouts = collect_rollouts(
        policy,
        make_eval_env,
        list(range(n)),
        group_size=1,
        config=dataclasses.replace(config.rollout_config, temperature=config.eval_temperature),
        sample_seed=derive_seed(config.seed, 5),
        envs=state.eval_envs,
        generation_batch=config.generation_batch,
        options=[{"task_index": i % num_tasks} for i in range(n)],
    )
    policy.sleep()  # a colocated engine gives its GPU memory back to training
    return {
        "eval_success_rate": float(np.mean([r.success for r in rollouts])),
        "eval_reward_mean": float(np.mean([r.outcome for r in rollouts])),
        "eval_progress": float(np.mean([r.final_progress for r in rollouts])),
    }


def minibatch_loss(
    model: Any, value_head: torch.nn.Module | None, mb: dict[str, torch.Tensor], config: TrainConfig
) -> dict[str, torch.Tensor]:
    """Clipped surrogate (clip-higher) + k3 KL to the reference - entropy bonus (+ clipped value loss)."""
    lp, entropy, values = forward_tokens(
        model,
        mb["input_ids"],
        mb["attention_mask"],
        config.temperature,
        value_head,
        token_mask=mb["loss_mask"] > 0,
        amp=amp_dtype(config),
    )
    mask, adv, mode = mb["loss_mask"], mb["advantages"], config.loss_mode
    on = mask > 0
    log_ratio = (lp - mb["old_logprobs"]) * mask
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1.0 - config.eps_low, 1.0 + config.eps_high)
    pg = torch.maximum(pg1, pg2)
    per_token = pg - config.ent_coef * entropy
    kl_ref = torch.zeros((), device=lp.device)
    if "ref_logprobs" in mb:
        d = (mb["ref_logprobs"] - lp) * mask
        kl = torch.exp(d) - d - 1.0
        per_token = per_token + config.kl_coef * kl
        kl_ref = aggregate_loss(kl.detach(), mask, "token-mean")
    loss = aggregate_loss(per_token, mask, mode, config.norm_const)
    out = {"pg_loss": aggregate_loss(pg.detach(), mask, mode, config.norm_const), "kl_ref": kl_ref}
    if values is not None:
        old_v, ret = mb["old_values"], mb["returns"]
        v_clipped = old_v + torch.clamp(values - old_v, -config.value_clip, config.value_clip)
        vloss = 0.5 * torch.maximum((values - ret) ** 2, (v_clipped - ret) ** 2)
        value_loss = aggregate_loss(vloss, mask, "token-mean")
        loss = loss + config.vf_coef * value_loss
        out["value_loss"] = value_loss.detach()
    with torch.no_grad():
        lr_ = log_ratio.detach()
        clipped = ((ratio < 1.0 - config.eps_low) & (adv < 0)) | ((ratio > 1.0 + config.eps_high) & (adv > 0))
        out.update(
            approx_kl=aggregate_loss(torch.exp(lr_) - 1.0 - lr_, mask, "token-mean"),
            clip_frac=aggregate_loss(clipped.float(), mask, "token-mean"),
            entropy=aggregate_loss(entropy.detach(), mask, "token-mean"),
            ratio_maxdev=(ratio.detach() - 1.0).abs()[on].max() if bool(on.any()) else torch.zeros(()),
        )
    out["loss"] = loss
    return out


def sampling_policy(state: TrainState, config: TrainConfig) -> HFPolicy:
    """The rollout back-end: the stateful one of ``state`` (vLLM) or an HF KV-cache loop over the live model."""
    if state.policy is not None:
        return state.policy
    return HFPolicy(state.model, state.tokenizer, amp_dtype=amp_dtype(config))


def _env_factory(config: TrainConfig, env_kwargs: dict[str, Any] | None = None) -> Any:
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)

    kwargs = config.env_kwargs if env_kwargs is None else env_kwargs
    return lambda: gymnasium.make(config.env_id, **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# the run


def setup(config: TrainConfig) -> TrainState:
    """Seeded model, frozen reference (the initial weights; replaced by the warm-started policy after SFT), value
    head for PPO, AdamW."""
    torch.manual_seed(config.seed)
    model, tok = build_policy(config)
    ref_model = None
    if config.kl_coef > 0:
        ref_model, _ = build_policy(config)
        ref_model.eval().requires_grad_(False)
    value_head = build_value_head(model) if config.algo == "ppo" else None
    params = list(model.parameters()) + ([] if value_head is None else list(value_head.parameters()))
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    state = TrainState(model, tok, ref_model, value_head, optimizer)
    if config.rollout_backend == "vllm":
        from agentgym.baselines.vllm_backend import VLLMPolicy

        state.policy = VLLMPolicy(model, tok, model_path=config.model, seed=config.seed, **config.vllm_kwargs)
    return state


def train(config: TrainConfig) -> dict[str, Any]:
    """Run ``config.iterations`` iterations (continuing from ``out_dir/checkpoint.pt`` when ``resume``); writes
    ``metrics.jsonl``, ``checkpoint.pt`` and ``metrics.png`` under ``out_dir``; returns a summary dict."""
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt, metrics_path = out_dir / "checkpoint.pt", out_dir / "metrics.jsonl"
    state = setup(config)
    history: list[dict[str, Any]] = []
    resumed = config.resume and ckpt.is_file()
    if resumed:
        load_checkpoint(state, ckpt)
    elif config.init_from is not None:  # a warm start shared by several runs: the weights only
        weights = torch.load(config.init_from, map_location=next(state.model.parameters()).device, weights_only=False)
        for model in (state.model, state.ref_model):
            if model is not None:
                model.load_state_dict(weights["model"])
        if metrics_path.is_file():
            for line in metrics_path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                if rec.get("iteration", 0) <= state.iteration:
                    history.append(rec)
    metrics_path.write_text("".join(json.dumps(h) + "\n" for h in history), encoding="utf-8")
    (out_dir / "config.json").write_text(json.dumps(asdict(config), indent=2), encoding="utf-8")
    if not resumed and (config.sft_steps > 0 or config.eval_every > 0):  # iteration 0: warm start, first eval
        warm: dict[str, Any] = {"iteration": 0}
        if config.sft_steps > 0:  # (a resumed run, even from iteration 0, skips it)
            losses = [sft_step(state, config, 0, 4, k) for k in range(config.sft_steps)]
            warm.update(sft_loss=losses[-1], sft_loss_first=losses[0])
            if state.ref_model is not None:  # the KL anchor is the warm-started policy
                state.ref_model.load_state_dict(state.model.state_dict())
        if config.eval_every > 0:
            warm.update(evaluate(state, config))
        history.append(warm)
        with open(metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(warm) + "\n")
        if config.sft_steps > 0 and config.checkpoint_every > 0:
            save_checkpoint(state, config, ckpt)
    start = state.iteration + 1
    bar = tqdm(
        total=config.iterations,
        initial=state.iteration,
        desc="train",
        unit="it",
        disable=not config.progress or start > config.iterations,
    )
    for it in range(start, config.iterations + 1):
        metrics = train_iteration(state, config, it)
        if config.sft_steps_per_iteration > 0:
            sft = [sft_step(state, config, it, 4, k) for k in range(config.sft_steps_per_iteration)]
            metrics["sft_loss"] = float(np.mean(sft))
        if config.eval_every > 0 and (it % config.eval_every == 0 or it == config.iterations):
            metrics.update(evaluate(state, config))
        state.iteration = it
        history.append(metrics)
        with open(metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(_jsonable(metrics)) + "\n")
        if config.checkpoint_every > 0 and (it % config.checkpoint_every == 0 or it == config.iterations):
            save_checkpoint(state, config, ckpt)
        shown = {"reward": metrics["reward_mean"], "success": metrics["success_rate"]}
        if "eval_success_rate" in metrics:
            shown["eval"] = metrics["eval_success_rate"]
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()}, refresh=False)
        bar.update(1)
    bar.close()
    for env in [*(state.envs if isinstance(state.envs, list) else [state.envs]), *state.eval_envs]:
        env.close()
    state.envs, state.eval_envs = [], []
    plot = plot_metrics(history, out_dir / "metrics.png") if config.plot and history else None
    return {
        "iterations": state.iteration,
        "last": history[-1] if history else None,
        "history": history,
        "metrics_path": str(metrics_path),
        "checkpoint": str(ckpt) if ckpt.is_file() else None,
        "plot": None if plot is None else str(plot),
        "state": state,
    }


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``--preset NAME`` and/or ``--config FILE`` (JSON/TOML), ``--set key=value`` overrides (JSON values)."""
    parser = argparse.ArgumentParser(prog="agentgym train", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS))
    parser.add_argument("--config", dest="config_file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", help="local model directory (overrides the preset's model)")
    parser.add_argument("--out-dir")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    if args.preset is None and args.config_file is None:
        parser.error("give --preset or --config")
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = _parse_value(value)
    if args.model is not None:
        overrides["model"] = args.model
    if args.out_dir is not None:
        overrides["out_dir"] = args.out_dir
    if args.iterations is not None:
        overrides["iterations"] = args.iterations
    if args.resume:
        overrides["resume"] = True
    config = load_config(args.preset, args.config_file, overrides)
    summary = train(config)
    summary.pop("state")
    summary.pop("history")
    print(json.dumps(_jsonable(summary["last"] or {}), indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "last"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
