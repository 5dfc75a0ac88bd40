"""The reference token-in/token-out multi-turn rollout (DESIGN.md "Core contracts", ENVS.md token-in/token-out).

One loop, read top to bottom:

1. ``env.reset(seed=task_seed)``; the prompt is the chat template of the first observation plus the generation
   prompt, tokenised once. These are ``prompt_ids``.
2. Each turn the policy samples from ``softmax(logits / temperature)`` with a KV cache (HF forward back-end, CPU or
   GPU) and records the log-prob of every sampled token *under that temperature-scaled distribution*, so a trainer
   that recomputes ``log_softmax(logits / temperature)`` over the final ids gets the same numbers.
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

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym.agents.hf_agent import model_input_names, normalize_messages

__all__ = [
    "HFPolicy",
    "Rollout",
    "RolloutConfig",
    "check_contexts",
    "collect_rollouts",
    "demonstration_actions",
    "demonstration_episode",
    "derive_seed",
    "rollout_episode",
]

#: The fixed conversation the fixed-base trick renders new messages after (its content is irrelevant).
BASE_MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "user", "content": "base"},
    {"role": "assistant", "content": "base"},
)


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


@dataclass
class Rollout:
    """One episode in tokens. Response coordinates: index 0 is the first token after ``prompt_ids``.

    ``turn_spans[k] = (start, end)`` holds turn k's sampled tokens (all ``loss_mask`` 1); env and template tokens
    sit between spans with mask 0 and log-prob 0. ``turn_rewards[k]`` is the env reward of step k, and belongs on
    the last policy token of the turn (``turn_end_indices[k] = end - 1``).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
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
        self, env: Any, tokens: list[int], logprobs: list[float], action: str
    ) -> tuple[list[dict[str, Any]], bool, bool]:
        """Append one turn's sampled tokens (mask 1), step ``env`` with its text and record the step's outcome.

        Returns ``(observation, terminated, truncated)``; on the episode's end the flags and success are set.
        """
        start = len(self.response_ids)
        self.response_ids += tokens
        self.loss_mask += [1] * len(tokens)
        self.rollout_logprobs += logprobs
        self.turn_spans.append((start, len(self.response_ids)))
        self.actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        self.turn_rewards.append(float(reward))
        self.anchors.append(info.get("anchor"))
        self.reward_components.append(dict(info.get("reward_components", {})))
        self.turn_metrics.append(_numeric(info))
        if terminated or truncated:
            self.terminated, self.truncated = bool(terminated), bool(truncated)
            self.success = bool(info.get("success", False))
        return obs, bool(terminated), bool(truncated)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable record (for JSONL dumps and other trainers)."""
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "loss_mask": self.loss_mask,
            "rollout_logprobs": self.rollout_logprobs,
            "turn_spans": [list(s) for s in self.turn_spans],
            "turn_end_indices": self.turn_end_indices,
            "turn_rewards": self.turn_rewards,
            "group_id": self.group_id if isinstance(self.group_id, (int, str)) else str(self.group_id),
            "seed": self.seed,
            "task_id": self.task_id,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "success": self.success,
        }


class HFPolicy:
    """A transformers causal LM + tokenizer as a sampling policy (KV-cache loop, temperature-scaled log-probs)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template")
        self.model = model
        self.tokenizer = tokenizer
        self._cache_kw = model_input_names(model)[0]
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

    def _forward(self, ids: torch.Tensor, cache: Any) -> tuple[Any, torch.Tensor]:
        kwargs: dict[str, Any] = {"use_cache": True}
        if cache is not None:
            kwargs[self._cache_kw] = cache
        out = self.model(ids, **kwargs)
        new_cache = out.get("cache")
        return (out.get("past_key_values") if new_cache is None else new_cache), out.logits[0, -1].float()

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
        device = next(self.model.parameters()).device
        scale = temperature if temperature > 0 else 1.0
        cache, last = self._forward(torch.tensor([list(context)], device=device), None)
        tokens: list[int] = []
        logprobs: list[float] = []
        finish = "length"
        for step in range(max_new_tokens):
            lp = torch.log_softmax(last / scale, dim=-1)
            if temperature > 0:
                token = int(torch.multinomial(lp.exp().cpu(), 1, generator=generator).item())
            else:
                token = int(torch.argmax(lp).item())
            tokens.append(token)
            logprobs.append(float(lp[token].item()))
            if token in self.eos_token_ids:
                finish = "eos"
                break
            if stop:
                text = self.decode(tokens)
                if any(s in text for s in stop):
                    finish = "stop"
                    break
            if step + 1 < max_new_tokens:
                cache, last = self._forward(torch.tensor([[token]], device=device), cache)
        return tokens, logprobs, finish


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
    generator = torch.Generator().manual_seed(sample_seed)
    obs, info = env.reset(seed=seed)
    r = Rollout(prompt_ids=policy.prompt_ids(obs), group_id=group_id, seed=seed, task_id=info.get("task_id"))
    contexts: list[list[int]] = []
    for turn in range(config.max_turns):
        context = r.input_ids
        budget = min(config.max_new_tokens, config.max_total_tokens - len(context))
        if budget <= 0:
            r.truncated = True
            break
        contexts.append(context)
        r.context_lengths.append(len(context))
        tokens, logprobs, finish = policy.sample(
            context, max_new_tokens=budget, temperature=config.temperature, stop=config.stop, generator=generator
        )
        action = policy.decode(tokens)
        obs, terminated, truncated = r.record_turn(env, tokens, logprobs, action)
        if terminated or truncated:
            break
        if turn + 1 == config.max_turns:
            r.truncated = True  # turn limit of the rollout
            break
        new = policy.observation_ids(obs, last_token=tokens[-1] if finish == "eos" else None)
        r.response_ids += new
        r.loss_mask += [0] * len(new)
        r.rollout_logprobs += [0.0] * len(new)
    if config.check:
        check_contexts(r, contexts)
    return r


def collect_rollouts(
    policy: HFPolicy,
    env_factory: Callable[[], Any],
    task_seeds: Sequence[int],
    *,
    group_size: int,
    config: RolloutConfig,
    sample_seed: int = 0,
    group_offset: int = 0,
) -> list[Rollout]:
    """``group_size`` rollouts per task seed (a GRPO group shares its seed); group id = ``group_offset + task
    index``. Rollout ``j`` samples with ``derive_seed(sample_seed, j)``, so a batch is reproducible."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    env = env_factory()
    was_training = policy.model.training
    policy.model.eval()
    out: list[Rollout] = []
    try:
        for b, seed in enumerate(task_seeds):
            for g in range(group_size):
                j = b * group_size + g
                out.append(
                    rollout_episode(
                        policy,
                        env,
                        seed=int(seed),
                        group_id=group_offset + b,
                        sample_seed=derive_seed(sample_seed, j),
                        config=config,
                    )
                )
    finally:
        env.close()
        policy.model.train(was_training)
    return out


def _numeric(info: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in info.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def demonstration_actions(info: dict[str, Any]) -> list[str] | None:
    """Oracle actions from an env's reset ``info`` (None when the env has no oracle). SearchQA: one
    ``<search>`` per gold hop query, then ``<answer>`` with the first gold answer."""
    gold = info.get("gold") or {}
    if isinstance(gold, dict) and gold.get("answers"):
        queries = [f"<search> {q} </search>" for q in gold.get("oracle_queries", [])]
        return [*queries, f"<answer> {gold['answers'][0]} </answer>"]
    return None


def demonstration_episode(
    policy: HFPolicy, env: Any, *, seed: int, config: RolloutConfig, group_id: Hashable = 0
) -> Rollout | None:
    """Teacher-forced episode for SFT: the oracle actions are tokenised (plus eos) in place of samples, in the same
    token layout as :func:`rollout_episode` (mask 1 on action tokens, log-probs 0). None without an oracle."""
    obs, info = env.reset(seed=seed)
    actions = demonstration_actions(info)
    if actions is None:
        return None
    r = Rollout(prompt_ids=policy.prompt_ids(obs), group_id=group_id, seed=seed, task_id=info.get("task_id"))
    for turn, action in enumerate(actions[: config.max_turns]):
        tokens = [*policy.encode(action), policy.end_token_id]
        r.context_lengths.append(len(r.input_ids))
        obs, terminated, truncated = r.record_turn(env, tokens, [0.0] * len(tokens), action)
        if terminated or truncated:
            break
        if turn + 1 < min(len(actions), config.max_turns):
            new = policy.observation_ids(obs, last_token=policy.end_token_id)
            r.response_ids += new
            r.loss_mask += [0] * len(new)
            r.rollout_logprobs += [0.0] * len(new)
    return r
