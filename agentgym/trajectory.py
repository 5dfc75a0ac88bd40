"""Trajectory records and a crash-tolerant JSONL store.

One JSON object per line, one line per episode, appended and flushed as each episode finishes, so a run
that dies mid-write loses at most the line being written; ``read_trajectories`` skips a truncated final
line and reports it. Records hold no timestamps, so the same seeds give byte-identical files.

>>> import tempfile, os
>>> t = Trajectory(env_id="agentgym/SearchQA-v0", seed=0, task_id="q1", agent="oracle",
...                initial_observation=[{"role": "user", "content": "Q?"}], reset_info={})
>>> t.turns.append(Turn(action="<answer>x</answer>", observation=[], reward=1.0, terminated=True,
...                     truncated=False, info={"success": True}))
>>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
>>> with TrajectoryWriter(path) as w:
...     w.write(t)
>>> [r.total_reward for r in read_trajectories(path)]
[1.0]
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

Message = dict[str, Any]
FORMAT_VERSION = 1


@dataclass
class Turn:
    """One agent turn: the action, what the env answered, and the step's reward and info."""

    action: str
    observation: list[Message]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    #: Token index ranges ``[start, end)`` of this turn's policy tokens, when a tokenizer was involved.
    token_spans: list[tuple[int, int]] | None = None

    @property
    def reward_components(self) -> dict[str, float]:
        return dict(self.info.get("reward_components", {}))

    @property
    def action_valid(self) -> bool:
        return bool(self.info.get("action_valid", True))


@dataclass
class Trajectory:
    """A whole episode: enough to re-create the env (``env_id``, ``env_kwargs``, ``seed``, ``options``)."""

    env_id: str
    seed: int | None
    task_id: str
    agent: str
    initial_observation: list[Message]
    reset_info: dict[str, Any]
    turns: list[Turn] = field(default_factory=list)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    group_id: str | None = None
    #: Set when the agent failed (e.g. an LLM endpoint was unreachable); the episode is incomplete.
    error: str | None = None

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def final_info(self) -> dict[str, Any]:
        return self.turns[-1].info if self.turns else self.reset_info

    @property
    def success(self) -> bool:
        return bool(self.final_info.get("success", False))

    @property
    def done(self) -> bool:
        return bool(self.turns) and (self.turns[-1].terminated or self.turns[-1].truncated)

    @property
    def messages(self) -> list[Message]:
        """The whole conversation: initial messages, then each action and the env's reply."""
        out = list(self.initial_observation)
        for t in self.turns:
            out.append({"role": "assistant", "content": t.action})
            out.extend(t.observation)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["version"] = FORMAT_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        version = d.pop("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(f"unsupported trajectory format version {version} (this agentgym reads {FORMAT_VERSION})")
        turns = []
        for t in d.pop("turns", []):
            spans = t.get("token_spans")
            turns.append(Turn(**{**t, "token_spans": [tuple(s) for s in spans] if spans is not None else None}))
        return cls(**d, turns=turns)


def dumps(traj: Trajectory) -> str:
    """The canonical one-line JSON form of a trajectory (deterministic, UTF-8, no trailing newline)."""
    return json.dumps(traj.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class TrajectoryWriter:
    """Append-only JSONL writer: each ``write`` is one line, flushed (and fsync'ed with ``fsync=True``)."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False):
        self.path = os.fspath(path)
        self.fsync = fsync
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._f: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, traj: Trajectory) -> None:
        self._f.write(dumps(traj) + "\n")
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories in a JSONL file.

    A final line that is cut short (a crash mid-write) is skipped with a warning; a corrupt line
    elsewhere raises ``ValueError`` naming the line, since that is not what a crash leaves behind.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines) and not line.endswith("\n"):
                warnings.warn(f"{path}:{lineno}: skipping a truncated final record (crash mid-write?)", stacklevel=2)
                return
            raise ValueError(f"{path}:{lineno}: corrupt trajectory record ({e.msg})") from None
        yield Trajectory.from_dict(row)
