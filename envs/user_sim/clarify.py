"""Clarify-v0: an underspecified request; the agent must ask for the missing details, then act.

A task is a request in one of four domains (a table booking, a flight, a meeting, a pizza order), each an action
with five details. The user's opening message states some of them; the others are hidden, and the user gives each
only when asked (``agentgym.envs.user_sim.users.ScriptedUser``). The agent asks with ``[action] ...`` and ends with
``[answer] name(detail=value, ...)``: success when the action and every detail are right (reward component
``outcome``), plus ``elicit_reward`` per hidden detail drawn out (``elicit``).

Difficulty (``difficulty``, or seeded per task with ``"mixed"``): ``easy`` (two hidden details, a cooperative user
who volunteers after two off-target questions), ``medium`` (three hidden, volunteers after four, corrects wrong
assumptions half the time), ``hard`` (four hidden, never volunteers, never corrects, and holds some details
loosely). A loose detail (``task["loose"]``: each hidden detail whose value has a hint, with probability 1/2, seeded
per task) gets a truthful partial answer to an open question, in any wording ("How large should it be?" ->
"Not a big one.", a hint that fits two or three values and names none); a question that offers values (a list, an
either-or, a yes/no) pins it. So ``hard`` separates agents by what they ask: asking again the same open question
never pins it, following up with the values still possible does.

The user understands questions the ways people ask them (``agentgym.envs.user_sim.understanding``): each slot below
declares its lexicon (aliases, paraphrase cues such as "how large" or "where * going", value synonyms such as
"pickup" for ``collected``, and the hints).

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/Clarify-v0", difficulty="easy")
>>> obs, info = env.reset(options={"task_index": 0})
>>> obs[-1]["content"]
'I want to order a pizza: with olive, thin crust, and 4 of them.'
>>> obs, *_ = env.step("[action] Which size would you like?")
>>> obs[-1]["content"]
'Large.'
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

from agentgym.envs.user_sim.agents import (
    ClarifyHeuristicAgent,
    ClarifyKeywordAgent,
    ClarifyNaturalAgent,
    ClarifyOracleAgent,
    RandomInteractAgent,
)
from agentgym.envs.user_sim.base import UserSimEnv
from agentgym.envs.user_sim.users import ScriptedUser, Slot, User
from agentgym.grading.answers import find_call, match_choice

DIFFICULTIES = ("easy", "medium", "hard")
#: difficulty -> (hidden details, volunteer_after, cooperativeness)
LEVELS: dict[str, tuple[int, int | None, float]] = {"easy": (2, 2, 1.0), "medium": (3, 4, 0.5), "hard": (4, None, 0.0)}
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
CITIES = ("lisbon", "oslo", "madrid", "dublin", "vienna", "prague", "athens", "warsaw")

_DAY_HINTS = {"At the weekend.": ("saturday", "sunday"), "Early in the week.": ("monday", "tuesday", "wednesday"),
              "Late in the week.": ("thursday", "friday")}  # fmt: skip
_CITY_HINTS = {"Somewhere in southern Europe.": ("lisbon", "madrid", "athens"),
               "Somewhere up north, by the sea.": ("oslo", "dublin"),
               "Somewhere in central Europe.": ("vienna", "prague", "warsaw")}  # fmt: skip
_DAY_CUES = ("what day", "which day", "what date", "which date", "day of the week")

#: domain -> (action name, what the user wants, its slots, how the request states each slot). Each slot's lexicon
#: (aliases, cues, synonyms, hints: see ``users.Slot``) is what the scripted user understands questions with.
DOMAINS: dict[str, tuple[str, str, tuple[Slot, ...], dict[str, str]]] = {
    "restaurant": (
        "book_table",
        "I'd like to book a table",
        (
            Slot(
                "cuisine",
                ("cuisine", "food", "kind of restaurant", "type of restaurant"),
                ("italian", "thai", "indian", "mexican", "greek"),
                ("{value} food.", "Somewhere {value}."),
                cues=(
                    "what * eat",
                    "feel like eating",
                    "in the mood for",
                    "style of cooking",
                    "kind of place",
                    "sort of place",
                    "type of place",
                    "dishes",
                    "craving",
                    "cravings",
                ),
                synonyms={"mexican": ("tex-mex",)},
                hints={
                    "Something spicy.": ("thai", "indian", "mexican"),
                    "Something Mediterranean.": ("italian", "greek"),
                },
            ),
            Slot(
                "area",
                ("area", "where", "part of town", "neighbourhood", "neighborhood", "district", "location"),
                ("north", "south", "east", "west", "centre"),
                ("In the {value}.", "The {value} of town."),
                cues=("side of town", "part of the city", "where * located", "whereabouts", "which part"),
                synonyms={
                    "centre": ("center", "city centre", "city center", "downtown", "central"),
                    "north": ("northern", "north side"),
                    "south": ("southern", "south side"),
                    "east": ("eastern", "east side"),
                    "west": ("western", "west side"),
                },
            ),
            Slot(
                "day",
                ("day", "which day", "date"),
                DAYS,
                ("On {value}.", "{value} works."),
                cues=(*_DAY_CUES, "when", "which night", "what night"),
                hints=_DAY_HINTS,
            ),
            Slot(
                "time",
                ("time", "what time", "hour"),
                ("18:00", "18:30", "19:00", "19:30", "20:00", "20:30"),
                ("At {value}.", "{value}, please."),
                cues=(
                    "how late",
                    "how early",
                    "what hour",
                    "at what point in the evening",
                    "o'clock",
                    "when * arrive",
                    "when * get there",
                    "when should we expect you",
                    "at {value}",
                ),
                hints={
                    "Early in the evening, before seven.": ("18:00", "18:30"),
                    "Around seven.": ("19:00", "19:30"),
                    "Later, from eight on.": ("20:00", "20:30"),
                },
            ),
            Slot(
                "people",
                ("people", "guests", "party", "how many"),
                ("2", "3", "4", "5", "6"),
                ("For {value} people.", "We are {value}."),
                cues=(
                    "how many of you",
                    "party size",
                    "headcount",
                    "group",
                    "who * coming",
                    "seats",
                    "table for",
                    "for {value}",
                    "{value} of you",
                    "{value} of us",
                ),
                synonyms={"2": ("a couple", "just the two of us")},
                hints={"Just a few of us.": ("2", "3"), "A bigger group.": ("4", "5", "6")},
            ),
        ),
        {
            "cuisine": "{value} food",
            "area": "in the {value}",
            "day": "on {value}",
            "time": "at {value}",
            "people": "for {value} people",
        },
    ),
    "flight": (
        "book_flight",
        "I need a flight",
        (
            Slot(
                "origin",
                ("origin", "departure", "leaving from", "flying from", "from where", "departing from"),
                CITIES,
                ("From {value}.", "I'm leaving from {value}."),
                cues=(
                    "from {value}",
                    "out of {value}",
                    "where * from",
                    "where * leaving",
                    "where * depart",
                    "where * departing",
                    "where * start",
                    "where * begin",
                    "where * out of",
                    "flying out of",
                    "flying out from",
                    "starting point",
                    "fly out of",
                    "leave from",
                    "which airport",
                ),
                hints=_CITY_HINTS,
            ),
            Slot(
                "destination",
                ("destination", "where to", "going to", "flying to", "arrive"),
                CITIES,
                ("To {value}.", "I'm going to {value}."),
                cues=(
                    "to {value}",
                    "into {value}",
                    "where * going",
                    "where * headed",
                    "where * heading",
                    "where * flying",
                    "where * fly",
                    "where * travel",
                    "where * travelling",
                    "where * traveling",
                    "where * land",
                    "arriving in",
                    "arrive in",
                    "where * off to",
                    "where * trip",
                    "go to",
                    "get to",
                ),
                hints=_CITY_HINTS,
            ),
            Slot(
                "day",
                ("day", "when", "date"),
                DAYS,
                ("On {value}.", "{value}."),
                cues=(*_DAY_CUES, "on {value}", "travel on", "fly on"),
                hints=_DAY_HINTS,
            ),
            Slot(
                "cabin",
                ("cabin", "class", "seat"),
                ("economy", "premium", "business"),
                ("{value} class.", "In {value}."),
                cues=("fare", "ticket type", "kind of ticket", "type of ticket", "how * fly", "how comfortable"),
                synonyms={
                    "economy": ("coach", "economy class", "standard class"),
                    "premium": ("premium economy",),
                    "business": ("business class",),
                },
                hints={"Something more comfortable than the cheapest seats.": ("premium", "business")},
            ),
            Slot(
                "bags",
                ("bags", "luggage", "suitcases", "baggage"),
                ("0", "1", "2"),
                ("{value} bags.", "With {value} bags."),
                cues=("check in", "check anything", "checked", "suitcase", "bring * bag", "carry", "with {value}"),
                synonyms={
                    "0": (
                        "no bags",
                        "no luggage",
                        "no suitcases",
                        "none",
                        "zero",
                        "nothing to check",
                        "hand luggage only",
                        "no checked bags",
                        "no checked luggage",
                        "carry-on only",
                    ),
                    "1": ("one bag", "a bag", "a single bag", "one suitcase", "a suitcase", "one piece"),
                    "2": ("two bags", "two suitcases", "two pieces"),
                },
                hints={"I'll have some luggage.": ("1", "2")},
            ),
        ),
        {
            "origin": "from {value}",
            "destination": "to {value}",
            "day": "on {value}",
            "cabin": "in {value} class",
            "bags": "with {value} bags",
        },
    ),
    "meeting": (
        "schedule_meeting",
        "Please set up a meeting",
        (
            Slot(
                "person",
                ("who", "person", "with whom", "attendee"),
                ("sam", "lee", "ana", "raj", "mia", "noor"),
                ("With {value}.", "It's with {value}."),
                cues=(
                    "meet with",
                    "meeting with",
                    "invite",
                    "participant",
                    "whom",
                    "with {value}",
                    "other side",
                    "joining",
                ),
            ),
            Slot(
                "day",
                ("day", "when", "date"),
                DAYS,
                ("On {value}.", "{value} is best."),
                cues=(*_DAY_CUES, "on {value}"),
                hints=_DAY_HINTS,
            ),
            Slot(
                "start",
                ("time", "start", "what time"),
                ("09:00", "10:00", "11:00", "14:00", "15:00", "16:00"),
                ("At {value}.", "Starting at {value}."),
                cues=(
                    "begin",
                    "kick off",
                    "what hour",
                    "o'clock",
                    "when * start",
                    "when * begin",
                    "at {value}",
                    "morning or afternoon",
                ),
                hints={
                    "In the morning.": ("09:00", "10:00", "11:00"),
                    "In the afternoon.": ("14:00", "15:00", "16:00"),
                },
            ),
            Slot(
                "minutes",
                ("long", "duration", "minutes", "length"),
                ("15", "30", "45", "60"),
                ("{value} minutes.", "It should last {value} minutes."),
                cues=("how long", "how much time", "how many minutes"),
                synonyms={
                    "15": ("a quarter of an hour", "quarter of an hour", "quarter hour", "quarter-hour"),
                    "30": ("half an hour", "half hour", "half-hour"),
                    "45": ("three quarters of an hour", "three-quarters of an hour"),
                    "60": ("an hour", "one hour", "a full hour", "1 hour", "an hour long", "a whole hour"),
                },
                hints={"Something short.": ("15", "30"), "A longer one.": ("45", "60")},
            ),
            Slot(
                "room",
                ("room", "where", "location"),
                ("atlas", "birch", "cedar", "delta"),
                ("In room {value}.", "The {value} room."),
                cues=("venue", "meet in", "where * meet", "in {value}"),
            ),
        ),
        {
            "person": "with {value}",
            "day": "on {value}",
            "start": "at {value}",
            "minutes": "for {value} minutes",
            "room": "in room {value}",
        },
    ),
    "pizza": (
        "order_pizza",
        "I want to order a pizza",
        (
            Slot(
                "size",
                ("size", "how big"),
                ("small", "medium", "large"),
                ("{value}.", "A {value} one."),
                cues=("how large", "what size", "how * big", "how * large", "how hungry"),
                hints={"Not a big one.": ("small", "medium")},
            ),
            Slot(
                "topping",
                ("topping", "toppings", "on it"),
                ("pepperoni", "mushroom", "ham", "olive", "pineapple"),
                ("With {value}.", "{value}, please."),
                cues=(
                    "on top",
                    "on the pizza",
                    "on your pizza",
                    "on * pizza",
                    "put on",
                    "flavour",
                    "flavor",
                    "kind of pizza",
                    "with {value}",
                ),
                synonyms={"mushroom": ("mushrooms",), "olive": ("olives",)},
                hints={"Some meat.": ("pepperoni", "ham"), "Something vegetarian.": ("mushroom", "olive", "pineapple")},
            ),
            Slot(
                "crust",
                ("crust", "base", "dough"),
                ("thin", "thick", "stuffed"),
                ("{value} crust.", "The {value} crust."),
                cues=("bottom", "how thick", "the edge"),
                synonyms={"thin": ("thin-crust",), "thick": ("deep dish", "deep-pan", "deep pan")},
                hints={"A hearty one, not the lightest.": ("thick", "stuffed")},
            ),
            Slot(
                "quantity",
                ("quantity", "how many", "number"),
                ("1", "2", "3", "4"),
                ("{value} of them.", "I need {value}."),
                cues=("how many pizzas", "how many of them", "{value} pizzas", "{value} of them"),
                synonyms={
                    "1": ("one pizza", "a single pizza", "just one", "only one", "one of them"),
                    "2": ("a couple",),
                },
                hints={"Not many.": ("1", "2"), "Enough for a group.": ("3", "4")},
            ),
            Slot(
                "delivery",
                ("delivery", "delivery method", "receive"),
                ("delivered", "collected"),
                ("I want it {value}.", "It will be {value}."),
                cues=("how * get it", "how * get them", "how * get the pizza", "get it to you", "get them to you"),
                synonyms={
                    "delivered": (
                        "delivery",
                        "deliver",
                        "deliver it",
                        "bring it",
                        "bring them",
                        "to your door",
                        "drop it off",
                        "send it",
                        "sent",
                        "delivering",
                    ),
                    "collected": (
                        "pickup",
                        "pick up",
                        "pick it up",
                        "pick them up",
                        "pick-up",
                        "collect",
                        "collection",
                        "takeaway",
                        "take away",
                        "come and get it",
                        "come by",
                        "come get it",
                        "collecting",
                        "picking it up",
                        "picking up",
                    ),
                },
            ),
        ),
        {
            "size": "{value}",
            "topping": "with {value}",
            "crust": "{value} crust",
            "quantity": "{value} of them",
            "delivery": "{value}",
        },
    ),
}


def make_task(difficulty: str, index: int) -> dict[str, Any]:
    """Task ``index`` of a difficulty level (depends on nothing else)."""
    rng = random.Random(f"clarify:{difficulty}:{index}")
    domain = rng.choice(sorted(DOMAINS))
    action, want, slots, phrases = DOMAINS[domain]
    goal = {s.name: rng.choice(s.choices) for s in slots}
    if domain == "flight":
        while goal["destination"] == goal["origin"]:
            goal["destination"] = rng.choice(slots[1].choices)
    hidden_n, volunteer, coop = LEVELS[difficulty]
    hidden = sorted(rng.sample([s.name for s in slots], hidden_n), key=[s.name for s in slots].index)
    stated = [s.name for s in slots if s.name not in hidden]
    parts = [phrases[k].format(value=goal[k]) for k in stated]
    request = f"{want}: {', '.join(parts[:-1])}, and {parts[-1]}." if len(parts) > 1 else f"{want} {parts[0]}."
    return {"id": f"{difficulty}/{index}", "difficulty": difficulty, "domain": domain, "action": action,
            "goal": goal, "hidden": hidden, "request": request, "volunteer_after": volunteer,
            "cooperativeness": coop, "loose": loose_details(difficulty, index, slots, goal, hidden)}  # fmt: skip


def loose_details(difficulty: str, index: int, slots: tuple[Slot, ...], goal: dict[str, str], hidden: list[str]
                  ) -> list[str]:  # fmt: skip
    """The hidden details the user holds loosely (``hard`` only): each hidden detail whose value has a hint that fits
    two or more values is loose with probability 1/2 (seeded per task, apart from the task's own draws)."""
    if difficulty != "hard":
        return []
    rng = random.Random(f"clarify-loose:{difficulty}:{index}")
    by_name = {s.name: s for s in slots}
    loose = []
    for name in hidden:
        fits = [f for f in by_name[name].hints.values() if goal[name] in f]
        if rng.random() < 0.5 and fits and len(fits[0]) >= 2:
            loose.append(name)
    return loose


def parse_call(text: str) -> tuple[str, dict[str, str]] | None:
    """The action call the answer ``text`` gives -> ``(name, {key: value})``; None if it holds no call (or several).

    The call may stand in a sentence, a code fence or bold (``agentgym.grading.answers.find_call``), its values quoted
    or not. A value that names one of its slot's choices in another form comes back as that choice (lower case):
    synonyms of the slot (``pickup`` for ``collected``), any time form (``8pm`` for ``20:00``), number words
    (``six``), weekday abbreviations (``thu``), the slot's own words (``thin crust``) (``agentgym.grading.answers.
    match_choice``); any other value comes back as written, in lower case, and is wrong.

    >>> parse_call("book_table(cuisine='Thai', people=4)")
    ('book_table', {'cuisine': 'thai', 'people': '4'})
    >>> parse_call("Here you go: ```book_table(time=8pm, people=six, day=thu, area=North)```")
    ('book_table', {'time': '20:00', 'people': '6', 'day': 'thursday', 'area': 'north'})
    """
    units = {"minutes": ("minute", "mins", "min"), "people": ("persons", "person", "guests", "pax"),
             "quantity": ("pizzas", "pizza"), "bags": ("bag", "suitcases", "suitcase")}  # fmt: skip
    call = find_call(text)
    if call is None:
        return None
    name, raw = call
    slots = {s.name: s for action, _, domain_slots, _ in DOMAINS.values() if action == name for s in domain_slots}
    args: dict[str, str] = {}
    for key, value in raw.items():
        slot = slots.get(key.lower())
        said = value.strip().lower()
        if slot is not None:
            noise = (slot.name, *slot.aliases, *units.get(slot.name, ()))
            said = match_choice(said, slot.choices, getattr(slot, "synonyms", None), noise) or said
        args[key.lower()] = said
    return name, args


class ClarifyEnv(UserSimEnv):
    """Clarify-v0 (see the module docstring).

    Args:
        difficulty: ``"easy"``, ``"medium"``, ``"hard"`` or ``"mixed"`` (task ``i`` of level ``i % 3``).
        user: ``"scripted"`` or ``"llm"`` (``user_llm``: ``LLMUser`` arguments, ``base_url`` and ``model`` at least).
        user_knobs: overrides of the scripted user's settings for every task (``cooperativeness``,
            ``volunteer_after``, ``patience``), e.g. ``{"cooperativeness": 0.0}`` for a less forgiving user.
        elicit_reward: reward per hidden detail the user states (component ``elicit``).
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": ClarifyOracleAgent, "heuristic": ClarifyHeuristicAgent,
                                           "natural": ClarifyNaturalAgent, "keyword": ClarifyKeywordAgent,
                                           "random": RandomInteractAgent}  # fmt: skip
    choices = ("action", "answer")

    public_args = UserSimEnv.public_args  # ``user_llm`` (a URL, an environment variable) is the operator's

    def __init__(
        self,
        *,
        difficulty: str = "mixed",
        user: str = "scripted",
        user_llm: Mapping[str, Any] | None = None,
        user_knobs: Mapping[str, Any] | None = None,
        elicit_reward: float = 0.1,
        max_turns: int = 12,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(difficulty=difficulty, user=user, user_llm=user_llm, user_knobs=user_knobs,  # type: ignore[arg-type]
                         elicit_reward=elicit_reward, max_turns=max_turns,
                         invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)  # fmt: skip

    def _make_task(self, level: str, index: int) -> dict[str, Any]:
        return make_task(level, index)

    def _make_user(self, task: dict[str, Any]) -> User:
        slots = DOMAINS[task["domain"]][2]
        if self.user_kind == "llm":
            known = "; ".join(f"{k}: {v}" for k, v in task["goal"].items())
            return self._llm_user(f"You want this done: {task['request']} The details you have in mind: {known}.")
        return ScriptedUser(slots, task["goal"], task["request"], loose=task["loose"], **self._knobs(task))

    def _intro(self, task: dict[str, Any]) -> str:
        lines = []
        for action, _, slots, _ in DOMAINS.values():
            params = ", ".join(f"{s.name}: {'|'.join(s.choices)}" for s in slots)
            lines.append(f"{action}({params})")
        return (
            "You help a user get something done. You can do one of these actions, each with every parameter set:\n"
            + "\n".join(lines)
            + "\nThe user's request leaves some details out. Ask the user for what is missing (one question at a "
            "time works best), then give the action as your answer, written like "
            "[answer] book_table(cuisine=thai, area=north, day=friday, time=19:00, people=4)."
        )

    def _gold(self, task: dict[str, Any]) -> dict[str, Any]:
        args = ", ".join(f"{k}={v}" for k, v in task["goal"].items())
        return {"goal": task["goal"], "hidden": task["hidden"], "answer": f"{task['action']}({args})",
                "category": task["difficulty"], "domain": task["domain"], "loose": task["loose"]}  # fmt: skip

    def _answer(self, content: str) -> tuple[dict[str, float], bool, dict[str, Any]]:
        task = self._ep["task"]
        call = parse_call(content)
        if call is None:
            return {}, False, {"answer_error": "not an action call like name(key=value, ...)"}
        name, args = call
        goal = {k: str(v).lower() for k, v in task["goal"].items()}
        wrong = sorted(k for k in goal if args.get(k) != goal[k]) + sorted(set(args) - set(goal))
        success = name == task["action"] and not wrong
        return {}, success, {"wrong_details": wrong, "right_action": name == task["action"]}
