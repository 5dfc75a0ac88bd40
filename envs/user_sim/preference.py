"""Preference-v0: elicit a user's hidden preferences, then recommend one item from a generated catalog.

A task is a catalog of 20-60 hotels, laptops or restaurants (each item an id such as ``H417`` and 8-9 attributes:
categories, yes/no flags and numbers) and a user with hidden preferences: 2-5 *must-haves* (``area: north``,
``price: at most 120 euros``, ``breakfast: with breakfast``) and one *priority*, the number to optimise among the
items that meet them (``highest rating``). The user (``agentgym.envs.user_sim.users.ScriptedUser``, one slot per
attribute plus ``priority``) states a preference only when asked about it: by name ("any requirement about the
price?") or by a yes/no about one of its values ("at most 100 euros?"); asked about an attribute it has no
must-have on, it says it has no preference there.

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
(5, nothing stated, 45-60 items, never volunteers or corrects).

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

from agentgym import trust
from agentgym.agents.base import Agent, GoldAgent
from agentgym.envs.user_sim.agents import RandomInteractAgent
from agentgym.envs.user_sim.base import UserSimEnv
from agentgym.envs.user_sim.users import ScriptedUser, Slot, User, find_word

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
    """A difficulty level: must-haves, catalog size, the user's behaviour, and the chance the opening states one."""

    constraints: tuple[int, int]
    items: tuple[int, int]
    volunteer_after: int | None
    cooperativeness: float
    opening: float


LEVELS: dict[str, Level] = {
    "easy": Level((2, 2), (20, 30), 2, 1.0, 1.0),
    "medium": Level((3, 4), (30, 45), 4, 0.5, 0.5),
    "hard": Level((5, 5), (45, 60), None, 0.0, 0.0),
}


@dataclass(frozen=True)
class Attribute:
    """One attribute of a catalog's items.

    ``kind``: ``category`` (one of ``values``), ``flag`` (yes/no; a must-have reads ``with <phrase>`` or, if
    ``negatable``, ``without <phrase>``) or ``number`` (one of ``values``, a grid; ``better`` says which end is
    better, so a must-have reads ``phrase.format(n=threshold)``, e.g. ``at most {n} euros``, and a priority
    ``soft``, e.g. ``lowest price``; ``unit`` is what the catalog description gives). ``aliases`` name it in a
    question (its key first); ``request`` writes it into the opening request.
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
_AREA = Attribute("area", "category", ("area", "part of town", "neighbourhood", "location", "where"),
                  "in the {value}", ("north", "south", "east", "west", "centre"),
                  says=("In the {value}.", "The {value}, please."))  # fmt: skip
_RATING = Attribute("rating", "number", ("rating", "rated", "reviews", "score", "out of 10"), "rated {value}",
                    span(5.0, 9.9, 0.1), "at least {n} out of 10", thresholds=(7, 8), unit="out of 10",
                    soft="highest rating", says=_NUM_SAYS)  # fmt: skip
_DISTANCE = Attribute("distance", "number", ("distance", "how far", "far", "km", "walk"), "{value}",
                      span(0.1, 6.0, 0.1), "within {n} km", better="low", thresholds=(1, 2, 3),
                      unit="km from the centre", soft="shortest distance", says=_NUM_SAYS)  # fmt: skip

DOMAINS: dict[str, Domain] = {
    "hotel": Domain("hotel", "hotels", "H", "I'm looking for a hotel", (
        _AREA,
        Attribute("price", "number", ("price", "budget", "cost", "how much", "spend", "euros"), "for {value} a night",
                  span(40, 300, 5), "at most {n} euros", better="low", thresholds=(100, 120, 150, 200),
                  unit="euros per night", soft="lowest price", says=_NUM_SAYS),
        Attribute("stars", "number", ("stars", "star", "how many stars"), "with {value}", span(1, 5, 1),
                  "at least {n} stars", thresholds=(3, 4), unit="stars", says=_NUM_SAYS),
        _RATING,
        _DISTANCE,
        Attribute("breakfast", "flag", ("breakfast",), "{value}", phrase="breakfast", says=_FLAG_SAYS),
        Attribute("pool", "flag", ("pool", "swimming"), "{value}", phrase="a pool", says=_FLAG_SAYS),
        Attribute("parking", "flag", ("parking", "car"), "{value}", phrase="parking", says=_FLAG_SAYS),
    )),
    "laptop": Domain("laptop", "laptops", "L", "I need a new laptop", (
        Attribute("brand", "category", ("brand", "make", "manufacturer"), "made by {value}",
                  ("nova", "zenith", "orion", "vega", "pixel"), says=("A {value}.", "{value}, please.")),
        Attribute("colour", "category", ("colour", "color"), "in {value}", ("silver", "black", "white", "blue"),
                  says=("In {value}.", "{value}, please.")),
        Attribute("price", "number", ("price", "budget", "cost", "how much", "spend", "euros"), "for {value}",
                  span(300, 2500, 10), "at most {n} euros", better="low", thresholds=(800, 1000, 1200, 1500),
                  unit="euros", soft="lowest price", says=_NUM_SAYS),
        Attribute("ram", "number", ("ram", "memory", "gb"), "with {value} of ram", (8.0, 16.0, 32.0, 64.0),
                  "at least {n} gb", thresholds=(16, 32), unit="gb", says=_NUM_SAYS),
        Attribute("weight", "number", ("weight", "heavy", "kg"), "weighing {value}", span(0.9, 3.0, 0.1),
                  "at most {n} kg", better="low", thresholds=(1.5, 2), unit="kg", soft="lowest weight",
                  says=_NUM_SAYS),
        Attribute("battery", "number", ("battery", "hours"), "with {value} of battery life", span(4, 20, 1),
                  "at least {n} hours", thresholds=(8, 10, 12), unit="hours", soft="longest battery life",
                  says=_NUM_SAYS),
        _RATING,
        Attribute("touchscreen", "flag", ("touchscreen", "touch screen"), "{value}", phrase="a touchscreen",
                  negatable=True, says=_FLAG_SAYS),
        Attribute("keyboard", "flag", ("keyboard", "backlit"), "{value}", phrase="a backlit keyboard",
                  says=_FLAG_SAYS),
    )),
    "restaurant": Domain("restaurant", "restaurants", "R", "Can you recommend a restaurant", (
        Attribute("cuisine", "category", ("cuisine", "food", "kind of food", "type of food"), "serving {value} food",
                  ("italian", "thai", "indian", "mexican", "greek", "japanese"),
                  says=("{value} food.", "Something {value}.")),
        _AREA,
        Attribute("price", "number", ("price", "budget", "cost", "how much", "spend", "euros"),
                  "for {value} a head", span(10, 80, 1), "at most {n} euros", better="low",
                  thresholds=(25, 30, 40, 50), unit="euros per person", soft="lowest price", says=_NUM_SAYS),
        _RATING,
        _DISTANCE,
        Attribute("terrace", "flag", ("terrace", "outdoor", "outside"), "{value}", phrase="a terrace", negatable=True,
                  says=_FLAG_SAYS),
        Attribute("vegetarian", "flag", ("vegetarian", "veggie", "vegan"), "{value}", phrase="vegetarian dishes",
                  says=_FLAG_SAYS),
        Attribute("late", "flag", ("late", "open late", "closing time"), "{value}", phrase="late opening",
                  says=_FLAG_SAYS),
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
    return {"id": f"{difficulty}/{index}", "difficulty": difficulty, "domain": name, "catalog": catalog,
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


class PreferenceOracleAgent(GoldAgent):
    """Privileged: asks about each preference the opening left out, searches with the gold query, answers the best."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        hidden = self.gold["hidden"]
        if turn < len(hidden):
            return f"[action] {question(hidden[turn])}"
        if turn == len(hidden):
            return f"[search] {self.gold['query']}"
        return f"[answer] {self.gold['best']}"


class PreferenceHeuristicAgent(Agent):
    """Not privileged. Reads the attributes and priorities from the system prompt, takes every preference the user's
    messages state (a value of a category, ``with``/``without`` and a flag's name, ``at most``/``at least``/``within``
    and a number's unit, a priority's phrase), asks about each attribute and the priority still unknown, then
    searches with what it learnt, sorted by the priority, and answers the top match."""

    name = "heuristic"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        attrs: dict[str, tuple[str, str]] = {}  # key -> (kind, values or unit)
        softs: dict[str, str] = {}  # phrase -> sort key
        for line in str(messages[0].get("content") or "").splitlines():
            if m := _ATTR_LINE.match(line):
                desc = m.group(2)
                kind = "category" if desc.startswith("one of") else "flag" if desc == "yes or no" else "number"
                attrs[m.group(1)] = (kind, desc.removeprefix("one of ") if kind == "category" else
                                     desc.split(" ", 4)[-1] if kind == "number" else "")  # fmt: skip
            elif m := _SOFT_LINE.match(line):
                softs[m.group(1)] = m.group(2)
        known: dict[str, str] = {}  # key -> query filter, or "" for no preference
        asked: str | None = None
        results: str | None = None
        for m in messages[1:]:
            text = str(m.get("content") or "").lower()
            if m.get("role") == "assistant":
                asked = next((k for k in [*attrs, PRIORITY] if question(k).lower() in text), None)
                results = "" if "[search]" in text else None
                continue
            if results is not None:  # the catalog's answer, not the user's
                results = str(m.get("content") or "")
                continue
            for key, (kind, extra) in attrs.items():
                if kind == "category":
                    found = [v for v in extra.split(", ") if find_word(v, text)]
                    if len(found) == 1:
                        known[key] = f"{key}={found[0]}"
                elif kind == "flag" and find_word(key, text):
                    known[key] = f"{key}={'no' if find_word('without', text) else 'yes'}"
            units = {extra.split()[0]: key for key, (kind, extra) in attrs.items() if kind == "number"}
            for how, number, rest in _NUMBER_SAID.findall(text):
                key = next((k for unit, k in units.items() if rest.startswith(unit)), None)
                if key is not None:
                    known[key] = f"{key}{'>=' if how == 'at least' else '<='}{number}"
            for phrase, sort in softs.items():
                if find_word(phrase, text):
                    known[PRIORITY] = f"sort={sort}"
            if asked is not None:
                known.setdefault(asked, "")
            asked = None
        if results is not None:
            ids = _ID.findall(results)
            return f"[answer] {ids[0] if ids else 'none'}"
        missing = [k for k in [*attrs, PRIORITY] if k not in known]
        if missing:
            return f"[action] {question(missing[0])}"
        filters = [f for k, f in known.items() if f and k != PRIORITY]
        return f"[search] {' '.join([*filters, known[PRIORITY]]).strip()}"


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
        return ScriptedUser(slots_of(domain), task["goal"], task["request"], **self._knobs(task))

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
                "category": task["difficulty"], "domain": task["domain"]}  # fmt: skip

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
