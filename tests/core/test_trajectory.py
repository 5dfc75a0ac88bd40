"""Trajectory records: round trip, crash tolerance, append-only writes."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.contract.trajectory import (
    MAX_RECORD_BYTES,
    RunHeader,
    Trajectory,
    TrajectoryWriter,
    Turn,
    canonical,
    checksum,
    count_records,
    dumps,
    normalize,
    read_records,
    read_trajectories,
)
from agentgym.running.replay import replay_file


def make_traj(i: int) -> Trajectory:
    t = Trajectory(
        env_id="agentgym/SearchQA-v0",
        seed=i,
        task_id=f"q{i}",
        agent="oracle",
        initial_observation=[{"role": "user", "content": f"Question {i} — naïve 世界 🙂"}],
        reset_info={"turn": 0, "gold": {"answers": ["x"]}},
        env_kwargs={"dataset": "tiny"},
        options={"task_index": i},
    )
    t.turns.append(
        Turn(
            "<search>q</search>",
            [{"role": "user", "content": "<information></information>"}],
            0.0,
            False,
            False,
            {"turn": 1, "reward_components": {}},
            token_spans=[(3, 9)],
        )
    )
    t.turns.append(
        Turn(
            "<answer>x</answer>",
            [],
            1.0,
            True,
            False,
            {"turn": 2, "success": True, "reward_components": {"outcome": 1.0}},
        )
    )
    return t


def test_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        for i in range(3):
            w.write(make_traj(i))
    back = list(read_trajectories(path))
    assert [dumps(t) for t in back] == [dumps(make_traj(i)) for i in range(3)]
    assert back[1].turns[0].token_spans == [(3, 9)]
    assert back[2].success and back[2].total_reward == 1.0 and back[2].done
    assert back[0].messages[-1] == {"role": "assistant", "content": "<answer>x</answer>"}


def test_writer_appends_and_never_rewrites(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(make_traj(0))
    first = path.read_bytes()
    with TrajectoryWriter(path, fsync=True) as w:
        w.write(make_traj(1))
    assert path.read_bytes().startswith(first)
    assert len(list(read_trajectories(path))) == 2


@pytest.mark.parametrize("cut", [1, 10, 100, -2])
def test_truncated_final_line_is_skipped(tmp_path, cut):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(make_traj(0))
        w.write(make_traj(1))
    data = path.read_bytes()
    second_start = data.index(b"\n") + 1
    path.write_bytes(data[: second_start + cut] if cut > 0 else data[:cut])  # a crash mid-write
    with pytest.warns(UserWarning, match="truncated final record"):
        back = list(read_trajectories(path))
    assert [t.task_id for t in back] == ["q0"]


def test_corrupt_middle_line_raises_with_line_number(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(dumps(make_traj(0)) + "\n{garbage\n" + dumps(make_traj(1)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"t.jsonl:2: bad trajectory record: not JSON"):
        list(read_trajectories(path))


def test_a_killed_writer_process_leaves_a_readable_file(tmp_path):
    """A real crash: a child process writes records and is killed with SIGKILL mid-run."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    path = tmp_path / "t.jsonl"
    code = textwrap.dedent(f"""
        from agentgym.contract.trajectory import Trajectory, TrajectoryWriter
        w = TrajectoryWriter({str(path)!r})
        i = 0
        while True:
            w.write(Trajectory("e", i, "t", "a", [{{"role": "user", "content": "x" * 50000}}], {{}}))
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 30
    while (not path.exists() or path.stat().st_size < 2_000_000) and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back = list(read_trajectories(path))
    assert len(back) >= 10
    assert [t.seed for t in back] == list(range(len(back)))


def test_unknown_version_is_refused():
    d = make_traj(0).to_dict()
    d["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        Trajectory.from_dict(d)


# --- any string the env produced is written; a write that cannot be done leaves the file as it was ------------

SURROGATES = "a\ud800b \udfff \ud83d\ude00 \ud83d"  # lone high, lone low, a pair (one emoji), a high at the end


def test_a_lone_surrogate_in_an_observation_is_written_and_reads_back(tmp_path):
    """The issue's case: a tool echoed the path ``a\\ud800b`` into an observation; the write crashed and left an
    empty file."""
    path = tmp_path / "t.jsonl"
    t = make_traj(0)
    t.turns[0].observation = [{"role": "tool", "content": "Error: no such file: /home/eli/a\ud800b"}]
    with TrajectoryWriter(path) as w:
        w.write(t)
    data = path.read_bytes()
    data.decode("utf-8")  # valid UTF-8 (strict)
    assert b"a\\ud800b" in data
    [back] = read_trajectories(path)
    assert back.turns[0].observation[0]["content"] == "Error: no such file: /home/eli/a\ud800b"
    assert dumps(back) == dumps(t)  # byte-identical when written again


def test_surrogate_pairs_read_back_as_their_character_and_lone_ones_as_themselves(tmp_path):
    path = tmp_path / "t.jsonl"
    t = make_traj(0)
    t.task_id = SURROGATES
    with TrajectoryWriter(path) as w:
        w.write(t)
    [back] = read_trajectories(path)
    assert back.task_id == "a\ud800b \udfff 😀 \ud83d" == normalize(SURROGATES)


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("a NaN reward", lambda t: setattr(t.turns[0], "reward", float("nan"))),
        ("a set in info", lambda t: t.turns[0].info.update(tags={1, 2})),
        ("info nested 100,000 deep", lambda t: t.turns[0].info.update(deep=nested(100_000))),
        ("a record over the size limit", lambda t: t.turns[0].info.update(big="x" * (MAX_RECORD_BYTES + 1))),
    ],
)
def test_a_record_that_cannot_be_written_raises_before_the_file_is_touched(tmp_path, what, edit):
    path = tmp_path / "t.jsonl"
    bad = make_traj(1)
    edit(bad)
    with TrajectoryWriter(path) as w, pytest.raises(ValueError):
        w.write(bad)
    assert not path.exists(), what  # not even an empty file
    with TrajectoryWriter(path) as w:
        w.write(make_traj(0))
        before = path.read_bytes()
        with pytest.raises(ValueError):
            w.write(bad)
        w.write(make_traj(2))
    assert path.read_bytes().startswith(before) and [t.seed for t in read_trajectories(path)] == [0, 2]


def nested(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


def any_text(**kwargs) -> st.SearchStrategy[str]:
    """Any text, lone and paired surrogates included."""
    return st.text(st.characters(codec=None, exclude_categories=()), **kwargs)


JSON_LEAVES = st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False,
    allow_infinity=False) | any_text(max_size=12)  # fmt: skip
JSON = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text(max_size=6),
    inner, max_size=3), max_leaves=12)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    strings=st.lists(any_text(max_size=20), min_size=9, max_size=9),
    info=st.dictionaries(any_text(max_size=8), JSON, max_size=4),
)
def test_any_text_in_every_string_field_is_written_and_reads_back_the_same(tmp_path_factory, strings, info):
    env_id, task_id, agent, content, action, error, group_id, key, role = strings
    t = Trajectory(env_id=env_id, seed=3, task_id=task_id, agent=agent, initial_observation=[{"role": role,
                   "content": content}], reset_info={key: content, **info}, env_kwargs={key: action},
                   options={key: task_id}, group_id=group_id, error=error)  # fmt: skip
    t.turns.append(Turn(action, [{"role": role, "content": content}], 0.5, False, True, {key: info, "x": action}))
    path = tmp_path_factory.mktemp("p") / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(t)
    data = path.read_bytes()
    assert data.count(b"\n") == 1 and data.endswith(b"\n")
    data.decode("utf-8")  # strict: valid UTF-8
    [back] = read_trajectories(path)  # the checksum verifies
    assert back.to_dict() == normalize(t.to_dict())  # the same value (a surrogate pair read as its character)
    if not any(0xD800 <= ord(c) <= 0xDFFF for s in [*strings, json.dumps(info)] for c in s):
        assert back.to_dict() == t.to_dict()  # without surrogates: exactly what was written
    assert dumps(back) == dumps(t)  # deterministic: writing what was read gives the same bytes


# --- hostile files: every line a bad record, reported; the reader never raises anything else ------------------


def good_line(i: int = 0) -> bytes:
    return (dumps(make_traj(i)) + "\n").encode("utf-8")


NULLABLE = {"seed", "group_id", "error", "run_id", "index", "token_spans"}
ALSO = {
    "seed": int,
    "index": int,
    "run_id": str,
    "group_id": str,
    "error": str,
    "reward": int,
}  # types a field takes besides its value's here


def wrong_types() -> list[tuple[str, bytes]]:
    """A record with each field (and each turn field) given a value of a wrong type, one at a time."""
    d = json.loads(dumps(make_traj(0)))

    def wrong(key: str, original: object) -> list[object]:
        values = [[1], "x", 5, None, {"a": 1}, True, 1.5, 10**400, [[1, "b"]], [5]]
        return [v for v in values if type(v) not in (type(original), ALSO.get(key)) and not (v is None and key in
                NULLABLE) and not (key == "reward" and type(v) is float)]  # fmt: skip

    cases = []
    for key in [k for k in d if k not in ("checksum", "version")]:
        for value in wrong(key, d[key]):
            e = {**d, key: value}
            e["checksum"] = checksum(e)
            cases.append((f"{key}={value!r}"[:60], json.dumps(e).encode()))
    for key in d["turns"][0]:
        for value in wrong(key, d["turns"][0][key]) + (
            [[[1]], [[1, 2, 3]], [["a", 1]]] if key == "token_spans" else []
        ):
            e = {**d, "turns": [{**d["turns"][0], key: value}]}
            e["checksum"] = checksum(e)
            cases.append((f"turns[0].{key}={value!r}"[:60], json.dumps(e).encode()))
    for key in ("initial_observation",):
        e = {**d, key: ["not a message"]}
        e["checksum"] = checksum(e)
        cases.append((f"{key}=['not a message']", json.dumps(e).encode()))
    return cases


def header_wrong_types() -> list[tuple[str, bytes]]:
    """A run header with each field given a value of a wrong type (or an impossible one), one at a time."""
    good = RunHeader(env_id="e", env_kwargs={}, agent="a", agent_name="a", agent_kwargs={}, seed=0,
                     tasks="sequential", group_size=2, episodes=4).to_dict()  # fmt: skip
    cases = []
    for key in good:
        for value in ([1], "x", 5, None, {"a": 1}, True, -3, 10**400):
            if value == good[key] or (value is None and key in ("agent_name", "agent_kwargs")):
                continue
            if type(value) is type(good[key]) and key in ("env_id", "agent", "agent_name", "env_kwargs", "seed"):
                continue  # any string, object or integer is a valid value of these (only the digest then differs)
            if key == "episodes" and value == 10**400:
                continue  # an even number of episodes, as valid as absurd
            h = {**good, key: value}
            if key not in ("run_id", "kind", "version"):
                h["run_id"] = good["run_id"]
            h["checksum"] = checksum(h)
            cases.append((f"{key}={value!r}"[:40], json.dumps(h).encode()))
    return cases


DEEP_KEY = b'"reset_info":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b","
HOSTILE = {
    "a list nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "an object nested 100,000 deep": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "a record nested 100,000 deep in info": good_line().replace(b'"reset_info":{', DEEP_KEY, 1).rstrip(),
    "an integer of 5,000 digits": b"1" * 5000,
    "a seed of 5,000 digits": good_line().replace(b'"seed":0', b'"seed":' + b"7" * 5000, 1).rstrip(),
    "a JSON list": b"[1, 2]",
    "a JSON string": b'"hello"',
    "null": b"null",
    "NUL bytes": b"\x00\x00{}\x00",
    "a NUL in a string": good_line().replace(b"Question", b"Ques\x00tion", 1).rstrip(),
    "invalid UTF-8": good_line().replace(b"Question", b"Ques\xff\xfetion", 1).rstrip(),
    "an unpaired UTF-8 surrogate": good_line().replace(b"Question", b"Ques\xed\xa0\x80tion", 1).rstrip(),
    "a version of 5,000 digits": b'{"version":' + b"9" * 5000 + b"}",
    "a version that is a list": b'{"version":[3]}',
    "a run header with a bad plan": b'{"kind":"run","version":3,"episodes":-1}',
    "an unknown kind": b'{"kind":"nonsense","version":3}',
    **{f"wrong type: {name}": line for name, line in wrong_types()},
    **{f"run header: {name}": line for name, line in header_wrong_types()},
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_line_is_a_reported_bad_record_and_reading_goes_on(tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_bytes(good_line(0) + HOSTILE[name] + b"\n" + good_line(2))
    records = list(read_records(path))
    assert [r.trajectory.seed if r.trajectory else None for r in records] == [0, None, 2], name
    assert records[1].error and records[1].lineno == 2
    with pytest.raises(ValueError, match=r"t.jsonl:2: bad trajectory record"):
        list(read_trajectories(path))
    results = list(replay_file(path, allow_legacy=True))  # replay reports it and goes on
    assert len(results) == 3 and not results[1].ok


def test_a_100_mb_line_is_skipped_in_bounded_memory(tmp_path):
    import tracemalloc

    path = tmp_path / "t.jsonl"
    with open(path, "wb") as f:
        f.write(good_line(0))
        f.write(b'{"env_id":"' + b"x" * (100 << 20) + b'"}\n')
        f.write(good_line(2))
    tracemalloc.start()
    records = list(read_records(path, max_record_bytes=1 << 20))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [r.trajectory is not None for r in records] == [True, False, True]
    assert "longer than the 1048576 allowed" in records[1].error
    assert peak < 8 << 20, peak  # the line is never held whole
    assert [r.trajectory is not None for r in read_records(path)] == [True, False, True]  # the default limit too


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(junk=st.binary(max_size=300), cut=st.integers(0, 2000), flip=st.integers(0, 255))
def test_no_bytes_make_the_reader_raise(tmp_path_factory, junk, cut, flip):
    line = bytearray(good_line(1))
    line[cut % len(line)] ^= flip
    path = tmp_path_factory.mktemp("f") / "t.jsonl"
    path.write_bytes(good_line(0) + junk + b"\n" + bytes(line) + junk)
    records = list(read_records(path))  # never raises
    assert records[0].trajectory is not None
    assert all((r.trajectory is None) == (r.error is not None) for r in records)


def test_key_order_never_matters(tmp_path):
    """Reordering a record's keys, at any depth, is no change (it was reported as tampering)."""

    def reverse(x):
        if isinstance(x, dict):
            return {k: reverse(v) for k, v in reversed(list(x.items()))}
        return [reverse(v) for v in x] if isinstance(x, list) else x

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(reverse(json.loads(dumps(make_traj(0))))) + "\n", encoding="utf-8")
    [back] = read_trajectories(path)  # the checksum verifies
    assert canonical(back.to_dict()) == canonical(make_traj(0).to_dict())


@pytest.mark.parametrize("pad", [0, 1, 5, 13, 14, 15, 100])
def test_count_records_counts_episode_lines_not_headers_across_chunk_boundaries(tmp_path, pad):
    header = RunHeader(env_id="e", env_kwargs={}, agent="a", agent_name=None, agent_kwargs=None, seed=0,
                       tasks="sequential", group_size=1, episodes=3)  # fmt: skip
    filler = b'{"x":"' + b"y" * ((1 << 20) - pad - 9) + b'"}\n'  # the header's first bytes straddle a 1 MiB read
    data = filler + (dumps(header) + "\n").encode() + good_line(0) + good_line(1) + b'{"kind":"run","ver'
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    assert count_records(path) == 3  # the filler and two episodes; the header and the torn line are not counted
    assert count_records(tmp_path / "none.jsonl") == 0
