"""CustomerService-v0's scripted customer understands the ways people ask (issue 20, "A paraphrase suite").

Questions are generated from the task generator: for every detail a customer can be asked for, at least four styles
(the keyword form, a paraphrase without the detail's name, a request "please share ...", several details in one
message), plus yes/no questions about an order id and statements that ask nothing. Each question goes to a fresh
customer of the task; the reply must state the truthful answer to every detail asked (the truth is read from the task
record here, not from the customer's code) and none of the details that were not asked (the no-leak rule).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from agentgym.envs.user_sim.customer_service import CustomerUser, details_asked
from agentgym.envs.user_sim.service_world import DIFFICULTIES, make_task, order_ids_in

# -- the questions -------------------------------------------------------------------------------------------------
#: detail -> style -> questions ({attribute}: the product's attribute of an exchange, e.g. "color").
QUESTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "email": {
        "keyword": ("What is your email?", "Email address?", "Could you give me the email address of your account?",
                    "What's the e-mail on the account?"),
        "paraphrase": ("Which address did you sign up with?", "What did you log in with?",
                       "What's the mail address you use with us?"),
        "request": ("Please share your email.", "I'll need your e-mail address, please.",
                    "Kindly tell me the email linked to your account."),
        "yes/no": ("Is your email {email}?", "Is your email address still {wrong_email}?"),
    },
    "name": {
        "keyword": ("What is your full name?", "Your name, please?", "First and last name?", "What's your name?"),
        "paraphrase": ("Who am I speaking with?", "What should I call you?", "May I ask who is writing?",
                       "Whose name is the account under?"),
        "request": ("Please tell me your first and last name.", "I need the name on the account, please."),
        "yes/no": ("Is your name {first}?", "Is your last name Smith?"),
    },
    "zip": {
        "keyword": ("What is your zip code?", "Zip?", "And the zip?", "What is the zip code of your address?"),
        "paraphrase": ("What is the postal code where you live?", "Which postcode are you in?"),
        "request": ("Please provide your zip code.", "Could you share your postal code?"),
        "yes/no": ("Is your zip code {zip}?", "Is your zip 00000?"),
    },
    "order": {
        "keyword": ("What is the order id?", "Order number?", "Which order is it?", "What's the order #?"),
        "paraphrase": ("What's the number on your order?", "Do you have the confirmation number?",
                       "Could you read me the reference number?"),
        "request": ("Please share the order number.", "Let me know the order id, please."),
        "yes/no": ("Is it order {order}?", "Is it about order #W0000001?"),
    },
    "items": {
        "keyword": ("Which item is it about?", "Which items?", "What product?", "Which product is it?"),
        "paraphrase": ("What did you buy?", "Which of your purchases is it?", "What did you order?",
                       "Which one is it?"),
        "request": ("Please tell me which item it is.", "Please list the products concerned."),
        "yes/no": ("Is it the blue water bottle?", "Is this about the hoodie?", "Is it the t-shirt?"),
    },
    "reason": {
        "keyword": ("What is the reason?", "Why?", "What was the problem with the item?", "Is there an issue?"),
        "paraphrase": ("What went wrong?", "How come?", "What happened?", "What's wrong with it?"),
        "request": ("Please tell me what happened.", "I need to know the reason, please."),
        "yes/no": ("Was it damaged?", "Was anything missing?", "Did you order it by mistake?"),
    },
    "address": {
        "keyword": ("What is the new shipping address?", "Address?", "What's the new address?"),
        "paraphrase": ("Where should we send it?", "Where do you want the package delivered?",
                       "Where are you moving to?", "Where should it go?"),
        "request": ("Please share the new address.", "Tell me the delivery address, please."),
        "yes/no": ("Should we ship it to 1 Elm Street?", "Is the new address {street}?"),
    },
    "option": {
        "keyword": ("Which {attribute} would you like instead?", "Which variant?", "What {attribute}?"),
        "paraphrase": ("Which one would you like instead?", "What would you like to swap it for?",
                       "Would you like it in a different one?", "What should we replace it with?"),
        "request": ("Please tell me the {attribute} you want instead.", "Let me know which variant you want."),
        "yes/no": ("Would you like the {option} one instead?", "Do you want a different {attribute}?"),
    },
    "payment": {
        "keyword": ("Which payment method?", "Which card should I use?", "Payment method?"),
        "paraphrase": ("How did you pay?", "Where should the refund go?", "How would you like to be refunded?",
                       "What did you pay with?"),
        "request": ("Please tell me where the money should go.", "Please share the payment method."),
        "yes/no": ("Should the refund go to your card?", "Did you pay by credit card?"),
    },
    "identity": {
        "keyword": ("How can I verify your identity?", "Can you help me find your account?"),
        "paraphrase": ("Which account is this?", "How do I look up your account?"),
        "request": ("Please let me locate your account.", "I need to authenticate you first, please."),
    },
}  # fmt: skip
#: Several details in one message: (template, the details it asks, in order).
MULTI: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Could you give me your order id and email?", ("order", "email")),
    ("What's your email, and which order is it?", ("email", "order")),
    ("Please share your name and zip code.", ("name", "zip")),
    ("Can I have your name, zip code and order number?", ("name", "zip", "order")),
    ("What is the order id and what was the problem?", ("order", "reason")),
    ("Thanks. Which item is it? And why do you want to return it?", ("items", "reason")),
    ("Which {attribute} would you like, and how did you pay?", ("option", "payment")),
    ("Where should we send it? Also, what's the order number?", ("address", "order")),
    ("I'll need your email and the reason, please.", ("email", "reason")),
)
#: Messages that ask for nothing: no detail may be stated in reply.
STATEMENTS = ("Hello!", "Thanks, I've noted your email.", "Your card will be refunded once this is done.",
              "I will check the order now.", "One moment while I look at the items.", "Okay.")  # fmt: skip


def tasks() -> list[dict[str, Any]]:
    """A spread of tasks: every level, every variant, every request kind, both ways to authenticate, orders known
    and not."""
    out, seen = [], set()
    for level in DIFFICULTIES:
        for i in range(200):
            t = make_task(level, i)
            g = t["goals"][0]
            key = (t["variant"], g["kind"], g["forbidden"], t["customer"]["knows_email"], g["knows_order"])
            if key not in seen:
                seen.add(key)
                out.append(t)
    return out


TASKS = tasks()


# -- the truth -----------------------------------------------------------------------------------------------------
def truth(task: dict[str, Any], detail: str) -> list[str]:
    """What a truthful reply about ``detail`` must say (lower case), read from the task record."""
    c, g = task["customer"], task["goals"][0]
    full = f"{c['first_name']} {c['last_name']}".lower()
    if detail == "email":
        return [c["email"]] if c["knows_email"] else ["don't remember"]
    if detail == "name":
        return [full]
    if detail == "zip":
        return [c["zip"]]
    if detail == "identity":
        return [c["email"]] if c["knows_email"] else [full, c["zip"]]
    if detail == "order":
        return [g["order_id"].lower()] if g["knows_order"] else ["don't have the order number"]
    if detail == "items":
        if g["items"]:
            return [d.lower() for d in g["descs"]]
        return [g["descs"][0].lower()] if not g["knows_order"] else ["whole order"]
    if detail == "reason":
        words = {"no longer needed": "no longer needed", "ordered by mistake": "mistake", "damaged": "damaged",
                 "missing": "missing"}  # fmt: skip
        return [words[g["reason"]]] if g["reason"] else []
    if detail == "address":
        return [g["address"]["street"].lower(), g["address"]["zip"]] if g["address"] else ["don't need"]
    if detail == "option":
        return [g["new_option"]] if g["new_option"] else ["don't want"]
    if g["forbidden"] == "refund_method":  # payment
        wanted = next(m for m in c["payment_methods"] if m["id"] == g["payment_method_id"])
        return [wanted["description"]]
    return ["original payment method"]


def secrets(task: dict[str, Any]) -> dict[str, list[str]]:
    """Every detail's values the customer holds (lower case): none may appear in a reply that did not ask for it."""
    c, g = task["customer"], task["goals"][0]
    out = {
        "email": [c["email"]],
        "name": [c["first_name"].lower(), c["last_name"].lower()],
        "zip": [c["zip"]],
        "order": [g["order_id"].lower()],
        "items": [d.lower() for d in g["descs"]],
        "reason": [
            w for w in ("no longer needed", "mistake", "damaged", "missing") if g["reason"] and w in g["reason"]
        ],
        "address": [g["address"]["street"].lower(), g["address"]["zip"]] if g["address"] else [],
        "option": [g["new_option"]] if g["new_option"] else [],
        "payment": [m["last4"] for m in c["payment_methods"]] + [m["description"] for m in c["payment_methods"]],
    }
    return out


def ask(task: dict[str, Any], question: str) -> str:
    """A fresh customer of ``task``: its reply to ``question`` after the opening (lower case)."""
    user = CustomerUser(task)
    user.reset(seed=0)
    user.respond([], "")
    reply, done = user.respond([], question)
    assert not done
    return reply.lower()


def check(task: dict[str, Any], question: str, asked: tuple[str, ...]) -> None:
    reply = ask(task, question)
    told = set()
    for detail in asked:
        expected = truth(task, detail)
        told.update(expected)
        for phrase in expected:
            assert phrase in reply, (task["id"], question, detail, phrase, reply)
    opening = task["opening"].lower()
    covered = {"identity": ("email", "name", "zip")}
    allowed = {d for a in asked for d in (a, *covered.get(a, ()))}
    for detail, values in secrets(task).items():
        if detail in allowed:
            continue
        for value in values:
            if value in opening or any(value in t for t in told):  # already said, or part of an asked answer
                continue
            assert value not in reply, (task["id"], question, f"leaked {detail}", value, reply)


def values(task: dict[str, Any]) -> dict[str, str]:
    """The fields question templates fill in: the task's own values and some wrong ones."""
    c, g = task["customer"], task["goals"][0]
    attribute = next((g["attribute"] for g in task["goals"] if g["attribute"]), "color")
    option = g["new_option"] or "blue"
    return {"attribute": attribute, "email": c["email"], "wrong_email": "someone@example.org", "first": c["first_name"],
            "zip": c["zip"], "order": g["order_id"], "street": (g["address"] or {"street": "1 Elm Street"})["street"],
            "option": option}  # fmt: skip


def cases() -> list[tuple[str, str, tuple[str, ...], str]]:
    out = []
    for task in TASKS:
        out += [
            (task["id"], q.format(**values(task)), (detail,), style)
            for detail, styles in QUESTIONS.items()
            for style, questions in styles.items()
            for q in questions
        ]
        out += [(task["id"], q.format(**values(task)), asked, "multi") for q, asked in MULTI]
        out += [(task["id"], s, (), "statement") for s in STATEMENTS]
    return out


CASES = cases()
BY_ID = {t["id"]: t for t in TASKS}


def test_the_suite_is_large_and_has_four_styles_per_detail():
    assert len(CASES) >= 300 and len(TASKS) >= 10
    for detail, styles in QUESTIONS.items():
        multi = any(detail in asked for _, asked in MULTI) or detail == "identity"
        assert {"keyword", "paraphrase", "request"} <= set(styles) and (multi or detail == "identity"), detail
    kinds = {(t["goals"][0]["kind"], t["goals"][0]["forbidden"]) for t in TASKS}
    assert len(kinds) == 8  # five requests and three forbidden ones
    assert {t["customer"]["knows_email"] for t in TASKS} == {True, False}
    assert {t["goals"][0]["knows_order"] for t in TASKS} == {True, False}


@pytest.mark.parametrize("style", ["keyword", "paraphrase", "request", "yes/no", "multi", "statement"])
def test_every_question_gets_a_truthful_answer_and_nothing_leaks(style):
    failures = []
    for task_id, question, asked, s in CASES:
        if s != style:
            continue
        try:
            check(BY_ID[task_id], question, asked)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} failures, e.g. {failures[:5]}"


def test_what_each_question_is_read_as():
    """The parser behind the answers: each question is read as asking exactly its details."""
    for detail, styles in QUESTIONS.items():
        for question in itertools.chain.from_iterable(styles.values()):
            if "order {order}" in question or "order #W" in question:
                continue  # a yes/no about an order id: answered apart (test_yes_no_questions_about_the_order_id)
            assert details_asked(question.format(**values(TASKS[0]))) == [detail], question
    for question, asked in MULTI:
        assert details_asked(question.format(**values(TASKS[0]))) == list(asked), question
    for statement in STATEMENTS:
        assert details_asked(statement) == [], statement


def test_yes_no_questions_about_the_order_id():
    for task in TASKS:
        g = task["goals"][0]
        right, wrong = g["order_id"], "#W0000001"
        if g["knows_order"]:
            assert ask(task, f"Is it order {right}?") == f"yes, it's order {right.lower()}."
            assert ask(task, f"Is it about order {wrong}?") == f"no, it's order {right.lower()}."
        else:
            assert ask(task, f"Is it order {right}?") == "i'm sorry, i don't have the order number."


def test_an_open_question_restates_the_request():
    for task in TASKS:
        reply = ask(task, "Is there anything else I should know?")
        assert reply == f"i'd like to {task['goals'][0]['request']}.".lower()
        for values in secrets(task).values():
            assert not any(v in reply for v in values if v not in task["opening"].lower())


FRAGMENTS = st.sampled_from(
    [q for styles in QUESTIONS.values() for qs in styles.values() for q in qs]
    + [q for q, _ in MULTI]
    + list(STATEMENTS)
    + ["and", "also", "thanks.", "?", "the item", "your card", "the order", "with the item", "please", "\n"]
)


@settings(max_examples=300, deadline=None)
@given(task_index=st.integers(0, len(TASKS) - 1), parts=st.lists(FRAGMENTS, min_size=1, max_size=4))
def test_any_mix_of_questions_is_answered_truthfully_and_leaks_nothing(task_index, parts):
    """Close the class: whatever mix of questions, statements and fragments a message holds, the reply states the
    truth about each detail the message asks (``details_asked``) and nothing about the others."""
    task = TASKS[task_index]
    message = " ".join(parts).format(**values(task))
    asked = tuple(details_asked(message))
    if not asked and order_ids_in(message):
        return  # a yes/no about an order id (answered with the order id; test_yes_no_questions_about_the_order_id)
    check(task, message, asked)
