"""Sokoban rooms: the :class:`Room` type, the Boxoban level-file reader, and the two halves of reverse-play
generation (``agentgym.envs.sokoban.levels`` puts them together and verifies each room with the solver).

Our own take on gym-sokoban's reverse play: carve a connected floor by a random walk inside the walled border, put
the boxes on random targets and the player on a free cell, then play backwards: the player walks at random and, with
probability ``pull_prob``, pulls a box it walks away from (the reverse of a push).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Boxoban / XSB symbols: wall, floor, player, box, target, box on target, player on target.
XSB = {"#": "wall", " ": "floor", "@": "player", "$": "box", ".": "target", "*": "box_target", "+": "player_target"}


@dataclass(frozen=True)
class Room:
    """A room: ``height x width`` cells numbered ``row * width + column``; ``floor`` holds every non-wall cell."""

    height: int
    width: int
    floor: frozenset[int]
    targets: frozenset[int]
    boxes: tuple[int, ...]  # sorted
    player: int

    @property
    def start(self) -> tuple[int, tuple[int, ...]]:
        return self.player, self.boxes

    def key(self) -> str:
        """A short stable digest of the room (layout, targets, start)."""
        text = f"{self.height}x{self.width}:{sorted(self.floor)}:{sorted(self.targets)}:{self.boxes}:{self.player}"
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def to_xsb(self, player: int | None = None, boxes: tuple[int, ...] | None = None) -> str:
        """The room (or a state of it) in Boxoban's text format."""
        player = self.player if player is None else player
        boxes = self.boxes if boxes is None else boxes
        rows = []
        for r in range(self.height):
            row = ""
            for c in range(self.width):
                i = r * self.width + c
                on = i in self.targets
                if i not in self.floor:
                    row += "#"
                elif i == player:
                    row += "+" if on else "@"
                elif i in boxes:
                    row += "*" if on else "$"
                else:
                    row += "." if on else " "
            rows.append(row)
        return "\n".join(rows)


def parse_level(lines: list[str]) -> Room:
    """One level in Boxoban's format (rows of ``# @$.*+`` and spaces; ragged rows padded with walls).

    >>> room = parse_level(["#####", "#@$.#", "#####"])
    >>> room.player, room.boxes, sorted(room.targets)
    (6, (7,), [8])
    """
    width = max((len(line) for line in lines), default=0)
    if not lines or width == 0:
        raise ValueError("empty level")
    floor, targets, boxes, players = set(), set(), [], []
    for r, line in enumerate(lines):
        for c, ch in enumerate(line.ljust(width, "#")):
            if ch not in XSB:
                raise ValueError(f"unknown symbol {ch!r} at row {r}, column {c}")
            i = r * width + c
            if ch == "#":
                continue
            floor.add(i)
            if ch in ".*+":
                targets.add(i)
            if ch in "$*":
                boxes.append(i)
            if ch in "@+":
                players.append(i)
    if len(players) != 1:
        raise ValueError(f"a level needs exactly one player, found {len(players)}")
    if not boxes or len(boxes) > len(targets):
        raise ValueError(f"a level needs a box and a target for each box, found {len(boxes)} boxes, {len(targets)}")
    return Room(len(lines), width, frozenset(floor), frozenset(targets), tuple(sorted(boxes)), players[0])


def read_levels(path: str | os.PathLike[str]) -> list[Room]:
    """The levels of a Boxoban level file: each level follows a ``; N`` line (blank lines ignored).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("; 0\\n#####\\n#@$.#\\n#####\\n\\n; 1\\n######\\n#@ $.#\\n######\\n")
    >>> [room.boxes for room in read_levels(f.name)]
    [(7,), (9,)]
    """
    levels: list[list[str]] = []
    current: list[str] | None = None
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.rstrip("\n\r")
        if line.startswith(";"):
            current = []
            levels.append(current)
        elif line.strip():
            if current is None:  # a file without `; N` headers holds one level
                current = []
                levels.append(current)
            current.append(line)
    return [parse_level(level) for level in levels if level]


def carve(rng: np.random.Generator, height: int, width: int, cells: int) -> set[int]:
    """A connected floor of about ``cells`` interior cells, carved by a random walk."""
    r, c = int(rng.integers(1, height - 1)), int(rng.integers(1, width - 1))
    floor = {r * width + c}
    for _ in range(cells * 20):
        if len(floor) >= cells:
            break
        dr, dc = ((-1, 0), (1, 0), (0, -1), (0, 1))[int(rng.integers(4))]
        if 1 <= r + dr < height - 1 and 1 <= c + dc < width - 1:
            r, c = r + dr, c + dc
            floor.add(r * width + c)
    return floor


def reverse_play(rng: np.random.Generator, room: Room, steps: int, pull_prob: float) -> Room:
    """Play ``steps`` reverse moves: walk at random, pulling a box behind the player with probability ``pull_prob``."""
    w = room.width
    player, boxes = room.player, set(room.boxes)
    for _ in range(steps):
        dr, dc = ((-1, 0), (1, 0), (0, -1), (0, 1))[int(rng.integers(4))]
        d = dr * w + dc
        nxt = player + d
        if nxt not in room.floor or nxt in boxes:
            continue
        if player - d in boxes and rng.random() < pull_prob:
            boxes.remove(player - d)
            boxes.add(player)
        player = nxt
    return Room(room.height, w, room.floor, room.targets, tuple(sorted(boxes)), player)
