"""Running untrusted SQL safely, and judging it by execution match.

``SafeDatabase`` wraps one SQLite connection for agent queries: a private in-memory copy (``open_copy``) or a file
opened read-only (``mode=ro`` URI), with ``PRAGMA query_only``, extension loading off, no attached databases
(``SQLITE_LIMIT_ATTACHED`` 0), an authorizer that allows only reads (SELECT, reading columns, functions but those of
``DENIED_FUNCTIONS``, recursive CTEs) and denies every write, ATTACH, DETACH, PRAGMA and transaction, a length limit on
strings and blobs, and a progress handler that stops a query past a budget of virtual-machine steps (deterministic:
the same query stops at the same point on any machine) or a wall-clock deadline (a backstop). Every failure comes
back as an error message, never an exception.

>>> from agentgym.envs.sql.databases import build_database
>>> db = SafeDatabase.from_bytes(build_database("shop", 0).data)
>>> db.run("SELECT COUNT(*) FROM customers").rows
[(37,)]
>>> db.run("DELETE FROM customers").error
'not authorized'
>>> db.run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r").error
'the query ran past its budget of 2,000,000 steps and was stopped'
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.envs.sql.databases import open_copy

#: Virtual-machine steps a query may take (checked every ``_TICK`` steps) and a wall-clock backstop in seconds.
STEP_BUDGET = 2_000_000
_TICK = 1_000
WALL_DEADLINE = 2.0
#: Rows a query may return (the judge compares at most this many); longer results count as failures to judge.
MAX_ROWS = 10_000
#: The gold query (trusted: written by the task's author) runs with this many times the step budget, a 60 s
#: deadline, ``GOLD_MAX_ROWS`` rows and every function, so a real benchmark's heavy gold still runs; a submission is
#: judged on up to ``GOLD_MAX_ROWS`` rows too.
GOLD_BUDGET_FACTOR = 100
GOLD_WALL = 60.0
GOLD_MAX_ROWS = 100_000
#: Longest string or blob any expression may build (SQLITE_LIMIT_LENGTH) and longest statement accepted.
MAX_LENGTH = 100_000
MAX_SQL = 20_000
#: Bytes a result may hold (strings and blobs by length, other values as 8): past it the query is an error, so a
#: result of many large values (``SELECT randomblob(99999) FROM a, b``) cannot exhaust memory.
MAX_RESULT_BYTES = 8_000_000

_ALLOWED = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}
#: Functions denied: extension loading; ``fts3_tokenizer`` (it returns a pointer: an address leak); ``printf`` and
#: ``format``, whose width argument builds a string of any size inside one step (``printf('%.*c', 1e9, 'x')`` took 7 s
#: and a gigabyte before the length limit turned it into NULL).
DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "printf", "format"})
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


@dataclass
class QueryResult:
    """A query's outcome: ``columns`` and ``rows`` (at most ``MAX_ROWS``) or ``error``; ``reads``: the
    ``(table, column)`` pairs the query reads (from the authorizer; a table alone as ``(table, "")``)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    error: str | None = None
    reads: set[tuple[str, str]] = field(default_factory=set)
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class SafeDatabase:
    """A read-only, sandboxed connection for untrusted queries (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection, *, step_budget: int = STEP_BUDGET, wall: float = WALL_DEADLINE):
        self.conn = conn
        self.step_budget = step_budget
        self.wall = wall
        if hasattr(conn, "enable_load_extension"):  # absent where Python was built without extension loading
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL)
        conn.execute("PRAGMA query_only = ON")
        self._reads: set[tuple[str, str]] = set()
        self._ticks = 0
        self._deadline = 0.0
        self._stopped: str | None = None
        self._budget = step_budget
        self._gold = False
        conn.set_authorizer(self._authorize)

    @classmethod
    def from_bytes(cls, data: bytes, **kwargs: Any) -> SafeDatabase:
        return cls(open_copy(data), **kwargs)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> SafeDatabase:
        """Open a SQLite file read-only (``mode=ro``): nothing a query does can change it."""
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        return cls(sqlite3.connect(uri, uri=True, check_same_thread=False, cached_statements=0), **kwargs)

    def close(self) -> None:
        self.conn.close()

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, dbname: str | None, _trig: Any) -> int:
        if action not in _ALLOWED:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and not self._gold and (arg2 or "").lower() in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_READ and arg1:
            if dbname not in (None, "main") or arg1.lower().startswith("sqlite_"):
                return sqlite3.SQLITE_IGNORE if arg1.lower() == "sqlite_master" else sqlite3.SQLITE_DENY
            self._reads.add((arg1.lower(), ""))
            if arg2:
                self._reads.add((arg1.lower(), arg2.lower()))
        return sqlite3.SQLITE_OK

    def _progress(self) -> int:
        self._ticks += 1
        if self._ticks * _TICK > self._budget:
            self._stopped = f"the query ran past its budget of {self._budget:,} steps and was stopped"
            return 1
        if time.monotonic() > self._deadline:
            self._stopped = f"the query ran past its {self.wall:g} s deadline and was stopped"
            return 1
        return 0

    def run(self, sql: str, max_rows: int = MAX_ROWS, *, gold: bool = False) -> QueryResult:
        """Run one statement; any failure (syntax, a denied operation, the budget) is ``error``, and more than
        ``max_rows`` rows is ``truncated``. ``gold``: the trusted gold query's allowances (``GOLD_BUDGET_FACTOR``);
        still read-only."""
        self._reads, self._ticks, self._stopped, self._gold = set(), 0, None, gold
        self._budget = self.step_budget * (GOLD_BUDGET_FACTOR if gold else 1)
        self._deadline = time.monotonic() + (max(self.wall, GOLD_WALL) if gold else self.wall)
        if len(sql) > MAX_SQL:
            return QueryResult(error=f"the query is longer than {MAX_SQL:,} characters")
        self.conn.set_progress_handler(self._progress, _TICK)
        try:
            cur = self.conn.execute(sql)
            columns = [d[0] for d in cur.description or ()]
            rows: list[tuple] = []
            size = 0
            while len(rows) <= max_rows and (chunk := cur.fetchmany(min(256, max_rows + 1 - len(rows)))):
                rows += chunk
                size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for r in chunk for v in r)
                if size > MAX_RESULT_BYTES:
                    cur.close()
                    return QueryResult(error=f"the result is larger than {MAX_RESULT_BYTES:,} bytes",
                                       reads=set(self._reads))  # fmt: skip
            cur.close()
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as e:
            msg = self._stopped or str(e) or type(e).__name__
            return QueryResult(error=msg, reads=set(self._reads))
        finally:
            self.conn.set_progress_handler(None, 0)
            self._gold = False
        if len(rows) > max_rows:
            return QueryResult(columns, rows[:max_rows], None, set(self._reads), truncated=True)
        return QueryResult(columns, rows, None, set(self._reads))


# -- judging -------------------------------------------------------------------------------------------------------
def _norm(v: Any) -> Any:
    """A cell as the judge compares it: floats to 6 decimals (integral floats as ints), bytes as hex."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        r = round(v, 6)
        return int(r) if r == int(r) else r
    if isinstance(v, bytes):
        return v.hex()
    return v


def _normalised(rows: Sequence[tuple]) -> list[tuple]:
    return [tuple(_norm(v) for v in r) for r in rows]


def has_order(sql: str) -> bool:
    """Whether the gold's result order counts: its text has ORDER BY outside a subquery's parentheses."""
    depth, out = 0, []
    for ch in sql:
        depth += ch == "("
        out.append(ch if depth == 0 else " ")
        depth -= ch == ")" and depth > 0
    return bool(_ORDER_BY.search("".join(out)))


def results_match(gold: Sequence[tuple], pred: Sequence[tuple], ordered: bool) -> bool:
    """Execution match: the same rows (as a multiset, or as a list when ``ordered``) up to a permutation of the
    columns (so aliases and the order of selected columns do not matter; widths must agree).

    >>> results_match([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], ordered=False)
    True
    >>> results_match([(1,), (2,)], [(2,), (1,)], ordered=True)
    False
    """
    g, p = _normalised(gold), _normalised(pred)
    if len(g) != len(p):
        return False
    width = len(g[0]) if g else 0
    if any(len(r) != width for r in p):
        return False
    target: Any = g if ordered else Counter(g)
    for perm in itertools.permutations(range(width)) if width <= 6 else [tuple(range(width))]:
        rows = [tuple(r[i] for i in perm) for r in p]
        if (rows if ordered else Counter(rows)) == target:
            return True
    return False


def result_overlap(gold: Sequence[tuple], pred: Sequence[tuple]) -> float:
    """Partial credit for an intermediate result: for each gold column, the best multiset F1 of its values against
    any column of ``pred``, averaged over the gold columns (1.0 for a matching result, 0.0 for nothing shared).

    >>> result_overlap([(1, "a"), (2, "b")], [(1,), (3,)])
    0.25
    """
    g, p = _normalised(gold), _normalised(pred)
    if not g or not p:
        return 0.0
    pcols = [Counter(r[j] for r in p) for j in range(len(p[0]))]
    total = 0.0
    for i in range(len(g[0])):
        gc = Counter(r[i] for r in g)
        best = 0.0
        for pc in pcols:
            inter = sum((gc & pc).values())
            if inter:
                best = max(best, 2 * inter / (sum(gc.values()) + sum(pc.values())))
        total += best
    return total / len(g[0])
