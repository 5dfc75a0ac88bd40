"""SkyRL adapter (skyrl-gym 0.4): every agentgym env as a ``skyrl_gym`` ``BaseTextEnv``.

:func:`register_envs` registers one ``BaseTextEnv`` subclass per agentgym env id with ``skyrl_gym.envs.register``
(same id, e.g. ``"agentgym/SearchQA-v0"``; entry point ``"agentgym.integrations.skyrl:<class name>"``, so worker
processes can import it). A dataset row picks the env with ``env_class`` and the task with
``extra_info["agentgym"]`` (a :class:`~agentgym.integrations.tasks.TaskRef` dict; :func:`dataset_rows` builds them).

* ``init(prompt)`` resets the env on the row's task and returns the env's own first messages (the row's prompt is
  only what the trainer batches on) and ``{"task_id": ...}``.
* ``step(action)`` steps the env with the whole turn and returns ``{"observations": new messages ([] once done),
  "reward": the step's env reward, "done": terminated or truncated, "metadata": {...}}``. Each step's reward is
  that turn's reward (SkyRL places a step's reward on the last token of its turn); the metadata keeps the turn
  number, ``reward_components``, ``action_valid``, ``parse_error``, all per-turn rewards so far, and ``success`` at the
  end.
* ``get_metrics()``: ``turns``, ``return``, ``success`` and the env's numeric ``info["metrics"]`` of the last step.

Example (needs ``pip install skyrl-gym==0.4.0``)::

    import skyrl_gym
    from agentgym.integrations.skyrl import dataset_rows, register_envs

    register_envs(["agentgym/SearchQA-v0"])
    row = dataset_rows("agentgym/SearchQA-v0", [0], env_kwargs={"dataset": "tiny"})[0]
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)
    prompt, meta = env.init(row["prompt"])
    out = env.step("<answer> Paris </answer>")     # {'observations': [], 'reward': 0.0, 'done': True, ...}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from agentgym.contract.env import AgentEnv
from agentgym.integrations.tasks import TaskRef, task_rows

__all__ = ["class_name", "dataset_rows", "env_class", "register_envs"]

_CLASSES: dict[str, type] = {}


def class_name(env_id: str) -> str:
    """The importable class name of an env id's adapter: ``"agentgym/SearchQA-v0"`` -> ``"SkyRL_agentgym_SearchQA_v0"``.

    >>> class_name("agentgym/SearchQA-v0")
    'SkyRL_agentgym_SearchQA_v0'
    """
    return "SkyRL_" + re.sub(r"\W", "_", env_id)


def env_class(env_id: str) -> type:
    """The ``skyrl_gym`` ``BaseTextEnv`` subclass that plays ``env_id`` (made once per id; imports ``skyrl_gym``).

    Its constructor takes SkyRL's ``(env_config, extras)``: the task is ``extras["extra_info"]["agentgym"]`` (or
    ``extras["agentgym"]``; without one, a task is drawn from the env's task stream), and the env's keyword arguments
    are the task's own ``env_kwargs`` (a dataset row: only those the env takes from outside,
    ``agentgym.contract.trust``) updated with ``env_config["env_kwargs"]`` (the operator's)."""
    if env_id in _CLASSES:
        return _CLASSES[env_id]
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

    class AgentGymTextEnv(BaseTextEnv):
        __doc__ = f"``{env_id}`` as a skyrl_gym text env (agentgym.integrations.skyrl)."

        def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
            super().__init__()
            extras = dict(extras or {})
            spec = dict((extras.get("extra_info") or {}).get("agentgym") or extras.get("agentgym") or {})
            spec.setdefault("env_id", env_id)
            if spec["env_id"] != env_id:
                raise ValueError(f"this env class plays {env_id!r}, but the row's task is for {spec['env_id']!r}")
            config_kwargs = dict((env_config or {}).get("env_kwargs") or {})  # the operator's
            self.task = TaskRef.from_dict(spec)  # a dataset row: only the arguments an env takes from outside
            self.env = self.task.make_env(operator_kwargs=config_kwargs)
            base = self.env.unwrapped
            if not isinstance(base, AgentEnv):
                raise TypeError(f"{env_id} is not an agentgym env (AgentEnv)")
            self.max_turns = int(base.max_turns)
            self.turn_rewards: list[float] = []
            self.last_info: dict[str, Any] = {}

        def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            obs, info = self.task.reset(self.env)
            self.turns, self.turn_rewards, self.last_info = 0, [], dict(info)
            return obs, {"task_id": info.get("task_id"), "env_id": env_id}

        def step(self, action: str) -> BaseTextEnvStepOutput:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.turns += 1
            self.turn_rewards.append(float(reward))
            self.last_info = dict(info)
            done = bool(terminated or truncated)
            metadata = {
                "turn": info.get("turn"),
                "reward_components": dict(info.get("reward_components", {})),
                "action_valid": info.get("action_valid"),
                "parse_error": info.get("parse_error"),
                "turn_rewards": list(self.turn_rewards),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
            }
            if done:
                metadata["success"] = bool(info.get("success", False))
            return BaseTextEnvStepOutput(
                observations=[] if done else [dict(m) for m in obs], reward=float(reward), done=done, metadata=metadata
            )

        def get_metrics(self) -> dict[str, Any]:
            metrics = {k: float(v) for k, v in (self.last_info.get("metrics") or {}).items() if _is_number(v)}
            metrics.update(
                turns=float(self.turns),
                success=float(bool(self.last_info.get("success", False))),
                **{"return": float(sum(self.turn_rewards))},
            )
            return metrics

        def close(self) -> None:
            self.env.close()

    name = class_name(env_id)
    AgentGymTextEnv.__name__ = AgentGymTextEnv.__qualname__ = name
    AgentGymTextEnv.__module__ = __name__
    _CLASSES[env_id] = AgentGymTextEnv
    return AgentGymTextEnv


def register_envs(env_ids: Iterable[str] | None = None) -> list[str]:
    """Register agentgym envs with ``skyrl_gym`` under their own ids (default: every ``agentgym/*`` id registered
    with Gymnasium); ids already in ``skyrl_gym``'s registry are left alone. Returns the ids registered now."""
    import gymnasium as gym
    import skyrl_gym

    import agentgym  # noqa: F401  (registers the envs with Gymnasium)

    ids = sorted(i for i in gym.registry if i.startswith("agentgym/")) if env_ids is None else list(env_ids)
    done = []
    for env_id in ids:
        if env_id not in gym.registry:
            raise ValueError(f"{env_id!r} is not a registered Gymnasium env id")
        env_class(env_id)
        if env_id in skyrl_gym.registry:
            continue
        skyrl_gym.register(id=env_id, entry_point=f"{__name__}:{class_name(env_id)}")
        done.append(env_id)
    return done


def dataset_rows(
    env_id: str,
    tasks: Iterable[int] | int,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    data_source: str = "agentgym",
) -> list[dict[str, Any]]:
    """SkyRL dataset rows: ``{"data_source", "prompt", "env_class": env_id, "extra_info": {"agentgym": TaskRef dict,
    "task_id"}}``, one per task index (see :func:`agentgym.integrations.tasks.task_rows`)."""
    rows = []
    for row in task_rows(env_id, tasks, env_kwargs=env_kwargs):
        extra = {"agentgym": row["agentgym"], "task_id": row["task_id"]}
        rows.append({"data_source": data_source, "prompt": row["prompt"], "env_class": env_id, "extra_info": extra})
    return rows


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def __getattr__(name: str) -> type:
    """``skyrl_gym`` imports ``module:ClassName`` entry points; the classes are made on first access."""
    if name.startswith("SkyRL_"):
        import gymnasium as gym

        import agentgym  # noqa: F401

        for env_id in list(gym.registry):
            if class_name(env_id) == name:
                return env_class(env_id)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
