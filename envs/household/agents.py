"""Built-in Household agents: ``oracle`` (privileged, optimal), ``heuristic`` (honest explorer), ``random``.

Each agent answers with a bare command, or wraps it in ``<think>``/``<action>`` tags when the episode's first
message is the verl-agent prompt.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/Household-v0", split="train")
>>> obs, info = env.reset(seed=0, options={"task_index": 3})
>>> agent = OracleAgent(); agent.reset(seed=0)
>>> agent.act(obs, info)
'go to cabinet 10'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agentgym.contract.agent import Agent, AgentError
from agentgym.envs.household import catalog as C
from agentgym.envs.household.engine import Engine
from agentgym.envs.household.planner import expert_plan
from agentgym.envs.household.world import generate_task

Message = dict[str, Any]

_TASK_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), t)
    for p, t in (
        (r"put a clean (\w+) in (\w+)\.", C.CLEAN),
        (r"clean some (\w+) and put it in (\w+)\.", C.CLEAN),
        (r"put a hot (\w+) in (\w+)\.", C.HEAT),
        (r"heat some (\w+) and put it in (\w+)\.", C.HEAT),
        (r"put a cool (\w+) in (\w+)\.", C.COOL),
        (r"cool some (\w+) and put it in (\w+)\.", C.COOL),
        (r"put two (\w+) in (\w+)\.", C.TWO),
        (r"find two (\w+) and put them in (\w+)\.", C.TWO),
        (r"look at (\w+) under the desklamp\.", C.LIGHT),
        (r"examine the (\w+) with the desklamp\.", C.LIGHT),
        (r"put (?:a|some) (\w+) (?:in|on) (\w+)\.", C.SIMPLE),
    )
)
_TASK = re.compile(r"Your task is to: ([^\n]*)")
_OVERVIEW = re.compile(r"Looking quickly around you, you see (.*?)\.(?:\n|$)")
_NAME = re.compile(r"\ba ([a-z]+ \d+)")
_CONTENTS = re.compile(r"(?:On the ([a-z]+ \d+), you see|The ([a-z]+ \d+) is open\. In it, you see) (.*?)\.(?:\n|$| )")
_CLOSED = re.compile(r"The ([a-z]+ \d+) is closed\.")
_ARRIVE = re.compile(r"You arrive at ([a-z]+ \d+)\.")
_TAKEN = re.compile(r"You pick up the ([a-z]+ \d+) from the ")
_PUT = re.compile(r"You (?:put|move) the ([a-z]+ \d+) ")


def _wants_tags(messages: list[Message]) -> bool:
    first = next((m["content"] for m in messages if m.get("role") == "user"), "")
    return "<action>" in first


def parse_task(text: str) -> tuple[str, str, str | None] | None:
    """``(task_type, object type, receptacle type)`` from an ALFWorld task sentence, or None."""
    m = _TASK.search(text)
    sentence = m.group(1) if m else text
    for pattern, task_type in _TASK_PATTERNS:
        found = pattern.search(sentence)
        if found:
            groups = found.groups()
            return task_type, groups[0], groups[1] if len(groups) > 1 else None
    return None


class _TaggedAgent(Agent):
    """Remembers per episode whether to answer inside ``<action>`` tags."""

    def __init__(self) -> None:
        super().__init__()
        self._tags = False

    def _format(self, command: str, thought: str) -> str:
        return f"<think>{thought}</think>\n<action>{command}</action>" if self._tags else command


class OracleAgent(_TaggedAgent):
    """Plays an optimal plan: ``info["expert_plan"]`` when the env provides it, else its own plan.

    Without ``expert_plan`` in ``info``, it regenerates the task from the privileged ``info["gold"]["spec"]``,
    plans on that private copy (A*, ``planner.expert_plan``) and replays its own commands on it, so it stays in
    sync with the env at no cost to the env's throughput.
    """

    name = "oracle"
    privileged = True

    def __init__(self) -> None:
        super().__init__()
        self._mirror: Any = None
        self._plan: list[str] = []
        self._last: str | None = None

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._mirror, self._plan, self._last = None, [], None

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        if int(info.get("turn", 0)) == 0:
            self._tags = _wants_tags(messages)
            self._mirror, self._plan, self._last = None, [], None
        plan = info.get("expert_plan")
        command = self._own_plan(info) if plan is None else (plan[0] if plan else "look")
        return self._format(command, "I follow the optimal plan.")

    def _own_plan(self, info: dict[str, Any]) -> str:
        if self._mirror is None:
            spec = (info.get("gold") or {}).get("spec")
            if spec is None:
                raise AgentError("the oracle needs info['expert_plan'] (create the env with expert_plan=True)")
            self._mirror = Engine(generate_task(spec["split"], spec["index"], spec["config"]))
            self._plan = expert_plan(self._mirror)
        elif self._last is not None:
            self._mirror.step(self._last)
            if self._plan and self._plan[0] == self._last and self._mirror.anchor() == info.get("anchor"):
                self._plan.pop(0)
            else:
                self._plan = expert_plan(self._mirror)
        self._last = self._plan[0] if self._plan else "look"
        return self._last


class RandomAgent(_TaggedAgent):
    """Uniform over ``info["admissible_commands"]``: a lower bound that every step pays admissible generation for."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        if int(info.get("turn", 0)) == 0:
            self._tags = _wants_tags(messages)
        commands = info.get("admissible_commands") or ["look"]
        command = commands[int(self.np_random.random() * len(commands))]
        return self._format(command, "I pick an admissible action at random.") if self._tags else command


class HeuristicAgent(_TaggedAgent):
    """An honest explorer that never reads ``info["gold"]``: it parses the task sentence, visits the receptacles
    that can hold the object (opening closed ones), remembers what it saw, takes a matching object, uses the
    appliance or the desk lamp the task needs, and puts the object in the first receptacle of the goal's type.
    It only uses what an agent sees: the observations and ``info["admissible_commands"]``.
    """

    name = "heuristic"

    def __init__(self) -> None:
        super().__init__()
        self._reset_memory()

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._reset_memory()

    def _reset_memory(self) -> None:
        self.goal: tuple[str, str, str | None] | None = None
        self.receptacles: list[str] = []
        self.seen: dict[str, list[str]] = {}
        self.closed: set[str] = set()
        self.visited: set[str] = set()
        self.here: str | None = None
        self.holding: str | None = None
        self.treated = False
        self.placed: set[str] = set()
        self.dest_choice: str | None = None
        self._last = ""

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        if int(info.get("turn", 0)) == 0:
            self._reset_memory()
            self._tags = _wants_tags(messages)
            text = messages[-1]["content"] if messages else ""
            self.goal = parse_task(text)
            m = _OVERVIEW.search(text)
            self.receptacles = _NAME.findall(m.group(1)) if m else []
        elif messages:
            self._observe(messages[-1]["content"])
        admissible = list(info.get("admissible_commands") or [])
        command = self._decide(admissible)
        if admissible and command not in admissible:
            command = next((c for c in admissible if c.startswith("go to ")), admissible[0])
        self._last = command
        return self._format(command, "I look for the object, prepare it and bring it to its place.")

    # -- memory ----------------------------------------------------------------------------------------------
    def _observe(self, text: str) -> None:
        arrived = _ARRIVE.search(text)
        if arrived:
            self.here = arrived.group(1)
            self.visited.add(self.here)
        for m in _CONTENTS.finditer(text):
            where = m.group(1) or m.group(2)
            self.seen[where] = (
                [] if m.group(3) == "nothing" else _NAME.findall("a " + m.group(3).replace(", and ", ", "))
            )
            self.closed.discard(where)
        for m in _CLOSED.finditer(text):
            self.closed.add(m.group(1))
        taken = _TAKEN.search(text)
        if taken:
            self.holding = taken.group(1)
            if self.here and self.holding in self.seen.get(self.here, []):
                self.seen[self.here].remove(self.holding)
        if _PUT.search(text) and self.holding:
            if self.here is not None:
                self.seen.setdefault(self.here, []).append(self.holding)
                if self.goal and self.here.split()[0] == self.goal[2]:
                    self.placed.add(self.holding)
            self.holding, self.treated = None, False
        if any(f"You {v} the " in text for v in ("heat", "cool", "clean")):
            self.treated = True

    # -- policy ------------------------------------------------------------------------------------------------
    def _decide(self, admissible: list[str]) -> str:
        if self.goal is None:
            return "look"
        task_type, obj, dest = self.goal
        here = self.here
        if here is not None and here in self.closed:
            return f"open {here}"
        if self.holding is None:
            found = self._find(obj)
            if found is not None:
                name, where = found
                return f"take {name} from {where}" if where == here else f"go to {where}"
            return self._explore(lambda r: obj in C.ACCEPTS.get(r.split()[0], ()))
        if self.holding.split()[0] != obj:  # holding the wrong thing: put it back here
            put = next((c for c in admissible if c.startswith(("put ", "move "))), None)
            return put or self._explore(lambda r: True)
        if task_type == C.LIGHT:
            lamp = self._find(C.LAMP)
            if lamp is None:
                return self._explore(lambda r: r.split()[0] in C.LAMP_HOLDERS)
            name, where = lamp
            return f"use {name}" if where == here else f"go to {where}"
        appliance = C.APPLIANCE.get(task_type)
        if appliance and not self.treated:
            target = next((r for r in self.receptacles if r.split()[0] == appliance), None)
            if target is None:
                return "look"
            verb = {C.CLEAN: "clean", C.HEAT: "heat", C.COOL: "cool"}[task_type]
            return f"{verb} {self.holding} with {here}" if here == target else f"go to {target}"
        if self.dest_choice is None:
            self.dest_choice = next((r for r in self.receptacles if r.split()[0] == dest), None)
        if self.dest_choice is None:
            return "look"
        if here != self.dest_choice:
            return f"go to {self.dest_choice}"
        return next((c for c in admissible if c.startswith(("put ", "move "))), "look")

    def _find(self, obj_type: str) -> tuple[str, str] | None:
        """A remembered object of ``obj_type`` (not one already delivered), nearest first: here, then seen."""
        places = sorted(self.seen, key=lambda r: r != self.here)
        for where in places:
            for name in self.seen[where]:
                if name.split()[0] == obj_type and name not in self.placed:
                    return name, where
        return None

    def _explore(self, fits: Callable[[str], bool]) -> str:
        for r in self.receptacles:
            if r not in self.visited and fits(r):
                return f"go to {r}"
        for r in self.receptacles:
            if r not in self.visited:
                return f"go to {r}"
        return "look"
