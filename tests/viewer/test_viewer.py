"""The viewer's reading side and its HTTP API: paging by byte cursor, the line index, sources, records, siblings,
metrics, the token rule and bad requests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.running.runner import run
from agentgym.tools.serving import BackgroundServer
from agentgym.viewer import index as ix
from agentgym.viewer.app import CSP, Viewer, create_app
from agentgym.viewer.index import Filter, LineIndex, read_page, read_record
from agentgym.viewer.sources import classify, discover


def write_lines(path: Path, rows: list[object]) -> list[int]:
    """Write one JSON line per row (a str row is written as is); return the byte offset of each line."""
    offsets, pos = [], 0
    with open(path, "wb") as f:
        for row in rows:
            line = (row if isinstance(row, str) else json.dumps(row)).encode() + b"\n"
            offsets.append(pos)
            f.write(line)
            pos += len(line)
    return offsets


def episode(i: int, **kw: object) -> dict:
    return {"env_id": "e" if i % 3 else "f", "task_id": f"t{i}", "agent": "a", "group_id": str(i // 4), "seed": i,
            "success": i % 2 == 0, "turns": [{"action": f"act {i}", "reward": 1.0}], **kw}  # fmt: skip


def all_pages(path: Path, n: int, filt: Filter | None = None) -> list[ix.Summary]:
    out, cursor = [], 0
    while cursor is not None:
        page = read_page(path, cursor, n, filt)
        out += page.items
        cursor = page.next
    return out


def test_pages_from_cursors_cover_the_file_once_and_filter(tmp_path):
    path = tmp_path / "t.jsonl"
    offsets = write_lines(path, [episode(i) for i in range(23)])
    items = all_pages(path, 5)
    assert [s.task for s in items] == [f"t{i}" for i in range(23)] and [s.offset for s in items] == offsets
    assert [s.task for s in all_pages(path, 4, Filter(env="f", success=True))] == ["t0", "t6", "t12", "t18"]
    assert [s.task for s in all_pages(path, 3, Filter(task="t1"))] == ["t1", *(f"t{i}" for i in range(10, 20))]
    assert [s.task for s in all_pages(path, 50, Filter(text="ACT 2"))] == ["t2", "t20", "t21", "t22"]
    assert [s.task for s in all_pages(path, 50, Filter(group="5"))] == ["t20", "t21", "t22"]
    first = items[0]
    assert (first.kind, first.env, first.agent, first.seed, first.reward, first.turns) == (
        "episode",
        "f",
        "a",
        0,
        1.0,
        1,
    )


def test_a_cursor_inside_a_line_starts_at_the_next_line_and_a_torn_tail_waits(tmp_path):
    path = tmp_path / "t.jsonl"
    offsets = write_lines(path, [episode(i) for i in range(3)])
    assert read_page(path, offsets[1] - 3, 10).items[0].offset == offsets[1]
    assert read_page(path, 10**12, 10).items == []  # past the end: nothing, no error
    with open(path, "ab") as f:
        f.write(json.dumps(episode(3)).encode()[:20])  # a writer mid-line
    page = read_page(path, 0, 10)
    assert [s.task for s in page.items] == ["t0", "t1", "t2"] and page.eof
    with open(path, "ab") as f:
        f.write(json.dumps(episode(3)).encode()[20:] + b"\n")
    assert [s.task for s in read_page(path, page.scanned, 10).items] == ["t3"]


def test_bad_lines_are_error_summaries_and_long_lines_are_skipped_unread(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    monkeypatch.setattr(ix, "MAX_LINE_BYTES", 200)
    write_lines(path, [episode(0), "not json", "[1, 2]", "", json.dumps(episode(1, note="x" * 500)), episode(2)])
    kinds = [(s.kind, s.task, (s.error or "")[:30]) for s in read_page(path, 0, 50).items]
    assert kinds[0] == ("episode", "t0", "") and kinds[-1] == ("episode", "t2", "")
    assert [k for k, _, _ in kinds[1:-1]] == ["error", "error", "error"]
    assert "longer than 200 bytes" in read_page(path, 0, 50).items[3].error


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 50).map(episode), st.just("")), max_size=30), st.integers(1, 7))
def test_paging_equals_reading_the_whole_file(tmp_path_factory, rows, n):
    path = tmp_path_factory.mktemp("p") / "t.jsonl"
    write_lines(path, rows)
    want = [r["task_id"] for r in rows if r]
    assert [s.task for s in all_pages(path, n)] == want


def test_the_line_index_finds_every_line_and_follows_a_growing_file(tmp_path):
    path = tmp_path / "t.jsonl"
    offsets = write_lines(path, [episode(i) for i in range(1000)])
    index = LineIndex(path, chunk_bytes=4096).start()
    assert index.wait(60) and index.done and index.lines == 1000
    assert [index.offset(i) for i in (0, 1, 999)] == [offsets[0], offsets[1], offsets[999]]
    assert index.offset(1000) is None and index.line_of(offsets[500]) == 500 and index.line_of(offsets[500] + 1) is None
    with open(path, "ab") as f:
        f.write(b'{"env_id": "late"}\n')
    assert not index.done
    index.start().wait(60)
    assert index.lines == 1001 and read_page(path, index.offset(1000), 1).items[0].env == "late"


def test_sources_classify_episodes_rollouts_metrics_and_walk_folders(tmp_path):
    run("agentgym/Chain-v0", "oracle", 2, out=tmp_path / "bench" / "trajectories" / "chain__oracle.jsonl",
        progress=False, env_kwargs={"horizon": 2})  # fmt: skip
    rundir = tmp_path / "run"
    rundir.mkdir()
    (rundir / "config.json").write_text("{}")
    write_lines(rundir / "metrics.jsonl", [{"iteration": 1, "success_rate": 0.5}])
    write_lines(rundir / "rollouts.jsonl", [{"iteration": 1, "group_id": 0, "turns": []}])
    (tmp_path / ".hidden").mkdir()
    write_lines(tmp_path / ".hidden" / "x.jsonl", [{"a": 1}])
    found = [(s.kind, s.label, s.run) for s in discover(tmp_path)]
    assert found == [("episodes", "bench/trajectories/chain__oracle.jsonl", None),
                     ("metrics", "run/metrics.jsonl", "run"), ("rollouts", "run/rollouts.jsonl", "run")]  # fmt: skip
    assert classify(tmp_path / ".hidden" / "x.jsonl") == "records"
    with pytest.raises(ValueError, match="no such file"):
        discover(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \.jsonl files"):
        discover(tmp_path / "empty")


def test_a_trajectory_file_pages_with_its_header_left_out_and_records_clip(tmp_path):
    path = tmp_path / "h.jsonl"
    trajs = run("agentgym/Household-v0", "oracle", 3, out=path, progress=False)
    items = all_pages(path, 2)
    assert [s.task for s in items] == [t.task_id for t in trajs] and all(s.success for s in items)
    rec = read_record(path, items[0].offset, max_chars=10)
    assert rec["clipped"] > 0 and "more characters not shown" in rec["record"]["turns"][0]["action"]
    assert read_record(path, items[0].offset, None)["record"]["turns"][0]["action"] == trajs[0].turns[0].action
    with pytest.raises(ValueError, match="no line starts"):
        read_record(path, items[0].offset + 1)


@pytest.fixture
def served(tmp_path):
    path = tmp_path / "t.jsonl"
    write_lines(path, [{"iteration": i // 8, "group_id": i // 4, "task_id": f"t{i}", "seed": i, "turns": [],
                        "success": i % 4 == 0} for i in range(40)])  # fmt: skip
    write_lines(tmp_path / "metrics.jsonl", [{"iteration": i, "success_rate": i / 10, "note": "x"} for i in range(5)])
    viewer = Viewer.of(tmp_path)
    for s in viewer.sources:
        s.index.wait(30)
    with BackgroundServer(create_app(tmp_path, viewer=viewer)) as server:
        yield server.url, {s.kind: s.id for s in viewer.sources}


def test_the_api_pages_lines_records_siblings_and_metrics(served):
    url, ids = served
    with httpx.Client(base_url=url) as http:
        page = http.get("/api/page", params={"source": ids["rollouts"], "n": 3, "success": "true"}).json()
        assert [i["task"] for i in page["items"]] == ["t0", "t4", "t8"] and [i["line"] for i in page["items"]] == [
            0,
            4,
            8,
        ]
        nxt = http.get("/api/page", params={"source": ids["rollouts"], "n": 3, "success": "true",
                                            "cursor": page["next"]}).json()  # fmt: skip
        assert [i["task"] for i in nxt["items"]] == ["t12", "t16", "t20"] and page["index"]["lines"] == 40
        line = http.get("/api/line", params={"source": ids["rollouts"], "line": 9}).json()
        rec = http.get("/api/record", params={"source": ids["rollouts"], "offset": line["cursor"]}).json()
        assert rec["record"]["task_id"] == "t9" and rec["line"] == 9
        sib = http.get("/api/siblings", params={"source": ids["rollouts"], "offset": line["cursor"]}).json()
        assert [i["task"] for i in sib["items"]] == ["t8", "t9", "t10", "t11"] and sib["group"] == "2"
        metrics = http.get("/api/metrics", params={"source": ids["metrics"]}).json()
        assert metrics["columns"] == ["iteration", "success_rate"] and metrics["series"]["success_rate"][3] == 0.3
        match = http.get("/api/match", params={"source": ids["rollouts"], "task": "t33", "seed": 33}).json()
        assert match["item"]["task"] == "t33"
        resp = http.get("/")
        assert resp.status_code == 200 and resp.headers["content-security-policy"] == CSP
        assert '<script src="app.js"' in resp.text and "http" not in resp.text.split("<body>")[1]


@pytest.mark.parametrize(("path", "params", "status", "message"), [
    ("/api/page", {"source": "s99"}, 404, "no source"),
    ("/api/page", {"source": "rollouts", "n": "0"}, 400, "n must be >= 1"),
    ("/api/page", {"source": "rollouts", "cursor": "x"}, 400, "cursor must be an integer"),
    ("/api/page", {"source": "rollouts", "success": "maybe"}, 400, "success must be true or false"),
    ("/api/line", {"source": "rollouts", "line": "999"}, 404, "not in"),
    ("/api/record", {"source": "rollouts", "offset": "3"}, 404, "no line starts"),
    ("/api/metrics", {"source": "rollouts"}, 400, "not a metrics file"),
    ("/../../etc/passwd", {}, 404, "no page"),
    ("/app.js/../../app.py", {}, 404, "no page"),
])  # fmt: skip
def test_bad_requests_get_4xx_with_a_message(served, path, params, status, message):
    url, ids = served
    params = {k: ids.get(v, v) if k == "source" else v for k, v in params.items()}
    resp = httpx.get(url + path, params=params)
    assert resp.status_code == status and message in resp.json()["error"]
    assert httpx.post(url + "/api/page").status_code == 405


def test_beyond_loopback_needs_the_token_by_header_or_cookie(tmp_path):
    write_lines(tmp_path / "t.jsonl", [episode(0)])
    with BackgroundServer(create_app(tmp_path, token="s3cret")) as server, httpx.Client(base_url=server.url) as http:
        assert http.get("/api/sources").status_code == 401 and http.get("/").status_code == 401
        assert http.get("/api/sources", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert http.get("/", params={"token": "wrong"}).status_code == 401
        first = http.get("/", params={"token": "s3cret"})
        assert first.status_code == 303 and "HttpOnly" in first.headers["set-cookie"]
        assert http.get("/api/sources").status_code == 200  # the cookie now carries it


def test_the_command_refuses_bad_paths_and_open_binds_in_one_line(tmp_path):
    for argv, message in ((["view", str(tmp_path / "nope")], "no such file"),
                          (["view", str(tmp_path), "--host", "0.0.0.0"], "without a bearer token")):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "agentgym.cli", *argv], capture_output=True, text=True,
                              timeout=120, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_comparison_lookup_reads_a_bounded_part_of_the_other_file(tmp_path, monkeypatch):
    from agentgym.viewer import app as viewer_app

    offsets = write_lines(tmp_path / "t.jsonl", [episode(i) for i in range(400)])
    monkeypatch.setattr(viewer_app, "MATCH_BUDGET_BYTES", offsets[100])
    viewer = Viewer.of(tmp_path)
    assert viewer.match("s0", "t42", 42) == {"item": viewer.match("s0", "t42", None)["item"], "complete": True}
    assert viewer.match("s0", "t42", 42)["item"]["offset"] == offsets[42]
    assert viewer.match("s0", "t42", 7) == {"item": None, "complete": False}  # not in the part read: unknown
    assert viewer.match("s0", "t399", 399) == {"item": None, "complete": False}
    monkeypatch.setattr(viewer_app, "MATCH_BUDGET_BYTES", 1 << 30)
    assert viewer.match("s0", "t42", 7) == {"item": None, "complete": True}  # read whole: not there


def test_a_rollouts_file_with_a_long_first_record_is_still_rollouts(tmp_path):
    long = {"iteration": 1, "group_id": 0, "turns": [{"action": "x" * 100_000, "tokens": ["x"], "advantages": [0.5]}]}
    write_lines(tmp_path / "rollouts.jsonl", [long])
    write_lines(tmp_path / "other.jsonl", [long])
    assert classify(tmp_path / "rollouts.jsonl") == "rollouts" and classify(tmp_path / "other.jsonl") == "rollouts"
