"""SQL-v0: multi-turn text-to-SQL over a schema the agent must discover, judged by execution match.

An episode is one question over one SQLite database. The agent first sees only the question and the tools; it
explores with Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (or an OpenAI assistant
message as JSON with ``tool_calls``), up to ``MAX_CALLS_PER_TURN`` a turn:

* ``list_tables()``, ``describe_table(table)`` (columns and types), ``sample_rows(table, n)`` (at most ``row_limit``);
* ``run_query(sql)``: any read-only SELECT; the result comes back cut to ``row_limit`` rows and ``MAX_OUTPUT_CHARS``;
* ``submit_query(sql)``: the final answer; it ends the episode (later calls of the turn do not run). Outcome
  (component ``outcome``): 1.0 when its result equals the gold query's (``results_match``: the same rows as a
  multiset, in the same order only when the gold has a top-level ORDER BY, up to a permutation of the columns).

Queries run in ``agentgym.envs.sql.engine.SafeDatabase`` (read-only, no ATTACH, no extensions, an authorizer that
allows reads only, a step budget): a hostile or broken query is a valid call whose error is the observation.

Verified turn signals in each step's ``info`` (TRUST-SQL's ``dual_track`` reads the first two):
``phase`` (``"execution"`` on the step that submits, else ``"exploration"``), ``exploration_reward`` (the share of
the gold query's tables and columns the agent has discovered so far: by listing tables, describing or sampling a
table, or reading them in a query that ran), ``query_executed`` (whether the step's ``run_query`` calls all ran; None
without one) and ``result_overlap`` (the best ``result_overlap`` of the step's query results with the gold result;
None without one).

Tasks: ``DBS_PER_DOMAIN`` seeded databases in each of four domains (``databases.DOMAINS``), ``QUESTIONS_PER_DB``
questions each; task ``i`` is of domain ``i % D``. With ``data_dir=`` the env plays Spider- or BIRD-format data
instead (``agentgym.envs.sql.spider``).

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/SQL-v0")
>>> obs, info = env.reset(options={"task_index": 0})
>>> obs[-1]["content"]
"List the name of every product whose category is 'kitchen'."
>>> obs, r, term, trunc, info = env.step('<tool_call>{"name": "list_tables", "arguments": {}}</tool_call>')
>>> obs[0]["content"], info["phase"], info["exploration_reward"]
('customers\\norders\\nproducts', 'exploration', 0.333...)
>>> sql = "SELECT DISTINCT name AS n FROM products WHERE 'kitchen' = category"
>>> call = {"name": "submit_query", "arguments": {"sql": sql}}
>>> obs, r, term, trunc, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
>>> r, term, info["phase"]
(1.0, True, 'execution')
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, ToolCall, is_blank, parse_tool_turn
from agentgym.contract.trust import declare, integer, one_of
from agentgym.envs.sql.agents import HeuristicAgent, OracleAgent, RandomAgent
from agentgym.envs.sql.databases import DOMAINS, Database, build_database, make_questions
from agentgym.envs.sql.engine import GOLD_MAX_ROWS, QueryResult, SafeDatabase, has_order, result_overlap, results_match
from agentgym.envs.sql.spider import SpiderData
from agentgym.envs.tool_use.tools import ArgumentError, schema_of, tool, tool_names, validate_arguments

DBS_PER_DOMAIN = 25
QUESTIONS_PER_DB = 20
MAX_CALLS_PER_TURN = 8
MAX_OUTPUT_CHARS = 4_000
MAX_CELL_CHARS = 100
#: Databases an env keeps built and open (each well under 100 KB).
_CACHED_DBS = 32

SYSTEM = (
    "You answer the user's question by writing one SQLite query over a database you have not seen. Explore it with "
    "the functions listed as JSON schemas between <tools> and </tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call functions, put one JSON object per call in your turn, each inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n'
    "Each result comes back as a tool message; query results show at most {rows} rows. The database is read-only. "
    "When your query returns exactly the rows the question asks for, call submit_query with it: that ends the "
    "episode, and only that query counts. Its result is compared with the correct one as a set of rows (in order "
    "only when the question asks for an order), so select exactly the columns asked for."
)


class SQLTools:
    """The tools of SQL-v0; the env runs them (their schemas come from these signatures and docstrings)."""

    @tool
    def list_tables(self) -> str:
        """List the tables of the database."""
        raise NotImplementedError

    @tool
    def describe_table(self, table: str) -> str:
        """Show a table's columns and their types.

        Args:
            table: the table's name.
        """
        raise NotImplementedError

    @tool
    def sample_rows(self, table: str, n: int = 3) -> str:
        """Show the first rows of a table.

        Args:
            table: the table's name.
            n: how many rows.
        """
        raise NotImplementedError

    @tool
    def run_query(self, sql: str) -> str:
        """Run one read-only SQLite query and show its result.

        Args:
            sql: one SELECT statement.
        """
        raise NotImplementedError

    @tool
    def submit_query(self, sql: str) -> str:
        """Submit the final query answering the question; this ends the episode.

        Args:
            sql: one SELECT statement.
        """
        raise NotImplementedError


def tool_schemas() -> dict[str, dict[str, Any]]:
    """``{name: OpenAI function schema}`` of the env's tools."""
    return {name: schema_of(getattr(SQLTools, name)) for name in tool_names(SQLTools)}


def _cell(v: Any) -> str:
    text = "NULL" if v is None else v.hex() if isinstance(v, bytes) else str(v)
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 3] + "..."


def format_result(result: QueryResult, row_limit: int) -> str:
    """A query result as a tool message: a header, at most ``row_limit`` rows, a count of the rest; or the error."""
    if result.error is not None:
        return f"Error: {result.error}"
    lines = [" | ".join(_cell(c) for c in result.columns)]
    lines += [" | ".join(_cell(v) for v in row) for row in result.rows[:row_limit]]
    more = len(result.rows) - row_limit
    text = "\n".join(lines)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + "\n[output cut]"
    if result.truncated:
        text += f"\n[more than {len(result.rows):,} rows; showing {min(row_limit, len(result.rows))}]"
    elif more > 0:
        text += f"\n[{len(result.rows)} rows; showing {row_limit}]"
    elif not result.rows:
        text += "\n[no rows]"
    return text


@dataclass(frozen=True)
class Task:
    """One question: its id, database key, text, gold SQL and difficulty."""

    task_id: str
    db_key: str
    question: str
    sql: str
    difficulty: str


@dataclass
class Loaded:
    """A database opened for play: its safe connection, schema (table -> [(column, type)])."""

    db: SafeDatabase
    schema: dict[str, list[tuple[str, str]]]


@dataclass
class Episode:
    """The env's episode state (the database is immutable, so this is all of it)."""

    task: Task
    gold_rows: list[tuple]
    gold_elements: frozenset[tuple[str, str]]
    discovered: frozenset[tuple[str, str]] = frozenset()
    queries: frozenset[str] = frozenset()
    calls: int = 0
    queries_run: int = 0
    queries_failed: int = 0
    invalid_calls: int = 0

    def copy(self) -> Episode:
        return dataclasses.replace(self)


class SQLEnv(AgentEnv):
    """Text-to-SQL with schema discovery (see the module docstring).

    Args:
        domain: ``"all"`` or one of ``DOMAINS`` (generated databases).
        data_dir: a Spider- or BIRD-format folder (``tables.json``, the question file, ``database/<db_id>/
            <db_id>.sqlite``) to play instead of the generated databases; operator-only.
        questions: the question file's name inside ``data_dir`` (Spider ``dev.json``; BIRD ``dev.json`` with ``SQL``).
        row_limit: rows shown of a query result or a sample.
        max_turns: agent turns before truncation.
        invalid_action_penalty: subtracted (component ``format``) for each invalid step.
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "heuristic": HeuristicAgent, "random": RandomAgent}
    public_args = declare(AgentEnv.public_args, domain=one_of("all", *DOMAINS), row_limit=integer(1, 100))

    def __init__(
        self,
        *,
        domain: str = "all",
        data_dir: str | None = None,
        questions: str = "dev.json",
        row_limit: int = 20,
        max_turns: int = 10,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if domain != "all" and domain not in DOMAINS:
            raise ValueError(f"domain must be 'all' or one of {list(DOMAINS)}, got {domain!r}")
        if not 1 <= row_limit <= 10_000:
            raise ValueError(f"row_limit must be in 1..10000, got {row_limit}")
        self.domains = list(DOMAINS) if domain == "all" else [domain]
        self.row_limit = row_limit
        self.spider = SpiderData(data_dir, questions) if data_dir is not None else None
        self.num_tasks = (
            len(self.spider.items) if self.spider else DBS_PER_DOMAIN * QUESTIONS_PER_DB * len(self.domains)
        )
        self._schemas = tool_schemas()
        self._system = SYSTEM.format(tools="\n".join(json.dumps(s) for s in self._schemas.values()), rows=row_limit)
        self._dbs: OrderedDict[str, Loaded] = OrderedDict()
        self._generated: dict[str, tuple[Database, list[Task]]] = {}
        self._ep: Episode | None = None

    # -- tasks ----------------------------------------------------------------------------------------------------
    def task_at(self, index: int) -> Task:
        """Task ``index`` (generated: domain ``index % D``; its database and question from ``index // D``)."""
        if self.spider is not None:
            item = self.spider.items[index]
            return Task(f"{item.db_id}/{index}", item.db_id, item.question, item.sql, item.difficulty)
        domain, local = self.domains[index % len(self.domains)], index // len(self.domains)
        seed, q = divmod(local, QUESTIONS_PER_DB)
        key = f"{domain}_{seed}"
        if key not in self._generated:
            if len(self._generated) >= _CACHED_DBS:
                self._generated.pop(next(iter(self._generated)))
            built = build_database(domain, seed)
            qs = make_questions(built, 0, QUESTIONS_PER_DB)
            tasks = [Task(f"{key}/{i}", key, x.text, x.sql, x.difficulty) for i, x in enumerate(qs)]
            self._generated[key] = (built, tasks)
        return self._generated[key][1][q]

    def task_index_of(self, task_id: str) -> int:
        key, _, local = task_id.rpartition("/")
        if self.spider is not None:
            if local.isdigit() and int(local) < self.num_tasks and self.spider.items[int(local)].db_id == key:
                return int(local)
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '<db_id>/<index>'")
        domain, _, seed = key.rpartition("_")
        if domain not in self.domains or not seed.isdigit() or int(seed) >= DBS_PER_DOMAIN or not local.isdigit() \
                or int(local) >= QUESTIONS_PER_DB:  # fmt: skip
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '{self.domains[0]}_3/17'")
        return (int(seed) * QUESTIONS_PER_DB + int(local)) * len(self.domains) + self.domains.index(domain)

    def _load(self, key: str) -> Loaded:
        if key in self._dbs:
            self._dbs.move_to_end(key)
            return self._dbs[key]
        if self.spider is not None:
            db = SafeDatabase.from_file(self.spider.db_path(key))
            schema = self.spider.schema(key)
        else:
            domain, _, seed = key.rpartition("_")
            built = self._generated[key][0] if key in self._generated else build_database(domain, int(seed))
            db = SafeDatabase.from_bytes(built.data)
            schema = {t.name: [(c.name, c.type) for c in t.columns] for t in built.schema.values()}
        self._dbs[key] = loaded = Loaded(db, schema)
        if len(self._dbs) > _CACHED_DBS:
            self._dbs.popitem(last=False)[1].db.close()
        return loaded

    @property
    def loaded(self) -> Loaded:
        assert self._ep is not None
        return self._load(self._ep.task.db_key)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        task = self.task_at(task_index)
        loaded = self._load(task.db_key)
        gold = loaded.db.run(task.sql, GOLD_MAX_ROWS, gold=True)
        if not gold.ok or gold.truncated:
            why = gold.error or f"it returns more than {GOLD_MAX_ROWS:,} rows"
            raise RuntimeError(f"task {task.task_id}: the gold query cannot be judged here: {why}")
        words = set(re.findall(r"\w+", task.sql.lower()))
        tables = {(t.lower(), "") for t in loaded.schema if t.lower() in words}
        self._ep = Episode(task, gold.rows, frozenset(gold.reads | tables))
        obs = [{"role": "system", "content": self._system}, {"role": "user", "content": task.question}]
        return obs, {"task_id": task.task_id, "gold": self._gold(gold), **self._info()}

    def _gold(self, gold: QueryResult) -> dict[str, Any]:
        assert self._ep is not None
        task = self._ep.task
        tables = sorted({t for t, _ in self._ep.gold_elements})
        names = {t.lower(): t for t in self.loaded.schema}
        return {"sql": task.sql, "tables": [names.get(t, t) for t in tables], "ordered": has_order(task.sql),
                "rows": len(gold.rows), "difficulty": task.difficulty, "category": task.difficulty,
                "db_id": task.db_key}  # fmt: skip

    # -- steps ----------------------------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        try:
            turn = parse_tool_turn(action, MAX_CALLS_PER_TURN)
        except ParseError as e:
            return self._invalid(f"Error: {e}")
        if turn.calls is None:
            return self._invalid(
                "Error: no tool call found. Explore with list_tables, describe_table, sample_rows and run_query, "
                "then call submit_query with your final SQL.",
                role="user",
            )
        return self._run_calls(list(turn.calls))

    def _invalid(self, message: str, role: str = "tool") -> StepResult:
        assert self._ep is not None
        self._ep.invalid_calls += 1
        info = {**self._info(), "phase": "exploration", "query_executed": None, "result_overlap": None}
        return StepResult([{"role": role, "content": message}], action_valid=False, parse_error=message, info=info)

    def _table(self, name: str) -> str | None:
        names = {t.lower(): t for t in self.loaded.schema}
        return names.get(name.strip().strip('"`[]').lower())

    def _discover_table(self, table: str) -> None:
        assert self._ep is not None
        cols = {(table.lower(), c.lower()) for c, _ in self.loaded.schema[table]}
        self._ep.discovered = self._ep.discovered | cols | {(table.lower(), "")}

    def _call(self, call: ToolCall, args: dict[str, Any], executed: list[bool], overlaps: list[float]) -> str:
        assert self._ep is not None
        ep, loaded = self._ep, self.loaded
        if call.name == "list_tables":
            ep.discovered = ep.discovered | {(t.lower(), "") for t in loaded.schema}
            return "\n".join(sorted(loaded.schema))
        if call.name in ("describe_table", "sample_rows"):
            table = self._table(args["table"])
            if table is None:
                return f"Error: no table named {args['table']!r}; call list_tables to see the tables."
            self._discover_table(table)
            if call.name == "describe_table":
                return f"Table {table}: " + ", ".join(f"{c} {t}".strip() for c, t in loaded.schema[table])
            n = max(1, min(int(args["n"]), self.row_limit))
            quoted = '"' + table.replace('"', '""') + '"'
            return format_result(loaded.db.run(f"SELECT * FROM {quoted} LIMIT {n}"), self.row_limit)
        result = loaded.db.run(args["sql"])  # run_query
        ep.queries_run += 1
        ep.queries = ep.queries | {args["sql"].strip()}
        executed.append(result.ok)
        if result.ok:
            ep.discovered = ep.discovered | result.reads
            overlaps.append(result_overlap(ep.gold_rows, result.rows))
        else:
            ep.queries_failed += 1
        return format_result(result, self.row_limit)

    def _run_calls(self, calls: list[ToolCall]) -> StepResult:
        assert self._ep is not None
        out: list[dict[str, Any]] = []
        errors: list[str] = []
        executed: list[bool] = []
        overlaps: list[float] = []
        for call in calls:
            msg: dict[str, Any] = {"role": "tool", "name": call.name}
            if call.id is not None:
                msg["tool_call_id"] = call.id
            self._ep.calls += 1
            error = None
            args: dict[str, Any] = {}
            if call.name not in self._schemas:
                error = f"Error: unknown function {call.name!r}; available functions: {list(self._schemas)}."
            else:
                try:
                    args = validate_arguments(self._schemas[call.name]["function"], call.arguments)
                except ArgumentError as e:
                    error = f"Error: {e}"
                else:
                    if "sql" in args and is_blank(args["sql"]):
                        error = "Error: the query is empty."
            if error is not None:
                self._ep.invalid_calls += 1
                errors.append(error)
                out.append({**msg, "content": error})
            elif call.name == "submit_query":
                return self._submit(args["sql"], msg, out, errors, executed, overlaps)
            else:
                out.append({**msg, "content": self._call(call, args, executed, overlaps)})
        info = {**self._info(), "phase": "exploration", **self._query_signals(executed, overlaps)}
        if errors:
            return StepResult(out, action_valid=False, parse_error=" ".join(errors)[:2000], info=info)
        return StepResult(out, info=info)

    @staticmethod
    def _query_signals(executed: list[bool], overlaps: list[float]) -> dict[str, Any]:
        return {"query_executed": all(executed) if executed else None,
                "result_overlap": max(overlaps) if overlaps else None}  # fmt: skip

    def _submit(self, sql: str, msg: dict[str, Any], out: list[dict[str, Any]], errors: list[str],
                executed: list[bool], overlaps: list[float]) -> StepResult:  # fmt: skip
        assert self._ep is not None
        ep = self._ep
        result = self.loaded.db.run(sql, GOLD_MAX_ROWS)
        ordered = has_order(ep.task.sql)
        success = result.ok and not result.truncated and results_match(ep.gold_rows, result.rows, ordered)
        if result.ok:
            ep.discovered = ep.discovered | result.reads
        note = "Correct." if success else f"Wrong: {result.error}" if result.error else "Wrong: the result differs."
        out.append({**msg, "content": f"Query submitted. {note}"})
        info = {**self._info(), "phase": "execution", **self._query_signals(executed, overlaps),
                "submitted": sql, "submitted_executed": result.ok, "metrics": self._metrics(success)}  # fmt: skip
        return StepResult(out, {"outcome": float(success)}, terminated=True, success=success,
                          action_valid=not errors, parse_error=" ".join(errors)[:2000] if errors else None,
                          info=info)  # fmt: skip

    def exploration_reward(self) -> float:
        """The share of the gold query's tables and columns discovered so far."""
        assert self._ep is not None
        gold = self._ep.gold_elements
        return len(gold & self._ep.discovered) / len(gold) if gold else 1.0

    def _metrics(self, success: bool) -> dict[str, float]:
        assert self._ep is not None
        ep = self._ep
        return {"success": float(success), "calls": float(ep.calls), "queries_run": float(ep.queries_run),
                "queries_failed": float(ep.queries_failed), "invalid_calls": float(ep.invalid_calls),
                "exploration_reward": self.exploration_reward()}  # fmt: skip

    def _truncated_info(self) -> dict[str, Any]:
        return {"metrics": self._metrics(False)}

    def _info(self) -> dict[str, Any]:
        assert self._ep is not None
        return {"difficulty": self._ep.task.difficulty, "exploration_reward": self.exploration_reward()}

    def anchor(self) -> str:
        """The task, what the agent has discovered and the set of queries it ran (queries are read-only and
        deterministic, so histories that learned the same things share an anchor)."""
        assert self._ep is not None
        state = [sorted(map(list, self._ep.discovered)), sorted(self._ep.queries)]
        return f"{self._task_id}:{hashlib.blake2b(json.dumps(state).encode(), digest_size=8).hexdigest()}"

    # -- branching ------------------------------------------------------------------------------------------------
    def _snapshot_state(self) -> Any:
        assert self._ep is not None
        return self._ep.copy()

    def _restore_state(self, state: Any) -> None:
        self._ep = state.copy()

    def close(self) -> None:
        for loaded in self._dbs.values():
            loaded.db.close()
        self._dbs.clear()
        super().close()
