"""The synthetic knowledge base behind SearchQA and its rendering into a Search-R1 corpus.

Six entity kinds with typed, functional relations (every asked fact has exactly one value):

=========  ==========================================================================================
person     birth_city -> city, birth_year, occupation, employer -> company (some), founded -> company (some)
company    hq -> city, year (founded), founder -> person (injective: a person founds at most one), industry
film       director -> person, year (released)
city       country -> country, population, year (founded)
country    capital -> city (one of its own cities), independence (year)
river      source -> country, mouth -> city, length (km); also flows through two other cities
=========  ==========================================================================================

Every entity gets a Wikipedia-like page (title = its name) stating all of its relations in varied sentence
templates. Distractor passages make retrieval non-trivial without making any question ambiguous: pages that
mention an entity in passing next to a *different* city/person/company (a prize, a foundation, a novel and a
soundtrack sharing a film's title, an office tower, a university, a bridge), surname pages listing the people
who share a surname, and event reports naming several random entities. No distractor contradicts an entity
page or gives a second value for a relation that questions ask about.

All randomness comes from the ``numpy.random.Generator`` passed in, drawn in a fixed order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from agentgym.envs.search_qa.names import invented_words
from agentgym.tools.retrieval.base import Document

if TYPE_CHECKING:
    from agentgym.envs.search_qa.config import DatasetConfig

KINDS: tuple[str, ...] = ("person", "city", "company", "film", "river", "country")

OCCUPATIONS: tuple[str, ...] = (
    "architect", "astronomer", "botanist", "chemist", "composer", "diplomat", "economist", "engineer",
    "geologist", "historian", "journalist", "linguist", "mathematician", "novelist", "painter", "philosopher",
    "photographer", "physicist", "poet", "sculptor", "surgeon", "zoologist",
)  # fmt: skip
FILM_OCCUPATIONS: tuple[str, ...] = ("film director", "screenwriter", "film producer", "cinematographer")
INDUSTRIES: tuple[str, ...] = (
    "shipbuilding", "textile", "software", "mining", "pharmaceutical", "aerospace", "publishing", "brewing",
    "telecommunications", "logistics", "robotics", "agricultural", "banking", "insurance", "steel", "furniture",
)  # fmt: skip
GENRES: tuple[str, ...] = (
    "drama", "comedy", "thriller", "documentary", "western", "musical", "science fiction", "horror", "romance",
)  # fmt: skip
CITY_FORMS: tuple[str, ...] = ("{}", "{}", "{}", "{} City", "Port {}", "New {}", "Fort {}")
COMPANY_FORMS: tuple[str, ...] = (
    "{} Industries", "{} Systems", "{} Group", "{} Works", "{} Holdings", "{} Labs", "{} Motors", "{} Trading",
)  # fmt: skip
COUNTRY_FORMS: tuple[str, ...] = (
    "Republic of {}", "Kingdom of {}", "Federation of {}", "Commonwealth of {}", "Principality of {}",
)  # fmt: skip
FILM_FORMS: tuple[str, ...] = (
    "{}", "The {} Affair", "Return to {}", "Nights in {}", "The Last Days of {}", "Letters from {}",
    "The {} Protocol", "Beyond {}", "The Road to {}", "Winter in {}",
)  # fmt: skip
EVENT_KINDS: tuple[str, ...] = ("Symposium", "Festival", "Expedition", "Exhibition", "Conference", "Regatta")

# Page templates. Every template of a relation contains that relation's keyword (see questions.RELATIONS).
PERSON_LEAD: tuple[str, ...] = (
    "{name} (born {year} in {city}) is {occ}.",
    "{name} is {occ} who was born in {city} in {year}.",
    "Born in {city} in {year}, {name} is {occ}.",
    "{name} is {occ}, born in {year} in {city}.",
)
PERSON_EMPLOYER: tuple[str, ...] = (
    "{short} works for {company}.",
    "{short} is employed by {company}.",
    "{name} works at {company}.",
)
PERSON_FOUNDED: tuple[str, ...] = ("{short} founded {company} in {year}.", "In {year}, {short} founded {company}.")
PERSON_FILLER: tuple[str, ...] = (
    "",
    "{short} has received several awards.",
    "{short} is a member of several professional societies.",
    "{short} has written widely about their work.",
    "{short} has given lectures at many universities.",
)
COMPANY_LEAD: tuple[str, ...] = (
    "{name} is {industry} company headquartered in {city}.",
    "{name} is a company in the {bare_industry} industry, headquartered in {city}.",
    "Headquartered in {city}, {name} is {industry} company.",
)
COMPANY_FOUNDED: tuple[str, ...] = (
    "It was founded in {year} by {founder}.",
    "{short} was founded by {founder} in {year}.",
    "{founder} founded {name} in {year}.",
)
COMPANY_FILLER: tuple[str, ...] = (
    "",
    "{short} employs several thousand people.",
    "{short} is listed on the national stock exchange.",
    "{short} has offices in several countries.",
)
FILM_LEAD: tuple[str, ...] = (
    "{name} is a {year} {genre} film directed by {director}.",
    "{name} is a {genre} film released in {year}. It was directed by {director}.",
    "Directed by {director}, {name} is a {genre} film released in {year}.",
)
FILM_FILLER: tuple[str, ...] = (
    "",
    "The film received mixed reviews from critics.",
    "The film was a commercial success.",
    "The film premiered at a national film festival.",
)
CITY_LEAD: tuple[str, ...] = (
    "{name} is a city in {country}.",
    "{name} is a city located in the country of {country}.",
    "Located in {country}, {name} is a city.",
)
CITY_POPULATION: tuple[str, ...] = (
    "{name} has a population of {pop}.",
    "As of the latest census, {short} has a population of {pop}.",
    "The population of {short} is {pop}.",
)
CITY_FOUNDED: tuple[str, ...] = ("The city was founded in {year}.", "{short} was founded in {year}.")
COUNTRY_LEAD: tuple[str, ...] = (
    "{name}, officially the {formal}, is a country. Its capital is {capital}.",
    "{name} (officially the {formal}) is a country whose capital city is {capital}.",
    "The {formal}, commonly known as {name}, is a country with its capital at {capital}.",
)
COUNTRY_INDEPENDENCE: tuple[str, ...] = (
    "{name} became independent in {year}.",
    "{name} gained independence in {year}.",
)
RIVER_LEAD: tuple[str, ...] = (
    "The {name} is a river that rises in {source} and flows into the sea at {mouth}.",
    "The {name} rises in {source} and reaches the sea at {mouth}.",
    "Rising in {source}, the {name} is a river that reaches the sea at {mouth}.",
)
RIVER_LENGTH: tuple[str, ...] = (
    "It is {length} long.",
    "The {name} is {length} long.",
    "The river has a length of {length}.",
)

# Distractors: (title template, text template) per kind; each entity gets at most one of each.
DISTRACTORS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "person": (
        (
            "{name} Prize",
            "The {name} Prize is an award presented every year by {company}. It is named in honour of {name}.",
        ),
        (
            "{name} Foundation",
            "The {name} Foundation is a charitable organisation based in {city}. It continues the work of {name}.",
        ),
    ),
    "film": (
        (
            "{name} (novel)",
            "{name} is a novel by {person}, published in {year}. It shares its title with the film {name} but is "
            "otherwise unrelated.",
        ),
        ("{name} (soundtrack)", "The soundtrack of the film {name} was composed by {person}."),
    ),
    "company": (
        ("{short} Tower", "{short} Tower is an office building in {city}. It is named after the company {name}."),
        ("History of {name}", "The history of {name} includes several expansions and a restructuring of its business."),
    ),
    "city": (
        ("University of {short}", "The University of {short} is a public university in {name}. It opened in {year}."),
        ("{short} Stadium", "{short} Stadium is a sports venue in {name} with seats for {seats} spectators."),
    ),
    "river": (
        ("{short} Bridge", "The {short} Bridge crosses the {name} at {city}. It opened in {year}."),
        ("{short} Dam", "The {short} Dam is a dam on the {name}, completed in {year}."),
    ),
    "country": (
        (
            "Culture of {name}",
            "The culture of {name} is known for its music, cuisine and festivals, many of them held in {city}.",
        ),
        ("Economy of {name}", "The economy of {name} is based on {industry} and {industry2} businesses."),
    ),
}
EVENT_TEXT = (
    "The {year} {word} {kind} was held in {city}. Participants included {p1} and {p2}, and the programme "
    "featured a screening of {film}. The event was sponsored by {company}."
)
SURNAME_TEXT = "{surname} is a surname. Notable people with the surname include {people}."

_ALL_TEMPLATES: tuple[str, ...] = (
    *PERSON_LEAD, *PERSON_EMPLOYER, *PERSON_FOUNDED, *PERSON_FILLER, *COMPANY_LEAD, *COMPANY_FOUNDED,
    *COMPANY_FILLER, *FILM_LEAD, *FILM_FILLER, *CITY_LEAD, *CITY_POPULATION, *CITY_FOUNDED, *COUNTRY_LEAD,
    *COUNTRY_INDEPENDENCE, *RIVER_LEAD, *RIVER_LENGTH, *(t for pair in DISTRACTORS.values() for p in pair for t in p),
    EVENT_TEXT, SURNAME_TEXT, *OCCUPATIONS, *FILM_OCCUPATIONS, *INDUSTRIES, *GENRES, *CITY_FORMS, *COMPANY_FORMS,
    *COUNTRY_FORMS, *FILM_FORMS, *EVENT_KINDS, "capital", "river", "directed", "the city", "km", "kilometres",
)  # fmt: skip
#: Words of the templates: an invented name never equals one of them (so names stay rare BM25 terms).
TEMPLATE_WORDS: frozenset[str] = frozenset(re.findall(r"[a-z]+", " ".join(_ALL_TEMPLATES).lower()))


def indefinite(noun: str) -> str:
    """``"an architect"``, ``"a painter"``."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def fmt_population(n: int) -> str:
    return f"{n:,}"


def fmt_length(km: int) -> str:
    return f"{km} km"


@dataclass(frozen=True, eq=False)
class Entities:
    """One entity kind: canonical names, the short form used in running text, extra answer aliases, attributes.

    ``attrs`` maps an attribute to an int array of length ``len(names)``; entity-valued attributes hold indices
    into the target kind (``-1`` = none), the others hold the value itself (years, populations, lengths) or an
    index into a vocabulary tuple (occupation, industry, genre).
    """

    kind: str
    names: tuple[str, ...]
    short: tuple[str, ...]
    aliases: tuple[tuple[str, ...], ...]
    attrs: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True, eq=False)
class KnowledgeBase:
    """All entities plus the river -> through-cities table and the person vocabulary (occupation strings)."""

    entities: Mapping[str, Entities]
    river_through: np.ndarray  # (n_rivers, 2) city indices
    occupation_names: tuple[str, ...]
    event_words: tuple[str, ...]  # one invented word per event report

    def __getitem__(self, kind: str) -> Entities:
        return self.entities[kind]


def _permuted_cover(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """``n`` indices in ``[0, k)`` where every value occurs at least once (``n >= k``), in random order."""
    return rng.permutation(np.concatenate([np.arange(k), rng.integers(0, k, size=n - k)]))


def build_kb(config: DatasetConfig, rng: np.random.Generator) -> KnowledgeBase:
    """Draw entities and relations (vectorised) from ``rng``."""
    c = config
    taken: set[str] = set()
    reserved = TEMPLATE_WORDS

    # --- names -------------------------------------------------------------------------------------------------
    n_first = max(8, c.n_people // 8)
    n_surnames = max(2, round(c.n_people * c.surname_ratio))
    first = invented_words(rng, n_first, taken=taken, syllables=(2, 2), reserved=reserved)
    surnames = invented_words(rng, n_surnames, taken=taken, syllables=(2, 3), reserved=reserved)
    city_stems = invented_words(rng, c.n_cities, taken=taken, reserved=reserved)
    company_stems = invented_words(rng, c.n_companies, taken=taken, reserved=reserved)
    film_words = invented_words(rng, c.n_films, taken=taken, reserved=reserved)
    river_stems = invented_words(rng, c.n_rivers, taken=taken, reserved=reserved)
    country_stems = invented_words(rng, c.n_countries, taken=taken, syllables=(2, 2), reserved=reserved)
    event_words = invented_words(rng, c.event_docs, taken=taken, reserved=reserved)

    # People: every surname used at least once, the rest shared (near-duplicate names); full names unique.
    surname_of = _permuted_cover(rng, c.n_people, n_surnames)
    first_of = rng.integers(0, n_first, size=c.n_people)
    for _ in range(100):
        key = first_of.astype(np.int64) * n_surnames + surname_of
        _, idx = np.unique(key, return_index=True)
        dup = np.ones(c.n_people, dtype=bool)
        dup[idx] = False  # first occurrence of every (first, surname) pair stays
        if not dup.any():
            break
        first_of[dup] = rng.integers(0, n_first, size=int(dup.sum()))
    else:  # pragma: no cover - only with absurd configs
        raise RuntimeError("could not make person names unique; raise n_people // 8 first names")
    first_l, surname_l = first_of.tolist(), surname_of.tolist()
    person_names = tuple(f"{first[f]} {surnames[s]}" for f, s in zip(first_l, surname_l, strict=True))
    person_short = tuple(surnames[s] for s in surname_l)
    surname_count = np.bincount(surname_of, minlength=n_surnames).tolist()
    # The surname is an answer alias only when no one else carries it.
    person_aliases = tuple((surnames[s],) if surname_count[s] == 1 else () for s in surname_l)

    def styled(forms: tuple[str, ...], stems: Sequence[str]) -> tuple[str, ...]:
        style = rng.integers(0, len(forms), size=len(stems)).tolist()
        return tuple(forms[f].format(s) for f, s in zip(style, stems, strict=True))

    city_names = styled(CITY_FORMS, city_stems)
    company_names = styled(COMPANY_FORMS, company_stems)
    film_names = styled(FILM_FORMS, film_words)
    river_names = tuple(f"{s} River" for s in river_stems)
    country_names = tuple(s + "ia" if s[-1] not in "aeiouy" else s for s in country_stems)
    country_formal = styled(COUNTRY_FORMS, country_names)
    all_names = person_names + city_names + company_names + film_names + river_names + country_names
    if len(set(all_names)) != len(all_names):  # pragma: no cover - guaranteed by construction
        raise AssertionError("entity names are not unique")

    # --- relations -----------------------------------------------------------------------------------------
    city_country = _permuted_cover(rng, c.n_cities, c.n_countries)
    order = rng.permutation(c.n_cities)
    _, first_pos = np.unique(city_country[order], return_index=True)
    country_capital = order[first_pos]  # a random city of each country
    city_population = np.exp(rng.uniform(np.log(2_000), np.log(9_000_000), size=c.n_cities)).astype(np.int64)
    city_year = rng.integers(600, 1900, size=c.n_cities)
    country_independence = rng.integers(1600, 1996, size=c.n_countries)

    birth_city = rng.integers(0, c.n_cities, size=c.n_people)
    birth_year = rng.integers(1850, 1996, size=c.n_people)
    occupation = rng.integers(0, len(OCCUPATIONS), size=c.n_people)

    founder = rng.choice(c.n_people, size=c.n_companies, replace=False)
    company_year = np.minimum(birth_year[founder] + rng.integers(22, 56, size=c.n_companies), 2022)
    company_hq = rng.integers(0, c.n_cities, size=c.n_companies)
    company_industry = rng.integers(0, len(INDUSTRIES), size=c.n_companies)
    founded = np.full(c.n_people, -1, dtype=np.int64)
    founded[founder] = np.arange(c.n_companies)

    employed = (rng.random(c.n_people) < c.employed_fraction) & (founded < 0)
    employer = np.where(employed, rng.integers(0, c.n_companies, size=c.n_people), -1)

    n_directors = max(1, min(c.n_films, c.n_people, round(c.n_films * c.directors_per_film)))
    directors = rng.choice(c.n_people, size=n_directors, replace=False)
    film_director = directors[_permuted_cover(rng, c.n_films, n_directors)]
    film_year = np.minimum(birth_year[film_director] + rng.integers(24, 66, size=c.n_films), 2024)
    film_genre = rng.integers(0, len(GENRES), size=c.n_films)
    n_occ = len(OCCUPATIONS)
    occupation[directors] = n_occ + rng.integers(0, len(FILM_OCCUPATIONS), size=n_directors)

    river_source = rng.integers(0, c.n_countries, size=c.n_rivers)
    river_length = rng.integers(30, 4500, size=c.n_rivers)
    river_cities = rng.integers(0, c.n_cities, size=(c.n_rivers, 3))
    for _ in range(100):  # mouth and the two through-cities pairwise distinct
        bad = (
            (river_cities[:, 0] == river_cities[:, 1])
            | (river_cities[:, 0] == river_cities[:, 2])
            | (river_cities[:, 1] == river_cities[:, 2])
        )
        if not bad.any():
            break
        river_cities[bad] = rng.integers(0, c.n_cities, size=(int(bad.sum()), 3))
    else:  # pragma: no cover
        raise ValueError("rivers need at least 3 cities")

    def ent(
        kind: str, names: tuple[str, ...], short: tuple[str, ...], aliases: tuple[tuple[str, ...], ...], **attrs: object
    ) -> Entities:
        return Entities(kind, names, short, aliases, {k: np.asarray(v, dtype=np.int64) for k, v in attrs.items()})

    entities = {
        "person": ent(
            "person",
            person_names,
            person_short,
            person_aliases,
            birth_city=birth_city,
            birth_year=birth_year,
            occupation=occupation,
            employer=employer,
            founded=founded,
        ),
        "city": ent(
            "city",
            city_names,
            tuple(city_stems),
            tuple((s,) if s != n else () for s, n in zip(city_stems, city_names, strict=True)),
            country=city_country,
            population=city_population,
            year=city_year,
        ),
        "company": ent(
            "company",
            company_names,
            tuple(company_stems),
            tuple((s,) for s in company_stems),
            founder=founder,
            hq=company_hq,
            year=company_year,
            industry=company_industry,
        ),
        "film": ent(
            "film",
            film_names,
            film_names,
            tuple(() for _ in film_names),
            director=film_director,
            year=film_year,
            genre=film_genre,
        ),
        "river": ent(
            "river",
            river_names,
            tuple(river_stems),
            tuple((s,) for s in river_stems),
            source=river_source,
            mouth=river_cities[:, 0],
            length=river_length,
        ),
        "country": ent(
            "country",
            country_names,
            country_names,
            tuple((f,) for f in country_formal),
            capital=country_capital,
            independence=country_independence,
        ),
    }
    return KnowledgeBase(entities, river_cities[:, 1:].copy(), OCCUPATIONS + FILM_OCCUPATIONS, tuple(event_words))


def _join(items: Sequence[str]) -> str:
    """``"A"``, ``"A and B"``, ``"A, B and C"``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _group(keys: np.ndarray, n: int) -> list[list[int]]:
    """``out[k]`` = indices ``i`` with ``keys[i] == k`` (ascending), for ``k`` in ``[0, n)``; ``-1`` keys skipped."""
    out: list[list[int]] = [[] for _ in range(n)]
    for i, k in enumerate(keys.tolist()):
        if k >= 0:
            out[k].append(i)
    return out


@dataclass(frozen=True, eq=False)
class RenderedCorpus:
    """The corpus (ids ``"0".."N-1"``, in id order) and the page doc index of every entity."""

    docs: list[Document]
    page_doc: Mapping[str, np.ndarray]  # kind -> int array: entity index -> doc index (== int(doc id))


def render_corpus(kb: KnowledgeBase, config: DatasetConfig, rng: np.random.Generator) -> RenderedCorpus:
    """Render entity pages, distractors, surname pages and event reports; shuffle them into ids ``0..N-1``."""
    titles: list[str] = []
    texts: list[str] = []
    page_start: dict[str, int] = {}
    P, C, K, F, R, N = (kb[k] for k in ("person", "city", "company", "film", "river", "country"))
    occ_names = kb.occupation_names

    def pick(templates: Sequence[str], n: int) -> list[int]:
        return rng.integers(0, len(templates), size=n).tolist()

    # --- people ---------------------------------------------------------------------------------------------
    page_start["person"] = len(titles)
    pa = {k: v.tolist() for k, v in P.attrs.items()}
    films_by_director = _group(F.attrs["director"], len(P))
    t_lead, t_emp, t_fnd, t_fill = (
        pick(t, len(P)) for t in (PERSON_LEAD, PERSON_EMPLOYER, PERSON_FOUNDED, PERSON_FILLER)
    )
    k_year, f_year = K.attrs["year"].tolist(), F.attrs["year"].tolist()
    for i in range(len(P)):
        name, short = P.names[i], P.short[i]
        parts = [
            PERSON_LEAD[t_lead[i]].format(
                name=name, occ=indefinite(occ_names[pa["occupation"][i]]), city=C.names[pa["birth_city"][i]],
                year=pa["birth_year"][i],
            )
        ]  # fmt: skip
        if (e := pa["employer"][i]) >= 0:
            parts.append(PERSON_EMPLOYER[t_emp[i]].format(name=name, short=short, company=K.names[e]))
        if (k := pa["founded"][i]) >= 0:
            parts.append(PERSON_FOUNDED[t_fnd[i]].format(short=short, company=K.names[k], year=k_year[k]))
        if films := films_by_director[i]:
            listed = [f"{F.names[f]} ({f_year[f]})" for f in sorted(films, key=lambda f: (f_year[f], f))]
            noun = "the film" if len(listed) == 1 else "the films"
            parts.append(f"{short} directed {noun} {_join(listed)}.")
        if filler := PERSON_FILLER[t_fill[i]]:
            parts.append(filler.format(short=short))
        titles.append(name)
        texts.append(" ".join(parts))

    # --- companies ------------------------------------------------------------------------------------------
    page_start["company"] = len(titles)
    ka = {k: v.tolist() for k, v in K.attrs.items()}
    t_lead, t_fnd, t_fill = (pick(t, len(K)) for t in (COMPANY_LEAD, COMPANY_FOUNDED, COMPANY_FILLER))
    for i in range(len(K)):
        name, short, ind = K.names[i], K.short[i], INDUSTRIES[ka["industry"][i]]
        hq, founder = C.names[ka["hq"][i]], P.names[ka["founder"][i]]
        parts = [
            COMPANY_LEAD[t_lead[i]].format(name=name, industry=indefinite(ind), bare_industry=ind, city=hq),
            COMPANY_FOUNDED[t_fnd[i]].format(name=name, short=short, founder=founder, year=ka["year"][i]),
        ]
        if filler := COMPANY_FILLER[t_fill[i]]:
            parts.append(filler.format(short=short))
        titles.append(name)
        texts.append(" ".join(parts))

    # --- films ----------------------------------------------------------------------------------------------
    page_start["film"] = len(titles)
    fa = {k: v.tolist() for k, v in F.attrs.items()}
    t_lead, t_fill = pick(FILM_LEAD, len(F)), pick(FILM_FILLER, len(F))
    for i in range(len(F)):
        name = F.names[i]
        parts = [
            FILM_LEAD[t_lead[i]].format(
                name=name, year=fa["year"][i], genre=GENRES[fa["genre"][i]], director=P.names[fa["director"][i]]
            )
        ]
        if filler := FILM_FILLER[t_fill[i]]:
            parts.append(filler)
        titles.append(name)
        texts.append(" ".join(parts))

    # --- cities ---------------------------------------------------------------------------------------------
    page_start["city"] = len(titles)
    ca = {k: v.tolist() for k, v in C.attrs.items()}
    capital_of = np.full(len(C), -1, dtype=np.int64)
    capital_of[N.attrs["capital"]] = np.arange(len(N))
    capital_of_l = capital_of.tolist()
    rivers_through = _group(kb.river_through[:, 0], len(C))
    for j, r in enumerate(_group(kb.river_through[:, 1], len(C))):
        rivers_through[j].extend(r)
    river_mouth_at = _group(R.attrs["mouth"], len(C))
    t_lead, t_pop, t_year = pick(CITY_LEAD, len(C)), pick(CITY_POPULATION, len(C)), pick(CITY_FOUNDED, len(C))
    for i in range(len(C)):
        name, short, country = C.names[i], C.short[i], N.names[ca["country"][i]]
        parts = [
            CITY_LEAD[t_lead[i]].format(name=name, country=country),
            CITY_POPULATION[t_pop[i]].format(name=name, short=short, pop=fmt_population(ca["population"][i])),
            CITY_FOUNDED[t_year[i]].format(short=short, year=ca["year"][i]),
        ]
        if capital_of_l[i] >= 0:
            parts.append(f"{name} is the capital of {country}.")
        if through := rivers_through[i]:
            rivers = [R.names[r] for r in sorted(through)]
            verb = "flows" if len(rivers) == 1 else "flow"
            listed = ", the ".join(rivers[:-1]) + " and the " + rivers[-1] if len(rivers) > 1 else rivers[0]
            parts.append(f"The {listed} {verb} through {short}.")
        for r in river_mouth_at[i]:
            parts.append(f"The {R.names[r]} reaches the sea at {short}.")
        titles.append(name)
        texts.append(" ".join(parts))

    # --- countries ------------------------------------------------------------------------------------------
    page_start["country"] = len(titles)
    na = {k: v.tolist() for k, v in N.attrs.items()}
    cities_in = _group(C.attrs["country"], len(N))
    t_lead, t_ind = pick(COUNTRY_LEAD, len(N)), pick(COUNTRY_INDEPENDENCE, len(N))
    for i in range(len(N)):
        name, capital = N.names[i], na["capital"][i]
        parts = [
            COUNTRY_LEAD[t_lead[i]].format(name=name, formal=N.aliases[i][0], capital=C.names[capital]),
            COUNTRY_INDEPENDENCE[t_ind[i]].format(name=name, year=na["independence"][i]),
        ]
        others = [C.names[j] for j in cities_in[i] if j != capital][:3]
        if others:
            parts.append(f"Other cities in {name} include {_join(others)}.")
        titles.append(name)
        texts.append(" ".join(parts))

    # --- rivers ---------------------------------------------------------------------------------------------
    page_start["river"] = len(titles)
    ra = {k: v.tolist() for k, v in R.attrs.items()}
    through_l = kb.river_through.tolist()
    t_lead, t_len = pick(RIVER_LEAD, len(R)), pick(RIVER_LENGTH, len(R))
    for i in range(len(R)):
        name = R.names[i]
        parts = [
            RIVER_LEAD[t_lead[i]].format(name=name, source=N.names[ra["source"][i]], mouth=C.names[ra["mouth"][i]]),
            RIVER_LENGTH[t_len[i]].format(name=name, length=fmt_length(ra["length"][i])),
            f"Along its course it flows through {C.names[through_l[i][0]]} and {C.names[through_l[i][1]]}.",
        ]
        titles.append(name)
        texts.append(" ".join(parts))

    # --- distractors ----------------------------------------------------------------------------------------
    rate = config.distractors_per_entity
    for kind in KINDS:
        E = kb[kind]
        n = len(E)
        count = np.minimum(int(rate) + (rng.random(n) < rate - int(rate)), 2).tolist()
        first_kind = rng.integers(0, 2, size=n).tolist()
        rand_city = rng.integers(0, len(C), size=n).tolist()
        rand_person = rng.integers(0, len(P), size=n).tolist()
        rand_company = rng.integers(0, len(K), size=n).tolist()
        rand_year = rng.integers(1890, 2024, size=n).tolist()
        rand_ind = rng.integers(0, len(INDUSTRIES), size=(n, 2)).tolist()
        seats = rng.integers(2, 90, size=n).tolist()
        for i in range(n):
            for d in range(count[i]):
                title_t, text_t = DISTRACTORS[kind][(first_kind[i] + d) % 2]
                fields = {"name": E.names[i], "short": E.short[i], "year": rand_year[i]}
                if kind == "person":
                    fields.update(company=K.names[rand_company[i]], city=C.names[rand_city[i]])
                elif kind == "film":
                    other = rand_person[i]
                    if other == fa["director"][i]:  # never credit the director under another role
                        other = (other + 1) % len(P)
                    fields["person"] = P.names[other]
                elif kind == "company":
                    fields["city"] = C.names[rand_city[i]]
                elif kind == "city":
                    fields["seats"] = f"{seats[i] * 1000:,}"
                elif kind == "river":
                    fields["city"] = C.names[through_l[i][0]]
                else:
                    in_country = cities_in[i]
                    fields["city"] = C.names[in_country[rand_city[i] % len(in_country)]]
                    a, b = rand_ind[i]
                    fields.update(
                        industry=INDUSTRIES[a], industry2=INDUSTRIES[(b if b != a else a + 1) % len(INDUSTRIES)]
                    )
                titles.append(title_t.format(**fields))
                texts.append(text_t.format(**fields))

    # Surname pages for surnames shared by two or more people.
    by_surname: dict[str, list[int]] = {}
    for i, s in enumerate(P.short):
        by_surname.setdefault(s, []).append(i)
    for surname, people in by_surname.items():
        if len(people) > 1:
            listed = [f"{P.names[p]}, {indefinite(occ_names[pa['occupation'][p]])}" for p in people]
            titles.append(f"{surname} (surname)")
            texts.append(SURNAME_TEXT.format(surname=surname, people="; ".join(listed)))

    # Event reports naming random entities in passing.
    n_ev = len(kb.event_words)
    if n_ev:
        ev_year = rng.integers(1950, 2024, size=n_ev).tolist()
        ev_kind = rng.integers(0, len(EVENT_KINDS), size=n_ev).tolist()
        ev_city = rng.integers(0, len(C), size=n_ev).tolist()
        ev_people = rng.integers(0, len(P), size=(n_ev, 2)).tolist()
        ev_film = rng.integers(0, len(F), size=n_ev).tolist()
        ev_company = rng.integers(0, len(K), size=n_ev).tolist()
        for j, word in enumerate(kb.event_words):
            p1, p2 = ev_people[j]
            if p1 == p2:
                p2 = (p2 + 1) % len(P)
            kind = EVENT_KINDS[ev_kind[j]]
            titles.append(f"{ev_year[j]} {word} {kind}")
            texts.append(
                EVENT_TEXT.format(
                    year=ev_year[j], word=word, kind=kind, city=C.names[ev_city[j]], p1=P.names[p1], p2=P.names[p2],
                    film=F.names[ev_film[j]], company=K.names[ev_company[j]],
                )
            )  # fmt: skip

    # --- shuffle into ids ------------------------------------------------------------------------------------
    n_docs = len(titles)
    perm = rng.permutation(n_docs)  # generation position -> doc index
    docs: list[Document | None] = [None] * n_docs
    for pos, idx in enumerate(perm.tolist()):
        docs[idx] = Document.from_title_text(str(idx), titles[pos], texts[pos])
    page_doc = {kind: perm[page_start[kind] : page_start[kind] + len(kb[kind])] for kind in KINDS}
    return RenderedCorpus(docs, page_doc)  # type: ignore[arg-type]
