"""One episode: turn a policy into an ``Agent`` and play it on an env, recording a ``Trajectory``.

The floor under :mod:`agentgym.running.runner` (many episodes, files, summaries) and :mod:`agentgym.running.pool`
(envs on threads, processes or Ray actors): both import this module, neither imports the other at run time.

>>> import agentgym, gymnasium as gym
>>> env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
>>> traj = run_episode(env, make_agent("oracle", env), seed=0)
>>> traj.success, traj.error
(True, None)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.contract.agent import Agent, Message
from agentgym.contract.env import AgentEnv
from agentgym.contract.trajectory import Trajectory, Turn

#: Agents that work with any env (they talk to a model, not to env internals).
GENERIC_AGENTS: dict[str, str] = {
    "openai": "agentgym.agents.openai_agent:OpenAIAgent",
    "hf": "agentgym.agents.hf_agent:HFAgent",
}

#: A policy: an agent name, an ``Agent`` or ``Agent`` class, or a callable ``(messages, info) -> str``.
Policy = str | Agent | type[Agent] | Callable[[list[Message], dict[str, Any]], str]


class CallableAgent(Agent):
    """An ``Agent`` around a plain policy function ``(messages, info) -> str``.

    >>> CallableAgent(lambda messages, info: "<answer> 42 </answer>").act([], {})
    '<answer> 42 </answer>'
    """

    def __init__(self, fn: Callable[[list[Message], dict[str, Any]], str], name: str | None = None):
        super().__init__()
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", type(fn).__name__))

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        return self.fn(messages, info)


def builtin_agents(env: gym.Env) -> list[str]:
    """Names of the env's own built-in agents (e.g. ``oracle``, ``heuristic``, ``random``)."""
    unwrapped = env.unwrapped
    return list(unwrapped.agents) if isinstance(unwrapped, AgentEnv) else []


def make_agent(agent: Policy, env: gym.Env, **kwargs: Any) -> Agent:
    """An ``Agent`` for ``agent``: a built-in agent's name (the env's own, or ``openai`` / ``hf``) or an ``Agent``
    class, built with ``kwargs``; an ``Agent`` object (returned as is); or a policy callable (in ``CallableAgent``)."""
    if isinstance(agent, Agent):
        return agent
    if isinstance(agent, type):
        if issubclass(agent, Agent):
            return agent(**kwargs)
        raise TypeError(f"an agent class must subclass agentgym.contract.agent.Agent, got {agent.__qualname__}")
    if callable(agent):
        return CallableAgent(agent)
    unwrapped = env.unwrapped
    env_agents = unwrapped.agents if isinstance(unwrapped, AgentEnv) else {}
    if agent in env_agents:
        return env_agents[agent](**kwargs)
    if agent in GENERIC_AGENTS:
        import importlib

        module, cls = GENERIC_AGENTS[agent].split(":")
        return getattr(importlib.import_module(module), cls)(**kwargs)
    known = sorted({*env_agents, *GENERIC_AGENTS})
    close = difflib.get_close_matches(str(agent), known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown agent {agent!r} for {env.spec.id if env.spec else env}; {hint}choose from {known}")


def env_kwargs_of(env: gym.Env, given: dict[str, Any]) -> dict[str, Any]:
    """Constructor kwargs that recreate ``env``: the env's own record, overridden by what the user gave."""
    unwrapped = env.unwrapped
    own = unwrapped.spec_kwargs() if isinstance(unwrapped, AgentEnv) else {}
    return {**own, **given}


def run_episode(
    env: gym.Env,
    agent: Agent,
    *,
    seed: int | None,
    options: dict[str, Any] | None = None,
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    group_id: str | None = None,
    agent_seed: int | None = None,
) -> Trajectory:
    """Play one episode and return its record. An exception of the agent or the env ends the episode with
    ``error`` set (``"env.reset: ..."`` / ``"env.step: ..."`` for the env's).

    The agent is reset with ``agent_seed`` (default: ``seed``).
    """
    traj = Trajectory(
        env_id=env_id or (env.spec.id if env.spec else type(env.unwrapped).__name__),
        seed=seed,
        task_id="",
        agent=agent.name,
        initial_observation=[],
        reset_info={},
        env_kwargs=env_kwargs_of(env, env_kwargs or {}),
        options=dict(options or {}),
        group_id=group_id,
    )
    try:
        obs, info = env.reset(seed=seed, options=options)
    except Exception as e:  # e.g. an unreachable retrieval server: recorded; the runner stops on repeated failures
        traj.error = f"env.reset: {type(e).__name__}: {e}"
        return traj
    agent.reset(seed=seed if agent_seed is None else agent_seed)
    traj.task_id, traj.initial_observation, traj.reset_info = str(info.get("task_id", "")), list(obs), info
    messages = list(obs)
    while True:
        try:
            action = agent.act(messages, info)
        except Exception as e:  # an agent failure (e.g. a dead endpoint) is recorded, not fatal to the run
            traj.error = f"{type(e).__name__}: {e}"
            return traj
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as e:
            traj.error = f"env.step: {type(e).__name__}: {e}"
            return traj
        traj.turns.append(Turn(action, list(obs), float(reward), bool(terminated), bool(truncated), info))
        messages.append({"role": "assistant", "content": action})
        messages.extend(obs)
        if terminated or truncated:
            return traj


@dataclass
class RunSpec:
    """What ``run`` plays: ``episodes`` episodes of ``env_id``, in groups of ``group_size`` on one task."""

    env_id: str
    episodes: int
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: ``"sequential"`` plays task g in group g (distinct tasks); ``"random"`` lets the seed pick.
    tasks: str = "sequential"
    group_size: int = 1

    def __post_init__(self) -> None:
        if self.tasks not in ("sequential", "random"):
            raise ValueError(f"tasks must be 'sequential' or 'random', got {self.tasks!r}")
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if self.episodes % self.group_size:
            raise ValueError(f"episodes ({self.episodes}) must be a multiple of group_size ({self.group_size})")

    def group(self, i: int) -> int:
        return i // self.group_size

    def env_seed(self, i: int) -> int:
        return self.seed + self.group(i)

    def options(self, i: int, num_tasks: int | None) -> dict[str, Any]:
        if self.tasks == "random":
            return {}
        g = self.group(i)
        return {"task_index": g % num_tasks if num_tasks else g}

    def group_id(self, i: int) -> str | None:
        return str(self.group(i)) if self.group_size > 1 else None


def group_seeds(seed: int, num_groups: int, group_size: int) -> list[int]:
    """Reset seeds for a vector env of ``num_groups * group_size`` sub-envs in groups of ``group_size``.

    ``envs.reset(seed=group_seeds(s, G, k))`` puts sub-envs ``g*k .. g*k+k-1`` on the same task; after each
    automatic reset they stay on a common task (see ``AgentEnv.reset``).

    >>> group_seeds(7, 2, 3)
    [7, 7, 7, 8, 8, 8]
    """
    return [seed + g for g in range(num_groups) for _ in range(group_size)]


class RunAborted(RuntimeError):
    """A run stopped early because episodes kept failing the same way (the message says how)."""


def error_kind(error: str) -> str:
    """What makes two episode errors "the same kind": where it happened and the exception type."""
    head = error.split(":", 2)
    return ":".join(head[:2]) if head[0].startswith("env.") else head[0]
