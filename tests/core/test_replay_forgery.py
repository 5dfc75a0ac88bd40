"""Replay checks the run as a whole: forged files (their checksums recomputed, as anyone can) are not "identical",
a hostile file never makes replay raise, key order is no change, and what replay cannot check is said.

Each forgery of the issue is one test here; they all passed as "identical" before run headers existed."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.cli import main
from agentgym.contract.trajectory import KEY_ENV, RunHeader, checksum, read_trajectories, trajectory_key
from agentgym.running.replay import replay_file
from agentgym.running.runner import run, run_to_file

CHAIN = "agentgym/Chain-v0"


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def reseal(records: list[dict]) -> str:
    """What a forger does after editing: recompute each header's run id and every checksum (nothing secret)."""
    out, run_id = [], None
    for r in records:
        r = {k: v for k, v in r.items() if k != "checksum"}
        if r.get("kind") == "run":
            fields = {k: v for k, v in r.items() if k not in ("kind", "version", "run_id", "mac", "nonce", "prev")}
            r["run_id"] = run_id = RunHeader(**fields).plan_digest()
        elif run_id is not None and r.get("run_id") is not None:
            r["run_id"] = run_id
        r["checksum"] = checksum(r)
        out.append(json.dumps(r, ensure_ascii=False) + "\n")
    return "".join(out)


def forged(path: Path, edit) -> list:
    """Replay a copy of ``path`` after ``edit`` changed its records (and they were resealed); the results."""
    records = lines_of(path)
    edit(records)
    copy = path.with_name("forged.jsonl")
    copy.write_text(reseal(records), encoding="utf-8")
    return list(replay_file(copy))


@pytest.fixture
def chain_run(tmp_path) -> Path:
    """A run of 8 Chain episodes by the built-in ``random`` agent: some fail, some succeed."""
    path = tmp_path / "t.jsonl"
    trajs = run(CHAIN, "random", 8, seed=3, out=path, progress=False)
    assert 0 < sum(t.success for t in trajs) < 8
    results = list(replay_file(path))
    assert [(r.ok, r.unverified) for r in results] == [(True, None)] * 8  # the genuine file: identical
    return path


def test_resealing_an_unchanged_file_changes_nothing(chain_run):
    assert all(r.ok and r.unverified is None for r in forged(chain_run, lambda records: None))


def test_failed_episodes_deleted_and_successful_ones_duplicated(chain_run):
    def cherry_pick(records):
        won = [r for r in records[1:] if r["turns"][-1]["info"].get("success")]
        records[1:] = (won * 8)[:8]

    results = forged(chain_run, cherry_pick)
    assert not all(r.ok for r in results)
    assert any("again (a duplicate, or out of order)" in (r.divergence or "") for r in results)


def test_failed_episodes_deleted_and_the_rest_renumbered(chain_run):
    """A smarter forger renumbers the survivors: their seeds and tasks no longer fit their positions."""

    def drop_failures(records):
        won = [r for r in records[1:] if r["turns"][-1]["info"].get("success")]
        for i, r in enumerate(won):
            r["index"] = i
        records[0]["episodes"] = len(won)
        records[1:] = won

    results = forged(chain_run, drop_failures)
    assert not all(r.ok for r in results)
    assert any("the run's plan says" in (r.divergence or "") for r in results)


def test_records_cut_from_the_end_or_the_middle(chain_run):
    def cut_end(records):
        del records[-3:]

    results = forged(chain_run, cut_end)
    assert [r.kind for r in results if not r.ok] == ["run"] and "planned 8 episodes; the file holds 5" in (
        results[-1].divergence
    )

    def cut_middle(records):
        del records[3]

    assert (
        "episode(s) 2..2 of the run are missing"
        in next(r for r in forged(chain_run, cut_middle) if not r.ok).divergence
    )


def test_two_records_swapped(chain_run):
    def swap(records):
        records[2], records[5] = records[5], records[2]

    assert sum(not r.ok for r in forged(chain_run, swap)) >= 2


@pytest.mark.parametrize("field", ["task_id", "seed", "group_id", "agent", "error"])
def test_a_top_level_field_changed_with_its_checksum_recomputed(chain_run, field):
    value = {"task_id": "another-task", "seed": 99, "group_id": "4", "agent": "oracle", "error": "made up"}[field]

    def edit(records):
        records[2][field] = value

    results = forged(chain_run, edit)
    assert [r.ok for r in results] == [True, False] + [True] * 6, field


def test_the_agent_relabelled_everywhere_is_caught_by_rerunning_the_built_in_agent(chain_run):
    """The header and every record say ``oracle`` (a built-in agent of the env): replay reruns it, and its actions
    are not the recorded ones."""

    def relabel(records):
        records[0].update(agent="oracle", agent_name="oracle")
        for r in records[1:]:
            r["agent"] = "oracle"

    results = forged(chain_run, relabel)
    assert not all(r.ok for r in results)
    assert any("the agent 'oracle' plays" in (r.divergence or "") for r in results)


def test_a_header_whose_built_in_agent_has_another_label(chain_run):
    def mislabel(records):
        records[0]["agent"] = "oracle"  # agent_name stays "random"
        for r in records[1:]:
            r["agent"] = "oracle"

    results = forged(chain_run, mislabel)
    assert all("is a built-in agent named 'random', not 'oracle'" in r.divergence for r in results)


def test_many_env_arguments_keep_a_bounded_number_of_envs(tmp_path):
    path = tmp_path / "t.jsonl"
    for horizon in range(2, 14):
        run(CHAIN, "random", 1, env_kwargs={"horizon": horizon}, out=path, progress=False)
    assert [(r.ok, r.unverified) for r in replay_file(path)] == [(True, None)] * 12


def test_an_agent_replay_cannot_rerun_is_unverified_not_identical(chain_run, capsys):
    def relabel(records):
        records[0].update(agent="gpt-9", agent_name="openai", agent_kwargs={})
        for r in records[1:]:
            r["agent"] = "gpt-9"

    results = forged(chain_run, relabel)
    assert all(r.ok for r in results) and all("'gpt-9' is not a built-in agent" in r.unverified for r in results)
    assert main(["replay", str(chain_run.with_name("forged.jsonl"))]) == 0
    out = capsys.readouterr().out
    assert "replayed 8 episode(s): 0 identical, 8 unverified, 0 diverged" in out
    assert "unverified (8 episode(s)): the agent 'gpt-9' is not a built-in agent" in out


def test_a_callable_policy_is_unverified(tmp_path, capsys):
    def always_left(messages, info):
        return "left"

    path = tmp_path / "t.jsonl"
    run(CHAIN, always_left, 2, out=path, progress=False)
    assert [r.unverified is not None and r.ok for r in replay_file(path)] == [True, True]
    assert main(["replay", str(path)]) == 0
    assert "0 identical, 2 unverified, 0 diverged" in capsys.readouterr().out


def test_the_header_changed_and_resealed(chain_run):
    def reseed(records):
        records[0]["seed"] = 40

    assert all(not r.ok for r in forged(chain_run, reseed))  # every record is now off the plan

    def other_run(records):
        records[0]["group_size"] = 2

    assert not all(r.ok for r in forged(chain_run, other_run))


def test_records_of_another_run_spliced_in(tmp_path, chain_run):
    other = tmp_path / "other.jsonl"
    run(CHAIN, "random", 8, seed=4, out=other, progress=False)
    theirs = lines_of(other)

    def splice(records):
        records[4] = theirs[4]

    results = forged(chain_run, splice)  # its run id rewritten to this run's: off this run's plan
    assert [r.ok for r in results] == [True] * 3 + [False] + [True] * 4
    assert "the record's seed is 7, the run's plan says 6" in results[3].divergence
    lines = chain_run.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4] = other.read_text(encoding="utf-8").splitlines(keepends=True)[4]  # as it was: its checksum holds
    chain_run.write_text("".join(lines), encoding="utf-8")
    results = list(replay_file(chain_run))
    assert [r.ok for r in results] == [True] * 3 + [False] + [True] * 4
    assert "belongs to run" in results[3].divergence


def test_a_format_1_record_without_a_checksum_is_refused(chain_run):
    def downgrade(records):
        for key in ("checksum", "run_id", "index"):
            records[3].pop(key)
        records[3]["version"] = 1

    records = lines_of(chain_run)
    downgrade(records)
    path = chain_run.with_name("downgraded.jsonl")
    path.write_text(reseal(records[:3]) + json.dumps(records[3]) + "\n" + reseal(records[4:]), encoding="utf-8")
    results = list(replay_file(path))
    assert not results[2].ok and "formats never go down" in results[2].divergence


def test_reordered_keys_are_no_change(chain_run, capsys):
    def reverse(x):
        if isinstance(x, dict):
            return {k: reverse(v) for k, v in reversed(list(x.items()))}
        return [reverse(v) for v in x] if isinstance(x, list) else x

    path = chain_run.with_name("reordered.jsonl")
    path.write_text("".join(json.dumps(reverse(r)) + "\n" for r in lines_of(chain_run)), encoding="utf-8")
    assert main(["replay", str(path)]) == 0
    assert "replayed 8 episode(s): 8 identical, 0 diverged" in capsys.readouterr().out


def test_one_deeply_nested_line_is_a_reported_record_not_a_traceback(chain_run, capsys):
    data = chain_run.read_bytes().splitlines(keepends=True)
    data[4] = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    chain_run.write_bytes(b"".join(data))
    assert main(["replay", str(chain_run)]) == 1
    out = capsys.readouterr().out
    assert "episode 3 (): DIVERGED: line 5: nested too deeply" in out
    assert "replayed 8 episode(s): 7 identical, 1 diverged" in out


def test_a_killed_run_is_reported_cut_short_and_replays_after_append(tmp_path, capsys):
    path = tmp_path / "run" / "trajectories.jsonl"
    args = ["run", CHAIN, "--agent", "random", "--episodes", "12", "--out", str(path.parent), "--quiet"]
    assert main(args) == 0
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:6]) + lines[6][:40])  # SIGKILL in the middle of episode 5's record
    capsys.readouterr()
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "planned 12 episodes; the file holds 6" in out and "torn final record" in out
    assert main([*args, "--append"]) == 0
    assert path.read_bytes() == whole
    capsys.readouterr()
    assert main(["replay", str(path)]) == 0
    assert "replayed 12 episode(s): 12 identical, 0 diverged" in capsys.readouterr().out


def test_extending_a_finished_run_with_append_adds_a_header_and_replays(tmp_path):
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    run_to_file(CHAIN, "random", 10, whole, progress=False)
    run_to_file(CHAIN, "random", 4, part, progress=False)
    run_to_file(CHAIN, "random", 10, part, resume=True, progress=False)
    headers = [r for r in lines_of(part) if r.get("kind") == "run"]
    assert [(h["episodes"], h["start"]) for h in headers] == [(4, 0), (10, 4)]
    assert [t.to_dict() for t in read_trajectories(part)] == [t.to_dict() for t in read_trajectories(whole)]
    assert [(r.ok, r.unverified) for r in replay_file(part)] == [(True, None)] * 10


def test_two_runs_appended_to_one_file_each_check(tmp_path):
    path = tmp_path / "t.jsonl"
    run(CHAIN, "random", 4, out=path, progress=False)
    run(CHAIN, "oracle", 2, seed=9, out=path, progress=False)
    assert [(r.ok, r.unverified) for r in replay_file(path)] == [(True, None)] * 6


def test_a_header_without_its_records_or_records_without_their_header(chain_run):
    def drop_header(records):
        del records[0]

    results = forged(chain_run, drop_header)
    assert all(not r.ok and "no header of it precedes it" in r.divergence for r in results)

    def orphan_header(records):
        records[0]["start"] = 3

    assert any(r.kind == "run" and "continuing run" in r.divergence for r in forged(chain_run, orphan_header))


# --- the class: no hostile file makes replay raise; any line-level forgery is caught --------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_no_mutation_of_a_run_file_makes_replay_raise(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("m") / "t.jsonl"
    run(CHAIN, "random", 4, out=path, progress=False)
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        what = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if what == "flip" and at < len(raw):
            raw[at] ^= data.draw(st.integers(1, 255))
        elif what == "insert":
            raw[at:at] = data.draw(st.binary(max_size=40) | st.sampled_from([b"[" * 5000, b"1" * 5000, b"\n{}\n"]))
        elif what == "delete":
            del raw[at : at + data.draw(st.integers(1, 200))]
        else:
            del raw[at:]
    path.write_bytes(bytes(raw))
    results = list(replay_file(path))  # never raises
    assert all(isinstance(r.divergence, str | None) for r in results)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_any_line_level_forgery_is_caught(tmp_path_factory, data):
    """Deleting, duplicating, moving or replacing whole episode lines (resealed or not) is never "identical"."""
    path = tmp_path_factory.mktemp("l") / "t.jsonl"
    run(CHAIN, "random", 5, out=path, progress=False)
    records = lines_of(path)
    episodes = records[1:]
    i, j = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
    what = data.draw(st.sampled_from(["delete", "duplicate", "move", "replace"]))
    if what == "delete":
        del episodes[i]
    elif what == "duplicate":
        episodes.insert(j, episodes[i])
    elif what == "move":
        if i == j:
            j = (i + 1) % 5
        episodes.insert(j, episodes.pop(i))
    else:
        if episodes[i]["seed"] == episodes[j]["seed"]:
            j = (i + 1) % 5
        episodes[j] = episodes[i]
    text = reseal([records[0], *episodes]) if data.draw(st.booleans()) else "".join(
        json.dumps(r) + "\n" for r in [records[0], *episodes])  # fmt: skip
    path.write_text(text, encoding="utf-8")
    assert not all(r.ok for r in replay_file(path)), what


# --- with the operator's key: records are signed, and a forger without the key cannot re-sign them ----------------


def test_signed_runs_check_their_signatures_and_vouch_for_agent_labels(tmp_path, monkeypatch, capsys):
    def always_left(messages, info):
        return "left"

    path = tmp_path / "run" / "trajectories.jsonl"
    monkeypatch.setenv(KEY_ENV, "operator secret")
    run(CHAIN, always_left, 3, out=path, progress=False)
    again = tmp_path / "again.jsonl"
    run(CHAIN, always_left, 3, out=again, progress=False)
    seals = ("nonce", "prev", "mac", "checksum")
    content = [[{k: v for k, v in r.items() if k not in seals} for r in lines_of(p)] for p in (path, again)]
    assert content[0] == content[1]  # the same content: only the seals differ (a new nonce per run)
    assert {r["nonce"] for r in lines_of(path)}.isdisjoint(r["nonce"] for r in lines_of(again))
    assert all("mac" in r for r in lines_of(path))
    key = trajectory_key()
    assert [(r.ok, r.unverified) for r in replay_file(path, key=key)] == [(True, None)] * 3  # the label is vouched for
    assert main(["replay", str(path)]) == 0
    assert "3 identical, 0 diverged (signatures checked with $AGENTGYM_TRAJECTORY_KEY)" in capsys.readouterr().out

    def relabel(records):
        for r in records:
            r["agent"] = "gpt-9"
            for seal in ("mac", "nonce", "prev"):
                r.pop(seal)

    results = forged(path, relabel)  # resealed, but not re-signed: the forger has no key
    assert [r.ok for r in results] == [True] * 3  # without the key, replay sees a consistent unsigned run
    assert all(not r.ok and "not signed with the operator's key" in r.divergence
               for r in replay_file(path.with_name("forged.jsonl"), key=key))  # fmt: skip
    assert [r.ok for r in replay_file(path, key=b"another key")].count(False) >= 3
    monkeypatch.delenv(KEY_ENV)
    assert [(r.ok, r.unverified is not None) for r in replay_file(path)] == [(True, True)] * 3  # no key: as before
    unsigned = tmp_path / "unsigned.jsonl"
    run(CHAIN, always_left, 3, out=unsigned, progress=False)
    assert not any("mac" in r for r in lines_of(unsigned))
