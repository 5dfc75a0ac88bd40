"""An exact Sokoban solver: breadth-first search over full states (player cell, box cells), so its optimum is the
minimal number of **moves** (player steps, pushes included), the length an agent playing one move a turn can reach.

Pushes onto dead squares (floor cells from which no box can ever reach a target, found by pulling a box backwards
from every target) are pruned; such pushes can never lead to a solution, so pruning keeps the optimum exact.
:func:`solve_table` explores every state reachable from the start (up to ``max_states``) and then runs a backward BFS
from the solved states, giving the exact distance-to-go of every reachable state: a state outside the table (a push
onto a dead square, or any state reached after one) or in it without a distance is unsolvable (a deadlock).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from agentgym.envs.sokoban.rooms import Room

#: Action words in RAGEN's order and their (row, column) steps.
ACTIONS = ("Up", "Down", "Left", "Right")
DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))
State = tuple[int, tuple[int, ...]]  # (player cell, sorted box cells); a cell is row * width + column


def dead_squares(room: Room) -> frozenset[int]:
    """Floor cells from which a box can never be pushed onto any target (ignoring other boxes)."""
    w, floor = room.width, room.floor
    live = set(room.targets)
    queue = deque(room.targets)
    while queue:
        box = queue.popleft()
        for dr, dc in DELTAS:
            d = dr * w + dc
            # pull: the box moves from `box` to `box - d` with the player at box - d, then box - 2d
            if box - d in floor and box - 2 * d in floor and box - d not in live:
                live.add(box - d)
                queue.append(box - d)
    return frozenset(floor - live)


def step_state(room: Room, state: State, action: int, dead: frozenset[int] = frozenset()) -> State | None:
    """The state after ``ACTIONS[action]``: None when the move is blocked (a wall, or a box against a wall or a box)
    or, when ``dead`` is given, when it pushes a box onto a dead square."""
    dr, dc = DELTAS[action]
    d = dr * room.width + dc
    player, boxes = state
    nxt = player + d
    if nxt not in room.floor:
        return None
    if nxt in boxes:
        dest = nxt + d
        if dest not in room.floor or dest in boxes or dest in dead:
            return None
        return nxt, tuple(sorted(dest if b == nxt else b for b in boxes))
    return nxt, boxes


@dataclass(frozen=True)
class Table:
    """Every state reachable from a room's start (pushes onto dead squares pruned) and its exact moves-to-go; states
    absent from ``dist`` are unsolvable."""

    dist: dict[State, int]
    explored: int
    optimum: int | None  # the start's moves-to-go; None: the room is unsolvable


def solve_table(room: Room, max_states: int = 300_000) -> Table | None:
    """The exact distance table of ``room`` (see the module docstring), or None past ``max_states`` states."""
    dead = dead_squares(room)
    start = room.start
    index: dict[State, int] = {start: 0}
    states: list[State] = [start]
    preds: list[list[int]] = [[]]
    i = 0
    while i < len(states):
        state = states[i]
        for a in range(4):
            nxt = step_state(room, state, a, dead)
            if nxt is None:
                continue
            j = index.get(nxt)
            if j is None:
                if len(states) >= max_states:
                    return None
                j = index[nxt] = len(states)
                states.append(nxt)
                preds.append([])
            preds[j].append(i)
        i += 1
    targets = room.targets
    dist_i = [-1] * len(states)
    queue: deque[int] = deque()
    for k, (_, boxes) in enumerate(states):
        if targets.issuperset(boxes):
            dist_i[k] = 0
            queue.append(k)
    while queue:
        k = queue.popleft()
        for p in preds[k]:
            if dist_i[p] < 0:
                dist_i[p] = dist_i[k] + 1
                queue.append(p)
    dist = {s: dist_i[k] for k, s in enumerate(states) if dist_i[k] >= 0}
    return Table(dist, len(states), dist_i[0] if dist_i[0] >= 0 else None)


def plan(room: Room, table: Table, state: State | None = None) -> list[int] | None:
    """An optimal plan (action indices) from ``state`` (the start by default), or None if it is unsolvable: each
    move takes the first action (in ``ACTIONS`` order) whose next state is one move closer."""
    state = room.start if state is None else state
    if state not in table.dist:
        return None
    out: list[int] = []
    while table.dist[state] > 0:
        for a in range(4):
            nxt = step_state(room, state, a)
            if nxt is not None and table.dist.get(nxt) == table.dist[state] - 1:
                out.append(a)
                state = nxt
                break
    return out
