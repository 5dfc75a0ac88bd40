"""Spider- and BIRD-format data for SQL-v0 (``data_dir=``).

The folder holds ``tables.json`` (a list of ``{"db_id": ..., "table_names_original": [...], ...}``), a question file
(a list of ``{"db_id", "question", "query"}`` in Spider, ``{"db_id", "question", "SQL", "difficulty"?}`` in BIRD)
and the databases as ``database/<db_id>/<db_id>.sqlite`` (Spider) or ``dev_databases/<db_id>/<db_id>.sqlite``
(BIRD). Databases are opened read-only. Questions whose ``db_id`` is not in ``tables.json`` or has no database file
are an error at construction, naming them.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

_DB_FOLDERS = ("database", "dev_databases", "train_databases")


@dataclass(frozen=True)
class Item:
    """One question of the file: its database, text, gold SQL and difficulty (BIRD's, else ``"spider"``)."""

    db_id: str
    question: str
    sql: str
    difficulty: str


class SpiderData:
    """The questions and databases of a Spider/BIRD-format folder."""

    def __init__(self, data_dir: str | Path, questions: str = "dev.json"):
        self.root = Path(data_dir)
        tables_file, questions_file = self.root / "tables.json", self.root / questions
        for f in (tables_file, questions_file):
            if not f.is_file():
                raise FileNotFoundError(f"SQL-v0 data_dir: {f} is missing (Spider/BIRD format: tables.json, "
                                        f"{questions}, database/<db_id>/<db_id>.sqlite)")  # fmt: skip
        self.tables = {t["db_id"]: t for t in json.loads(tables_file.read_text())}
        self.items: list[Item] = []
        for k, q in enumerate(json.loads(questions_file.read_text())):
            sql = q.get("query", q.get("SQL"))
            if not isinstance(sql, str) or not isinstance(q.get("question"), str) or q.get("db_id") not in self.tables:
                raise ValueError(f"{questions_file}: item {k} needs db_id (listed in tables.json), question and "
                                 "query (Spider) or SQL (BIRD)")  # fmt: skip
            self.items.append(Item(q["db_id"], q["question"], sql, str(q.get("difficulty", "spider"))))
        missing = sorted({i.db_id for i in self.items if self._find(i.db_id) is None})
        if missing:
            raise FileNotFoundError(f"SQL-v0 data_dir: no database file for {missing} under {list(_DB_FOLDERS)}")
        if not self.items:
            raise ValueError(f"{questions_file} holds no questions")

    def _find(self, db_id: str) -> Path | None:
        for folder in _DB_FOLDERS:
            if (p := self.root / folder / db_id / f"{db_id}.sqlite").is_file():
                return p
        return None

    def db_path(self, db_id: str) -> Path:
        path = self._find(db_id)
        assert path is not None
        return path

    def schema(self, db_id: str) -> dict[str, list[tuple[str, str]]]:
        """Each table's ``(column, type)`` list, read from the file itself (read-only, trusted statements)."""
        uri = self.db_path(db_id).resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT "
                                                "LIKE 'sqlite_%' ORDER BY name")]  # fmt: skip
            return {n: [(r[1], r[2]) for r in conn.execute("SELECT * FROM pragma_table_info(?)", (n,))] for n in names}
        finally:
            conn.close()
