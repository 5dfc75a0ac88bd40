"""SQL-v0: generated databases, the safe engine, the judge, the agents, the Spider/BIRD adapter."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.sql.databases import DOMAINS, build_database, make_questions
from agentgym.envs.sql.engine import SafeDatabase, has_order, results_match
from agentgym.envs.sql.env import SQLEnv
from agentgym.rewards.advantages.signals import TURN_SIGNALS
from agentgym.running.checker import check
from agentgym.running.runner import run

ENV = "agentgym/SQL-v0"


def call(name: str, **args: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_check_env():
    assert "OK" in str(check(ENV))


def test_databases_are_deterministic_and_questions_have_results():
    for domain in DOMAINS:
        a, b = build_database(domain, 3), build_database(domain, 3)
        assert a.data == b.data and a.data != build_database(domain, 4).data
        qs = make_questions(a, 0, 20)
        assert qs == make_questions(b, 0, 20) and len({q.sql for q in qs}) == 20
        conn = sqlite3.connect(":memory:")
        conn.deserialize(a.data)
        for q in qs:
            assert conn.execute(q.sql).fetchall(), q.sql


def test_oracle_solves_every_task_of_a_slice():
    env = SQLEnv()
    trajs = run(ENV, "oracle", episodes=120, progress=False)
    assert len(trajs) == 120 and all(t.success for t in trajs)
    assert {t.turns[-1].info["phase"] for t in trajs} == {"execution"}
    assert all(t.turns[-1].info["exploration_reward"] == 1.0 for t in trajs)
    env.close()


def test_gold_scores_one_on_every_task():
    env = SQLEnv()
    for i in range(env.num_tasks):
        _, info = env.reset(options={"task_index": i})
        _, r, term, _, _ = env.step(call("submit_query", sql=info["gold"]["sql"]))
        assert r == 1.0 and term, info["task_id"]
    env.close()


def _play(env: SQLEnv, task_id: str, sql: str) -> float:
    env.reset(options={"task_id": task_id})
    return env.step(call("submit_query", sql=sql))[1]


def test_judge_accepts_rewrites_and_rejects_wrong_answers():
    env = SQLEnv(domain="library")
    tasks = {}
    for i in range(40):
        t = env.task_at(i)
        tasks.setdefault(t.difficulty, t)
    assert set(tasks) == {"filter", "aggregate", "join", "nested", "order"}
    for t in tasks.values():
        gold = t.sql
        assert _play(env, t.task_id, gold) == 1.0
        wrapped = f"SELECT * FROM ({gold})"  # the same rows; an outer ORDER BY-less wrapper keeps SQLite's order
        assert _play(env, t.task_id, wrapped) == 1.0
        assert _play(env, t.task_id, "SELECT 1") == 0.0
    # written differently: aliases, swapped join order, columns swapped, DISTINCT where rows are distinct
    join = next(env.task_at(i) for i in range(40) if env.task_at(i).sql.startswith("SELECT T2.genre, COUNT(*)"))
    alt = "SELECT COUNT(*) AS n, b.genre AS g FROM books AS b JOIN loans AS l ON b.id = l.book_id GROUP BY b.genre"
    assert _play(env, join.task_id, alt) == 1.0
    assert _play(env, join.task_id, "SELECT DISTINCT genre, COUNT(*) FROM books GROUP BY genre") == 0.0
    env.close()


def test_results_match_order_and_multiset():
    assert results_match([(1, "a"), (1, "a"), (2, "b")], [(2, "b"), (1, "a"), (1, "a")], ordered=False)
    assert not results_match([(1, "a"), (1, "a")], [(1, "a")], ordered=False)  # multiset, not set
    assert not results_match([(1,), (2,)], [(2,), (1,)], ordered=True)
    assert results_match([(0.1 + 0.2,)], [(0.3,)], ordered=False)
    assert not results_match([(1, 2)], [(1, 2, 3)], ordered=False)
    assert has_order("SELECT a FROM t ORDER BY a LIMIT 3") and not has_order(
        "SELECT a FROM (SELECT a FROM t ORDER BY a)"
    )


def test_ordered_top_k_needs_the_order():
    env = SQLEnv(domain="shop")
    t = next(env.task_at(i) for i in range(200) if env.task_at(i).difficulty == "order")
    asc = t.sql.replace("DESC", "ASC") if "DESC" in t.sql else t.sql.replace("ASC", "DESC")
    inner, _ = t.sql.rsplit(" LIMIT ", 1)
    reversed_sql = f"SELECT * FROM ({t.sql}) ORDER BY {inner.split('ORDER BY ')[1].split()[0]} " + (
        "ASC" if "DESC" in t.sql else "DESC"
    )
    assert _play(env, t.task_id, t.sql) == 1.0
    assert _play(env, t.task_id, reversed_sql) == 0.0  # the same rows in the wrong order
    assert _play(env, t.task_id, asc) == 0.0
    env.close()


HOSTILE = [
    "DELETE FROM customers",
    "UPDATE customers SET name = 'x'",
    "INSERT INTO customers VALUES (999, 'x', 'y', 2000)",
    "DROP TABLE customers",
    "CREATE TABLE t (a)",
    "ATTACH DATABASE ':memory:' AS other",
    "ATTACH DATABASE '/tmp/agentgym_sql_attack.db' AS other",
    "PRAGMA query_only = OFF",
    "PRAGMA writable_schema = ON",
    "PRAGMA table_info(customers)",
    "SELECT load_extension('/lib/x.so')",
    "SELECT printf('%.*c', 1000000000, 'x')",
    "SELECT format('%1000000000d', 1)",
    "SELECT fts3_tokenizer('simple')",
    "SELECT " + "(" * 5000 + "1" + ")" * 5000,
    "SELECT * FROM orders a, orders b ORDER BY random()",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r",
    "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT length(s) FROM r",
    "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d",
    "SELECT zeroblob(1000000000)",
    "SELECT randomblob(500000000)",
    "SELECT randomblob(99999) FROM orders a, orders b",  # gigabytes if fetched: stopped at the result-size cap
    "SELECT * FROM orders a, orders b",  # 20k-40k rows: cut to the row limit
    "BEGIN",
    "VACUUM",
    "SELECT 1; DROP TABLE customers",
    "SELECT * FROM sqlite_master",
    "",
]


@pytest.mark.timeout(120)  # a hang guard: each query stops at the step budget (a 2 s wall deadline backs it up)
@pytest.mark.parametrize("sql", HOSTILE)
def test_hostile_sql_is_an_observation_and_changes_nothing(sql: str):
    env = SQLEnv(domain="shop")
    env.reset(options={"task_index": 0})
    before = env.loaded.db.conn.serialize()
    for name in ("run_query", "submit_query"):
        obs, reward, term, *_ = env.step(call(name, sql=sql))
        assert isinstance(obs[-1]["content"], str) and len(obs[-1]["content"]) <= 6_000
        assert reward == 0.0 or sql.startswith("SELECT * FROM orders")
    assert (term or sql == "") and env.loaded.db.conn.serialize() == before  # an empty query is invalid, not final
    assert env.loaded.db.run("SELECT COUNT(*) FROM customers").ok
    assert not Path("/tmp/agentgym_sql_attack.db").exists()
    env.close()


@pytest.mark.timeout(120)  # a hang guard, not a timing assertion
def test_step_budget_stops_runaway_queries():
    db = SafeDatabase.from_bytes(build_database("flights", 0).data, step_budget=50_000, wall=60.0)
    res = db.run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")
    assert res.error is not None and "budget" in res.error
    assert db.run("SELECT COUNT(*) FROM flights").ok  # the connection is still usable
    db.close()


def test_turn_signals():
    env = SQLEnv(domain="university")
    _, info = env.reset(options={"task_index": 0})
    assert info["exploration_reward"] == 0.0 and TURN_SIGNALS[ENV].key == "exploration_reward"
    _, _, _, _, info = env.step(call("list_tables"))
    assert info["phase"] == "exploration" and 0 < info["exploration_reward"] < 1 and info["query_executed"] is None
    gold = env.task_at(0).sql
    _, _, _, _, info = env.step(call("run_query", sql=gold))
    assert info["query_executed"] is True and info["result_overlap"] == 1.0 and info["exploration_reward"] == 1.0
    _, _, _, _, info = env.step(call("run_query", sql="SELECT nope FROM nothing"))
    assert info["query_executed"] is False and info["result_overlap"] is None
    _, _, _, _, info = env.step("no tool call here")
    assert info["action_valid"] is False and info["phase"] == "exploration"
    _, r, term, _, info = env.step(call("submit_query", sql=gold))
    assert (r, term, info["phase"]) == (1.0, True, "execution")
    env.close()


def test_anchor_and_snapshot_restore():
    env = SQLEnv()
    env.reset(options={"task_index": 5})
    a0 = env.anchor()
    env.step(call("list_tables"))
    snap = env.snapshot()
    a1 = env.anchor()
    obs1 = env.step(call("run_query", sql="SELECT 1"))[0]
    env.restore(snap)
    assert env.anchor() == a1 != a0
    assert env.step(call("run_query", sql="SELECT 1"))[0] == obs1
    env.close()


def test_agents_registered_and_baselines_run():
    assert set(SQLEnv.agents) == {"oracle", "heuristic", "random"}
    heur = run(ENV, "heuristic", episodes=40, progress=False)
    rand = run(ENV, "random", episodes=40, progress=False)
    rate = sum(t.success for t in heur) / 40
    assert 0.0 < rate < 1.0
    assert sum(t.success for t in rand) <= sum(t.success for t in heur)


def _spider_fixture(root: Path, bird: bool) -> None:
    db_dir = root / ("dev_databases" if bird else "database") / "concert"
    db_dir.mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "concert.sqlite")
    conn.executescript(
        "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);"
        "INSERT INTO singer VALUES (1, 'Joe', 'France', 52), (2, 'Tribal', 'USA', 29), (3, 'Rose', 'France', 41);"
        "CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER, year INTEGER);"
        "INSERT INTO concert VALUES (1, 1, 2014), (2, 1, 2015), (3, 3, 2015);"
    )
    conn.commit()
    conn.close()
    (root / "tables.json").write_text(json.dumps([{
        "db_id": "concert", "table_names_original": ["singer", "concert"], "table_names": ["singer", "concert"],
        "column_names_original": [[-1, "*"], [0, "singer_id"], [0, "name"], [0, "country"], [0, "age"],
                                  [1, "concert_id"], [1, "singer_id"], [1, "year"]],
        "column_names": [[-1, "*"], [0, "singer id"], [0, "name"], [0, "country"], [0, "age"], [1, "concert id"],
                         [1, "singer id"], [1, "year"]],
        "column_types": ["text", "number", "text", "text", "number", "number", "number", "number"],
        "primary_keys": [1, 5], "foreign_keys": [[6, 1]]}]))  # fmt: skip
    key = "SQL" if bird else "query"
    items = [
        {"db_id": "concert", "question": "How many singers are there?", key: "SELECT count(*) FROM singer"},
        {"db_id": "concert", "question": "Names of singers from France, oldest first.",
         key: "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC"},
        {"db_id": "concert", "question": "Names of singers with a concert in 2015.",
         key: "SELECT DISTINCT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id "
              "WHERE T2.year = 2015"},
    ]  # fmt: skip
    if bird:
        for item in items:
            item["difficulty"] = "simple"
    else:
        for item in items:
            item["query_toks"] = item["query"].split()
    (root / "dev.json").write_text(json.dumps(items))


@pytest.mark.parametrize("bird", [False, True])
def test_spider_bird_adapter_loads_and_scores(tmp_path: Path, bird: bool):
    _spider_fixture(tmp_path, bird)
    env = gym.make(ENV, data_dir=str(tmp_path)).unwrapped
    assert env.num_tasks == 3
    obs, info = env.reset(options={"task_index": 1})
    assert info["task_id"] == "concert/1" and obs[-1]["content"].startswith("Names of singers from France")
    obs = env.step(call("describe_table", table="singer"))[0]
    assert obs[0]["content"] == "Table singer: singer_id INTEGER, name TEXT, country TEXT, age INTEGER"
    assert env.step(call("submit_query", sql="SELECT name FROM singer WHERE country = 'France' ORDER BY age"))[1] == 0
    env.reset(options={"task_index": 1})
    assert env.step(call("submit_query", sql="SELECT name FROM singer WHERE age > 40 ORDER BY age DESC"))[1] == 1.0
    env.reset(options={"task_index": 2})
    alt = "SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert WHERE year = 2015)"
    assert env.step(call("submit_query", sql=alt))[1] == 1.0
    env.reset(options={"task_index": 0})
    assert env.step(call("run_query", sql="DELETE FROM singer"))[0][0]["content"].startswith("Error")
    env.close()
    assert sqlite3.connect(tmp_path / ("dev_databases" if bird else "database") / "concert" / "concert.sqlite").execute(
        "SELECT COUNT(*) FROM singer"
    ).fetchone() == (3,)
    trajs = run(ENV, "oracle", episodes=3, env_kwargs={"data_dir": str(tmp_path)}, progress=False)
    assert all(t.success for t in trajs)


def test_spider_adapter_reports_missing_files(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"tables\.json"):
        SQLEnv(data_dir=str(tmp_path))


def test_judge_on_a_generated_suite_of_rewrites():
    """For 200 tasks: the gold wrapped, with its columns swapped and aliased, or DISTINCT where its rows are distinct
    scores 1; the gold missing a row, with a row repeated, or DISTINCT where rows repeat scores 0."""
    env = SQLEnv()
    for i in range(200):
        task = env.task_at(i)
        env.reset(options={"task_index": i})
        gold = env.loaded.db.run(task.sql)
        cols = ", ".join(f'"{c}" AS c{k}' for k, c in reversed(list(enumerate(gold.columns))))
        distinct = len(set(gold.rows)) == len(gold.rows)
        right = [f"SELECT * FROM ({task.sql}) AS sub", f"SELECT {cols} FROM ({task.sql})"]
        repeat = f"SELECT * FROM ({task.sql}) UNION ALL SELECT * FROM (SELECT * FROM ({task.sql}) LIMIT 1)"
        wrong = [f"SELECT * FROM ({task.sql}) LIMIT {len(gold.rows) - 1}", repeat]
        (right if distinct else wrong).append(f"SELECT DISTINCT * FROM ({task.sql})")
        for sql in right:
            assert _play(env, task.task_id, sql) == 1.0, sql
        for sql in wrong:
            assert _play(env, task.task_id, sql) == 0.0, sql
    env.close()
