"""Trajectory records: round trip, crash tolerance, append-only writes."""

import os

import pytest

from agentgym.trajectory import Trajectory, TrajectoryWriter, Turn, dumps, read_trajectories


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
        from agentgym.trajectory import Trajectory, TrajectoryWriter
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
