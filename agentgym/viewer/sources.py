"""What ``agentgym view PATH`` shows: the JSONL files under PATH, each classified by its first line.

- ``episodes``: trajectory records (``agentgym run`` files, a bench report's ``trajectories/*.jsonl``);
- ``rollouts``: a trainer run's ``rollouts.jsonl`` (episodes with an ``iteration``, per-token advantages);
- ``metrics``: a trainer run's ``metrics.jsonl`` (one object per iteration, no turns);
- ``records``: any other JSON-lines file.

A folder is walked (sorted, hidden folders and virtual environments skipped) to ``max_depth`` levels and at most
``max_files`` files. A source's ``run`` is the folder it lives in when that folder is a trainer run (it holds
``config.json`` and ``metrics.jsonl``), so its metrics and rollouts belong together. Clients name sources by
``id`` only: a path never comes from the page.

>>> import tempfile, pathlib, json
>>> run = pathlib.Path(tempfile.mkdtemp())
>>> _ = (run / "config.json").write_text("{}")
>>> _ = (run / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "success_rate": 0.5}) + "\\n")
>>> _ = (run / "rollouts.jsonl").write_text(json.dumps({"iteration": 1, "turns": []}) + "\\n")
>>> [(s.kind, s.label, s.run) for s in discover(run)]
[('metrics', 'metrics.jsonl', '.'), ('rollouts', 'rollouts.jsonl', '.')]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.viewer.index import LineIndex

SKIP_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".hypothesis", ".pytest_cache"})
KINDS = ("episodes", "rollouts", "metrics", "records")


@dataclass(eq=False)
class Source:
    """One JSONL file the page can show: ``id`` (what clients name), ``kind``, ``label`` (its path under the root),
    ``run`` (its trainer run folder under the root, or None) and its line index."""

    id: str
    path: Path
    kind: str
    label: str
    run: str | None
    index: LineIndex = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = LineIndex(self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "label": self.label, "run": self.run, **self.index.status()}


def first_line(path: Path, limit: int = 1 << 16) -> bytes:
    """The start of ``path``'s first non-blank line (at most ``limit`` bytes)."""
    with open(path, "rb") as f:
        while line := f.readline(limit):
            if line.strip():
                return line
    return b""


def classify(path: Path) -> str:
    """A JSONL file's kind (see the module docstring) from its name and first line."""
    line = first_line(path)
    try:
        head = json.loads(line)
    except ValueError:
        head = None
    if not isinstance(head, dict):  # a first line longer than the peek: judge by its start
        if path.name == "rollouts.jsonl" or line.startswith(b'{"iteration":'):
            return "rollouts"  # the trainer's records start with their iteration
        return "episodes" if line.startswith(b'{"') and b'"turns"' in line else "records"
    if head.get("kind") == "run" or ("turns" in head and "iteration" not in head):
        return "episodes"
    if "turns" in head:
        return "rollouts"
    if path.name == "metrics.jsonl" or "iteration" in head:
        return "metrics"
    return "records"


def is_run(folder: Path) -> bool:
    """Whether ``folder`` holds a trainer run (``config.json`` beside ``metrics.jsonl``)."""
    return (folder / "config.json").is_file() and (folder / "metrics.jsonl").is_file()


def discover(root: str | os.PathLike[str], *, max_depth: int = 6, max_files: int = 1000) -> list[Source]:
    """The sources under ``root`` (a JSONL file or a folder), in path order; ``ValueError`` when there are none."""
    root = Path(root)
    if root.is_file():
        files, base = [root], root.parent
    elif root.is_dir():
        files, base = _walk(root, max_depth, max_files), root
    else:
        raise ValueError(f"{root}: no such file or folder")
    sources: list[Source] = []
    for path in files:
        run = path.parent.relative_to(base).as_posix() if is_run(path.parent) else None
        label = path.relative_to(base).as_posix()
        sources.append(Source(f"s{len(sources)}", path, classify(path), label, run))
    if not sources:
        raise ValueError(f"{root}: no .jsonl files to show (trajectories, a bench report or a trainer run)")
    return sources


def _walk(root: Path, max_depth: int, max_files: int) -> list[Path]:
    found: list[Path] = []
    stack = [(root, 0)]
    while stack and len(found) < max_files:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and entry.name.endswith(".jsonl") and len(found) < max_files:
                found.append(Path(entry.path))
            elif (entry.is_dir(follow_symlinks=False) and depth < max_depth and not entry.name.startswith(".")
                  and entry.name not in SKIP_DIRS):  # fmt: skip
                subdirs.append((Path(entry.path), depth + 1))
        stack.extend(reversed(subdirs))
    return sorted(found, key=lambda p: p.relative_to(root).parts)
