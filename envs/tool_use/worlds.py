"""Stateful tool worlds over in-memory state: a file system and a bank.

A world's *state* is its public attributes (BFCL-style state checks compare every one of them); private ones
(``_cwd``) are session details. Tools are ``@tool`` methods; each validates its inputs and raises ``ToolError``
before it changes anything, and everything is deterministic.

>>> fs = FileSystem({"/home/ann": None, "/home/ann/a.txt": "hi"})
>>> fs.cat("/home/ann/a.txt"), fs.ls("/home/ann")
('hi', ['a.txt'])
>>> bank = Bank({"checking": ("checking", 50.0)})
>>> bank.withdraw("checking", 80.0)
Traceback (most recent call last):
...
agentgym.envs.tool_use.tools.ToolError: insufficient funds: checking holds 50.00, cannot withdraw 80.00
"""

from __future__ import annotations

import copy
import functools
import posixpath
from typing import Any, ClassVar, Literal

from agentgym.envs.tool_use.tools import ToolError, schema_of, tool, tool_names


class World:
    """Base class: public attributes are the state; ``@tool`` methods are the tools."""

    name: ClassVar[str] = "world"

    @classmethod
    def tool_names(cls) -> list[str]:
        return tool_names(cls)

    @classmethod
    def schemas(cls) -> dict[str, dict[str, Any]]:
        """``{tool name: OpenAI function schema}`` (computed once per class; treat it as read-only)."""
        return _schemas(cls)

    def state(self) -> dict[str, Any]:
        """A deep copy of every public attribute (the state a BFCL-style check compares)."""
        return {k: copy.deepcopy(v) for k, v in sorted(vars(self).items()) if not k.startswith("_")}

    def copy(self) -> World:
        return copy.deepcopy(self)


@functools.cache
def _schemas(cls: type[World]) -> dict[str, dict[str, Any]]:
    return {n: schema_of(getattr(cls, n)) for n in cls.tool_names()}


def fmt_money(x: float) -> str:
    return f"{x:.2f}"


class FileSystem(World):
    """A POSIX-like file system: ``files`` maps absolute paths to contents, ``dirs`` lists the directories."""

    name = "filesystem"

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
        self.files[f] = (self.files.get(f, "") + content) if append else content
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
    """Accounts with balances: ``balances``, ``kinds`` and the ``history`` of every movement."""

    name = "bank"

    def __init__(self, accounts: dict[str, tuple[str, float]]):
        self.balances: dict[str, float] = {k: float(v[1]) for k, v in accounts.items()}
        self.kinds: dict[str, str] = {k: v[0] for k, v in accounts.items()}
        self.history: list[list[Any]] = []

    def _account(self, account: str) -> str:
        if account not in self.balances:
            raise ToolError(f"no such account: {account!r}; accounts: {sorted(self.balances)}")
        return account

    @staticmethod
    def _amount(amount: float) -> float:
        if amount <= 0:
            raise ToolError(f"the amount must be positive, got {amount}")
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


WORLDS: dict[str, type[World]] = {"filesystem": FileSystem, "bank": Bank}
