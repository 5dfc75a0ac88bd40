"""Trajectory records and a crash-tolerant JSONL store.

One JSON object per line, one line per episode, appended and flushed as each episode finishes, so a run
that dies mid-write loses at most the line being written; ``read_trajectories`` skips a truncated final
line and reports it, and the next writer cuts it off before appending. Each record carries a checksum of its
other fields (format 2), so an altered record is detected. Records hold no timestamps, so the same seeds give
byte-identical files. Reading streams: a file of a million episodes is never loaded whole.

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

import dataclasses
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

Message = dict[str, Any]
#: The format written: 2 adds a checksum of each record. Format 1 records (no checksum) are still read.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)


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
        _check_version(d.pop("version", FORMAT_VERSION))
        turns = []
        for t in d.pop("turns", []):
            spans = t.get("token_spans")
            turns.append(Turn(**{**t, "token_spans": [tuple(s) for s in spans] if spans is not None else None}))
        return cls(**d, turns=turns)


def _check_version(version: Any) -> int:
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ValueError(f"unsupported trajectory format version {version!r} (this agentgym reads {READABLE_VERSIONS})")
    return int(version)


def _canonical(d: dict[str, Any]) -> str:
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def checksum(d: dict[str, Any]) -> str:
    """The checksum of a record: SHA-256 of its canonical JSON without the ``checksum`` key (hex, 32 digits)."""
    body = {k: v for k, v in d.items() if k != "checksum"}
    return hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()[:32]


def dumps(traj: Trajectory) -> str:
    """The canonical one-line JSON form of a trajectory, checksum included (deterministic, UTF-8, no newline)."""
    d = traj.to_dict()
    d["checksum"] = checksum(d)
    return _canonical(d)


def loads(line: str, *, verify: bool = True) -> Trajectory:
    """Parse one record; ``ValueError`` says what is wrong with a malformed, unsupported or altered one
    (``verify=False`` skips the checksum)."""
    traj, altered = _parse(line)
    if altered and verify:
        raise ValueError(altered)
    return traj


def _parse(line: str) -> tuple[Trajectory, str | None]:
    """The record's trajectory, and what is wrong with its checksum (None when it matches or format 1 has none)."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg})") from None
    if not isinstance(d, dict):
        raise ValueError(f"a record is a JSON object, got {type(d).__name__}")
    version = _check_version(d.get("version", 1))
    altered = None
    if version >= 2 and "checksum" not in d:
        altered = "the record has no checksum"
    elif version >= 2 and d["checksum"] != checksum(d):
        altered = "checksum mismatch: the record was altered after it was written"
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(Trajectory)} - {"version", "checksum"})
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}")
    try:
        return Trajectory.from_dict({k: v for k, v in d.items() if k != "checksum"}), altered
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"malformed record ({' '.join(str(e).split())})") from None


class TrajectoryWriter:
    """Append-only JSONL writer: each ``write`` is one line, flushed (and fsync'ed with ``fsync=True``).

    The file is created on the first ``write`` (a run that fails before its first episode leaves no file). An
    existing file whose last line was cut by a crash mid-write has that torn tail removed first (with a warning),
    so new records never glue onto it.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False):
        self.path = os.fspath(path)
        self.fsync = fsync
        self._f: BinaryIO | None = None

    def _open(self) -> BinaryIO:
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        f = open(self.path, "ab+")  # noqa: SIM115 - closed in close()
        cut = cut_torn_tail(f)
        if cut:
            warnings.warn(f"{self.path}: removed a torn final record of {cut} bytes (a crash mid-write)", stacklevel=3)
        return f

    def write(self, traj: Trajectory) -> None:
        if self._f is None:
            self._f = self._open()
        self._f.write((dumps(traj) + "\n").encode("utf-8"))
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cut_torn_tail(f: BinaryIO) -> int:
    """Truncate an open file after its last newline; returns how many bytes were cut (0 for a clean file)."""
    end = f.seek(0, os.SEEK_END)
    pos = end
    while pos > 0:
        step = min(1 << 16, pos)
        f.seek(pos - step)
        chunk = f.read(step)
        i = chunk.rfind(b"\n")
        if i >= 0:
            pos = pos - step + i + 1
            break
        pos -= step
    if pos < end:
        f.truncate(pos)
        f.seek(pos)
    return end - pos


@dataclass(frozen=True)
class Record:
    """One line of a trajectory file: its trajectory, or why it could not be read; ``altered`` says what is wrong
    with its checksum (read with ``verify=False``)."""

    lineno: int
    trajectory: Trajectory | None
    error: str | None = None
    altered: str | None = None


def read_records(path: str | os.PathLike[str], *, verify: bool = True) -> Iterator[Record]:
    """Every record of a JSONL file, streamed, each parsed or with the reason it could not be; blank lines are
    skipped and a torn final line (a crash mid-write) is reported as such. With ``verify`` an altered record is
    an error; without, it is parsed and ``Record.altered`` says so."""
    with open(path, "rb") as f:
        lineno = 0
        for raw in f:
            lineno += 1
            if not raw.strip():
                continue
            try:
                traj, altered = _parse(raw.decode("utf-8", errors="replace"))
            except ValueError as e:
                torn = not raw.endswith(b"\n")
                yield Record(lineno, None, "torn final record (a crash mid-write)" if torn else str(e))
                continue
            if altered and verify:
                yield Record(lineno, None, altered)
            else:
                yield Record(lineno, traj, None, altered)


def count_records(path: str | os.PathLike[str]) -> int:
    """Complete lines (records) in a file, without parsing them; 0 if it does not exist."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def read_trajectories(path: str | os.PathLike[str], *, verify: bool = True) -> Iterator[Trajectory]:
    """Yield the trajectories in a JSONL file, streamed.

    A final line that is cut short (a crash mid-write) is skipped with a warning; a corrupt, altered (checksum
    mismatch) or unsupported record elsewhere raises ``ValueError`` naming the line, since that is not what a
    crash leaves behind. ``verify=False`` skips the checksum check.
    """
    for rec in read_records(path, verify=verify):
        if rec.trajectory is not None:
            yield rec.trajectory
        elif rec.error and rec.error.startswith("torn final record"):
            warnings.warn(f"{path}:{rec.lineno}: skipping a truncated final record (crash mid-write?)", stacklevel=2)
        else:
            raise ValueError(f"{path}:{rec.lineno}: bad trajectory record: {rec.error}")
