"""What a new user hits on the command line: every user error is one line and exit 2, Ctrl-C is one line and exit 130.

Each input the issue lists runs the real ``agentgym`` command in a subprocess (from an empty folder, as a user would);
the class is closed by a test over every subcommand with a garbage argument and by property tests of the checks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym import cli
from agentgym.contract.registry import list_envs
from agentgym.contract.trajectory import read_records
from agentgym.contract.trust import value_fits

BIN = Path(sys.executable).parent / "agentgym"
COMMAND = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "agentgym.cli"]
#: A hang guard only: every command here ends in seconds.
TIMEOUT = 300


def agentgym_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> str:
    """Exit ``code``, exactly one line on stderr (no traceback) that holds every needle; returns the line."""
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.splitlines()
    assert res.returncode == code, (res.returncode, res.stderr)
    assert len(lines) == 1, res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------- each input of the issue


def test_bench_unknown_env_suggests_the_closest_and_writes_nothing(tmp_path):
    res = agentgym_cli("bench", "--env", "agentgym/Chian-v0", "--episodes", "1", cwd=tmp_path)
    assert_one_line_error(res, "unknown env id 'agentgym/Chian-v0'", "did you mean agentgym/Chain-v0?")
    assert list(tmp_path.iterdir()) == []  # checked before the output folder was touched


def test_bench_unknown_agent_is_an_error_not_an_empty_table(tmp_path):
    res = agentgym_cli("bench", "--env", "agentgym/Chain-v0", "--agent", "orcale", "--out", "o", cwd=tmp_path)
    assert_one_line_error(res, "unknown agent 'orcale'", "did you mean 'oracle'?")
    assert "(no rows)" not in res.stdout
    assert not (tmp_path / "o").exists()


def test_run_unknown_agent_suggests_the_closest(tmp_path):
    res = agentgym_cli("run", "agentgym/Chain-v0", "--agent", "orcale", "--out", "o", cwd=tmp_path)
    assert_one_line_error(res, "unknown agent 'orcale'", "did you mean 'oracle'?")
    assert not (tmp_path / "o").exists()


def test_run_unknown_env_id(tmp_path):
    res = agentgym_cli("run", "Chian-v0", "--agent", "random", cwd=tmp_path)
    assert_one_line_error(res, "unknown env id 'Chian-v0'", "did you mean agentgym/Chain-v0?")
    assert list(tmp_path.iterdir()) == []


def test_serve_retriever_missing_corpus(tmp_path):
    res = agentgym_cli("serve-retriever", "nope.jsonl", "--port", str(free_port()), cwd=tmp_path)
    assert_one_line_error(res, "no corpus file at nope.jsonl")


def test_hf_agent_missing_model_path(tmp_path):
    args = ["run", "agentgym/Chain-v0", "--agent", "hf", "--agent-arg", "model_path=/nope", "--out", "o"]
    assert_one_line_error(agentgym_cli(*args, cwd=tmp_path), "model_path='/nope'", "no such folder")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_train_missing_model(tmp_path):
    args = ["train", "--preset", "tiny", "--model", str(tmp_path / "absent"), "--out-dir", "r"]
    assert_one_line_error(agentgym_cli(*args, cwd=tmp_path), "no model directory at")
    assert not (tmp_path / "r").exists()


def test_env_arg_of_the_wrong_type_names_the_argument_and_the_type(tmp_path):
    args = ["run", "agentgym/SearchQA-v0", "--agent", "random", "--env-arg", "dataset=tiny"]
    args += ["--env-arg", "max_turns=six"]
    assert_one_line_error(agentgym_cli(*args, cwd=tmp_path), "max_turns must be an int, got 'six'")
    assert list(tmp_path.iterdir()) == []


def test_env_arg_the_env_does_not_take(tmp_path):
    res = agentgym_cli("check", "agentgym/Chain-v0", "--env-arg", "max_turns=6", cwd=tmp_path)
    assert_one_line_error(res, "agentgym/Chain-v0 takes no argument 'max_turns'", "horizon")


@pytest.mark.slow
def test_bench_takes_env_args(tmp_path):
    args = ["bench", "--env", "agentgym/Chain-v0", "--env-arg", "horizon=2", "--episodes", "2", "--quiet", "--out", "o"]
    res = agentgym_cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    trajs = [r.trajectory for r in read_records(tmp_path / "o/trajectories/agentgym_Chain-v0__random.jsonl")]
    assert [t.env_kwargs["horizon"] for t in trajs if t is not None] == [2, 2]
    bad = agentgym_cli("bench", "--env", "agentgym/Chain-v0", "--env-arg", "horizon=two", "--out", "p", cwd=tmp_path)
    assert_one_line_error(bad, "horizon must be an int, got 'two'")
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_textworld_without_a_game_says_it_needs_game_file(tmp_path):
    res = agentgym_cli("run", "agentgym/TextWorld-v0", "--agent", "random", cwd=tmp_path)
    line = assert_one_line_error(res, "game_file=")
    assert "unknown agent" not in line


def test_openai_agent_without_a_server_fails_at_once(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = ["run", "agentgym/Chain-v0", "--agent", "openai", "--agent-arg", f"base_url={url}", "--out", "o"]
    line = assert_one_line_error(agentgym_cli(*args, cwd=tmp_path), f"nothing answers at {url}")
    assert "attempt" not in line  # the one connect of the preflight, not the client's retries
    assert not (tmp_path / "o").exists()


def test_openai_agent_act_fails_without_retries_when_nothing_listens():
    from agentgym.agents.openai_agent import OpenAIAgent
    from agentgym.contract.agent import AgentError

    agent = OpenAIAgent(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=50)  # 50 retries would take minutes
    agent.reset(seed=0)
    with pytest.raises(AgentError, match="nothing answers") as info:
        agent.act([{"role": "user", "content": "hi"}], {})
    assert "attempt" not in str(info.value)
    agent.close()


def test_openai_agent_checks_once_then_trusts_a_live_server():
    """A live server passes the preflight, and the agent does not connect again to check."""
    from agentgym.agents.openai_agent import OpenAIAgent

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        agent = OpenAIAgent(f"http://127.0.0.1:{server.getsockname()[1]}/v1", "m")
        agent.preflight()
        agent.preflight()
        server.settimeout(TIMEOUT)
        server.accept()[0].close()  # the one connect
        server.settimeout(0.0)
        with pytest.raises(BlockingIOError):
            server.accept()
        agent.close()


def test_rerun_into_the_same_folder_offers_overwrite_and_append(tmp_path):
    args = ["run", "agentgym/Chain-v0", "--agent", "random", "--episodes", "2", "--quiet", "--out", "o"]
    assert agentgym_cli(*args, cwd=tmp_path).returncode == 0
    before = (tmp_path / "o/trajectories.jsonl").read_bytes()
    assert_one_line_error(agentgym_cli(*args, cwd=tmp_path), "--overwrite", "--append")
    assert (tmp_path / "o/trajectories.jsonl").read_bytes() == before


@pytest.mark.slow
def test_train_into_a_folder_that_holds_a_run_needs_resume_or_overwrite(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n', encoding="utf-8")
    res = agentgym_cli("train", "--preset", "tiny", "--out-dir", "r", cwd=tmp_path)
    assert_one_line_error(res, "holds a run", "--resume", "--overwrite")
    assert (run / "metrics.jsonl").read_text(encoding="utf-8") == '{"iteration": 1}\n'
    both = agentgym_cli("train", "--preset", "tiny", "--out-dir", "r", "--resume", "--overwrite", cwd=tmp_path)
    assert_one_line_error(both, "give one")


@pytest.mark.parametrize("command", ["run", "check", "bench"])
def test_a_game_file_not_made_yet_is_one_line_naming_it(command, tmp_path):
    """TextWorld's ``game_file=`` that does not exist was a 25-line traceback (exit 1) from the env's constructor."""
    args = {"run": ["run", "agentgym/TextWorld-v0", "--agent", "random"], "check": ["check", "agentgym/TextWorld-v0"],
            "bench": ["bench", "--env", "agentgym/TextWorld-v0"]}[command]  # fmt: skip
    res = agentgym_cli(*args, "--env-arg", "game_file=games/g.z8", "--out" if command != "check" else "--seed",
                       "o" if command != "check" else "0", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(res, f"agentgym {command}: error:", "game file 'games/g.z8' does not exist")
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_no_game_is_one_line_before_any_episode(tmp_path):
    pytest.importorskip("textworld")
    (tmp_path / "notes.txt").write_text("not a game\n", encoding="utf-8")
    for args in (
        ["run", "agentgym/TextWorld-v0", "--agent", "random", "--out", "o"],
        ["check", "agentgym/TextWorld-v0"],
    ):
        res = agentgym_cli(*args, "--env-arg", "game_file=notes.txt", cwd=tmp_path)
        assert_one_line_error(res, "cannot start an episode of agentgym/TextWorld-v0 with game_file=notes.txt")
    assert not (tmp_path / "o").exists()


def test_check_of_textworld_without_a_game_says_what_it_needs(tmp_path):
    res = agentgym_cli("check", "agentgym/TextWorld-v0", cwd=tmp_path)
    assert_one_line_error(res, "needs game_file=", "tw-make")
    assert "FAIL" not in res.stdout


def test_a_bad_constructor_value_is_one_line_and_debug_shows_the_traceback(tmp_path):
    res = agentgym_cli("check", "agentgym/SearchQA-v0", "--env-arg", "dataset=nope", cwd=tmp_path)
    assert_one_line_error(res, "cannot make agentgym/SearchQA-v0 with dataset=nope", "unknown preset 'nope'")
    argv = [*COMMAND, "check", "agentgym/SearchQA-v0", "--env-arg", "dataset=nope"]
    environ = {**os.environ, cli.DEBUG_ENV: "1"}
    debug = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, env=environ)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "ValueError" in debug.stderr


def test_make_env_turns_a_missing_or_unreadable_file_into_one_line(tmp_path, monkeypatch):
    """``OSError`` from a constructor (a data file missing or unreadable) is the user's, with the file named."""

    class NeedsFile(gym.Env):
        def __init__(self, path: str = "x") -> None:
            open(path, encoding="utf-8").close()

    gym.register(id="agentgym_test/NeedsFile-v0", entry_point=NeedsFile, disable_env_checker=True)
    try:
        with pytest.raises(cli.UserError, match=r"with path=absent\.json: No such file or directory: absent\.json"):
            cli._make_env("agentgym_test/NeedsFile-v0", {"path": "absent.json"})
    finally:
        del gym.registry["agentgym_test/NeedsFile-v0"]


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("mypkg/Foo-v0", None),  # a namespace nothing registers: how plugins register, no far-fetched guess
        ("agentgym/Foo-v0", None),
        ("agentgym/Chian-v0", "agentgym/Chain-v0"),
        ("agentgim/Chain-v0", "agentgym/Chain-v0"),
        ("Chian-v0", "agentgym/Chain-v0"),
        ("searchqa", "agentgym/SearchQA-v0"),
        ("agentgym/TwentyQuestion-v0", "agentgym/TwentyQuestions-v0"),
    ],
)
def test_an_unknown_env_id_gets_only_a_close_suggestion(env_id, expected, tmp_path):
    res = agentgym_cli("run", env_id, "--agent", "random", cwd=tmp_path)
    line = assert_one_line_error(res, f"unknown env id {env_id!r}")
    if expected is None:
        assert "did you mean" not in line
    else:
        assert f"did you mean {expected}?" in line
    if env_id.startswith("mypkg/"):
        assert "namespace 'mypkg'" in line and "entry-point group agentgym.envs" in line


def test_check_of_an_env_without_snapshots_says_skip_once(tmp_path):
    """The checker printed "pass snapshot/restore ..." and then a note that the env does not support snapshots."""
    code = (
        "import sys, gymnasium as gym\n"
        "from agentgym.envs.example import GuessNumberEnv\n"
        "class NoSnapshots(GuessNumberEnv):\n"
        "    def _snapshot_state(self):\n"
        "        return super(GuessNumberEnv, self)._snapshot_state()\n"
        "gym.register(id='agentgym/NoSnapshots-v0', entry_point=NoSnapshots)\n"
        "from agentgym.cli import main\n"
        "sys.exit(main(['check', 'agentgym/NoSnapshots-v0']))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout + res.stderr
    snapshot_lines = [line.strip() for line in res.stdout.splitlines() if "snapshot" in line]
    assert snapshot_lines == ["skip  snapshot/restore: agentgym/NoSnapshots-v0 does not support snapshots"], res.stdout


# ----------------------------------------------------------------------------------- Ctrl-C


def _start(args: Sequence[str], cwd: Path) -> subprocess.Popen[str]:
    """The real command, with SIGINT at its default (a test runner may ignore it): Python makes it KeyboardInterrupt."""
    return subprocess.Popen(
        [*COMMAND, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def _wait_for(condition: typing.Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Poll until ``condition`` holds; a hang guard, not a timing assumption."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "hang guard"
        time.sleep(0.05)


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    return proc.returncode, err


def _lines(path: Path) -> list[str]:
    """The complete lines of a file (a line torn by the interrupt is not one)."""
    text = path.read_text(encoding="utf-8")
    return text.split("\n")[:-1]


def _episodes(lines: list[str]) -> list[str]:
    return [line for line in lines if json.loads(line).get("kind") != "run"]


@pytest.mark.slow
def test_ctrl_c_on_run_is_one_line_and_the_run_continues_with_append(tmp_path):
    args = ["run", "agentgym/Chain-v0", "--agent", "random", "--episodes", "1000000", "--quiet", "--out", "o"]
    path = tmp_path / "o/trajectories.jsonl"
    proc = _start(args, tmp_path)
    _wait_for(lambda: len(_episodes(_lines(path) if path.exists() else [])) >= 1, proc)
    code, err = _interrupt(proc)
    assert code == 130, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "interrupted" in err and f"written to {Path('o/trajectories.jsonl')}" in err and "--append" in err
    first = _lines(path)
    errors = [r for r in read_records(path) if r.error is not None]
    assert [r.lineno for r in errors] in ([], [len(first) + 1]), errors  # at most a torn tail: --append cuts it

    proc = _start([*args, "--append"], tmp_path)  # the same command plus --append
    _wait_for(lambda: len(_lines(path)) > len(first), proc)
    code, err = _interrupt(proc)
    assert code == 130 and len(err.splitlines()) == 1, err
    done = _episodes(_lines(path))
    assert done[: len(_episodes(first))] == _episodes(first)  # nothing written before was lost or changed

    # the episodes on disk are those of an uninterrupted run of that many episodes
    fresh = ["run", "agentgym/Chain-v0", "--agent", "random", "--episodes", str(len(done)), "--quiet", "--out", "f"]
    assert agentgym_cli(*fresh, cwd=tmp_path).returncode == 0
    assert _episodes(_lines(tmp_path / "f/trajectories.jsonl")) == done


def _capped_bench(caps: dict[str, int], args: Sequence[str]) -> list[str]:
    """The real ``agentgym bench`` in its own Python, with per-env episode caps (``BENCH_MAX_EPISODES``) so that the
    first env finishes in a moment and the second plays until interrupted."""
    code = (
        "import sys; from agentgym.running import bench; from agentgym.cli import main; "
        f"bench.BENCH_MAX_EPISODES.update({caps!r}); sys.exit(main(sys.argv[1:]))"
    )
    return ["-c", code, *args]


def _start_python(args: Sequence[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def _finished(out: Path) -> list[str]:
    from agentgym.running.bench import finished_envs, read_progress

    progress = read_progress(out)
    return finished_envs(progress) if progress else []


def test_ctrl_c_on_bench_says_what_was_kept_and_the_same_command_continues(tmp_path):
    args = ["bench", "--env", "agentgym/Chain-v0", "--env", "agentgym/KeyDoor-v0", "--episodes", "1000000", "--quiet",
            "--out", "o"]  # fmt: skip
    out = tmp_path / "o"
    chain = [out / f"trajectories/agentgym_Chain-v0__{a}.jsonl" for a in ("oracle", "random")]
    keydoor = out / "trajectories/agentgym_KeyDoor-v0__oracle.jsonl"

    def keydoor_episodes() -> int:
        return len(_episodes(_lines(keydoor))) if keydoor.exists() else 0

    proc = _start_python(_capped_bench({"agentgym/Chain-v0": 20}, args), tmp_path)
    _wait_for(lambda: _finished(out) == ["agentgym/Chain-v0"] and keydoor_episodes() >= 1, proc)
    code, err = _interrupt(proc)
    assert code == 130, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"interrupted; kept in {Path('o')}: 1 of 2 envs finished (agentgym/Chain-v0)" in err, err
    assert "agentgym/KeyDoor-v0 was interrupted" in err and "rerun the same command" in err and "--overwrite" in err
    kept = [p.read_bytes() for p in chain]
    first = _episodes(_lines(keydoor))

    # the same command again: no refusal; Chain is not played again and KeyDoor goes on from where it stopped
    proc = _start_python(_capped_bench({"agentgym/Chain-v0": 20}, args), tmp_path)
    _wait_for(lambda: keydoor_episodes() > len(first), proc)
    code, err = _interrupt(proc)
    assert code == 130 and len(err.splitlines()) == 1, err
    assert [p.read_bytes() for p in chain] == kept
    assert _episodes(_lines(keydoor))[: len(first)] == first  # nothing written before was lost or changed

    # once KeyDoor's share ends, the bench completes: the report holds both envs, Chain's rows from the first run
    n = keydoor_episodes() + 3
    done = subprocess.run([sys.executable, *_capped_bench({"agentgym/Chain-v0": 20, "agentgym/KeyDoor-v0": n}, args)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "continuing the interrupted bench" in done.stdout and "1 of 2 envs finished" in done.stdout
    rows = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert {(r["env"], r["agent"], r["episodes"]) for r in rows} == {
        ("agentgym/Chain-v0", "oracle", 20), ("agentgym/Chain-v0", "random", 20),
        ("agentgym/KeyDoor-v0", "oracle", n), ("agentgym/KeyDoor-v0", "random", n),
    }  # fmt: skip
    assert [p.read_bytes() for p in chain] == kept
    indices = [json.loads(line)["index"] for line in _episodes(_lines(keydoor))]
    assert indices == list(range(n))  # every episode once, in order: the interrupted ones were not replayed
    assert "## agentgym/KeyDoor-v0" in (out / "report.md").read_text(encoding="utf-8")


def test_bench_into_a_folder_of_an_unfinished_bench_with_other_options_is_refused(tmp_path):
    args = ["bench", "--env", "agentgym/Chain-v0", "--env", "agentgym/KeyDoor-v0", "--episodes", "1000000", "--quiet",
            "--out", "o"]  # fmt: skip
    proc = _start_python(_capped_bench({"agentgym/Chain-v0": 5}, args), tmp_path)
    _wait_for(lambda: _finished(tmp_path / "o") == ["agentgym/Chain-v0"], proc)
    assert _interrupt(proc)[0] == 130
    other = ["bench", "--env", "agentgym/Chain-v0", "--episodes", "3", "--quiet", "--out", "o"]
    assert_one_line_error(agentgym_cli(*other, cwd=tmp_path), "holds an unfinished bench with other options",
                          "--overwrite")  # fmt: skip
    assert agentgym_cli(*other, "--overwrite", cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_ctrl_c_on_train_is_one_line_and_a_rerun_without_resume_is_refused(tmp_path):
    args = ["train", "--preset", "tiny", "--iterations", "1000", "--out-dir", "r", "--set", "progress=false"]
    checkpoint = tmp_path / "r/checkpoint.pt"
    proc = _start(args, tmp_path)
    _wait_for(checkpoint.is_file, proc)
    code, err = _interrupt(proc)
    assert code == 130, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "interrupted" in err and "checkpoint" in err and "--resume" in err
    saved = checkpoint.read_bytes()
    assert_one_line_error(agentgym_cli(*args, cwd=tmp_path), "holds a run", "--resume")
    assert checkpoint.read_bytes() == saved


# ----------------------------------------------------------------------------------- the class


GARBAGE: dict[str, list[str]] = {
    "list": ["--agents", "--env-arg", "no_such_argument=1"],
    "run": ["agentgym/NoSuchEnv-v0", "--agent", "random"],
    "bench": ["--env", "agentgym/NoSuchEnv-v0"],
    "check": ["agentgym/Chain-v0", "--env-arg", "horizon=[1,"],
    "replay": ["no/such/trajectories.jsonl"],
    "serve": ["agentgym/NoSuchEnv-v0", "--port", "1"],
    "serve-retriever": ["no/such/corpus.jsonl", "--port", "1"],
    "view": ["no/such/folder"],
    "play": ["agentgym/NoSuchEnv-v0"],
    "train": ["--preset", "tiny", "--set", "iterations=many"],
    "methods": ["--need", "telepathy"],
}


def test_garbage_covers_every_command():
    assert set(GARBAGE) == cli.builtin_commands() | set(cli.plugin_commands())


@pytest.mark.parametrize("command", sorted(GARBAGE))
def test_every_command_rejects_garbage_in_one_line(command, tmp_path):
    assert_one_line_error(agentgym_cli(command, *GARBAGE[command], cwd=tmp_path), f"agentgym {command}: error:")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(GARBAGE))
def test_every_command_rejects_an_unknown_option_in_one_line(command, tmp_path):
    assert_one_line_error(agentgym_cli(command, "--no-such-option", cwd=tmp_path), "agentgym", "error:")


JUNK = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
    lambda s: not s.startswith("-") and s.strip() == s
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(command=st.sampled_from(sorted(cli.builtin_commands())), junk=st.lists(JUNK, min_size=1, max_size=3))
def test_junk_arguments_never_raise(command, junk, tmp_path, capsys, monkeypatch):
    """Any positional junk after any command: exit 2 with one line on stderr, never an exception."""
    monkeypatch.chdir(tmp_path)
    try:
        code = cli.main([command, *junk])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1, err


# ----------------------------------------------------------------------------------- the checks, as properties


def test_check_env_id_suggests_a_registered_id():
    with pytest.raises(cli.UserError, match=r"did you mean agentgym/SearchQA-v0\?"):
        cli.check_env_id("agentgym/SerchQA-v0")
    for env_id in list_envs():
        cli.check_env_id(env_id)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_check_env_id_accepts_exactly_the_registry(env_id):
    try:
        cli.check_env_id(env_id)
    except cli.UserError as e:
        assert env_id not in gym.registry
        assert "\n" not in str(e)
    else:
        assert env_id in gym.registry


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _params() -> list[tuple[str, str]]:
    return [(e, name) for e in list_envs() for name in cli._constructor(e)[0]]


@settings(max_examples=300, deadline=None)
@given(target=st.deferred(lambda: st.sampled_from(_params())), value=JSON)
def test_env_kwargs_check_agrees_with_the_annotations(target, value):
    """Every JSON value for every constructor argument of every env: accepted exactly when it fits the annotation,
    otherwise one line naming the argument and what it must be."""
    env_id, name = target
    hints = cli._constructor(env_id)[1]
    try:
        cli.check_env_kwargs(env_id, {name: value})
    except cli.UserError as e:
        assert name in hints and not value_fits(value, hints[name])
        assert str(e).startswith(f"{env_id}: {name} must be ")
    else:
        assert name not in hints or value_fits(value, hints[name])


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_value_fits_matches_json_types(value):
    assert value_fits(value, int) == (type(value) is int)
    assert value_fits(value, float) == (type(value) in (int, float))
    assert value_fits(value, str | None) == (value is None or isinstance(value, str))
    assert value_fits(value, list[int] | None) == (value is None or isinstance(value, list))
    assert value_fits(value, typing.Any)


def test_wrong_typed_env_args_no_longer_reach_the_constructor():
    """The input of the issue: without the check, SearchQA's constructor compared 'six' < 1 (a TypeError)."""
    with pytest.raises(cli.UserError, match=r"^agentgym/SearchQA-v0: max_turns must be an int, got 'six'$"):
        cli._make_env("agentgym/SearchQA-v0", {"dataset": "tiny", "max_turns": "six"})
    env = cli._make_env("agentgym/SearchQA-v0", {"dataset": "tiny", "max_turns": 6})
    assert env.unwrapped.max_turns == 6
    env.close()


def test_one_line_parser_errors(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "agentgym/Chain-v0", "--agent", "random", "--episodes", "x"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid int value: 'x'" in err and "agentgym run --help" in err


def test_serve_retriever_bad_corpus_or_retriever(tmp_path):
    (tmp_path / "bad.jsonl").write_text("not json\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"id": "1", "contents": "a b"}\n', encoding="utf-8")
    port = str(free_port())
    assert_one_line_error(agentgym_cli("serve-retriever", "bad.jsonl", "--port", port, cwd=tmp_path), "not valid JSON")
    res = agentgym_cli("serve-retriever", "c.jsonl", "--retriever", "bm52", "--port", port, cwd=tmp_path)
    assert_one_line_error(res, "unknown retriever spec 'bm52'")


OUT_OF_RANGE = [
    ["run", "agentgym/Chain-v0", "--agent", "random", "--episodes", "-5"],
    ["run", "agentgym/Chain-v0", "--agent", "random", "--seed", "-1"],
    ["run", "agentgym/Chain-v0", "--agent", "random", "--workers", "0"],
    ["run", "agentgym/Chain-v0", "--agent", "random", "--group-size", "0"],
    ["bench", "--episodes", "-1"],
    ["bench", "--workers", "-2"],
    ["bench", "--trials", "0"],
    ["check", "agentgym/Chain-v0", "--seed", "-1"],
    ["serve", "--port", "99999"],
    ["serve-retriever", "corpus.jsonl", "--port", "-1"],
]


@pytest.mark.parametrize("argv", OUT_OF_RANGE, ids=lambda argv: " ".join(argv[-3:]))
def test_numbers_out_of_range_are_usage_errors(argv, capsys, tmp_path, monkeypatch):
    """``bench --episodes -1`` was a traceback deep in the runner; every count, seed and port is checked when parsed."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {argv[-2]}: must be" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ("run", "agentgym/Chain-v0", "--agent", "random", "--episodes", "1", "--env-arg"),
        ("train", "--preset", "tiny", "--out-dir", "run", "--set"),
    ],
)
def test_key_values_past_the_json_limits_are_one_line_errors(tmp_path, args):
    """``--env-arg`` / ``--set`` values are read as untrusted JSON: nested thousands deep or an integer of thousands
    of digits is a one-line error (it was a RecursionError traceback), and nothing is written."""
    for value, needle in (("[" * 5000 + "]" * 5000, "nested more than 64 levels"), ("9" * 5000, "digits")):
        name = "horizon" if args[0] == "run" else "env_kwargs"
        res = agentgym_cli(*args, f"{name}={value}", cwd=tmp_path)
        assert_one_line_error(res, f"The value of {name}", needle)
    assert list(tmp_path.iterdir()) == []
    assert cli.key_values(["a=[1]", "b=x y", "a=2"]) == {"a": 2, "b": "x y"}  # a later key wins; non-JSON is text
