"""Stateful tool worlds over in-memory state: a file system, a bank, and a calendar with a to-do list.

A world's *state* is its public attributes; private ones (``_cwd``) are session details. The state check judges a
state's *outcome* (``World.outcome``): what the user can ask for (files and their contents, accounts and their
balances, events and to-dos by their fields), not the path that reached it (the bank's ``history``, the order of
operations, the ids handed out). Tools are ``@tool`` methods; each validates its inputs and raises ``ToolError``
before it changes anything, and everything is deterministic; no id or value depends on a clock or a counter.

>>> fs = FileSystem({"/home/ann": None, "/home/ann/a.txt": "hi"})
>>> fs.cat("/home/ann/a.txt"), fs.ls("/home/ann")
('hi', ['a.txt'])
>>> bank = Bank({"checking": ("checking", 50.0)})
>>> bank.withdraw("checking", 80.0)
Traceback (most recent call last):
...
agentgym.envs.tool_use.tools.ToolError: insufficient funds: checking holds 50.00, cannot withdraw 80.00
>>> one, two = (Bank({"a": ("checking", 50.0), "b": ("savings", 0.0)}) for _ in range(2))
>>> one.transfer("a", "b", 50.0), two.transfer("a", "b", 20.0), two.transfer("a", "b", 30.0)
('moved 50.00 from a to b', 'moved 20.00 from a to b', 'moved 30.00 from a to b')
>>> one.state() == two.state(), Bank.outcome(one.state()) == Bank.outcome(two.state())
(False, True)
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import hashlib
import posixpath
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from agentgym.envs.tool_use.limits import MAX_FILE_CHARS
from agentgym.envs.tool_use.tools import LimitError, ToolError, schema_of, tool, tool_names


class World:
    """Base class: public attributes are the state; ``@tool`` methods are the tools."""

    name: ClassVar[str] = "world"
    #: What the system prompt says the agent acts on ("the user's ...").
    description: ClassVar[str] = "world"

    @classmethod
    def from_init(cls, init: dict[str, Any]) -> World:
        """A fresh world from a task's JSON ``init`` record."""
        raise NotImplementedError

    def context(self) -> str:
        """Session facts the system prompt states (the current directory, today's date); empty by default."""
        return ""

    @classmethod
    def tool_names(cls) -> list[str]:
        return tool_names(cls)

    @classmethod
    def schemas(cls) -> dict[str, dict[str, Any]]:
        """``{tool name: OpenAI function schema}`` (computed once per class; treat it as read-only)."""
        return _schemas(cls)

    def state(self) -> dict[str, Any]:
        """A deep copy of every public attribute (``outcome`` reads the part a state check compares)."""
        return {k: copy.deepcopy(v) for k, v in sorted(vars(self).items()) if not k.startswith("_")}

    @classmethod
    def outcome(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        """The part of a ``state`` the user asked for, in a canonical form: two states that differ only in the path
        that reached them (the order of operations, a history, the ids handed out) have equal outcomes. By
        default every public attribute, as it is."""
        return dict(state)

    def copy(self) -> World:
        return copy.deepcopy(self)


@functools.cache
def _schemas(cls: type[World]) -> dict[str, dict[str, Any]]:
    return {n: schema_of(getattr(cls, n)) for n in cls.tool_names()}


#: The largest amount one bank operation may move.
MAX_AMOUNT = 1e12


def fmt_money(x: float) -> str:
    return f"{x:.2f}"


class FileSystem(World):
    """A POSIX-like file system: ``files`` maps absolute paths to contents, ``dirs`` lists the directories."""

    name = "filesystem"
    description = "file system"

    def __init__(self, tree: dict[str, str | None], cwd: str | None = None):
        """``tree``: absolute path -> file content, or None for a directory (parents are created)."""
        self.dirs: list[str] = ["/"]
        self.files: dict[str, str] = {}
        for path, content in tree.items():
            parts = path.strip("/").split("/")
            for i in range(1, len(parts) + (content is None)):
                d = "/" + "/".join(parts[:i])
                if d not in self.dirs:
                    self.dirs.append(d)
            if content is not None:
                self.files[path] = content
        self.dirs.sort()
        self._cwd = cwd or "/"

    @classmethod
    def from_init(cls, init: dict[str, Any]) -> FileSystem:
        return cls(dict(init["tree"]), cwd=init["cwd"])

    def context(self) -> str:
        return f"The current directory is {self._cwd}."

    @classmethod
    def outcome(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        """The directories (as a sorted list) and the files with their contents."""
        return {"dirs": sorted(state["dirs"]), "files": dict(state["files"])}

    def _path(self, p: str) -> str:
        if not p.strip():
            raise ToolError("the path is empty")
        return posixpath.normpath(posixpath.join(self._cwd, p.strip())).replace("//", "/")

    def _parent_ok(self, path: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in self.dirs:
            raise ToolError(f"no such directory: {parent}")
        if path in self.dirs or path in self.files:
            raise ToolError(f"{path} already exists")

    @tool
    def pwd(self) -> str:
        """Print the current working directory."""
        return self._cwd

    @tool
    def ls(self, path: str | None = None) -> list[str]:
        """List the entries of a directory (directories end with '/').

        Args:
            path: the directory to list; the current directory if omitted.
        """
        d = self._path(path) if path is not None else self._cwd
        if d not in self.dirs:
            raise ToolError(f"no such directory: {d}")
        prefix = d.rstrip("/") + "/"
        out = [p[len(prefix) :] + "/" for p in self.dirs if p != d and posixpath.dirname(p) == d]
        out += [p[len(prefix) :] for p in self.files if posixpath.dirname(p) == d]
        return sorted(out)

    @tool
    def cd(self, path: str) -> str:
        """Change the current directory.

        Args:
            path: the directory to go to (absolute, or relative to the current directory).
        """
        d = self._path(path)
        if d not in self.dirs:
            raise ToolError(f"no such directory: {d}")
        self._cwd = d
        return d

    @tool
    def mkdir(self, path: str) -> str:
        """Create a directory (its parent must exist).

        Args:
            path: the directory to create.
        """
        d = self._path(path)
        self._parent_ok(d)
        self.dirs.append(d)
        self.dirs.sort()
        return f"created {d}"

    @tool
    def touch(self, path: str) -> str:
        """Create an empty file if it does not exist.

        Args:
            path: the file to create.
        """
        f = self._path(path)
        if f in self.files:
            return f"{f} exists"
        self._parent_ok(f)
        self.files[f] = ""
        return f"created {f}"

    @tool
    def cat(self, path: str) -> str:
        """Return the content of a file.

        Args:
            path: the file to read.
        """
        f = self._path(path)
        if f not in self.files:
            raise ToolError(f"no such file: {f}")
        return self.files[f]

    @tool
    def write(self, path: str, content: str, append: bool = False) -> str:
        """Write text to a file, creating it if needed.

        Args:
            path: the file to write.
            content: the text to write.
            append: add the text at the end instead of replacing the content.
        """
        f = self._path(path)
        if f not in self.files:
            self._parent_ok(f)
        new = (self.files.get(f, "") + content) if append else content
        if len(new) > MAX_FILE_CHARS:
            raise LimitError(f"{f} would hold {len(new):,} characters; a file holds at most {MAX_FILE_CHARS:,}")
        self.files[f] = new
        return f"wrote {len(content)} characters to {f}"

    @tool
    def mv(self, source: str, destination: str) -> str:
        """Move or rename a file; into a directory if the destination is one.

        Args:
            source: the file to move.
            destination: the new path, or an existing directory to move the file into.
        """
        src, dst = self._path(source), self._path(destination)
        if src not in self.files:
            raise ToolError(f"no such file: {src}" + (" (only files can be moved)" if src in self.dirs else ""))
        if dst in self.dirs:
            dst = posixpath.join(dst, posixpath.basename(src))
        if dst == src:
            return f"{src} unchanged"
        self._parent_ok(dst)
        self.files[dst] = self.files.pop(src)
        return f"moved {src} to {dst}"

    @tool
    def rm(self, path: str) -> str:
        """Remove a file or an empty directory.

        Args:
            path: what to remove.
        """
        p = self._path(path)
        if p in self.files:
            del self.files[p]
        elif p in self.dirs:
            if p == "/" or any(posixpath.dirname(q) == p for q in [*self.files, *self.dirs] if q != p):
                raise ToolError(f"directory not empty: {p}")
            if self._cwd == p:
                raise ToolError(f"cannot remove the current directory {p}")
            self.dirs.remove(p)
        else:
            raise ToolError(f"no such file or directory: {p}")
        return f"removed {p}"

    @tool
    def find(self, name: str, path: str = "/") -> list[str]:
        """Find files and directories whose name contains a string.

        Args:
            name: the text to look for in names.
            path: the directory to search under.
        """
        root = self._path(path)
        if root not in self.dirs:
            raise ToolError(f"no such directory: {root}")
        under = [p for p in [*self.dirs, *self.files] if p.startswith(root.rstrip("/") + "/")]
        return sorted(p for p in under if name in posixpath.basename(p))


class Bank(World):
    """Accounts with balances: ``balances``, ``kinds`` and the ``history`` of every movement.

    The outcome is the accounts (their kinds) and their balances in cents; the ``history`` is the path (no task's
    instruction is about it: ``get_statement`` reads it, no gold trace asks for it), so two transfers that add up to
    one, or a wrong transfer and its reversal, reach the same outcome.
    """

    name = "bank"
    description = "bank accounts"

    def __init__(self, accounts: dict[str, tuple[str, float]]):
        self.balances: dict[str, float] = {k: float(v[1]) for k, v in accounts.items()}
        self.kinds: dict[str, str] = {k: v[0] for k, v in accounts.items()}
        self.history: list[list[Any]] = []

    @classmethod
    def from_init(cls, init: dict[str, Any]) -> Bank:
        return cls({k: (v[0], v[1]) for k, v in init["accounts"].items()})

    @classmethod
    def outcome(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        """The accounts' kinds and their balances in whole cents (``history`` left out)."""
        return {"balances": {a: round(b * 100) for a, b in state["balances"].items()}, "kinds": dict(state["kinds"])}

    def _account(self, account: str) -> str:
        if account not in self.balances:
            raise ToolError(f"no such account: {account!r}; accounts: {sorted(self.balances)}")
        return account

    @staticmethod
    def _amount(amount: float) -> float:
        if amount <= 0:
            raise ToolError(f"the amount must be positive, got {amount}")
        if amount > MAX_AMOUNT:  # balances stay finite: two deposits of 1e308 would make one infinite
            raise ToolError(f"the amount must be at most {fmt_money(MAX_AMOUNT)}, got {amount:g}")
        if round(amount, 2) == 0:
            raise ToolError(f"the amount must be at least 0.01, got {amount:g}")
        return round(amount, 2)

    def _debit(self, account: str, amount: float, verb: str) -> None:
        if self.balances[account] < amount:
            raise ToolError(
                f"insufficient funds: {account} holds {fmt_money(self.balances[account])}, "
                f"cannot {verb} {fmt_money(amount)}"
            )

    @tool
    def list_accounts(self) -> list[dict[str, Any]]:
        """List every account with its kind and balance."""
        return [{"account": a, "kind": self.kinds[a], "balance": b} for a, b in sorted(self.balances.items())]

    @tool
    def get_balance(self, account: str) -> float:
        """Return the balance of an account.

        Args:
            account: the account name.
        """
        return self.balances[self._account(account)]

    @tool
    def deposit(self, account: str, amount: float) -> float:
        """Deposit money into an account; returns the new balance.

        Args:
            account: the account name.
            amount: how much to deposit (positive).
        """
        a, x = self._account(account), self._amount(amount)
        self.balances[a] = round(self.balances[a] + x, 2)
        self.history.append([a, "deposit", x, self.balances[a]])
        return self.balances[a]

    @tool
    def withdraw(self, account: str, amount: float) -> float:
        """Withdraw money from an account; returns the new balance.

        Args:
            account: the account name.
            amount: how much to withdraw (positive, at most the balance).
        """
        a, x = self._account(account), self._amount(amount)
        self._debit(a, x, "withdraw")
        self.balances[a] = round(self.balances[a] - x, 2)
        self.history.append([a, "withdraw", x, self.balances[a]])
        return self.balances[a]

    @tool
    def transfer(self, source: str, target: str, amount: float) -> str:
        """Move money from one account to another.

        Args:
            source: the account to take the money from.
            target: the account to put it in.
            amount: how much to move (positive, at most the source balance).
        """
        s, t, x = self._account(source), self._account(target), self._amount(amount)
        if s == t:
            raise ToolError("source and target are the same account")
        self._debit(s, x, "transfer")
        self.balances[s] = round(self.balances[s] - x, 2)
        self.balances[t] = round(self.balances[t] + x, 2)
        self.history.append([s, "transfer out", x, self.balances[s]])
        self.history.append([t, "transfer in", x, self.balances[t]])
        return f"moved {fmt_money(x)} from {s} to {t}"

    @tool
    def get_statement(self, account: str, limit: int = 5) -> list[list[Any]]:
        """Return the latest movements of an account as [account, kind, amount, balance after].

        Args:
            account: the account name.
            limit: how many movements to return (the latest first).
        """
        a = self._account(account)
        if limit < 1:
            raise ToolError(f"limit must be at least 1, got {limit}")
        return [h for h in reversed(self.history) if h[0] == a][:limit]

    @tool
    def open_account(self, name: str, kind: Literal["checking", "savings"]) -> str:
        """Open a new empty account.

        Args:
            name: the new account's name.
            kind: the kind of account.
        """
        if not name.strip() or name in self.balances:
            raise ToolError(f"invalid or existing account name {name!r}")
        self.balances[name] = 0.0
        self.kinds[name] = kind
        return f"opened {kind} account {name}"

    @tool
    def close_account(self, account: str) -> str:
        """Close an account; its balance must be zero.

        Args:
            account: the account to close.
        """
        a = self._account(account)
        if self.balances[a] != 0:
            raise ToolError(f"{a} still holds {fmt_money(self.balances[a])}: empty it first")
        del self.balances[a]
        del self.kinds[a]
        return f"closed {a}"


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_TIME = re.compile(r"\d{2}:\d{2}", re.ASCII)
DAY_START, DAY_END = 8 * 60, 20 * 60  # bookable hours, in minutes after midnight


def to_minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:])


def to_hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def item_id(prefix: str, *key: str) -> str:
    """A stable id derived from an item's name (so replays and agents make the same ids, whatever the path)."""
    return prefix + hashlib.blake2b("|".join(key).encode(), digest_size=3).hexdigest()


def _records(items: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records without their ids (attendees sorted), ordered by title, date and start or due date: no two events
    the tools make share all three (events may not overlap), nor two to-dos a title."""
    out = []
    for rec in items.values():
        r = dict(rec)
        if "attendees" in r:
            r["attendees"] = sorted(r["attendees"])
        out.append(r)
    out.sort(key=lambda r: (r["title"], r.get("date") or "", r.get("start") or "", r.get("due") or ""))
    return out


class Calendar(World):
    """A calendar and a to-do list: ``events`` and ``todos`` map ids to records; ``today`` is the session's date.

    Events may not overlap, and are booked between 08:00 and 20:00 in 15-minute steps. Ids are opaque, so acting
    on an existing event or to-do needs a lookup first (``find_events``, ``list_todos``). An id comes from the
    item's title alone (an ordinal tells apart events of the same title), so it does not depend on when or at what
    time the item was made, and a move keeps it. The outcome compares events and to-dos by their fields, ids left
    out.

    >>> cal = Calendar("2026-03-02", {}, {})
    >>> eid = cal.create_event("Dentist", "2026-03-03", "09:00")["id"]
    >>> cal.move_event(eid, "2026-03-04", "10:00")["id"] == eid == Calendar("2026-03-02", {}, {}).create_event(
    ...     "Dentist", "2026-03-04", "10:00")["id"]
    True
    """

    name = "calendar"
    description = "calendar and to-do list"

    def __init__(self, today: str, events: dict[str, dict[str, Any]], todos: dict[str, dict[str, Any]]):
        self._today = today
        self.events: dict[str, dict[str, Any]] = copy.deepcopy(events)
        self.todos: dict[str, dict[str, Any]] = copy.deepcopy(todos)

    @classmethod
    def from_init(cls, init: dict[str, Any]) -> Calendar:
        return cls(init["today"], init["events"], init["todos"])

    @classmethod
    def outcome(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        """The events and the to-dos as canonically ordered records, without their ids."""
        return {"events": _records(state["events"]), "todos": _records(state["todos"])}

    @property
    def today(self) -> str:
        """The session's date (a session detail, not part of the state)."""
        return self._today

    def context(self) -> str:
        return f"Today is {dt.date.fromisoformat(self._today).strftime('%A')} {self._today}."

    # -- checks -------------------------------------------------------------------------------------
    @staticmethod
    def _date(date: str) -> str:
        try:
            if not _DATE.fullmatch(date):
                raise ValueError
            dt.date.fromisoformat(date)
        except ValueError:
            raise ToolError(f"invalid date {date!r}: use YYYY-MM-DD") from None
        return date

    @staticmethod
    def _slot(start: str, duration_minutes: int) -> tuple[int, int]:
        if not _TIME.fullmatch(start) or int(start[:2]) > 23 or int(start[3:]) > 59:
            raise ToolError(f"invalid time {start!r}: use HH:MM (24-hour)")
        begin = to_minutes(start)
        if begin % 15 or duration_minutes % 15 or duration_minutes <= 0:
            raise ToolError("events start on a quarter hour and last a positive multiple of 15 minutes")
        if begin < DAY_START or begin + duration_minutes > DAY_END:
            raise ToolError(f"events must fit between {to_hhmm(DAY_START)} and {to_hhmm(DAY_END)}")
        return begin, begin + duration_minutes

    def _free(self, date: str, begin: int, end: int, ignore: str | None = None) -> None:
        for eid, ev in self.events.items():
            if eid != ignore and ev["date"] == date and begin < to_minutes(ev["end"]) and to_minutes(ev["start"]) < end:
                raise ToolError(f"that time overlaps {ev['title']!r} ({ev['start']}-{ev['end']}, id {eid})")

    def _event(self, event_id: str) -> dict[str, Any]:
        if event_id not in self.events:
            raise ToolError(f"no event with id {event_id!r} (find_events looks ids up by title)")
        return self.events[event_id]

    def _public(self, eid: str) -> dict[str, Any]:
        return {"id": eid, **self.events[eid]}

    # -- events -------------------------------------------------------------------------------------
    @tool
    def list_events(self, date: str) -> list[dict[str, Any]]:
        """List the events of one day, in time order.

        Args:
            date: the day, as YYYY-MM-DD.
        """
        day = self._date(date)
        found = [e for e, ev in self.events.items() if ev["date"] == day]
        return [self._public(e) for e in sorted(found, key=lambda e: self.events[e]["start"])]

    @tool
    def find_events(self, query: str) -> list[dict[str, Any]]:
        """Find events whose title contains a text (case-insensitive), in date and time order.

        Args:
            query: the text to look for in titles.
        """
        q = query.strip().lower()
        if not q:
            raise ToolError("the query is empty")
        found = [e for e, ev in self.events.items() if q in ev["title"].lower()]
        return [self._public(e) for e in sorted(found, key=lambda e: (self.events[e]["date"], self.events[e]["start"]))]

    @tool
    def free_slots(self, date: str, duration_minutes: int) -> list[str]:
        """Start times (every 15 minutes, 08:00-20:00) at which an event of this length fits on a day.

        Args:
            date: the day, as YYYY-MM-DD.
            duration_minutes: the length of the event (a multiple of 15).
        """
        day = self._date(date)
        self._slot(to_hhmm(DAY_START), duration_minutes)
        out = []
        for begin in range(DAY_START, DAY_END - duration_minutes + 1, 15):
            try:
                self._free(day, begin, begin + duration_minutes)
            except ToolError:
                continue
            out.append(to_hhmm(begin))
        return out

    @tool
    def create_event(
        self, title: str, date: str, start: str, duration_minutes: int = 60, attendees: list[str] | None = None
    ) -> dict[str, Any]:
        """Create an event; returns it with its id.

        Args:
            title: what the event is called.
            date: the day, as YYYY-MM-DD.
            start: the start time, as HH:MM (24-hour, on a quarter hour).
            duration_minutes: how long it lasts (a multiple of 15).
            attendees: who else attends.
        """
        if not title.strip():
            raise ToolError("the title is empty")
        day = self._date(date)
        begin, end = self._slot(start, duration_minutes)
        self._free(day, begin, end)
        eid = self._new_event_id(title)
        people = sorted(set(attendees or []))
        self.events[eid] = {"title": title, "date": day, "start": start, "end": to_hhmm(end), "attendees": people}
        return self._public(eid)

    def _new_event_id(self, title: str) -> str:
        """``item_id("ev", title)``, or with the first ordinal (2, 3, ...) that no event holds yet."""
        n = 1
        while (eid := item_id("ev", title, *([str(n)] if n > 1 else []))) in self.events:
            n += 1
        return eid

    @tool
    def move_event(self, event_id: str, date: str, start: str) -> dict[str, Any]:
        """Move an event to another day or time, keeping its length.

        Args:
            event_id: the event's id.
            date: the new day, as YYYY-MM-DD.
            start: the new start time, as HH:MM.
        """
        ev = self._event(event_id)
        length = to_minutes(ev["end"]) - to_minutes(ev["start"])
        day = self._date(date)
        begin, end = self._slot(start, length)
        self._free(day, begin, end, ignore=event_id)
        ev.update(date=day, start=start, end=to_hhmm(end))
        return self._public(event_id)

    @tool
    def cancel_event(self, event_id: str) -> str:
        """Delete an event.

        Args:
            event_id: the event's id.
        """
        title = self._event(event_id)["title"]
        del self.events[event_id]
        return f"cancelled {title!r}"

    @tool
    def add_attendee(self, event_id: str, person: str) -> list[str]:
        """Invite someone to an event; returns the attendees.

        Args:
            event_id: the event's id.
            person: who to invite.
        """
        ev = self._event(event_id)
        if not person.strip():
            raise ToolError("the person's name is empty")
        if person in ev["attendees"]:
            raise ToolError(f"{person} already attends {ev['title']!r}")
        ev["attendees"] = sorted([*ev["attendees"], person])
        return ev["attendees"]

    # -- to-dos -------------------------------------------------------------------------------------
    @tool
    def list_todos(self, status: Literal["open", "done", "all"] = "open") -> list[dict[str, Any]]:
        """List to-do items with their ids, by due date (items without one last).

        Args:
            status: which items to list.
        """
        items = [{"id": t, **v} for t, v in self.todos.items() if status == "all" or v["done"] == (status == "done")]
        return sorted(items, key=lambda t: (t["due"] is None, t["due"] or "", t["title"]))

    @tool
    def add_todo(
        self, title: str, due: str | None = None, priority: Literal["low", "normal", "high"] = "normal"
    ) -> str:
        """Add a to-do item; returns its id.

        Args:
            title: what is to be done.
            due: the due date, as YYYY-MM-DD.
            priority: how urgent it is.
        """
        if not title.strip():
            raise ToolError("the title is empty")
        tid = item_id("td", title)
        if tid in self.todos:
            raise ToolError(f"a to-do {title!r} already exists (id {tid})")
        self.todos[tid] = {"title": title, "due": self._date(due) if due is not None else None,
                           "priority": priority, "done": False}  # fmt: skip
        return tid

    @tool
    def complete_todo(self, todo_id: str) -> str:
        """Mark a to-do item as done.

        Args:
            todo_id: the item's id.
        """
        if todo_id not in self.todos:
            raise ToolError(f"no to-do with id {todo_id!r} (list_todos shows the ids)")
        if self.todos[todo_id]["done"]:
            raise ToolError(f"{self.todos[todo_id]['title']!r} is already done")
        self.todos[todo_id]["done"] = True
        return f"done: {self.todos[todo_id]['title']}"


WORLDS: dict[str, type[World]] = {"filesystem": FileSystem, "bank": Bank, "calendar": Calendar}
