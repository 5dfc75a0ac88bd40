"""Built-in agents of the user-simulation envs.

``ClarifyOracleAgent`` (privileged: confirms exactly the hidden details, then answers the gold action),
``ClarifyHeuristicAgent`` (not privileged: reads the action list in the system prompt, keeps what the user's
messages state, asks for each detail still unknown by name and follows up on a partial answer, then answers),
``ClarifyKeywordAgent`` (the same without the follow-up: the keyword template alone), ``ClarifyNaturalAgent``
(``heuristic``'s strategy asked the ways people ask) and ``RandomInteractAgent`` (random questions and answers,
sometimes in the tool style or malformed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym.contract.agent import Agent, GoldAgent
from agentgym.envs.user_sim.users import find_word

Message = dict[str, Any]
_SIGNATURE = re.compile(r"^(\w+)\((.*)\)$")


class ClarifyOracleAgent(GoldAgent):
    """Asks one yes/no question per hidden detail, about its gold value, then gives ``info["gold"]["answer"]``."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        hidden = self.gold["hidden"]
        if turn < len(hidden):
            return f"[action] Is the {hidden[turn]} {self.gold['goal'][hidden[turn]]}?"
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


def pick_action(messages: list[Message]) -> tuple[str, dict[str, list[str]]]:
    """The action whose name and choices the opening request mentions most (words of the name x10, then details the
    request states), with its parameters."""
    actions = signatures(messages[0]["content"])
    request = next(m["content"].lower() for m in messages if m.get("role") == "user")

    def score(a: str) -> int:
        named = sum(find_word(w, request) is not None for w in a.split("_"))
        return 10 * named + sum(any(find_word(c, request) for c in cs) for cs in actions[a].values())

    action = max(actions, key=score)
    return action, actions[action]


@dataclass
class Dialogue:
    """What a non-privileged Clarify agent has learnt: ``known`` values, how often each detail was ``asked``, the
    details whose last answer was partial (a reply to a question about it that gave no value and did not say no),
    and the values the user said no to."""

    known: dict[str, str] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)
    partial: set[str] = field(default_factory=set)
    excluded: dict[str, set[str]] = field(default_factory=dict)


_NO = re.compile(r"^\W*(no\b|that's not it|not\b)")


def read_dialogue(
    messages: list[Message], params: dict[str, list[str]], about: Callable[[str], tuple[list[str], str | None]]
) -> Dialogue:
    """Reads the user's messages: a value counts for a detail when the reply follows a question about that detail,
    or when no other detail can take it; ``about(question)`` says which details an agent message asked about and
    the value a yes/no question offered (None otherwise)."""
    d = Dialogue()
    asked: list[str] = []
    offered: str | None = None
    for m in messages:
        text = str(m.get("content") or "").lower()
        if m.get("role") == "assistant":
            asked, offered = about(text)
            for p in asked:
                d.asked[p] = d.asked.get(p, 0) + 1
            continue
        if m.get("role") != "user":
            continue
        for p, choices in params.items():
            found = [c for c in choices if find_word(c, text)]
            shared = any(c in other for c in found for q, other in params.items() if q != p)
            if len(found) == 1 and (p in asked or not shared):
                d.known[p] = found[0]
                d.partial.discard(p)
        said_no = _NO.match(text) is not None
        for p in asked:
            if p in d.known:
                continue
            if said_no and offered is not None:
                d.excluded.setdefault(p, set()).add(offered)
            elif not said_no:
                d.partial.add(p)
        asked, offered = [], None
    return d


def listing(values: list[str], say: Callable[[str], str] = str) -> str:
    """``a, b or c``."""
    said = [say(v) for v in values]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


class ClarifyHeuristicAgent(Agent):
    """Not privileged. Picks the action whose name and choices the opening request mentions most, takes each detail the
    user's messages state unambiguously (a reply right after a question about that detail, or a value no other
    detail of the action can take), asks about the first detail still unknown by name ("What crust would you
    like?"), follows up on a partial answer by listing the values still possible ("What crust would you like:
    thin, thick or stuffed?"), and answers when none is left."""

    name = "heuristic"
    follow_up = True

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        action, params = pick_action(messages)

        def about(text: str) -> tuple[list[str], str | None]:
            return [p for p in params if f"what {p} " in text][:1], None

        d = read_dialogue(messages, params, about)
        missing = [p for p in params if p not in d.known]
        if not missing:
            return f"[answer] {action}({', '.join(f'{p}={d.known[p]}' for p in params)})"
        p = missing[0]
        if self.follow_up and d.asked.get(p):
            left = [c for c in params[p] if c not in d.excluded.get(p, set())]
            return f"[action] What {p} would you like: {listing(left)}?"
        return f"[action] What {p} would you like?"


class ClarifyKeywordAgent(ClarifyHeuristicAgent):
    """``heuristic`` without the follow-up: it asks "What <detail> would you like?" and nothing else (the keyword
    template alone), so it never pins a detail the ``hard`` user holds loosely."""

    name = "keyword"
    follow_up = False


#: How ``natural`` asks about a detail without naming it (its own phrasebook, not the user's lexicon).
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "cuisine": ("What are you in the mood to eat?", "What kind of place do you have in mind?"),
    "area": ("Which part of the city suits you?", "Whereabouts should the restaurant be?"),
    "day": ("Which day works for you?", "When would suit you?"),
    "time": ("How late do you want to eat?", "When should we expect you to arrive?"),
    "people": ("How many of you will be coming?", "What's the headcount?"),
    "origin": ("Where are you flying from?", "Which airport are you leaving from?"),
    "destination": ("Where are you headed?", "Where would you like to fly to?"),
    "cabin": ("What kind of ticket do you want?", "What fare should I book?"),
    "bags": ("Will you check anything in?", "How many suitcases are you bringing?"),
    "person": ("Who is the meeting with?", "Whom should I invite?"),
    "start": ("When should it begin?", "What hour should it kick off?"),
    "minutes": ("How much time should I block for it?", "How long should it run?"),
    "room": ("Which venue should I book?", "Where do you want to meet?"),
    "size": ("How large should it be?", "How hungry are you?"),
    "topping": ("What should go on top?", "What kind of pizza do you fancy?"),
    "crust": ("How thick should it be?", "What kind of bottom do you like?"),
    "quantity": ("How many pizzas do you need?", "How many should I order?"),
    "delivery": ("How do you want to get it?", "Should we bring it to your door, or will you come by?"),
}
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_SAY = {"delivered": "delivery", "collected": "pickup", "0": "no bags"}
_CONFIRM = ("Would {v} work for you?", "Shall I put down {v}?", "Is it {v}?")
STYLES = ("list", "paraphrase", "either", "confirm", "multi")


def say(value: str) -> str:
    """How ``natural`` says a value: 12-hour times ("7:30pm"), number words from two, a few plain words."""
    if value in _SAY:
        return _SAY[value]
    m = re.match(r"^(\d\d):(\d\d)$", value)
    if m:
        hour, minute = int(m.group(1)), m.group(2)
        return f"{hour % 12 or 12}{'' if minute == '00' else ':' + minute}{'am' if hour < 12 else 'pm'}"
    if value.isdigit() and 2 <= int(value) < len(_WORDS):
        return _WORDS[int(value)]
    return value


class ClarifyNaturalAgent(Agent):
    """Not privileged; ``heuristic``'s strategy (the same action, the same reading of the replies, one detail after
    another, a follow-up listing the values still possible after a partial answer) asked the ways people ask,
    rotating five styles from a point that depends on the opening request: a value list ("What crust would you
    like (thin, thick or stuffed)?"), a paraphrase without the detail's name ("How large should it be?"), an
    either-or ("Thin or thick?"), a yes/no about a likely value ("Would 7pm work for you?") and two questions in one
    message. A value two details share (a city) is asked with
    the detail's name ("Is Oslo your destination?"); values are said in everyday forms (7pm, two, pickup)."""

    name = "natural"

    def __init__(self) -> None:
        super().__init__()
        self._about: dict[str, tuple[list[str], str | None]] = {}

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._about = {}

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        action, params = pick_action(messages)
        d = read_dialogue(messages, params, lambda text: self._about.get(text.removeprefix("[action] "), ([], None)))
        missing = [p for p in params if p not in d.known]
        if not missing:
            return f"[answer] {action}({', '.join(f'{p}={d.known[p]}' for p in params)})"
        opening = next(str(m.get("content") or "") for m in messages if m.get("role") == "user")
        turn = sum(m.get("role") == "assistant" for m in messages) + sum(map(ord, opening))  # styles vary by task
        p = missing[0]

        def shared(q: str) -> bool:
            return any(set(params[q]) & set(cs) for o, cs in params.items() if o != q)

        left = [c for c in params[p] if c not in d.excluded.get(p, set())] or list(params[p])
        asked: list[str] = [p]
        offered: str | None = None
        style = "list" if p in d.partial else STYLES[turn % len(STYLES)]
        if style in ("either", "confirm") and len(left) < 2:
            style = "confirm"
        if style == "list":
            text = (f"What {p} would you like ({listing(left, say)})?" if p not in d.partial
                    else f"Which {p} then: {listing(left, say)}?")  # fmt: skip
        elif style == "either":
            two = f"{say(left[0])} or {say(left[1])}"
            text = f"Is the {p} {two}?" if shared(p) else f"{two[0].upper()}{two[1:]}?"
        elif style == "confirm":
            offered = left[0]
            v = say(offered)
            text = f"Is {v} your {p}?" if shared(p) else _CONFIRM[turn % len(_CONFIRM)].format(v=v)
        else:
            phrases = PARAPHRASES.get(p, (f"Could you tell me the {p}?",))
            text = phrases[turn % len(phrases)]
            other = [q for q in missing[1:] if q not in d.partial and not set(params[q]) & set(params[p])]
            if style == "multi" and other:
                q = other[0]
                second = PARAPHRASES.get(q, (f"Could you tell me the {q}?",))
                text = (
                    f"{text} And {second[(turn + 1) % len(second)][:1].lower()}{second[(turn + 1) % len(second)][1:]}"
                )
                asked.append(q)
        self._about[text.lower()] = (asked, offered)
        return f"[action] {text}"


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
