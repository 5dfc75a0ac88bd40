"""Built-in Sokoban agents: ``oracle`` (privileged: plays the solver's optimal plan), ``heuristic`` (reads the grid;
greedy: the move that most lowers the boxes' distance to targets plus the player's walk to a loose box, never
pushing a box onto a dead square and avoiding states it has seen) and ``random`` (random moves, sometimes malformed).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from agentgym.contract.agent import Agent, GoldAgent
from agentgym.envs.sokoban.rooms import Room
from agentgym.envs.sokoban.solver import ACTIONS, State, dead_squares, step_state

Message = dict[str, Any]
_GRID = set("#_OX√PS")


def parse_grid(text: str) -> tuple[Room, State] | None:
    """The room and state of the last text grid in ``text`` (RAGEN's symbols), or None."""
    lines = [line for line in text.splitlines() if line and set(line) <= _GRID]
    if not lines:
        return None
    width = max(map(len, lines))
    floor, targets, boxes, player = set(), set(), [], -1
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            i = r * width + c
            if ch == "#":
                continue
            floor.add(i)
            if ch in "O√S":
                targets.add(i)
            if ch in "X√":
                boxes.append(i)
            if ch in "PS":
                player = i
    if player < 0:
        return None
    room = Room(len(lines), width, frozenset(floor), frozenset(targets), tuple(sorted(boxes)), player)
    return room, room.start


class OracleAgent(GoldAgent):
    """Plays the solver's optimal plan (``info["gold"]["plan"]``), one move a turn."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        plan = self.gold["plan"]
        return f"<answer>{plan[turn] if turn < len(plan) else 'Up'}</answer>"


class HeuristicAgent(Agent):
    """Greedy on the grid it sees (see the module docstring); ties broken at random."""

    name = "heuristic"

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._seen: set[State] = set()

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        parsed = parse_grid(str(messages[-1].get("content") or "")) if messages else None
        if parsed is None:
            return f"<answer>{ACTIONS[int(self.np_random.integers(4))]}</answer>"
        room, state = parsed
        seen = getattr(self, "_seen", set())
        seen.add(state)
        dead = dead_squares(room)
        best: list[tuple[float, int]] = []
        for a in range(4):
            nxt = step_state(room, state, a, dead)
            if nxt is None:
                continue
            score = _score(room, nxt) + (5.0 if nxt in seen else 0.0) + float(self.np_random.random()) * 0.01
            best.append((score, a))
        move = min(best)[1] if best else int(self.np_random.integers(4))
        return f"<answer>{ACTIONS[move]}</answer>"


def _score(room: Room, state: State) -> float:
    """Sum of each box's Manhattan distance to its nearest target, times 10, plus the player's walk to the nearest
    box off target."""
    w = room.width
    player, boxes = state
    total = 0.0
    for b in boxes:
        total += 10 * min(abs(b // w - t // w) + abs(b % w - t % w) for t in room.targets)
    loose = {b for b in boxes if b not in room.targets}
    if loose:
        seen, queue = {player}, deque([(player, 0)])
        walk = 4 * len(room.floor)
        while queue:
            cell, d = queue.popleft()
            if any(cell + k in loose for k in (-w, w, -1, 1)):
                walk = d
                break
            for k in (-w, w, -1, 1):
                if cell + k in room.floor and cell + k not in boxes and cell + k not in seen:
                    seen.add(cell + k)
                    queue.append((cell + k, d + 1))
        total += walk
    return total


class RandomAgent(Agent):
    """A random move each turn; one turn in ten is malformed (a wrong word, no tags, an empty answer)."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        if rng.random() < 0.1:
            return ("<answer>Jump</answer>", "I will go up", "<answer></answer>")[int(rng.integers(3))]
        return f"<answer>{ACTIONS[int(rng.integers(4))]}</answer>"
