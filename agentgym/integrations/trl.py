"""TRL adapter (TRL 1.16): a ``GRPOTrainer`` ``rollout_func`` and an ``environment_factory`` for the tool envs.

**rollout_func.** :class:`AgentGymRollout` plays each prompt's agentgym task with the trainer's own model through the
reference token-in/token-out rollout (``agentgym.baselines.rollout``: KV-cached sampling from ``softmax(logits / T)``
at the trainer's temperature, without ``GRPOConfig``'s top-p/top-k; observation tokens by the fixed-base trick; every
context checked; ``max_total_tokens``, not ``max_completion_length``, bounds an episode) and returns what
``GRPOTrainer`` asks of a ``rollout_func``: ``prompt_ids``, ``completion_ids`` (the whole multi-turn response:
sampled turns with the env's observation and template tokens between them), ``logprobs`` (temperature-scaled; 0 on
env tokens) and ``env_mask`` (1 on sampled tokens: TRL's loss mask). Extra keys reach every reward function as
keyword arguments: ``turn_rewards`` (one list per completion), ``turn_spans``, ``env_return``, ``success``, ``task_id``.

How per-turn rewards reach the advantage: ``GRPOTrainer`` computes one advantage per completion (its reward
functions' weighted sum, normalised within the group) and applies it to every ``env_mask`` 1 token, so a reward
function folds the per-turn rewards into one number: :func:`env_return` (their sum) or :func:`discounted_return`.

The prompts must come from :meth:`AgentGymRollout.dataset` (or :meth:`~AgentGymRollout.rows`): TRL passes only the
prompts to a ``rollout_func``, so the adapter finds each prompt's task by its text.

**environment_factory.** :func:`tool_environment` makes a class for ``GRPOTrainer(environment_factory=...)`` from a
tool-calling env (ToolUse, BFCL, CodeExec): ``reset(**row)`` resets the env on the row's task; every function the
env lists in its system prompt becomes a public method with the schema's typed signature and docstring (so TRL
exposes it as a tool), which steps the env with one Hermes ``<tool_call>`` and returns the tool messages' text;
``reply(message)`` sends a plain-text reply and returns what the user says next (the env's next instruction); and
``get_reward()`` returns the episode's reward so far.

Example (needs ``pip install trl==1.16.0``)::

    from trl import GRPOConfig, GRPOTrainer
    from agentgym.integrations.trl import AgentGymRollout, env_return

    rollout = AgentGymRollout("agentgym/SearchQA-v0", env_kwargs={"dataset": "tiny"}, max_turns=3, max_new_tokens=32,
                              stop=("</search>", "</answer>"))
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=env_return,
                          train_dataset=rollout.dataset(range(8)), rollout_func=rollout,
                          args=GRPOConfig(num_generations=4, per_device_train_batch_size=4, max_steps=10))
    trainer.train()

>>> discounted_return(0.5)(completions=[None], turn_rewards=[[1.0, 0.0, 2.0]])
[1.5]
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import GenericAlias
from typing import Any

import gymnasium as gym

from agentgym.baselines.rollout import HFPolicy, RolloutConfig, derive_seed, run_episodes
from agentgym.integrations.tasks import TaskRef, task_rows

__all__ = ["AgentGymRollout", "discounted_return", "env_return", "tool_environment", "tool_schemas"]


def _key(prompt: Any) -> str:
    """The lookup key of a prompt: its messages (or text) as canonical JSON."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([{"role": m["role"], "content": m.get("content")} for m in prompt], sort_keys=True)


class AgentGymRollout:
    """A ``GRPOTrainer`` ``rollout_func`` that plays agentgym episodes with the trainer's model.

    Args:
        env_id: the Gymnasium id of the env.
        env_kwargs: its constructor arguments.
        max_turns: agent turns per episode (the env's own limit also applies).
        max_new_tokens: tokens per turn.
        stop: stop strings that end a turn (e.g. ``("</search>", "</answer>")``).
        max_total_tokens: prompt + response limit of an episode.
        seed: base seed of the env resets and sampling generators (one stream per call and completion).
        generation_batch: rows per batched generation (None: all of a call's episodes at once).
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        max_turns: int = 3,
        max_new_tokens: int = 64,
        stop: Sequence[str] = (),
        max_total_tokens: int = 2048,
        seed: int = 0,
        generation_batch: int | None = None,
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.max_turns, self.max_new_tokens, self.max_total_tokens = max_turns, max_new_tokens, max_total_tokens
        self.stop = tuple(stop)
        self.seed = seed
        self.generation_batch = generation_batch
        self._tasks: dict[str, dict[str, Any]] = {}
        self._envs: list[gym.Env] = []
        self._policy: HFPolicy | None = None
        self._calls = 0
        self.last_rollouts: list[Any] = []  # the ``Rollout`` records of the latest call (for inspection)

    def rows(self, tasks: Iterable[int] | int) -> list[dict[str, Any]]:
        """Dataset rows ``{"prompt": the env's first messages, "task_id"}`` for these task indices; remembers each
        prompt's task (a later row with the same prompt text replaces an earlier one)."""
        rows = task_rows(self.env_id, tasks, env_kwargs=self.env_kwargs)
        for r in rows:
            self._tasks[_key(r["prompt"])] = dict(r["agentgym"]["options"])
        return [{"prompt": r["prompt"], "task_id": r["task_id"]} for r in rows]

    def dataset(self, tasks: Iterable[int] | int) -> Any:
        """:meth:`rows` as a ``datasets.Dataset`` (the ``train_dataset``)."""
        from datasets import Dataset

        return Dataset.from_list(self.rows(tasks))

    def policy(self, trainer: Any) -> HFPolicy:
        """The trainer's model (unwrapped) and tokenizer as an ``HFPolicy`` (rebuilt when either changes)."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
        if self._policy is None or self._policy.model is not model or self._policy.tokenizer is not tokenizer:
            self._policy = HFPolicy(model, tokenizer)
        return self._policy

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play one episode per prompt (GRPO's repeated prompts are its groups) and return TRL's fields."""
        options = []
        for p in prompts:
            try:
                options.append(self._tasks[_key(p)])
            except KeyError:
                raise KeyError(
                    "rollout_func got a prompt it did not make: build the dataset with AgentGymRollout.dataset()"
                ) from None
        policy = self.policy(trainer)
        n = len(prompts)
        while len(self._envs) < n:
            self._envs.append(gym.make(self.env_id, **self.env_kwargs))
        groups: list[int] = []  # consecutive equal prompts form one group
        for i in range(n):
            groups.append(groups[-1] + (prompts[i] != prompts[i - 1]) if i else 0)
        call = self._calls
        self._calls += 1
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        config = RolloutConfig(
            max_turns=self.max_turns,
            max_new_tokens=self.max_new_tokens,
            temperature=float(getattr(trainer, "temperature", 1.0)),
            stop=self.stop,
            max_total_tokens=self.max_total_tokens,
        )
        was_training = policy.model.training
        policy.model.eval()
        try:
            rollouts = run_episodes(
                policy,
                self._envs[:n],
                seeds=[derive_seed(self.seed, step, call, g) % 2**31 for g in groups],
                group_ids=groups,
                sample_seeds=[derive_seed(self.seed, step, call, n + j) for j in range(n)],
                config=config,
                generation_batch=self.generation_batch,
                options=options,
            )
        finally:
            policy.model.train(was_training)
        self.last_rollouts = rollouts
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.response_ids for r in rollouts],
            "logprobs": [r.rollout_logprobs for r in rollouts],
            "env_mask": [r.loss_mask for r in rollouts],
            "turn_rewards": [list(r.turn_rewards) for r in rollouts],
            "turn_spans": [[list(s) for s in r.turn_spans] for r in rollouts],
            "env_return": [r.outcome for r in rollouts],
            "success": [r.success for r in rollouts],
            "task_id": [r.task_id for r in rollouts],
        }

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []


def env_return(completions: list[Any], turn_rewards: list[list[float]], **kwargs: Any) -> list[float]:
    """Reward function: each completion's episode return (the sum of its per-turn env rewards)."""
    return [float(sum(r)) for r in turn_rewards]


def discounted_return(gamma: float) -> Callable[..., list[float]]:
    """Reward function: ``sum_k gamma^k r_k`` over each completion's per-turn rewards (earlier turns weigh more)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")

    def discounted(completions: list[Any], turn_rewards: list[list[float]], **kwargs: Any) -> list[float]:
        return [float(sum(r * gamma**k for k, r in enumerate(rs))) for rs in turn_rewards]

    discounted.__name__ = f"discounted_return_{gamma:g}"
    return discounted


# ----------------------------------------------------------------------------------------------------------------
# environment_factory


_TOOLS = re.compile(r"<tools>\s*\n(.*?)\n\s*</tools>", re.S)
_JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}
_RESERVED = {"reset", "get_reward", "reply"}


def tool_schemas(messages: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{name: function schema}`` listed between ``<tools>`` and ``</tools>`` (one JSON schema per line) in the
    env's messages: the tool-calling envs' shared contract (docs/tool-calling.md)."""
    found: dict[str, dict[str, Any]] = {}
    for m in messages:
        for block in _TOOLS.findall(str(m.get("content") or "")):
            for line in block.splitlines():
                if line.strip():
                    schema = json.loads(line)
                    fn = schema.get("function", schema)
                    found[fn["name"]] = fn
    return found


def _annotation(prop: Mapping[str, Any]) -> Any:
    kind = prop.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "array":
        return GenericAlias(list, (_annotation(prop.get("items") or {"type": "string"}),))
    return _JSON_TYPES.get(kind, str) if isinstance(kind, str) else str


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _tool_method(name: str, fn: Mapping[str, Any]) -> Callable[..., str]:
    """A method ``name(self, **arguments) -> str`` with the schema's typed signature and a Google-style docstring
    (what ``transformers.utils.get_json_schema`` reads), which plays one Hermes tool call."""
    params = dict((fn.get("parameters") or {}).get("properties") or {})
    required = [p for p in (fn.get("parameters") or {}).get("required", []) if p in params]
    optional = [p for p in params if p not in required]
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for p in [*required, *optional]:
        annotations[p] = _annotation(params[p])
        default = inspect.Parameter.empty if p in required else None
        sig_params.append(
            inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[p])
        )

    def method(self: Any, **arguments: Any) -> str:
        args = {k: v for k, v in arguments.items() if v is not None or k in required}
        return self._act(f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>")

    lines = [_one_line(fn.get("description") or name)]
    if params:
        lines += ["", "Args:"]
        lines += [f"    {p}: {_one_line(params[p].get('description') or p)}" for p in [*required, *optional]]
    lines += ["", "Returns:", "    The tool's output."]
    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__signature__ = inspect.Signature(sig_params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


def tool_environment(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    tasks: Iterable[int] | int = 1,
    reply_tool: bool = True,
) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` playing the tool-calling env ``env_id``.

    Its tools are the union of the functions the env offers on ``tasks`` (indices, or a count: the first ones), read
    from the ``<tools>`` block of each task's first messages; a call the current task does not offer comes back as the
    env's own error message. Train on :meth:`rows` (``{"prompt", "task_id", "agentgym": TaskRef dict}``: the prompt
    already holds the env's system prompt and first instruction, so ``reset`` returns None).

    >>> import agentgym
    >>> Env = tool_environment("agentgym/ToolUse-v0", env_kwargs={"world": "bank"})
    >>> env = Env()
    >>> row = Env.rows([3])[0]
    >>> row["prompt"][-1]["content"]
    'Transfer 302.50 from savings to checking. Then tell me the new balance of checking.'
    >>> env.reset(**row), env.transfer(source="savings", target="checking", amount=302.5)
    (None, '"moved 302.50 from savings to checking"')
    >>> env.reply(message="Checking now holds 2610.50.")  # the user's next instruction comes back
    'Transfer 1472.00 from checking to savings. Then tell me the new balance of savings.'
    >>> env.get_reward()
    0.0
    """
    kwargs = dict(env_kwargs or {})
    probe = gym.make(env_id, **kwargs)
    indices = range(tasks) if isinstance(tasks, int) else [int(i) for i in tasks]
    schemas: dict[str, dict[str, Any]] = {}
    try:
        for i in indices:
            obs, _ = probe.reset(options={"task_index": i})
            schemas.update(tool_schemas(obs))
    finally:
        probe.close()
    if not schemas:
        raise ValueError(f"{env_id} lists no functions between <tools> tags in its first messages")
    clash = sorted((set(schemas) & _RESERVED) | {n for n in schemas if n.startswith("_")})
    if clash:
        raise ValueError(f"{env_id} has functions named like the environment's own members: {clash}")

    def __init__(self: Any) -> None:
        self.env = None  # the task's gym.Env, from the first reset on
        self.spec = None  # that task's TaskRef
        self.rewards = []  # this episode's step rewards
        self.done = False

    def reset(self: Any, **row: Any) -> str | None:
        spec = row.get("agentgym")
        task = TaskRef(env_id, kwargs) if spec is None else TaskRef.from_dict(spec)
        same_env = self.spec is not None and (self.spec.env_id, self.spec.env_kwargs) == (task.env_id, task.env_kwargs)
        if self.env is None or not same_env:
            if self.env is not None:
                self.env.close()
            self.env = task.make_env()
        self.spec = task
        task.reset(self.env)
        self.rewards, self.done = [], False
        return None

    def _act(self: Any, action: str) -> str:
        if self.env is None:
            raise RuntimeError("reset() the environment first")
        if self.done:
            return "The episode has ended."
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self.rewards.append(float(reward))
        self.done = bool(terminated or truncated)
        text = "\n".join(str(m.get("content") or "") for m in obs)
        return text + ("\n(The episode has ended.)" if self.done else "")

    def get_reward(self: Any) -> float:
        return float(sum(self.rewards))

    # no annotation on self: transformers would take it for an argument (mypy sees a function, not a method)
    def reply(self, message: str) -> str:  # type: ignore[no-untyped-def]
        """Send a plain-text reply to the user; returns what the user says next.

        Args:
            message: the reply, as the user will read it.

        Returns:
            The user's next message, or a note that the episode has ended.
        """
        return self._act(message)

    def rows(cls: type, tasks: Iterable[int] | int) -> list[dict[str, Any]]:
        return task_rows(env_id, tasks, env_kwargs=kwargs)

    namespace: dict[str, Any] = {
        "__init__": __init__,
        "__doc__": f"``{env_id}`` as a TRL environment: its functions as tools, ``get_reward()`` the return so far.",
        "__module__": __name__,
        "reset": reset,
        "_act": _act,
        "get_reward": get_reward,
        "rows": classmethod(rows),  # a bound method on the class, so TRL does not take it for a tool
        "tool_names": tuple(sorted(schemas)),
    }
    if reply_tool:
        namespace["reply"] = reply
    for name, fn in schemas.items():
        namespace[name] = _tool_method(name, fn)
    return type(re.sub(r"\W", "_", env_id.rpartition("/")[2]) + "ToolEnv", (), namespace)
