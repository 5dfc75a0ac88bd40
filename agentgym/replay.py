"""Deterministic replay: re-execute recorded trajectories and report any divergence.

Each trajectory is replayed on a fresh env built from its ``env_id`` and ``env_kwargs``, reset with its
``seed`` and ``options``, and fed its recorded actions; every observation, reward, flag and ``info`` must
match the record exactly (compared as canonical JSON).

>>> import agentgym, tempfile, os
>>> from agentgym.runner import run
>>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
>>> _ = run("agentgym/SearchQA-v0", "heuristic", 2, env_kwargs={"dataset": "tiny"}, out=path, progress=False)
>>> [r.ok for r in replay_file(path)]
[True, True]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentgym.trajectory import Trajectory, read_trajectories


@dataclass
class ReplayResult:
    """Outcome of replaying one trajectory; ``divergence`` describes the first mismatch."""

    index: int
    task_id: str
    turns: int
    divergence: str | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, ensure_ascii=False)


def _first_diff(what: str, recorded: Any, replayed: Any) -> str | None:
    a, b = _canon(recorded), _canon(replayed)
    if a == b:
        return None
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo, hi = max(0, i - 40), i + 40
    return f"{what} differs at character {i}: recorded {a[lo:hi]!r} vs replayed {b[lo:hi]!r}"


def replay_trajectory(traj: Trajectory, env: gym.Env | None = None, index: int = 0) -> ReplayResult:
    """Replay one trajectory (on ``env`` if given, else a fresh env from its record)."""
    own = env is None
    env = env or gym.make(traj.env_id, **traj.env_kwargs)
    result = ReplayResult(index=index, task_id=traj.task_id, turns=len(traj.turns))
    try:
        obs, info = env.reset(seed=traj.seed, options=traj.options or None)
        result.divergence = _first_diff("reset observation", traj.initial_observation, obs) or _first_diff(
            "reset info", traj.reset_info, info
        )
        for k, turn in enumerate(traj.turns, 1):
            if result.divergence:
                break
            obs, reward, terminated, truncated, info = env.step(turn.action)
            recorded = [turn.observation, turn.reward, turn.terminated, turn.truncated, turn.info]
            result.divergence = _first_diff(f"turn {k}", recorded, [obs, float(reward), terminated, truncated, info])
    except Exception as e:
        result.divergence = f"replay raised {type(e).__name__}: {e}"
    finally:
        if own:
            env.close()
    return result


def replay_file(path: str | os.PathLike[str]) -> Iterator[ReplayResult]:
    """Replay every trajectory in a JSONL file, reusing one env per (env_id, env_kwargs)."""
    envs: dict[str, gym.Env] = {}
    try:
        for i, traj in enumerate(read_trajectories(path)):
            key = _canon([traj.env_id, traj.env_kwargs])
            if key not in envs:
                envs[key] = gym.make(traj.env_id, **traj.env_kwargs)
            yield replay_trajectory(traj, envs[key], index=i)
    finally:
        for env in envs.values():
            env.close()
