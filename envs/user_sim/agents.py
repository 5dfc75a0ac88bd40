"""Built-in agents of the user-simulation envs.

``ClarifyOracleAgent`` (privileged: asks for exactly the hidden details, then answers the gold action),
``ClarifyHeuristicAgent`` (not privileged: reads the action list in the system prompt, keeps what the user's
messages state, asks for each detail still unknown, then answers) and ``RandomInteractAgent`` (random questions and
answers, sometimes in the tool style or malformed).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgym.agents.base import Agent, GoldAgent
from agentgym.envs.user_sim.users import find_word

Message = dict[str, Any]
_SIGNATURE = re.compile(r"^(\w+)\((.*)\)$")


class ClarifyOracleAgent(GoldAgent):
    """Asks one question per hidden detail (naming it), then gives ``info["gold"]["answer"]``."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        hidden = self.gold["hidden"]
        if turn < len(hidden):
            return f"[action] What {hidden[turn]} would you like?"
        return f"[answer] {self.gold['answer']}"


def signatures(system: str) -> dict[str, dict[str, list[str]]]:
    """The actions listed in a Clarify system prompt: ``{action: {parameter: [choices]}}``."""
    out: dict[str, dict[str, list[str]]] = {}
    for line in system.splitlines():
        m = _SIGNATURE.match(line.strip())
        if m is None or "|" not in m.group(2):
            continue
        params = {}
        for part in m.group(2).split(", "):
            name, _, choices = part.partition(": ")
            params[name] = choices.split("|")
        out[m.group(1)] = params
    return out


class ClarifyHeuristicAgent(Agent):
    """Not privileged. Picks the action whose name and choices the opening request mentions most, takes each detail the
    user's messages state unambiguously (a reply right after a question about that detail, or a value no other
    detail of the action can take), asks about the first detail still unknown, and answers when none is left."""

    name = "heuristic"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        actions = signatures(messages[0]["content"])
        request = next(m["content"].lower() for m in messages if m.get("role") == "user")

        def score(a: str) -> int:  # words of the action's name (x10), then details the request states
            named = sum(find_word(w, request) is not None for w in a.split("_"))
            return 10 * named + sum(any(find_word(c, request) for c in cs) for cs in actions[a].values())

        action = max(actions, key=score)
        params = actions[action]
        known: dict[str, str] = {}
        asked: str | None = None
        for m in messages:
            text = str(m.get("content") or "").lower()
            if m.get("role") == "assistant":
                asked = next((p for p in params if f"what {p} " in text), None)
                continue
            if m.get("role") != "user":
                continue
            for p, choices in params.items():
                found = [c for c in choices if find_word(c, text)]
                shared = any(c in other for c in found for q, other in params.items() if q != p)
                if len(found) == 1 and (p == asked or not shared):
                    known[p] = found[0]
            asked = None
        missing = [p for p in params if p not in known]
        if missing:
            return f"[action] What {missing[0]} would you like?"
        return f"[answer] {action}({', '.join(f'{p}={known[p]}' for p in params)})"


class RandomInteractAgent(Agent):
    """Random turns: a question built from random words of the conversation, a random answer, or (rarely) a
    tool-style call or a malformed turn."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        words = re.findall(r"[a-z0-9:]+", " ".join(str(m.get("content") or "") for m in messages).lower()) or ["x"]
        pick = [words[int(i)] for i in rng.integers(len(words), size=3)]
        roll = rng.random()
        if roll < 0.05:
            return "hello"
        if roll < 0.15:
            call = {"name": "interact_with_env", "arguments": {"choice": "action", "content": " ".join(pick) + "?"}}
            return f"<tool_call>{json.dumps(call)}</tool_call>"
        if roll < 0.8:
            return f"[action] {' '.join(pick)}?"
        return f"[answer] {pick[0]}({pick[1]}={pick[2]})"
