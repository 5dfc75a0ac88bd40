"""Sokoban-v0: push every box onto a target in a text grid, one move a turn, with an exact solver's signals.

Rooms come from a level set built once per ``(size, num_levels, level_seed)`` and cached in memory (``LEVEL_CACHE``;
optionally on disk under the operator's ``cache_dir``), so ``reset`` is a lookup; ``level_file`` (the operator's)
plays the levels of a Boxoban level file instead. Sizes (``size``, ``levels.PRESETS``, "HxW-boxes"): ``"6x6-1"``
(RAGEN's default), ``"6x6-2"`` and ``"8x8-4"`` (GEM's easy and hard), ``"7x7-2"``, ``"7x7-3"``, ``"10x10-3"`` and
``"10x10-4"`` (gym-sokoban's), and ``"8x8-2"``.

The observation is RAGEN's text grid: ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P``
player, ``S`` player on target. Each turn the agent answers one of RAGEN's action words, ``Up``, ``Down``, ``Left``
or ``Right``, inside ``<answer></answer>`` (a bare word is accepted too). Anything else is an invalid step
(``action_valid`` False, ``parse_error`` and the observation say why); the room does not change. A move into a wall
or a box that cannot move is valid and changes nothing.

Rewards: ``reward="outcome"`` (default) pays ``outcome`` 1.0 when every box is on a target (the episode ends);
``reward="shaped"`` is gym-sokoban's: ``step`` -0.1 a move, ``box`` +1 / -1 when a push puts a box on / takes one off
a target, ``outcome`` +10 when solved.

Verified signals in ``info`` (``agentgym.envs.sokoban.solver``: exact BFS, optimum = fewest moves):
``boxes_on_target``; ``distance_to_go`` (the fewest moves left, None when the room can no longer be solved);
``progress`` = ``1 - distance_to_go / optimal_moves`` (0.0 at the start, 1.0 solved, negative after detours, None
once unsolvable); ``deadlock`` (this move made the room unsolvable); ``anchor`` (the task and the canonical state).

>>> env = SokobanEnv()
>>> obs, info = env.reset(options={"task_index": 0})
>>> print(obs[0]["content"][-41:])  # the grid (6 rows of 6)
######
######
#_P###
#_X_O#
#____#
######
>>> info["gold"]["plan"], info["distance_to_go"]
(['Left', 'Down', 'Right', 'Right'], 4)
>>> obs, reward, terminated, truncated, info = env.step("<answer>Down</answer>")  # the box into the bottom row
>>> info["deadlock"], info["distance_to_go"], info["progress"]
(True, None, None)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, parse_tag_action
from agentgym.contract.trust import declare, integer, one_of
from agentgym.envs.sokoban.agents import HeuristicAgent, OracleAgent, RandomAgent
from agentgym.envs.sokoban.levels import PRESETS, LevelSet, build_level_set
from agentgym.envs.sokoban.rooms import Room, read_levels
from agentgym.envs.sokoban.solver import ACTIONS, State, Table, plan, solve_table, step_state

#: Level sets built in this process, shared by its envs: ``(height, width, boxes, count, seed)`` or a level file's
#: path -> ``LevelSet``. Rooms and tables are never mutated once built.
LEVEL_CACHE: dict[Any, LevelSet] = {}
#: RAGEN's grid symbols.
SYMBOLS = {"wall": "#", "floor": "_", "target": "O", "box": "X", "box_target": "√", "player": "P", "player_target": "S"}
REWARDS = ("outcome", "shaped")
#: Sizes whose 200-room set builds in about a second (a client may pick them; the others only where allowed).
CHEAP_SIZES = ("6x6-1", "6x6-2", "7x7-2", "7x7-3", "8x8-2")
_WORD = re.compile(r"\s*([A-Za-z]{1,10})\s*[.!]?\s*")

INTRO = (
    "You are playing Sokoban. Push every box onto a target. Symbols: # wall, _ floor, O target, X box, √ box on "
    "target, P you, S you on a target. You move one cell a turn: Up, Down, Left or Right; walking into a box pushes "
    "it one cell if the cell behind it is free. Boxes cannot be pulled, so a box pushed into a corner is stuck. "
    "Answer with one move inside tags, e.g. <answer>Left</answer>."
)


def render(room: Room, state: State) -> str:
    """The state as RAGEN's text grid."""
    player, boxes = state
    rows = []
    for r in range(room.height):
        row = []
        for c in range(room.width):
            i = r * room.width + c
            on = i in room.targets
            if i not in room.floor:
                row.append("#")
            elif i == player:
                row.append("S" if on else "P")
            elif i in boxes:
                row.append("√" if on else "X")
            else:
                row.append("O" if on else "_")
        rows.append("".join(row))
    return "\n".join(rows)


@dataclass(frozen=True)
class Episode:
    """The env's episode state (immutable: snapshots share it)."""

    room: Room
    table: Table
    state: State


class SokobanEnv(AgentEnv):
    """Text Sokoban (see the module docstring).

    Args:
        size: a preset of ``PRESETS`` ("HxW-boxes": ``"6x6-1"``, ``"6x6-2"``, ``"7x7-2"``, ``"7x7-3"``, ``"8x8-2"``,
            ``"8x8-4"``, ``"10x10-3"``, ``"10x10-4"``).
        num_levels: rooms in the generated set (tasks ``0..num_levels-1``); built once per process.
        level_seed: the set's seed (room ``i`` depends only on size, seed and ``i``).
        reward: ``"outcome"`` or ``"shaped"`` (gym-sokoban's).
        max_turns: moves before truncation.
        invalid_action_penalty: subtracted (component ``format``) for each invalid step.
        level_file: a Boxoban level file to play instead of generated rooms (the operator's, never a client's).
        cache_dir: a directory for an on-disk copy of generated sets (the operator's).
        max_states: the solver's state budget for a level-file room; a room past it raises ``ValueError`` at reset.
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "heuristic": HeuristicAgent, "random": RandomAgent}
    # the larger sizes take a solver minute or more per 100 rooms to build: a client gets them only where the
    # operator allows them (``allow={"size": [...]}``), as SearchQA's large datasets
    public_args = declare(AgentEnv.public_args, size=one_of(*CHEAP_SIZES), num_levels=integer(1, 200),
                          level_seed=integer(0, 2**31 - 1), reward=one_of(*REWARDS))  # fmt: skip

    def __init__(
        self,
        *,
        size: str = "6x6-1",
        num_levels: int = 100,
        level_seed: int = 0,
        reward: str = "outcome",
        max_turns: int = 100,
        invalid_action_penalty: float = 0.0,
        level_file: str | None = None,
        cache_dir: str | None = None,
        max_states: int = 300_000,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty)
        if size not in PRESETS:
            raise ValueError(f"size must be one of {list(PRESETS)}, got {size!r}")
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}")
        if num_levels < 1:
            raise ValueError(f"num_levels must be >= 1, got {num_levels}")
        self.size, self.reward, self.max_states = size, reward, max_states
        if level_file is not None:
            key = ("file", str(level_file))
            if key not in LEVEL_CACHE:
                rooms = read_levels(level_file)
                LEVEL_CACHE[key] = LevelSet(rooms, [None] * len(rooms))  # tables solved at first reset
            self.levels = LEVEL_CACHE[key]
            self._prefix = "file"
        else:
            height, width, boxes = PRESETS[size]
            self.levels = build_level_set(height, width, boxes, num_levels, level_seed, cache=LEVEL_CACHE,
                                          cache_dir=cache_dir)  # fmt: skip
            self._prefix = f"{size}/s{level_seed}"
        self.num_tasks = len(self.levels.rooms)
        self._ep: Episode | None = None

    def task_index_of(self, task_id: str) -> int:
        prefix, _, local = task_id.rpartition("/")
        if prefix != self._prefix or not local.isdigit() or int(local) >= self.num_tasks:
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '{self._prefix}/0'")
        return int(local)

    def _table(self, index: int) -> Table:
        table = self.levels.tables[index]
        if table is None:  # a level-file room: solved once, then kept with the set
            table = solve_table(self.levels.rooms[index], self.max_states)
            if table is None or table.optimum is None:
                why = "past the solver's state budget" if table is None else "unsolvable"
                raise ValueError(f"level {index} of the level file is {why}")
            self.levels.tables[index] = table
        return table

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        room, table = self.levels.rooms[task_index], self._table(task_index)
        self._ep = Episode(room, table, room.start)
        grid = render(room, room.start)
        gold = {"plan": [ACTIONS[a] for a in plan(room, table) or []], "optimal_moves": table.optimum,
                "room": grid, "category": self.size if self._prefix != "file" else "file"}  # fmt: skip
        obs = [{"role": "user", "content": f"{INTRO}\n\n{grid}"}]
        return obs, {"task_id": f"{self._prefix}/{task_index}", "gold": gold, **self._info(room.start, False)}

    def _info(self, state: State, deadlock: bool) -> dict[str, Any]:
        assert self._ep is not None
        room, table = self._ep.room, self._ep.table
        d = table.dist.get(state)
        optimum = table.optimum or 1
        return {"boxes_on_target": sum(b in room.targets for b in state[1]), "num_boxes": len(room.boxes),
                "distance_to_go": d, "progress": None if d is None else 1.0 - d / optimum,
                "deadlock": deadlock, "optimal_moves": table.optimum}  # fmt: skip

    def _parse(self, action: str) -> int | str:
        """The action index, or why the action is invalid."""
        try:
            text = parse_tag_action(action, ("answer",), truncated_at=self.truncated_at, require_visible=True).content
        except ParseError as e:
            m = _WORD.fullmatch(action[:40]) if len(action) <= 40 else None
            if m is None:
                return f"{e} The answer is one move: Up, Down, Left or Right."
            text = m.group(1)
        word = text.strip().strip(".!").capitalize()
        if word not in ACTIONS:
            return (
                f"{text.strip()[:40]!r} is not a move. Answer with one of Up, Down, Left or Right, "
                "e.g. <answer>Up</answer>."
            )
        return ACTIONS.index(word)

    def _step(self, action: str) -> StepResult:
        assert self._ep is not None
        ep = self._ep
        parsed = self._parse(action)
        if isinstance(parsed, str):
            msg = f"Invalid action: {parsed}\n\n{render(ep.room, ep.state)}"
            return StepResult([{"role": "user", "content": msg}], action_valid=False, parse_error=parsed,
                              info=self._info(ep.state, False))  # fmt: skip
        before = ep.state
        after = step_state(ep.room, before, parsed) or before
        self._ep = Episode(ep.room, ep.table, after)
        targets = ep.room.targets
        solved = targets.issuperset(after[1])
        deadlock = before in ep.table.dist and after not in ep.table.dist
        components: dict[str, float] = {}
        if self.reward == "shaped":
            on_before, on_after = sum(b in targets for b in before[1]), sum(b in targets for b in after[1])
            components = {"step": -0.1, "box": float(on_after - on_before), "outcome": 10.0 if solved else 0.0}
        else:
            components = {"outcome": 1.0 if solved else 0.0}
        note = "Solved!" if solved else "You cannot move there." if after == before else ""
        text = f"{note}\n\n{render(ep.room, after)}" if note else render(ep.room, after)
        return StepResult([{"role": "user", "content": text}], components, terminated=solved, success=solved,
                          info=self._info(after, deadlock))  # fmt: skip

    def _truncated_info(self) -> dict[str, Any]:
        return {}

    def anchor(self) -> str:
        """The task and the canonical state (player cell, sorted box cells): equal exactly when the rooms are."""
        assert self._ep is not None
        player, boxes = self._ep.state
        return f"{self._task_id}:{player}:{','.join(map(str, boxes))}"

    def _snapshot_state(self) -> Episode | None:
        return self._ep  # immutable

    def _restore_state(self, state: Episode | None) -> None:
        self._ep = state
