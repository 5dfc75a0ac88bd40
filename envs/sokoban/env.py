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

Speed: an env keeps the states it has shown (``RoomGraph``: grid, observation, signals and each move's successor, made
once), and ``step`` reads a well-formed answer (``FAST_ACTIONS``, or one ending an ASCII turn) without the parser,
returning what ``AgentEnv.step`` returns; a move it has seen before costs about a microsecond.

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
#: An env keeps the states it has shown (``RoomGraph``: about 600 bytes each) until they number this many at a reset;
#: then it starts again from none.
MAX_NODES = 10_000
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


#: The well-formed answers (each action word in three cases, in tags or bare) and their action indices: what
#: ``SokobanEnv._parse`` makes of them, looked up without parsing (a test compares the two on every key).
FAST_ACTIONS: dict[str, int] = {
    form: a
    for a, word in enumerate(ACTIONS)
    for case in (word, word.lower(), word.upper())
    for form in (f"<answer>{case}</answer>", case)
}

#: The longest of them.
FAST_LEN = max(map(len, FAST_ACTIONS))
#: An answer tag as the parser finds it (``parse_tag_action``'s pattern for the tag ``answer``).
_ANSWER_TAG = re.compile(r"<(/?)(answer)>", re.IGNORECASE)


@dataclass(frozen=True)
class Episode:
    """The env's episode state as an immutable value (what snapshots hold)."""

    room: Room
    table: Table
    state: State


@dataclass(slots=True, eq=False)
class Node:
    """One state of a room with what a step shows of it, and the state each move leads to once a step has taken it
    (``next[a]``; the node itself for a blocked move). Never changed once made but for ``next`` and ``stuck``."""

    state: State
    grid: str  # RAGEN's text grid
    text: str  # the observation of a move that arrives here
    dist: int | None  # the exact moves-to-go; None: unsolvable
    progress: float | None  # 1 - dist / optimum
    on: int  # boxes on targets
    solved: bool
    boxes_key: str  # the box cells, comma-separated
    anchor: str  # SokobanEnv.anchor() in this state
    next: list[Node | None]
    stuck: str = ""  # the observation of a blocked move from here, made on first use


def _paint(grid: str, width: int, cell: int, symbol: str) -> str:
    """``grid`` with ``cell`` (``row * width + column``) showing ``symbol``."""
    at = cell + cell // width  # each row before it ends in a newline
    return grid[:at] + symbol + grid[at + 1 :]


@dataclass(slots=True)
class RoomGraph:
    """The states of one room that an env has shown (each made once, its grid edited from a neighbour's) and the moves
    between them: a move the env has seen before is a list lookup."""

    room: Room
    table: Table
    task_id: str
    nodes: dict[State, Node]

    def node(self, state: State, near: Node | None = None) -> Node:
        """The node of ``state``, made on first use (from ``near``'s, where given: the state before one move)."""
        found = self.nodes.get(state)
        if found is not None:
            return found
        room, (player, boxes) = self.room, state
        targets, width = room.targets, room.width
        if near is None:
            grid, on = render(room, state), sum(b in targets for b in boxes)
            solved, boxes_key = targets.issuperset(boxes), ",".join(map(str, boxes))
        else:  # repaint the cells the player left and entered, and the cell a pushed box entered
            grid = _paint(near.grid, width, near.state[0], "O" if near.state[0] in targets else "_")
            grid = _paint(grid, width, player, "S" if player in targets else "P")
            if boxes == near.state[1]:
                on, solved, boxes_key = near.on, near.solved, near.boxes_key
            else:  # the box on the player's new cell went one cell further the same way
                dest = 2 * player - near.state[0]
                grid = _paint(grid, width, dest, "√" if dest in targets else "X")
                on = near.on + (dest in targets) - (player in targets)
                solved, boxes_key = on == len(boxes), ",".join(map(str, boxes))
        d, optimum = self.table.dist.get(state), self.table.optimum
        found = self.nodes[state] = Node(state, grid, "Solved!\n\n" + grid if solved else grid, d,
                                         None if d is None else 1.0 - d / (optimum or 1), on, solved, boxes_key,
                                         f"{self.task_id}:{player}:{boxes_key}", [None, None, None, None])  # fmt: skip
        return found

    def move(self, node: Node, a: int) -> Node:
        """The node that action ``a`` leads to from ``node`` (``step_state``; ``node`` itself when blocked)."""
        nxt = node.next[a]
        if nxt is None:
            after = step_state(self.room, node.state, a)
            nxt = node.next[a] = node if after is None else self.node(after, node)
        return nxt


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
        self._shaped = reward == "shaped"
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
        # the rooms played so far (task index -> graph), dropped at a reset once they hold MAX_NODES states
        self._graphs: dict[int, RoomGraph] = {}
        self._graph: RoomGraph | None = None
        self._node: Node | None = None
        # well-formed answers the fast path of ``step`` takes (a subclass that overrides what it inlines has none)
        inlined = ("anchor", "_truncated_info", "_step", "_move", "_info")
        plain = all(getattr(type(self), name) is getattr(SokobanEnv, name) for name in inlined)
        self._fast = {k: v for k, v in FAST_ACTIONS.items() if len(k) <= self.max_action_chars} if plain else {}

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

    def _room_graph(self, index: int, room: Room, table: Table) -> RoomGraph:
        graph = self._graphs.get(index)
        if graph is None or graph.room != room:
            graph = self._graphs[index] = RoomGraph(room, table, f"{self._prefix}/{index}", {})
        return graph

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        room, table = self.levels.rooms[task_index], self._table(task_index)
        if sum(len(g.nodes) for g in self._graphs.values()) >= MAX_NODES:
            self._graphs.clear()
        graph = self._graph = self._room_graph(task_index, room, table)
        node = self._node = graph.node(room.start)
        gold = {"plan": [ACTIONS[a] for a in plan(room, table) or []], "optimal_moves": table.optimum,
                "room": node.grid, "category": self.size if self._prefix != "file" else "file"}  # fmt: skip
        obs = [{"role": "user", "content": f"{INTRO}\n\n{node.grid}"}]
        return obs, {"task_id": graph.task_id, "gold": gold, **self._info(node, False)}

    def _info(self, node: Node, deadlock: bool) -> dict[str, Any]:
        """The env's own info keys in ``node``'s state."""
        assert self._graph is not None
        return {"boxes_on_target": node.on, "num_boxes": len(node.state[1]), "distance_to_go": node.dist,
                "progress": node.progress, "deadlock": deadlock,
                "optimal_moves": self._graph.table.optimum}  # fmt: skip

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

    def _move(self, a: int) -> tuple[str, dict[str, float], float, bool, dict[str, Any]]:
        """Play action ``a``: the observation's text, the reward components and their sum, whether the room is
        solved, and the env's info keys."""
        graph, node = self._graph, self._node
        assert graph is not None and node is not None
        nxt = self._node = graph.move(node, a)
        text = nxt.text if nxt is not node else node.stuck or self._stuck(node)
        solved = nxt.solved
        if self._shaped:
            box, outcome = float(nxt.on - node.on), 10.0 if solved else 0.0
            # the sum as AgentEnv.step adds the components up: 0 + step + box + outcome, in that order
            components, reward = {"step": -0.1, "box": box, "outcome": outcome}, -0.1 + box + outcome
        else:
            reward = 1.0 if solved else 0.0
            components = {"outcome": reward}
        # deadlock: this move left the states with a distance (a blocked move leaves the room as it was)
        return text, components, reward, solved, self._info(nxt, node.dist is not None and nxt.dist is None)

    @staticmethod
    def _stuck(node: Node) -> str:
        node.stuck = ("Solved!\n\n" if node.solved else "You cannot move there.\n\n") + node.grid
        return node.stuck

    def _step(self, action: str) -> StepResult:
        node = self._node
        assert node is not None
        a = None if self._action_cut else FAST_ACTIONS.get(action)
        if a is None:
            parsed = self._parse(action)
            if isinstance(parsed, str):
                msg = f"Invalid action: {parsed}\n\n{node.grid}"
                return StepResult([{"role": "user", "content": msg}], action_valid=False, parse_error=parsed,
                                  info=self._info(node, False))  # fmt: skip
            a = parsed
        text, components, _, solved, info = self._move(a)
        return StepResult([{"role": "user", "content": text}], components, terminated=solved, success=solved,
                          info=info)  # fmt: skip

    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        """``AgentEnv.step``, with a fast path for a well-formed answer (a key of ``FAST_ACTIONS``) that does what
        ``AgentEnv.step`` and ``_move`` do for it without parsing, without a ``StepResult`` and without a call per
        part: the same result (a test compares the two on every kind of turn)."""
        if type(action) is not str or self._done:
            return super().step(action)
        a = self._fast.get(action) if len(action) <= FAST_LEN else None
        if a is None and (a := self._answer_after_text(action)) is None:
            return super().step(action)
        node, graph = self._node, self._graph
        assert node is not None and graph is not None
        nxt = node.next[a] or graph.move(node, a)
        self._node = nxt
        self._turn = turn = self._turn + 1
        self._action_cut = False
        solved = nxt.solved
        text = nxt.text if nxt is not node else node.stuck or self._stuck(node)
        if self._shaped:
            box, outcome = float(nxt.on - node.on), 10.0 if solved else 0.0
            components, reward = {"step": -0.1, "box": box, "outcome": outcome}, -0.1 + box + outcome
        else:
            reward = 1.0 if solved else 0.0
            components = {"outcome": reward}
        limit = not solved and turn >= self.max_turns
        done = self._done = solved or limit
        self._transcript.append({"role": "assistant", "content": action})
        self._transcript.append({"role": "user", "content": text})
        info = {"turn": turn, "task_id": self._task_id, "action_valid": True, "parse_error": None,
                "reward_components": components, "action_truncated": False, "anchor": nxt.anchor,
                "boxes_on_target": nxt.on, "num_boxes": len(nxt.state[1]), "distance_to_go": nxt.dist,
                "progress": nxt.progress, "deadlock": node.dist is not None and nxt.dist is None,
                "optimal_moves": graph.table.optimum}  # fmt: skip
        if done:
            info["success"] = solved
        return [{"role": "user", "content": text}], reward, solved, limit, info

    def _answer_after_text(self, action: str) -> int | None:
        """The move of an ASCII turn that ends (but for whitespace) in a well-formed tagged answer with no answer tag
        before it, e.g. ``<think>...</think><answer>Up</answer>``: what the parser reads in it (the leftmost complete
        pair is that answer); else None. ASCII: the text is what ``sanitize_action`` makes of it."""
        body = action.rstrip()
        if not body.endswith("</answer>") or len(action) > self.max_action_chars or not action.isascii():
            return None
        start = body.rfind("<answer>", 0, len(body) - 9)
        a = self._fast.get(body[start:]) if start >= 0 else None
        return None if a is None or _ANSWER_TAG.search(body, 0, start) else a

    def _truncated_info(self) -> dict[str, Any]:
        return {}

    def anchor(self) -> str:
        """The task and the canonical state (player cell, sorted box cells): equal exactly when the rooms are."""
        assert self._node is not None
        return self._node.anchor

    @property
    def _ep(self) -> Episode | None:
        """The episode state as an immutable value."""
        graph, node = self._graph, self._node
        return None if graph is None or node is None else Episode(graph.room, graph.table, node.state)

    def _snapshot_state(self) -> Episode | None:
        return self._ep

    def _restore_state(self, state: Episode | None) -> None:
        if state is None or self._task_index is None:
            self._graph = self._node = None
            return
        self._graph = self._room_graph(self._task_index, state.room, state.table)
        self._node = self._graph.node(state.state)
