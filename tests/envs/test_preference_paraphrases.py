"""Preference-v0's scripted user, asked the ways people ask.

A suite generated from the three domains: for every attribute at least four styles (its keyword form, a value list,
a yes/no about one value that is right and one that is wrong, a paraphrase without the attribute's name), plus
either-or questions, numbers offered as a point, a bound or "too much", the priority in any wording, indirect
questions and several questions in one message. Each question goes to a fresh user and comes with what a truthful
user says (computed here from the task's must-haves, not by the user's code); the test checks every reply is
truthful, says every number, flag and value right, and states nothing that was not asked. The issue's Preference
rows (issue 20) are named regressions below.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from agentgym.envs.user_sim.preference import DOMAINS, PRIORITY, Attribute, PreferenceEnv, fmt, make_task
from agentgym.envs.user_sim.users import find_word

Expect = Literal["state", "yes", "no", "none"]

YES_SAID = re.compile(r"^(yes|correct|that's right)\b")
NO_SAID = re.compile(r"^(no\b|neither|that's not it)")
NONE_SAID = re.compile(r"no preference|doesn't matter|don't mind|no fixed limit|no particular limit")
NOT_UNDERSTOOD = re.compile(r"i don't know|not sure what you mean|what do you need to know|something more specific")
LIMIT_SAID = re.compile(r"\b(at most|at least|within) (\d+(?:\.\d+)?) ([a-z0-9 ]+)")

#: Questions about an attribute without its name (or with a synonym the issue lists: "memory" for ram).
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "area": ("Where in town should it be?", "Which part of town would you like?", "Any neighbourhood you prefer?"),
    "cuisine": ("What are you in the mood for?", "What kind of food would you like?", "What do you want to eat?"),
    "brand": ("Which manufacturer do you trust?", "Who should make it?"),
    "colour": ("What color should it be?", "Any finish you like?"),
    "price": ("What's your budget?", "How much would you like to spend?", "How much can you afford?", "How much?"),
    "stars": ("How many stars should it have?", "What star rating do you want?"),
    "rating": ("How well reviewed should it be?", "What score should it have?"),
    "distance": ("How far from the centre can it be?", "How close should it be?", "Is walking distance important?"),
    "ram": ("How much memory do you need?", "How many gigabytes of memory?"),
    "weight": ("How heavy can it be?", "Does it need to be light to carry?", "How portable should it be?"),
    "battery": ("How long should the battery last?", "How many hours unplugged do you need?"),
    "breakfast": ("Do you want your morning meal included?", "Should breakfast be included?"),
    "pool": ("Do you want to be able to swim?", "Should there be a swimming pool?"),
    "parking": ("Will you need somewhere to park?", "Are you coming by car?"),
    "touchscreen": ("Do you want to use it by touch?", "Do you need a touch screen?"),
    "keyboard": ("Should the keys light up?", "Will you type in the dark?"),
    "terrace": ("Would you like to sit outside?", "Do you need outdoor seating?"),
    "vegetarian": ("Do you need vegan options?", "Is meat-free food a must?", "Do you eat vegetarian?"),
    "late": ("Will you be eating late?", "Should it be open late at night?"),
}
#: A flag named as a noun ("Do you need {noun}?"), for either-or and multi-question cases.
NOUNS = {"breakfast": "breakfast", "pool": "a pool", "parking": "parking", "touchscreen": "a touchscreen",
         "keyboard": "a backlit keyboard", "terrace": "outdoor seating", "vegetarian": "vegan options",
         "late": "late opening"}  # fmt: skip
#: Numbers offered: (template, how it is meant): "point" (would an item with X do?), "too" (is X too much/little?),
#: "need" (does the need lie within the bound?), "enough" (would everything within the bound do?).
NUMBER_FORMS: dict[str, tuple[tuple[str, str], ...]] = {
    "price": (("Is {x} euros ok?", "point"), ("Is {x} euros too much?", "too"), ("Under {x} euros?", "need"),
              ("Do you want to stay below {x} euros?", "need"), ("Is anything under {x} euros fine?", "enough"),
              ("€{x} max?", "need")),
    "stars": (("Is a hotel with {x} stars ok?", "point"), ("Are {x} stars too few?", "too"),
              ("At least {x} stars?", "need"), ("Would at least {x} stars be enough?", "enough"),
              ("Is a {x}-star hotel fine?", "point")),
    "rating": (("Is {x} out of 10 good enough?", "point"), ("Is {x} out of 10 too low?", "too"),
               ("At least {x} out of 10?", "need"), ("Is it fine if the rating is at least {x} out of 10?", "enough"),
               ("{x}/10 or better?", "need")),
    "distance": (("Is {x} km from the centre ok?", "point"), ("Is {x} km too far?", "too"),
                 ("Within {x} km?", "need"), ("Would anything within {x} km be fine?", "enough")),
    "ram": (("Is {x} GB of RAM enough?", "point"), ("Is {x} GB too little?", "too"),
            ("Do you need at least {x} GB?", "need"), ("Is at least {x} GB of memory enough?", "enough")),
    "weight": (("Would a {x} kg laptop be ok?", "point"), ("Is {x} kg too heavy?", "too"), ("Under {x} kg?", "need"),
               ("Is anything under {x} kg fine?", "enough")),
    "battery": (("Is {x} hours of battery enough?", "point"), ("Are {x} hours of battery too short?", "too"),
                ("At least {x} hours?", "need"), ("Would at least {x} hours be enough?", "enough")),
}  # fmt: skip


#: The unit each number's must-have is stated in, and a superlative naming each priority.
UNITS = {"price": "euros", "stars": "stars", "rating": "out of 10", "distance": "km", "ram": "gb", "weight": "kg",
         "battery": "hours"}  # fmt: skip
SUPERLATIVES = {"lowest price": "cheapest", "highest rating": "best rated", "shortest distance": "closest",
                "lowest weight": "lightest", "longest battery life": "longest-lasting"}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """A question to a fresh user of task ``(difficulty, index)`` and what a truthful reply says about each slot."""

    task: tuple[str, int]
    style: str
    question: str
    expect: tuple[tuple[str, Expect], ...]
    told: bool = False  # the reply must state the value (after a yes or no)
    indirect: bool = False

    def __str__(self) -> str:
        return f"{self.task[0]}/{self.task[1]} [{self.style}] {self.question!r}"


def _fits(attr: Attribute, threshold: float, x: float, form: str) -> bool:
    """What a truthful yes/no to number ``x`` asked in ``form`` is, given the must-have ``threshold``."""
    low = attr.better == "low"
    meets = x <= threshold if low else x >= threshold
    if form == "point":
        return meets
    if form == "too":
        return not meets
    if form == "enough":
        return meets
    return threshold <= x if low else threshold >= x  # "need": the must-have lies within the bound


def _offers(attr: Attribute, threshold: float) -> list[float]:
    """Numbers to offer: the must-have's own, one on each side of it."""
    step = {"price": threshold / 4, "ram": threshold / 2, "stars": 1, "rating": 1, "distance": 0.5, "weight": 0.3,
            "battery": 2}[attr.key]  # fmt: skip
    return [threshold, round(threshold - step, 1), round(threshold + step, 1)]


def cases_for(difficulty: str, index: int) -> list[Case]:
    task = make_task(difficulty, index)
    domain = DOMAINS[task["domain"]]
    goal, constraints = task["goal"], task["constraints"]
    ref = (difficulty, index)
    out: list[Case] = []

    def add(style: str, question: str, expect: dict[str, Expect], told: bool = False) -> None:
        out.append(Case(ref, style, question, tuple(expect.items()), told))

    for attr in domain.attributes:
        key = attr.key
        held = key in constraints
        plain: Expect = "state" if held else "none"
        add("keyword", f"Do you have a requirement about {key}?", {key: "yes" if held else "none"}
            if attr.kind == "flag" else {key: plain}, told=held)  # fmt: skip
        add("keyword", f"Any preference on the {key}?", {key: "yes" if held else "none"}
            if attr.kind == "flag" else {key: plain}, told=held)  # fmt: skip
        for text in PARAPHRASES[key]:
            if attr.kind == "flag":
                add("paraphrase", text, {key: ("yes" if constraints[key] else "no") if held else "none"}, told=held)
            else:
                add("paraphrase", text, {key: plain})
        if attr.kind == "category":
            values = list(attr.values)
            add("value list", f"Which {key}: {', '.join(values[:-1])} or {values[-1]}?", {key: plain})
            add("value list", f"Would you like {', '.join(values[:-1])} or {values[-1]}?", {key: plain})
            right = goal.get(key, values[0])
            wrong = next(v for v in values if v != right)
            others = [v for v in values if v != right][:2]
            add("either-or", f"{values[0].capitalize()} or {values[1]}?", {key: plain})
            add("either-or", f"{others[0].capitalize()} or {others[1]}?", {key: plain})
            add("yes/no right", f"Is {right} ok?", {key: "yes" if held else "none"})
            add("yes/no right", f"Would {right} be fine for the {key}?", {key: "yes" if held else "none"})
            add("yes/no wrong", f"Would {wrong} be ok?", {key: "no" if held else "none"}, told=held)
        elif attr.kind == "flag":
            noun = NOUNS[key]
            want = constraints.get(key)
            add("either-or", f"With or without {attr.phrase}?", {key: plain})
            add("yes/no", f"Do you need {noun}?", {key: ("yes" if want else "no") if held else "none"}, told=held)
            add("yes/no", f"Without {attr.phrase}?", {key: ("no" if want else "yes") if held else "none"}, told=held)
            add("yes/no", f"Do you want to avoid {noun}?", {key: ("no" if want else "yes") if held else "none"},
                told=held)  # fmt: skip
        else:
            threshold = float(constraints[key]) if held else float(attr.thresholds[0])
            grid = sorted(attr.thresholds)
            add("value list", f"Which limit on the {key}: {', '.join(fmt(float(t)) for t in grid[:-1])} or "
                f"{fmt(float(grid[-1]))} {UNITS[key]}?", {key: plain})  # fmt: skip
            for x in _offers(attr, threshold):
                for template, form in NUMBER_FORMS[key]:
                    question = template.format(x=fmt(x))
                    if not held:
                        add(f"number {form}", question, {key: "none"})
                        continue
                    fits = _fits(attr, threshold, x, form)
                    add(f"number {form}", question, {key: "yes" if fits else "no"}, told=True)
    softs = [a for a in domain.attributes if a.soft]
    soft = goal[PRIORITY]
    by_soft = {a.soft: a for a in softs}
    add("keyword", "What matters most to you?", {PRIORITY: "state"})
    add("keyword", "What is your priority?", {PRIORITY: "state"})
    add("value list", f"What matters most: {', '.join('the ' + a.soft for a in softs)}?", {PRIORITY: "state"})
    add("either-or", f"What matters most: {softs[0].key} or {softs[1].key}?", {PRIORITY: "state"})
    add("either-or", f"Should I sort by {softs[-1].key} or {softs[0].key}?", {PRIORITY: "state"})
    add("yes/no right", f"Should I sort by {by_soft[soft].key}?", {PRIORITY: "yes"})
    add("yes/no right", f"Is the {soft} what matters most?", {PRIORITY: "yes"})
    wrong_soft = next(a for a in softs if a.soft != soft)
    add("yes/no wrong", f"Should I sort by {wrong_soft.key}?", {PRIORITY: "no"}, told=True)
    add("yes/no wrong", f"Is the {wrong_soft.soft} the most important thing?", {PRIORITY: "no"}, told=True)
    add("superlative", f"Do you want the {SUPERLATIVES[soft]} one?", {PRIORITY: "yes"})
    # several questions in one message
    cats = [a for a in domain.attributes if a.kind == "category"]
    nums = [a for a in domain.attributes if a.kind == "number"]
    flags = [a for a in domain.attributes if a.kind == "flag"]
    for one, two in itertools.pairwise(flags):
        add("multi", f"Do you need {NOUNS[one.key]} or {NOUNS[two.key]}?",
            {a.key: "state" if a.key in constraints else "none" for a in (one, two)})  # fmt: skip
    for cat in cats:
        for num in nums[:3]:
            add("multi", f"{PARAPHRASES[cat.key][0]} And {PARAPHRASES[num.key][0][0].lower()}"
                f"{PARAPHRASES[num.key][0][1:]}", {a.key: "state" if a.key in constraints else "none"
                                                    for a in (cat, num)})  # fmt: skip
    add("multi", f"{PARAPHRASES[nums[0].key][0]} What matters most to you?",
        {nums[0].key: "state" if nums[0].key in constraints else "none", PRIORITY: "state"})  # fmt: skip
    for text in ("Anything else I should know?", "Any other requirements?", "Is there something else?"):
        out.append(Case(ref, "indirect", text, (), indirect=True))
    return out


#: Tasks of easy and medium (no must-have held loosely), the three domains each with and without every attribute.
TASKS = [(d, i) for d in ("easy", "medium") for i in range(9)]
CASES = [c for d, i in TASKS for c in cases_for(d, i)]


def _fresh(task: tuple[str, int], **knobs: Any):
    spec = make_task(*task)
    user = PreferenceEnv(user_knobs={"volunteer_after": None, "cooperativeness": 1.0, **knobs})._make_user(spec)
    user.reset(seed=0)
    user.respond([], "")
    return spec, user


def _sentences_about(reply: str, key: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", reply) if find_word(key, s.lower())]


def check_truthful(case: Case, reply: str, spec: dict[str, Any]) -> list[str]:
    """What is wrong with ``reply`` as a truthful, leak-free answer to ``case`` (empty: nothing)."""
    domain = DOMAINS[spec["domain"]]
    goal = {k: v.lower() for k, v in spec["goal"].items()}
    text = reply.lower()
    problems = []
    if NOT_UNDERSTOOD.search(text):
        problems.append("did not understand")
    asked = dict(case.expect)
    stated = {k for k, v in goal.items() if find_word(v, text)}
    # every limit, flag and value the reply states is the must-have's own
    units = {UNITS[a.key].split()[0]: a for a in domain.attributes if a.kind == "number"}
    for how, number, rest in LIMIT_SAID.findall(text):
        attr = next((a for u, a in units.items() if rest.startswith(u)), None)
        if attr is None or goal.get(attr.key) != f"{how} {fmt(float(number))} {rest}".strip()[: len(goal[attr.key])]:
            problems.append(f"states a limit that is not the must-have: {how} {number} {rest}")
    for attr in domain.attributes:
        if attr.kind == "flag":
            for said in (f"with {attr.phrase}", f"without {attr.phrase}"):
                if find_word(said, text) and goal.get(attr.key) != said:
                    problems.append(f"states {said!r}, the must-have is {goal.get(attr.key)!r}")
        if attr.kind == "category":
            for v in attr.values:
                if find_word(v, text) and goal.get(attr.key) != v and not NO_SAID.search(text):
                    problems.append(f"names {v!r} for {attr.key}, the must-have is {goal.get(attr.key)!r}")
    if case.indirect:
        if len(stated - spec_told(spec)) != 1 and not text.startswith(("that's everything", "i think i've told")):
            problems.append(f"an indirect question should draw one detail not told yet, got {sorted(stated)}")
        return problems
    for key in set(stated) - set(asked) - spec_told(spec):
        problems.append(f"leaks {key}")
    several = len(asked) > 1
    for key, expect in asked.items():
        if expect == "state" and key not in stated:
            problems.append(f"should state {key} ({goal.get(key)!r})")
        if expect == "none":
            where = _sentences_about(reply, key) if several else [reply]
            if not any(NONE_SAID.search(s.lower()) for s in where) or (not several and YES_SAID.search(text)):
                problems.append(f"should say there is no preference on {key}")
        if expect == "yes":
            if not YES_SAID.search(text) and key not in stated:
                problems.append(f"should say yes about {key}")
            if NO_SAID.search(text):
                problems.append(f"says no about {key}, the truthful answer is yes")
        if expect == "no" and not NO_SAID.search(text):
            problems.append(f"should say no about {key}")
        if case.told and expect in ("yes", "no") and key not in stated:
            problems.append(f"should state {key} ({goal.get(key)!r}) with its yes or no")
    return problems


def spec_told(spec: dict[str, Any]) -> set[str]:
    """What the opening request states."""
    return {k for k in spec["goal"] if k not in spec["hidden"]}


def test_the_suite_is_large_and_covers_every_style():
    styles = Counter(c.style for c in CASES)
    assert len(CASES) >= 300, len(CASES)
    per_attr: dict[str, set[str]] = {}
    for c in CASES:
        for key, _ in c.expect:
            per_attr.setdefault(key, set()).add(c.style.split()[0] if c.style.startswith("number") else c.style)
    for key, seen in per_attr.items():
        assert len(seen) >= 4, (key, seen)
    assert {"keyword", "paraphrase", "value list", "either-or", "multi", "indirect"} <= set(styles)
    assert styles["yes/no right"] and styles["yes/no wrong"] and styles["number need"] and styles["number too"]


@pytest.mark.slow
def test_every_question_gets_a_truthful_reply_and_nothing_leaks():
    failures = []
    by_style: Counter[str] = Counter()
    for case in CASES:
        spec, user = _fresh(case.task)
        reply, done = user.respond([], case.question)
        assert not done
        problems = check_truthful(case, reply, spec)
        if problems:
            failures.append(f"{case}: {reply!r}: {'; '.join(problems)}")
            by_style[case.style] += 1
    assert not failures, f"{len(failures)} of {len(CASES)} ({dict(by_style)}):\n" + "\n".join(failures[:30])


def test_a_less_cooperative_user_says_no_without_the_value_but_never_yes_to_a_wrong_one():
    for case in CASES:
        if case.style not in ("yes/no wrong", "yes/no right"):
            continue
        spec, user = _fresh(case.task, cooperativeness=0.0)
        reply, _ = user.respond([], case.question)
        relaxed = Case(case.task, case.style, case.question, case.expect, told=False)
        assert not check_truthful(relaxed, reply, spec), (str(case), reply)


# -- the issue's rows (issue 20) -----------------------------------------------------------------------------------
def _ask(task_id: str, question: str, **kwargs: Any) -> tuple[str, dict[str, Any]]:
    env = PreferenceEnv(**kwargs)
    env.reset(options={"task_id": task_id})
    obs, _, _, _, info = env.step(f"[action] {question}")
    return obs[-1]["content"], info


def test_issue_row_outdoor_seating_or_vegan_options():
    """medium/0 holds vegetarian dishes and no terrace requirement; the old user said "I don't know."."""
    reply, info = _ask("medium/0", "Do you need outdoor seating or vegan options?")
    goal = info["gold"]["goal"] if "gold" in info else make_task("medium", 0)["goal"]
    assert goal["vegetarian"] == "with vegetarian dishes" and "terrace" not in goal
    assert "with vegetarian dishes" in reply.lower() and "vegetarian" in info["elicited"]
    terrace = _sentences_about(reply, "terrace")
    assert terrace and NONE_SAID.search(terrace[0].lower()), reply
    assert "don't know" not in reply.lower()


def test_issue_row_how_much_memory_is_about_ram_not_price():
    """hard/0 holds a price limit; "how much" named the price and the old user said "At most 800 euros."."""
    spec = make_task("hard", 0)
    assert spec["constraints"]["price"] == 800 and "ram" not in spec["constraints"]
    reply, info = _ask("hard/0", "How much memory do you need?")
    assert "euro" not in reply.lower() and "price" not in info["elicited"], reply
    assert NONE_SAID.search(reply.lower()), reply
    floor = next(i for i in range(50) if "ram" in make_task("medium", i)["constraints"])  # a task with a RAM floor
    reply, info = _ask(f"medium/{floor}", "How much memory do you need?")
    assert reply.lower().rstrip(".").endswith(make_task("medium", floor)["goal"]["ram"]), reply
    assert "ram" in info["elicited"]


@pytest.mark.parametrize("question", ["Is the lowest price what matters most?", "Should I sort by price?",
                                      "Cheapest first?"])  # fmt: skip
def test_issue_a_confirmed_priority_counts_as_elicited(question):
    """medium/0's priority is the lowest price; confirmed with "Correct."-type replies, the old env did not count
    it as drawn out (no elicit reward)."""
    env = PreferenceEnv(difficulty="medium")
    env.reset(options={"task_index": 0})
    obs, reward, _, _, info = env.step(f"[action] {question}")
    assert YES_SAID.search(obs[-1]["content"].lower()), obs
    assert "priority" in info["elicited"] and info["newly_elicited"] == ["priority"] and reward == pytest.approx(0.1)


def test_numbers_asked_in_any_form_from_the_issue():
    spec = make_task("hard", 0)  # laptop: price at most 800 (held loosely at hard), battery at least 12
    assert spec["goal"]["price"] == "at most 800 euros"
    env = PreferenceEnv(difficulty="hard", user_knobs={"patience": 30})
    env.reset(options={"task_index": 0})
    replies = [
        env.step(f"[action] {q}")[0][-1]["content"]
        for q in ("What's your budget?", "Under 1000 euros?", "Is 16 GB of RAM enough?", "What's the most you'd pay?")
    ]
    assert replies[0] == "I don't want to spend too much."  # held loosely: which way it goes, no number yet
    assert replies[1] == "Yes. I don't want to spend too much."  # at most 800 lies under 1000
    assert NONE_SAID.search(replies[2].lower())  # no RAM floor
    assert replies[3].lower().rstrip(".").endswith("at most 800 euros")


# -- held out: written after the lexicons, to measure coverage -----------------------------------------------------
# Before the fixes they prompted, 52 of these 58 questions (802 of the 863 cases) got truthful replies; the misses:
# "What sort of cuisine?" (read as sorting), "kitchen", "a three-star place", "a full working day", "Cheaper or better
# rated: which do you prefer?", "Is there anything I missed?".
#: (slots, question, form): form "open" (state the must-have, or no preference), "flag+"/"flag-" (a yes/no about
#: having / not having the flag), "point"/"too"/"need"/"enough" (a number ``{x}`` offered, as in NUMBER_FORMS),
#: "soft" (a yes/no about the first slot's priority), "indirect".
HELD_OUT: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("area",), "Which side of town do you want to stay on?", "open"),
    (("area",), "Would you rather be up north or down south?", "open"),
    (("area",), "What location works for you?", "open"),
    (("cuisine",), "What sort of cuisine?", "open"),
    (("cuisine",), "Fancy Italian, or maybe Thai?", "open"),
    (("cuisine",), "Any particular kitchen you like?", "open"),
    (("brand",), "Do you care which company makes it?", "open"),
    (("brand",), "Any brand loyalty?", "open"),
    (("brand",), "Nova or Zenith?", "open"),
    (("colour",), "Black or silver?", "open"),
    (("colour",), "Does the colour matter?", "open"),
    (("colour",), "What colour do you fancy?", "open"),
    (("price",), "How much are you willing to pay?", "open"),
    (("price",), "Is price a concern?", "open"),
    (("price",), "What price range?", "open"),
    (("price",), "Would you pay {x} euros?", "point"),
    (("price",), "Would {x} euros be too expensive?", "too"),
    (("price",), "Shall I keep it below {x} euros?", "need"),
    (("stars",), "How many stars at minimum?", "open"),
    (("stars",), "Do you want a {x}-star hotel?", "point"),
    (("stars",), "Is a three-star place fine?", "open-3"),
    (("rating",), "What rating would you accept?", "open"),
    (("rating",), "Do reviews matter to you?", "open"),
    (("rating",), "Should it have good reviews?", "open"),
    (("rating",), "Is a rating of {x} good enough?", "point"),
    (("distance",), "How close to the centre do you want to be?", "open"),
    (("distance",), "Is {x} km from the centre too far?", "too"),
    (("distance",), "Do you mind walking?", "open"),
    (("ram",), "How much RAM?", "open"),
    (("ram",), "Is {x} GB sufficient?", "point"),
    (("ram",), "Do you need {x} gigs?", "point"),
    (("weight",), "Do you need something light?", "open"),
    (("weight",), "Is weight an issue?", "open"),
    (("weight",), "Is {x} kg acceptable?", "point"),
    (("battery",), "How important is battery life?", "open"),
    (("battery",), "Does it need to last a full working day?", "open"),
    (("battery",), "Is {x} hours of battery fine?", "point"),
    (("pool",), "Is a swimming pool important?", "open"),
    (("pool",), "Are you fine without a pool?", "flag-"),
    (("parking",), "Do you need a place to park your car?", "flag+"),
    (("breakfast",), "Should breakfast be part of the deal?", "flag+"),
    (("touchscreen",), "Do you want a touch display?", "flag+"),
    (("keyboard",), "Do you need a keyboard that lights up?", "flag+"),
    (("terrace",), "Do you want to eat outside?", "flag+"),
    (("vegetarian",), "Any dietary needs, like vegetarian?", "flag+"),
    (("late",), "Do you need it to stay open late?", "flag+"),
    ((PRIORITY,), "What's most important to you?", "open"),
    ((PRIORITY,), "What should I optimise for?", "open"),
    ((PRIORITY,), "How should I rank the options?", "open"),
    (("price", PRIORITY), "Cheaper or better rated: which do you prefer?", "open"),
    (("distance", PRIORITY), "Do you prefer the closest one?", "soft"),
    (("rating", PRIORITY), "Is rating your top priority?", "soft"),
    (("price", PRIORITY), "Should the cheapest come first?", "soft"),
    ((), "Is there anything I missed?", "indirect"),
    ((), "Anything more you'd like?", "indirect"),
    ((), "What are your must-haves?", "indirect"),
    (("price", "area"), "What's your budget and which area?", "open"),
    (("parking", "pool"), "Do you need parking and a pool?", "open"),
)  # fmt: skip


def held_out_cases(difficulty: str, index: int) -> list[Case]:
    task = make_task(difficulty, index)
    domain = DOMAINS[task["domain"]]
    keys = {a.key for a in domain.attributes} | {PRIORITY}
    goal, constraints = task["goal"], task["constraints"]
    out = []
    for slots, text, form in HELD_OUT:
        if not set(slots) <= keys:
            continue
        if form == "indirect":
            out.append(Case((difficulty, index), "held out", text, (), indirect=True))
            continue
        key = slots[0]
        held = key in goal
        if form == "soft":
            soft = domain.attribute(key).soft
            out.append(Case((difficulty, index), "held out", text, ((PRIORITY, "yes" if goal[PRIORITY] == soft
                                                                     else "no"),)))  # fmt: skip
        elif slots[-1] == PRIORITY:  # the priority, asked openly or between two
            out.append(Case((difficulty, index), "held out", text, ((PRIORITY, "state"),)))
        elif form in ("open", "open-3"):
            expect = tuple((k, "state" if k in goal else "none") for k in slots)
            out.append(Case((difficulty, index), "held out", text, expect))  # type: ignore[arg-type]
        elif form in ("flag+", "flag-"):
            want = constraints.get(key)
            yes = want if form == "flag+" else (want is not None and not want)
            out.append(Case((difficulty, index), "held out", text, ((key, ("yes" if yes else "no") if held else
                                                                      "none"),), told=held))  # fmt: skip
        else:
            attr = domain.attribute(key)
            threshold = float(constraints[key]) if held else float(attr.thresholds[0])
            for x in _offers(attr, threshold):
                expect: Expect = ("yes" if _fits(attr, threshold, x, form) else "no") if held else "none"
                out.append(Case((difficulty, index), "held out", text.format(x=fmt(x)), ((key, expect),), told=held))
    return out


HELD_OUT_CASES = [c for d, i in TASKS for c in held_out_cases(d, i)]


@pytest.mark.slow
def test_held_out_questions_get_truthful_replies():
    failures = []
    for case in HELD_OUT_CASES:
        spec, user = _fresh(case.task)
        reply, _ = user.respond([], case.question)
        if problems := check_truthful(case, reply, spec):
            failures.append(f"{case}: {reply!r}: {'; '.join(problems)}")
    assert not failures, f"{len(failures)} of {len(HELD_OUT_CASES)}:\n" + "\n".join(failures[:40])
