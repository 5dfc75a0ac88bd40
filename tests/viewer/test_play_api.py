"""Playing by hand over the viewer's HTTP API: sessions, their limits, and the requests it refuses."""

from __future__ import annotations

import httpx
import pytest

from agentgym.cli import play_room
from agentgym.running.replay import replay_file
from agentgym.tools.serving import BackgroundServer
from agentgym.viewer.app import create_app
from agentgym.viewer.play_api import MAX_BODY_BYTES

ENV = "agentgym/Chain-v0"


@pytest.fixture
def served(tmp_path):
    room = play_room([ENV], str(tmp_path / "saved"), {ENV: {"horizon": 2}})
    room.max_sessions = 2
    with BackgroundServer(create_app(None, play=room)) as server, httpx.Client(base_url=server.url) as http:
        yield http, room
    room.close()


def test_a_session_plays_undoes_saves_and_the_file_replays(served, tmp_path):
    http, _ = served
    assert http.get("/api/play/envs").json()["envs"] == [ENV]
    new = http.post("/api/play/new", json={"env_id": ENV, "seed": 3}).json()
    sid, view = new["session"], new["view"]
    assert view["env_id"] == ENV and view["seed"] == 3 and view["turn"] == 0
    wrong = http.post("/api/play/step", json={"session": sid, "action": "no idea"}).json()["view"]
    assert wrong["turn"] == 1 and wrong["signals"]["action_valid"] is False  # the env explains, nothing raises
    assert http.post("/api/play/undo", json={"session": sid}).json()["view"]["turn"] == 0
    saved = http.post("/api/play/save", json={"session": sid}).json()["saved"]
    assert saved["path"].startswith(str(tmp_path / "saved")) and saved["finished"] is False
    assert [r.ok for r in replay_file(saved["path"])] == [True]
    assert http.post("/api/play/close", json={"session": sid}).json() == {"closed": True}
    assert http.post("/api/play/step", json={"session": sid, "action": "x"}).status_code == 404


def test_the_room_keeps_at_most_its_sessions_closing_the_idlest(served):
    http, room = served
    sids = [http.post("/api/play/new", json={"env_id": ENV, "seed": s}).json()["session"] for s in range(3)]
    assert len(room._held) == 2 and http.post("/api/play/undo", json={"session": sids[0]}).status_code == 404
    assert http.post("/api/play/undo", json={"session": sids[2]}).status_code == 200


@pytest.mark.parametrize(("body", "headers", "status", "message"), [
    ({"env_id": "agentgym/Household-v0"}, {}, 400, "env_id must be one of"),
    ({"env_id": ENV, "seed": -1}, {}, 400, "seed"),
    ({"env_id": ENV}, {"origin": "http://evil.example"}, 403, "another site"),
    ({"env_id": ENV}, {"sec-fetch-site": "cross-site"}, 403, "another site"),
    ({"session": "nope", "action": "x"}, {}, 404, "no such play session"),
])  # fmt: skip
def test_bad_requests_are_4xx_with_a_message(served, body, headers, status, message):
    http, _ = served
    path = "/api/play/step" if "session" in body else "/api/play/new"
    resp = http.post(path, json=body, headers=headers)
    assert resp.status_code == status and message in resp.json()["error"]


def test_bodies_must_be_small_json_objects(served):
    http, _ = served
    assert http.post("/api/play/new", content=b"env_id=x", headers={"content-type": "text/plain"}).status_code == 415
    huge = b'{"action": "' + b"x" * MAX_BODY_BYTES + b'"}'
    assert http.post("/api/play/step", content=huge, headers={"content-type": "application/json"}).status_code == 413
    resp = http.post("/api/play/new", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and "JSON object" in resp.json()["error"]
    assert http.put("/api/play/new", json={}).status_code == 405


def test_without_a_room_the_page_cannot_play(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"env_id": "e", "turns": []}\n')
    with BackgroundServer(create_app(tmp_path)) as server:
        assert httpx.get(server.url + "/api/play/envs").status_code == 404
        assert httpx.post(server.url + "/api/play/new", json={"env_id": ENV}).status_code == 405


def test_serve_web_offers_the_page_under_the_servers_token_and_only_the_page_takes_its_cookie(tmp_path):
    from agentgym.serving.server import create_app as server_app

    page = create_app(None, token="s3cret", play=play_room([ENV], str(tmp_path / "saved"), {ENV: {"horizon": 2}}))
    app = server_app(env_ids=[ENV], token="s3cret", env_args={"horizon": 2}, web=page)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url) as http:
        assert http.get("/web/").status_code == 401 and http.get("/web/", params={"token": "wrong"}).status_code == 401
        first = http.get("/web/", params={"token": "s3cret"})
        assert first.status_code == 303 and first.headers["location"] == "/web/"
        page = http.get("/web/")  # the cookie carries the token now
        assert page.status_code == 200 and 'src="app.js"' in page.text
        assert http.get("/web/api/play/envs").json()["envs"] == [ENV]
        new = http.post("/web/api/play/new", json={"env_id": ENV, "seed": 0}).json()
        assert new["view"]["env_kwargs"]["horizon"] == 2  # the operator's argument, as for the server's clients
        assert http.post("/sessions", json={"env_id": ENV}).status_code == 401  # the cookie opens the page only
        bearer = {"Authorization": "Bearer s3cret"}
        assert http.post("/sessions", json={"env_id": ENV}, headers=bearer).status_code == 201
