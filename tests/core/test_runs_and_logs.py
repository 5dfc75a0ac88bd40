"""What users hit in long runs: records stream to disk, memory stays flat, failures stop a run, a killed run
continues with ``--append``, outputs never mix runs, user errors are one line, and replay checks every field."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym.cli import main
from agentgym.contract.env import StepResult
from agentgym.contract.trajectory import FORMAT_VERSION, checksum, count_records, normalize, read_trajectories
from agentgym.envs.example import GUESS, GuessNumberEnv
from agentgym.envs.search_qa.env import SearchQAEnv
from agentgym.running.replay import replay_file
from agentgym.running.runner import RunAborted, iter_episodes, run, run_to_file
from agentgym.tools.retrieval.remote import RemoteRetriever

EXAMPLE = "example/GuessNumber-v0"
KW = {"dataset": "tiny"}


@pytest.fixture(scope="module", autouse=True)
def example_registered():
    gym.register(EXAMPLE, entry_point="agentgym.envs.example:GuessNumberEnv")
    yield
    del gym.registry[EXAMPLE]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


# --- streaming -------------------------------------------------------------------------------------------------


def test_records_reach_the_file_while_the_run_goes_on_and_few_episodes_are_in_flight(tmp_path):
    path = tmp_path / "t.jsonl"
    seen: list[tuple[int, int]] = []  # (episodes started, records on disk) at each reset

    class Watch(gym.Wrapper):
        snapshot_attrs = ()

        def reset(self, **kwargs):
            seen.append((len(seen) + 1, count_records(path)))
            return self.env.reset(**kwargs)

    run_to_file(EXAMPLE, "bisect", 60, path, workers=2, progress=False, make_env=lambda: Watch(gym.make(EXAMPLE)))
    assert count_records(path) == 60
    assert all(started - on_disk <= 2 * 2 for started, on_disk in seen)  # at most 2 x workers in flight
    assert seen[-1][1] >= 50


@pytest.mark.slow
def test_memory_stays_flat_in_the_number_of_episodes(tmp_path):
    def peak(episodes: int) -> int:
        tracemalloc.start()
        run_to_file(EXAMPLE, "bisect", episodes, tmp_path / f"{episodes}.jsonl", progress=False)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    peak(100)  # a first run pays one-off costs (imports, caches)
    small, large = peak(500), peak(5000)
    assert large < small + 200_000, (small, large)  # 10x the episodes: the same peak (holding records: > 10 MB)


def test_the_summary_is_a_running_aggregate_equal_to_summarize(tmp_path):
    from agentgym.running.runner import summarize

    trajs = run("agentgym/SearchQA-v0", "heuristic", 12, env_kwargs=KW, progress=False)
    summary = run_to_file("agentgym/SearchQA-v0", "heuristic", 12, tmp_path / "t.jsonl", env_kwargs=KW, progress=False)
    assert summary.rows() == summarize(trajs) and summary.episodes == 12


# --- failures stop a run ---------------------------------------------------------------------------------------


def test_an_unreachable_retrieval_server_stops_the_run_in_a_few_episodes(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"

    def make_env() -> gym.Env:
        return SearchQAEnv(dataset="tiny", retriever=RemoteRetriever(url, retries=1, backoff=0.01, timeout=2))

    start = time.monotonic()
    played = []
    with pytest.raises(RunAborted, match=r"5 of the last \d+ episodes failed with the same kind of error.*unreachable"):
        for traj in iter_episodes("agentgym/SearchQA-v0", "heuristic", 3000, make_env=make_env):
            played.append(traj)
    assert len(played) == 5 and all(t.error.startswith("env.step: RetrievalServerError") for t in played)
    assert time.monotonic() - start < 20


def test_sporadic_errors_do_not_stop_a_run():
    calls = {"n": 0}

    def flaky(messages, info):
        calls["n"] += 1
        if calls["n"] % 10 == 0:
            raise ConnectionError("a transient failure")
        return "<guess>50</guess>"

    trajs = run(EXAMPLE, flaky, 100, env_kwargs={"high": 100, "max_turns": 2}, progress=False)
    assert sum(t.error is not None for t in trajs) >= 9 and len(trajs) == 100


@pytest.mark.slow
def test_cli_stops_with_one_line_and_keeps_what_was_played(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "agentgym/SearchQA-v0", "--agent", "heuristic", "--episodes", "1000", "--out", str(out),
                 "--env-arg", "dataset=tiny", "--env-arg", f"retriever=remote:http://127.0.0.1:{closed_port()}",
                 "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith("agentgym run: stopped: 5 of the last 5 episodes")
    assert count_records(out / "trajectories.jsonl") == 5


# --- append after a crash, and a killed run continues ---------------------------------------------------------


def test_append_cuts_a_torn_tail_before_writing(tmp_path):
    path = tmp_path / "t.jsonl"
    run(EXAMPLE, "bisect", 3, out=path, progress=False)
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[0][:57])  # a crash in the middle of record 4
    with pytest.warns(UserWarning, match="removed a torn final record of 57 bytes"):
        run(EXAMPLE, "bisect", 2, out=path, progress=False)
    assert len(list(read_trajectories(path))) == 5
    assert all(r.ok for r in replay_file(path))


def test_append_continues_an_interrupted_run_to_the_same_file(tmp_path, capsys):
    args = ["run", EXAMPLE, "--agent", "bisect", "--quiet"]
    assert main([*args, "--episodes", "40", "--out", str(tmp_path / "whole")]) == 0
    whole = (tmp_path / "whole" / "trajectories.jsonl").read_bytes()
    part = tmp_path / "part"
    part.mkdir()
    lines = whole.splitlines(keepends=True)
    (part / "trajectories.jsonl").write_bytes(b"".join(lines[:16]) + lines[16][:57])  # killed in episode 16's write
    assert main([*args, "--episodes", "40", "--out", str(part), "--append"]) == 0
    assert (part / "trajectories.jsonl").read_bytes() == whole
    assert json.loads((part / "summary.json").read_text())[0]["episodes"] == 40  # the summary covers all 40
    capsys.readouterr()
    assert main(["run", EXAMPLE, "--agent", "bisect", "--episodes", "40", "--seed", "3", "--out", str(part),
                 "--append"]) == 2  # fmt: skip
    assert "holds another run" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_killed_with_sigkill_continues_with_append_and_replays(tmp_path):
    out = tmp_path / "run"
    path = out / "trajectories.jsonl"
    cmd = [sys.executable, "-m", "agentgym.cli", "run", "agentgym/Household-v0", "--agent", "heuristic",
           "--episodes", "400", "--out", str(out), "--quiet"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while count_records(path) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = count_records(path)
    assert 30 <= killed_at < 400
    subprocess.run([*cmd, "--append"], check=True, capture_output=True)
    trajs = list(read_trajectories(path))
    assert len(trajs) == 400 and [t.options["task_index"] for t in trajs] == [i % 140 for i in range(400)]
    results = list(replay_file(path))
    assert len(results) == 400 and all(r.ok for r in results)


# --- outputs and user errors -----------------------------------------------------------------------------------


def test_a_failed_start_leaves_nothing_and_the_corrected_rerun_works(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", EXAMPLE, "--agent", "nobody", "--out", str(out)]) == 2
    assert "unknown agent 'nobody'" in capsys.readouterr().err
    assert not (out / "trajectories.jsonl").exists()
    assert main(["run", EXAMPLE, "--agent", "bisect", "--episodes", "3", "--out", str(out), "--quiet"]) == 0


def test_the_default_output_folder_holds_the_latest_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for episodes in ("3", "5"):
        assert main(["run", EXAMPLE, "--agent", "bisect", "--episodes", episodes, "--quiet"]) == 0
    assert count_records(tmp_path / "runs" / "latest" / "trajectories.jsonl") == 5


def test_bench_replaces_its_default_folder_and_refuses_a_named_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stale = tmp_path / "reports" / "bench" / "old_env_success.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")
    bench = ["bench", "--env", "agentgym/SearchQA-v0", "--agent", "oracle", "--episodes", "2", "--quiet"]
    assert main(bench) == 0
    assert not stale.exists() and (tmp_path / "reports" / "bench" / "report.md").exists()
    assert main([*bench, "--out", "reports/bench"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main([*bench, "--out", "reports/bench", "--overwrite"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "agentgym/NoSuchEnv-v0", "--agent", "random"], "unknown env id 'agentgym/NoSuchEnv-v0'"),
        (["run", EXAMPLE, "--agent", "bisect", "--env-arg", "hihg=3"], "'hihg'"),
        (["run", EXAMPLE, "--agent", "bisect", "--env-arg", "high"], "expected key=value, got 'high'"),
        (["run", EXAMPLE, "--agent", "bisect", "--agent-arg", "x=1"], "unexpected keyword argument 'x'"),
        (["check", EXAMPLE, "--env-arg", "max_turns=0"], "max_turns must be >= 1"),
        (["replay", "no/such/file.jsonl"], "no such file"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"agentgym {argv[0]}: error: ") and message in err[0]


# --- replay is a real check ------------------------------------------------------------------------------------


def tampered(path: Path, edit) -> list[bool]:
    """Replay ``path`` after ``edit`` changed its second record (the third line, after the run header); the ok flag
    of each record."""
    lines = path.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[2])
    edit(record)
    lines[2] = json.dumps(record, ensure_ascii=False)
    path.with_suffix(".t.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [r.ok for r in replay_file(path.with_suffix(".t.jsonl"))]


EDITS = {
    "last turn deleted": lambda r: r["turns"].pop(),
    "all turns deleted": lambda r: r["turns"].clear(),
    "agent": lambda r: r.update(agent="oracle"),
    "task_id": lambda r: r.update(task_id="elsewhere"),
    "error": lambda r: r.update(error="ConnectionError: made up"),
    "group_id": lambda r: r.update(group_id="7"),
    "token_spans": lambda r: r["turns"][0].update(token_spans=[[0, 3]]),
    "seed": lambda r: r.update(seed=r["seed"] + 100),
}


@pytest.mark.parametrize("field", EDITS)
def test_replay_detects_any_altered_field(field, tmp_path):
    path = tmp_path / "t.jsonl"
    run(EXAMPLE, "bisect", 3, out=path, progress=False)
    assert [r.ok for r in replay_file(path)] == [True, True, True]
    assert tampered(path, EDITS[field]) == [True, False, True]


def legacy(path: Path) -> list[dict]:
    """The episode records of ``path`` as an older agentgym wrote them: no run header, format 1 (no checksum)."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    out = []
    for r in records:
        if r.get("kind") != "run":
            for key in ("checksum", "run_id", "index"):
                r.pop(key)
            out.append({**r, "version": 1})
    return out


def test_a_format_1_record_in_a_run_is_refused_and_a_legacy_file_replays_only_when_allowed(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    run(EXAMPLE, "bisect", 2, out=path, progress=False)

    def as_format_1(r):
        for key in ("checksum", "run_id", "index"):
            r.pop(key)
        r["version"] = 1

    assert tampered(path, as_format_1) == [True, False]
    assert "formats never go down" in next(r for r in replay_file(path.with_suffix(".t.jsonl")) if not r.ok).divergence
    old = legacy(path)
    old[1]["turns"].pop()  # without a checksum, re-execution still sees the missing turn
    path.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    refused = list(replay_file(path))
    assert [r.ok for r in refused] == [False, False] and all("--allow-unverified" in r.divergence for r in refused)
    allowed = list(replay_file(path, allow_legacy=True))
    assert [r.ok for r in allowed] == [True, False] and "no checksum" in allowed[0].unverified
    assert "before the env ended the episode" in allowed[1].divergence
    assert main(["replay", str(path)]) == 1
    del old[1]
    path.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    assert main(["replay", str(path), "--allow-unverified"]) == 0
    out = capsys.readouterr().out
    assert "replayed 1 episode(s): 0 identical, 1 unverified, 0 diverged" in out and "no checksum" in out


def test_replay_reports_each_bad_record_and_goes_on(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    run(EXAMPLE, "bisect", 1, out=path, progress=False)
    [record] = legacy(path)
    record["version"] = (
        FORMAT_VERSION  # a record of the current format outside a run (a TrajectoryWriter used directly)
    )
    record["checksum"] = checksum(record)
    good = json.dumps(record)
    bad = [
        json.dumps({**record, "colour": "red"}),
        json.dumps({**record, "version": FORMAT_VERSION + 1}),
        "[]",
        "null",
        json.dumps({**record, "env_kwargs": {"hihg": 3}}),
        json.dumps({**record, "env_id": "this:Foo-v0"}),
    ]
    path.write_text("\n".join([*bad, good]) + "\n", encoding="utf-8")
    results = list(replay_file(path, allow_legacy=True))
    assert [r.ok for r in results] == [False] * 6 + [True]
    messages = [r.divergence for r in results[:6]]
    expected = ["unknown field(s) ['colour']", f"unsupported trajectory format version {FORMAT_VERSION + 1}",
                "a record is a JSON object, got list", "got null", "'hihg'",
                "is not registered"]  # fmt: skip
    for message, want in zip(messages, expected, strict=True):
        assert want in message, message
    del bad[4]  # the CLI refuses a file whose records set arguments an env takes from the operator only (exit 2)
    path.write_text("\n".join([*bad, good]) + "\n", encoding="utf-8")
    assert main(["replay", str(path), "--allow-unverified"]) == 1
    assert "replayed 6 episode(s): 0 identical, 1 unverified, 5 diverged" in capsys.readouterr().out
    assert main(["replay", str(path)]) == 1
    assert "replayed 6 episode(s): 0 identical, 6 diverged" in capsys.readouterr().out


def test_replay_never_imports_a_module_named_by_a_record(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "sneaky_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "t.jsonl"
    run(EXAMPLE, "bisect", 1, out=path, progress=False)
    [record] = legacy(path)
    record["env_id"] = "sneaky_module:Foo-v0"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    [result] = replay_file(path, allow_legacy=True)
    assert not result.ok and "not registered" in result.divergence and not marker.exists()


class EchoEnv(GuessNumberEnv):
    """GuessNumber that echoes an invalid action with its ``\\uXXXX`` escapes decoded (as a tool echoes the path
    it was given in JSON): a lone surrogate reaches the observation, the transcript and the trajectory file."""

    def _step(self, action: str) -> StepResult:
        if GUESS.fullmatch(action):
            return super()._step(action)
        echo = f"you said {action.encode('utf-8').decode('unicode_escape')}"
        return StepResult([{"role": "user", "content": echo}], action_valid=False, parse_error=echo)


@pytest.mark.parametrize("action", ["a\\ud800b", "\\udfff", "\\ud83d\\ude00 and \\ud83d", "<guess>50</guess>"])
def test_a_run_whose_env_echoes_surrogates_writes_a_valid_file_that_replays(tmp_path, action, capsys):
    gym.register("test/Echo-v0", entry_point=EchoEnv)
    try:
        path = tmp_path / "run" / "trajectories.jsonl"
        trajs = run("test/Echo-v0", lambda messages, info: action, 3, env_kwargs={"max_turns": 2}, out=path,
                    progress=False)  # fmt: skip
        assert len(trajs) == 3 and count_records(path) == 3
        path.read_bytes().decode("utf-8")  # strict
        back = list(read_trajectories(path))
        assert [t.index for t in back] == [0, 1, 2]  # the file's records carry their run and position
        written = [dataclasses.replace(t, run_id=b.run_id, index=b.index) for t, b in zip(trajs, back, strict=True)]
        assert [normalize(t.to_dict()) for t in written] == [t.to_dict() for t in back]
        assert main(["replay", str(path)]) == 0
        assert "replayed 3 episode(s): 0 identical, 3 unverified, 0 diverged" in capsys.readouterr().out
    finally:
        del gym.registry["test/Echo-v0"]
