"""Question templates over the knowledge base: relations, relation paths and comparisons.

A question of ``h`` hops follows a path of ``h`` functional relations from an anchor entity: hop ``k``'s
supporting document is the page of the ``k``-th entity on the path, which states the relation to the next one
(the last page states the answer). A comparison names two entities of one kind and asks which has the
larger/smaller value of an attribute; its two supporting documents are their pages.

>>> [p for p in relation_paths(2) if p[0] == "film.director"][:2]
[('film.director', 'person.birth_city'), ('film.director', 'person.birth_year')]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from agentgym.envs.search_qa.kb import INDUSTRIES, KnowledgeBase, fmt_length, fmt_population


@dataclass(frozen=True)
class Relation:
    """A functional relation ``src.attr``; ``dst`` is the target entity kind (``None`` for a literal value).

    ``ask`` are question templates (``{}`` = the subject phrase), ``np`` noun-phrase templates that name the
    target through the subject (entity-valued relations only), ``query`` the keywords of the oracle query.
    """

    key: str
    dst: str | None
    ask: tuple[str, ...]
    np: tuple[str, ...]
    query: str

    @property
    def src(self) -> str:
        return self.key.split(".")[0]

    @property
    def attr(self) -> str:
        return self.key.split(".")[1]


def _rel(key: str, dst: str | None, ask: tuple[str, ...], np: tuple[str, ...] = (), query: str = "") -> Relation:
    return Relation(key, dst, ask, np, query)


RELATIONS: Mapping[str, Relation] = {
    r.key: r
    for r in (
        _rel("person.birth_city", "city", ("In which city was {} born?", "Where was {} born?"),
             ("the birthplace of {}", "the city where {} was born"), "born birthplace"),
        _rel("person.birth_year", None, ("In what year was {} born?", "When was {} born?"), query="born year"),
        _rel("person.occupation", None, ("What is the occupation of {}?", "What does {} do for a living?"),
             query="occupation profession"),
        _rel("person.employer", "company", ("Which company does {} work for?", "Which company employs {}?"),
             ("the employer of {}", "the company that employs {}"), "works employer company"),
        _rel("person.founded", "company", ("Which company was founded by {}?", "What company did {} found?"),
             ("the company founded by {}",), "founded company"),
        _rel("film.director", "person", ("Who directed {}?", "Who is the director of {}?"),
             ("the director of {}",), "film directed director"),
        _rel("film.year", None, ("In what year was {} released?", "When was {} released?"), query="film released year"),
        _rel("company.founder", "person", ("Who founded {}?", "Who is the founder of {}?"),
             ("the founder of {}",), "founded founder"),
        _rel("company.hq", "city", ("In which city is {} headquartered?", "Where is the headquarters of {}?"),
             ("the headquarters city of {}", "the city where {} is headquartered"), "headquartered headquarters"),
        _rel("company.year", None, ("In what year was {} founded?", "When was {} founded?"),
             query="company founded year"),
        _rel("company.industry", None, ("In which industry does {} operate?",), query="company industry"),
        _rel("city.country", "country", ("In which country is {} located?", "Which country is {} in?"),
             ("the country of {}", "the country in which {} is located"), "city country located"),
        _rel("city.population", None, ("What is the population of {}?", "How many people live in {}?"),
             query="population"),
        _rel("city.year", None, ("In what year was {} founded?", "When was {} founded?"), query="city founded"),
        _rel("country.capital", "city", ("What is the capital of {}?", "Which city is the capital of {}?"),
             ("the capital of {}",), "country capital"),
        _rel("country.independence", None, ("In what year did {} become independent?",),
             query="independence independent"),
        _rel("river.source", "country", ("In which country does {} rise?", "In which country is the source of {}?"),
             ("the source country of {}", "the country where {} rises"), "river rises source"),
        _rel("river.mouth", "city", ("At which city does {} reach the sea?", "Which city lies at the mouth of {}?"),
             ("the city at the mouth of {}", "the city where {} reaches the sea"), "river sea mouth"),
        _rel("river.length", None, ("How long is {}?", "What is the length of {}?"), query="river length long km"),
    )
}  # fmt: skip

#: Consecutive relation pairs that would lead back to where they started (founders are injective; a capital
#: lies in its own country).
INVERSE_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {("company.founder", "person.founded"), ("person.founded", "company.founder"), ("country.capital", "city.country")}
)


@dataclass(frozen=True)
class Comparison:
    """Compare ``kind.attr`` of two entities; ``more``/``less`` templates ask for the larger/smaller value."""

    kind: str
    attr: str
    more: tuple[str, ...]
    less: tuple[str, ...]
    query: str


COMPARISONS: tuple[Comparison, ...] = (
    Comparison("person", "birth_year", ("Who was born later, {a} or {b}?", "Who is younger, {a} or {b}?"),
               ("Who was born earlier, {a} or {b}?", "Who is older, {a} or {b}?"), "born"),
    Comparison("film", "year", ("Which film was released later, {a} or {b}?", "Which film is more recent, {a} or {b}?"),
               ("Which film was released earlier, {a} or {b}?", "Which film came out first, {a} or {b}?"),
               "film released"),
    Comparison("company", "year", ("Which company was founded more recently, {a} or {b}?",),
               ("Which company was founded earlier, {a} or {b}?", "Which company is older, {a} or {b}?"),
               "company founded"),
    Comparison("river", "length", ("Which river is longer, {a} or {b}?",), ("Which river is shorter, {a} or {b}?",),
               "river length long km"),
    Comparison("city", "population",
               ("Which city has a larger population, {a} or {b}?", "Which city is more populous, {a} or {b}?"),
               ("Which city has a smaller population, {a} or {b}?",), "population"),
    Comparison("country", "independence", ("Which country became independent later, {a} or {b}?",),
               ("Which country became independent earlier, {a} or {b}?",), "independence independent"),
)  # fmt: skip


#: A second wording of each template that is the only one of its tuple. Rewordings alone use these (the generator
#: never draws them), so adding one changes no generated question.
SECOND_WORDINGS: Mapping[str, str] = {
    "the director of {}": "the person who directed {}",
    "the company founded by {}": "the company that {} founded",
    "the founder of {}": "the person who founded {}",
    "the capital of {}": "the capital city of {}",
    "In which industry does {} operate?": "What industry is {} in?",
    "In what year did {} become independent?": "When did {} become independent?",
    "Which company was founded more recently, {a} or {b}?": "Which company is younger, {a} or {b}?",
    "Which river is longer, {a} or {b}?": "Which of the two rivers is longer, {a} or {b}?",
    "Which river is shorter, {a} or {b}?": "Which of the two rivers is shorter, {a} or {b}?",
    "Which city has a smaller population, {a} or {b}?": "Which city is less populous, {a} or {b}?",
    "Which country became independent later, {a} or {b}?": "Which country gained independence later, {a} or {b}?",
    "Which country became independent earlier, {a} or {b}?": "Which country gained independence first, {a} or {b}?",
}


def other_wording(templates: tuple[str, ...], i: int) -> str:
    """The template a rewording uses in place of ``templates[i]``: the tuple's next one, else its second wording.

    >>> other_wording(("Who directed {}?", "Who is the director of {}?"), 1)
    'Who directed {}?'
    """
    return templates[(i + 1) % len(templates)] if len(templates) > 1 else SECOND_WORDINGS[templates[0]]


def relation_paths(length: int) -> tuple[tuple[str, ...], ...]:
    """All relation paths of ``length`` hops: entity-valued links, no repeated relation, no inverse pair."""
    paths: list[tuple[str, ...]] = [(k,) for k in RELATIONS]
    for _ in range(length - 1):
        paths = [
            (*p, r.key)
            for p in paths
            if (dst := RELATIONS[p[-1]].dst) is not None
            for r in RELATIONS.values()
            if r.src == dst and r.key not in p and (p[-1], r.key) not in INVERSE_PAIRS
        ]
    return tuple(paths)


#: Relation paths by number of hops (1 to 4).
PATHS: Mapping[int, tuple[tuple[str, ...], ...]] = {h: relation_paths(h) for h in (1, 2, 3, 4)}


def mention(kind: str, name: str) -> str:
    """How a question names an entity: ``the film X``, ``the X River``, else the bare name."""
    if kind == "film":
        return f"the film {name}"
    return f"the {name}" if kind == "river" else name


def value_answers(kb: KnowledgeBase, kind: str, attr: str, idx: int) -> tuple[str, ...]:
    """Canonical rendering of a literal attribute as it appears on the entity's page, then aliases."""
    v = int(kb[kind].attrs[attr][idx])
    if attr == "population":
        return (fmt_population(v),)  # normalisation drops the commas, so "4292558" matches too
    if attr == "length":
        return (fmt_length(v), str(v), f"{v} kilometres", f"{v} kilometers")
    if attr == "occupation":
        return (kb.occupation_names[v],)
    if attr == "industry":
        return (INDUSTRIES[v],)
    return (str(v),)


def entity_answers(kb: KnowledgeBase, kind: str, idx: int) -> tuple[str, ...]:
    ents = kb[kind]
    return (ents.names[idx], *ents.aliases[idx])


@dataclass(frozen=True)
class Draft:
    """A question before it gets an id and a split."""

    key: tuple
    question: str
    answers: tuple[str, ...]
    hop_type: str
    template: str
    hop_entities: tuple[tuple[str, int], ...]  # (kind, index) of each hop's page
    hop_answers: tuple[str, ...]  # what each hop's page states: the next entity, the value, the answer
    queries: tuple[str, ...]
    rewording: str = ""  # the same question in other words (other templates; a comparison names b first)


def draft_chain(kb: KnowledgeBase, path: tuple[str, ...], anchor: int, rng: np.random.Generator) -> Draft | None:
    """Follow ``path`` from ``anchor``; ``None`` if a link is missing or the path revisits an entity."""
    kind, idx = RELATIONS[path[0]].src, anchor
    hops: list[tuple[str, int]] = []
    hop_answers: list[str] = []
    for key in path:
        rel = RELATIONS[key]
        if (kind, idx) in hops:
            return None
        hops.append((kind, idx))
        target = int(kb[kind].attrs[rel.attr][idx])
        if rel.dst is None:
            answers = value_answers(kb, kind, rel.attr, idx)
        else:
            if target < 0:
                return None
            kind, idx = rel.dst, target
            answers = entity_answers(kb, kind, idx)
        hop_answers.append(answers[0])
    if rel.dst is not None and (kind, idx) in hops:
        return None
    k0, i0 = hops[0]
    phrase = other = mention(k0, kb[k0].names[i0])
    for depth, key in enumerate(path[:-1]):
        # Around the bare anchor any phrasing reads well; nested phrases use the "the X of ..." form.
        nps = RELATIONS[key].np
        i = int(rng.integers(len(nps))) if depth == 0 else 0
        phrase, other = nps[i].format(phrase), (other_wording(nps, i) if depth == 0 else nps[0]).format(other)
    asks = RELATIONS[path[-1]].ask
    j = int(rng.integers(len(asks)))
    question = asks[j].format(phrase)
    queries = tuple(f"{kb[k].names[i]} {RELATIONS[key].query}" for (k, i), key in zip(hops, path, strict=True))
    hop_type = {1: "1hop", 2: "bridge"}.get(len(path), "multihop")
    return Draft(("chain", path, anchor), question, answers, hop_type, ">".join(path), tuple(hops),
                 tuple(hop_answers), queries, other_wording(asks, j).format(other))  # fmt: skip


def draft_comparison(kb: KnowledgeBase, cmp: Comparison, a: int, b: int, rng: np.random.Generator) -> Draft | None:
    """``None`` when ``a == b`` or their values tie."""
    values = kb[cmp.kind].attrs[cmp.attr]
    va, vb = int(values[a]), int(values[b])
    if a == b or va == vb:
        return None
    ask_more = bool(rng.integers(2))
    templates = cmp.more if ask_more else cmp.less
    winner, loser = (a, b) if (va > vb) == ask_more else (b, a)
    names = kb[cmp.kind].names
    # The template already says "film", so films are named bare; rivers keep their article.
    na, nb = (names[i] if cmp.kind != "river" else f"the {names[i]}" for i in (a, b))
    k = int(rng.integers(len(templates)))
    question = templates[k].format(a=na, b=nb)
    loser_forms = {s.lower() for s in entity_answers(kb, cmp.kind, loser)}
    answers = tuple(s for s in entity_answers(kb, cmp.kind, winner) if s.lower() not in loser_forms)
    pair = tuple(sorted((a, b)))
    return Draft(
        ("cmp", cmp.kind, cmp.attr, pair),
        question,
        answers,
        "comparison",
        f"compare:{cmp.kind}.{cmp.attr}:{'more' if ask_more else 'less'}",
        ((cmp.kind, a), (cmp.kind, b)),
        (value_answers(kb, cmp.kind, cmp.attr, a)[0], value_answers(kb, cmp.kind, cmp.attr, b)[0]),
        (f"{names[a]} {cmp.query}", f"{names[b]} {cmp.query}"),
        other_wording(templates, k).format(a=nb, b=na),
    )
