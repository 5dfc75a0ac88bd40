"""The reference token-in/token-out multi-turn rollout (docs/architecture.md, 'The env contract' and 'Data flow').

One loop, read top to bottom:

1. ``env.reset(seed=task_seed)``; the prompt is the chat template of the first observation plus the generation
   prompt, tokenised once. These are ``prompt_ids``.
2. Each turn the policy samples from ``softmax(logits / temperature)`` with a KV cache (HF forward back-end, CPU or
   GPU; ``agentgym.baselines.vllm_backend`` on GPU) and records the log-prob of every sampled token *under that
   temperature-scaled distribution*, so a trainer that recomputes ``log_softmax(logits / temperature)`` over the
   final ids gets the same numbers. All episodes of a batch advance in lockstep (:func:`run_episodes`): the turn's
   contexts of every running episode are left-padded into one batch, and each row draws from its own generator
   (inverse-CDF sampling), so a row's tokens do not depend on the rest of the batch.
3. The sampled ids are appended as they are (never decoded and re-encoded). The decoded text is the env action.
4. The env's new messages are tokenised with the *fixed-base trick*: render ``template(BASE + new_msgs)`` with the
   generation prompt, tokenise, and slice off the tokens of ``template(BASE)`` (``BASE`` = a fixed user/assistant
   exchange), so observation tokens are exactly what the template puts after an assistant turn. Before them come
   the template's closing tokens of an assistant message (e.g. ``<|end|>\\n``), minus the eos when it was sampled.
   Every appended env/template token has ``loss_mask`` 0; sampled tokens have 1.
5. At every turn the exact context given to the model is remembered; at the end ``check_contexts`` asserts that the
   concatenated ``prompt_ids + response_ids`` start with each of them (what the model saw = what is trained on).

>>> model, tok = build_tiny_model(seed=0)                                           # doctest: +SKIP
>>> policy = HFPolicy(model, tok)                                                  # doctest: +SKIP
>>> rollouts = collect_rollouts(policy, env_factory, [11, 12], group_size=4, config=RolloutConfig())  # doctest: +SKIP
>>> r = rollouts[0]; len(r.response_ids) == len(r.loss_mask) == len(r.rollout_logprobs)  # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym.contract.agent import normalize_messages
from agentgym.contract.branching import snapshot
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.advantages.tokens import action_token_span
from agentgym.running.pool import EnvPool, Outcome, SerialPool, as_pool
from agentgym.tools.local_lm import model_input_names

__all__ = [
    "HFPolicy",
    "Rollout",
    "RolloutConfig",
    "advance_episodes",
    "autocast",
    "check_contexts",
    "check_rows",
    "collect_rollouts",
    "demonstration_agent",
    "demonstration_episode",
    "derive_seed",
    "request_seed",
    "rollout_episode",
    "run_episodes",
]

#: The fixed conversation the fixed-base trick renders new messages after (its content is irrelevant).
BASE_MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "user", "content": "base"},
    {"role": "assistant", "content": "base"},
)


def autocast(model: Any, dtype: torch.dtype | None) -> Any:
    """``torch.autocast`` on the model's device type, or a no-op when ``dtype`` is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=next(model.parameters()).device.type, dtype=dtype)


def request_seed(generator: torch.Generator) -> int:
    """A per-request seed for an engine that seeds each request itself (vLLM, a completions server), drawn from the
    row's generator: the row's draws stay a function of its own generator."""
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator).item())


def check_rows(contexts: Sequence[Any], budgets: Sequence[int], generators: Sequence[Any]) -> None:
    """``sample_batch``'s arguments name the same rows (every back-end checks this first)."""
    if not (len(contexts) == len(budgets) == len(generators)):
        raise ValueError("contexts, budgets and generators differ in length")


def derive_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (numpy ``SeedSequence``): independent streams per (seed, step, index)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> np.uint64(1))


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling and episode limits of the rollout loop."""

    max_turns: int = 3
    max_new_tokens: int = 32
    temperature: float = 1.0  # 0 = greedy (log-probs then come from the T=1 distribution)
    stop: tuple[str, ...] = ("</search>", "</answer>")
    max_total_tokens: int = 2048  # prompt + response; an episode that would exceed it is truncated
    check: bool = True  # assert the concatenated ids equal each turn's model context
    # find each turn's action tokens (Rollout.action_spans; SERL's token granularity reads them): a few decodes per
    # turn, so off unless a method needs it (off: each turn is its action whole)
    action_spans: bool = False


@dataclass
class Rollout:
    """One episode in tokens. Response coordinates: index 0 is the first token after ``prompt_ids``.

    ``turn_spans[k] = (start, end)`` holds turn k's sampled tokens (all ``loss_mask`` 1); env and template tokens
    sit between spans with mask 0 and log-prob 0. ``action_spans[k]``, inside ``turn_spans[k]``, holds the tokens of
    the part of the turn the env reads as its action (``agentgym.rewards.advantages.tokens.action_token_span``: the
    ``<search>`` block, not the ``<think>`` before it; SERL's token granularity weighs only these; a turn recorded
    without one is its action whole). ``turn_rewards[k]`` is the env reward of step k, and belongs on the last policy
    token of the turn (``turn_end_indices[k] = end - 1``).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    action_spans: list[tuple[int, int]] = field(default_factory=list)  # one per turn, inside its turn span
    turn_rewards: list[float] = field(default_factory=list)
    group_id: Hashable = 0
    seed: int = 0
    task_id: str | None = None
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    actions: list[str] = field(default_factory=list)
    anchors: list[Any] = field(default_factory=list)
    reward_components: list[dict[str, float]] = field(default_factory=list)
    context_lengths: list[int] = field(default_factory=list)  # len(prompt + response) fed to the model per turn
    turn_metrics: list[dict[str, float]] = field(default_factory=list)  # numeric info entries per step (progress)
    # the text-level episode (for post-episode turn scorers, which work on ``agentgym.contract.trajectory.Trajectory``)
    initial_observation: list[dict[str, Any]] = field(default_factory=list)
    reset_info: dict[str, Any] = field(default_factory=dict)
    observations: list[list[dict[str, Any]]] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    scored_rewards: list[float] = field(default_factory=list)  # a trainer's turn-scorer rewards (empty: none)
    scored_valid: list[bool] = field(default_factory=list)  # per turn, whether the scorer scored it (empty: all)
    error: str | None = None  # a failed env step (an exception, a timeout, a dead actor) ended the episode
    # the env (with its wrappers) before each turn, ``agentgym.contract.branching.snapshot`` (only with
    # ``snapshots=True``)
    snapshots: list[Any] = field(default_factory=list)

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def turn_end_indices(self) -> list[int]:
        return [e - 1 for _, e in self.turn_spans]

    @property
    def num_sampled(self) -> int:
        return int(sum(self.loss_mask))

    @property
    def outcome(self) -> float:
        return float(sum(self.turn_rewards))

    def record_turn(
        self,
        env: Any,
        tokens: list[int],
        logprobs: list[float],
        action: str,
        action_span: tuple[int, int] | None = None,
    ) -> tuple[list[dict[str, Any]], bool, bool]:
        """Append one turn's sampled tokens (mask 1), step ``env`` with its text and record the step's outcome.

        Returns ``(observation, terminated, truncated)``; on the episode's end the flags and success are set.
        """
        obs, reward, terminated, truncated, info = env.step(action)
        return self.record_outcome(
            tokens, logprobs, action, Outcome(0, "step", obs, reward, terminated, truncated, info), action_span
        )

    def record_outcome(
        self,
        tokens: list[int],
        logprobs: list[float],
        action: str,
        out: Outcome,
        action_span: tuple[int, int] | None = None,
    ) -> tuple[list[dict[str, Any]], bool, bool]:
        """:meth:`record_turn` with the step already taken (an ``agentgym.running.pool.Outcome``). A failed step ends
        the episode as truncated with ``error`` set (reward 0, no observation). ``action_span``: the action's tokens
        ``[a, b)`` among ``tokens`` (``action_token_span``; None: all of them)."""
        start = len(self.response_ids)
        a, b = (0, len(tokens)) if action_span is None else action_span
        if not 0 <= a <= b <= len(tokens):
            raise ValueError(f"action span {action_span} is outside the turn's {len(tokens)} tokens")
        self.response_ids += tokens
        self.loss_mask += [1] * len(tokens)
        self.rollout_logprobs += logprobs
        self.turn_spans.append((start, len(self.response_ids)))
        self.action_spans.append((start + a, start + b))
        self.actions.append(action)
        obs, reward, terminated, truncated, info = out.observation, out.reward, out.terminated, out.truncated, out.info
        if out.error is not None:
            self.error, truncated = out.error, True
        self.turn_rewards.append(float(reward))
        # GiGPO groups a turn by the state its action was taken in: the anchor before this step
        self.anchors.append((self.infos[-1] if self.infos else self.reset_info).get("anchor"))
        self.reward_components.append(dict(info.get("reward_components", {})))
        self.turn_metrics.append(_numeric(info))
        self.observations.append(list(obs))
        self.infos.append(dict(info))
        if terminated or truncated:
            self.terminated, self.truncated = bool(terminated), bool(truncated)
            self.success = bool(info.get("success", False))
        return obs, bool(terminated), bool(truncated)

    @property
    def final_progress(self) -> float:
        """The env's ``info["progress"]`` after the last turn (0 when the env reports none)."""
        return float(self.turn_metrics[-1].get("progress", 0.0)) if self.turn_metrics else 0.0

    def append_observation(self, ids: list[int]) -> None:
        """Append env/template tokens (mask 0, log-prob 0) after a turn."""
        self.response_ids += ids
        self.loss_mask += [0] * len(ids)
        self.rollout_logprobs += [0.0] * len(ids)

    def to_trajectory(self, env_id: str = "", agent: str = "policy") -> Trajectory:
        """The episode as text (what the turn scorers of ``agentgym.rewards`` read)."""
        turns = [
            Turn(
                action=action,
                observation=obs,
                reward=reward,
                terminated=self.terminated and k == len(self.actions) - 1,
                truncated=self.truncated and k == len(self.actions) - 1,
                info=info,
                token_spans=[span],
            )
            for k, (action, obs, reward, info, span) in enumerate(
                zip(self.actions, self.observations, self.turn_rewards, self.infos, self.turn_spans, strict=True)
            )
        ]
        return Trajectory(
            env_id=env_id,
            seed=self.seed,
            task_id=str(self.task_id),
            agent=agent,
            initial_observation=self.initial_observation,
            reset_info=self.reset_info,
            turns=turns,
            group_id=str(self.group_id),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable record (for JSONL dumps and other trainers)."""
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "loss_mask": self.loss_mask,
            "rollout_logprobs": self.rollout_logprobs,
            "turn_spans": [list(s) for s in self.turn_spans],
            "action_spans": [list(s) for s in self.action_spans],
            "turn_end_indices": self.turn_end_indices,
            "turn_rewards": self.turn_rewards,
            "group_id": self.group_id if isinstance(self.group_id, (int, str)) else str(self.group_id),
            "seed": self.seed,
            "task_id": self.task_id,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "success": self.success,
            "error": self.error,
        }


class HFPolicy:
    """A transformers causal LM + tokenizer as a sampling policy (KV-cache loop, temperature-scaled log-probs)."""

    def __init__(self, model: Any, tokenizer: Any, *, amp_dtype: torch.dtype | None = None) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template")
        self.model = model
        self.tokenizer = tokenizer
        self.amp_dtype = amp_dtype  # autocast dtype of the forward passes (None: the model's own dtype)
        self._cache_kw, self._keep_kw = model_input_names(model)
        eos: set[int] = set()
        for source in (tokenizer, getattr(model, "generation_config", None)):
            value = getattr(source, "eos_token_id", None)
            eos.update([value] if isinstance(value, int) else (value or []))
        #: generation stops on any of these (the tokenizer's eos and the model's generation-config eos ids)
        self.eos_token_ids: frozenset[int] = frozenset(int(v) for v in eos)
        # template pieces for the fixed-base trick
        base = normalize_messages(list(BASE_MESSAGES))
        self._base_ids = self.encode(self.render(base, add_generation_prompt=False))
        with_prompt = self.render(base[:1], add_generation_prompt=True)
        full = self.render(base, add_generation_prompt=False)
        if not full.startswith(with_prompt) or not full[len(with_prompt) :].startswith(base[1]["content"]):
            raise ValueError("the chat template does not render an assistant turn as generation prompt + content")
        #: template tokens that close an assistant message after its content (e.g. ``<|end|>\n``)
        self.closing_ids: list[int] = self.encode(full[len(with_prompt) + len(base[1]["content"]) :])

    def render(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            normalize_messages(list(messages)), add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_ids(self, messages: Sequence[dict[str, Any]], *, last_token: int | None = None) -> list[int]:
        """Tokens appended after an assistant turn: the template's closing tokens (without the first one when the
        model already sampled it as ``last_token``, e.g. ``<|im_end|>``), then the new messages and the generation
        prompt, tokenised with the fixed-base trick."""
        closing = self.closing_ids
        if last_token is not None and closing[:1] == [last_token]:
            closing = closing[1:]
        base = normalize_messages(list(BASE_MESSAGES))
        full = self.encode(self.render([*base, *messages], add_generation_prompt=True))
        if full[: len(self._base_ids)] != self._base_ids:
            raise ValueError("fixed-base trick: the template/tokeniser changes the base tokens when messages follow")
        return list(closing) + full[len(self._base_ids) :]

    @property
    def end_token_id(self) -> int:
        """The token that ends an assistant message: the template's first closing token when it is an eos token,
        else the tokenizer's eos (used to terminate demonstrations)."""
        if self.closing_ids[:1] and self.closing_ids[0] in self.eos_token_ids:
            return self.closing_ids[0]
        return int(self.tokenizer.eos_token_id)

    def sleep(self) -> None:
        """Release generation memory between rollout phases: nothing to release for the HF loop (the vLLM back-end
        overrides it)."""

    def mark_stale(self) -> None:
        """The training weights changed: nothing to do, the HF loop samples from the live model (back-ends that hold
        their own copy of the weights override it)."""

    def _forward(
        self, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[Any, torch.Tensor]:
        kwargs: dict[str, Any] = {"use_cache": True, "attention_mask": attention, "position_ids": positions}
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if self._keep_kw is not None:
            kwargs[self._keep_kw] = 1  # only the last position's logits: the prefill never builds (B, L, vocab)
        with autocast(self.model, self.amp_dtype):
            out = self.model(ids, **kwargs)
        new_cache = out.get("cache")
        return (out.get("past_key_values") if new_cache is None else new_cache), out.logits[:, -1].float()

    @torch.no_grad()
    def sample(
        self,
        context: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float,
        stop: Sequence[str],
        generator: torch.Generator,
    ) -> tuple[list[int], list[float], str]:
        """Sample up to ``max_new_tokens`` after ``context``; returns (ids, log-probs, finish) with finish in
        {"eos", "stop", "length"}. Log-probs are of ``log_softmax(logits / temperature)`` (T=1 when greedy)."""
        return self.sample_batch(
            [context], budgets=[max_new_tokens], temperature=temperature, stop=stop, generators=[generator]
        )[0]

    @torch.no_grad()
    def sample_batch(
        self,
        contexts: Sequence[Sequence[int]],
        *,
        budgets: Sequence[int],
        temperature: float,
        stop: Sequence[str],
        generators: Sequence[torch.Generator],
        share_prefill: bool = False,
    ) -> list[tuple[list[int], list[float], str]]:
        """:meth:`sample` for many contexts at once: left-padded, one forward per new token for the whole batch.

        Row ``i`` samples at most ``budgets[i]`` tokens with its own ``generators[i]``, so its draws do not depend
        on the other rows; a finished row rides along masked out until the last row ends. ``share_prefill``: rows
        with the same context (the K forks of one state, baselines/branches.py) share one prefill, whose KV cache
        is copied to each of them."""
        check_rows(contexts, budgets, generators)
        n = len(contexts)
        device = next(self.model.parameters()).device
        scale = temperature if temperature > 0 else 1.0
        width = max(len(c) for c in contexts)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((n, width), int(pad), dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c) :] = torch.tensor(list(c), dtype=torch.long)
            attention[i, width - len(c) :] = 1
        ids, attention = ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        first: dict[tuple[int, ...], int] = {}
        rows = [first.setdefault(tuple(c), len(first)) for c in contexts] if share_prefill else []
        if share_prefill and len(first) < n:  # prefill each distinct context once, then copy its cache rows
            unique = torch.tensor([rows.index(u) for u in range(len(first))], device=device)
            cache, last = self._forward(ids[unique], attention[unique], positions[unique], None)
            expand = torch.tensor(rows, device=device)
            cache.reorder_cache(expand)
            last = last[expand]
        else:
            cache, last = self._forward(ids, attention, positions, None)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        finish = ["length"] * n
        active = [b > 0 for b in budgets]
        for _ in range(max(budgets, default=0)):
            lp = torch.log_softmax(last / scale, dim=-1)
            if temperature > 0:  # inverse-CDF draws: one uniform per row from its own generator
                cdf = lp.double().exp().cumsum(-1).cpu()
            else:
                greedy = torch.argmax(lp, dim=-1).tolist()
            chosen = [int(pad)] * n
            for i in range(n):
                if not active[i]:
                    continue
                if temperature > 0:
                    u = torch.rand((), generator=generators[i], dtype=torch.float64) * cdf[i, -1]
                    token = min(int(torch.searchsorted(cdf[i], u, right=True)), cdf.shape[1] - 1)
                else:
                    token = int(greedy[i])
                chosen[i] = token
                tokens[i].append(token)
                logprobs[i].append(float(lp[i, token].item()))
                if token in self.eos_token_ids:
                    finish[i], active[i] = "eos", False
                elif stop and any(s in self.decode(tokens[i]) for s in stop):
                    finish[i], active[i] = "stop", False
                elif len(tokens[i]) >= budgets[i]:
                    active[i] = False
            if not any(active):
                break
            step_mask = torch.tensor([[int(a)] for a in active], dtype=torch.long, device=device)
            positions = attention.sum(-1, keepdim=True)  # the new token's position = real tokens so far
            attention = torch.cat([attention, step_mask], dim=-1)
            cache, last = self._forward(torch.tensor([[t] for t in chosen], device=device), attention, positions, cache)
        return [(tokens[i], logprobs[i], finish[i]) for i in range(n)]


def check_contexts(rollout: Rollout, contexts: Sequence[Sequence[int]]) -> None:
    """Assert that ``prompt_ids + response_ids`` starts with every context the model was given, and that every
    policy token is a sampled one (mask 1 exactly on the turn spans)."""
    ids = rollout.input_ids
    for k, ctx in enumerate(contexts):
        if ids[: len(ctx)] != list(ctx):
            raise AssertionError(f"turn {k}: the concatenated ids differ from the context the model saw")
    expected = [0] * len(rollout.response_ids)
    for s, e in rollout.turn_spans:
        expected[s:e] = [1] * (e - s)
    if expected != rollout.loss_mask:
        raise AssertionError("loss_mask is not 1 exactly on the sampled tokens")
    if len(rollout.action_spans) != len(rollout.turn_spans) or not all(
        s <= a <= b <= e for (s, e), (a, b) in zip(rollout.turn_spans, rollout.action_spans, strict=True)
    ):
        raise AssertionError("action_spans are not one per turn inside the turn spans")
    if not (len(rollout.response_ids) == len(rollout.loss_mask) == len(rollout.rollout_logprobs)):
        raise AssertionError("response_ids, loss_mask and rollout_logprobs differ in length")


def rollout_episode(
    policy: HFPolicy,
    env: Any,
    *,
    seed: int,
    group_id: Hashable,
    sample_seed: int,
    config: RolloutConfig,
) -> Rollout:
    """Run one episode of ``env`` (reset with ``seed``) with ``policy``; sampling draws from a generator seeded
    with ``sample_seed``."""
    return run_episodes(policy, [env], seeds=[seed], group_ids=[group_id], sample_seeds=[sample_seed], config=config)[0]


def run_episodes(
    policy: HFPolicy,
    envs: Sequence[Any] | EnvPool,
    *,
    seeds: Sequence[int],
    group_ids: Sequence[Hashable],
    sample_seeds: Sequence[int],
    config: RolloutConfig,
    generation_batch: int | None = None,
    options: Sequence[dict[str, Any] | None] | None = None,
    snapshots: bool = False,
) -> list[Rollout]:
    """Episode ``i`` on ``envs[i]`` (reset with ``seeds[i]`` and ``options[i]``), all in lockstep: each turn,
    every episode still running samples in one batched generation (chunks of ``generation_batch`` rows; None =
    all), then the chunk's envs step at once. Episode ``i`` samples with a generator seeded with ``sample_seeds[i]``.

    ``envs`` is a list of envs or an ``agentgym.running.pool.EnvPool`` (episode ``i`` on slot ``i``; a ``ThreadPool`` or
    ``RayPool`` steps the envs in parallel). A failed reset raises; a failed step ends its episode with ``error``.
    ``snapshots``: keep each env's state before every turn in ``Rollout.snapshots`` (envs in this process only: a
    list or a ``SerialPool``), what baselines/branches.py forks from."""
    n = len(seeds)
    if not n == len(group_ids) == len(sample_seeds) or not (
        n <= len(envs) if isinstance(envs, EnvPool) else n == len(envs)
    ):
        raise ValueError("envs, seeds, group_ids and sample_seeds differ in length")
    pool = as_pool(envs)
    generators = [torch.Generator().manual_seed(int(s)) for s in sample_seeds]
    rollouts: list[Rollout] = []
    for out, seed, group_id in zip(pool.reset([int(s) for s in seeds], options), seeds, group_ids, strict=True):
        if out.error is not None:
            raise RuntimeError(f"episode {out.slot}: {out.error}")
        obs, info = out.observation, out.info
        r = Rollout(prompt_ids=policy.prompt_ids(obs), group_id=group_id, seed=int(seed), task_id=info.get("task_id"))
        r.initial_observation, r.reset_info = list(obs), dict(info)
        rollouts.append(r)
    contexts = advance_episodes(policy, pool, rollouts, generators, turn_limits=[config.max_turns] * n,
                                config=config, generation_batch=generation_batch, snapshots=snapshots)  # fmt: skip
    if config.check:
        for r, ctx in zip(rollouts, contexts, strict=True):
            check_contexts(r, ctx)
    return rollouts


def advance_episodes(
    policy: HFPolicy,
    pool: EnvPool,
    rollouts: Sequence[Rollout],
    generators: Sequence[torch.Generator],
    *,
    turn_limits: Sequence[int],
    config: RolloutConfig,
    generation_batch: int | None = None,
    snapshots: bool = False,
    share_prefill: bool = False,
) -> list[list[list[int]]]:
    """The lockstep turn loop of :func:`run_episodes`: episode ``i`` (``rollouts[i]``, its env on slot ``i`` of
    ``pool``, already reset or restored) plays at most ``turn_limits[i]`` more turns, sampling with
    ``generators[i]``; an episode that reaches its limit is truncated. Returns the contexts the model saw, per
    episode and turn. ``snapshots``: record each env's state before every turn (a ``SerialPool``: envs in this
    process); ``share_prefill``: passed to ``sample_batch`` (the HF loop's one prefill per distinct context)."""
    n = len(rollouts)
    if snapshots and not isinstance(pool, SerialPool):
        raise ValueError(f"snapshots need the envs in this process (a list or a SerialPool), not {type(pool).__name__}")
    envs = pool.envs if isinstance(pool, SerialPool) and snapshots else []
    contexts: list[list[list[int]]] = [[] for _ in range(n)]
    played = [0] * n
    running = [i for i in range(n) if turn_limits[i] > 0]
    chunk = generation_batch or max(n, 1)
    extra = {"share_prefill": True} if share_prefill else {}
    while running:
        ready = []
        for i in running:
            r = rollouts[i]
            budget = min(config.max_new_tokens, config.max_total_tokens - len(r.input_ids))
            if budget <= 0:
                r.truncated = True  # the context is full
            else:
                ready.append((i, budget))
        running = []
        for lo in range(0, len(ready), chunk):
            part = ready[lo : lo + chunk]
            samples = policy.sample_batch(
                [rollouts[i].input_ids for i, _ in part],
                budgets=[b for _, b in part],
                temperature=config.temperature,
                stop=config.stop,
                generators=[generators[i] for i, _ in part],
                **extra,
            )
            actions = [policy.decode(tokens) for tokens, _, _ in samples]
            for i, _ in part if snapshots else ():
                rollouts[i].snapshots.append(snapshot(envs[i]))
            outcomes = pool.step({i: action for (i, _), action in zip(part, actions, strict=True)})
            for (i, _), (tokens, logprobs, finish), action, out in zip(part, samples, actions, outcomes, strict=True):
                r = rollouts[i]
                contexts[i].append(r.input_ids)
                r.context_lengths.append(len(r.input_ids))
                # the action's tokens, from the text the env got
                span = action_token_span(tokens, policy.decode) if config.action_spans else None
                obs, terminated, truncated = r.record_outcome(tokens, logprobs, action, out, span)
                played[i] += 1
                if terminated or truncated:
                    continue
                if played[i] >= turn_limits[i]:
                    r.truncated = True  # turn limit of the rollout
                    continue
                r.append_observation(policy.observation_ids(obs, last_token=tokens[-1] if finish == "eos" else None))
                running.append(i)
        running.sort()
    return contexts


def collect_rollouts(
    policy: HFPolicy,
    env_factory: Callable[[], Any],
    task_seeds: Sequence[int],
    *,
    group_size: int,
    config: RolloutConfig,
    sample_seed: int = 0,
    group_offset: int = 0,
    envs: list[Any] | EnvPool | None = None,
    generation_batch: int | None = None,
    options: Sequence[dict[str, Any] | None] | None = None,
    snapshots: bool = False,
) -> list[Rollout]:
    """``group_size`` rollouts per task seed (a GRPO group shares its seed); group id = ``group_offset + task
    index``. Rollout ``j`` samples with ``derive_seed(sample_seed, j)``, so a batch is reproducible. ``options[b]``
    goes to the resets of task ``b`` (e.g. ``{"task_index": b}`` to play a split's tasks in order).

    All rollouts run in lockstep (:func:`run_episodes`), one env each. Pass ``envs`` (a list, grown with
    ``env_factory`` as needed and left open) to reuse envs across calls, or an ``agentgym.running.pool.EnvPool`` of at
    least ``len(task_seeds) * group_size`` slots (left open); otherwise they are made and closed here."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    n = len(task_seeds) * group_size
    pool = envs if envs is not None else []
    if isinstance(pool, EnvPool):
        if len(pool) < n:
            raise ValueError(f"the pool has {len(pool)} slots, {n} rollouts need as many")
    else:
        while len(pool) < n:
            pool.append(env_factory())
    was_training = policy.model.training
    policy.model.eval()
    try:
        return run_episodes(
            policy,
            pool if isinstance(pool, EnvPool) else pool[:n],
            seeds=[int(s) for s in task_seeds for _ in range(group_size)],
            group_ids=[group_offset + b for b in range(len(task_seeds)) for _ in range(group_size)],
            sample_seeds=[derive_seed(sample_seed, j) for j in range(n)],
            config=config,
            generation_batch=generation_batch,
            options=None if options is None else [o for o in options for _ in range(group_size)],
            snapshots=snapshots,
        )
    finally:
        policy.model.train(was_training)
        if envs is None and isinstance(pool, list):  # made here: closed here
            for env in pool:
                env.close()


def _numeric(info: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in info.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def demonstration_agent(env: Any) -> Any | None:
    """The env's demonstration agent (``AgentEnv.demo_agent``: its ``oracle`` unless it names another), or None when
    it has none."""
    from agentgym.running.runner import make_agent

    try:
        return make_agent(getattr(env.unwrapped, "demo_agent", "oracle"), env)
    except ValueError:
        return None


def demonstration_episode(
    policy: HFPolicy, env: Any, *, seed: int, config: RolloutConfig, group_id: Hashable = 0, snapshots: bool = False
) -> Rollout | None:
    """Teacher-forced episode for SFT: the env's demonstration agent (:func:`demonstration_agent`: SearchQA's
    compact ``<search>``/``<answer>`` plan, Household's optimal plan, the diagnostics' right choices) plays turn by
    turn, and its actions are tokenised (plus the end-of-message token) in place of samples, in the same token layout
    as :func:`rollout_episode` (mask 1 on action tokens, log-probs 0). None when the env has no such agent.
    ``snapshots``: keep the env's state before every turn in ``Rollout.snapshots``."""
    obs, info = env.reset(seed=seed)
    agent = demonstration_agent(env)
    if agent is None:
        return None
    agent.reset(seed=seed)
    r = Rollout(prompt_ids=policy.prompt_ids(obs), group_id=group_id, seed=seed, task_id=info.get("task_id"))
    r.initial_observation, r.reset_info = list(obs), dict(info)
    messages = list(obs)
    for turn in range(config.max_turns):
        action = agent.act(messages, info)
        tokens = [*policy.encode(action), policy.end_token_id]
        r.context_lengths.append(len(r.input_ids))
        if snapshots:  # the expert's state before each turn (IPR forks from it: baselines/ipr.py)
            r.snapshots.append(snapshot(env))
        span = action_token_span(tokens, policy.decode) if config.action_spans else None
        obs, terminated, truncated = r.record_turn(env, tokens, [0.0] * len(tokens), action, span)
        info = r.infos[-1]
        messages += [{"role": "assistant", "content": action}, *obs]
        if terminated or truncated:
            break
        if turn + 1 < config.max_turns:
            r.append_observation(policy.observation_ids(obs, last_token=policy.end_token_id))
    agent.close()
    return r
