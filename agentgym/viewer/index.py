"""Paging through JSONL files of any size without reading them whole.

A page is read from a byte offset (a *cursor*): ``read_page`` parses lines from there until it has ``n`` records
that pass the filter (or has scanned ``budget_bytes``), and returns them with the cursor of the next page, so the
first page of a 1M-episode file is ready as soon as its first 50 lines are read. :class:`LineIndex` finds where
every line starts, in a background thread (numpy over 16 MB chunks), so a page can also start at line N and line
numbers can be shown once the scan has passed them; a file that grows (a run still writing) is scanned on from where
the last scan stopped.

Each line becomes a :class:`Summary`: what the episode table shows (env, task, agent, group, success, reward, turns,
iteration). Trajectory records (``agentgym run``, ``agentgym bench``) are read with the trajectory format's own parser
(an altered checksum is shown, not hidden); any other JSON object (the trainer's ``rollouts.jsonl``) by its keys.
A torn last line (a writer killed mid-line, or one still writing) ends the page and is retried on the next read.

>>> import json, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
>>> rows = [{"env_id": "e", "task_id": str(i), "turns": [], "success": i % 2 == 0} for i in range(5)]
>>> _ = path.write_text("".join(json.dumps(r) + "\\n" for r in rows))
>>> page = read_page(path, 0, 2, Filter(success=True))
>>> [s.task for s in page.items], page.next > 0, page.eof
(['0', '2'], True, False)
"""

from __future__ import annotations

import json
import math
import os
import threading
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from agentgym.contract.parsing import loads_untrusted
from agentgym.contract.trajectory import Trajectory, parse

#: The longest line read as a record; a longer one is skipped in chunks (never held whole) and shown as an error.
MAX_LINE_BYTES = 64 << 20
#: How many bytes one page request scans at most looking for matches (a rare filter pages on from its cursor).
PAGE_BUDGET_BYTES = 64 << 20


@dataclass
class Summary:
    """One line of a JSONL file as the episode table shows it; ``offset`` is where the line starts (its cursor)."""

    offset: int
    kind: str  # "episode", "header" (a run header), "record" (other JSON), "error"
    env: str | None = None
    task: str | None = None
    agent: str | None = None
    group: str | None = None
    seed: int | None = None
    iteration: int | None = None
    success: bool | None = None
    reward: float | None = None
    turns: int | None = None
    error: str | None = None
    altered: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Filter:
    """What a page keeps: exact env, agent and group; task as a substring; success; iteration; ``text``: a
    case-insensitive substring of the raw line (checked before parsing, so it is the cheap one)."""

    env: str | None = None
    task: str | None = None
    agent: str | None = None
    group: str | None = None
    success: bool | None = None
    iteration: int | None = None
    text: str | None = None

    def keeps(self, s: Summary) -> bool:
        if s.kind == "header":
            return False
        return (
            (self.env is None or s.env == self.env)
            and (self.task is None or (s.task is not None and self.task in s.task))
            and (self.agent is None or s.agent == self.agent)
            and (self.group is None or s.group == self.group)
            and (self.success is None or s.success == self.success)
            and (self.iteration is None or s.iteration == self.iteration)
        )


@dataclass
class Page:
    """``items`` and the cursor of the next page (None at the end of the file as it is now); ``scanned``: the byte
    offset the scan reached; ``eof``: it reached the end."""

    items: list[Summary]
    next: int | None
    scanned: int
    eof: bool


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:500]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def summarise(raw: bytes, offset: int) -> Summary:
    """The :class:`Summary` of one line (never raises: an unreadable line is an ``"error"`` summary)."""
    try:
        parsed = parse(raw)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.header is not None:
        return Summary(offset, "header", env=_text(parsed.header.env_id), agent=_text(parsed.header.agent))
    if parsed is not None and parsed.trajectory is not None:
        t: Trajectory = parsed.trajectory
        return Summary(offset, "episode", env=_text(t.env_id), task=_text(t.task_id), agent=_text(t.agent),
                       group=_text(t.group_id), seed=_int(t.seed), success=bool(t.success),
                       reward=_number(t.total_reward), turns=len(t.turns), error=_text(t.error),
                       altered=parsed.altered)  # fmt: skip
    try:
        d = loads_untrusted(raw.decode("utf-8", "replace"), "the line")
    except ValueError as e:
        return Summary(offset, "error", error=str(e)[:300])
    if not isinstance(d, dict):
        return Summary(offset, "error", error=f"a JSON {type(d).__name__}, not an object")
    turns = d.get("turns")
    reward = next((_number(d.get(k)) for k in ("return", "outcome", "reward", "total_reward") if _number(d.get(k))
                   is not None), None)  # fmt: skip
    if reward is None and isinstance(turns, list):
        rewards = [_number(t.get("reward")) for t in turns if isinstance(t, dict)]
        reward = math.fsum(r for r in rewards if r is not None) if rewards else None
    success = d.get("success")
    return Summary(offset, "episode" if isinstance(turns, list) else "record", env=_text(d.get("env_id")),
                   task=_text(d.get("task_id")), agent=_text(d.get("agent")),
                   group=_text(d.get("group_id", d.get("group"))), seed=_int(d.get("seed")),
                   iteration=_int(d.get("iteration")), success=success if isinstance(success, bool) else None,
                   reward=reward, turns=len(turns) if isinstance(turns, list) else None,
                   error=_text(d.get("error")))  # fmt: skip


def _line_start(f: BinaryIO, offset: int) -> int:
    """``offset`` if a line starts there, else the start of the next line (a cursor from a client is untrusted)."""
    if offset <= 0:
        f.seek(0)
        return 0
    f.seek(offset - 1)
    if f.read(1) == b"\n":
        return offset
    skipped = 0
    while True:
        part = f.readline(1 << 20)
        skipped += len(part)
        if not part or part.endswith(b"\n"):
            return offset + skipped


def _lines_from(f: BinaryIO, pos: int) -> Iterator[tuple[int, int, bytes | None, bool]]:
    """``(start, end, line, complete)`` of each line from ``pos``; ``line`` is None for one over
    :data:`MAX_LINE_BYTES` (skipped in chunks); ``complete`` is False for a last line without its newline."""
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        start = pos
        if raw.endswith(b"\n") or len(raw) <= MAX_LINE_BYTES:
            pos += len(raw)
            yield start, pos, raw, raw.endswith(b"\n")
            continue
        pos += len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
            if not raw:
                break
            pos += len(raw)
        yield start, pos, None, raw.endswith(b"\n")


def _contains(raw: bytes, needle: str, ascii_needle: bytes | None) -> bool:
    if ascii_needle is not None:  # the common case, without decoding the line
        return ascii_needle in raw.lower()
    return needle in raw.decode("utf-8", "replace").casefold()


def read_page(path: str | os.PathLike[str], cursor: int, n: int, filt: Filter | None = None,
              budget_bytes: int = PAGE_BUDGET_BYTES) -> Page:  # fmt: skip
    """Up to ``n`` summaries of the lines from byte ``cursor`` on that ``filt`` keeps (see the module docstring)."""
    filt = filt or Filter()
    needle = filt.text.casefold() if filt.text else None
    ascii_needle = needle.encode() if needle is not None and needle.isascii() else None
    items: list[Summary] = []
    with open(path, "rb") as f:
        start = _line_start(f, max(0, int(cursor)))
        pos, eof = start, True
        for begin, end, raw, complete in _lines_from(f, start):
            if not complete:  # torn, or still being written: the next read tries it again
                break
            pos = end
            if raw is None:
                summary = Summary(begin, "error", error=f"a line longer than {MAX_LINE_BYTES} bytes (skipped)")
            elif not raw.strip() or (needle is not None and not _contains(raw, needle, ascii_needle)):
                summary = None
            else:
                summary = summarise(raw, begin)
            if summary is not None and filt.keeps(summary):
                items.append(summary)
            if len(items) >= n or pos - start >= budget_bytes:
                eof = False
                break
    return Page(items, None if eof else pos, pos, eof)


def read_record(path: str | os.PathLike[str], offset: int, max_chars: int | None = 100_000) -> dict[str, Any]:
    """The JSON object of the line starting at ``offset`` (which must start a line): ``{"record", "altered",
    "offset", "clipped"}``; strings longer than ``max_chars`` are cut with a marker saying how much is left out
    (None: whole). ``ValueError`` for an offset that starts no line or a line that is no JSON object."""
    with open(path, "rb") as f:
        if _line_start(f, offset) != offset or offset < 0:
            raise ValueError(f"no line starts at byte {offset}")
        f.seek(offset)
        raw = f.readline(MAX_LINE_BYTES + 1)
    if not raw.endswith(b"\n") and len(raw) > MAX_LINE_BYTES:
        raise ValueError(f"the line at byte {offset} is longer than {MAX_LINE_BYTES} bytes")
    try:
        parsed = parse(raw)
        altered = parsed.altered
    except ValueError:
        altered = None
    record = loads_untrusted(raw.decode("utf-8", "replace"), "the record")
    if not isinstance(record, dict):
        raise ValueError(f"the line at byte {offset} is a JSON {type(record).__name__}, not an object")
    clipped = [0]
    return {"record": _clip(record, max_chars, clipped), "altered": altered, "offset": offset, "clipped": clipped[0]}


def _clip(value: Any, limit: int | None, count: list[int]) -> Any:
    if isinstance(value, str):
        if limit is not None and len(value) > limit:
            count[0] += 1
            return value[:limit] + f"\n… [{len(value) - limit} more characters not shown]"
        return value
    if isinstance(value, list):
        return [_clip(v, limit, count) for v in value]
    if isinstance(value, dict):
        return {k: _clip(v, limit, count) for k, v in value.items()}
    return value


@dataclass(eq=False)
class LineIndex:
    """Where each line of ``path`` starts, found by a background thread (:meth:`start`); see the module docstring.
    ``lines``/``scanned`` grow as it goes; :meth:`offset` and :meth:`line_of` answer for the part scanned."""

    path: Path
    chunk_bytes: int = 16 << 20
    _starts: array = field(default_factory=lambda: array("q", [0]), init=False, repr=False)
    _scanned: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> LineIndex:
        """Scan on from where the last scan stopped (the file may have grown), in a daemon thread."""
        with self._lock:
            if (self._thread is None or not self._thread.is_alive()) and self._scanned < self._size():
                self._thread = threading.Thread(target=self._scan, name=f"index {self.path.name}", daemon=True)
                self._thread.start()
        return self

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def _scan(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self._scanned)
            base = self._scanned
            while chunk := f.read(self.chunk_bytes):
                ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
                starts = (ends + (base + 1)).astype("<i8")
                with self._lock:
                    self._starts.frombytes(starts.tobytes())
                    self._scanned = base + (int(ends[-1]) + 1 if len(ends) else 0)
                if not len(ends):  # one line longer than the chunk: read on from its start next time
                    if len(chunk) < self.chunk_bytes:
                        return
                    base += len(chunk)
                    continue
                base = self._scanned
                f.seek(base)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running scan (tests, benchmarks); whether it finished."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    @property
    def lines(self) -> int:
        """Complete lines found so far."""
        with self._lock:
            return len(self._starts) - 1

    @property
    def scanned(self) -> int:
        with self._lock:
            return self._scanned

    @property
    def done(self) -> bool:
        """Whether the scan reached the end of the file as it is now."""
        return self.scanned >= self._size() and (self._thread is None or not self._thread.is_alive())

    def offset(self, line: int) -> int | None:
        """Where line ``line`` (0-based) starts; None where the scan has not found it (yet)."""
        with self._lock:
            return int(self._starts[line]) if 0 <= line < len(self._starts) - 1 else None

    def line_of(self, offset: int) -> int | None:
        """The 0-based number of the line starting at ``offset``; None beyond the part scanned."""
        with self._lock:
            if offset >= self._scanned:
                return None
            i = bisect_right(self._starts, offset) - 1
            return i if int(self._starts[i]) == offset else None

    def status(self) -> dict[str, Any]:
        size = self._size()
        with self._lock:
            lines, scanned = len(self._starts) - 1, self._scanned
        return {"lines": lines, "scanned": scanned, "size": size, "done": scanned >= size}


def dumps(payload: Any) -> str:
    """JSON for the page: NaN and infinities as null (a record may hold them), lone surrogates escaped."""
    return json.dumps(_finite(payload), ensure_ascii=True, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    return value
