"""OpenRLHF adapter (OpenRLHF 0.11): an ``AgentInstance`` / ``AgentExecutor`` pair for ``--train.agent_func_path``.

OpenRLHF's ``MultiTurnAgentExecutor`` works in text: it tokenizes the ``observation`` returned by ``reset``, samples
a turn (``action_text``, special tokens kept), passes it to ``step``, tokenizes the returned
``environment_feedback`` and appends it, until ``done``. :class:`AgentGymInstance` plays an agentgym env behind that
interface:

* ``reset(states)``: ``states["label"]`` is a :class:`~agentgym.integrations.tasks.TaskRef` as JSON (the dataset's
  label column; :func:`dataset_rows` builds rows); the env is reset on it and the observation is the env's first
  messages rendered with the model's chat template and the generation prompt.
* ``step(states)``: the turn (a trailing eos/pad token text removed) goes to ``env.step``; returns ``rewards`` (this
  turn's env reward), ``scores`` (the return so far), ``environment_feedback`` (the template's end-of-message text,
  without the eos when the turn already ended with it, then the env's new messages rendered with the template's
  fixed-base trick and the generation prompt, so the concatenated text is the chat template of the conversation),
  ``done`` (terminated or truncated), ``sampling_params`` (unchanged) and ``extra_logs`` (``turn``, ``success``,
  ``env_return``).

How per-turn rewards reach the advantage: OpenRLHF 0.11 sums ``rewards`` over the turns into one trajectory reward
(``total_reward``), which its estimators (REINFORCE++, GRPO, RLOO, ...) use as the outcome; the per-turn values
themselves stop there (the last step's ``extra_logs`` are logged).

``agent_func.py`` (needs OpenRLHF installed, where it runs)::

    from agentgym.integrations.openrlhf import agent_classes

    AgentInstance, AgentExecutor = agent_classes()   # OpenRLHF imports AgentExecutor from this file

The executor gives the instances its tokenizer (``hf_tokenizer``) before the first episode.

>>> import agentgym
>>> row = dataset_rows("agentgym/SearchQA-v0", [3], env_kwargs={"dataset": "tiny"})[0]
>>> sorted(row), TaskRef.from_json(row["label"]).options
(['label', 'prompt', 'task_id'], {'task_index': 3})
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from agentgym.contract.agent import normalize_messages
from agentgym.integrations.tasks import TaskRef, task_rows

__all__ = ["AgentGymInstance", "ChatText", "agent_classes", "dataset_rows"]

#: The fixed conversation new messages are rendered after (the fixed-base trick; its content is irrelevant).
BASE_MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "user", "content": "base"},
    {"role": "assistant", "content": "base"},
)


class ChatText:
    """A tokenizer's chat template in text: the prompt, the end-of-message text and the text of new messages."""

    def __init__(self, tokenizer: Any) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        base = list(BASE_MESSAGES)
        with_prompt = self.render(base[:1], add_generation_prompt=True)
        full = self.render(base, add_generation_prompt=False)
        if not full.startswith(with_prompt + base[1]["content"]):
            raise ValueError("the chat template does not render an assistant turn as generation prompt + content")
        self._base = full
        #: the text the template puts after an assistant message's content (e.g. ``<|im_end|>\n``)
        self.closing = full[len(with_prompt) + len(base[1]["content"]) :]
        #: end-of-sequence / padding token texts a sampled turn may end with
        self.end_texts = tuple(
            t for t in {getattr(tokenizer, "eos_token", None), getattr(tokenizer, "pad_token", None)} if t
        )

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            normalize_messages([dict(m) for m in messages]), add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def prompt(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return self.render(messages, add_generation_prompt=True)

    def split_end(self, action: str) -> tuple[str, str | None]:
        """``(turn text, the end token text it ended with or None)``."""
        for t in self.end_texts:
            if action.endswith(t):
                return action[: -len(t)], t
        return action, None

    def feedback(self, messages: Sequence[Mapping[str, Any]], *, ended_with: str | None = None) -> str:
        """Text to append after an assistant turn: the closing text (without its leading ``ended_with`` token text,
        already sampled), then ``messages`` and the generation prompt as the template renders them after a turn."""
        closing = self.closing
        if ended_with and closing.startswith(ended_with):
            closing = closing[len(ended_with) :]
        full = self.render([*BASE_MESSAGES, *messages], add_generation_prompt=True)
        if not full.startswith(self._base):
            raise ValueError("fixed-base trick: the template changes the base text when messages follow")
        return closing + full[len(self._base) :]


class AgentGymInstance:
    """One episode of an agentgym env behind OpenRLHF's ``AgentInstance`` interface (async ``reset`` / ``step``).

    ``tokenizer`` (class attribute) renders the chat template; :func:`agent_classes`' executor sets it to OpenRLHF's
    ``hf_tokenizer``. ``env_kwargs`` (class attribute, the operator's) replace each task's own ``env_kwargs`` (a dataset
    row: only the arguments an env takes from outside, ``agentgym.contract.trust``)."""

    tokenizer: ClassVar[Any] = None
    env_kwargs: ClassVar[Mapping[str, Any]] = {}
    _chat: ClassVar[ChatText | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.env: Any = None
        self.turn_rewards: list[float] = []

    @classmethod
    def chat(cls) -> ChatText:
        if cls._chat is None or cls._chat.tokenizer is not cls.tokenizer:
            if cls.tokenizer is None:
                raise RuntimeError("AgentGymInstance.tokenizer is not set (agent_classes' executor sets it)")
            cls._chat = ChatText(cls.tokenizer)
        return cls._chat

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        label = states.get("label")
        # a dataset row: only the arguments an env takes from outside; the class's env_kwargs are the operator's
        if isinstance(label, str):
            task = TaskRef.from_json(label)
        elif isinstance(label, Mapping):
            task = TaskRef.from_dict(label)
        else:
            raise ValueError(f"the row's label must be a TaskRef (JSON text or a mapping), got {label!r:.200}")
        loop = asyncio.get_running_loop()
        self.env = await loop.run_in_executor(None, functools.partial(task.make_env, dict(self.env_kwargs)))
        obs, _ = await loop.run_in_executor(None, task.reset, self.env)
        self.turn_rewards = []
        return {"observation": self.chat().prompt(obs)}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if self.env is None:
            raise RuntimeError("step before reset")
        chat = self.chat()
        action, ended_with = chat.split_end(states["action_text"])
        loop = asyncio.get_running_loop()
        obs, reward, terminated, truncated, info = await loop.run_in_executor(None, self.env.step, action)
        self.turn_rewards.append(float(reward))
        done = bool(terminated or truncated)
        feedback = "" if done else chat.feedback(normalize_messages(obs), ended_with=ended_with)
        episode_return = float(sum(self.turn_rewards))
        if done:
            self.env.close()
        return {
            "rewards": np.float64(reward),  # OpenRLHF calls .item() on it
            "scores": np.float64(episode_return),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {
                "turn": float(len(self.turn_rewards)),
                "success": float(bool(info.get("success", False))),
                "env_return": episode_return,
            },
        }


def agent_classes(env_kwargs: Mapping[str, Any] | None = None) -> tuple[type, type]:
    """``(AgentInstance, AgentExecutor)``: :class:`AgentGymInstance` on OpenRLHF's ``AgentInstanceBase``, and a
    ``MultiTurnAgentExecutor`` with a no-argument constructor (how OpenRLHF builds it) that hands its
    ``hf_tokenizer`` to the instances. Imports ``openrlhf``."""
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    class AgentInstance(AgentGymInstance, AgentInstanceBase):
        pass

    AgentInstance.env_kwargs = dict(env_kwargs or {})
    instance_cls = AgentInstance

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self) -> None:
            super().__init__(instance_cls)

        async def execute(
            self,
            prompt: Any,
            label: Any,
            sampling_params: Any,
            max_length: int,
            hf_tokenizer: Any,
            llm_engine: Any,
            images: Any = None,
        ) -> Any:
            if instance_cls.tokenizer is None:
                instance_cls.tokenizer = hf_tokenizer
            return await super().execute(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=images
            )

    return instance_cls, AgentExecutor


def dataset_rows(
    env_id: str, tasks: Iterable[int] | int, *, env_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """OpenRLHF prompt-dataset rows: ``{"prompt": the env's first messages, "label": TaskRef JSON, "task_id"}``
    (``--data.input_key prompt --data.label_key label --data.apply_chat_template``)."""
    return [
        {"prompt": r["prompt"], "label": TaskRef.from_dict(r["agentgym"]).to_json(), "task_id": r["task_id"]}
        for r in task_rows(env_id, tasks, env_kwargs=env_kwargs)
    ]
