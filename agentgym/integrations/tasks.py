"""What the trainer adapters share: a JSON reference to one task of one env, and dataset rows built from it.

A trainer's dataset row carries a :class:`TaskRef` (as a plain dict); the adapter rebuilds the env from it inside the
trainer's worker, resets it on that task and plays the episode. The prompt in the row is the env's own first
messages, so a trainer that batches or filters by prompt sees what the policy will see.

>>> import agentgym
>>> rows = task_rows("agentgym/SearchQA-v0", [0, 1], env_kwargs={"dataset": "tiny"})
>>> rows[0]["prompt"][0]["role"], rows[0]["agentgym"]["options"], rows[0]["task_id"]
('user', {'task_index': 0}, 'test-00000')
>>> ref = TaskRef.from_dict(rows[1]["agentgym"])
>>> env = ref.make_env()
>>> ref.reset(env)[1]["task_id"]
'test-00001'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.contract.agent import normalize_messages
from agentgym.contract.trust import checked_kwargs

__all__ = ["TaskRef", "task_rows"]


@dataclass(frozen=True)
class TaskRef:
    """One task of one env: ``gymnasium.make(env_id, **env_kwargs)``, then ``reset(seed=seed, options=options)``.

    ``options`` picks the task (``{"task_index": i}`` or ``{"task_id": "..."}``); None draws it from the seeded task
    stream. JSON-serialisable through :meth:`to_dict` / :meth:`from_dict` (or :meth:`from_json`)."""

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "env_kwargs": dict(self.env_kwargs),
            "seed": self.seed,
            "options": None if self.options is None else dict(self.options),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskRef:
        """From :meth:`to_dict`'s output (unknown keys are refused, so a typo does not pass silently)."""
        unknown = set(data) - {"env_id", "env_kwargs", "seed", "options"}
        if unknown:
            raise ValueError(f"unknown TaskRef key(s) {sorted(unknown)}")
        if not isinstance(data.get("env_id"), str):
            raise ValueError(f"TaskRef needs a string 'env_id', got {data.get('env_id')!r}")
        seed = data.get("seed")
        return cls(
            env_id=data["env_id"],
            env_kwargs=dict(data.get("env_kwargs") or {}),
            seed=None if seed is None else int(seed),
            options=None if data.get("options") is None else dict(data["options"]),
        )

    @classmethod
    def from_json(cls, text: str) -> TaskRef:
        return cls.from_dict(json.loads(text))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def make_env(self, operator_kwargs: Mapping[str, Any] | None = None) -> gym.Env:
        """The task's env. A dataset row is not trusted: its ``env_kwargs`` may hold only arguments the env takes
        from outside (``agentgym.contract.trust``; ``UntrustedArgumentError`` otherwise), and ``operator_kwargs`` (the
        trainer's own configuration: files, URLs, caches) replace the row's."""
        kwargs = checked_kwargs(self.env_id, dict(self.env_kwargs), operator=operator_kwargs, operator_wins=True)
        return gym.make(self.env_id, **kwargs)

    def reset(self, env: gym.Env) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset ``env`` on this task; the observation comes back as normalised chat messages (text content)."""
        obs, info = env.reset(seed=self.seed, options=None if self.options is None else dict(self.options))
        return normalize_messages(obs), info


def task_rows(
    env_id: str,
    tasks: Iterable[int] | int,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    key: str = "agentgym",
) -> list[dict[str, Any]]:
    """One dataset row per task index (``tasks``: indices, or a count = the first ``tasks`` tasks):
    ``{"prompt": the env's first messages, "task_id": ..., key: TaskRef(...).to_dict()}``.

    The env is built once and reset on each task to read its prompt. Rows are data, not trusted where they are
    played: give operator-only arguments (``agentgym.contract.trust``) to the adapter's configuration there as well."""
    indices = range(tasks) if isinstance(tasks, int) else [int(i) for i in tasks]
    kwargs = dict(env_kwargs or {})
    env = gym.make(env_id, **kwargs)
    try:
        rows = []
        for i in indices:
            ref = TaskRef(env_id, kwargs, options={"task_index": i})
            obs, info = ref.reset(env)
            rows.append({"prompt": obs, "task_id": str(info["task_id"]), key: ref.to_dict()})
        return rows
    finally:
        env.close()
