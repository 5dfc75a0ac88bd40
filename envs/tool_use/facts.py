"""A ToolUse world's outcome as object -> attribute facts (the form ``agentgym.rewards.state_similarity`` reads).

``ToolUseEnv(state_facts=True)`` puts the current world's facts in ``info["state_facts"]`` on every turn and the
gold final state's in ``info["gold"]["goal_facts"]``. The facts are read off ``World.outcome`` (the part of the state
a state check compares), whatever the world:

* a mapping ``{key: {name: value}}`` gives one object per ``name`` with the attribute ``key`` = ``value`` (objects of
  the same name across keys merge: a bank account has its ``balances`` and its ``kinds``);
* a list of records (dicts) gives one object per record, named by its ``title`` (else ``name``), its other fields
  as attributes (lists joined by ``", "``);
* a list of plain values gives one object per value, with the attribute ``key`` = ``"yes"`` (a directory).

>>> outcome_facts({"balances": {"chk": 1050}, "kinds": {"chk": "checking"}})
[{'name': 'chk', 'attributes': {'balances': '1050', 'kinds': 'checking'}}]
>>> outcome_facts({"dirs": ["/a"], "todos": [{"title": "pay", "due": "2024-05-01", "done": False}]})
[{'name': '/a', 'attributes': {'dirs': 'yes'}}, {'name': 'pay', 'attributes': {'due': '2024-05-01', 'done': 'False'}}]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Fact = dict[str, Any]


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def outcome_facts(outcome: Mapping[str, Any]) -> list[Fact]:
    """The facts of a world outcome (see the module docstring), objects in order of first appearance."""
    objects: dict[str, dict[str, str]] = {}
    records: list[Fact] = []
    for key, value in outcome.items():
        if isinstance(value, Mapping):
            for name, item in value.items():
                objects.setdefault(str(name), {})[str(key)] = _text(item)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, Mapping):
                    name = item.get("title", item.get("name", ""))
                    attrs = {str(k): _text(v) for k, v in item.items() if k not in ("title", "name")}
                    records.append({"name": str(name), "attributes": attrs})
                else:
                    objects.setdefault(str(item), {})[str(key)] = "yes"
        else:
            objects.setdefault(str(key), {})["value"] = _text(value)
    return [{"name": n, "attributes": a} for n, a in objects.items()] + records
