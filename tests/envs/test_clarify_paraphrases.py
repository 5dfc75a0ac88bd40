"""The paraphrase suite of Clarify's scripted user (issue 20): questions written the ways people ask, each played to a
fresh user, each reply checked against what a truthful user says; plus the issue's false answers as regressions.

For every slot of every domain, on several goals: the keyword form, value lists (with and without the right value,
with and without the slot's name), either-or, yes/no about the right and a wrong value (with a user who corrects and
one who does not), statements assuming a value, hand-written paraphrases without the slot's name (open and yes/no),
indirect questions and two questions in one message. A reply is truthful when it states the right value for an open
or listing question, says yes (and the value) only for the right value and no for a wrong one, and states no detail
it was not asked about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.user_sim.clarify import DOMAINS, ClarifyEnv, make_task
from agentgym.envs.user_sim.users import ScriptedUser, Slot, find_word

#: Hand-written open questions without the slot's name (another wording than the `natural` agent's phrasebook).
OPEN: dict[str, tuple[str, ...]] = {
    "cuisine": ("What would you like to eat?", "What kind of food do you feel like?",
                "Any particular style of cooking?", "What type of place are you thinking of?"),
    "area": ("Which side of town is best?", "Where should the restaurant be located?", "Whereabouts?",
             "What neighborhood?"),
    "day": ("What day suits you?", "Which date works?", "On what day of the week?", "When?"),
    "time": ("What hour should I book?", "How late would you like to eat?", "When will you get there?"),
    "people": ("How many of you are coming?", "What's the party size?", "Table for how many?", "How many guests?"),
    "origin": ("Where does your trip start?", "Which city are you departing from?", "Where are you flying out of?",
               "Where are you leaving from?"),
    "destination": ("Where are you going?", "Where are you headed?", "What city are you flying to?",
                    "Where would you like to travel to?"),
    "cabin": ("Which class do you want to travel in?", "How comfortable do you want to be?", "What fare?"),
    "bags": ("How much luggage will you check?", "Are you checking any bags?", "Do you have anything to check in?"),
    "person": ("Who are you meeting?", "Who should I invite?", "Who's joining?"),
    "start": ("What time should it start?", "When does it begin?", "At what hour should it kick off?"),
    "minutes": ("How long should it be?", "How much time should I block for it?", "What duration?",
                "How many minutes?"),
    "room": ("Which room should I book?", "Where will you meet?", "Which venue?"),
    "size": ("How large should the pizza be?", "How big do you want it?", "What size?", "How hungry are you?"),
    "topping": ("What do you want on it?", "Which toppings?", "What should I put on the pizza?"),
    "crust": ("What kind of base?", "How thick do you like it?", "What sort of dough?"),
    "quantity": ("How many pizzas?", "How many should I order?", "What quantity?"),
    "delivery": ("How do you want to get it?", "How would you like to receive it?"),
}  # fmt: skip
#: Hand-written yes/no questions about one value, in everyday forms: (slot, question, the value it asks about).
YES_NO: tuple[tuple[str, str, str], ...] = (
    ("delivery", "Will you pick it up yourself?", "collected"), ("delivery", "Should we deliver it?", "delivered"),
    ("delivery", "Do you want it brought to your door?", "delivered"), ("time", "Would 8pm work?", "20:00"),
    ("time", "Is half past seven ok?", "19:30"), ("start", "Shall we say 2pm?", "14:00"),
    ("start", "Does 9:00 work?", "09:00"), ("minutes", "Is half an hour enough?", "30"),
    ("minutes", "Should it last an hour?", "60"), ("people", "Is it a table for six?", "6"),
    ("quantity", "Just one pizza?", "1"), ("bags", "Are you travelling with no luggage?", "0"),
    ("day", "Is it on thu?", "thursday"), ("cabin", "Coach?", "economy"), ("area", "Downtown?", "centre"),
    ("crust", "Deep dish?", "thick"), ("topping", "Olives?", "olive"),
    ("destination", "Are you flying to Oslo?", "oslo"), ("origin", "Are you leaving from Oslo?", "oslo"),
    ("cuisine", "Are you in the mood for Thai?", "thai"), ("size", "A large one?", "large"),
)  # fmt: skip
#: Held-out questions: written after the lexicons, to measure coverage (first pass: 42 of 50, then 34 of 38; the
#: misses were fixed in the lexicons and the reader, and the questions kept here): (domain, question, asks).
HELD_OUT: tuple[tuple[str, str, tuple[tuple[str, str | None], ...]], ...] = (
    ('restaurant', 'Got any cravings?', (('cuisine', None),)),
    ('restaurant', 'What cuisine are you after?', (('cuisine', None),)),
    ('restaurant', 'Which type of food would you enjoy tonight?', (('cuisine', None),)),
    ('restaurant', 'Where in town?', (('area', None),)),
    ('restaurant', 'Near which part of the city?', (('area', None),)),
    ('restaurant', 'For which day?', (('day', None),)),
    ('restaurant', 'When are you planning to go?', (('day', None),)),
    ('restaurant', 'What time works for dinner?', (('time', None),)),
    ('restaurant', 'At what time should I reserve?', (('time', None),)),
    ('restaurant', 'Is 7 pm good?', (('time', '19:00'),)),
    ('restaurant', 'How big is your group?', (('people', None),)),
    ('restaurant', 'How many seats do you need?', (('people', None),)),
    ('restaurant', 'Just the four of you?', (('people', '4'),)),
    ('flight', 'What city are you flying out from?', (('origin', None),)),
    ('flight', 'Departing from where?', (('origin', None),)),
    ('flight', "What's your destination?", (('destination', None),)),
    ('flight', 'Which city do you want to go to?', (('destination', None),)),
    ('flight', 'Where do you need to get to?', (('destination', None),)),
    ('flight', 'What day do you want to depart?', (('day', None),)),
    ('flight', 'Economy, premium or business?', (('cabin', None),)),
    ('flight', 'Which seat class?', (('cabin', None),)),
    ('flight', 'How many bags will you bring?', (('bags', None),)),
    ('flight', 'Any checked luggage?', (('bags', None),)),
    ('meeting', 'Who will attend?', (('person', None),)),
    ('meeting', 'With whom are you meeting?', (('person', None),)),
    ('meeting', 'Which day is best for the meeting?', (('day', None),)),
    ('meeting', "What's the start time?", (('start', None),)),
    ('meeting', 'At what time should we begin?', (('start', None),)),
    ('meeting', 'How about 10am?', (('start', '10:00'),)),
    ('meeting', 'How long do you need the room for?', (('minutes', None),)),
    ('meeting', 'What length should the meeting be?', (('minutes', None),)),
    ('meeting', 'Where should it take place?', (('room', None),)),
    ('meeting', 'Which meeting room?', (('room', None),)),
    ('pizza', 'Which size do you want?', (('size', None),)),
    ('pizza', 'Small, medium or large?', (('size', None),)),
    ('pizza', 'What would you like on your pizza?', (('topping', None),)),
    ('pizza', 'Any toppings?', (('topping', None),)),
    ('pizza', 'What crust do you prefer?', (('crust', None),)),
    ('pizza', 'Stuffed crust?', (('crust', 'stuffed'),)),
    ('pizza', 'How many do you need?', (('quantity', None),)),
    ('pizza', 'A couple of pizzas?', (('quantity', '2'),)),
    ('pizza', 'Delivered or collected?', (('delivery', None),)),
    ('pizza', 'Are you collecting it?', (('delivery', 'collected'),)),
    ('pizza', 'Shall we bring it over?', (('delivery', 'delivered'),)),
    ('restaurant', 'Fancy some pasta, Italian style?', (('cuisine', 'italian'),)),
    ('flight', 'Flying out on a Friday?', (('day', 'friday'),)),
    ('meeting', 'Does Monday suit you?', (('day', 'monday'),)),
    ('meeting', "Is Sam the one you're meeting?", (('person', 'sam'),)),
    ('flight', 'Two suitcases, right?', (('bags', '2'),)),
    ('restaurant', 'Up north?', (('area', 'north'),)),
    ('restaurant', 'What sort of food are you thinking?', (('cuisine', None),)),
    ('restaurant', 'Any preference on location?', (('area', None),)),
    ('restaurant', 'What day and time would you like?', (('day', None), ('time', None))),
    ('restaurant', 'How many people will be dining?', (('people', None),)),
    ('restaurant', 'Would six thirty be fine?', (('time', '18:30'),)),
    ('restaurant', "Does 8 o'clock work?", (('time', '20:00'),)),
    ('restaurant', 'Somewhere central?', (('area', 'centre'),)),
    ('restaurant', 'Greek maybe?', (('cuisine', 'greek'),)),
    ('restaurant', 'How many are you, and what do you want to eat?', (('people', None), ('cuisine', None))),
    ('flight', 'Where will you be flying from?', (('origin', None),)),
    ('flight', 'And where to?', (('destination', None),)),
    ('flight', "What's the final destination?", (('destination', None),)),
    ('flight', 'What class of service?', (('cabin', None),)),
    ('flight', 'Will you be checking bags?', (('bags', None),)),
    ('flight', 'On which day do you want to fly?', (('day', None),)),
    ('flight', 'Carry-on only, no checked bags?', (('bags', '0'),)),
    ('flight', 'Business class?', (('cabin', 'business'),)),
    ('flight', 'Where are you flying from and where to?', (('origin', None), ('destination', None))),
    ('meeting', "Who's the meeting with?", (('person', None),)),
    ('meeting', 'What time should I schedule it for?', (('start', None),)),
    ('meeting', 'How long will the meeting last?', (('minutes', None),)),
    ('meeting', 'Where do you want to hold it?', (('room', None),)),
    ('meeting', 'Just a quick 15 minutes?', (('minutes', '15'),)),
    ('meeting', 'Does 3pm work for you?', (('start', '15:00'),)),
    ('meeting', 'Should I book the Cedar room?', (('room', 'cedar'),)),
    ('meeting', 'What day should I put it on?', (('day', None),)),
    ('meeting', 'Who with, and on which day?', (('person', None), ('day', None))),
    ('pizza', 'What size pizza?', (('size', None),)),
    ('pizza', 'What toppings would you like?', (('topping', None),)),
    ('pizza', 'Which crust?', (('crust', None),)),
    ('pizza', 'How many pizzas should I get?', (('quantity', None),)),
    ('pizza', 'Delivery or pick-up?', (('delivery', None),)),
    ('pizza', 'Should it be delivered?', (('delivery', 'delivered'),)),
    ('pizza', 'Just a small one?', (('size', 'small'),)),
    ('pizza', 'Pineapple on it?', (('topping', 'pineapple'),)),
    ('pizza', 'What crust and what size?', (('crust', None), ('size', None))),
    ('pizza', 'Three pizzas?', (('quantity', '3'),)),
    ('pizza', 'Will you come by to get it?', (('delivery', 'collected'),)),
)  # fmt: skip

_YES = re.compile(r"^(yes|correct)\b")
_NO = re.compile(r"^(no\b|that's not it)")


@dataclass(frozen=True)
class Case:
    """One question to a fresh user holding ``goal``: the slots it asks about and the truthful answer for each
    (``state``: the value; ``yes``/``no``: a yes/no question about ``asked``'s value; ``ack``: nothing to state)."""

    domain: str
    goal: tuple[tuple[str, str], ...]
    question: str
    style: str
    expect: tuple[tuple[str, str], ...]
    cooperativeness: float = 1.0
    asked: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


def _listing(values: list[str]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _shared(slots: tuple[Slot, ...], slot: Slot) -> bool:
    return any(set(o.choices) & set(slot.choices) for o in slots if o.name != slot.name)


def cases() -> list[Case]:
    """The suite: every style for every slot, on three goals per domain (the first tasks of each domain)."""
    goals: dict[str, list[dict[str, str]]] = {d: [] for d in DOMAINS}
    index = 0
    while any(len(g) < 3 for g in goals.values()):
        task = make_task("easy", index)
        if len(goals[task["domain"]]) < 3:
            goals[task["domain"]].append(task["goal"])
        index += 1
    out: list[Case] = []
    for domain, goal_list in goals.items():
        slots = DOMAINS[domain][2]
        for goal in goal_list:
            g = tuple(goal.items())

            def add(question: str, style: str, expect: dict[str, str], coop: float = 1.0, **asked: str) -> None:
                out.append(Case(domain, g, question, style, tuple(expect.items()), coop, dict(asked)))  # noqa: B023

            for slot in slots:
                name, value = slot.name, goal[slot.name]
                wrong = [c for c in slot.choices if c != value]
                shared = _shared(slots, slot)
                add(f"What {name} would you like?", "keyword", {name: "state"})
                add(f"Which {name}: {_listing(list(slot.choices))}?", "list", {name: "state"})
                add(f"What {name} would you like ({_listing(list(slot.choices))})?", "list", {name: "state"})
                add(f"Which {name}: {_listing(wrong[:2])}?", "list-without", {name: "state"})
                if not shared:
                    add(f"Would you prefer {_listing([*wrong[:2], value])}?", "list-nameless", {name: "state"})
                    add(f"{wrong[0].capitalize()} or {value}?", "either-or", {name: "state"})
                    add(f"{value.capitalize()} or {wrong[-1]}?", "either-or", {name: "state"})
                add(f"Is the {name} {value}?", "yes/no", {name: "yes"}, item=value)
                add(f"Is the {name} {wrong[0]}?", "yes/no", {name: "no"}, item=wrong[0])
                add(f"Is the {name} {wrong[-1]}?", "yes/no", {name: "no"}, 0.0, item=wrong[-1])
                if not shared:
                    add(f"Would {value} be ok?", "yes/no-nameless", {name: "yes"}, item=value)
                    add(f"Would {wrong[0]} be ok?", "yes/no-nameless", {name: "no"}, 0.0, item=wrong[0])
                add(f"I'll put the {name} down as {wrong[0]}.", "assume", {name: "state"})
                add(f"I'll put the {name} down as {value}.", "assume", {name: "ack"})
                for question in OPEN[name]:
                    add(question, "paraphrase", {name: "state"})
            for name, question, item in YES_NO:
                if name in goal:
                    add(question, "yes/no-paraphrase", {name: "yes" if goal[name] == item else "no"}, item=item)
            for held_domain, question, asks in HELD_OUT:
                if held_domain == domain:
                    expect = {s: "state" if v is None else "yes" if goal[s] == v else "no" for s, v in asks}
                    add(question, "held-out", expect, **{f"item{k}": v for k, (_, v) in enumerate(asks) if v})
            add("Anything else I should know?", "indirect", {slots[0].name: "state"})
            add("Is there anything else?", "indirect", {slots[0].name: "state"})
            first, second = slots[1], slots[3]
            add(f"{OPEN[first.name][0]} And {OPEN[second.name][0].lower()}", "multi",
                {first.name: "state", second.name: "state"})  # fmt: skip
            add(f"What {first.name} and what {second.name} would you like?", "multi",
                {first.name: "state", second.name: "state"})  # fmt: skip
    return out


CASES = cases()


def play(case: Case) -> tuple[str, ScriptedUser]:
    user = ScriptedUser(DOMAINS[case.domain][2], dict(case.goal), "", cooperativeness=case.cooperativeness,
                        volunteer_after=None)  # fmt: skip
    user.reset(seed=len(case.question))
    user.respond([], "")
    reply, done = user.respond([], case.question)
    assert not done
    return reply, user


def truthful(case: Case, reply: str, user: ScriptedUser) -> list[str]:
    """What is wrong with ``reply`` (empty: a truthful answer that states nothing unasked)."""
    goal = dict(case.goal)
    expect = dict(case.expect)
    text = reply.lower()
    wrong: list[str] = []
    for name, how in expect.items():
        said = find_word(goal[name], text) is not None
        if how == "state" and not said:
            wrong.append(f"{name}={goal[name]} not stated")
        if how == "yes" and not (_YES.match(text) and said):
            wrong.append(f"not a yes with {goal[name]}")
        if how == "no" and (not _NO.match(text) or "yes" in text):
            wrong.append("not a no")
        if how == "no" and said != (case.cooperativeness == 1.0):
            wrong.append(f"{name}={goal[name]} {'not ' if case.cooperativeness == 1.0 else ''}stated with the no")
        if how == "ack" and said:
            wrong.append("repeated a value the agent already said")
    slots = {s.name: s for s in DOMAINS[case.domain][2]}
    for name, value in goal.items():
        if name in expect:
            told = {goal[k] for k in expect} | set(case.asked.values())  # asked, or the answer to another question
            others = [c for c in slots[name].choices if c not in told]
            if any(find_word(c, text) for c in others) and "none of those" not in text:
                wrong.append(f"{name}: a value that is not the goal")
            continue
        if find_word(value, text):
            wrong.append(f"leaked {name}={value}")
        if name in user.disclosed:
            wrong.append(f"disclosed {name} unasked")
    return wrong


def test_the_suite_is_a_few_hundred_questions_in_every_style():
    styles = {c.style for c in CASES}
    assert len(CASES) >= 300, len(CASES)
    assert {"keyword", "list", "list-without", "either-or", "yes/no", "paraphrase", "yes/no-paraphrase", "indirect",
            "multi", "assume"} <= styles  # fmt: skip
    for domain, (_, _, slots, _) in DOMAINS.items():  # at least four styles per slot
        for slot in slots:
            per_slot = {c.style for c in CASES if c.domain == domain and slot.name in dict(c.expect)}
            assert len(per_slot) >= 4, (domain, slot.name, per_slot)


@pytest.mark.parametrize("style", sorted({c.style for c in CASES}))
def test_every_question_gets_a_truthful_answer(style):
    """Coverage is 100%: every question of the style is answered truthfully, and nothing unasked is stated."""
    failures = []
    for case in (c for c in CASES if c.style == style):
        reply, user = play(case)
        problems = truthful(case, reply, user)
        if problems:
            failures.append(f"{case.question!r} -> {reply!r}: {problems} (goal {dict(case.goal)})")
    assert not failures, f"{len(failures)} untruthful answers:\n" + "\n".join(failures[:20])


def test_the_checker_catches_untruthful_replies():
    """The truthfulness check itself: a yes to a wrong value, a wrong value, a leak and a silent reply all fail."""
    case = next(c for c in CASES if c.style == "yes/no" and dict(c.expect) == {"crust": "no"})
    _, user = play(case)
    goal = dict(case.goal)
    other = next(c for c in DOMAINS["pizza"][2][2].choices if c != goal["crust"])
    assert truthful(case, "Yes.", user)
    state = Case(case.domain, case.goal, "What crust?", "keyword", (("crust", "state"),))
    assert truthful(state, f"{other} crust.", user)
    assert truthful(state, "I'm not sure what you mean.", user)
    assert truthful(state, f"{goal['crust']} crust. {goal['size']}.", user)  # the size leaked
    assert not truthful(state, f"The {goal['crust']} crust.", user)


# -- the issue's false answers (issue 20, Clarify rows), played in the env -------------------------------------------
def ask(task_id: str, *questions: str) -> tuple[dict[str, str], list[str]]:
    env = ClarifyEnv(difficulty=task_id.split("/")[0])
    _, info = env.reset(options={"task_id": task_id})
    return info["gold"]["goal"], [env.step(f"[action] {q}")[0][-1]["content"] for q in questions]


def test_issue20_is_oslo_your_destination_is_answered_yes():
    goal, [reply] = ask("medium/0", "Is Oslo your destination?")
    assert goal["destination"] == "oslo"
    assert _YES.match(reply.lower()) and "oslo" in reply.lower(), reply  # was "That's not it."


def test_issue20_a_cabin_question_listing_the_values_is_answered_with_the_value():
    goal, [reply] = ask("medium/0", "Which cabin: economy, premium or business?")
    assert goal["cabin"] == "premium"
    assert find_word("premium", reply.lower()) and not _NO.match(reply.lower()), reply  # was "That's not it."


def test_issue20_an_either_or_question_is_not_answered_yes():
    goal, [reply] = ask("hard/4", "Thin or thick crust?")
    assert goal["crust"] == "thin"
    assert reply.lower() != "yes." and find_word("thin", reply.lower()), reply  # was "Yes."


def test_issue20_how_large_is_about_the_size_not_the_value_large():
    goal, replies = ask("hard/4", "How large should the pizza be?", "Small or medium?")
    assert goal["size"] == "medium"
    assert not _NO.match(replies[0].lower()), replies  # was "No, it isn't." (it read "large" as a value)
    assert not any(find_word(c, replies[0].lower()) for c in ("small", "large"))  # at most a partial answer
    assert find_word("medium", replies[1].lower()), replies
    goal, [reply] = ask("easy/0", "How large should the pizza be?")  # a detail held firmly: stated at once
    assert goal["size"] == "large" and find_word("large", reply.lower()), reply


def test_issue20_how_much_time_is_the_duration_not_the_start():
    goal, replies = ask("hard/0", "How much time should I block for it?", "Half an hour or 45 minutes?")
    assert goal["minutes"] == "45" and goal["start"] == "16:00"
    assert "16:00" not in replies[0], replies  # was "At 16:00."
    assert find_word("45", replies[1]), replies


def test_issue20_paraphrases_are_understood():
    goal, [going, pickup] = ask("medium/0", "Where are you going?", "Will you pick it up yourself?")
    assert find_word(goal["destination"], going.lower()), going  # was "I'm not sure what you mean."
    goal, [pickup] = ask("hard/4", "Will you pick it up yourself?")
    assert goal["delivery"] == "collected" and _YES.match(pickup.lower()), pickup


# -- several questions in one message (hypothesis) -----------------------------------------------------------------
_SINGLE = [c for c in CASES if len(c.expect) == 1 and c.style not in ("indirect", "assume") and c.cooperativeness == 1]
_GROUPS = sorted({(c.domain, c.goal) for c in _SINGLE})


@settings(max_examples=300, deadline=None)
@given(group=st.sampled_from(_GROUPS), picks=st.lists(st.integers(0, 10_000), min_size=2, max_size=3),
       joiner=st.sampled_from([" ", " And ", "\n", " Also, "]))  # fmt: skip
def test_several_questions_in_one_message_are_each_answered_truthfully(group, picks, joiner):
    """Any two or three questions of the suite about different details, sent as one message: every detail asked is
    answered with its right value (a yes/no: the value after the yes, or after the no from a user who corrects),
    no other value of those details is stated, and nothing unasked is told."""
    pool = [c for c in _SINGLE if (c.domain, c.goal) == group]
    chosen: list[Case] = []
    for k in picks:
        case = pool[k % len(pool)]
        if all(dict(case.expect).keys() != dict(c.expect).keys() for c in chosen):
            chosen.append(case)
    if len(chosen) < 2:
        return
    expect = {k: v for c in chosen for k, v in c.expect}
    asked = {f"{i}{k}": v for i, c in enumerate(chosen) for k, v in c.asked.items()}
    message = joiner.join(c.question for c in chosen)
    combined = Case(group[0], group[1], message, "multi", tuple((k, "state" if v != "ack" else v)
                                                                 for k, v in expect.items()), 1.0, asked)  # fmt: skip
    reply, user = play(combined)
    assert not truthful(combined, reply, user), (message, reply, truthful(combined, reply, user))
