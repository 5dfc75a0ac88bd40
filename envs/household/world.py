"""Seeded world generator: room layouts (shared, immutable) and tasks (a layout + object placement + goal).

A *layout* is a room of numbered receptacles (``cabinet 1..n``, ``countertop 1``, ``fridge 1``, ...) with every
string the engine needs precomputed once (``go to`` commands, the room overview). Layouts are pure functions of
``(layout_id, max_receptacles)`` and are memoised, so every env instance playing the same room shares one copy.
A *task* places objects (the goal's target type, distractors, desk lamps) in a layout, closes containers and
picks a goal of one of the six ALFWorld task types. ``generate_task(split, index, config)`` is a pure function.

Splits: ``train`` and ``valid_seen`` draw from the same 108 layouts and the same goal combinations
(``task_type``, object type, receptacle type), with disjoint seeds; ``valid_unseen`` uses 12 held-out layouts and
a held-out fifth of the goal combinations, none of which ``train`` ever generates.

>>> task = generate_task("train", 0)
>>> task.task_type, task.description
('pick_and_place_simple', 'put a remotecontrol in drawer.')
>>> task.layout.look_middle[:48]
'You are in the middle of a room. Looking quickly'
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache, cached_property
from types import MappingProxyType
from typing import Any

from agentgym.envs.household import catalog as C

SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
#: Tasks per split by default (ALFWorld's 3,553 / 140 / 134); any index is a valid task, these only bound draws.
SPLIT_SIZES: MappingProxyType[str, int] = MappingProxyType({"train": 3553, "valid_seen": 140, "valid_unseen": 134})
LAYOUTS_PER_ROOM = 30
#: Layouts whose number within their room is at least this are held out for ``valid_unseen``.
UNSEEN_FROM = 27

# Object property flags (``Task.obj_flags``).
PICKUP, HEATABLE, COOLABLE, CLEANABLE, SLICEABLE, TOGGLE, SLICER = (1 << i for i in range(7))
#: Appliance kinds (``Layout.appliance``).
MICROWAVE, FRIDGE, SINK = 1, 2, 3
APPLIANCE_KIND: MappingProxyType[str, int] = MappingProxyType(
    {"microwave": MICROWAVE, "fridge": FRIDGE, "sinkbasin": SINK}
)


@dataclass(frozen=True)
class GenConfig:
    """Difficulty knobs of the generator.

    Args:
        max_receptacles: cap on receptacles per room (0: natural sizes, about 10 to 45 as in ALFWorld).
        distractors: inclusive range of distractor objects (not of the goal's type) per task.
        closed_prob: probability that each openable receptacle (cabinet, drawer, fridge, ...) starts closed.
        target_instances: inclusive range of objects of the goal's type (``pick_two`` uses at least 2).
        task_types: the task types to generate (task ``i`` has type ``task_types[i % len(task_types)]``).
    """

    max_receptacles: int = 0
    distractors: tuple[int, int] = (8, 20)
    closed_prob: float = 1.0
    target_instances: tuple[int, int] = (1, 3)
    task_types: tuple[str, ...] = C.TASK_TYPES

    def __post_init__(self) -> None:
        object.__setattr__(self, "distractors", tuple(self.distractors))
        object.__setattr__(self, "target_instances", tuple(self.target_instances))
        object.__setattr__(self, "task_types", tuple(self.task_types))
        if self.max_receptacles and self.max_receptacles < 3:
            raise ValueError(f"max_receptacles must be 0 (no cap) or >= 3, got {self.max_receptacles}")
        lo, hi = self.distractors
        if not 0 <= lo <= hi <= 100:
            raise ValueError(f"distractors must be a range 0 <= lo <= hi <= 100, got {self.distractors}")
        lo, hi = self.target_instances
        if not 1 <= lo <= hi <= 10:
            raise ValueError(f"target_instances must be a range 1 <= lo <= hi <= 10, got {self.target_instances}")
        if not 0.0 <= self.closed_prob <= 1.0:
            raise ValueError(f"closed_prob must be in [0, 1], got {self.closed_prob}")
        unknown = [t for t in self.task_types if t not in C.TASK_TYPES]
        if unknown or not self.task_types:
            raise ValueError(f"task_types must be a non-empty subset of {C.TASK_TYPES}, got {self.task_types}")

    @cached_property
    def key(self) -> str:
        """A short stable digest of the knobs ('' for the defaults), part of task ids."""
        if self == GenConfig():
            return ""
        return hashlib.blake2b(repr(asdict(self)).encode(), digest_size=4).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """The knobs as a JSON-friendly dict (``GenConfig(**d)`` rebuilds them)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._fields.items()}

    @cached_property
    def _fields(self) -> dict[str, Any]:
        return asdict(self)


#: Named difficulty presets (override single knobs with the env's keyword arguments).
DIFFICULTIES: MappingProxyType[str, GenConfig] = MappingProxyType(
    {
        "easy": GenConfig(max_receptacles=8, distractors=(2, 6), closed_prob=0.5, target_instances=(1, 2)),
        "default": GenConfig(),
        "hard": GenConfig(distractors=(20, 35), closed_prob=1.0, target_instances=(1, 2)),
    }
)


def _seed(*parts: object) -> int:
    data = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def is_unseen_layout(layout_id: int) -> bool:
    return layout_id % LAYOUTS_PER_ROOM >= UNSEEN_FROM


@cache
def is_unseen_goal(task_type: str, target: str, dest: str | None) -> bool:
    """Goal combinations reserved for ``valid_unseen`` (a fixed fifth of them, by hash)."""
    return _seed("goal", task_type, target, dest) % 5 == 0


@cache
def split_layouts(split: str, room: str) -> tuple[int, ...]:
    """Layout ids of ``room`` that ``split`` draws from."""
    base = C.ROOMS.index(room) * LAYOUTS_PER_ROOM
    ids = range(base, base + LAYOUTS_PER_ROOM)
    unseen = split == "valid_unseen"
    return tuple(i for i in ids if is_unseen_layout(i) == unseen)


# -- layouts ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Layout:
    """A room: receptacles and the strings built from them once (shared by every task in the room)."""

    layout_id: int
    room: str
    names: tuple[str, ...]
    types: tuple[str, ...]
    openable: tuple[bool, ...]
    index: Mapping[str, int]
    go_cmds: tuple[str, ...]
    #: ``go_blocks[loc + 1]``: the sorted ``go to`` commands available at ``loc`` (-1: middle of the room).
    go_blocks: tuple[tuple[str, ...], ...]
    look_middle: str
    #: object type -> receptacle indices it fits in (``ACCEPTS``), and the same as a 0/1 byte mask.
    fit_list: Mapping[str, tuple[int, ...]]
    fit_mask: Mapping[str, bytes]
    by_type: Mapping[str, tuple[int, ...]]
    #: per receptacle: 1 microwave, 2 fridge, 3 sinkbasin (the appliances of heat / cool / clean), else 0.
    appliance: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.names)


def _listing(items: list[str]) -> str:
    """TextWorld's list rendering: 'a x', 'a x, and a y', 'a x, a y, and a z' ('nothing' when empty)."""
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


def get_layout(layout_id: int, max_receptacles: int = 0) -> Layout:
    """The (memoised, immutable) layout ``layout_id`` in ``[0, 120)``, capped at ``max_receptacles``.

    One process-wide copy per ``(layout_id, max_receptacles)``: a memo of a pure function (at most 120 x the
    caps in use), which is what lets thousands of env instances share their rooms.
    """
    return _build_layout(int(layout_id), int(max_receptacles))


@cache
def _build_layout(layout_id: int, max_receptacles: int) -> Layout:
    if not 0 <= layout_id < LAYOUTS_PER_ROOM * len(C.ROOMS):
        raise ValueError(f"layout_id must be in [0, {LAYOUTS_PER_ROOM * len(C.ROOMS)}), got {layout_id}")
    room = C.ROOMS[layout_id // LAYOUTS_PER_ROOM]
    rng = random.Random(_seed("layout", layout_id))
    counts = [(rtype, rng.randint(lo, hi)) for rtype, lo, hi in C.ROOM_RECEPTACLES[room]]
    # Priority order: one of every type present first, then the extra instances; the cap cuts from the end.
    order = [(t, 1) for t, n in counts if n >= 1] + [(t, k) for t, n in counts for k in range(2, n + 1)]
    if max_receptacles:
        order = order[:max_receptacles]
    recs = sorted(order)
    names = tuple(f"{t} {k}" for t, k in recs)
    types = tuple(t for t, _ in recs)
    index = {n: i for i, n in enumerate(names)}
    go_cmds = tuple(f"go to {n}" for n in names)
    sorted_go = sorted(range(len(names)), key=lambda i: go_cmds[i])
    go_blocks = tuple(tuple(go_cmds[i] for i in sorted_go if i != loc) for loc in range(-1, len(names)))
    overview = [f"a {t} {k}" for t, k in sorted(recs, key=lambda r: (r[0], -r[1]))]
    look_middle = f"You are in the middle of a room. Looking quickly around you, you see {_listing(overview)}."
    obj_types = (*C.ROOM_OBJECTS[room], C.LAMP)
    fit_list: dict[str, tuple[int, ...]] = {}
    for ot in obj_types:
        if ot == C.LAMP:
            fit_list[ot] = tuple(i for i, t in enumerate(types) if t in C.LAMP_HOLDERS)
        else:
            fit_list[ot] = tuple(i for i, t in enumerate(types) if ot in C.ACCEPTS[t])
    fit_mask = {}
    for ot, ix in fit_list.items():
        mask = bytearray(len(names))
        for i in ix:
            mask[i] = 1
        fit_mask[ot] = bytes(mask)
    by_type: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        by_type.setdefault(t, []).append(i)
    return Layout(
        layout_id=layout_id,
        room=room,
        names=names,
        types=types,
        openable=tuple(t in C.OPENABLE for t in types),
        index=MappingProxyType(index),
        go_cmds=go_cmds,
        go_blocks=go_blocks,
        look_middle=look_middle,
        fit_list=MappingProxyType(fit_list),
        fit_mask=MappingProxyType(fit_mask),
        by_type=MappingProxyType({t: tuple(v) for t, v in by_type.items()}),
        appliance=tuple(APPLIANCE_KIND.get(t, 0) for t in types),
    )


# -- tasks -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Task:
    """One game: a layout, objects and their start receptacles, closed containers and a goal."""

    task_id: str
    split: str
    index: int
    task_type: str
    target: str
    dest: str | None
    description: str
    layout: Layout
    obj_names: tuple[str, ...]
    obj_types: tuple[str, ...]
    obj_flags: tuple[int, ...]
    obj_start: tuple[int, ...]
    start_closed: tuple[bool, ...]
    config: GenConfig = field(default_factory=GenConfig)
    obj_index: Mapping[str, int] = field(default_factory=dict)

    @property
    def intro(self) -> str:
        """ALFWorld's first observation: banner, room overview and the task."""
        return (
            f"-= Welcome to TextWorld, ALFRED! =-\n\n{self.layout.look_middle}\n\nYour task is to: {self.description}"
        )

    def spec(self) -> dict[str, Any]:
        """What regenerates this task: ``generate_task(**spec)`` (with ``config`` as a dict)."""
        return {"split": self.split, "index": self.index, "config": self.config.to_dict()}

    def gold(self) -> dict[str, Any]:
        """Privileged task data for ``info["gold"]`` (JSON-serialisable)."""
        return {
            "task_type": self.task_type,
            "object": self.target,
            "receptacle": self.dest,
            "description": self.description,
            "layout_id": self.layout.layout_id,
            "room": self.layout.room,
            "spec": self.spec(),
        }


def object_flags(obj_type: str) -> int:
    """The property flags (``PICKUP``, ``HEATABLE``, ...) of an object type."""
    f = 0 if obj_type == C.LAMP else PICKUP
    f |= HEATABLE if obj_type in C.HEATABLE else 0
    f |= COOLABLE if obj_type in C.COOLABLE else 0
    f |= CLEANABLE if obj_type in C.CLEANABLE else 0
    f |= SLICEABLE if obj_type in C.SLICEABLE else 0
    f |= TOGGLE if obj_type == C.LAMP else 0
    f |= SLICER if obj_type in C.SLICERS else 0
    return f


_FLAGS: MappingProxyType[str, int] = MappingProxyType(
    {t: object_flags(t) for room in C.ROOMS for t in (*C.ROOM_OBJECTS[room], C.LAMP)}
)


def config_from(config: GenConfig | Mapping[str, Any] | None) -> GenConfig:
    if config is None:
        return GenConfig()
    return config if isinstance(config, GenConfig) else GenConfig(**config)


def generate_task(split: str, index: int, config: GenConfig | Mapping[str, Any] | None = None) -> Task:
    """Task ``index`` of ``split`` (a pure function of its arguments; see the module docstring)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    cfg = config_from(config)
    index = int(index)
    rng = random.Random(_seed("task", split, index, cfg.key))
    task_type = cfg.task_types[index % len(cfg.task_types)]
    unseen = split == "valid_unseen"
    for _ in range(200):
        task = _attempt(rng, split, index, task_type, unseen, cfg)
        if task is not None:
            return task
    raise RuntimeError(f"could not generate a {task_type} task for {split}:{index} with {cfg}; relax the knobs")


def _attempt(rng: random.Random, split: str, index: int, task_type: str, unseen: bool, cfg: GenConfig) -> Task | None:
    rand = rng.random

    def pick(seq: Sequence[Any]) -> Any:
        return seq[int(rand() * len(seq))]

    room = pick(C.TASK_ROOMS[task_type])
    lay = get_layout(pick(split_layouts(split, room)), cfg.max_receptacles)
    appliance = C.APPLIANCE.get(task_type)
    if appliance is not None and appliance not in lay.by_type:
        return None
    lamp_holders = lay.fit_list[C.LAMP]
    if task_type == C.LIGHT and not lamp_holders:
        return None
    target = pick(C.task_targets(task_type, room))
    if task_type == C.LIGHT:
        dest = None
        if is_unseen_goal(task_type, target, dest) != unseen:
            return None
    else:
        dests = [t for t in lay.by_type if target in C.ACCEPTS[t] and t != appliance]
        dests = [d for d in dests if is_unseen_goal(task_type, target, d) == unseen]
        if not dests:
            return None
        dest = pick(sorted(dests))
    sources = [i for i in lay.fit_list[target] if lay.types[i] != dest]
    if not sources:
        return None
    lo, hi = cfg.target_instances
    n_target = rng.randint(max(lo, 2), max(hi, 2)) if task_type == C.TWO else rng.randint(lo, hi)
    placements = [(target, pick(sources)) for _ in range(n_target)]
    if lay.room in C.LAMP_ROOMS and lamp_holders:
        n_lamps = 2 if task_type == C.LIGHT and len(lamp_holders) > 1 and rng.random() < 0.25 else 1
        placements += [(C.LAMP, r) for r in rng.sample(lamp_holders, n_lamps)]
    pool = [t for t in C.ROOM_OBJECTS[lay.room] if t != target and lay.fit_list[t]]
    for _ in range(rng.randint(*cfg.distractors)):
        t = pick(pool)
        placements.append((t, pick(lay.fit_list[t])))
    rng.shuffle(placements)
    numbered: dict[str, int] = {}
    objs = []
    for t, r in placements:
        numbered[t] = numbered.get(t, 0) + 1
        objs.append((t, numbered[t], r))
    objs.sort()
    names = tuple(f"{t} {k}" for t, k, _ in objs)
    p_closed = cfg.closed_prob
    closed = tuple(op and rand() < p_closed for op in lay.openable)
    description = pick(C.TASK_TEMPLATES[task_type]).format(o=target, r=dest)
    tag = cfg.key
    task_id = f"{split}:{index}:{task_type}-{target}-{dest}-{lay.layout_id}" + (f"@{tag}" if tag else "")
    return Task(
        task_id=task_id,
        split=split,
        index=index,
        task_type=task_type,
        target=target,
        dest=dest,
        description=description,
        layout=lay,
        obj_names=names,
        obj_types=tuple(t for t, _, _ in objs),
        obj_flags=tuple(_FLAGS[t] for t, _, _ in objs),
        obj_start=tuple(r for _, _, r in objs),
        start_closed=closed,
        config=cfg,
        obj_index=MappingProxyType({n: i for i, n in enumerate(names)}),
    )
