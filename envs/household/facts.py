"""Household's symbolic state as object -> attribute facts, the goal as the same facts, and the planner's subgoals.

These are the inputs of the env-grounded judged rewards (``agentgym.rewards.state_similarity``,
``agentgym.rewards.subgoals``); ``HouseholdEnv(state_facts=True)`` puts them in ``info``. A fact list is
JSON: one ``{"name": kind, "id": instance, "attributes": {attribute: value}}`` per object, where ``name`` is what a
goal can name (the object type, ``"apple"``) and ``id`` the instance (``"apple 1"``). Every object has

* ``location``: the type of the receptacle it is in or on (``"countertop"``), or ``"agent"`` while held;
* ``reachable``: ``"yes"`` when held or in/on the open receptacle the agent stands at, else ``"no"``;
* ``temperature`` (``"hot"``, ``"cold"``, ``"room temperature"``), ``cleanliness`` (``"clean"``, ``"dirty"``),
  ``shape`` (``"sliced"``, ``"whole"``); a desk lamp also ``power`` (``"on"``, ``"off"``).

``goal_facts`` lists the goal objects with only the attributes the goal fixes (a receptacle *type*, as the task
names it): the goal holds exactly when every goal object has a distinct current object of its name with all of
its attributes. ``subgoals`` is the planner's decomposition: ``{"text", "require": [{"name", "attributes",
"count"}]}``, met when, for each requirement, at least ``count`` current objects of that name have those
attributes; an expert plan meets them in order, one command each (take, transform, place).

>>> from agentgym.envs.household.world import generate_task
>>> from agentgym.envs.household.engine import Engine
>>> task = generate_task("train", 3)
>>> task.task_type, goal_facts(task)
('pick_heat_then_place_in_recep', [{'name': 'cup', 'attributes': {'location': 'countertop', 'temperature': 'hot'}}])
>>> [s["text"] for s in subgoals(task)]
['take a cup', 'heat the cup', 'put the hot cup in/on the countertop']
>>> facts = state_facts(Engine(task))
>>> next(f for f in facts if f["name"] == "cup")["attributes"]
{'location': 'cabinet', 'reachable': 'no', 'temperature': 'room temperature', 'cleanliness': 'dirty', 'shape': 'whole'}
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.household import catalog as C
from agentgym.envs.household.engine import CLEAN, COOL, HELD, HOT, ON, SLICED, Engine
from agentgym.envs.household.world import TOGGLE, Task

Fact = dict[str, Any]

_TRANSFORM = {  # task type -> (verb, attribute, goal value)
    C.CLEAN: ("clean", "cleanliness", "clean"),
    C.HEAT: ("heat", "temperature", "hot"),
    C.COOL: ("cool", "temperature", "cold"),
}


def state_facts(eng: Engine) -> list[Fact]:
    """Every object of the engine's current state as a fact (see the module docstring)."""
    types, loc, closed = eng.lay.types, eng.loc, eng.closed
    out = []
    for o, (name, kind, r, bits) in enumerate(zip(eng.onames, eng.task.obj_types, eng.where, eng.bits, strict=True)):
        held = r == HELD
        attrs = {
            "location": "agent" if held else types[r],
            "reachable": "yes" if held or (r == loc and not closed[r]) else "no",
            "temperature": "hot" if bits & HOT else "cold" if bits & COOL else "room temperature",
            "cleanliness": "clean" if bits & CLEAN else "dirty",
            "shape": "sliced" if bits & SLICED else "whole",
        }
        if eng.oflags[o] & TOGGLE:
            attrs["power"] = "on" if bits & ON else "off"
        out.append({"name": kind, "id": name, "attributes": attrs})
    return out


def goal_facts(task: Task) -> list[Fact]:
    """The goal objects with the attributes the goal fixes (see the module docstring)."""
    o, r = task.target, task.dest
    if task.task_type == C.LIGHT:
        return [{"name": o, "attributes": {"location": "agent"}},
                {"name": C.LAMP, "attributes": {"power": "on", "reachable": "yes"}}]  # fmt: skip
    attrs = {"location": str(r)}
    if task.task_type in _TRANSFORM:
        _, attr, value = _TRANSFORM[task.task_type]
        attrs[attr] = value
    return [{"name": o, "attributes": dict(attrs)} for _ in range(2 if task.task_type == C.TWO else 1)]


def _req(name: str, count: int = 1, **attributes: str) -> dict[str, Any]:
    return {"name": name, "attributes": attributes, "count": count}


def subgoals(task: Task) -> list[dict[str, Any]]:
    """The planner's decomposition of ``task`` into subgoals, in plan order (see the module docstring)."""
    o, r, t = task.target, str(task.dest), task.task_type
    take = {"text": f"take a {o}", "require": [_req(o, location="agent")]}
    if t == C.LIGHT:
        lamp = _req(C.LAMP, power="on", reachable="yes")
        return [take, {"text": f"turn on the {C.LAMP} holding the {o}", "require": [_req(o, location="agent"), lamp]}]
    if t == C.TWO:
        return [take, {"text": f"put the {o} in/on the {r}", "require": [_req(o, location=r)]},
                {"text": f"take another {o}", "require": [_req(o, location="agent"), _req(o, location=r)]},
                {"text": f"put the second {o} in/on the {r}", "require": [_req(o, 2, location=r)]}]  # fmt: skip
    if t in _TRANSFORM:
        verb, attr, value = _TRANSFORM[t]
        place = _req(o, location=r, **{attr: value})
        return [take, {"text": f"{verb} the {o}", "require": [_req(o, **{attr: value})]},
                {"text": f"put the {value} {o} in/on the {r}", "require": [place]}]  # fmt: skip
    return [take, {"text": f"put the {o} in/on the {r}", "require": [_req(o, location=r)]}]
