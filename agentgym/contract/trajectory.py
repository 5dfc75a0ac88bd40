"""Trajectory records and a crash-tolerant JSONL store.

One JSON object per line, one line per episode, appended and flushed as each episode finishes, so a run
that dies mid-write loses at most the line being written; ``read_trajectories`` skips a truncated final
line and reports it, and the next writer cuts it off before appending. A run (``agentgym.running.runner``) first writes
a *run header* (``RunHeader``: what was played, by which agent, with which seeds, how many episodes), and each of
its episode records names the run and its position in it, so ``agentgym replay`` checks the file as a whole.
Each record carries a checksum of its other fields (SHA-256 of the canonical JSON, keys sorted), so an
accidental change is detected; the checksum is a digest anyone can recompute, not a signature. With the operator's
key in ``$AGENTGYM_TRAJECTORY_KEY`` a run also signs each record (``signature``) and binds it to the run (format
4: every signed record holds the run's random ``nonce`` and ``prev``, the signature of the record before it, so
records of two runs cannot be spliced, nor one run's reordered or dropped from the middle). Records hold no
timestamps, so the same seeds give byte-identical unsigned files. Reading streams: a file of a million episodes is never
loaded whole, and a line longer than ``MAX_RECORD_BYTES`` is reported without being held in memory.

Any string can be stored: a lone surrogate (which UTF-8 cannot encode) is written as a JSON ``\\udXXX`` escape and
reads back as the same lone surrogate; a high surrogate followed by a low one reads back as the one character they
encode (as in UTF-16). ``normalize`` gives that read-back value.

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

import contextlib
import dataclasses
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

Message = dict[str, Any]
#: The format written. 2 added a checksum of each record; 3 sorts keys for the checksum (key order never
#: matters), adds run headers and each episode's run and position; 4 binds signed records to their run (``nonce``
#: and ``prev``, see ``Seal``). Formats 1 to 3 are still read (a format-3 signature vouches for its record alone).
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
#: The longest record written or read (bytes, newline excluded): a longer line is a bad record, skipped without
#: being held in memory, and a longer record is refused by the writer before it touches the file.
MAX_RECORD_BYTES = 32 << 20
#: The ``kind`` of a run header record (episode records have no ``kind``).
RUN_KIND = "run"
#: The environment variable holding the operator's secret key: with it, ``agentgym run`` signs each record (an
#: HMAC-SHA256 in its ``mac`` field) and ``agentgym replay`` checks the signatures.
KEY_ENV = "AGENTGYM_TRAJECTORY_KEY"
#: The fields of a line that are not the record's content: its checksum and, when signed, its seal.
_ENVELOPE = ("checksum", "mac", "nonce", "prev")
#: The ``error`` of an episode whose record was too large to write (``too_large_record``).
TOO_LARGE = "record too large"

_SURROGATE = re.compile("[\ud800-\udfff]")


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
    #: The run this episode belongs to (``RunHeader.run_id``) and its position in it; None outside a run.
    run_id: str | None = None
    index: int | None = None

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
        """The trajectory of a record's fields; ``ValueError`` names a missing, unknown or mistyped field."""
        d = dict(d)
        _check_version(d.pop("version", FORMAT_VERSION))
        unknown = sorted(set(d) - _TRAJECTORY_FIELDS)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}")
        _check_types(d, _TRAJECTORY_TYPES, "")
        turns = []
        for k, t in enumerate(d.pop("turns", [])):
            where = f"turns[{k}]."
            if not isinstance(t, dict):
                raise ValueError(f"turns[{k}] must be an object, got {_kind(t)}")
            unknown = sorted(set(t) - _TURN_FIELDS)
            if unknown:
                raise ValueError(f"unknown field(s) {unknown} in turns[{k}]")
            _check_types(t, _TURN_TYPES, where)
            spans = t.get("token_spans")
            if spans is not None:
                if not all(isinstance(s, list | tuple) and len(s) == 2 and all(_is_int(x) for x in s) for s in spans):
                    raise ValueError(f"{where}token_spans must be a list of [start, end] integer pairs")
                spans = [tuple(s) for s in spans]
            turns.append(Turn(**{**t, "token_spans": spans}))
        return cls(**d, turns=turns)


@dataclass(frozen=True)
class RunHeader:
    """The first record of a run's file: what the run plays, so replay can check the file holds exactly its
    episodes, each once, in order.

    Episode ``i`` (``0 <= i < episodes``) is reset with ``seed + i // group_size`` (and, with ``tasks ==
    "sequential"``, ``task_index = (i // group_size) % num_tasks``); its agent with ``seed + i``. ``agent`` is the
    label every record carries; ``agent_name`` and ``agent_kwargs`` are set when the agent was given by name (a
    built-in agent replay can rerun), None when it was an object or a callable. ``start`` is the number of the
    run's episodes before this header: 0 for a new run, more when ``--append`` continued the run with another
    ``episodes`` (a run's later headers change only ``episodes``). ``run_id`` is a digest of the plan (everything
    but ``episodes`` and ``start``), so the same arguments give the same id and the same bytes.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    agent: str
    agent_name: str | None
    agent_kwargs: dict[str, Any] | None
    seed: int
    tasks: str
    group_size: int
    episodes: int
    start: int = 0
    run_id: str = ""

    def __post_init__(self) -> None:
        if not self.run_id:
            object.__setattr__(self, "run_id", self.plan_digest())

    def plan(self) -> dict[str, Any]:
        """The fields that say what the run plays (not how many episodes, nor where this header stands)."""
        return {k: v for k, v in asdict(self).items() if k not in ("episodes", "start", "run_id")}

    def plan_digest(self) -> str:
        return hashlib.sha256(_text(self.plan(), sort_keys=True).encode("utf-8")).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": RUN_KIND, **asdict(self), "version": FORMAT_VERSION}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunHeader:
        """The header of a record's fields; ``ValueError`` names a missing, unknown or mistyped field."""
        d = {k: v for k, v in d.items() if k not in ("kind", "version", *_ENVELOPE)}
        unknown = sorted(set(d) - _HEADER_FIELDS)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} in the run header")
        missing = sorted(_HEADER_FIELDS - set(d))
        if missing:
            raise ValueError(f"the run header lacks {missing}")
        _check_types(d, _HEADER_TYPES, "")
        if d["tasks"] not in ("sequential", "random"):
            raise ValueError(f"the run header's tasks must be 'sequential' or 'random', got {d['tasks']!r}")
        if d["group_size"] < 1 or d["episodes"] < 0 or d["episodes"] % d["group_size"]:
            raise ValueError(f"the run header's episodes ({d['episodes']}) must be a multiple of its group_size "
                             f"({d['group_size']}) >= 1")  # fmt: skip
        if not 0 <= d["start"] <= d["episodes"]:
            raise ValueError(f"the run header's start ({d['start']}) must be in 0..{d['episodes']}")
        header = cls(**d)
        if header.run_id != header.plan_digest():
            raise ValueError("the run header's run_id is not the digest of its plan")
        return header


# --- field types (records come from files anyone may have written) -------------------------------------------

_TRAJECTORY_FIELDS = {f.name for f in dataclasses.fields(Trajectory)}
_TURN_FIELDS = {f.name for f in dataclasses.fields(Turn)}
_HEADER_FIELDS = {f.name for f in dataclasses.fields(RunHeader)}


def _kind(x: Any) -> str:
    return "null" if x is None else type(x).__name__


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _is_messages(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(m, dict) for m in x)


# name -> (check, what it must be, required)
_Check = tuple[Any, str, bool]
_TRAJECTORY_TYPES: dict[str, _Check] = {
    "env_id": (lambda x: isinstance(x, str), "a string", True),
    "seed": (lambda x: x is None or _is_int(x), "an integer or null", True),
    "task_id": (lambda x: isinstance(x, str), "a string", True),
    "agent": (lambda x: isinstance(x, str), "a string", True),
    "initial_observation": (_is_messages, "a list of message objects", True),
    "reset_info": (lambda x: isinstance(x, dict), "an object", True),
    "turns": (lambda x: isinstance(x, list), "a list", False),
    "env_kwargs": (lambda x: isinstance(x, dict), "an object", False),
    "options": (lambda x: isinstance(x, dict), "an object", False),
    "group_id": (lambda x: x is None or isinstance(x, str), "a string or null", False),
    "error": (lambda x: x is None or isinstance(x, str), "a string or null", False),
    "run_id": (lambda x: x is None or isinstance(x, str), "a string or null", False),
    "index": (lambda x: x is None or (_is_int(x) and x >= 0), "a non-negative integer or null", False),
}
_TURN_TYPES: dict[str, _Check] = {
    "action": (lambda x: isinstance(x, str), "a string", True),
    "observation": (_is_messages, "a list of message objects", True),
    "reward": (_is_number, "a finite number", True),
    "terminated": (lambda x: isinstance(x, bool), "a boolean", True),
    "truncated": (lambda x: isinstance(x, bool), "a boolean", True),
    "info": (lambda x: isinstance(x, dict), "an object", True),
    "token_spans": (lambda x: x is None or isinstance(x, list), "a list or null", False),
}
_HEADER_TYPES: dict[str, _Check] = {
    "env_id": (lambda x: isinstance(x, str), "a string", True),
    "env_kwargs": (lambda x: isinstance(x, dict), "an object", True),
    "agent": (lambda x: isinstance(x, str), "a string", True),
    "agent_name": (lambda x: x is None or isinstance(x, str), "a string or null", True),
    "agent_kwargs": (lambda x: x is None or isinstance(x, dict), "an object or null", True),
    "seed": (_is_int, "an integer", True),
    "tasks": (lambda x: isinstance(x, str), "a string", True),
    "group_size": (_is_int, "an integer", True),
    "episodes": (_is_int, "an integer", True),
    "start": (_is_int, "an integer", True),
    "run_id": (lambda x: isinstance(x, str), "a string", True),
}


def _check_types(d: dict[str, Any], types: dict[str, _Check], where: str) -> None:
    for name, (ok, what, required) in types.items():
        if name not in d:
            if required:
                raise ValueError(f"missing field {where}{name}")
            continue
        if not ok(d[name]):
            raise ValueError(f"{where}{name} must be {what}, got {_kind(d[name])}")


def _check_version(version: Any) -> int:
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        shown = repr(version) if _is_int(version) or isinstance(version, float | str | None) else _kind(version)
        raise ValueError(
            f"unsupported trajectory format version {shown[:40]} (this agentgym reads {READABLE_VERSIONS})"
        )
    return int(version)


# --- canonical JSON and the checksum -------------------------------------------------------------------------


def _escape_surrogates(text: str) -> str:
    """``text`` (JSON) with each surrogate pair joined into its character and each lone surrogate escaped."""
    if text.isascii() or not _SURROGATE.search(text):  # isascii is O(1) in CPython
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", joined)


def _raw_json(obj: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON of ``obj`` with raw Unicode (lone surrogates left raw); ``ValueError`` if it has none."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=sort_keys)
    except RecursionError:
        raise ValueError("the record is nested too deeply to be written as JSON") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"the record has no JSON form: {' '.join(str(e).split())[:200]}") from None


def _text(obj: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON of ``obj`` with raw Unicode, valid as UTF-8 (lone surrogates escaped)."""
    return _escape_surrogates(_raw_json(obj, sort_keys=sort_keys))


def canonical(obj: Any) -> str:
    """The canonical JSON text of ``obj`` (keys sorted): two values are the same record content iff these match."""
    return _text(obj, sort_keys=True)


def normalize(obj: Any) -> Any:
    """``obj`` as a record holding it reads back: JSON types (tuples become lists, keys strings), surrogate pairs
    joined. ``ValueError`` if it has no JSON form (NaN, an object, nesting too deep)."""
    return json.loads(_text(obj))


def checksum(d: dict[str, Any], version: int = FORMAT_VERSION) -> str:
    """The checksum of a record: SHA-256 (hex, 32 digits) of its canonical JSON without the ``checksum`` key; in
    format 3 the keys are sorted, so their order in the file does not matter (format 2 kept the written order)."""
    body = {k: v for k, v in d.items() if k != "checksum"}
    if version >= 3:
        data = _text(body, sort_keys=True).encode("utf-8")
    else:
        data = _raw_json(body).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:32]


def trajectory_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The operator's signing key from ``$AGENTGYM_TRAJECTORY_KEY`` (``environ``: ``os.environ``), or None."""
    value = (os.environ if environ is None else environ).get(KEY_ENV, "")
    return value.encode("utf-8", "surrogateescape") if value else None


def signature(d: dict[str, Any], key: bytes) -> str:
    """The record's HMAC-SHA256 under ``key`` (hex): of its canonical JSON without ``checksum`` and ``mac`` (so, in
    format 4, with its ``nonce`` and ``prev``). Unlike the checksum, only a holder of the key can make it."""
    body = {k: v for k, v in d.items() if k not in ("checksum", "mac")}
    return hmac.new(key, _text(body, sort_keys=True).encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Seal:
    """What binds a signed record (format 4) to its run: the run's ``nonce`` (random, drawn when the run's first
    record is written), ``prev`` (the signature of the record before it in the run; "" for the first) and its own
    signature ``mac``, which covers both. So only a holder of the key can place a record in a run, and only right
    after the record it names: records of two runs cannot be spliced, nor a run's reordered or dropped from the
    middle (cutting a run's end leaves a run cut short, which replay reports)."""

    nonce: str
    prev: str
    mac: str


class RecordTooLarge(ValueError):
    """A record longer than a writer allows: ``size`` bytes of JSON (UTF-8, about: lone surrogates count 3), over
    ``limit``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a record of {size} bytes is longer than the {limit} allowed")
        self.size, self.limit = size, limit


def _utf8_size(text: str) -> int:
    if text.isascii():
        return len(text)
    step = 1 << 20
    return sum(len(text[i : i + step].encode("utf-8", "surrogatepass")) for i in range(0, len(text), step))


def _size_at_least(obj: Any, limit: int) -> int:
    """A lower bound of the length of ``obj``'s JSON text, counted until it passes ``limit`` without building any
    text: the characters of the strings among its values (a cheap look for the few huge ones)."""
    total, stack = 0, [obj]
    pop, push = stack.pop, stack.extend
    while stack:
        x = pop()
        kind = type(x)
        if kind is str:
            total += len(x)
            if total > limit:
                break
        elif kind is dict:
            push(x.values())
        elif kind is list:
            push(x)
    return total


def _json_size(obj: Any) -> int:
    """The UTF-8 size of ``obj``'s compact JSON text, counted piece by piece: the whole text is never built."""
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False)
    try:
        return sum(_utf8_size(piece) for piece in encoder.iterencode(obj))
    except RecursionError:
        raise ValueError("the record is nested too deeply to be written as JSON") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"the record has no JSON form: {' '.join(str(e).split())[:200]}") from None


def _sealed(d: dict[str, Any], key: bytes | None, after: Seal | None, limit: int | None) -> tuple[str, Seal | None]:
    """The record ``d`` as one line of JSON (no newline) with its checksum and, with ``key``, signed as the record
    following ``after`` in its run (None: the first, under a new nonce); and its seal (None without ``key``).
    ``RecordTooLarge`` once its text is longer than ``limit``, before anything else is built from it."""
    d = {k: v for k, v in d.items() if k not in _ENVELOPE}
    if key is not None:
        d["nonce"] = after.nonce if after is not None else secrets.token_hex(16)
        d["prev"] = after.mac if after is not None else ""
    text = _raw_json(d)
    if limit is not None and len(text) > limit:  # characters <= bytes: too long whatever its encoding
        raise RecordTooLarge(_utf8_size(text), limit)
    if not text.isascii() and _SURROGATE.search(text):  # what is signed and summed is what will be read back
        text = _escape_surrogates(text)
        d = json.loads(text)
    seal = None
    if key is not None:
        d["mac"] = signature(d, key)
        seal = Seal(d["nonce"], d["prev"], d["mac"])
        text = f'{text[:-1]},"mac":"{d["mac"]}"}}'
    return f'{text[:-1]},"checksum":"{checksum(d)}"}}', seal  # the same as dumping d with its checksum, once


def _as_dict(record: Trajectory | RunHeader) -> dict[str, Any]:
    try:
        return record.to_dict()
    except RecursionError:
        raise ValueError("the record is nested too deeply to be written as JSON") from None


def dumps(traj: Trajectory | RunHeader, *, key: bytes | None = None, after: Seal | None = None) -> str:
    """The canonical one-line JSON form of a record, checksum (and with ``key`` its signature, as the record
    following ``after`` in its run) included (UTF-8, no newline; deterministic without ``key``); ``ValueError`` if
    it has no JSON form."""
    return _sealed(_as_dict(traj), key, after, None)[0]


# --- reading ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """A parsed record: an episode or a run header, its format version, and what is wrong with its checksum."""

    trajectory: Trajectory | None
    header: RunHeader | None
    version: int
    altered: str | None
    #: With a key: whether the record carries a valid signature under it; None without a key.
    signed: bool | None = None
    #: What binds a signed format-4 record to its run (read whether or not a key is given); None if unsigned.
    seal: Seal | None = None


def loads(line: str | bytes, *, verify: bool = True) -> Trajectory:
    """Parse one episode record; ``ValueError`` says what is wrong with a malformed, unsupported or altered one
    (``verify=False`` skips the checksum)."""
    parsed = parse(line)
    if parsed.altered and verify:
        raise ValueError(parsed.altered)
    if parsed.trajectory is None:
        raise ValueError("a run header, not an episode record")
    return parsed.trajectory


def parse(line: str | bytes, key: bytes | None = None) -> Parsed:
    """Parse one record (episode or run header), checking its signature with ``key``. Never raises anything but
    ``ValueError``, whatever the line."""
    try:
        return _parse(line, key)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except MemoryError:
        raise ValueError("too large to parse") from None


def _parse(line: str | bytes, key: bytes | None) -> Parsed:
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not valid UTF-8 (byte {e.start})") from None
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg} at character {e.pos})") from None
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        raise ValueError(f"not readable JSON ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(d, dict):
        raise ValueError(f"a record is a JSON object, got {_kind(d)}")
    version = _check_version(d.get("version", 1))
    altered = None
    if version >= 2 and "checksum" not in d:
        altered = "the record has no checksum"
    elif version >= 2 and d["checksum"] != checksum(d, version):
        altered = "checksum mismatch: the record was altered after it was written"
    signed = None
    if key is not None:
        mac = d.get("mac")
        signed = isinstance(mac, str) and hmac.compare_digest(
            mac.encode("utf-8", "replace"), signature(d, key).encode()
        )
    kind = d.get("kind")
    try:
        seal = _seal_of(d, version)
        if kind == RUN_KIND:
            if version < 3:
                raise ValueError(f"a run header in format {version} (headers start with format 3)")
            return Parsed(None, RunHeader.from_dict(d), version, altered, signed, seal)
        if "kind" in d:
            raise ValueError(f"unknown record kind {str(kind)[:40]!r}")
        if version < 3 and ("run_id" in d or "index" in d):
            raise ValueError(f"unknown field(s) {sorted({'run_id', 'index'} & set(d))} for format {version}")
        if version < 3 and "mac" in d:
            raise ValueError(f"unknown field(s) ['mac'] for format {version}")
        traj = Trajectory.from_dict({k: v for k, v in d.items() if k not in _ENVELOPE})
        return Parsed(traj, None, version, altered, signed, seal)
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"malformed record ({' '.join(str(e).split())[:300]})") from None


def _seal_of(d: dict[str, Any], version: int) -> Seal | None:
    """The seal of a record's fields: None for an unsigned one or one older than format 4 (whose signature binds
    it to nothing); ``ValueError`` for a format-4 one with a part of it missing or mistyped."""
    nonce, prev, mac = (d.get(k) for k in ("nonce", "prev", "mac"))
    if version < 4:
        if "nonce" in d or "prev" in d:
            raise ValueError(f"unknown field(s) {sorted({'nonce', 'prev'} & set(d))} for format {version}")
        return None
    if not {"nonce", "prev", "mac"} & set(d):
        return None
    if not (isinstance(nonce, str) and isinstance(prev, str) and isinstance(mac, str)):
        raise ValueError("a signed record holds its run's nonce, the signature before it (prev) and its own (mac), "
                         "all strings")  # fmt: skip
    return Seal(nonce, prev, mac)


@dataclass(frozen=True)
class Record:
    """One line of a trajectory file: its trajectory (or run header), or why it could not be read; ``altered`` says
    what is wrong with its checksum (read with ``verify=False``); ``version`` is its format (0 if unreadable)."""

    lineno: int
    trajectory: Trajectory | None
    error: str | None = None
    altered: str | None = None
    header: RunHeader | None = None
    version: int = 0
    signed: bool | None = None
    seal: Seal | None = None


TORN = "torn final record (a crash mid-write)"


def _lines(f: BinaryIO, limit: int) -> Iterator[tuple[bytes | None, bool, int]]:
    """``(line, ends_with_newline, size)`` for each line; ``line`` is None for one longer than ``limit`` bytes,
    which is skipped in chunks, never held whole."""
    while True:
        raw = f.readline(limit + 2)
        if not raw:
            return
        if raw.endswith(b"\n") or len(raw) <= limit:
            yield raw, raw.endswith(b"\n"), len(raw)
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
            if not raw:
                break
            size += len(raw)
        yield None, raw.endswith(b"\n"), size


def read_records(
    path: str | os.PathLike[str],
    *,
    verify: bool = True,
    max_record_bytes: int = MAX_RECORD_BYTES,
    key: bytes | None = None,
) -> Iterator[Record]:
    """Every record of a JSONL file, streamed, each parsed or with the reason it could not be; blank lines are
    skipped and a torn final line (a crash mid-write) is reported as such. With ``verify`` an altered record is
    an error; without, it is parsed and ``Record.altered`` says so. A record in an older format than the file's
    first record (a format-1 record without a checksum in a format-3 file) is an error: formats never go down.
    With ``key``, ``Record.signed`` says whether each record's signature is valid; ``Record.seal`` binds a signed
    format-4 record to its run (checking the chain is the caller's: ``agentgym.running.replay``). Nothing in the file
    makes this raise (only a file that cannot be opened does)."""
    with open(path, "rb") as f:
        lineno = 0
        file_version = 0
        for raw, whole, size in _lines(f, max_record_bytes):
            lineno += 1
            if raw is None:
                yield Record(lineno, None, f"a record of {size} bytes, longer than the {max_record_bytes} allowed")
                continue
            if not raw.strip():
                continue
            try:
                parsed = parse(raw, key)
            except ValueError as e:
                yield Record(lineno, None, TORN if not whole else str(e))
                continue
            if file_version and parsed.version < file_version:
                yield Record(lineno, None, f"a format-{parsed.version} record in a format-{file_version} file "
                             "(formats never go down: refused)", version=parsed.version)  # fmt: skip
                continue
            file_version = max(file_version, parsed.version)
            if parsed.altered and verify:
                yield Record(lineno, None, parsed.altered, version=parsed.version)
            else:
                yield Record(lineno, parsed.trajectory, None, parsed.altered, parsed.header, parsed.version,
                             parsed.signed, parsed.seal)  # fmt: skip


_HEADER_PREFIX = b'{"kind":"run",'


def count_records(path: str | os.PathLike[str]) -> int:
    """Complete episode lines in a file (run headers not counted), without parsing them; 0 if it does not exist."""
    if not os.path.exists(path):
        return 0
    n, head, k = 0, b"", len(_HEADER_PREFIX)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            pos = 0
            while (i := chunk.find(b"\n", pos)) >= 0:
                head += chunk[pos : min(i, pos + k - len(head))] if len(head) < k else b""
                n += not head.startswith(_HEADER_PREFIX)
                head, pos = b"", i + 1
            if len(head) < k:
                head += chunk[pos : pos + k - len(head)]
    return n


def read_trajectories(path: str | os.PathLike[str], *, verify: bool = True) -> Iterator[Trajectory]:
    """Yield the episode records in a JSONL file, streamed (run headers are skipped).

    A final line that is cut short (a crash mid-write) is skipped with a warning; a corrupt, altered (checksum
    mismatch) or unsupported record elsewhere raises ``ValueError`` naming the line, since that is not what a
    crash leaves behind. ``verify=False`` skips the checksum check.
    """
    for rec in read_records(path, verify=verify):
        if rec.trajectory is not None:
            yield rec.trajectory
        elif rec.header is not None:
            continue
        elif rec.error == TORN:
            warnings.warn(f"{path}:{rec.lineno}: skipping a truncated final record (crash mid-write?)", stacklevel=2)
        else:
            raise ValueError(f"{path}:{rec.lineno}: bad trajectory record: {rec.error}")


# --- writing ---------------------------------------------------------------------------------------------------


class TrajectoryWriter:
    """Append-only JSONL writer: each ``write`` is one line, flushed (and fsync'ed with ``fsync=True``).

    The file is created on the first ``write`` (a run that fails before its first episode leaves no file). An
    existing file whose last line was cut by a crash mid-write has that torn tail removed first (with a warning),
    so new records never glue onto it. With ``key`` each record is signed (``signature``) and chained: the records
    of one writer are one run's (``Seal``: under a nonce drawn at its first record, or ``after``'s, each naming the
    signature before it; ``after``, the seal of a run's last record, continues that run). A record that cannot be
    written (no JSON form; longer than ``max_record_bytes``: ``RecordTooLarge``, found before its whole text is
    built when its strings alone are too long) raises ``ValueError`` before the file is touched; a write that fails
    on the way (a full disk) is cut back off, so the file never holds a torn or empty record of this writer.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        key: bytes | None = None,
        after: Seal | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ):
        self.path = os.fspath(path)
        self.fsync = fsync
        self.key = key  # signs each record (``signature``) when given
        self.max_record_bytes = max_record_bytes
        self.last: Seal | None = after  # the seal of the record the next one follows; None: a new chain
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

    def write(self, record: Trajectory | RunHeader) -> None:
        """Append one record (an episode, or a run header)."""
        d, limit = _as_dict(record), self.max_record_bytes
        if _size_at_least(d, limit) > limit:  # too large: say how large without building its text
            raise RecordTooLarge(_json_size(d), limit)
        line, seal = _sealed(d, self.key, self.last, limit)
        data = (line + "\n").encode("utf-8")
        del line
        if len(data) - 1 > limit:
            raise RecordTooLarge(len(data) - 1, limit)
        if self._f is None:
            self._f = self._open()
        end = self._f.seek(0, os.SEEK_END)
        try:
            self._f.write(data)
            self._f.flush()
            if self.fsync:
                os.fsync(self._f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                self._f.truncate(end)
            raise
        self.last = seal or self.last

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
