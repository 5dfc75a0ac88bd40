"""Playing an env by hand (``agentgym.running.play``, ``agentgym play``): a person's Household episode played to
success is recorded as ``run_episode`` records an agent's, and the saved file replays identically; undo puts the env
back exactly; nothing typed makes a step raise; the view is JSON data."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym import cli
from agentgym.contract.trajectory import KEY_ENV, read_records
from agentgym.envs.household.agents import OracleAgent
from agentgym.running.episode import run_episode
from agentgym.running.play import VIEW_KEYS, PlayError, PlaySession
from agentgym.running.replay import replay_file

ENV_ID = "agentgym/Household-v0"
SEED = 7
BIN = Path(sys.executable).parent / "agentgym"
COMMAND = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "agentgym.cli"]


def oracle_actions(seed: int = SEED) -> list[str]:
    """The oracle's winning turns on the task ``seed`` picks (what the person types in these tests)."""
    env = gym.make(ENV_ID)
    traj = run_episode(env, OracleAgent(), seed=seed, env_id=ENV_ID)
    env.close()
    assert traj.success and len(traj.turns) >= 3
    return [t.action for t in traj.turns]


@pytest.fixture(scope="module")
def actions() -> list[str]:
    return oracle_actions()


def played(actions: list[str], **kwargs) -> PlaySession:
    session = PlaySession(ENV_ID, **kwargs)
    session.reset(seed=SEED)
    for a in actions:
        assert session.step(a)["error"] is None
    return session


def as_json(view: dict) -> str:
    """The view as a strict UTF-8 JSON body (no NaN, no lone surrogate), as a web server sends it."""
    text = json.dumps(view, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    return text


def test_a_household_episode_played_to_success_is_recorded_as_run_episode_records_it(actions):
    session = played(actions)
    view = session.view()
    assert (view["done"], view["terminated"], view["success"], view["turn"]) == (True, True, True, len(actions))
    assert view["signals"]["won"] is True and view["turns"][-1]["reward_components"] == {"outcome": 1.0}
    env = gym.make(ENV_ID)
    by_agent = run_episode(env, OracleAgent(), seed=SEED, env_id=ENV_ID)
    assert session.trajectory().to_dict() == dataclasses.replace(by_agent, agent="human").to_dict()
    session.close()


@pytest.mark.parametrize("signed", [False, True])
def test_a_saved_episode_replays_identically(actions, tmp_path, monkeypatch, signed):
    if signed:
        monkeypatch.setenv(KEY_ENV, "operator-secret")
    path = tmp_path / "play.jsonl"
    with played(actions) as session:
        saved = session.save(path)
    assert saved["finished"] and saved["turns"] == len(actions) and saved["signed"] == signed
    key = b"operator-secret" if signed else None
    results = list(replay_file(path, key=key))
    assert [(r.kind, r.ok, r.turns) for r in results] == [("episode", True, len(actions))]
    # a person's turns cannot be re-derived by rerunning an agent: unsigned, that is all replay leaves unverified
    assert results[0].unverified is None if signed else "not a built-in agent" in results[0].unverified


def test_an_unfinished_episode_saves_and_replays_and_a_second_save_appends(actions, tmp_path):
    path = tmp_path / "play.jsonl"
    session = played(actions[:2])
    assert session.save(path)["finished"] is False
    session.step(actions[2])
    session.save(path)
    records = [r for r in read_records(path) if r.trajectory is not None]
    assert [len(r.trajectory.turns) for r in records] == [2, 3]
    assert records[0].trajectory.error.startswith("unfinished")
    assert [(r.ok, r.kind) for r in replay_file(path)] == [(True, "episode"), (True, "episode")]


def test_undo_restores_exactly_the_state_before_the_turn(actions):
    session = played(actions[:3])
    before = session.view()
    session.step("take nothing from nowhere")
    view = session.undo()
    assert view["error"] is None and "snapshot" in view["message"]
    assert view == {**before, "message": view["message"]}
    # the next step after undo is the step a fresh episode takes there
    fresh = played(actions[:4])
    session.step(actions[3])
    assert session.trajectory().to_dict() == fresh.trajectory().to_dict()
    assert session.env.unwrapped.anchor() == fresh.env.unwrapped.anchor()


class Opaque(gym.Wrapper):
    """A wrapper that keeps no declared state: snapshots refuse it, so undo replays the episode."""


def test_undo_without_snapshots_replays_the_episode(actions):
    env = Opaque(gym.make(ENV_ID))
    session = played(actions[:3], env=env, own_env=True)
    assert session.undo_mode == "replay"
    view = session.undo()
    assert view["error"] is None and "replayed" in view["message"] and view["turn"] == 2
    session.step(actions[2])
    session.step(actions[3])
    assert session.trajectory().to_dict() == played(actions[:4]).trajectory().to_dict()


@settings(max_examples=15, deadline=None)
@given(ops=st.lists(st.one_of(st.just("undo"), st.integers(0, 30)), max_size=12), replay=st.booleans())
def test_any_mix_of_turns_and_undos_leaves_the_episode_of_the_remaining_turns(ops, replay):
    env = Opaque(gym.make(ENV_ID)) if replay else gym.make(ENV_ID)
    session = PlaySession(ENV_ID, env=env, own_env=True)
    view = session.reset(seed=SEED)
    kept: list[str] = []
    for op in ops:
        if view["done"] or op == "undo":
            view = session.undo()
            kept = kept[:-1]
        else:
            commands = view["info"]["admissible_commands"]
            kept.append(commands[op % len(commands)])
            view = session.step(kept[-1])
        assert view["error"] is None or view["error"] == "nothing to undo"
    assert session.trajectory().to_dict() == played(kept).trajectory().to_dict()


HOSTILE = ["", "\x00\x00", "go to \ud800cabinet 1", "\udfff", "x" * 5_000_000, "::undo", "\n\n\r", "é" * 20_000]


def test_hostile_turns_never_raise_and_save_and_replay(tmp_path):
    session = PlaySession(ENV_ID)
    session.reset(seed=SEED)
    for action in HOSTILE:
        view = session.step(action)
        as_json(view)
        assert view["error"] is None
        assert view["signals"]["action_valid"] is False
    assert len(session.trajectory().turns[4].action) == session.max_action_chars + 1
    assert session.view()["turns"][4]["signals"]["action_truncated"] is True
    for bad in (None, 5, {"role": "assistant"}, ["x"], 1.5):
        view = session.step(bad)
        assert view["error"].startswith("a turn is text") and view["turn"] == len(HOSTILE)
    session.save(tmp_path / "hostile.jsonl")
    assert [r.ok for r in replay_file(tmp_path / "hostile.jsonl")] == [True]


def test_mistakes_are_messages_in_the_view():
    session = PlaySession(ENV_ID)
    assert session.step("look")["error"] == "no episode is running: reset first"
    assert session.undo()["error"] == "nothing to undo"
    for seed, options in [(-1, None), (True, None), (0, {"task_index": 10**9}), (0, {"no_such": 1}), (0, "x")]:
        view = session.reset(seed=seed, options=options)
        assert view["error"] and not view["started"]
        as_json(view)
    with pytest.raises(PlayError, match="no episode"):
        session.trajectory()
    view = session.reset(seed=0, options={"task_index": 5})
    assert view["error"] is None and view["replayable"] is False
    with pytest.raises(PlayError, match="reset with a seed"):
        session.save("unused.jsonl")


def test_the_view_is_json_data_with_its_documented_keys_and_no_gold(actions):
    session = PlaySession(ENV_ID)
    assert tuple(session.view()) == VIEW_KEYS
    view = session.reset(seed=SEED)
    assert "gold" not in view["info"] and view["observation"] == view["messages"]
    view = session.step(actions[0])
    assert tuple(view) == VIEW_KEYS
    assert json.loads(as_json(view)) == view
    assert view["messages"][-len(view["observation"]) :] == view["observation"]
    assert view["messages"][1] == {"role": "assistant", "content": actions[0]}
    assert view["can_undo"] and view["max_turns"] == 50 and view["undo_mode"] == "snapshot"


# ----------------------------------------------------------------------------------------------- agentgym play


def play_main(argv: list[str], stdin: str, monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = cli.main(["play", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_agentgym_play_reads_turns_and_commands_from_a_pipe(actions, tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.jsonl"
    script = "\n".join(["look", ":undo", ":multi", "go to", ".", ":undo", ":nope", ":help", *actions, ""])
    code, out, err = play_main(["agentgym/Household-v0", "--seed", str(SEED), "--save", str(path)], script,
                               monkeypatch, capsys)  # fmt: skip
    assert (code, err) == (0, "")
    assert "undone: back to turn 0" in out and "unknown command :nope" in out and ":multi" in out
    assert "episode over (terminated): success True" in out and f"saved the finished episode ({len(actions)}" in out
    [episode] = [r.trajectory for r in read_records(path) if r.trajectory is not None]
    assert [t.action for t in episode.turns] == actions
    assert [r.ok for r in replay_file(path)] == [True]


def test_agentgym_play_ends_cleanly_at_the_end_of_input_and_on_quit(monkeypatch, capsys):
    for script in ("", "look", ":multi\nunfinished", ":quit\nlook\n"):
        code, out, err = play_main(["agentgym/Household-v0", "--seed", "0"], script, monkeypatch, capsys)
        assert (code, err) == (0, ""), script
        assert ("-- turn 1/50" in out) == (script == "look"), (script, out)
    assert "was not sent" in play_main([ENV_ID, "--seed", "0"], ":multi\nx", monkeypatch, capsys)[1]


@pytest.mark.parametrize(
    "argv",
    [["agentgym/NoSuchEnv-v0"], [ENV_ID, "--env-kwargs", "{nope"], [ENV_ID, "--env-kwargs", "[1]"],
     [ENV_ID, "--env-kwargs", '{"split": "moon"}'], [ENV_ID, "--seed", "-3"], [ENV_ID, "--save", "."]],
)  # fmt: skip
def test_agentgym_play_user_errors_are_one_line_and_exit_2(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("look\n"))
    try:
        code = cli.main(["play", *argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "error:" in err, err


@pytest.mark.slow
def test_a_person_wins_household_in_agentgym_play_and_agentgym_replay_says_identical(actions, tmp_path):
    """The issue's demonstration, end to end in real processes: turns piped into ``agentgym play``, the file checked
    by ``agentgym replay`` (with the operator's key, which vouches for the person's turns)."""
    environ = {**os.environ, KEY_ENV: "operator-secret"}
    script = "\n".join([*actions, ":quit", ""]).encode()
    res = subprocess.run([*COMMAND, "play", ENV_ID, "--seed", str(SEED), "--save", "won.jsonl"], input=script,
                         cwd=tmp_path, env=environ, capture_output=True, timeout=300)  # fmt: skip
    assert res.returncode == 0 and res.stderr == b"", res.stderr
    assert b"success True" in res.stdout
    res = subprocess.run([*COMMAND, "replay", "won.jsonl"], cwd=tmp_path, env=environ, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "replayed 1 episode(s): 1 identical, 0 diverged" in res.stdout
    # piped bytes that are not UTF-8 are replaced, not fatal
    res = subprocess.run([*COMMAND, "play", ENV_ID, "--seed", "1"], input=b"\xff\xfe look\n\x00\n", cwd=tmp_path,
                         capture_output=True, timeout=300)  # fmt: skip
    assert res.returncode == 0 and res.stderr == b"", res.stderr


def test_a_remote_env_is_played_undone_and_saved_for_a_local_replay(actions, tmp_path):
    """Over the env server (its ASGI app driven in-process): undo restores the server's snapshot, and the saved
    record names the env's own arguments, so replay rebuilds it locally."""
    from fastapi.testclient import TestClient

    from agentgym.serving.remote import RemoteEnv
    from agentgym.serving.server import create_app

    with TestClient(create_app(env_ids=[ENV_ID])) as client:
        env = RemoteEnv("http://testserver", ENV_ID, client=client)
        session = played(actions[:2], env=env, own_env=True)
        session.step("look")
        view = session.undo()
        assert view["error"] is None and view["undo_mode"] == "snapshot" and view["turn"] == 2
        for a in actions[2:]:
            session.step(a)
        assert session.view()["success"] is True
        assert session.trajectory().to_dict() == played(actions).trajectory().to_dict()
        session.save(tmp_path / "remote.jsonl")
        session.close()
    assert [r.ok for r in replay_file(tmp_path / "remote.jsonl")] == [True]
