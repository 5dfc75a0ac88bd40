"""Optimal expert plans: A* over a compact, task-relevant abstraction of the engine state.

The abstract state keeps only what the goal depends on: the agent's place, what it holds, where each object of
the goal's type is and whether it has the goal's state bit (hot / cool / clean), which relevant receptacles are
open, and which desk lamps are on. Places are the receptacles that can matter: where the agent stands, those
holding goal objects, the appliance, the desk lamps, and one representative per open state of the remaining
destination receptacles (interchangeable, since every ``go to`` costs one step); plus, when the agent holds an
unrelated object, one place per open state where it can be put down. Actions that cannot shorten a plan are
pruned (closing, examining, taking unrelated objects, putting goal objects anywhere but a destination, heating
what is hot, turning lamps off). The heuristic is a per-object lower bound on the remaining actions, so A* returns
a shortest plan; ``tests/envs/test_household_planner.py`` checks every plan against exhaustive breadth-first search
over the full engine state on small worlds.

>>> from agentgym.envs.household.world import generate_task
>>> from agentgym.envs.household.engine import Engine
>>> eng = Engine(generate_task("train", 3))
>>> plan = expert_plan(eng)
>>> plan[:2], len(plan)
(['go to cabinet 10', 'open cabinet 10'], 7)
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from math import inf

from agentgym.envs.household.engine import (
    GOAL_BIT,
    HELD,
    LIGHT,
    ON,
    SIMPLE,
    TWO,
    Engine,
)
from agentgym.envs.household.world import CLEANABLE, COOLABLE, HEATABLE, TOGGLE

_ACT_VERB = {1: "heat", 2: "cool", 3: "clean"}  # by appliance kind
_ACT_FLAG = {1: HEATABLE, 2: COOLABLE, 3: CLEANABLE}
_TASK_KIND = {2: 3, 3: 1, 4: 2}  # task code (clean, heat, cool) -> appliance kind

State = tuple[int, ...]
Action = tuple[str, int, int]


class AbstractProblem:
    """The planning problem for an engine's current state (see the module docstring)."""

    def __init__(self, eng: Engine):
        self.eng = eng
        lay, where = eng.lay, eng.where
        n_rec = len(lay.names)
        self.tcode = t = eng._tcode
        self.targets = tuple(o for o in range(len(eng.onames)) if eng._target[o])
        self.k = k = len(self.targets)
        self.kind = kind = _TASK_KIND.get(t, 0)
        places: list[int] = []

        def add(r: int) -> None:
            if r not in places:
                places.append(r)

        if eng.loc >= 0:
            add(eng.loc)
        for o in self.targets:
            if where[o] != HELD:
                add(where[o])
        if kind:
            apps = [r for r in range(n_rec) if lay.appliance[r] == kind]
            rest = [r for r in apps if r not in places]
            if rest:
                add(rest[0])
        self.lamps: tuple[int, ...] = ()
        if t == LIGHT:
            self.lamps = tuple(o for o in range(len(eng.onames)) if eng.oflags[o] & TOGGLE and where[o] != HELD)
            for o in self.lamps:
                add(where[o])
        else:
            dests = [r for r in range(n_rec) if eng._dest[r] and r not in places]
            for closed in (0, 1):
                rep = next((r for r in dests if eng.closed[r] == closed), None)
                if rep is not None:
                    add(rep)
        held = eng.held
        self.other = held if held >= 0 and not eng._target[held] else -1
        if self.other >= 0:
            fits = eng._fits[self.other]
            spare = [r for r in range(n_rec) if fits[r] and r not in places]
            for closed in (0, 1):
                rep = next((r for r in spare if eng.closed[r] == closed), None)
                if rep is not None:
                    add(rep)
        self.places = tuple(places)
        self.m = m = len(places)
        self.is_dest = tuple(bool(eng._dest[r]) for r in places)
        self.is_app = tuple(bool(kind) and lay.appliance[r] == kind for r in places)
        self.fits_other = tuple(bool(eng._fits[self.other][r]) for r in places) if self.other >= 0 else (False,) * m
        self.lamps_at = tuple(sum(1 << j for j, o in enumerate(self.lamps) if where[o] == r) for r in places)
        bit = GOAL_BIT[t]
        place_of = {r: p for p, r in enumerate(places)}
        open_mask = sum(1 << p for p, r in enumerate(places) if not eng.closed[r])
        lamp_mask = sum(1 << j for j, o in enumerate(self.lamps) if eng.bits[o] & ON)
        pos = tuple(-1 if where[o] == HELD else place_of[where[o]] for o in self.targets)
        bits = tuple(int(bool(bit) and bool(eng.bits[o] & bit)) for o in self.targets)
        agent = place_of[eng.loc] if eng.loc >= 0 else m
        held_code = -1 if held < 0 else (self.targets.index(held) if eng._target[held] else k)
        self.start: State = (agent, held_code, open_mask, lamp_mask, *pos, *bits)
        self.bit_task = bool(bit)

    # -- the search space ------------------------------------------------------------------------------------
    def is_goal(self, s: State) -> bool:
        k, t = self.k, self.tcode
        if t == LIGHT:
            agent, held = s[0], s[1]
            return 0 <= held < k and agent < self.m and bool(self.lamps_at[agent] & s[3])
        pos, bits, is_dest = s[4 : 4 + k], s[4 + k :], self.is_dest
        if t == TWO:
            seen: set[int] = set()
            for p in pos:
                if p >= 0 and is_dest[p]:
                    if p in seen:
                        return True
                    seen.add(p)
            return False
        if t == SIMPLE:
            return any(p >= 0 and is_dest[p] for p in pos)
        return any(p >= 0 and is_dest[p] and b for p, b in zip(pos, bits, strict=True))

    def successors(self, s: State) -> Iterator[tuple[Action, State]]:
        agent, held, om, lm = s[0], s[1], s[2], s[3]
        k, m = self.k, self.m
        tail = s[1:]
        for p in range(m):
            if p != agent:
                yield ("go", p, 0), (p, *tail)
        if agent == m:
            return
        p = agent
        if not (om >> p) & 1:
            yield ("open", p, 0), (agent, held, om | (1 << p), lm, *s[4:])
        elif held == -1:
            for i in range(k):
                if s[4 + i] == p:
                    t = list(s)
                    t[1], t[4 + i] = i, -1
                    yield ("take", p, i), tuple(t)
        elif held == k:
            if self.fits_other[p]:
                yield ("put", p, k), (agent, -1, om, lm, *s[4:])
        elif self.tcode != LIGHT and self.is_dest[p] and (not self.bit_task or s[4 + k + held]):
            t = list(s)
            t[1], t[4 + held] = -1, p
            yield ("put", p, held), tuple(t)
        if self.is_app[p] and 0 <= held < k and not s[4 + k + held]:
            t = list(s)
            t[4 + k + held] = 1
            yield ("act", p, held), tuple(t)
        if self.tcode == LIGHT:
            off = self.lamps_at[p] & ~lm
            for j in range(len(self.lamps)):
                if off >> j & 1:
                    yield ("use", p, j), (agent, held, om, lm | (1 << j), *s[4:])

    def heuristic(self, s: State) -> int:
        """A lower bound on the actions left (0 at a goal)."""
        if self.is_goal(s):
            return 0
        agent, held, om, lm = s[0], s[1], s[2], s[3]
        k, m = self.k, self.m
        if self.tcode == TWO:
            pos = s[4 : 4 + k]
            counts = [0] * m
            for p in pos:
                if p >= 0 and self.is_dest[p]:
                    counts[p] += 1
            need = 2 - max(counts, default=0)
            takes = max(0, need - (1 if 0 <= held < k else 0))
            return need + takes + (1 if held == k else 0)
        best = inf
        extra = 1 if held >= 0 else 0
        here_app = agent < m and self.is_app[agent]
        here_dest = agent < m and self.is_dest[agent]
        for i in range(k):
            q = s[4 + i]
            if self.tcode == LIGHT:
                if q == -1:
                    if agent < m and self.lamps_at[agent]:
                        c = 0 if self.lamps_at[agent] & lm else 1
                    else:
                        c = 1 if lm else 2
                else:
                    c = extra + (agent != q) + (not (om >> q) & 1) + 1
                    if not self.lamps_at[q] & lm:
                        c += 1 if self.lamps_at[q] or lm else 2
            else:
                need_act = self.bit_task and not s[4 + k + i]
                if q == -1:
                    c = (0 if here_app else 1) + 3 if need_act else (0 if here_dest else 1) + 1
                else:
                    c = extra + (agent != q) + (not (om >> q) & 1) + 1
                    c += ((0 if self.is_app[q] else 1) + 3) if need_act else 2
            best = min(best, c)
        return int(best)

    # -- search ----------------------------------------------------------------------------------------------
    def solve(self, *, use_heuristic: bool = True, max_expansions: int = 1_000_000) -> list[Action] | None:
        """A shortest action sequence to a goal state (None if there is none)."""
        h = self.heuristic if use_heuristic else (lambda s: 0)
        start = self.start
        g: dict[State, int] = {start: 0}
        parent: dict[State, tuple[State, Action] | None] = {start: None}
        heap = [(h(start), 0, 0, start)]
        counter = expansions = 0
        while heap:
            _, neg_g, _, s = heapq.heappop(heap)
            gs = g[s]
            if -neg_g > gs:
                continue
            if self.is_goal(s):
                actions: list[Action] = []
                node = parent[s]
                while node is not None:
                    prev, action = node
                    actions.append(action)
                    node = parent[prev]
                return actions[::-1]
            expansions += 1
            if expansions > max_expansions:
                break
            for action, t in self.successors(s):
                ng = gs + 1
                if ng < g.get(t, 1 << 30):
                    g[t] = ng
                    parent[t] = (s, action)
                    counter += 1
                    heapq.heappush(heap, (ng + h(t), -ng, counter, t))
        return None

    def command(self, action: Action) -> str:
        """The engine command of an abstract action."""
        eng = self.eng
        kind, p, i = action
        r = self.places[p]
        rname = eng.rnames[r]
        if kind == "go":
            return eng.lay.go_cmds[r]
        if kind == "open":
            return "open " + rname
        if kind == "use":
            return "use " + eng.onames[self.lamps[i]]
        obj = self.other if i == self.k else self.targets[i]
        if kind == "take":
            return f"take {eng.onames[obj]} from {rname}"
        if kind == "put":
            return eng.put_command(obj, r)
        return f"{_ACT_VERB[self.kind]} {eng.onames[obj]} with {rname}"


class PlanKeyer:
    """Keys an engine's states by what its optimal plan depends on: a memo key for repeated planning.

    The key drops the agent's location when it stands at a receptacle that no plan needs (not a destination,
    appliance, lamp holder or place of a goal object, and it holds no unrelated object to put down), every
    object but the goal objects and the lamps, and the open state of the receptacles no plan needs: states with
    one key have one optimal plan (``test_plan_keyer_groups_states_with_equal_plans``).
    """

    def __init__(self, eng: Engine):
        self.eng = eng
        lay = eng.lay
        self.targets = tuple(o for o in range(len(eng.onames)) if eng._target[o])
        self.lamps = tuple(o for o in range(len(eng.onames)) if eng.oflags[o] & TOGGLE) if eng._tcode == LIGHT else ()
        kind = _TASK_KIND.get(eng._tcode, 0)
        static = bytearray(len(lay.names))
        for r in range(len(lay.names)):
            static[r] = eng._dest[r] or (kind and lay.appliance[r] == kind)
        for o in self.lamps:
            static[eng.where[o]] = 1
        self.static = bytes(static)
        self.static_idx = tuple(r for r in range(len(static)) if static[r])

    def key(self) -> bytes:
        eng = self.eng
        loc, held, where, bits, closed = eng.loc, eng.held, eng.where, eng.bits, eng.closed
        other = held >= 0 and not eng._target[held]
        if not (loc < 0 or other or self.static[loc]) and all(where[t] != loc for t in self.targets):
            loc = -1
        head = bytes((loc & 255, held & 255)) + bytes(where[t] for t in self.targets)
        head += bytes(bits[t] for t in self.targets) + bytes(bits[o] for o in self.lamps)
        if other:  # where the unrelated object can go depends on every receptacle
            return head + closed
        return head + bytes(closed[r] for r in self.static_idx) + bytes(closed[where[t]] if where[t] != HELD else 2
                                                                       for t in self.targets)  # fmt: skip


def expert_plan(eng: Engine, *, use_heuristic: bool = True) -> list[str]:
    """An optimal (shortest) list of commands from the engine's current state to the goal ([] when won)."""
    if eng.won:
        return []
    problem = AbstractProblem(eng)
    actions = problem.solve(use_heuristic=use_heuristic)
    if actions is None:
        raise RuntimeError(f"no plan found for {eng.task.task_id} (the generator only makes solvable tasks)")
    return [problem.command(a) for a in actions]


def exhaustive_plan_length(eng: Engine, *, max_states: int = 2_000_000) -> int | None:
    """Reference: breadth-first search over the *full* engine state with every admissible command.

    Exponential; for tests on small worlds. Restores the engine's state before returning.
    """
    if eng.won:
        return 0
    start = eng.snapshot()
    seen = {eng.state_key()}
    frontier: deque[tuple[tuple, int]] = deque([(start, 0)])
    try:
        while frontier:
            snap, depth = frontier.popleft()
            eng.restore(snap)
            for cmd in list(eng.admissible()):
                eng.restore(snap)
                _, valid = eng.step(cmd)
                assert valid, cmd
                if eng.won:
                    return depth + 1
                key = eng.state_key()
                if key not in seen:
                    seen.add(key)
                    if len(seen) > max_states:
                        raise RuntimeError(f"more than {max_states} states; use a smaller world")
                    frontier.append((eng.snapshot(), depth + 1))
        return None
    finally:
        eng.restore(start)
