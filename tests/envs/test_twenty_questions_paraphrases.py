"""TwentyQuestions-v0's paraphrase suite (issue 20): questions generated from the catalog, at least four phrasings
per question type (the grammar's form, synonyms, pronouns, verbs, reversed and indirect forms), each answered by the
env's answerer with the truth computed here from the hidden entity's row; questions whose yes/no would be unclear
(negations, "the 1900s", places the knowledge base does not hold) get the fixed refusal, never a Yes or a No.
And the final answer: "It is X.", "X (the sculptor)", bold, quotes, case and articles count; another name does not,
even one that contains X or that X contains."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.envs.user_sim.twenty_questions import (
    CANT,
    COLUMNS,
    NO,
    NUMBER_ATTRIBUTES,
    REASONS,
    YES,
    Answerer,
    TwentyQuestionsEnv,
    _normal,
    catalog,
    named_in_answer,
)

CATALOG = catalog("small")
ROWS = CATALOG.rows
BY_TYPE = {kind: [r for r in ROWS if r["type"] == kind] for kind in COLUMNS}
REFUSALS = {CANT.format(reason=r) for r in REASONS.values()}
TYPE_SYNONYMS = {"film": "movie", "city": "town", "company": "business", "person": "human", "country": "nation",
                 "river": "river"}  # fmt: skip
Truth = Callable[[dict], bool]


def _has(attr: str, value) -> Truth:
    return lambda row: row.get(attr) == value


def _cmp(attr: str, op: str, a: float, b: float | None = None) -> Truth:
    def holds(row: dict) -> bool:
        value = row.get(attr)
        if attr == "year made":
            value = row.get("release year", row.get("founding year"))
        if value is None:
            return False
        return {"<": value < a, ">": value > a, "<=": value <= a, ">=": value >= a, "=": value == a,
                "in": b is not None and a <= value <= b}[op]  # fmt: skip

    return holds


def _decade(year: int) -> int:
    decade = year // 10 * 10
    return decade if decade % 100 else decade + 10  # "the 1900s" is refused (decade or century?)


NUMBER_PHRASES: dict[str, list[tuple[str, str]]] = {  # attribute -> (phrasing with {n} and {op words}, op)
    "birth year": [("Was he born before {n}?", "<"), ("Was she born after {n}?", ">"),
                   ("Is his year of birth at least {n}?", ">="), ("Was the person born in {n}?", "="),
                   ("Were they born prior to {n}?", "<"), ("Is her birth year {n} or earlier?", "<=")],
    "founding year": [("Was it founded before {n}?", "<"), ("Was it established after {n}?", ">"),
                      ("Is its year of foundation at most {n}?", "<="), ("Was it founded in {n}?", "="),
                      ("Was it built before {n}?", "<")],
    "release year": [("Was it released before {n}?", "<"), ("Did it come out after {n}?", ">"),
                     ("Was the movie released in {n}?", "="), ("Is its year of release no later than {n}?", "<="),
                     ("Was it filmed before {n}?", "<")],
    "year made": [("Was it made before {n}?", "<"), ("Was it created after {n}?", ">"),
                  ("Was it made in {n} or later?", ">=")],
    "population": [("Is the population over {n}?", ">"), ("Does it have more than {n} inhabitants?", ">"),
                   ("Do fewer than {n} people live there?", "<"), ("Is its population at least {n}?", ">="),
                   ("Is the city's population under {n}?", "<"), ("Is it home to more than {n} people?", ">")],
    "length": [("Is it longer than {n} km?", ">"), ("Is the river shorter than {n} km?", "<"),
               ("Is it over {n} km long?", ">"), ("Is its length at least {n} kilometres?", ">="),
               ("Is it less than {n} km long?", "<")],
    "independence year": [("Did it become independent before {n}?", "<"), ("Did it gain independence after {n}?", ">"),
                          ("Was it independent before {n}?", "<"), ("Is its year of independence {n}?", "="),
                          ("Did it gain its independence in {n}?", "=")],
}  # fmt: skip
DECADE_PHRASES = {"birth year": "Was he born in the {d}s?", "founding year": "Was it founded in the {d}s?",
                  "release year": "Was the film released in the {d}s?",
                  "independence year": "Did it become independent in the {d}s?"}  # fmt: skip
VALUE_PHRASES: dict[str, list[str]] = {  # attribute -> phrasings with {v}
    "occupation": ["Is its occupation {v}?", "Is he a {v}?", "Does she work as a {v}?", "Is the person a {v}?",
                   "Is their job {v}?", "Is it a {v} by profession?", "Is {v} his occupation?"],
    "genre": ["Is its genre {v}?", "Is it a {v}?", "Is it a {v} film?", "Is the film's genre {v}?",
              "Is it a {v} movie?", "Is the genre {v}?"],
    "industry": ["Is its industry {v}?", "Is it a {v} company?", "Is it in the {v} industry?",
                 "Does it operate in {v}?", "Is the company's sector {v}?", "Is {v} its industry?"],
    "birth city": ["Is its birth city {v}?", "Was he born in {v}?", "Is her birthplace {v}?",
                   "Is the person's place of birth {v}?", "Is his hometown {v}?"],
    "birth country": ["Is its birth country {v}?", "Was she born in {v}?", "Is his birthplace {v}?",
                      "Is their country of birth {v}?"],
    "country": ["Is its country {v}?", "Is the country {v}?", "Is {v} its country?", "Is the city's country {v}?"],
    "headquarters": ["Is its headquarters {v}?", "Is it headquartered in {v}?", "Is it based in {v}?",
                     "Is the company's head office in {v}?", "Is its hq {v}?"],
    "headquarters country": ["Is its headquarters country {v}?", "Is it headquartered in {v}?", "Is it based in {v}?",
                             "Is its headquarters in {v}?"],
    "director": ["Is its director {v}?", "Was it directed by {v}?", "Did {v} direct it?", "Is {v} the director?",
                 "Is the film's director {v}?"],
    "source": ["Is its source {v}?", "Does it rise in {v}?", "Does it originate in {v}?", "Is its source in {v}?",
               "Is the river's source country {v}?"],
    "mouth": ["Is its mouth {v}?", "Does it flow into {v}?", "Does it empty into {v}?", "Is its mouth at {v}?",
              "Does it end in {v}?"],
    "capital": ["Is its capital {v}?", "Is {v} its capital?", "Is the capital city {v}?",
                "Is the country's capital {v}?", "Is {v} the capital?"],
}  # fmt: skip
TYPE_PHRASES = ["Is it a {k}?", "Is it a {s}?", "Are you thinking of a {k}?", "Is the hidden entity a {k}?",
                "Is its type {k}?", "So, is this a {k}?", "Okay. Is it of type {k}?", "Was it a {s}?"]  # fmt: skip
TYPES_PHRASES = ["Is it a {a} or a {b}?", "Is its type one of {a}, {b}?", "Is it either a {a} or a {b}?",
                 "Are you thinking of a {a} or a {b}?"]  # fmt: skip
NAME_PHRASES = ["Is it {n}?", "Could it be {n}?", "Are you thinking of {n}?", "Is the answer {n}?", "Is it {low}?",
                "Was it {n}?", "Is the entity you're thinking of {n}?"]  # fmt: skip
NAMES_PHRASES = ["Is it {a} or {b}?", "Is it one of {a}, {b} or {c}?", "Is it either {a} or {b}?",
                 "Are you thinking of {a}, {b} or {c}?", "Is it among {a}, {b} and {c}?"]  # fmt: skip
REFUSED = ["Is it not a {k}?", "Isn't it a {k}?", "Is it a {k}, or not?", "Was it never a {k}?",
           "Is it located in {country}?", "Is it older than {year}?", "Was it founded in the 1900s?",
           "Is it a {k} and a {k2}?", "Is it big?", "Tell me whether it is a {k}."]  # fmt: skip


def _other(rows: list[dict], attr: str, not_value) -> object:
    values = sorted({r[attr] for r in rows if attr in r and r[attr] != not_value}, key=str)
    return values[len(values) // 2]


def questions_about(row: dict, rng: random.Random) -> list[tuple[str, Truth, str]]:
    """(question, truth, question type) for one hidden entity: every phrasing of every type, asked about its own
    values (yes) and about other entities' values (no)."""
    out: list[tuple[str, Truth, str]] = []
    kind, other_kind = row["type"], rng.choice([k for k in COLUMNS if k != row["type"]])
    for k in (kind, other_kind):
        out += [(p.format(k=k, s=TYPE_SYNONYMS[k]), _has("type", k), "type") for p in TYPE_PHRASES]
    a, b = sorted([kind, other_kind])
    out += [(p.format(a=a, b=b), lambda r, a=a, b=b: r["type"] in (a, b), "types") for p in TYPES_PHRASES]
    c, d = rng.sample([k for k in COLUMNS if k != kind], 2)
    out += [(p.format(a=c, b=d), lambda r, c=c, d=d: r["type"] in (c, d), "types") for p in TYPES_PHRASES]
    peer = rng.choice(BY_TYPE[kind])
    for name in (row["name"], peer["name"]):
        low = name.lower()
        out += [(p.format(n=name, low=low), _has("name", name), "name") for p in NAME_PHRASES]
    others = rng.sample([r["name"] for r in ROWS if r["name"] != row["name"]], 2)
    for trio in ([row["name"], *others], [*others, peer["name"]]):
        out += [(p.format(a=trio[0], b=trio[1], c=trio[2]), lambda r, t=tuple(trio): r["name"] in t, "names")
                for p in NAMES_PHRASES]  # fmt: skip
    for attr in COLUMNS[kind]:
        if attr in NUMBER_ATTRIBUTES:
            value = row[attr]
            for n in (value, value - 1, value + 1, rng.randint(value // 2, value * 2)):
                for phrase, op in NUMBER_PHRASES[attr]:
                    out.append((phrase.format(n=f"{n:,}" if attr == "population" else n), _cmp(attr, op, n), attr))
            if attr in DECADE_PHRASES:
                for d in (_decade(value), _decade(value + 30)):
                    out.append((DECADE_PHRASES[attr].format(d=d), _cmp(attr, "in", d, d + 9), attr))
            if attr in ("release year", "founding year"):
                for phrase, op in NUMBER_PHRASES["year made"]:
                    out.append((phrase.format(n=value), _cmp("year made", op, value), "year made"))
        else:
            for value in (row[attr], _other(BY_TYPE[kind], attr, row[attr])):
                out += [(p.format(v=value), _has(attr, value), attr) for p in VALUE_PHRASES[attr]]
    if kind == "country":  # "the country" of a country is itself
        for name in (row["name"], peer["name"]):
            out += [(p.format(v=name), _has("name", name), "country") for p in VALUE_PHRASES["country"]]
    if kind == "city":  # "a million" and "500k"
        for n, text in ((1_000_000, "1 million"), (2_500_000, "2.5 million"), (500_000, "500k"),
                        (1_000_000, "a million")):  # fmt: skip
            out.append((f"Is the population over {text}?", _cmp("population", ">", n), "population"))
    return out


def hidden_rows(n_per_type: int = 6) -> list[dict]:
    rng = random.Random(20)
    return [r for kind in COLUMNS for r in rng.sample(BY_TYPE[kind], n_per_type)]


def ask(row: dict, question: str) -> str:
    user = Answerer([row], 0, CATALOG.vocab)
    user.reset()
    user.respond([], "")
    return user.respond([], question)[0]


def test_every_paraphrase_gets_the_truthful_answer():
    rng = random.Random(0)
    per_type: Counter[str] = Counter()
    phrasings: dict[str, set[str]] = {}
    wrong, refused = [], []
    for row in hidden_rows():
        for question, truth, qtype in questions_about(row, rng):
            reply = ask(row, question)
            per_type[qtype] += 1
            phrasings.setdefault(qtype, set()).add(question.split(" ")[0] + " " + question.split(" ")[1])
            if reply in REFUSALS:
                refused.append((row["name"], question))
            elif reply != (YES if truth(row) else NO):
                wrong.append((row["name"], question, reply))
    total = sum(per_type.values())
    print(f"\n{total} questions, {dict(per_type)}")
    assert not wrong, wrong[:10]
    assert not refused, sorted({q for _, q in refused})[:40]  # every phrasing of the suite is one the answerer reads
    assert total >= 2_000 and len(per_type) >= 20
    assert all(n >= 4 for n in per_type.values())


def test_unclear_questions_are_refused_never_answered():
    rng = random.Random(1)
    for row in hidden_rows(3):
        k2 = rng.choice([k for k in COLUMNS if k != row["type"]])
        country = rng.choice(BY_TYPE["country"])["name"]
        for template in REFUSED:
            question = template.format(k=row["type"], k2=k2, country=country, year=1900)
            assert ask(row, question) in REFUSALS, question


def test_yes_answers_narrow_the_candidates_truthfully_in_an_episode():
    """Natural phrasings through the env: after each answer the hidden entity is still among the candidates."""
    env = TwentyQuestionsEnv(difficulty="medium")
    for task in range(6):
        _, info = env.reset(options={"task_index": task})
        row = info["gold"]["attributes"]
        rng = random.Random(task)
        for question, truth, _ in rng.sample(questions_about(row, rng), 12):
            obs, _, terminated, truncated, info = env.step(f"[action] {question}")
            assert obs[-1]["content"] == (YES if truth(row) else NO), question
            if terminated or truncated:
                break
            hidden = info["gold"]["entity"] if "gold" in info else row["name"]
            assert hidden in [env.unwrapped._answerer.rows[i]["name"] for i in env.unwrapped._answerer.consistent]


# -- the final answer ------------------------------------------------------------------------------------------
def test_no_two_names_share_a_normal_form():
    for dataset in ("tiny", "small"):
        names = [r["name"] for r in catalog(dataset).rows]
        assert len({_normal(n) for n in names}) == len(names)


def answer_forms(name: str, kind: str) -> list[str]:
    bare = name[4:] if name.startswith("The ") else name
    return [name, name.upper(), name.lower(), f"It is {name}.", f"{name} (the {kind})", f"I think it's {name}",
            f"**{name}**", f'"{name}"', f"the {bare}", f"The answer is {name}.", f"My guess is *{name}*!",
            f"```\n{name}\n```", f"Is it {name}?", f"{name}, the {kind}.", f"the {kind} {name}", f"It's `{name}`",
            f"I'm pretty sure it is {name}."]  # fmt: skip


@pytest.mark.parametrize("kind", sorted(COLUMNS))
def test_final_answer_forms_name_the_entity(kind):
    """Issue 20: "It is X." and "X (the sculptor)" were rejected."""
    rows = BY_TYPE[kind][:40]
    names = [r["name"] for r in rows]
    for name in names:
        for form in answer_forms(name, kind):
            assert named_in_answer(form, names) == name, form


def near_collisions(names: list[str]) -> list[tuple[str, str]]:
    """Pairs of names where one's normal form is a part of the other's (word-wise or character-wise)."""
    normal = {n: _normal(n) for n in names}
    return [(a, b) for a in names for b in names if a != b and normal[a] in normal[b]]


def test_a_name_inside_another_names_only_itself():
    names = [r["name"] for r in ROWS]
    pairs = near_collisions(names)
    assert pairs  # the catalog has some ("Datrou" in "Merhor Datround")
    for short, long in pairs:
        assert named_in_answer(short, [short, long]) == short
        assert named_in_answer(long, [short, long]) == long
        assert named_in_answer(f"It is {long}.", [short]) is None
        assert named_in_answer(f"It is {short}.", [long]) is None
    for row in ROWS[:300]:  # a part of a name is no name; nor is a name with more words
        words = row["name"].split()
        candidates = [row["name"]]
        if len(words) > 1:
            assert named_in_answer(words[-1], candidates) is None
            assert named_in_answer(" ".join(words[:-1]), candidates) is None
        assert named_in_answer(f"{row['name']} Junior", candidates) is None
        assert named_in_answer(f"{row['name']} or {ROWS[0]['name']}", candidates) is None


def test_final_answer_on_the_env():
    env = TwentyQuestionsEnv(difficulty="easy")
    _, info = env.reset(options={"task_index": 3})
    name, kind = info["gold"]["entity"], info["gold"]["type"]
    other = next(n for n in info["gold"]["candidates"] if n != name)
    for form, ok in ((f"It is {name}.", True), (f"{name} (the {kind})", True), (f"It is {other}.", False),
                     (f"{other} (the {kind})", False), (f"**{name[:-1]}**", False)):  # fmt: skip
        env.reset(options={"task_index": 3})
        _, reward, terminated, _, info = env.step(f"[answer] {form}")
        assert terminated and info["success"] is ok and reward == float(ok), form


LEADS = ["", "It is ", "I think it's ", "The answer is ", "My guess is ", "Final answer: ", "So it must be "]
WRAPS = [("", ""), ("**", "**"), ("*", "*"), ('"', '"'), ("`", "`")]
TAILS = ["", ".", "!", " (the {kind})", ", the {kind}."]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_wrapping_of_the_right_name_wins_and_of_another_name_loses(data):
    kind = data.draw(st.sampled_from(sorted(COLUMNS)))
    rows = data.draw(st.lists(st.sampled_from(BY_TYPE[kind]), min_size=2, max_size=16, unique_by=lambda r: r["name"]))
    names = [r["name"] for r in rows]
    hidden, other = names[0], names[1]
    lead, (left, right), tail = (data.draw(st.sampled_from(x)) for x in (LEADS, WRAPS, TAILS))
    for name in (hidden, other):
        form = lead + left + name + right + tail.format(kind=kind)
        assert named_in_answer(form, names) == name, form
