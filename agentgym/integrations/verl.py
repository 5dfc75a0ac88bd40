"""verl adapter (verl 0.9): an agent loop that plays agentgym envs, and a turn-level advantage estimator.

``AgentGymAgentLoop`` (registered as ``"agentgym"`` with verl's ``@register``) subclasses
``verl.experimental.agent_loop.agent_loop.AgentLoopBase``. Its ``run`` resets the env named by the dataset row's
``extra_info["agentgym"]`` (a :class:`~agentgym.integrations.tasks.TaskRef` dict; :func:`dataset_rows` builds the
rows), then alternates generation through verl's ``server_manager.generate`` (token ids in, token ids and log-probs
out) with ``env.step(decoded turn)``, joining tokens with verl's own Continuous Token builder (``ct_merge_*``, the
path verl's ``ToolAgentLoop`` takes). It returns an ``AgentLoopOutput`` with ``prompt_ids``, ``response_ids``,
``response_mask`` (1 on sampled tokens, 0 on env and template tokens), ``response_logprobs``, ``num_turns``,
``reward_score`` = the episode return, and in ``extra_fields``: ``turn_rewards`` (one per agent turn),
``turn_ends`` (response index of each turn's last sampled token), ``task_id`` and ``success``.

How per-turn rewards reach the advantage: verl 0.9.1 hands a registered estimator only ``token_level_rewards``,
``response_mask``, ``index`` (the group uid) and ``config``; ``token_level_rewards`` is the ``rm_scores`` tensor
that ``AgentLoopOutput.as_dict()`` builds (the v1 trainer, verl's default, stores outputs through it). The output
class here overrides ``as_dict`` to put each turn's reward on its turn's last token (its sum is still the episode
return, so outcome estimators such as GRPO see the same totals). The ``agentgym_turn`` estimator splits every
response into turns at the runs of ``response_mask`` 1, sums each turn's token rewards, runs an agentgym turn-level
estimator (``algorithm.agentgym_estimator``, default ``"gtpo"``; keyword arguments from
``algorithm.agentgym_estimator_kwargs``) over the groups given by ``index``, and broadcasts the per-turn advantages
to the turn's tokens (0 on env tokens). The legacy trainer (``trainer.use_v1=False``) builds ``rm_scores`` from the
scalar ``reward_score`` alone, so there every turn but the last gets reward 0.

Use (verl must be importable in the driver and in the agent-loop workers)::

    # your entry point, run instead of `python -m verl.trainer.main_ppo`
    from agentgym.integrations import verl as agentgym_verl
    agentgym_verl.register()                       # the "agentgym" agent loop and the "agentgym_turn" estimator
    from verl.trainer.main_ppo import main
    main()
    # with: data.train_files=<parquet of dataset_rows(...)> actor_rollout_ref.rollout.mode=async
    #       algorithm.adv_estimator=agentgym_turn +algorithm.agentgym_estimator=gtpo
    #       actor_rollout_ref.rollout.agent.agent_loop_config_path=<yaml: [{name: agentgym,
    #           _target_: agentgym.integrations.verl.AgentGymAgentLoop}]>   (so workers can import it)

The parts that need no verl are plain functions and are tested without it:

>>> turn_spans_from_mask([1, 1, 0, 0, 1, 0])
[(0, 2), (4, 5)]
>>> turn_token_rewards([0.5, 1.0], turn_ends=[1, 4], length=6)
[0.0, 0.5, 0.0, 0.0, 1.0, 0.0]
>>> rewards = [[0, 0.5, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0]]  # two responses of one group, turns at [0, 2) and [4, 5)
>>> turn_advantages(rewards, [[1, 1, 0, 0, 1, 0]] * 2, ["q", "q"]).round(3).tolist()  # GTPO: z-scored returns-to-go
[[1.347, 1.347, 0.0, 0.0, 0.577, 0.0], [-0.962, -0.962, 0.0, 0.0, -0.962, 0.0]]
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from agentgym.contract.agent import normalize_messages
from agentgym.integrations.tasks import TaskRef, task_rows
from agentgym.rewards.advantages import TurnBatch, broadcast_to_tokens_batch, get_estimator

__all__ = [
    "AGENT_NAME",
    "ESTIMATOR_NAME",
    "AgentGymLoopMixin",
    "dataset_rows",
    "register",
    "turn_advantages",
    "turn_spans_from_mask",
    "turn_token_rewards",
]

AGENT_NAME = "agentgym"
ESTIMATOR_NAME = "agentgym_turn"
_CLASSES: dict[str, type] = {}


# ----------------------------------------------------------------------------------------------------------------
# framework-free pieces


def turn_spans_from_mask(mask: Sequence[int] | Any) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of nonzero entries of one response mask: the agent turns of a response."""
    m = np.asarray(mask).reshape(-1) != 0
    edges = np.flatnonzero(np.diff(np.concatenate([[False], m, [False]]).astype(np.int8)))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def turn_token_rewards(turn_rewards: Sequence[float], turn_ends: Sequence[int], length: int) -> list[float]:
    """Token rewards ``(length,)``: turn ``k``'s reward on index ``turn_ends[k]``; an end at or past ``length`` (a turn
    cut by the response limit) goes to the last index, so the sum is always the episode return."""
    if len(turn_rewards) != len(turn_ends):
        raise ValueError(f"{len(turn_rewards)} turn rewards but {len(turn_ends)} turn ends")
    out = [0.0] * length
    if length == 0:
        return out
    for r, e in zip(turn_rewards, turn_ends, strict=True):
        out[min(max(int(e), 0), length - 1)] += float(r)
    return out


def turn_advantages(
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Hashable],
    *,
    estimator: str = "gtpo",
    **params: Any,
) -> np.ndarray:
    """Per-token advantages ``(B, L)`` from token rewards: each row's turns are the runs of ``response_mask`` 1; turn
    ``k``'s reward is the sum of the token rewards from its first token up to the next turn's first token (the
    rewards :func:`turn_token_rewards` places, and any per-token KL penalty, land in their turn); the agentgym
    estimator ``estimator`` (``agentgym.rewards.advantages.ESTIMATORS``) runs over the groups ``index``; each turn's
    advantage goes on its tokens, 0 elsewhere. A row with no policy token has no turn and gets zeros."""
    rewards = np.asarray(_numpy(token_level_rewards), dtype=np.float64)
    mask = np.asarray(_numpy(response_mask))
    if rewards.ndim != 2 or rewards.shape != mask.shape:
        raise ValueError(f"token_level_rewards {rewards.shape} and response_mask {mask.shape} must be the same (B, L)")
    b, length = rewards.shape
    keys = list(_numpy(index)) if not isinstance(index, list) else index
    if len(keys) != b:
        raise ValueError(f"{len(keys)} group ids for {b} responses")
    spans = [turn_spans_from_mask(row) for row in mask]
    rows = [k for k in range(b) if spans[k]]
    out = np.zeros((b, length))
    if not rows:
        return out
    turn_rewards = []
    for k in rows:
        starts = [s for s, _ in spans[k]]
        bounds = [0, *starts[1:], length]
        turn_rewards.append([float(rewards[k, bounds[t] : bounds[t + 1]].sum()) for t in range(len(starts))])
    batch = TurnBatch(turn_rewards, group_ids=[_hashable(keys[k]) for k in rows])
    per_turn = get_estimator(estimator)(batch, **params)
    out[rows] = broadcast_to_tokens_batch(per_turn, [spans[k] for k in rows], length, mask[rows])
    return out


def dataset_rows(
    env_id: str,
    tasks: Iterable[int] | int,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    data_source: str = "agentgym",
    stop: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """verl dataset rows (write them to parquet for ``data.train_files``): ``prompt`` (the env's first messages),
    ``agent_name`` ``"agentgym"``, ``data_source``, ``reward_model`` (unused: the loop scores the episode) and
    ``extra_info`` ``{"agentgym": TaskRef dict, "task_id", "stop": stop strings added to the sampling params}``."""
    rows = []
    for row in task_rows(env_id, tasks, env_kwargs=env_kwargs):
        extra = {"agentgym": row["agentgym"], "task_id": row["task_id"], "stop": list(stop or [])}
        rows.append(
            {
                "data_source": data_source,
                "prompt": row["prompt"],
                "agent_name": AGENT_NAME,
                "reward_model": {"style": "agentgym", "ground_truth": ""},
                "extra_info": extra,
            }
        )
    return rows


# ----------------------------------------------------------------------------------------------------------------
# the agent loop (its body needs only what AgentLoopBase provides, so tests can run it against a stand-in base)


class AgentGymLoopMixin:
    """The ``run`` of the agentgym agent loop, written against ``AgentLoopBase``'s members: ``self.server_manager``,
    ``self.tokenizer``, ``self.rollout_config`` (``response_length``, ``multi_turn.max_assistant_turns``) and the
    Continuous Token helpers ``ct_build_initial_tokens``, ``ct_merge_assistant_token``, ``ct_merge_context_msg``.
    ``make_output(**fields)`` builds the output object (verl's ``AgentLoopOutput`` subclass in the real class)."""

    # AgentLoopBase's members (declared for the type checker; the base class that comes after this one sets them)
    server_manager: Any
    tokenizer: Any
    rollout_config: Any
    ct_build_initial_tokens: Callable[..., Awaitable[Any]]
    ct_merge_assistant_token: Callable[..., Awaitable[Any]]
    ct_merge_context_msg: Callable[..., Awaitable[Any]]

    def make_output(self, **fields: Any) -> Any:  # pragma: no cover - replaced in the real class
        return fields

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        extra = dict(kwargs.get("extra_info") or {})
        spec = extra.get("agentgym") or kwargs.get("agentgym")
        if spec is None:
            raise ValueError("the dataset row has no extra_info['agentgym'] task (build rows with dataset_rows)")
        task = TaskRef.from_dict(dict(spec))
        params = dict(sampling_params)
        if extra.get("stop"):
            params["stop"] = [*list(params.get("stop") or []), *list(extra["stop"])]
        cfg = self.rollout_config
        limit = int(cfg.response_length)
        max_turns = _get(_get(cfg, "multi_turn"), "max_assistant_turns")
        loop = asyncio.get_running_loop()
        env = await loop.run_in_executor(None, task.make_env)
        metrics = {"generate_sequences": 0.0, "tool_calls": 0.0}
        try:
            messages, info = await loop.run_in_executor(None, task.reset, env)
            ids = list(await self.ct_build_initial_tokens(messages))
            mask: list[int] = []
            logprobs: list[float] | None = []
            spans: list[tuple[int, int]] = []
            rewards: list[float] = []
            request_id = uuid.uuid4().hex
            env_replies = 0
            while True:
                t0 = time.perf_counter()
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids, sampling_params=params)
                metrics["generate_sequences"] += time.perf_counter() - t0
                if out.log_probs is None:  # the server returns no log-probs: the output has none either
                    logprobs = None
                merged, mask, logprobs = await self.ct_merge_assistant_token(
                    ids,
                    list(out.token_ids),
                    mask,
                    logprobs,
                    assistant_logprobs=out.log_probs if logprobs is not None else None,
                )
                ids = list(merged.token_ids)
                spans.append((len(mask) - merged.appended_token_count, len(mask)))
                text = self.tokenizer.decode(list(out.token_ids), skip_special_tokens=True)
                t0 = time.perf_counter()
                obs, reward, terminated, truncated, info = await loop.run_in_executor(None, env.step, text)
                metrics["tool_calls"] += time.perf_counter() - t0
                rewards.append(float(reward))
                if terminated or truncated or len(mask) >= limit or (max_turns and len(spans) >= int(max_turns)):
                    break
                before = [*messages, {"role": "assistant", "content": text}]
                after = [*before, *normalize_messages(obs)]
                merged, new_mask, new_logprobs = await self.ct_merge_context_msg(before, after, ids, mask, logprobs)
                if len(new_mask) >= limit:
                    break
                kept = len(mask) - merged.removed_prefix_token_count  # a builder may trim the previous turn's tail
                spans[-1] = (min(spans[-1][0], kept), min(spans[-1][1], kept))
                ids, mask, logprobs, messages = list(merged.token_ids), new_mask, new_logprobs, after
                env_replies += 1
        finally:
            env.close()
        response_ids = ids[len(ids) - len(mask) :]
        prompt_ids = ids[: len(ids) - len(mask)]
        length = min(len(mask), limit)
        ends = [e - 1 if e > s else s - 1 for s, e in spans]
        return self.make_output(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:length],
            response_mask=mask[:length],
            response_logprobs=None if logprobs is None else logprobs[:length],
            reward_score=float(sum(rewards)),
            num_turns=1 + len(spans) + env_replies,  # verl counts messages: prompt, assistant turns, env replies
            metrics=metrics,
            extra_fields={
                "turn_rewards": rewards,
                "turn_ends": ends,
                "task_id": info.get("task_id"),
                "success": bool(info.get("success", False)),
            },
        )


def _loop_class() -> type:
    if "loop" in _CLASSES:
        return _CLASSES["loop"]
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

    class AgentGymLoopOutput(AgentLoopOutput):
        """``AgentLoopOutput`` whose ``rm_scores`` carry each turn's reward on its last token."""

        def as_dict(self) -> dict[str, Any]:
            out = super().as_dict()
            if "rm_scores" in out and "turn_rewards" in self.extra_fields:
                length = int(out["response_mask"].shape[0])
                scores = turn_token_rewards(self.extra_fields["turn_rewards"], self.extra_fields["turn_ends"], length)
                out["rm_scores"] = torch.tensor(scores, dtype=torch.float32)
            return out

    class AgentGymAgentLoop(AgentGymLoopMixin, AgentLoopBase):
        """Plays one agentgym episode per dataset row (see :mod:`agentgym.integrations.verl`)."""

        def make_output(self, **fields: Any) -> Any:
            return AgentGymLoopOutput(**fields)

    for cls in (AgentGymLoopOutput, AgentGymAgentLoop):  # importable as agentgym.integrations.verl.<name>
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    _CLASSES["loop"], _CLASSES["output"] = AgentGymAgentLoop, AgentGymLoopOutput
    return AgentGymAgentLoop


def compute_turn_advantage(
    token_level_rewards: Any,
    response_mask: Any,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """The ``agentgym_turn`` estimator in verl's signature: :func:`turn_advantages` on torch tensors, returning
    ``(advantages, returns)`` (both the advantages, as verl's outcome estimators do). ``config`` (verl's algorithm
    config) may set ``agentgym_estimator`` and ``agentgym_estimator_kwargs``; without ``index`` every response is
    its own group."""
    import torch

    name = _get(config, "agentgym_estimator") or "gtpo"
    params = dict(_get(config, "agentgym_estimator_kwargs") or {})
    ids = list(range(token_level_rewards.shape[0])) if index is None else list(index)
    adv = turn_advantages(token_level_rewards, response_mask, ids, estimator=str(name), **params)
    out = torch.as_tensor(adv, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
    return out, out.clone()


def register() -> type:
    """Register the ``"agentgym"`` agent loop (verl's ``@register``) and the ``"agentgym_turn"`` estimator
    (``register_adv_est``); idempotent. Returns the agent loop class. Imports verl."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry, register as register_loop
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    cls = _loop_class()
    if AGENT_NAME not in _agent_loop_registry:
        register_loop(AGENT_NAME)(cls)
    if ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_turn_advantage:
        register_adv_est(ESTIMATOR_NAME)(compute_turn_advantage)
    return cls


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping) or hasattr(obj, "get"):
        try:
            return obj.get(key)
        except Exception:  # a structured config without the key
            return None
    return getattr(obj, key, None)


def _numpy(x: Any) -> Any:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x


def _hashable(x: Any) -> Hashable:
    return x.item() if isinstance(x, np.generic) else x


def __getattr__(name: str) -> type:
    """``AgentGymAgentLoop`` / ``AgentGymLoopOutput`` are made on first access (importing verl), so hydra's
    ``_target_: agentgym.integrations.verl.AgentGymAgentLoop`` resolves in verl's workers."""
    if name == "AgentGymAgentLoop":
        return _loop_class()
    if name == "AgentGymLoopOutput":
        _loop_class()
        return _CLASSES["output"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
