"""Built-in SQL-v0 agents: ``oracle`` (privileged: lists the tables, describes the gold query's tables, submits the
gold query), ``heuristic`` (an honest baseline: lists and describes every table, then submits a query guessed from
the question's words and the schema) and ``random`` (random tool calls, now and then malformed).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgym.contract.agent import Agent, GoldAgent
from agentgym.envs.tool_use.agents import hermes

Message = dict[str, Any]
_DESCRIBE = re.compile(r"^Table (\S+): (.*)$")


class OracleAgent(GoldAgent):
    """Turn 0 lists the tables, turn 1 describes the gold's tables, turn 2 submits ``gold["sql"]``."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        if turn == 0:
            return hermes([{"name": "list_tables", "arguments": {}}])
        if turn == 1 and self.gold["tables"]:
            return hermes([{"name": "describe_table", "arguments": {"table": t}} for t in self.gold["tables"][:8]])
        return hermes([{"name": "submit_query", "arguments": {"sql": self.gold["sql"]}}])


def _schema(messages: list[Message]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in messages:
        if m.get("role") == "tool" and (match := _DESCRIBE.match(m.get("content") or "")):
            out[match[1]] = [c.split(" ")[0] for c in match[2].split(", ")]
    return out


def guess_query(question: str, schema: dict[str, list[str]]) -> str:
    """A query guessed from the words of ``question``: the table it names, a GROUP BY count for "how many ... for
    each", a filter on a quoted value, else the table's label column.

    >>> guess_query("How many loans are there for each member?", {"loans": ["id", "book_id", "member", "days"]})
    'SELECT member, COUNT(*) FROM loans GROUP BY member'
    """
    words = question.lower()
    if not schema:
        return "SELECT 1"
    table = max(schema, key=lambda t: (t.lower() in words or t.lower().rstrip("s") in words, -len(schema[t])))
    cols = [c for c in schema[table] if c.lower() != "id" and c.lower().replace("_", " ") in words]
    label = next((c for c in schema[table] if c.lower() not in ("id",) and not c.lower().endswith("_id")), "*")
    if "how many" in words and "for each" in words and cols:
        return f"SELECT {cols[0]}, COUNT(*) FROM {table} GROUP BY {cols[0]}"
    if (value := re.search(r"'([^']*)'", question)) and cols:
        return f"SELECT {label} FROM {table} WHERE {cols[-1]} = '{value[1]}'"
    return f"SELECT {label} FROM {table}"


class HeuristicAgent(Agent):
    """Lists the tables, describes all of them, then submits ``guess_query`` (it reads observations only)."""

    name = "heuristic"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn == 0:
            return hermes([{"name": "list_tables", "arguments": {}}])
        tools = [m for m in messages if m.get("role") == "tool"]
        if turn == 1 and tools:
            tables = (tools[0].get("content") or "").split("\n")[:8]
            return hermes([{"name": "describe_table", "arguments": {"table": t}} for t in tables if t])
        question = next((m["content"] for m in messages if m.get("role") == "user"), "")
        return hermes([{"name": "submit_query", "arguments": {"sql": guess_query(question, _schema(messages))}}])


class RandomAgent(Agent):
    """Random calls: list, describe or sample a table named in the conversation, a random query, a submission of a
    random query, or a malformed call."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        text = " ".join(m.get("content") or "" for m in messages[1:] if m.get("role") in ("user", "tool"))
        words = re.findall(r"[A-Za-z_]\w*", text) or ["t"]
        word = words[int(rng.integers(len(words)))]
        queries = (f"SELECT * FROM {word}", f"SELECT COUNT(*) FROM {word}", "SELECT 1", f"SELECT {word}",
                   "SELEC oops")  # fmt: skip
        sql = queries[int(rng.integers(len(queries)))]
        r = rng.random()
        if r < 0.2:
            return hermes([{"name": "list_tables", "arguments": {}}])
        if r < 0.45:
            name = "describe_table" if rng.random() < 0.5 else "sample_rows"
            return hermes([{"name": name, "arguments": {"table": word}}])
        if r < 0.7:
            return hermes([{"name": "run_query", "arguments": {"sql": sql}}])
        if r < 0.9:
            return hermes([{"name": "submit_query", "arguments": {"sql": sql}}])
        bad_call = {"tool_calls": [{"type": "function", "function": {"name": "drop", "arguments": "{}"}}]}
        malformed = ('<tool_call>{"name": "run_query"}</tool_call>', "I should look at the tables first.",
                     json.dumps(bad_call))  # fmt: skip
        return malformed[int(rng.integers(len(malformed)))]
