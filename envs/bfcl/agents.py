"""Built-in BFCL agents: ``oracle`` (privileged: plays the gold calls of each user turn, then a plain reply) and
``random`` (random calls of the offered functions with values drawn from the conversation); and, for measuring that
the env judges as BFCL does (``bench/bench_bfcl_gold.py``, not registered), :class:`PerturbedOracle`: the oracle
with one change of a kind listed in ``PERTURBATIONS``.

>>> gold = {"turns": [{"calls": [{"name": "pwd", "arguments": {}}], "reply": None}, {"calls": [], "reply": "Done."}]}
>>> OracleAgent().act([{"role": "user", "content": "Where am I?"}], {"gold": gold})
'<tool_call>\\n{"name": "pwd", "arguments": {}}\\n</tool_call>'
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, ClassVar

from agentgym.contract.agent import Agent
from agentgym.envs.tool_use.agents import OracleAgent, hermes

__all__ = ["PERTURBATIONS", "OracleAgent", "PerturbedOracle", "RandomAgent", "hermes"]

Message = dict[str, Any]
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_][\w.\-]*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class RandomAgent(Agent):
    """Calls one or two random offered functions (arguments: words and numbers seen in the conversation), or replies
    "Done." (30%)."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        blocks = [b for m in messages if m.get("role") in ("system", "user") for b in _TOOLS.findall(m["content"])]
        tools = [json.loads(line)["function"] for b in blocks for line in b.splitlines() if line.strip()]
        text = " ".join(m.get("content", "") for m in messages[1:] if m.get("role") in ("user", "tool"))
        words = _WORD.findall(text)[-200:] or ["x"]
        numbers = [float(x) for x in _NUMBER.findall(text)[-50:]] or [1.0]
        if not tools or rng.random() < 0.3:
            return "Done."
        calls = []
        for _ in range(int(rng.integers(1, 3))):
            fn = tools[int(rng.integers(len(tools)))]
            params = fn["parameters"]
            args = {
                key: self._value(prop, words, numbers)
                for key, prop in params["properties"].items()
                if key in params["required"] or rng.random() < 0.5
            }
            calls.append({"name": fn["name"], "arguments": args})
        return hermes(calls)

    def _value(self, prop: dict[str, Any], words: list[str], numbers: list[float], depth: int = 0) -> Any:
        rng = self.np_random
        if "enum" in prop:
            return prop["enum"][int(rng.integers(len(prop["enum"])))]
        kind = prop.get("type", "string")
        if kind == "integer":
            return int(rng.integers(0, 6))
        if kind == "number":
            return numbers[int(rng.integers(len(numbers)))]
        if kind == "boolean":
            return bool(rng.random() < 0.5)
        if kind == "array" and depth < 2:
            item = prop.get("items", {"type": "string"})
            return [self._value(item, words, numbers, depth + 1) for _ in range(int(rng.integers(0, 3)))]
        if kind == "object":
            return {}
        return words[int(rng.integers(len(words)))]


#: One call per API class that reads and changes no public attribute (the extra call of ``extra-read-only``).
READ_ONLY: dict[str, dict[str, Any]] = {
    "GorillaFileSystem": {"name": "pwd", "arguments": {}},
    "MathAPI": {"name": "add", "arguments": {"a": 1, "b": 2}},
    "MessageAPI": {"name": "list_users", "arguments": {}},
    "TwitterAPI": {"name": "posting_get_login_status", "arguments": {}},
    "TicketAPI": {"name": "ticket_get_login_status", "arguments": {}},
    "TradingBot": {"name": "get_current_time", "arguments": {}},
    "TravelAPI": {"name": "list_all_airports", "arguments": {}},
    "VehicleControlAPI": {"name": "check_tire_pressure", "arguments": {}},
}


def _first_call(turns: list[dict[str, Any]], pick: Any) -> tuple[dict[str, Any], str] | None:
    """The first gold call with an argument ``pick(value)`` accepts, and that argument's name."""
    for turn in turns:
        for call in turn["calls"]:
            for key, value in call["arguments"].items():
                if pick(value):
                    return call, key
    return None


def _wrong_value(turns: list[dict[str, Any]], gold: dict[str, Any]) -> None:
    """Change the first scalar argument of the gold: a string gets "_x", a number 1 more, a boolean flips."""
    found = _first_call(turns, lambda v: isinstance(v, str | int | float))
    if found:
        call, key = found
        value = call["arguments"][key]
        if isinstance(value, bool):
            call["arguments"][key] = not value
        else:
            call["arguments"][key] = value + "_x" if isinstance(value, str) else value + 1


def _drop_one(turns: list[dict[str, Any]], gold: dict[str, Any]) -> None:
    """Leave out the last call of the first gold turn with two or more calls (else of the first with one)."""
    steps = [t for t in turns if t["calls"]]
    multi = [t for t in steps if len(t["calls"]) >= 2] or steps
    if multi:
        multi[0]["calls"].pop()
        if not multi[0]["calls"]:
            turns.remove(multi[0])


def _extra_read_only(turns: list[dict[str, Any]], gold: dict[str, Any]) -> None:
    """Add a step with one read-only call in every user turn whose gold has no call (else in the first one)."""
    extra = READ_ONLY[gold["involved_classes"][0]]
    empty = [k for k, t in enumerate(gold["ground_truth"]) if not t] or [0]
    for k in reversed(empty):
        at = next(i for i, t in enumerate(turns) if t.get("user_turn") == k and t["reply"] is not None)
        turns.insert(at, {"calls": [copy.deepcopy(extra)], "reply": None, "user_turn": k})


def _split(turns: list[dict[str, Any]], gold: dict[str, Any]) -> None:
    """Every call in a step of its own (a gold turn of more than 20 calls then meets BFCL's step limit)."""
    turns[:] = [step for t in turns for step in ([{**t, "calls": [c]} for c in t["calls"]] if t["calls"] else [t])]


def _coerced(turns: list[dict[str, Any]], gold: dict[str, Any]) -> None:
    """The first number argument written as a string ('1' for 1), else the first digit string as a number."""
    found = _first_call(turns, lambda v: isinstance(v, int | float) and not isinstance(v, bool))
    if found:
        call, key = found
        call["arguments"][key] = str(call["arguments"][key])
        return
    found = _first_call(turns, lambda v: isinstance(v, str) and v.isdigit())
    if found:
        call, key = found
        call["arguments"][key] = int(call["arguments"][key])


#: The perturbations :class:`PerturbedOracle` applies to the gold turns, by name.
PERTURBATIONS = {"wrong-value": _wrong_value, "drop-one": _drop_one, "extra-read-only": _extra_read_only,
                 "split": _split, "coerced": _coerced}  # fmt: skip


class PerturbedOracle(OracleAgent):
    """The oracle with one perturbation of its gold turns (``PERTURBATIONS[kind]``): the call sequences that an
    agent's verdict must not depend on how it was judged."""

    kinds: ClassVar[tuple[str, ...]] = tuple(PERTURBATIONS)

    def __init__(self, kind: str) -> None:
        super().__init__()
        if kind not in PERTURBATIONS:
            raise ValueError(f"kind must be one of {list(PERTURBATIONS)}, got {kind!r}")
        self.kind = kind
        self.name = f"oracle-{kind}"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        if "gold" in info:
            turns = copy.deepcopy(info["gold"]["turns"])
            PERTURBATIONS[self.kind](turns, info["gold"])
            info = {**info, "gold": {**info["gold"], "turns": turns}}
        return super().act(messages, info)
