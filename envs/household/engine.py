"""The Household game engine: compact integer state, ALFWorld's command grammar and feedback strings.

State is a handful of ints and byte arrays (agent location, held object, each object's receptacle and state bits,
each receptacle's closed flag) plus per-receptacle content lists; every static string comes precomputed from the
shared ``Layout``. Admissible commands are cached per location and invalidated only by the actions that change
them (take/put clear the cache, open/close drop one entry), so a step costs a few microseconds.

Grammar (case and spacing are normalised): ``look``, ``inventory``, ``help``, ``go to R``, ``open R``,
``close R``, ``take O from R``, ``put O in/on R`` (also ``put O in R``, ``put O on R``, ``put O into R``),
``move O to R``, ``examine R|O``, ``use O``, ``heat O with R``, ``cool O with R``, ``clean O with R``,
``slice O with K``. Anything else, or a command whose preconditions fail, gives ``Nothing happens.``

>>> from agentgym.envs.household.world import generate_task
>>> eng = Engine(generate_task("train", 0))
>>> eng.step("go to shelf 2")[0]
'You arrive at shelf 2. On the shelf 2, you see a remotecontrol 1, a remotecontrol 2, and a remotecontrol 3.'
>>> eng.step("take remotecontrol 1 from shelf 2")
('You pick up the remotecontrol 1 from the shelf 2.', True)
>>> eng.step("fly to the moon")
('Nothing happens.', False)
"""

from __future__ import annotations

import random
from collections.abc import Callable

from agentgym.envs.household import catalog as C
from agentgym.envs.household.world import (
    CLEANABLE,
    COOLABLE,
    FRIDGE,
    HEATABLE,
    MICROWAVE,
    PICKUP,
    SINK,
    SLICEABLE,
    SLICER,
    TOGGLE,
    Task,
    _listing,
)

HELD = 255
#: Parsed commands are memoised per engine for commands up to this long, at most this many.
_CACHE_CHARS = 128
_CACHE_SIZE = 4096
HOT, COOL, CLEAN, SLICED, ON = 1, 2, 4, 8, 16
NOTHING = "Nothing happens."
PUT_STYLES = ("put", "move")
_TASK_CODE = {t: i for i, t in enumerate(C.TASK_TYPES)}
SIMPLE, LIGHT, CLEAN_T, HEAT_T, COOL_T, TWO = range(6)
#: The state bit each task's goal needs on its object (0: none).
GOAL_BIT = (0, 0, CLEAN, HOT, COOL, 0)

#: Zobrist hashing bounds (``GenConfig`` keeps tasks well inside them).
MAX_OBJECTS, MAX_RECEPTACLES = 128, 64


def _zobrist_tables() -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...], tuple[int, ...],
                               tuple[int, ...], tuple[int, ...]]:  # fmt: skip
    """Fixed random 64-bit keys (the same in every process) for object places and states, closed receptacles,
    the agent's location and the held object; a state's hash is the XOR of the keys of its facts."""
    rng = random.Random(0x5EEDA11F)
    r64 = lambda: rng.getrandbits(64)
    where = tuple(tuple(r64() for _ in range(MAX_RECEPTACLES + 1)) for _ in range(MAX_OBJECTS))
    state = tuple(tuple(r64() for _ in range(32)) for _ in range(MAX_OBJECTS))
    closed = tuple(r64() for _ in range(MAX_RECEPTACLES))
    loc = tuple(r64() for _ in range(MAX_RECEPTACLES + 1))
    held = tuple(r64() for _ in range(MAX_OBJECTS + 1))
    return where, state, closed, loc, held


_ZW, _ZB, _ZC, _ZL, _ZH = _zobrist_tables()
_ZHELD = MAX_RECEPTACLES  # the column of _ZW for "in the agent's hands"

HELP = (
    "\nAvailable commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "{put}"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)
_HELP_PUT = {
    "put": "  put (object) in/on (receptacle):  put an object in or on a receptacle\n",
    "move": "  move (object) to (receptacle):    place an object in or on a receptacle\n",
}


def _describe_object(name: str, bits: int, toggleable: bool) -> str:
    """ALFWorld's ``examine`` text for an object in state ``bits``."""
    clean, hot, cool, sliced = bits & CLEAN, bits & HOT, bits & COOL, bits & SLICED
    if sliced:
        if clean and hot:
            return f"This is a hot and clean sliced {name}."
        if clean and cool:
            return f"This is a cool and clean sliced {name}."
        if clean:
            return f"This is a clean sliced {name}."
        if hot:
            return f"This is a hot sliced {name}."
        if cool:
            return f"This is a cool sliced {name}."
    if clean and hot:
        return f"This is a hot and clean {name}."
    if clean and cool:
        return f"This is a cool and clean {name}."
    if hot:
        return f"This is a hot {name}."
    if clean:
        return f"This is a clean {name}."
    if cool:
        return f"This is a cold {name}."
    if toggleable:
        return f"This {name} is on." if bits & ON else f"This {name} is off."
    if sliced:
        return f"This is a sliced {name}."
    return f"There's nothing special about {name}."


class Engine:
    """One playable instance of a ``Task``; ``load`` another task to reuse the object.

    Args:
        task: the task to play.
        put_style: ``"put"`` lists and answers ``put O in/on R`` (ALFWorld 0.4); ``"move"`` uses
            ``move O to R`` (0.5). Both forms are always accepted.
    """

    __slots__ = (
        "_a_names",
        "_adm",
        "_adm_text",
        "_desc",
        "_dest",
        "_fits",
        "_goal_bit",
        "_hash",
        "_kind",
        "_parsed",
        "_rindex",
        "_target",
        "_tcode",
        "bits",
        "closed",
        "contents",
        "held",
        "lay",
        "loc",
        "oflags",
        "onames",
        "put_style",
        "rnames",
        "task",
        "where",
        "won",
    )

    def __init__(self, task: Task, put_style: str = "put"):
        if put_style not in PUT_STYLES:
            raise ValueError(f"put_style must be one of {PUT_STYLES}, got {put_style!r}")
        self.put_style = put_style
        self.load(task)

    # -- setup -----------------------------------------------------------------------------------------------
    def load(self, task: Task) -> None:
        """Switch to ``task`` and reset to its start state."""
        if len(task.obj_names) > MAX_OBJECTS or len(task.layout.names) > MAX_RECEPTACLES:
            raise ValueError(f"at most {MAX_OBJECTS} objects and {MAX_RECEPTACLES} receptacles per task")
        self.task = task
        lay = self.lay = task.layout
        self.rnames = lay.names
        self._rindex = lay.index
        self._kind = lay.appliance
        self.onames = task.obj_names
        self.oflags = task.obj_flags
        self._a_names = tuple("a " + n for n in task.obj_names)
        self._fits = tuple(lay.fit_mask[t] for t in task.obj_types)
        self._tcode = _TASK_CODE[task.task_type]
        self._goal_bit = GOAL_BIT[self._tcode]
        self._parsed: dict[str, tuple] = {}
        self._target = bytes(int(t == task.target) for t in task.obj_types)
        self._dest = bytes(int(t == task.dest) for t in lay.types)
        self.reset()

    def reset(self) -> None:
        """Back to the task's start state (agent in the middle of the room, hands empty)."""
        task = self.task
        self.loc = -1
        self.held = -1
        self.won = False
        self.where = bytearray(task.obj_start)
        self.bits = bytearray(len(task.obj_start))
        self.closed = bytearray(task.start_closed)
        contents: list[list[int]] = [[] for _ in self.rnames]
        for o, r in enumerate(task.obj_start):
            contents[r].append(o)
        self.contents = contents
        self._hash = self.recompute_hash()
        self._desc: list[str | None] = [None] * len(self.rnames)
        self._adm: dict[int, list[str]] = {}
        self._adm_text: dict[int, str] = {}

    # -- observations ---------------------------------------------------------------------------------------
    def describe_receptacle(self, r: int) -> str:
        """``examine R`` text: closed, or open with its contents, or what is on it."""
        name = self.rnames[r]
        if self.lay.openable[r]:
            if self.closed[r]:
                return f"The {name} is closed."
            return f"The {name} is open. In it, you see {self._listing(r)}."
        return f"On the {name}, you see {self._listing(r)}."

    def _listing(self, r: int) -> str:
        text = self._desc[r]
        if text is None:
            a = self._a_names
            text = self._desc[r] = _listing([a[o] for o in self.contents[r]])
        return text

    def look(self) -> str:
        if self.loc < 0:
            return self.lay.look_middle
        return f"You are facing the {self.rnames[self.loc]}. Next to it, you see nothing."

    def inventory(self) -> str:
        if self.held < 0:
            return "You are not carrying anything."
        return f"You are carrying: {self._a_names[self.held]}."

    def put_command(self, o: int, r: int) -> str:
        if self.put_style == "put":
            return f"put {self.onames[o]} in/on {self.rnames[r]}"
        return f"move {self.onames[o]} to {self.rnames[r]}"

    def admissible(self) -> list[str]:
        """The sorted valid commands in the current state (a cached list: copy it before mutating)."""
        loc = self.loc
        cmds = self._adm.get(loc)
        if cmds is None:
            cmds = self._adm[loc] = self._build_admissible(loc)
        return cmds

    def admissible_text(self, render: Callable[[list[str]], str]) -> str:
        """``render(self.admissible())``, cached with the admissible list (same invalidation)."""
        loc = self.loc
        text = self._adm_text.get(loc)
        if text is None:
            text = self._adm_text[loc] = render(self.admissible())
        return text

    def _build_admissible(self, loc: int) -> list[str]:
        cmds = [*self.lay.go_blocks[loc + 1], "help", "inventory", "look"]
        held = self.held
        onames, oflags = self.onames, self.oflags
        if loc >= 0:
            name = self.rnames[loc]
            cmds.append("examine " + name)
            closed = self.closed[loc]
            if self.lay.openable[loc]:
                cmds.append(("open " if closed else "close ") + name)
            if not closed:
                slicer = held >= 0 and oflags[held] & SLICER
                for o in self.contents[loc]:
                    on, f = onames[o], oflags[o]
                    cmds.append("examine " + on)
                    if held < 0 and f & PICKUP:
                        cmds.append(f"take {on} from {name}")
                    if f & TOGGLE:
                        cmds.append("use " + on)
                    if slicer and f & SLICEABLE:
                        cmds.append(f"slice {on} with {onames[held]}")
            if held >= 0:
                hn, hf = onames[held], oflags[held]
                if not closed and self._fits[held][loc]:
                    cmds.append(self.put_command(held, loc))
                kind = self._kind[loc]
                if kind == MICROWAVE and hf & HEATABLE:
                    cmds.append(f"heat {hn} with {name}")
                elif kind == FRIDGE and hf & COOLABLE:
                    cmds.append(f"cool {hn} with {name}")
                elif kind == SINK and hf & CLEANABLE:
                    cmds.append(f"clean {hn} with {name}")
        if held >= 0:
            cmds.append("examine " + onames[held])
        cmds.sort()
        return cmds

    # -- state keys ------------------------------------------------------------------------------------------
    def state_key(self) -> bytes:
        """Everything that defines the state (content order aside), as bytes."""
        return bytes((self.loc & 255, self.held & 255)) + self.where + self.bits + self.closed

    def anchor(self) -> str:
        """Canonical state key: the task id and a 64-bit Zobrist hash of the state, kept up to date by every
        action (identical states have identical anchors, whatever the path to them)."""
        return f"{self.task.task_id}#{self._hash:016x}"

    def recompute_hash(self) -> int:
        """The state's Zobrist hash from scratch (``anchor`` maintains it incrementally)."""
        h = _ZL[self.loc + 1] ^ _ZH[self.held + 1]
        for o, (r, b) in enumerate(zip(self.where, self.bits, strict=True)):
            h ^= _ZW[o][_ZHELD if r == HELD else r] ^ _ZB[o][b]
        for r, closed in enumerate(self.closed):
            if closed:
                h ^= _ZC[r]
        return h

    def _set_bits(self, o: int, bits: int) -> None:
        self._hash ^= _ZB[o][self.bits[o]] ^ _ZB[o][bits]
        self.bits[o] = bits

    def snapshot(self) -> tuple:
        return (self.loc, self.held, bytes(self.where), bytes(self.bits), bytes(self.closed), self.won,
                tuple(tuple(c) for c in self.contents))  # fmt: skip

    def restore(self, snap: tuple) -> None:
        loc, held, where, bits, closed, won, contents = snap
        self.loc, self.held, self.won = loc, held, won
        self.where, self.bits, self.closed = bytearray(where), bytearray(bits), bytearray(closed)
        self.contents = [list(c) for c in contents]
        self._hash = self.recompute_hash()
        self._desc = [None] * len(self.rnames)
        self._adm = {}
        self._adm_text = {}

    # -- commands --------------------------------------------------------------------------------------------
    def step(self, command: str) -> tuple[str, bool]:
        """Apply one command; returns ``(feedback, valid)``. Never raises on any text."""
        parsed = self._parsed.get(command)
        if parsed is None:
            parsed = self.parse(command)
            if len(command) <= _CACHE_CHARS:
                if len(self._parsed) >= _CACHE_SIZE:
                    self._parsed.clear()
                self._parsed[command] = parsed
        fn, a, b = parsed
        return fn(self, a, b)

    def parse(self, command: str) -> tuple[Callable[[Engine, int, int], tuple[str, bool]], int, int]:
        """``(handler, arg, arg)`` for a command (names resolved to indices; -1 when unknown)."""
        words = command.lower().split()
        n = len(words)
        if n == 0:
            return _nothing, 0, 0
        verb = words[0]
        if n == 1:
            if verb == "look":
                return Engine._look, 0, 0
            if verb in ("inventory", "i"):
                return Engine._inventory, 0, 0
            if verb == "help":
                return Engine._help, 0, 0
            return _nothing, 0, 0
        objects, recs = self.task.obj_index, self._rindex
        if verb == "go":
            return (Engine._go, recs.get(" ".join(words[2:]), -1), 0) if words[1] == "to" else (_nothing, 0, 0)
        rest = " ".join(words[1:])
        if verb == "take":
            o, _, r = rest.partition(" from ")
            return Engine._take, objects.get(o, -1), recs.get(r, -1)
        if verb == "put":
            for sep in (" in/on ", " into ", " in ", " on "):
                o, found, r = rest.partition(sep)
                if found:
                    return Engine._put, objects.get(o, -1), recs.get(r, -1)
            return _nothing, 0, 0
        if verb == "move":
            o, _, r = rest.partition(" to ")
            return Engine._put, objects.get(o, -1), recs.get(r, -1)
        if verb == "open" or verb == "close":
            return Engine._open_close, recs.get(rest, -1), int(verb == "open")
        if verb == "examine":
            r = recs.get(rest, -1)
            return (Engine._examine_receptacle, r, 0) if r >= 0 else (Engine._examine_object, objects.get(rest, -1), 0)
        if verb == "use":
            return Engine._use, objects.get(rest, -1), 0
        if verb in _APPLY:
            o, _, r = rest.partition(" with ")
            if verb == "slice":
                return Engine._slice, objects.get(o, -1), objects.get(r, -1)
            return _APPLY[verb], objects.get(o, -1), recs.get(r, -1)
        return _nothing, 0, 0

    def _look(self, _a: int = 0, _b: int = 0) -> tuple[str, bool]:
        return self.look(), True

    def _inventory(self, _a: int = 0, _b: int = 0) -> tuple[str, bool]:
        return self.inventory(), True

    def _help(self, _a: int = 0, _b: int = 0) -> tuple[str, bool]:
        return HELP.format(put=_HELP_PUT[self.put_style]), True

    def _go(self, r: int, _b: int = 0) -> tuple[str, bool]:
        if r < 0 or r == self.loc:
            return NOTHING, False
        self._hash ^= _ZL[self.loc + 1] ^ _ZL[r + 1]
        self.loc = r
        if self._tcode == LIGHT:
            self._check_light()
        return f"You arrive at {self.rnames[r]}. {self.describe_receptacle(r)}", True

    def _open_close(self, r: int, opening: int) -> tuple[str, bool]:
        if r < 0 or r != self.loc or not self.lay.openable[r] or bool(self.closed[r]) != opening:
            return NOTHING, False
        self.closed[r] = 0 if opening else 1
        self._hash ^= _ZC[r]
        self._adm.pop(r, None)
        self._adm_text.pop(r, None)
        name = self.rnames[r]
        if opening:
            return f"You open the {name}. {self.describe_receptacle(r)}", True
        return f"You close the {name}.", True

    def _take(self, o: int, r: int) -> tuple[str, bool]:
        if o < 0 or r < 0 or r != self.loc or self.held >= 0 or self.where[o] != r or self.closed[r]:
            return NOTHING, False
        if not self.oflags[o] & PICKUP:
            return NOTHING, False
        self.contents[r].remove(o)
        self.where[o] = HELD
        self.held = o
        self._hash ^= _ZW[o][r] ^ _ZW[o][_ZHELD] ^ _ZH[0] ^ _ZH[o + 1]
        self._desc[r] = None
        self._adm.clear()
        self._adm_text.clear()
        if self._tcode == LIGHT:
            self._check_light()
        return f"You pick up the {self.onames[o]} from the {self.rnames[r]}.", True

    def _put(self, o: int, r: int) -> tuple[str, bool]:
        if o < 0 or r < 0 or o != self.held or r != self.loc or self.closed[r] or not self._fits[o][r]:
            return NOTHING, False
        self.contents[r].append(o)
        self.where[o] = r
        self.held = -1
        self._hash ^= _ZW[o][_ZHELD] ^ _ZW[o][r] ^ _ZH[o + 1] ^ _ZH[0]
        self._desc[r] = None
        self._adm.clear()
        self._adm_text.clear()
        self._check_put(o, r)
        if self.put_style == "put":
            return f"You put the {self.onames[o]} in/on the {self.rnames[r]}.", True
        return f"You move the {self.onames[o]} to the {self.rnames[r]}.", True

    def _examine_receptacle(self, r: int, _b: int = 0) -> tuple[str, bool]:
        if r < 0 or r != self.loc:
            return NOTHING, False
        return self.describe_receptacle(r), True

    def _examine_object(self, o: int, _b: int = 0) -> tuple[str, bool]:
        if o < 0 or not self._reachable(o):
            return NOTHING, False
        return _describe_object(self.onames[o], self.bits[o], bool(self.oflags[o] & TOGGLE)), True

    def _reachable(self, o: int) -> bool:
        """Held, or in the (open) receptacle the agent stands at."""
        if self.held == o:
            return True
        r = self.where[o]
        return r == self.loc and r != HELD and not self.closed[r]

    def _use(self, o: int, _b: int = 0) -> tuple[str, bool]:
        if o < 0 or not self.oflags[o] & TOGGLE or not self._reachable(o):
            return NOTHING, False
        self._set_bits(o, self.bits[o] ^ ON)
        name = self.onames[o]
        if self.bits[o] & ON:
            if self._tcode == LIGHT:
                self._check_light()
            return f"You turn on the {name}.", True
        return f"You turn off the {name}.", True

    def _heat(self, o: int, r: int) -> tuple[str, bool]:
        return self._apply("heat", o, r)

    def _cool(self, o: int, r: int) -> tuple[str, bool]:
        return self._apply("cool", o, r)

    def _clean(self, o: int, r: int) -> tuple[str, bool]:
        return self._apply("clean", o, r)

    def _apply(self, verb: str, o: int, r: int) -> tuple[str, bool]:
        if o < 0 or r < 0 or o != self.held or r != self.loc:
            return NOTHING, False
        kind, f = self._kind[r], self.oflags[o]
        if verb == "heat" and kind == MICROWAVE and f & HEATABLE:
            self._set_bits(o, (self.bits[o] | HOT) & ~COOL)
        elif verb == "cool" and kind == FRIDGE and f & COOLABLE:
            self._set_bits(o, (self.bits[o] | COOL) & ~HOT)
        elif verb == "clean" and kind == SINK and f & CLEANABLE:
            self._set_bits(o, self.bits[o] | CLEAN)
        else:
            return NOTHING, False
        return f"You {verb} the {self.onames[o]} using the {self.rnames[r]}.", True

    def _slice(self, o: int, knife: int) -> tuple[str, bool]:
        if o < 0 or knife < 0 or knife != self.held or not self.oflags[knife] & SLICER:
            return NOTHING, False
        if not self.oflags[o] & SLICEABLE or not self._reachable(o) or o == knife:
            return NOTHING, False
        self._set_bits(o, self.bits[o] | SLICED)
        return f"You sliced the {self.onames[o]} with the {self.onames[knife]}.", True

    # -- goal --------------------------------------------------------------------------------------------------
    def _check_put(self, o: int, r: int) -> None:
        if not self._target[o] or not self._dest[r] or self._tcode == LIGHT:
            return
        if self._tcode == TWO:
            target = self._target
            self.won = sum(target[x] for x in self.contents[r]) >= 2
        else:
            bit = self._goal_bit
            self.won = not bit or bool(self.bits[o] & bit)

    def _check_light(self) -> None:
        held, loc = self.held, self.loc
        if held < 0 or loc < 0 or not self._target[held]:
            return
        bits, oflags = self.bits, self.oflags
        self.won = any(oflags[x] & TOGGLE and bits[x] & ON for x in self.contents[loc])

    def goal_satisfied(self) -> bool:
        """Evaluate the goal from scratch (tests compare it with the incremental ``won``)."""
        t, target = self._tcode, self._target
        if t == LIGHT:
            held, loc = self.held, self.loc
            return (held >= 0 and loc >= 0 and bool(target[held])
                    and any(self.oflags[x] & TOGGLE and self.bits[x] & ON for x in self.contents[loc]))  # fmt: skip
        for r, items in enumerate(self.contents):
            if not self._dest[r]:
                continue
            hits = [x for x in items if target[x] and (not self._goal_bit or self.bits[x] & self._goal_bit)]
            if len(hits) >= (2 if t == TWO else 1):
                return True
        return False


def _nothing(_eng: Engine, _a: int = 0, _b: int = 0) -> tuple[str, bool]:
    return NOTHING, False


_APPLY: dict[str, Callable[[Engine, int, int], tuple[str, bool]]] = {
    "heat": Engine._heat,
    "cool": Engine._cool,
    "clean": Engine._clean,
    "slice": Engine._slice,
}
