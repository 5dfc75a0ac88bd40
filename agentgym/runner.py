"""Run agents on envs: one episode, or many (serially or on a thread pool) with byte-identical output.

The agent is a built-in agent's name (``oracle``, ``heuristic``, ``random``, or ``openai`` / ``hf``), an
``Agent`` object, or any callable policy ``(messages, info) -> str``.

Episode ``i`` of a run with base seed ``s`` and group size ``k`` belongs to group ``g = i // k``: it is reset
with ``seed=s + g`` and, with ``tasks="sequential"``, ``options={"task_index": g % num_tasks}``, so the k
episodes of a group play the same task (GRPO-style groups) and consecutive groups play distinct tasks. The
agent of episode ``i`` is reset with ``seed=s + i``, so group members sample differently. Each worker owns its
env and agent; trajectories are written in episode order whatever the completion order, so serial and
parallel runs produce the same file.

>>> import agentgym
>>> trajs = run("agentgym/SearchQA-v0", "oracle", episodes=2, seed=0, env_kwargs={"dataset": "tiny"},
...             progress=False)
>>> [t.success for t in trajs]
[True, True]
>>> groups = run("agentgym/SearchQA-v0", "random", episodes=4, group_size=2, env_kwargs={"dataset": "tiny"},
...              progress=False)
>>> [(t.group_id, t.task_id) for t in groups] == [("0", groups[0].task_id)] * 2 + [("1", groups[2].task_id)] * 2
True
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from agentgym.agents.base import Agent, Message
from agentgym.core import AgentEnv
from agentgym.trajectory import Trajectory, TrajectoryWriter, Turn

#: Agents that work with any env (they talk to a model, not to env internals).
GENERIC_AGENTS: dict[str, str] = {
    "openai": "agentgym.agents.openai_agent:OpenAIAgent",
    "hf": "agentgym.agents.hf_agent:HFAgent",
}

#: A policy: an agent name, an ``Agent``, or a callable ``(messages, info) -> str``.
Policy = str | Agent | Callable[[list[Message], dict[str, Any]], str]


class CallableAgent(Agent):
    """An ``Agent`` around a plain policy function ``(messages, info) -> str``.

    >>> CallableAgent(lambda messages, info: "<answer> 42 </answer>").act([], {})
    '<answer> 42 </answer>'
    """

    def __init__(self, fn: Callable[[list[Message], dict[str, Any]], str], name: str | None = None):
        super().__init__()
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)

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
    if isinstance(agent, type) and issubclass(agent, Agent):
        return agent(**kwargs)
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
    raise ValueError(f"unknown agent {agent!r} for {env.spec.id if env.spec else env}; choose from {known}")


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
    """Play one episode and return its record. An agent exception ends the episode with ``error`` set.

    The agent is reset with ``agent_seed`` (default: ``seed``).
    """
    obs, info = env.reset(seed=seed, options=options)
    agent.reset(seed=seed if agent_seed is None else agent_seed)
    traj = Trajectory(
        env_id=env_id or (env.spec.id if env.spec else type(env.unwrapped).__name__),
        seed=seed,
        task_id=str(info.get("task_id", "")),
        agent=agent.name,
        initial_observation=list(obs),
        reset_info=info,
        env_kwargs=env_kwargs_of(env, env_kwargs or {}),
        options=dict(options or {}),
        group_id=group_id,
    )
    messages = list(obs)
    while True:
        try:
            action = agent.act(messages, info)
        except Exception as e:  # an agent failure (e.g. a dead endpoint) is recorded, not fatal to the run
            traj.error = f"{type(e).__name__}: {e}"
            return traj
        obs, reward, terminated, truncated, info = env.step(action)
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


def run(
    env_id: str,
    agent: Policy,
    episodes: int,
    *,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    tasks: str = "sequential",
    group_size: int = 1,
    workers: int = 1,
    out: str | os.PathLike[str] | None = None,
    progress: bool = True,
    make_env: Callable[[], gym.Env] | None = None,
) -> list[Trajectory]:
    """Play ``episodes`` episodes; optionally append them to the JSONL file ``out`` in episode order.

    ``agent`` is a name, an ``Agent`` or a policy callable (see the module docstring). With ``workers > 1``
    each worker gets its own copy of an ``Agent`` object (``copy.deepcopy``); a plain callable is shared by
    the workers and must be thread-safe.
    """
    spec = RunSpec(env_id, episodes, seed, dict(env_kwargs or {}), tasks, group_size)
    factory = make_env or (lambda: gym.make(spec.env_id, **spec.env_kwargs))
    workers = max(1, min(workers, episodes))
    local = threading.local()
    made: list[tuple[gym.Env, Agent]] = []
    lock = threading.Lock()

    def play(i: int) -> Trajectory:
        if not hasattr(local, "env"):
            local.env = factory()
            with lock:
                given = copy.deepcopy(agent) if isinstance(agent, Agent) and workers > 1 else agent
                local.agent = make_agent(given, local.env, **dict(agent_kwargs or {}))
                made.append((local.env, local.agent))
        num_tasks = getattr(local.env.unwrapped, "num_tasks", None)
        return run_episode(
            local.env, local.agent, seed=spec.env_seed(i), options=spec.options(i, num_tasks), env_id=spec.env_id,
            env_kwargs=spec.env_kwargs, group_id=spec.group_id(i), agent_seed=spec.seed + i,
        )  # fmt: skip

    results: dict[int, Trajectory] = {}
    writer = TrajectoryWriter(out) if out is not None else None
    next_to_write = 0
    label = agent if isinstance(agent, str) else getattr(agent, "name", None) or getattr(agent, "__name__", "policy")
    bar = tqdm(total=episodes, desc=f"{env_id} | {label}", disable=not progress, unit="ep", leave=False)
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending = {pool.submit(play, i): i for i in range(episodes)}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    results[pending.pop(fut)] = fut.result()
                    bar.update(1)
                while next_to_write in results:
                    if writer is not None:
                        writer.write(results[next_to_write])
                    next_to_write += 1
    finally:
        bar.close()
        if writer is not None:
            writer.close()
        for env, ag in made:
            if ag is not agent:  # the caller's own Agent object stays theirs to close
                ag.close()
            env.close()
    return [results[i] for i in range(episodes)]


def episode_metrics(traj: Trajectory) -> dict[str, float]:
    """Per-episode numbers for summaries: success, return, turns, invalid-action rate, env metrics."""
    n = len(traj.turns)
    out = {
        "success": float(traj.success),
        "return": traj.total_reward,
        "turns": float(n),
        "invalid_rate": sum(not t.action_valid for t in traj.turns) / n if n else 0.0,
        "error": float(traj.error is not None),
    }
    for k, v in traj.final_info.get("metrics", {}).items():
        if isinstance(v, int | float):
            out[k] = float(v)
    return out


def category_of(traj: Trajectory) -> str:
    """The task category used to break summaries down (SearchQA: the hop type)."""
    gold = traj.reset_info.get("gold") or {}
    return str(gold.get("category") or gold.get("hop_type") or gold.get("task_type") or "all")


def summarize(trajs: Sequence[Trajectory], *, by_category: bool = True) -> list[dict[str, Any]]:
    """Mean metrics over episodes, overall and per category; one dict per row."""
    groups: dict[str, list[Trajectory]] = {"all": list(trajs)}
    categories: dict[str, list[Trajectory]] = {}
    if by_category:
        for t in trajs:
            categories.setdefault(category_of(t), []).append(t)
    if len(categories) > 1:  # with one category (or none) the "all" row says it
        groups.update({"uncategorised" if c == "all" else c: members for c, members in categories.items()})
    rows = []
    for cat, members in groups.items():
        per = [episode_metrics(t) for t in members]
        keys = list(dict.fromkeys(k for p in per for k in p))
        row: dict[str, Any] = {"category": cat, "episodes": len(members)}
        row.update({k: sum(p.get(k, 0.0) for p in per) / len(per) for k in keys})
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, *, markdown: bool = True) -> str:
    """Render rows as an aligned Markdown table (floats to 3 decimals)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or dict.fromkeys(k for r in rows for k in r))

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return "" if v is None else str(v)

    body = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    numeric = [any(_is_number(r.get(c)) for r in rows) and all(_is_number(r.get(c)) or r.get(c) is None for r in rows)
               for c in cols]  # fmt: skip

    def line(cells: Sequence[str]) -> str:
        parts = [s.rjust(w) if num else s.ljust(w) for s, w, num in zip(cells, widths, numeric, strict=True)]
        return "| " + " | ".join(parts) + " |"

    sep = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2)) for w, num in zip(widths, numeric, strict=True))
        + "|"
    )
    lines = [line(cols), sep, *(line(b) for b in body)]
    return "\n".join(lines) if markdown else "\n".join(lines[:1] + lines[2:])


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
