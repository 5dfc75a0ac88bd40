"""Preference-v0: elicit a user's hidden preferences, then recommend one item from a generated catalog.

A task is a catalog of 20-60 hotels, laptops or restaurants (each item an id such as ``H417`` and 8-9 attributes:
categories, yes/no flags and numbers) and a user with hidden preferences: 2-5 *must-haves* (``area: north``,
``price: at most 120 euros``, ``breakfast: with breakfast``) and one *priority*, the number to optimise among the
items that meet them (``highest rating``). The user (``PreferenceUser``, a ``ScriptedUser`` with one slot per
attribute plus ``priority``) states a preference only when asked about it, and understands the ways people ask
(each domain's ``Lexicon``): an attribute by its name or any synonym ("How much memory do you need?" is about the
RAM, "vegan options" about vegetarian dishes), a value list or an either-or ("Which colour: silver, black or
blue?"), a yes/no about one value or about a number ("Is 16 GB of RAM enough?", "Under 1000 euros?", "Is 2 kg too
heavy?" get the truthful yes or no and the must-have), a flag asked either way ("Without a touchscreen?"), the
priority in any wording ("What matters most: price or rating?", "Should I sort by price?", "Cheapest first?"),
indirect questions ("Anything else I should know?": the next preference not told yet) and several questions in one
message (each answered, in one reply). Asked about an attribute it has no must-have on, it says it has no preference
there ("no fixed limit" for a number). A priority confirmed by a yes ("Correct.") counts as drawn out.

The agent talks with ``[action] ...``, queries the catalog with ``[search] <filters>`` (syntax below) and ends with
``[answer] <item id>``. Reward (component ``outcome``): 1.0 for the *best* item (it meets every must-have and is the
unique best on the priority; ``success``), ``acceptable_reward`` (0.5) for an *acceptable* one (meets every must-have
but is not the best on the priority), 0.0 otherwise, plus ``elicit_reward`` per hidden preference drawn out
(``elicit``). Each catalog is generated to need every preference: for each must-have there is a *trap* that meets all
the others and beats the best item on the priority, and an acceptable item beats the best item on every other
number, so neither a skipped must-have nor a wrong priority finds the best item.

Search syntax: filters separated by spaces, ``key=value`` (a listed value, ``yes``/``no`` for flags, a number),
``key!=value``, ``key<=N``, ``key>=N``, ``key<N``, ``key>N``, and ``sort=key`` (ascending) or ``sort=-key``
(descending); ``[search]`` alone lists the whole catalog. At most ``SHOWN`` (10) matches are shown, with how many
matched; an unknown key, value or operator is explained.

Difficulty (``difficulty``, or interleaved per task with ``"mixed"``): ``easy`` (2 must-haves, the opening request
states one, 20-30 items, a cooperative user who volunteers after two off-target messages), ``medium`` (3-4, the
opening states one half the time, 30-45 items, volunteers after four, corrects wrong values half the time), ``hard``
(5, nothing stated, 45-60 items, never volunteers or corrects, and it separates agents by *what* they ask, not how
they word it: two number must-haves are held loosely, so a question about one gets only which way it goes, "I don't
want to spend too much.", or a bare yes/no to a number offered, until a question asks for the limit, "What's the
most you'd pay?"; and the user's patience covers 11 questions, each question of a message counting, so an agent
that asks about every attribute of the catalog and follows up runs out of it on most laptops, while one that asks
what matters, "What else matters to you?", needs at most nine).

Agents: ``oracle`` (privileged), ``heuristic`` (asks about each attribute by name, "Do you have a requirement about
price?", follows up a partial answer with "What is your exact limit on price?", then searches), ``natural`` (the
same strategy, asked the ways people ask: paraphrases, value lists, yes/no about a number, two questions at once)
and ``random``.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/Preference-v0", difficulty="easy")
>>> obs, info = env.reset(options={"task_index": 0})
>>> obs[-1]["content"]
'I need a new laptop with a touchscreen.'
>>> env.step("[action] Do you have a requirement about weight?")[0][-1]["content"]
'At most 2 kg.'
>>> env.step("[search] touchscreen=yes weight<=2 sort=price")[0][-1]["content"].splitlines()[:2]
['6 laptops match, sorted by price (ascending):', 'L631: brand=orion colour=silver price=1510 ram=16 ...']
>>> _, reward, terminated, _, info = env.step("[answer] L631")
>>> reward, terminated, info["verdict"]
(1.0, True, 'best')
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from agentgym.contract import trust
from agentgym.contract.agent import Agent, GoldAgent
from agentgym.envs.user_sim.agents import RandomInteractAgent
from agentgym.envs.user_sim.base import UserSimEnv
from agentgym.envs.user_sim.understanding import INDIRECT, split_clauses
from agentgym.envs.user_sim.users import (
    ACK,
    ALL_TOLD,
    CORRECT,
    GOODBYE,
    NO,
    OFF_TARGET,
    STOP,
    VOLUNTEER,
    YES,
    ScriptedUser,
    Slot,
    User,
    find_word,
)

Message = dict[str, Any]
DIFFICULTIES = ("easy", "medium", "hard")
#: Matches a search shows at most.
SHOWN = 10
#: Partial credit for an acceptable item (the default of ``PreferenceEnv(acceptable_reward=...)``).
ACCEPTABLE_REWARD = 0.5
PRIORITY = "priority"
PRIORITY_QUESTION = "Among the options that fit, what matters most to you?"


@dataclass(frozen=True)
class Level:
    """A difficulty level: must-haves, catalog size, the user's behaviour, the chance the opening states one, how
    many number must-haves the user holds loosely, and its patience (the slots it answers about; None: the
    ``ScriptedUser`` default)."""

    constraints: tuple[int, int]
    items: tuple[int, int]
    volunteer_after: int | None
    cooperativeness: float
    opening: float
    loose: int = 0
    patience: int | None = None


LEVELS: dict[str, Level] = {
    "easy": Level((2, 2), (20, 30), 2, 1.0, 1.0),
    "medium": Level((3, 4), (30, 45), 4, 0.5, 0.5),
    "hard": Level((5, 5), (45, 60), None, 0.0, 0.0, loose=2, patience=11),
}


@dataclass(frozen=True)
class Attribute:
    """One attribute of a catalog's items, and the words people use for it.

    ``kind``: ``category`` (one of ``values``), ``flag`` (yes/no; a must-have reads ``with <phrase>`` or, if
    ``negatable``, ``without <phrase>``) or ``number`` (one of ``values``, a grid; ``better`` says which end is
    better, so a must-have reads ``phrase.format(n=threshold)``, e.g. ``at most {n} euros``, and a priority
    ``soft``, e.g. ``lowest price``; ``unit`` is what the catalog description gives). ``request`` writes it into
    the opening request; ``says`` are the sentences the user states a must-have with.

    The lexicon the user understands questions with: ``aliases`` name the attribute (its key first, then synonyms
    and paraphrases: "memory" and "gb" for ram, "outdoor seating" for a terrace, "vegan" for vegetarian);
    ``vague`` are generic cues that count only when nothing else in the clause names an attribute ("how much" is
    about the price unless the clause names memory); ``units`` follow a number ("16 GB", "4-star", "8 out of
    10"); ``best`` are superlatives that name it as the priority ("cheapest", "best rated") and ``more``
    comparatives that do when a clause weighs two ("Cheaper or better rated?"); ``hint`` is what a user who holds a
    must-have on it loosely (``hard``) says before asked for the exact limit.
    """

    key: str
    kind: Literal["category", "flag", "number"]
    aliases: tuple[str, ...]
    request: str
    values: tuple[Any, ...] = ()
    phrase: str = ""
    negatable: bool = False
    better: Literal["low", "high"] = "high"
    thresholds: tuple[float, ...] = ()
    unit: str = ""
    soft: str = ""
    says: tuple[str, ...] = ()
    vague: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    best: tuple[str, ...] = ()
    more: tuple[str, ...] = ()
    hint: str = ""


@dataclass(frozen=True)
class Domain:
    """A kind of catalog: the item noun, its id letter, the opening request and the attributes."""

    noun: str
    plural: str
    prefix: str
    want: str
    attributes: tuple[Attribute, ...]

    def attribute(self, key: str) -> Attribute:
        return next(a for a in self.attributes if a.key == key)


def span(low: float, high: float, step: float) -> tuple[float, ...]:
    """The grid ``low, low + step, ..., high`` (rounded to 0.1)."""
    return tuple(round(low + i * step, 1) for i in range(round((high - low) / step) + 1))


def fmt(value: Any) -> str:
    """An attribute value as the catalog writes it: ``yes``/``no``, ``120``, ``8.5``.

    >>> fmt(True), fmt(120.0), fmt(8.5), fmt("north")
    ('yes', '120', '8.5', 'north')
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_NUM_SAYS = ("{value}.", "It should be {value}.", "{value}, please.")
_FLAG_SAYS = ("It must come {value}.", "{value}, please.")
_EUROS = ("euros", "euro", "eur", "€")
_CHEAPEST = ("lowest price", "cheapest", "least expensive")
_CHEAPER = ("cheaper", "less expensive", "lower price", "lower prices")
_PRICE = ("price", "budget", "cost", "costs", "spend", "pay", "afford", "expensive", "cheap", "pricey", "euros",
          "euro", "€")  # fmt: skip
_AREA = Attribute("area", "category", ("area", "part of town", "neighbourhood", "neighborhood", "district",
                  "location", "located", "side of town", "part of the city"), "in the {value}",
                  ("north", "south", "east", "west", "centre"), says=("In the {value}.", "The {value}, please."),
                  vague=("where",))  # fmt: skip
_RATING = Attribute("rating", "number", ("rating", "rated", "reviews", "reviewed", "score", "out of 10",
                    "guest rating"), "rated {value}", span(5.0, 9.9, 0.1), "at least {n} out of 10",
                    thresholds=(7, 8), unit="out of 10", soft="highest rating", says=_NUM_SAYS,
                    units=("out of 10", "/10", "/ 10"), best=("highest rating", "highest rated", "best rated",
                    "best-rated", "top rated", "top-rated", "best reviews", "best reviewed", "best-reviewed"),
                    more=("better rated", "better reviews", "better reviewed", "higher rated", "higher rating"),
                    hint="It should be well rated.")  # fmt: skip
_DISTANCE = Attribute("distance", "number", ("distance", "how far", "far", "km", "kilometres", "kilometers", "walk",
                      "walking", "walking distance", "from the centre", "to the centre", "of the centre",
                      "near the centre", "close to the centre", "nearby", "how close", "close by"), "{value}",
                      span(0.1, 6.0, 0.1), "within {n} km", better="low", thresholds=(1, 2, 3),
                      unit="km from the centre", soft="shortest distance", says=_NUM_SAYS,
                      units=("km", "kilometres", "kilometers", "kilometre", "kilometer"),
                      best=("shortest distance", "closest", "nearest", "most central"),
                      more=("closer", "nearer", "more central", "shorter distance"),
                      hint="It shouldn't be too far away.")  # fmt: skip

DOMAINS: dict[str, Domain] = {
    "hotel": Domain("hotel", "hotels", "H", "I'm looking for a hotel", (
        _AREA,
        Attribute("price", "number", (*_PRICE, "a night", "per night", "nightly rate"), "for {value} a night",
                  span(40, 300, 5), "at most {n} euros", better="low", thresholds=(100, 120, 150, 200),
                  unit="euros per night", soft="lowest price", says=_NUM_SAYS, vague=("how much",),
                  units=_EUROS, best=_CHEAPEST, more=_CHEAPER, hint="I don't want to spend too much."),
        Attribute("stars", "number", ("stars", "star", "star rating", "how many stars", "star hotel"),
                  "with {value}", span(1, 5, 1), "at least {n} stars", thresholds=(3, 4), unit="stars",
                  says=_NUM_SAYS, vague=("how many",), units=("stars", "star"),
                  hint="I'd like a decent number of stars."),
        _RATING,
        _DISTANCE,
        Attribute("breakfast", "flag", ("breakfast", "morning meal", "breakfast included"), "{value}",
                  phrase="breakfast", says=_FLAG_SAYS),
        Attribute("pool", "flag", ("pool", "swimming", "swim", "swimming pool"), "{value}", phrase="a pool",
                  says=_FLAG_SAYS),
        Attribute("parking", "flag", ("parking", "car", "park", "parking space", "garage"), "{value}",
                  phrase="parking", says=_FLAG_SAYS),
    )),
    "laptop": Domain("laptop", "laptops", "L", "I need a new laptop", (
        Attribute("brand", "category", ("brand", "make", "manufacturer", "made by", "company"), "made by {value}",
                  ("nova", "zenith", "orion", "vega", "pixel"), says=("A {value}.", "{value}, please.")),
        Attribute("colour", "category", ("colour", "color", "colours", "colors", "finish", "shade"), "in {value}",
                  ("silver", "black", "white", "blue"), says=("In {value}.", "{value}, please.")),
        Attribute("price", "number", _PRICE, "for {value}", span(300, 2500, 10), "at most {n} euros",
                  better="low", thresholds=(800, 1000, 1200, 1500), unit="euros", soft="lowest price",
                  says=_NUM_SAYS, vague=("how much",), units=("euros", "euro", "eur", "€"),
                  best=_CHEAPEST, more=_CHEAPER, hint="I don't want to spend too much."),
        Attribute("ram", "number", ("ram", "memory", "gb", "gigabytes", "gigs", "gig"), "with {value} of ram",
                  (8.0, 16.0, 32.0, 64.0), "at least {n} gb", thresholds=(16, 32), unit="gb", says=_NUM_SAYS,
                  units=("gb", "gigabytes", "gigabyte", "gigs", "gig"), hint="It needs a good amount of memory."),
        Attribute("weight", "number", ("weight", "heavy", "kg", "weigh", "weighs", "light", "lightweight", "kilos",
                  "carry", "portable"), "weighing {value}", span(0.9, 3.0, 0.1), "at most {n} kg", better="low",
                  thresholds=(1.5, 2), unit="kg", soft="lowest weight", says=_NUM_SAYS,
                  units=("kg", "kilos", "kilograms", "kilo"), best=("lowest weight", "lightest"),
                  more=("lighter", "lower weight"),
                  hint="It shouldn't be too heavy."),
        Attribute("battery", "number", ("battery", "battery life", "hours", "unplugged", "on a charge", "charge",
                  "full day", "working day", "all day", "a full working day"),
                  "with {value} of battery life", span(4, 20, 1), "at least {n} hours", thresholds=(8, 10, 12),
                  unit="hours", soft="longest battery life", says=_NUM_SAYS, vague=("how long",),
                  units=("hours", "hour", "hrs", "h"), best=("longest battery life", "longest battery",
                  "longest-lasting", "longest lasting"), more=("longer battery life", "longer battery",
                  "longer-lasting", "longer lasting"), hint="The battery should last a good while."),
        _RATING,
        Attribute("touchscreen", "flag", ("touchscreen", "touch screen", "touch-screen", "touch"), "{value}",
                  phrase="a touchscreen", negatable=True, says=_FLAG_SAYS),
        Attribute("keyboard", "flag", ("keyboard", "backlit", "backlight", "backlighting", "keys", "light up",
                  "lit", "in the dark"), "{value}", phrase="a backlit keyboard", says=_FLAG_SAYS),
    )),
    "restaurant": Domain("restaurant", "restaurants", "R", "Can you recommend a restaurant", (
        Attribute("cuisine", "category", ("cuisine", "kind of food", "type of food", "kind of cuisine",
                  "in the mood for", "kitchen"), "serving {value} food",
                  ("italian", "thai", "indian", "mexican", "greek", "japanese"),
                  says=("{value} food.", "Something {value}."), vague=("food", "eat", "dish", "dishes")),
        _AREA,
        Attribute("price", "number", (*_PRICE, "a head", "per person", "per head"), "for {value} a head",
                  span(10, 80, 1), "at most {n} euros", better="low", thresholds=(25, 30, 40, 50),
                  unit="euros per person", soft="lowest price", says=_NUM_SAYS, vague=("how much",),
                  units=_EUROS, best=_CHEAPEST, more=_CHEAPER, hint="I don't want to spend too much."),
        _RATING,
        _DISTANCE,
        Attribute("terrace", "flag", ("terrace", "outdoor", "outside", "outdoors", "outdoor seating", "al fresco",
                  "sit outside", "patio"), "{value}", phrase="a terrace", negatable=True, says=_FLAG_SAYS),
        Attribute("vegetarian", "flag", ("vegetarian", "veggie", "vegan", "vegan options", "vegetarian options",
                  "vegetarian dishes", "vegetarian food", "vegan food", "meat-free", "meatless", "plant-based"),
                  "{value}", phrase="vegetarian dishes", says=_FLAG_SAYS),
        Attribute("late", "flag", ("late", "open late", "closing time", "late opening", "late at night",
                  "late-night", "close"), "{value}", phrase="late opening", says=_FLAG_SAYS),
    )),
}  # fmt: skip


# -- preferences ---------------------------------------------------------------------------------------------------
def phrase_of(attr: Attribute, value: Any) -> str:
    """How the user states a must-have ``value`` on ``attr`` (the threshold for a number)."""
    if attr.kind == "flag":
        return f"{'with' if value else 'without'} {attr.phrase}"
    if attr.kind == "number":
        return attr.phrase.format(n=fmt(float(value)))
    return str(value)


def satisfies(attr: Attribute, item_value: Any, value: Any) -> bool:
    """Whether ``item_value`` meets the must-have ``value`` on ``attr`` (a number: at most / at least it)."""
    if attr.kind == "number":
        return item_value <= value if attr.better == "low" else item_value >= value
    return bool(item_value == value)


def slots_of(domain: Domain) -> tuple[Slot, ...]:
    """The user's slots: one per attribute (its values are the phrases of every must-have it can hold), then the
    priority."""
    slots = []
    for a in domain.attributes:
        if a.kind == "flag":
            choices = tuple(phrase_of(a, v) for v in (True, False))
        elif a.kind == "number":
            choices = tuple(phrase_of(a, t) for t in a.thresholds)
        else:
            choices = tuple(a.values)
        slots.append(Slot(a.key, a.aliases, choices, a.says))
    softs = tuple(a.soft for a in domain.attributes if a.soft)
    says = ("The {value}, please.", "What I care about most is the {value}.")
    return (*slots, Slot(PRIORITY, (PRIORITY, "matters most", "most important", "optimise", "optimize"), softs, says))


def score(attr: Attribute, value: float) -> float:
    """``value`` as "higher is better" on ``attr``."""
    return -value if attr.better == "low" else value


def query_of(constraints: Mapping[str, Any], domain: Domain, soft: str) -> str:
    """The search query for these must-haves, sorted best first on the priority attribute ``soft``.

    >>> query_of({"area": "north", "price": 120, "breakfast": True}, DOMAINS["hotel"], "rating")
    'area=north price<=120 breakfast=yes sort=-rating'
    """
    parts = []
    for key, value in constraints.items():
        attr = domain.attribute(key)
        op = "=" if attr.kind != "number" else ("<=" if attr.better == "low" else ">=")
        parts.append(f"{key}{op}{fmt(value)}")
    sort = domain.attribute(soft)
    return " ".join([*parts, f"sort={'' if sort.better == 'low' else '-'}{soft}"])


# -- what the user understands ---------------------------------------------------------------------------------------
#: Words that make a clause about the priority: the attributes it names are candidate priorities, not must-haves.
PRIORITY_CUES = ("matters most", "matter most", "most important", "more important", "priority", "priorities",
                 "prioritise", "prioritize", "optimise", "optimize", "sort by", "sort on", "sorted by", "sort them by",
                 "sort the", "rank", "rank them by", "care most", "care about most", "most of all", "above all",
                 "focus on", "value most", "most to you", "top priority")  # fmt: skip
#: Questions that ask for what the user has not said yet, naming no attribute ("anything else I should know?"):
#: ``understanding.INDIRECT`` and the ways a shopper is asked for its must-haves.
INDIRECT_CUES = (*INDIRECT, "requirements", "requirement", "must-haves", "must haves", "must-have", "preferences",
                 "preference", "needs", "looking for", "what do you need", "what would you like", "what do you want",
                 "what matters", "important to you", "i should know", "wishes", "else", "i missed",
                 "we missed")  # fmt: skip
_LIMIT = re.compile(r"\b(most|least|max|maximum|min|minimum|limit|limits|exact|exactly|cap|ceiling|floor|threshold|"
                    r"cut-off|cutoff)\b")  # fmt: skip
_UPPER = re.compile(r"\b(under|below|less than|at most|up to|no more than|not more than|max|maximum|within|"
                    r"cheaper than|lighter than|closer than|fewer than|lower than|or less|or under|or below|tops|"
                    r"at the most)\b")  # fmt: skip
_LOWER = re.compile(r"\b(over|above|more than|at least|minimum|min|or more|or better|or above|plus|higher than|"
                    r"better than|longer than|at the least)\b|\+")  # fmt: skip
_TOO = re.compile(r"\btoo\b|\bnot enough\b")
_ENOUGH = re.compile(r"\b(ok|okay|fine|enough|sufficient|acceptable|alright|all right|work|works|good)\b")
_NEGATE = re.compile(r"\b(without|avoid|no|don't want|do not want|don't need|do not need|rather not|skip|"
                     r"not have|doesn't have|free of)\b")  # fmt: skip
_EITHER = re.compile(r"\b(with or without|or not|whether|requirements?|preferences?|matters?|important|care about|"
                     r"feel about|think about|what about|how about)\b")  # fmt: skip
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven",
                                                   "eight", "nine", "ten", "eleven", "twelve")) if i >= 2}  # fmt: skip
_NUMBER_WORD = re.compile(rf"\b({'|'.join(_NUMBER_WORDS)})\b")
_NUMBER = re.compile(r"(?<![\w./:])(€\s?)?(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(k\b)?")


@dataclass(frozen=True)
class Ask:
    """What one clause of an agent message asks (``question``) or assumes (a statement) about one slot.

    ``values``: the category values, or for the priority the priority phrases, the clause offers (none: an open
    question; one: a yes/no about it; several: a choice). ``flag``: the flag value asked about (None: open, "with
    or without"). ``number``: a number offered, as a point value (``bound`` "") or a bound ("upper": "under 1000
    euros", "lower": "at least 16 GB"); ``too``: asked whether it is too much or too little; ``enough``: asked
    whether a bound would be fine ("Is under 1000 euros ok?": would everything under it do?) rather than whether
    the need lies within it ("Under 1000 euros?"). ``limit``: asks for the exact limit ("what's the most you'd
    pay?")."""

    slot: str
    question: bool
    values: tuple[str, ...] = ()
    flag: bool | None = None
    number: float | None = None
    bound: Literal["upper", "lower", ""] = ""
    too: bool = False
    enough: bool = False
    limit: bool = False


@dataclass(frozen=True)
class Reading:
    """What an agent message asks: the ``asks`` in order of the clauses, and whether a clause asks for anything
    the user has not said yet without naming an attribute (``indirect``)."""

    asks: tuple[Ask, ...]
    indirect: bool


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    slot: str
    kind: Literal["alias", "value", "vague", "best", "more", "priority"]
    text: str


def _words(text: str, phrase: str) -> list[tuple[int, int]]:
    """Where ``phrase`` occurs in ``text`` as whole words (``find_word``'s boundaries)."""
    pattern = rf"(?<![\w-])(?<!\d[:.]){re.escape(phrase)}(?![\w-]|[:.]\d)"
    return [(m.start(), m.end()) for m in re.finditer(pattern, text)]


@dataclass(frozen=True)
class Lexicon:
    """A domain's words: ``(phrase, slot, kind)`` per alias, category value, vague cue, superlative and priority
    cue, longest first. ``read`` turns an agent message into a ``Reading``.

    >>> lex = Lexicon.of(DOMAINS["laptop"])
    >>> [(a.slot, a.number) for a in lex.read("How much memory do you need?").asks]
    [('ram', None)]
    >>> [(a.slot, a.number, a.bound) for a in lex.read("Under 1000 euros? Is 16 GB of RAM enough?").asks]
    [('price', 1000.0, 'upper'), ('ram', 16.0, '')]
    >>> lex.read("What matters most: price or rating?").asks[0].values
    ('lowest price', 'highest rating')
    """

    domain: Domain
    phrases: tuple[tuple[str, str, str], ...]
    units: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, domain: Domain) -> Lexicon:
        phrases: list[tuple[str, str, str]] = []
        units: list[tuple[str, str]] = []
        for a in domain.attributes:
            phrases += [(w, a.key, "alias") for w in a.aliases]
            phrases += [(str(v), a.key, "value") for v in a.values if a.kind == "category"]
            phrases += [(w, a.key, "vague") for w in a.vague]
            if a.soft:
                phrases += [(w, a.key, "best") for w in (a.soft, *a.best)]
                phrases += [(w, a.key, "more") for w in a.more]
            units += [(u, a.key) for u in a.units]
        phrases += [(w, PRIORITY, "priority") for w in PRIORITY_CUES]
        phrases.sort(key=lambda p: (-len(p[0]), p[0]))
        units.sort(key=lambda u: (-len(u[0]), u[0]))
        return cls(domain, tuple(phrases), tuple(units))

    def _hits(self, clause: str) -> list[_Hit]:
        taken: list[_Hit] = []
        used = bytearray(len(clause))  # characters a longer match holds already
        for phrase, slot, kind in self.phrases:  # longest first: "from the centre" beats "centre"
            for start, end in _words(clause, phrase):
                if not any(used[start:end]):
                    used[start:end] = b"\x01" * (end - start)
                    taken.append(_Hit(start, end, slot, kind, phrase))  # type: ignore[arg-type]
        return sorted(taken, key=lambda h: h.start)

    def _numbers(self, clause: str) -> list[tuple[int, int, float, str | None]]:
        """``(start, end, value, attribute named by its unit or None)`` per number of the clause."""
        out = []
        for m in _NUMBER.finditer(clause):
            if clause[max(0, m.start() - 7) : m.start()].endswith("out of "):
                continue
            value = float(m.group(2).replace(",", "")) * (1000 if m.group(3) else 1)
            rest = clause[m.end() :]
            unit = "price" if m.group(1) and any(u == "€" for u, _ in self.units) else None
            for word, key in self.units:
                if re.match(rf"\s?-?\s?{re.escape(word)}(?![\w])", rest):
                    unit = key
                    break
            out.append((m.start(), m.end(), value, unit))
        return out

    def read(self, message: str) -> Reading:
        asks: list[Ask] = []
        indirect = False
        for part in split_clauses(message.replace("\u2019", "'")):  # the shared splitter: clauses, which ask
            clause = _NUMBER_WORD.sub(lambda m: _NUMBER_WORDS[m.group(1)], part.text)  # "a three-star hotel"
            question = part.question
            hits = self._hits(clause)
            weighs = len({h.slot for h in hits if h.kind == "more"}) > 1  # "Cheaper or better rated?"
            if weighs or any(h.kind in ("priority", "best") for h in hits):
                asks.append(self._priority(hits, question))
                continue
            numbers = self._numbers(clause)
            named = [h for h in hits if h.kind in ("alias", "value")]
            order = list(dict.fromkeys([*(h.slot for h in named), *(u for *_, u in numbers if u)]))
            if not order:
                order = [h.slot for h in hits if h.kind == "vague"][:1]
            if not order:
                indirect = indirect or (question and any(_words(clause, w) for w in INDIRECT_CUES))
                continue
            for key in order:
                asks.append(self._ask(key, clause, question, [h for h in hits if h.slot == key], numbers, order))
        return Reading(tuple(asks), indirect)

    def _priority(self, hits: list[_Hit], question: bool) -> Ask:
        softs = []
        for h in hits:
            if h.kind == "priority":
                continue
            attr = self.domain.attribute(h.slot)
            if attr.soft and attr.soft not in softs:
                softs.append(attr.soft)
        return Ask(PRIORITY, question, tuple(softs))

    def _ask(self, key: str, clause: str, question: bool, hits: list[_Hit],
             numbers: list[tuple[int, int, float, str | None]], order: list[str]) -> Ask:  # fmt: skip
        attr = self.domain.attribute(key)
        if attr.kind == "category":
            values = tuple(dict.fromkeys(h.text for h in hits if h.kind == "value"))
            return Ask(key, question, values)
        if attr.kind == "flag":
            first = hits[0].start if hits else 0
            before = clause[:first]
            previous = max((h.end for h in self._hits(before)), default=0)
            if _EITHER.search(clause):
                return Ask(key, question)
            return Ask(key, question, flag=_NEGATE.search(before[previous:]) is None)
        mine = [n for n in numbers if n[3] == key]
        if not mine and sum(self.domain.attribute(k).kind == "number" for k in order) == 1:
            mine = [n for n in numbers if n[3] is None]
        if not mine:
            return Ask(key, question, limit=_LIMIT.search(clause) is not None)
        start, end, value, _ = mine[0]
        near = clause[max(0, start - 16) : start] + " " + clause[end : end + 14]
        after = clause[end : end + 14]
        bound: Literal["upper", "lower", ""] = ""
        if _UPPER.search(near) or re.search(r"^\s?\S*\s?(or less|tops|max)\b", after):
            bound = "upper"
        elif _LOWER.search(near):
            bound = "lower"
        return Ask(
            key,
            question,
            number=value,
            bound=bound,
            too=_TOO.search(clause) is not None,
            enough=_ENOUGH.search(clause) is not None,
        )


NO_PREFERENCE = ("I have no preference there.", "That doesn't matter to me.", "I don't mind either way.")
NO_LIMIT = ("I have no fixed limit there.", "No particular limit there.")
#: What a reply says about a slot the user holds no must-have on, when one message asked about several slots.
NO_PREFERENCE_ON = ("No preference on the {key}.", "The {key} doesn't matter to me.")
NO_LIMIT_ON = ("No fixed limit on the {key}.",)


class PreferenceUser(ScriptedUser):
    """Preference-v0's scripted user: ``ScriptedUser``'s knobs and discipline, with Preference's understanding.

    Each clause of the agent's message is read with the domain's ``Lexicon``; every slot asked about gets a
    truthful sentence, in the order asked, all in one reply (several questions in one message are answered each):

    * a must-have asked openly is stated (``at most 800 euros``, ``with a pool``, ``north``); a yes/no about a
      category value gets "Yes." for the right one and "No." for a wrong one (plus the right value with probability
      ``cooperativeness``); a choice among values ("north or south?") gets the value (after "Neither:" if it was not
      offered); a flag asked either way ("Do you need a pool?", "Without a touchscreen?") gets yes or no and the
      must-have; a number offered ("Under 1000 euros?", "Is 16 GB of RAM enough?", "Is 2 kg too heavy?") gets the
      truthful yes or no given the must-have, and the must-have itself;
    * an attribute without a must-have gets "I have no preference there" ("no fixed limit" for a number);
    * the priority, asked in any wording ("What matters most: price or rating?", "Should I sort by price?",
      "Cheapest first?"), is stated, or confirmed ("Correct.", counted as told);
    * a question that names no attribute but asks for more ("Anything else I should know?") is answered with the
      next must-have (or priority) not told yet;
    * ``loose`` must-haves (numbers, at ``hard``) are held loosely: asked about one, the user says which way it
      goes ("I don't want to spend too much.") or, offered a number, only whether it would do; the exact limit comes
      when a question asks for it ("What's the most you'd pay?", "How much memory at least?").

    Statements that assume a wrong value are corrected with probability ``cooperativeness``; after
    ``volunteer_after`` messages that ask about nothing it holds the user volunteers the next must-have; ``patience``
    counts the slots asked about (a message asking about three costs three), and once it is spent the user says
    goodbye with ``###STOP###``.
    """

    def __init__(
        self,
        domain: Domain,
        constraints: Mapping[str, Any],
        goal: Mapping[str, str],
        request: str,
        *,
        loose: Sequence[str] = (),
        **knobs: Any,
    ) -> None:
        super().__init__(slots_of(domain), goal, request, **knobs)
        unknown = set(loose) - {k for k in constraints if domain.attribute(k).kind == "number"}
        if unknown:
            raise ValueError(f"only number must-haves can be held loosely, not {sorted(unknown)}")
        self.domain = domain
        self.constraints = dict(constraints)
        self.loose = frozenset(loose)
        self.lexicon = Lexicon.of(domain)
        self._says = {s.name: s.says for s in self.slots}
        self.hinted: set[str] = set()
        self._random = random.Random()
        self._spent = 0
        self._idle = 0
        self._opened = False

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        request = self.request.lower()
        self.disclosed = {k for k, v in self.goal.items() if find_word(str(v), request)}
        self.hinted = set()
        self._random = random.Random(seed)
        self._spent = self._idle = 0
        self._opened = False

    def _choose(self, pool: Sequence[str]) -> str:
        return pool[self._random.randrange(len(pool))]

    def _statement(self, key: str) -> str:
        """The sentence stating the must-have (or priority) ``key``; it counts as told."""
        self.disclosed.add(key)
        says = self._says.get(key, ())
        sentence = self._choose(says or ("It's {value}.",)).format(value=self.goal[key])
        return sentence[0].upper() + sentence[1:]

    def _hint(self, key: str) -> str:
        self.hinted.add(key)
        return self.domain.attribute(key).hint

    def _pending(self) -> list[str]:
        return [s.name for s in self.slots if s.name in self.goal and s.name not in self.disclosed]

    def respond(self, dialogue: Sequence[Message], agent_message: str) -> tuple[str, bool]:
        if not self._opened:
            self._opened = True
            return self.request, False
        if self._spent >= self.patience:
            return f"{self._choose(GOODBYE)} {STOP}", True
        reading = self.lexicon.read(agent_message)
        asks = list({a.slot: a for a in reversed(reading.asks)}.values())[::-1]  # first ask per slot
        questions = [a for a in asks if a.question]
        self._spent += max(1, len(questions))
        held = any(a.slot in self.goal for a in asks)
        sentences = [self._answer(a, len(questions) > 1) for a in questions]
        if not questions and reading.indirect:
            nxt = next((k for k in self._pending() if k not in self.hinted), None)
            held = nxt is not None
            if nxt is None:
                sentences.append(self._choose(ALL_TOLD))
            else:
                sentences.append(self._hint(nxt) if nxt in self.loose else self._statement(nxt))
        for a in asks:
            if not a.question and (fix := self._correction(a)):
                sentences.append(fix)
        self._idle = 0 if held else self._idle + 1
        if sentences:
            return " ".join(sentences), False
        if asks:
            return self._choose(ACK), False
        pending = self._pending()
        if self.volunteer_after is not None and self._idle >= self.volunteer_after and pending:
            self._idle = 0
            return self._choose(VOLUNTEER) + _lower_first(self._statement(pending[0])), False
        return self._choose(OFF_TARGET if pending else ALL_TOLD), False

    # -- one slot --------------------------------------------------------------------------------------------------
    def _answer(self, ask: Ask, several: bool) -> str:
        key = ask.slot
        if key == PRIORITY:
            return self._answer_priority(ask)
        attr = self.domain.attribute(key)
        if key not in self.goal:
            if several:
                return self._choose(NO_LIMIT_ON if attr.kind == "number" else NO_PREFERENCE_ON).format(key=key)
            return self._choose(NO_LIMIT if attr.kind == "number" else NO_PREFERENCE)
        if attr.kind == "category":
            value = self.goal[key]
            if len(ask.values) == 1 and not several:
                if ask.values[0] == value:
                    self.disclosed.add(key)
                    return self._choose(YES)
                if self._random.random() < self.cooperativeness:
                    return f"{self._choose(NO)} {self._statement(key)}"
                return self._choose(NO)
            lead = "Neither: " if len(ask.values) > 1 and value not in ask.values else ""
            return lead + (_lower_first(self._statement(key)) if lead else self._statement(key))
        if attr.kind == "flag":
            if ask.flag is None:
                return self._statement(key)
            want = bool(self.constraints[key])
            return f"{'Yes' if ask.flag == want else 'No'}, {_lower_first(self._statement(key))}"
        threshold = float(self.constraints[key])
        if ask.number is None:
            if key in self.loose and key not in self.disclosed and not ask.limit:
                return self._hint(key)
            return self._statement(key)
        fits = _number_fits(attr, threshold, ask)
        if key in self.loose and key not in self.disclosed:
            return f"{'Yes' if fits else 'No'}. {self._hint(key)}"
        return f"{'Yes' if fits else 'No'}, {_lower_first(self._statement(key))}"

    def _answer_priority(self, ask: Ask) -> str:
        soft = self.goal[PRIORITY]
        if len(ask.values) == 1:
            if ask.values[0] == soft:
                self.disclosed.add(PRIORITY)
                return self._choose(YES)
            if self._random.random() < self.cooperativeness:
                return f"{self._choose(NO)} {self._statement(PRIORITY)}"
            return self._choose(NO)
        if len(ask.values) > 1 and soft not in ask.values:
            return "Neither: " + _lower_first(self._statement(PRIORITY))
        return self._statement(PRIORITY)

    def _correction(self, ask: Ask) -> str | None:
        """A correction of a statement that assumes a wrong value (with probability ``cooperativeness``)."""
        key = ask.slot
        if key not in self.goal:
            return None
        if key == PRIORITY:
            wrong = len(ask.values) == 1 and ask.values[0] != self.goal[key]
        else:
            attr = self.domain.attribute(key)
            if attr.kind == "category":
                wrong = len(ask.values) == 1 and ask.values[0] != self.goal[key]
            elif attr.kind == "flag":
                wrong = ask.flag is not None and ask.flag != bool(self.constraints[key])
            else:
                wrong = ask.number is not None and ask.number != float(self.constraints[key])
        if wrong and self._random.random() < self.cooperativeness:
            sentence = self._statement(key)
            return self._choose(CORRECT) + _lower_first(sentence)
        return None


def _number_fits(attr: Attribute, threshold: float, ask: Ask) -> bool:
    """The truthful yes or no to a number offered for ``attr`` whose must-have is ``threshold``: a point value
    ("Is 16 GB enough?") fits when it meets the must-have; a bound in the must-have's direction asked as a need
    ("Under 1000 euros?" for at most 800) when the must-have implies it, asked as good enough ("Is at least 7 out of
    10 fine?" for at least 8) when it implies the must-have; a bound the other way never; "too ..." turns a point
    over."""
    if ask.number is None:
        raise ValueError("no number offered")
    if not ask.bound:
        fits = satisfies(attr, ask.number, threshold)
        return not fits if ask.too else fits
    if (ask.bound == "upper") != (attr.better == "low"):
        return False
    if ask.enough:
        return satisfies(attr, ask.number, threshold)
    return satisfies(attr, threshold, ask.number)


def _lower_first(sentence: str) -> str:
    """``sentence`` continuing a lead-in ("Yes, ..."): its first letter in lower case, except the pronoun I."""
    if re.match(r"I\b", sentence):
        return sentence
    return sentence[:1].lower() + sentence[1:]


# -- tasks ---------------------------------------------------------------------------------------------------------
def _draw(rng: random.Random, attr: Attribute, want: Any | None = None, meet: bool = True) -> Any:
    """A random value of ``attr``; with a must-have ``want``, one that meets it (``meet``) or does not."""
    if attr.kind == "flag":
        return (bool(want) if meet else not want) if want is not None else rng.random() < 0.5
    pool = [v for v in attr.values if want is None or satisfies(attr, v, want) == meet]
    return rng.choice(pool)


def make_task(difficulty: str, index: int) -> dict[str, Any]:
    """Task ``index`` of a difficulty level (depends on nothing else): the catalog, the preferences, the best and
    acceptable ids, the opening request and the user's settings."""
    rng = random.Random(f"preference:{difficulty}:{index}")
    level = LEVELS[difficulty]
    name = rng.choice(sorted(DOMAINS))
    domain = DOMAINS[name]
    soft = rng.choice([a for a in domain.attributes if a.soft])
    others = [a for a in domain.attributes if a is not soft]
    picked = rng.sample(others, rng.randint(*level.constraints))
    constraints: dict[str, Any] = {}
    for a in others:  # domain order
        if a not in picked:
            continue
        if a.kind == "category":
            constraints[a.key] = rng.choice(a.values)
        elif a.kind == "flag":
            constraints[a.key] = not (a.negatable and rng.random() < 0.3)
        else:
            constraints[a.key] = float(rng.choice(a.thresholds))
    soft_grid = sorted(soft.values, key=lambda v: score(soft, v))  # worst first
    n = len(soft_grid)
    best_at = rng.randrange(n // 3, 2 * n // 3)

    def item(meet: Mapping[str, bool]) -> dict[str, Any]:
        return {a.key: _draw(rng, a, constraints.get(a.key), meet.get(a.key, True)) for a in others}

    def soft_value(lo: int, hi: int) -> float:
        return soft_grid[rng.randrange(lo, hi)]

    best = item({})
    best[soft.key] = soft_grid[best_at]
    rival = item({})  # acceptable, and better than the best item on every other number
    rival[soft.key] = soft_value(0, best_at)
    for a in others:
        if a.kind != "number":
            continue
        ok = sorted((v for v in a.values if a.key not in constraints or satisfies(a, v, constraints[a.key])),
                    key=lambda v: score(a, v))  # fmt: skip
        best[a.key] = ok[rng.randrange(max(1, len(ok) // 2))]  # the worse half: room for a better rival
        better = [v for v in ok if score(a, v) > score(a, best[a.key])]
        if better:
            rival[a.key] = rng.choice(better)
    items = [best, rival]
    for _ in range(rng.randint(0, 2)):  # more acceptable items
        extra = item({})
        extra[soft.key] = soft_value(0, best_at)
        items.append(extra)
    for key in constraints:  # a trap per must-have: it misses that one only and beats the best on the priority
        trap = item({key: False})
        trap[soft.key] = soft_value(best_at + 1, n)
        items.append(trap)
    size = rng.randint(*level.items)
    while len(items) < size:
        filler = item({k: rng.random() < 0.6 for k in constraints})
        meets = all(satisfies(domain.attribute(k), filler[k], v) for k, v in constraints.items())
        filler[soft.key] = soft_value(0, best_at) if meets else soft_value(0, n)
        items.append(filler)
    rng.shuffle(items)
    ids = [f"{domain.prefix}{i}" for i in rng.sample(range(100, 1000), len(items))]
    rows = ({"id": i, **{a.key: it[a.key] for a in domain.attributes}} for i, it in zip(ids, items, strict=True))
    catalog = sorted(rows, key=lambda it: it["id"])
    fits = [it for it in catalog if all(satisfies(domain.attribute(k), it[k], v) for k, v in constraints.items())]
    fits.sort(key=lambda it: score(soft, it[soft.key]), reverse=True)
    assert len(fits) >= 2 and score(soft, fits[0][soft.key]) > score(soft, fits[1][soft.key]), "no unique best"
    goal = {k: phrase_of(domain.attribute(k), v) for k, v in constraints.items()} | {PRIORITY: soft.soft}
    stated = rng.choice(sorted(constraints)) if rng.random() < level.opening else None
    request = f"{domain.want}{' ' + domain.attribute(stated).request.format(value=goal[stated]) if stated else ''}."
    if domain.want.startswith("Can"):
        request = request[:-1] + "?"
    numbers = [k for k in constraints if k != stated and domain.attribute(k).kind == "number"]
    loose = sorted(
        random.Random(f"preference-loose:{difficulty}:{index}").sample(numbers, min(level.loose, len(numbers)))
    )
    knobs = {"patience": level.patience} if level.patience is not None else {}
    return {**knobs, "loose": loose,
            "id": f"{difficulty}/{index}", "difficulty": difficulty, "domain": name, "catalog": catalog,
            "constraints": constraints, "soft": soft.key, "goal": goal, "hidden": [k for k in goal if k != stated],
            "best": fits[0]["id"], "acceptable": sorted(it["id"] for it in fits[1:]), "request": request,
            "query": query_of(constraints, domain, soft.key), "volunteer_after": level.volunteer_after,
            "cooperativeness": level.cooperativeness}  # fmt: skip


# -- the catalog ---------------------------------------------------------------------------------------------------
_OP = re.compile(r"^([a-z_]+)(<=|>=|!=|=|<|>)(.+)$")
_TESTS = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
          ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}  # fmt: skip
_BOOL = {"yes": True, "true": True, "no": False, "false": False}


def describe(item: Mapping[str, Any], domain: Domain) -> str:
    """One catalog line: ``H417: area=north price=110 ... breakfast=yes``."""
    return f"{item['id']}: " + " ".join(f"{a.key}={fmt(item[a.key])}" for a in domain.attributes)


def search(catalog: Sequence[Mapping[str, Any]], domain: Domain, query: str) -> str:
    """The catalog's answer to a query (see the module docstring), or an ``Error: ...`` that explains the syntax.

    >>> cat = [{"id": "H100", "area": "north", "price": 90.0, "stars": 3.0, "rating": 8.1, "distance": 1.5,
    ...         "breakfast": True, "pool": False, "parking": True}]
    >>> print(search(cat, DOMAINS["hotel"], "price <= 100, breakfast=yes"))
    1 hotel matches:
    H100: area=north price=90 stars=3 rating=8.1 distance=1.5 breakfast=yes pool=no parking=yes
    >>> print(search(cat, DOMAINS["hotel"], "wifi=yes"))
    Error: unknown attribute 'wifi'; the attributes are area, price, stars, rating, distance, breakfast, pool, parking.
    """
    attrs = {a.key: a for a in domain.attributes}
    syntax = ("write filters as key=value, key!=value, key<=N, key>=N, key<N or key>N, plus sort=key or sort=-key, "
              "separated by spaces, e.g. " + _example(domain))  # fmt: skip
    text = re.sub(r"\s*(<=|>=|!=|=|<|>)\s*", r"\1", query.strip().lower()).replace(",", " ")
    filters: list[tuple[Attribute, str, Any]] = []
    sort: tuple[Attribute, bool] | None = None
    for token in text.split():
        if token == "and":
            continue
        m = _OP.match(token)
        if m is None:
            return f"Error: cannot read {token!r}: {syntax}."
        key, op, raw = m.groups()
        if key == "sort":
            attr = attrs.get(raw.lstrip("-"))
            if op != "=" or attr is None or attr.kind != "number":
                numbers = ", ".join(a.key for a in domain.attributes if a.kind == "number")
                return f"Error: sort takes a number attribute ({numbers}): sort=key ascending, sort=-key descending."
            sort = (attr, raw.startswith("-"))
            continue
        attr = attrs.get(key)
        if attr is None:
            return f"Error: unknown attribute {key!r}; the attributes are {', '.join(attrs)}."
        if attr.kind != "number" and op not in ("=", "!="):
            return f"Error: {key} is not a number: use {key}=value or {key}!=value."
        if attr.kind == "category":
            if raw not in attr.values:
                return f"Error: {key} is one of {', '.join(attr.values)}, not {raw!r}."
            value: Any = raw
        elif attr.kind == "flag":
            if raw not in _BOOL:
                return f"Error: {key} is yes or no, not {raw!r}."
            value = _BOOL[raw]
        else:
            try:
                value = float(raw)
            except ValueError:
                return f"Error: {key} takes a number, not {raw!r} (e.g. {key}<={fmt(attr.thresholds[0])})."
        filters.append((attr, op, value))
    found = [it for it in catalog if all(_TESTS[op](it[a.key], v) for a, op, v in filters)]
    if sort is not None:
        found.sort(key=lambda it: it[sort[0].key], reverse=sort[1])
    if not found:
        return f"No {domain.noun} matches {query.strip()!r}."
    head = f"{len(found)} {domain.noun if len(found) == 1 else domain.plural} match{'es' if len(found) == 1 else ''}"
    if sort is not None:
        head += f", sorted by {sort[0].key} ({'descending' if sort[1] else 'ascending'})"
    if len(found) > SHOWN:
        head += f"; the first {SHOWN} are shown (add filters to narrow it down)"
    return "\n".join([head + ":", *(describe(it, domain) for it in found[:SHOWN])])


def _example(domain: Domain) -> str:
    parts = []
    for a in domain.attributes[:3]:
        if a.kind == "category":
            parts.append(f"{a.key}={a.values[0]}")
        elif a.kind == "flag":
            parts.append(f"{a.key}=yes")
        else:
            parts.append(f"{a.key}{'<=' if a.better == 'low' else '>='}{fmt(a.thresholds[0])}")
    soft = next(a for a in domain.attributes if a.soft)
    return " ".join([*parts, f"sort={'' if soft.better == 'low' else '-'}{soft.key}"])


def catalog_description(domain: Domain, size: int) -> str:
    """The system prompt's description of a catalog: its attributes and the priorities (read by the heuristic)."""
    lines = [f"Attributes of the {size} {domain.plural} (search keys):"]
    for a in domain.attributes:
        if a.kind == "category":
            lines.append(f"- {a.key}: one of {', '.join(a.values)}")
        elif a.kind == "flag":
            lines.append(f"- {a.key}: yes or no")
        else:
            lines.append(f"- {a.key}: number, {fmt(min(a.values))} to {fmt(max(a.values))} {a.unit}")
    lines.append("Priorities (what the user may want to optimise) and their sort keys:")
    for a in domain.attributes:
        if a.soft:
            lines.append(f"* {a.soft}: sort={'' if a.better == 'low' else '-'}{a.key}")
    return "\n".join(lines)


# -- agents --------------------------------------------------------------------------------------------------------
_ID = re.compile(r"\b([A-Za-z]\d{3})\b")
_ATTR_LINE = re.compile(r"^- (\w+): (.*)$")
_SOFT_LINE = re.compile(r"^\* (.+): sort=(-?\w+)$")
_NUMBER_SAID = re.compile(r"\b(at most|at least|within) (\d+(?:\.\d+)?) ([a-z0-9 ]+)")


def question(key: str) -> str:
    """The question the built-in agents ask about an attribute (or the priority)."""
    return PRIORITY_QUESTION if key == PRIORITY else f"Do you have a requirement about {key}?"


def limit_question(key: str) -> str:
    """The follow-up that asks for a number's exact limit (what a loosely held must-have needs)."""
    return f"What is your exact limit on {key}?"


class PreferenceOracleAgent(GoldAgent):
    """Privileged: asks about each preference the opening left out, searches with the gold query, answers the best."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        hidden = self.gold["hidden"]
        if turn < len(hidden):
            key = hidden[turn]
            return f"[action] {limit_question(key) if key in self.gold['loose'] else question(key)}"
        if turn == len(hidden):
            return f"[search] {self.gold['query']}"
        return f"[answer] {self.gold['best']}"


@dataclass
class Catalog:
    """What a non-privileged agent reads from the system prompt: each attribute's kind and values (a category) or
    the first word of its unit (a number), each number's range, and the priorities with their sort keys."""

    attrs: dict[str, tuple[str, str]]
    softs: dict[str, str]
    ranges: dict[str, tuple[float, float]]

    @classmethod
    def read(cls, system: str) -> Catalog:
        attrs: dict[str, tuple[str, str]] = {}
        softs: dict[str, str] = {}
        ranges: dict[str, tuple[float, float]] = {}
        for line in system.splitlines():
            if m := _ATTR_LINE.match(line):
                desc = m.group(2)
                kind = "category" if desc.startswith("one of") else "flag" if desc == "yes or no" else "number"
                attrs[m.group(1)] = (kind, desc.removeprefix("one of ") if kind == "category" else
                                     desc.split(" ", 4)[-1] if kind == "number" else "")  # fmt: skip
                if kind == "number" and (r := re.match(r"number, (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?)", desc)):
                    ranges[m.group(1)] = (float(r.group(1)), float(r.group(2)))
            elif m := _SOFT_LINE.match(line):
                softs[m.group(1)] = m.group(2)
        return cls(attrs, softs, ranges)

    def stated(self, text: str) -> dict[str, str]:
        """The preferences ``text`` (lower case) states: a value of a category, ``with``/``without`` and a flag's
        name, ``at most``/``at least``/``within`` and a number's unit, a priority's phrase; as query filters."""
        known: dict[str, str] = {}
        for key, (kind, extra) in self.attrs.items():
            if kind == "category":
                found = [v for v in extra.split(", ") if find_word(v, text)]
                if len(found) == 1:
                    known[key] = f"{key}={found[0]}"
            elif kind == "flag" and find_word(key, text):
                known[key] = f"{key}={'no' if find_word('without', text) else 'yes'}"
        units = {extra.split()[0]: key for key, (kind, extra) in self.attrs.items() if kind == "number"}
        for how, number, rest in _NUMBER_SAID.findall(text):
            key = next((k for unit, k in units.items() if rest.startswith(unit)), None)
            if key is not None:
                known[key] = f"{key}{'>=' if how == 'at least' else '<='}{number}"
        for phrase, sort in self.softs.items():
            if find_word(phrase, text):
                known[PRIORITY] = f"sort={sort}"
        return known


#: What a reply says when the user holds no must-have on what was asked.
_NONE_SAID = re.compile(r"no preference|doesn't matter|don't mind|no fixed limit|no particular limit")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _search_or_answer(known: dict[str, str], results: str | None) -> str | None:
    if results is not None:
        ids = _ID.findall(results)
        return f"[answer] {ids[0] if ids else 'none'}"
    return None


class PreferenceHeuristicAgent(Agent):
    """Not privileged. Reads the attributes and priorities from the system prompt, takes every preference the user's
    messages state (``Catalog.stated``), asks about each attribute and the priority still unknown by name ("Do you
    have a requirement about price?"), asks for the exact limit when the answer only says which way it goes ("I
    don't want to spend too much."), then searches with what it learnt, sorted by the priority, and answers the top
    match."""

    name = "heuristic"
    #: Whether to ask for the exact limit after a partial answer.
    follow_up: ClassVar[bool] = True

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        catalog = Catalog.read(str(messages[0].get("content") or ""))
        keys = [*catalog.attrs, PRIORITY]
        known: dict[str, str] = {}  # key -> query filter, or "" for no preference
        vague: set[str] = set()  # answered only which way it goes: ask for the limit
        asked: str | None = None
        results: str | None = None
        for m in messages[1:]:
            text = str(m.get("content") or "").lower()
            if m.get("role") == "assistant":
                asked = next((k for k in keys if question(k).lower() in text or limit_question(k).lower() in text),
                             None)  # fmt: skip
                followed = asked is not None and limit_question(asked).lower() in text
                results = "" if "[search]" in text else None
                continue
            if results is not None:  # the catalog's answer, not the user's
                results = str(m.get("content") or "")
                continue
            known.update(catalog.stated(text))
            if asked is not None and asked not in known:
                if (_NONE_SAID.search(text) or followed or not self.follow_up
                        or catalog.attrs.get(asked, ("",))[0] != "number"):  # fmt: skip
                    known[asked] = ""
                else:
                    vague.add(asked)
            asked = None
        if (answer := _search_or_answer(known, results)) is not None:
            return answer
        follow = [k for k in vague if k not in known]
        if follow:
            return f"[action] {limit_question(follow[0])}"
        missing = [k for k in keys if k not in known]
        if missing:
            return f"[action] {question(missing[0])}"
        filters = [f for k, f in known.items() if f and k != PRIORITY]
        return f"[search] {' '.join([*filters, known[PRIORITY]]).strip()}"


@dataclass(frozen=True)
class Phrasing:
    """How ``natural`` asks about one attribute: ``asks`` (styles it rotates through: a paraphrase without the
    attribute's name, a value list with ``{values}``, a yes/no about a number ``{n}``), ``limit`` (the follow-up
    asking for the exact limit), ``noun`` (a flag's name in a question about two flags) and ``names`` (words every
    question about it holds: how the agent tells what it asked)."""

    asks: tuple[str, ...]
    names: tuple[str, ...]
    limit: str = ""
    noun: str = ""


PHRASINGS: dict[str, Phrasing] = {
    "area": Phrasing(("Which part of town would you like to be in?", "Which part of town: {values}?"),
                     ("part of town",)),
    "cuisine": Phrasing(("What kind of food are you in the mood for?", "What food would you like: {values}?"),
                        ("food",)),
    "brand": Phrasing(("Which make do you prefer?", "Any make you prefer: {values}?"), ("make",)),
    "colour": Phrasing(("What should it look like: {values}?", "Any colour you'd like?"), ("look like", "colour")),
    "price": Phrasing(("What's your budget?", "Would {n} euros be ok?", "How much would you like to spend?"),
                      ("budget", "spend", "euros", "pay"), "What's the most you'd pay?"),
    "stars": Phrasing(("How many stars should it have?", "Would {n} stars be enough?"), ("stars", "star"),
                      "How many stars at least?"),
    "rating": Phrasing(("How well reviewed should it be?", "Would {n} out of 10 be good enough?"),
                       ("reviewed", "out of 10", "rated"), "How well rated should it be, at least?"),
    "distance": Phrasing(("How far from the centre can it be?", "Is {n} km from the centre ok?"),
                         ("from the centre", "far"), "How far from the centre at most?"),
    "ram": Phrasing(("How much memory do you need?", "Would {n} GB of memory be enough?"), ("memory",),
                    "How much memory at least?"),
    "weight": Phrasing(("How heavy can it be?", "Is {n} kg too heavy?"), ("heavy", "weigh"),
                       "What's the most it can weigh?"),
    "battery": Phrasing(("How long should the battery last?", "Would {n} hours of battery be enough?"),
                        ("battery",), "How many hours of battery at least?"),
    "breakfast": Phrasing(("Would you like breakfast included?", "With or without breakfast?"), ("breakfast",),
                          noun="breakfast"),
    "pool": Phrasing(("Do you want to be able to swim?", "Should there be a pool?"), ("swim", "pool"), noun="a pool"),
    "parking": Phrasing(("Will you need somewhere to park?", "Do you need parking?"), ("park", "parking"),
                        noun="parking"),
    "touchscreen": Phrasing(("Do you want to use it by touch?", "With or without a touchscreen?"),
                            ("touch", "touchscreen"), noun="a touchscreen"),
    "keyboard": Phrasing(("Should the keys light up?", "Do you need a backlit keyboard?"), ("keys", "keyboard"),
                         noun="a backlit keyboard"),
    "terrace": Phrasing(("Would you like to sit outside?", "Do you need outdoor seating?"),
                        ("outside", "outdoor seating"), noun="outdoor seating"),
    "vegetarian": Phrasing(("Do you need vegan options?", "Should they have vegetarian dishes?"),
                           ("vegan", "vegetarian"), noun="vegan options"),
    "late": Phrasing(("Will you be eating late?", "Should it be open late?"), ("late",), noun="late opening"),
    PRIORITY: Phrasing(("What matters most to you: {softs}?", "Should I sort by {keys}?"),
                       ("matters most", "sort by")),
}  # fmt: skip


def _listing(words: Sequence[str]) -> str:
    """``a, b or c``."""
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else "".join(words)


class PreferenceNaturalAgent(Agent):
    """Not privileged. ``heuristic``'s strategy (every attribute in catalog order, then the priority; a follow-up for
    the exact limit when an answer only says which way a number goes; then search and answer the top match), asked
    the ways people ask (``PHRASINGS``, rotating: paraphrases without the attribute's name, value lists, a yes/no
    about a number from the middle of the catalog's range; two flags in one question every so often), and reading
    the answers sentence by sentence in every form the user gives them (a value, a limit, "Yes, it must come with
    a pool", "No fixed limit on the price", a priority)."""

    name = "natural"

    def _question(self, catalog: Catalog, key: str, turn: int) -> str:
        phrasing = PHRASINGS[key]
        style = phrasing.asks[(turn + len(key)) % len(phrasing.asks)]
        if key == PRIORITY:
            keys = [sort.lstrip("-") for sort in catalog.softs.values()]
            return style.format(softs=_listing([f"the {s}" for s in catalog.softs]), keys=_listing(keys))
        kind, extra = catalog.attrs[key]
        if kind == "category":
            return style.format(values=_listing(extra.split(", ")))
        if kind == "number":
            low, high = catalog.ranges.get(key, (1.0, 10.0))
            step = 10 ** max(0, len(str(int(high - low))) - 2) if high - low >= 10 else 1
            return style.format(n=fmt(round((low + high) / 2 / step) * step))
        return style

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        catalog = Catalog.read(str(messages[0].get("content") or ""))
        keys = [k for k in [*catalog.attrs, PRIORITY] if k in PHRASINGS]
        known: dict[str, str] = {}
        vague: set[str] = set()
        asked: list[str] = []
        followed = False
        results: str | None = None
        turns = 0
        for m in messages[1:]:
            text = str(m.get("content") or "").lower()
            if m.get("role") == "assistant":
                turns += 1
                asked = [k for k in keys if any(find_word(w, text) for w in PHRASINGS[k].names)]
                followed = any(PHRASINGS[k].limit and PHRASINGS[k].limit.lower() in text for k in asked)
                results = "" if "[search]" in text else None
                continue
            if results is not None:
                results = str(m.get("content") or "")
                continue
            for sentence in _SENTENCE.split(text):
                stated = catalog.stated(sentence)
                if _NONE_SAID.search(sentence):
                    named = [k for k in asked if find_word(k, sentence)]
                    for k in named or (asked if len(asked) == 1 else []):
                        known.setdefault(k, "")
                    continue
                known.update(stated)
            for k in asked:
                if k in known:
                    continue
                if followed or catalog.attrs.get(k, ("",))[0] != "number":
                    known[k] = ""
                else:
                    vague.add(k)
            asked = []
        if (answer := _search_or_answer(known, results)) is not None:
            return answer
        follow = [k for k in keys if k in vague and k not in known]
        if follow:
            return f"[action] {PHRASINGS[follow[0]].limit}"
        missing = [k for k in keys if k not in known]
        if not missing:
            filters = [f for k, f in known.items() if f and k != PRIORITY]
            return f"[search] {' '.join([*filters, known.get(PRIORITY, '')]).strip()}"
        first = missing[0]
        second = missing[1] if len(missing) > 1 else None
        flags = [k for k in (first, second) if k and catalog.attrs.get(k, ("",))[0] == "flag"]
        if len(flags) == 2 and turns % 3 == 1:
            nouns = [PHRASINGS[k].noun for k in flags]
            return f"[action] Do you need {nouns[0]} or {nouns[1]}?"
        if second is not None and second != PRIORITY and turns % 4 == 2:
            return f"[action] {self._question(catalog, first, turns)} {self._question(catalog, second, turns + 1)}"
        return f"[action] {self._question(catalog, first, turns)}"


class PreferenceKeywordAgent(PreferenceHeuristicAgent):
    """``heuristic``'s template alone: asks "Do you have a requirement about <attribute>?" for each attribute and the
    priority, and never follows up (a partial answer counts as no preference). What the keyword heuristic was before
    issue 20; at ``hard`` it misses every loosely held must-have."""

    name = "keyword"
    follow_up = False


_ALL_TOLD = re.compile(r"that's everything|told you all")


class PreferenceFocusedAgent(Agent):
    """Not privileged: asks what matters ("What else matters to you?") until the user has told everything, asks for
    the exact limit after a partial answer (the attribute named by ``PHRASINGS``' words), asks the priority if it
    was not told, then searches and answers the top match. It never asks about an attribute the user has no
    preference on, so it needs one question per preference (plus the follow-ups and one to hear it is all): what
    ``hard``'s patience rewards."""

    name = "focused"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        catalog = Catalog.read(str(messages[0].get("content") or ""))
        numbers = [k for k, (kind, _) in catalog.attrs.items() if kind == "number" and k in PHRASINGS]
        known: dict[str, str] = {}
        vague: list[str] = []
        told = False
        results: str | None = None
        followed: str | None = None  # the number whose limit the last message asked for
        for m in messages[1:]:
            text = str(m.get("content") or "").lower()
            if m.get("role") == "assistant":
                results = "" if "[search]" in text else None
                followed = next((k for k in numbers if PHRASINGS[k].limit.lower() in text), None)
            elif results is not None:
                results = str(m.get("content") or "")
            else:
                stated = catalog.stated(text)
                known.update(stated)
                told = told or _ALL_TOLD.search(text) is not None
                if followed is not None:
                    known.setdefault(followed, "")
                elif not stated and not _NONE_SAID.search(text):  # a partial answer: which way a number goes
                    vague += [k for k in numbers if any(find_word(w, text) for w in PHRASINGS[k].names)]
        if (answer := _search_or_answer(known, results)) is not None:
            return answer
        follow = [k for k in vague if k not in known]
        if follow:
            return f"[action] {PHRASINGS[follow[0]].limit}"
        if not told:
            return "[action] What else matters to you?"
        if PRIORITY not in known:
            return f"[action] {PRIORITY_QUESTION}"
        filters = [f for k, f in known.items() if f and k != PRIORITY]
        return f"[search] {' '.join([*filters, known[PRIORITY]])}"


class PreferenceRandomAgent(RandomInteractAgent):
    """``RandomInteractAgent``'s turns, plus random searches (often the whole catalog) and answers naming a random
    item id seen so far."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        roll = rng.random()
        if roll < 0.15:
            return "[search]" if rng.random() < 0.5 else super().act(messages, info).replace("[action]", "[search]")
        ids = sorted({i.upper() for m in messages if m.get("role") != "assistant"
                      for i in _ID.findall(str(m.get("content") or ""))})  # fmt: skip
        if roll < 0.3 and ids:
            return f"[answer] {ids[int(rng.integers(len(ids)))]}"
        return super().act(messages, info)


# -- the env -------------------------------------------------------------------------------------------------------
class PreferenceEnv(UserSimEnv):
    """Preference-v0 (see the module docstring).

    Args:
        difficulty: ``"easy"``, ``"medium"``, ``"hard"`` or ``"mixed"`` (task ``i`` of level ``i % 3``).
        user: ``"scripted"`` or ``"llm"`` (``user_llm``: ``LLMUser`` arguments, ``base_url`` and ``model`` at least).
        user_knobs: overrides of the scripted user's settings for every task (``cooperativeness``,
            ``volunteer_after``, ``patience``), e.g. ``{"cooperativeness": 0.0}`` for a less forgiving user.
        acceptable_reward: the ``outcome`` of an acceptable item (the best one gets 1.0).
        elicit_reward: reward per hidden preference the user states (component ``elicit``).
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": PreferenceOracleAgent, "heuristic": PreferenceHeuristicAgent,
                                           "natural": PreferenceNaturalAgent, "keyword": PreferenceKeywordAgent,
                                           "focused": PreferenceFocusedAgent,
                                           "random": PreferenceRandomAgent}  # fmt: skip
    choices = ("action", "search", "answer")

    public_args = trust.declare(UserSimEnv.public_args, acceptable_reward=trust.number(-1e6, 1e6))

    def __init__(
        self,
        *,
        difficulty: str = "mixed",
        user: str = "scripted",
        user_llm: Mapping[str, Any] | None = None,
        user_knobs: Mapping[str, Any] | None = None,
        acceptable_reward: float = ACCEPTABLE_REWARD,
        elicit_reward: float = 0.1,
        max_turns: int = 14,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(difficulty=difficulty, user=user, user_llm=user_llm, user_knobs=user_knobs,  # type: ignore[arg-type]
                         elicit_reward=elicit_reward, max_turns=max_turns,
                         invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)  # fmt: skip
        self.acceptable_reward = float(acceptable_reward)

    def _make_task(self, level: str, index: int) -> dict[str, Any]:
        return make_task(level, index)

    def _make_user(self, task: dict[str, Any]) -> User:
        domain = DOMAINS[task["domain"]]
        if self.user_kind == "llm":
            musts = "; ".join(f"{k}: {v}" for k, v in task["goal"].items() if k != PRIORITY)
            return self._llm_user(
                f"You are choosing a {domain.noun}. You open with: {task['request']} Your must-haves: {musts}. "
                f"Among the {domain.plural} that meet them you want the {task['goal'][PRIORITY]}. Share a preference "
                "only when the assistant asks about it; you have no preference on anything else."
            )
        return PreferenceUser(
            domain, task["constraints"], task["goal"], task["request"], loose=task["loose"], **self._knobs(task)
        )

    def _intro(self, task: dict[str, Any]) -> str:
        domain = DOMAINS[task["domain"]]
        return (
            f"You help a user choose a {domain.noun} from a catalog. The user has must-haves on some attributes and "
            f"one priority (what to optimise among the {domain.plural} that meet them); they tell you a preference "
            "only when you ask about it. Ask about the attributes and the priority (one question at a time works "
            f"best), search the catalog, then answer with the id of the single best {domain.noun}, e.g. "
            f"[answer] {task['catalog'][0]['id']}.\n\n{catalog_description(domain, len(task['catalog']))}\n\n"
            "Search syntax: [search] followed by filters separated by spaces: key=value (a listed value; yes or no "
            "for yes/no attributes), key!=value, key<=N, key>=N, key<N, key>N, plus sort=key (ascending) or "
            f"sort=-key (descending). Example: [search] {_example(domain)}. [search] alone lists everything. At "
            f"most {SHOWN} matches are shown."
        )

    def _gold(self, task: dict[str, Any]) -> dict[str, Any]:
        constraints = {k: fmt(v) for k, v in task["constraints"].items()}
        return {"goal": task["goal"], "hidden": task["hidden"], "constraints": constraints, "priority": task["soft"],
                "best": task["best"], "acceptable": task["acceptable"], "query": task["query"],
                "category": task["difficulty"], "domain": task["domain"], "loose": task["loose"]}  # fmt: skip

    def _note_elicited(self, text: str) -> list[str]:
        """Hidden details ``text`` states for the first time, and those the scripted user has just confirmed (a
        "Correct." to "Is the lowest price what matters most?" tells the priority as much as stating it)."""
        new = super()._note_elicited(text)
        if isinstance(self._user, ScriptedUser):
            told = [k for k in self._ep["task"]["goal"] if k in self._user.disclosed and k not in self._ep["elicited"]]
            self._ep["elicited"] += told
            new = [*new, *told]
        return new

    def _search(self, content: str) -> str:
        task = self._ep["task"]
        self._ep.setdefault("queries", []).append(content)
        return search(task["catalog"], DOMAINS[task["domain"]], content)

    def _answer(self, content: str) -> tuple[dict[str, float], bool, dict[str, Any]]:
        task = self._ep["task"]
        by_id = {it["id"]: it for it in task["catalog"]}
        named = sorted({i.upper() for i in _ID.findall(content)} & set(by_id))
        if len(named) != 1:
            why = "no item id of the catalog" if not named else f"several item ids ({', '.join(named)})"
            self._ep["verdict"] = "wrong"
            return {}, False, {"answer_error": f"{why}: answer exactly one id, e.g. {task['best'][0]}123"}
        domain = DOMAINS[task["domain"]]
        item = by_id[named[0]]
        violated = [k for k, v in task["constraints"].items() if not satisfies(domain.attribute(k), item[k], v)]
        verdict = "best" if item["id"] == task["best"] else "acceptable" if not violated else "wrong"
        self._ep["verdict"] = verdict
        components = {"outcome": self.acceptable_reward} if verdict == "acceptable" else {}
        return components, verdict == "best", {"answer_id": item["id"], "verdict": verdict, "violated": violated}

    def _extra_info(self) -> dict[str, Any]:
        return {"queries": list(self._ep.get("queries", []))}

    def _metrics(self, success: bool, simulator_failure: bool) -> dict[str, float]:
        verdict = self._ep.get("verdict")
        extra = {"best": float(verdict == "best"), "acceptable": float(verdict == "acceptable"),
                 "searches": float(self._ep.get("searches", 0))}  # fmt: skip
        return {**super()._metrics(success, simulator_failure), **extra}
