"""Seeded SQLite databases of four domains and their questions, generated offline with numpy.

A database is built from ``(domain, seed)``: a handful of tables (tens to a few hundred rows each), written to an
in-memory SQLite database and serialised (``Database.data``, a few tens of KB, built in milliseconds). Questions come
from templates filled with values drawn from the data (single-table filters, GROUP BY aggregates, joins, nested
queries, ORDER BY/LIMIT); each candidate's gold SQL is run, and it is kept only if its result is non-empty and
unambiguous (an ordered top-k needs strictly distinct sort keys down to row k + 1), so every gold query is correct by
construction.

>>> db = build_database("shop", 0)
>>> sorted(db.schema)
['customers', 'orders', 'products']
>>> q = make_questions(db, 0, 3)[0]
>>> q.difficulty in DIFFICULTIES, q.sql.startswith("SELECT")
(True, True)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DOMAINS = ("shop", "university", "flights", "library")
DIFFICULTIES = ("filter", "aggregate", "join", "nested", "order")

_FIRST = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "June", "Kai", "Lena", "Milo", "Nia",
          "Otto", "Pia", "Quin", "Rosa", "Sami", "Tara", "Uma", "Vik", "Wren", "Yara", "Zeno")  # fmt: skip
_LAST = ("Adams", "Brook", "Chen", "Diaz", "Evans", "Fox", "Garcia", "Hill", "Ito", "Jones", "Khan", "Lopez", "Moreau",
          "Novak", "Okafor", "Park", "Quist", "Rossi", "Singh", "Tanaka", "Ueda", "Vance", "Weber", "Xu")  # fmt: skip
_CITIES = ("Lyon", "Osaka", "Porto", "Quito", "Tunis", "Perth", "Oslo", "Cusco", "Hanoi", "Accra")
_COUNTRIES = ("France", "Japan", "Portugal", "Ecuador", "Tunisia", "Australia", "Norway", "Peru", "Vietnam", "Ghana")


@dataclass(frozen=True)
class Column:
    """A column: its name, SQL type, what the questions call it, and whether it is categorical (filters by value)."""

    name: str
    type: str
    phrase: str
    kind: str = "num"  # "key", "fk:<table>", "name" (the row's label), "cat" (few values) or "num"


@dataclass(frozen=True)
class Table:
    """A table: its name, the singular noun questions use, and its columns (the first is the integer key ``id``)."""

    name: str
    noun: str
    columns: tuple[Column, ...]

    def col(self, kind: str) -> list[Column]:
        return [c for c in self.columns if c.kind == kind or (kind == "fk" and c.kind.startswith("fk:"))]


@dataclass(frozen=True)
class Database:
    """A built database: its domain, seed, tables (``schema``: name -> Table) and the serialised SQLite file."""

    domain: str
    seed: int
    schema: dict[str, Table]
    data: bytes

    @property
    def db_id(self) -> str:
        return f"{self.domain}_{self.seed}"


@dataclass(frozen=True)
class Question:
    """One question over a database: its natural-language text, gold SQL and difficulty."""

    text: str
    sql: str
    difficulty: str


def _names(rng: np.random.Generator, n: int) -> list[str]:
    return [f"{_FIRST[rng.integers(len(_FIRST))]} {_LAST[rng.integers(len(_LAST))]}" for _ in range(n)]


def _pick(rng: np.random.Generator, values: tuple[str, ...], n: int, k: int | None = None) -> list[str]:
    pool = values[: k or len(values)]
    return [pool[i] for i in rng.integers(len(pool), size=n)]


def _int(rng: np.random.Generator, lo: int, hi: int, n: int) -> list[int]:
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def _money(rng: np.random.Generator, lo: float, hi: float, n: int) -> list[float]:
    return [round(float(x), 2) for x in rng.uniform(lo, hi, size=n)]


def _K(name: str) -> Column:
    return Column(name, "INTEGER", "id", "key")


# Each domain: its tables (schema) and a row generator returning {table: columns as lists}, from (rng, sizes).
_SCHEMAS: dict[str, tuple[Table, ...]] = {
    "shop": (
        Table("customers", "customer", (_K("id"), Column("name", "TEXT", "name", "name"),
              Column("city", "TEXT", "city", "cat"), Column("joined_year", "INTEGER", "year joined"))),
        Table("products", "product", (_K("id"), Column("name", "TEXT", "name", "name"),
              Column("category", "TEXT", "category", "cat"), Column("price", "REAL", "price"))),
        Table("orders", "order", (_K("id"), Column("customer_id", "INTEGER", "customer", "fk:customers"),
              Column("product_id", "INTEGER", "product", "fk:products"), Column("quantity", "INTEGER", "quantity"),
              Column("status", "TEXT", "status", "cat"))),
    ),
    "university": (
        Table("students", "student", (_K("id"), Column("name", "TEXT", "name", "name"),
              Column("major", "TEXT", "major", "cat"), Column("gpa", "REAL", "GPA"))),
        Table("courses", "course", (_K("id"), Column("title", "TEXT", "title", "name"),
              Column("department", "TEXT", "department", "cat"), Column("credits", "INTEGER", "credits"))),
        Table("enrollments", "enrollment", (_K("id"), Column("student_id", "INTEGER", "student", "fk:students"),
              Column("course_id", "INTEGER", "course", "fk:courses"), Column("grade", "INTEGER", "grade"),
              Column("term", "TEXT", "term", "cat"))),
    ),
    "flights": (
        Table("airlines", "airline", (_K("id"), Column("name", "TEXT", "name", "name"),
              Column("country", "TEXT", "country", "cat"), Column("fleet_size", "INTEGER", "fleet size"))),
        Table("airports", "airport", (_K("id"), Column("code", "TEXT", "code", "name"),
              Column("city", "TEXT", "city", "cat"), Column("runways", "INTEGER", "number of runways"))),
        Table("flights", "flight", (_K("id"), Column("airline_id", "INTEGER", "airline", "fk:airlines"),
              Column("origin_id", "INTEGER", "origin airport", "fk:airports"),
              Column("distance", "INTEGER", "distance"), Column("fare", "REAL", "fare"))),
    ),
    "library": (
        Table("authors", "author", (_K("id"), Column("name", "TEXT", "name", "name"),
              Column("country", "TEXT", "country", "cat"), Column("birth_year", "INTEGER", "birth year"))),
        Table("books", "book", (_K("id"), Column("title", "TEXT", "title", "name"),
              Column("author_id", "INTEGER", "author", "fk:authors"), Column("genre", "TEXT", "genre", "cat"),
              Column("pages", "INTEGER", "number of pages"))),
        Table("loans", "loan", (_K("id"), Column("book_id", "INTEGER", "book", "fk:books"),
              Column("member", "TEXT", "member", "cat"), Column("days", "INTEGER", "number of days"))),
    ),
}  # fmt: skip

_CATS = {
    "category": ("toys", "books", "garden", "kitchen", "music", "sports"),
    "status": ("shipped", "pending", "returned", "cancelled"),
    "major": ("physics", "history", "biology", "economics", "art", "law"),
    "department": ("science", "humanities", "business", "arts"),
    "term": ("fall", "spring", "summer"),
    "genre": ("mystery", "poetry", "fantasy", "history", "travel", "drama"),
    "member": ("gold", "silver", "bronze", "staff"),
}
_WORDS = ("Red", "Blue", "Swift", "Quiet", "Bright", "Old", "Grand", "Small", "North", "Silver", "Wild", "Golden")
_NOUNS = ("Lamp", "River", "Garden", "Engine", "Harbor", "Forest", "Bridge", "Stone", "Tower", "Song", "Map", "Key")


def _value(rng: np.random.Generator, table: Table, col: Column, n: int, sizes: dict[str, int]) -> list:
    if col.kind == "key":
        return list(range(1, n + 1))
    if col.kind.startswith("fk:"):
        return _int(rng, 1, sizes[col.kind[3:]], n)
    if col.kind == "name":
        if col.name == "code":
            letters = rng.choice(list("ABCDEFGHKLMNPRSTVWXZ"), size=(n, 3))
            return ["".join(r) for r in letters]
        if col.name == "title" or table.name == "products":
            return [f"{_WORDS[rng.integers(12)]} {_NOUNS[rng.integers(12)]}" for _ in range(n)]
        if table.name in ("airlines",):
            return [f"{_WORDS[rng.integers(12)]} Air" for _ in range(n)]
        return _names(rng, n)
    if col.kind == "cat":
        if col.name == "city":
            return _pick(rng, _CITIES, n, 6)
        if col.name == "country":
            return _pick(rng, _COUNTRIES, n, 6)
        return _pick(rng, _CATS[col.name], n)
    if col.type == "REAL":
        lo, hi = {"gpa": (1.5, 4.0), "price": (2.0, 300.0), "fare": (40.0, 900.0)}[col.name]
        return _money(rng, lo, hi, n)
    lo, hi = {"joined_year": (2010, 2024), "quantity": (1, 9), "credits": (1, 6), "grade": (40, 100),
              "fleet_size": (5, 400), "runways": (1, 6), "distance": (150, 9000), "birth_year": (1900, 1995),
              "pages": (60, 900), "days": (1, 60)}[col.name]  # fmt: skip
    return _int(rng, lo, hi, n)


def _ddl(c: Column) -> str:
    key = " PRIMARY KEY" if c.kind == "key" else ""
    return f"{c.name} {c.type}{key}" + (f" REFERENCES {c.kind[3:]}(id)" if c.kind.startswith("fk:") else "")


def build_database(domain: str, seed: int) -> Database:
    """The database ``(domain, seed)``: tables of 20-40 (parents) and 120-200 (the fact table) rows, serialised."""
    if domain not in _SCHEMAS:
        raise ValueError(f"unknown domain {domain!r}; known: {list(DOMAINS)}")
    rng = np.random.default_rng([DOMAINS.index(domain), seed])
    tables = _SCHEMAS[domain]
    sizes = {t.name: int(rng.integers(20, 41)) for t in tables[:2]}
    sizes[tables[2].name] = int(rng.integers(120, 201))
    conn = sqlite3.connect(":memory:")
    try:
        for t in tables:
            cols = ", ".join(_ddl(c) for c in t.columns)
            conn.execute(f"CREATE TABLE {t.name} ({cols})")
            n = sizes[t.name]
            values = [_value(rng, t, c, n, sizes) for c in t.columns]
            marks = ", ".join("?" * len(t.columns))
            conn.executemany(f"INSERT INTO {t.name} VALUES ({marks})", list(zip(*values, strict=True)))
        conn.commit()
        data = conn.serialize()
    finally:
        conn.close()
    return Database(domain, seed, {t.name: t for t in tables}, data)


# -- questions -------------------------------------------------------------------------------------------------
Candidate = tuple[str, str, str, tuple[str, int] | None]  # text, sql, difficulty, (order-key sql, k) or None
_Template = Callable[[np.random.Generator, Database, sqlite3.Connection], Candidate | None]


def _one(conn: sqlite3.Connection, sql: str) -> list:
    return [r[0] for r in conn.execute(sql).fetchall()]


def _draw(rng: np.random.Generator, values: list) -> object:
    return values[int(rng.integers(len(values)))]


def _tables(db: Database) -> tuple[Table, Table, Table]:
    a, b, c = db.schema.values()
    return a, b, c


def _t_filter_cat(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    t = _draw(rng, list(db.schema.values()))
    assert isinstance(t, Table)
    if not t.col("cat") or not t.col("name"):
        return None
    cat, name = t.col("cat")[0], t.col("name")[0]
    v = _draw(rng, sorted(set(_one(conn, f"SELECT {cat.name} FROM {t.name}"))))
    return (f"List the {name.phrase} of every {t.noun} whose {cat.phrase} is '{v}'.",
            f"SELECT {name.name} FROM {t.name} WHERE {cat.name} = '{v}'", "filter", None)  # fmt: skip


def _t_filter_num(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    t = _draw(rng, [x for x in db.schema.values() if x.col("name")])
    assert isinstance(t, Table)
    num, name = _draw(rng, t.col("num")), t.col("name")[0]
    assert isinstance(num, Column)
    v = _draw(rng, sorted(_one(conn, f"SELECT {num.name} FROM {t.name}")))
    op, word = ("<", "less than") if rng.random() < 0.5 else (">", "greater than")
    return (f"Which {t.noun}s have a {num.phrase} {word} {v}? Give their {name.phrase}s.",
            f"SELECT {name.name} FROM {t.name} WHERE {num.name} {op} {v}", "filter", None)  # fmt: skip


def _t_group_count(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    t = _draw(rng, [x for x in db.schema.values() if x.col("cat")])
    assert isinstance(t, Table)
    cat = t.col("cat")[0]
    if rng.random() < 0.5:
        return (f"How many {t.noun}s are there for each {cat.phrase}? Give the {cat.phrase} and the count.",
                f"SELECT {cat.name}, COUNT(*) FROM {t.name} GROUP BY {cat.name}", "aggregate", None)  # fmt: skip
    num = _draw(rng, t.col("num"))
    assert isinstance(num, Column)
    fn, word = _draw(rng, [("MAX", "highest"), ("MIN", "lowest"), ("SUM", "total")])  # type: ignore[misc]
    return (f"For each {cat.phrase}, what is the {word} {num.phrase} of the {t.noun}s? Give the {cat.phrase} and "
            f"the value.", f"SELECT {cat.name}, {fn}({num.name}) FROM {t.name} GROUP BY {cat.name}", "aggregate",
            None)  # fmt: skip


def _t_join_filter(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    _, _, fact = _tables(db)
    fk = _draw(rng, fact.col("fk"))
    assert isinstance(fk, Column)
    parent = db.schema[fk.kind[3:]]
    if not parent.col("cat"):
        return None
    pcat, num = parent.col("cat")[0], _draw(rng, fact.col("num"))
    assert isinstance(num, Column)
    v = _draw(rng, sorted(set(_one(conn, f"SELECT {pcat.name} FROM {parent.name}"))))
    return (f"List the {num.phrase} of every {fact.noun} whose {fk.phrase} has {pcat.phrase} '{v}'.",
            f"SELECT T1.{num.name} FROM {fact.name} AS T1 JOIN {parent.name} AS T2 ON T1.{fk.name} = T2.id "
            f"WHERE T2.{pcat.name} = '{v}'", "join", None)  # fmt: skip


def _t_join_group(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    _, _, fact = _tables(db)
    fk = _draw(rng, fact.col("fk"))
    assert isinstance(fk, Column)
    parent = db.schema[fk.kind[3:]]
    pcat = parent.col("cat")[0]
    return (f"For each {pcat.phrase} of the {parent.noun}s, how many {fact.noun}s are there? Give the "
            f"{pcat.phrase} and the count.",
            f"SELECT T2.{pcat.name}, COUNT(*) FROM {fact.name} AS T1 JOIN {parent.name} AS T2 ON T1.{fk.name} = "
            f"T2.id GROUP BY T2.{pcat.name}", "join", None)  # fmt: skip


def _t_nested_avg(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    t = _draw(rng, [x for x in db.schema.values() if x.col("name")])
    assert isinstance(t, Table)
    num, name = _draw(rng, t.col("num")), t.col("name")[0]
    assert isinstance(num, Column)
    return (f"Which {t.noun}s have a {num.phrase} above the average {num.phrase} of all {t.noun}s? Give their "
            f"{name.phrase}s.",
            f"SELECT {name.name} FROM {t.name} WHERE {num.name} > (SELECT AVG({num.name}) FROM {t.name})", "nested",
            None)  # fmt: skip


def _t_nested_in(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    _, _, fact = _tables(db)
    fk, num = _draw(rng, fact.col("fk")), _draw(rng, fact.col("num"))
    assert isinstance(fk, Column) and isinstance(num, Column)
    parent = db.schema[fk.kind[3:]]
    name = parent.col("name")[0]
    v = _draw(rng, sorted(_one(conn, f"SELECT {num.name} FROM {fact.name}")))
    return (
        f"Give the {name.phrase} of every {parent.noun} with at least one {fact.noun} whose {num.phrase} is greater "
        f"than {v}.",
        f"SELECT {name.name} FROM {parent.name} WHERE id IN (SELECT {fk.name} FROM {fact.name} WHERE {num.name} > {v})",
        "nested",
        None,
    )


def _t_top_k(rng: np.random.Generator, db: Database, conn: sqlite3.Connection) -> Candidate | None:
    t = _draw(rng, [x for x in db.schema.values() if x.col("name")])
    assert isinstance(t, Table)
    num, name = _draw(rng, t.col("num")), t.col("name")[0]
    assert isinstance(num, Column)
    k = int(rng.integers(2, 6))
    desc = rng.random() < 0.5
    word, order = ("highest", "DESC") if desc else ("lowest", "ASC")
    return (f"Which {k} {t.noun}s have the {word} {num.phrase}? List their {name.phrase}s and {num.phrase}, from "
            f"the {word} down.",
            f"SELECT {name.name}, {num.name} FROM {t.name} ORDER BY {num.name} {order} LIMIT {k}", "order",
            (f"SELECT {num.name} FROM {t.name} ORDER BY {num.name} {order} LIMIT {k + 1}", k))  # fmt: skip


#: The templates in the order questions draw them: each difficulty twice in ten slots.
TEMPLATES: tuple[_Template, ...] = (_t_filter_cat, _t_group_count, _t_join_filter, _t_nested_avg, _t_top_k,
                                    _t_filter_num, _t_group_count, _t_join_group, _t_nested_in, _t_top_k)  # fmt: skip


def open_copy(data: bytes) -> sqlite3.Connection:
    """A private in-memory copy of a serialised database (writable: for trusted code only). Statements are not
    cached, so an authorizer sees every statement prepared afresh."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, cached_statements=0)
    conn.deserialize(data)
    return conn


def _well_posed(conn: sqlite3.Connection, cand: Candidate) -> bool:
    """The gold's result is non-empty, has no NULL, and a top k is strictly ordered down to row k + 1 (no tie)."""
    rows = conn.execute(cand[1]).fetchall()
    if not rows or any(v is None for r in rows for v in r):
        return False
    keys = _one(conn, cand[3][0]) if cand[3] is not None else []
    return len(set(keys)) == len(keys)


def make_questions(db: Database, seed: int, n: int) -> list[Question]:
    """``n`` distinct questions over ``db`` (templates cycled so each difficulty appears), every gold checked."""
    rng = np.random.default_rng([DOMAINS.index(db.domain), db.seed, seed, 7])
    conn = open_copy(db.data)
    out: list[Question] = []
    seen: set[str] = set()
    try:
        for slot in range(5 * n):  # templates in turn, each tried a few times, so every difficulty is common
            if len(out) >= n:
                break
            for _ in range(10):
                cand = TEMPLATES[slot % len(TEMPLATES)](rng, db, conn)
                if cand is not None and cand[1] not in seen and _well_posed(conn, cand):
                    seen.add(cand[1])
                    out.append(Question(cand[0], cand[1], cand[2]))
                    break
    finally:
        conn.close()
    if len(out) < n:
        raise RuntimeError(f"{db.db_id}: only {len(out)} of {n} questions could be generated")
    return out
