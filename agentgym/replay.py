"""Deterministic replay: re-execute recorded trajectories and report any divergence.

Each trajectory is replayed on a fresh env built from its ``env_id`` and ``env_kwargs``, reset with its
``seed`` and ``options``, and fed its recorded actions; every observation, reward, flag and ``info`` must
match the record exactly (compared as canonical JSON), and an episode recorded without an error must end where
the env ends it (no turns missing). Fields that re-execution cannot check (``agent``, ``group_id``, ``error``,
``token_spans``, the seed where ``options`` pick the task) are covered by the record's checksum. A bad record
(not JSON, an unknown field or format version, an env that is not registered or does not accept the recorded
arguments) is reported and replay goes on. Only registered envs are made: a record cannot make replay import a
module.

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

from agentgym.trajectory import Trajectory, read_records


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
    result = ReplayResult(index=index, task_id=traj.task_id, turns=len(traj.turns))
    try:
        own = env is None
        env = env or make_recorded_env(traj)
    except ValueError as e:
        result.divergence = str(e)
        return result
    try:
        obs, info = env.reset(seed=traj.seed, options=traj.options or None)
        result.divergence = _first_diff("reset observation", traj.initial_observation, obs) or _first_diff(
            "reset info", traj.reset_info, info
        )
        ended = False
        for k, turn in enumerate(traj.turns, 1):
            if result.divergence:
                break
            if ended:
                result.divergence = f"turn {k} follows the end of the episode"
                break
            obs, reward, terminated, truncated, info = env.step(turn.action)
            recorded = [turn.observation, turn.reward, turn.terminated, turn.truncated, turn.info]
            result.divergence = _first_diff(f"turn {k}", recorded, [obs, float(reward), terminated, truncated, info])
            ended = terminated or truncated
        if not result.divergence and not ended and traj.error is None:
            result.divergence = f"the record ends after turn {len(traj.turns)}, before the env ended the episode"
    except Exception as e:
        result.divergence = f"replay raised {type(e).__name__}: {e}"
    finally:
        if own:
            env.close()
    return result


def make_recorded_env(traj: Trajectory) -> gym.Env:
    """The env a record names, made only if its id is registered; ``ValueError`` says why it cannot be made."""
    if traj.env_id not in gym.registry:
        raise ValueError(f"env {traj.env_id!r} is not registered (replay makes registered envs only)")
    try:
        return gym.make(traj.env_id, **traj.env_kwargs)
    except Exception as e:
        raise ValueError(f"cannot make {traj.env_id} with the recorded env_kwargs: {type(e).__name__}: {e}") from None


def replay_file(path: str | os.PathLike[str]) -> Iterator[ReplayResult]:
    """Replay every record of a JSONL file, streamed, reusing one env per (env_id, env_kwargs); each bad or
    altered record is reported as a failed result and replay goes on."""
    envs: dict[str, gym.Env] = {}
    try:
        for i, rec in enumerate(read_records(path, verify=False)):
            traj = rec.trajectory
            if traj is None:
                yield ReplayResult(index=i, task_id="", turns=0, divergence=f"line {rec.lineno}: {rec.error}")
                continue
            key = _canon([traj.env_id, traj.env_kwargs])
            if key not in envs:
                try:
                    envs[key] = make_recorded_env(traj)
                except ValueError as e:
                    yield ReplayResult(index=i, task_id=traj.task_id, turns=len(traj.turns), divergence=str(e))
                    continue
            result = replay_trajectory(traj, envs[key], index=i)
            if rec.altered:
                result.divergence = f"line {rec.lineno}: {rec.altered}" + (
                    f"; and {result.divergence}" if result.divergence else ""
                )
            yield result
    finally:
        for env in envs.values():
            env.close()
