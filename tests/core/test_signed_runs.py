"""Signed runs are bound to one run (format 4: each signature covers the run's nonce and the signature before it), and
an episode too large to write becomes an error episode instead of ending the run.

Each attack of issue 31 is a test here: records picked from two signed runs of one plan, a run's records reordered
or dropped from the middle, two continuations of one killed run spliced, and a 48 MiB record."""

import json
import tracemalloc
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from agentgym.cli import main
from agentgym.contract.env import StepResult
from agentgym.contract.trajectory import (
    KEY_ENV,
    MAX_RECORD_BYTES,
    Trajectory,
    TrajectoryWriter,
    Turn,
    checksum,
    read_trajectories,
    signature,
)
from agentgym.envs.diagnostics.agents import RandomAgent
from agentgym.envs.example import GuessNumberEnv
from agentgym.running.replay import replay_file
from agentgym.running.runner import run, run_to_file

CHAIN = "agentgym/Chain-v0"
KEY = "operator secret"


class Sampler(RandomAgent):
    """A sampling agent whose draws replay cannot rerun (like an LLM sampling at a temperature): the episode's seed
    is mixed with the sampler's own ``salt``, so two runs of one plan sample differently."""

    name = "sampler"

    def __init__(self, salt: int) -> None:
        super().__init__()
        self.salt = salt

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=[self.salt, seed or 0])


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def replayed(path: Path, lines: list[str]) -> list:
    path.write_text("".join(lines), encoding="utf-8")
    return list(replay_file(path, key=KEY.encode()))


def refused(results: list) -> bool:
    return not results or not all(r.ok for r in results)


@pytest.fixture
def key(monkeypatch) -> bytes:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY.encode()


def signed_run(path: Path, salt: int, episodes: int) -> list:
    """A signed run of ``episodes`` Chain episodes by ``Sampler(salt)`` (the caller set the key); its records."""
    return run(CHAIN, Sampler(salt), episodes, seed=5, out=path, progress=False)


# --- the attacks ------------------------------------------------------------------------------------------------


def test_the_better_record_at_each_position_of_two_signed_runs_is_refused(tmp_path, key, capsys):
    """The issue's splice: two signed runs of one plan by a sampling agent; the better record at each position
    gives more successes than either run had, and replay with the key refuses the file, naming its first bad
    record."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    runs = [signed_run(a, 1, 40), signed_run(b, 2, 40)]
    successes = [sum(t.success for t in trajs) for trajs in runs]
    assert [(r.ok, r.unverified) for r in replay_file(a, key=key)] == [(True, None)] * 40  # each run is vouched for
    lines = [lines_of(a), lines_of(b)]
    picked = [lines[0][0]]
    for i in range(40):
        won = [runs[0][i].success, runs[1][i].success]
        picked.append(lines[1][i + 1] if won[1] > won[0] else lines[0][i + 1])
    spliced = tmp_path / "spliced.jsonl"
    spliced.write_text("".join(picked), encoding="utf-8")
    assert sum(t.success for t in read_trajectories(spliced)) > max(successes)  # what the forger gains
    results = list(replay_file(spliced, key=key))
    first = next(r for r in results if not r.ok)
    line = picked.index(next(p for p in picked if p not in lines[0])) + 1
    spliced_message = "the record is signed for another run than the one of the header at line 1 (their nonces differ"
    assert first.divergence.startswith(f"line {line}: {spliced_message}: records of two runs spliced together)")
    assert main(["replay", str(spliced)]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGED: line {line}: the record is signed for another run" in out
    assert "0 diverged" not in out


def test_a_signed_run_reordered_is_refused_at_the_first_moved_record(tmp_path, key):
    path = tmp_path / "t.jsonl"
    signed_run(path, 1, 8)
    lines = lines_of(path)
    lines[3], lines[6] = lines[6], lines[3]  # episodes 2 and 5 (lines 4 and 7) swapped
    first = next(r for r in replayed(path, lines) if not r.ok)
    reordered = "its signature names another record before it: records reordered, or removed between them"
    assert first.divergence.startswith(f"line 4: the record does not follow line 3 of its run ({reordered})")


def test_a_signed_run_with_a_record_dropped_from_the_middle_is_refused(tmp_path, key):
    path = tmp_path / "t.jsonl"
    signed_run(path, 1, 8)
    lines = lines_of(path)
    del lines[4]  # episode 3
    results = replayed(path, lines)
    first = next(r for r in results if not r.ok)
    assert first.divergence.startswith("line 5: the record does not follow line 4 of its run")


def test_two_continuations_of_one_killed_signed_run_cannot_be_spliced(tmp_path, key):
    """A killed run copied and continued twice (the same nonce): each copy replays, a mix of them does not."""
    whole = tmp_path / "whole.jsonl"
    run_to_file(CHAIN, Sampler(1), 10, whole, seed=5, progress=False)
    copies = [tmp_path / "c1.jsonl", tmp_path / "c2.jsonl"]
    for salt, copy in enumerate(copies, 1):
        copy.write_text("".join(lines_of(whole)[:4]), encoding="utf-8")  # killed after episode 2
        run_to_file(CHAIN, Sampler(salt), 10, copy, seed=5, resume=True, progress=False)
        assert [(r.ok, r.unverified) for r in replay_file(copy, key=key)] == [(True, None)] * 10
    one, two = lines_of(copies[0]), lines_of(copies[1])
    assert one[:4] == two[:4] and one[6:] != two[6:]
    results = replayed(tmp_path / "mixed.jsonl", one[:6] + two[6:])
    assert refused(results)
    assert next(r for r in results if not r.ok).divergence.startswith("line 7: the record does not follow line 6")


def test_a_signed_run_cut_mid_write_reads_as_before_and_continues_with_its_key_only(tmp_path, monkeypatch, capsys):
    path = tmp_path / "run" / "trajectories.jsonl"
    args = ["run", CHAIN, "--agent", "random", "--episodes", "6", "--out", str(path.parent), "--quiet"]
    monkeypatch.setenv(KEY_ENV, KEY)
    assert main(args) == 0
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]) + lines[4][:60])  # killed in the middle of episode 3's record
    with pytest.warns(UserWarning, match="truncated final record"):
        assert len(list(read_trajectories(path))) == 3
    capsys.readouterr()
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "torn final record" in out and "planned 6 episodes; the file holds 4" in out
    assert "does not follow" not in out and "another run" not in out
    monkeypatch.delenv(KEY_ENV)
    assert main([*args, "--append"]) == 2
    assert "holds a signed run: set $AGENTGYM_TRAJECTORY_KEY" in capsys.readouterr().err
    monkeypatch.setenv(KEY_ENV, "another key")
    assert main([*args, "--append"]) == 2
    assert "line 1 is not signed with this key" in capsys.readouterr().err
    monkeypatch.setenv(KEY_ENV, KEY)
    assert main([*args, "--append"]) == 0
    assert path.read_bytes() == whole  # the same nonce and chain: as if never killed
    capsys.readouterr()
    assert main(["replay", str(path)]) == 0
    assert "replayed 6 episode(s): 6 identical, 0 diverged (signatures checked" in capsys.readouterr().out


def test_a_signed_run_extended_with_append_keeps_one_chain(tmp_path, key):
    """An extension header (another episode count) is a link of the run's chain like any record."""
    path, other = tmp_path / "t.jsonl", tmp_path / "other.jsonl"
    for p in (path, other):
        run_to_file(CHAIN, Sampler(1), 4, p, seed=5, progress=False)
        run_to_file(CHAIN, Sampler(1), 8, p, seed=5, resume=True, progress=False)
    assert [(r.ok, r.unverified) for r in replay_file(path, key=key)] == [(True, None)] * 8
    lines = lines_of(path)
    assert json.loads(lines[5])["start"] == 4
    results = replayed(tmp_path / "spliced.jsonl", lines[:5] + lines_of(other)[5:])  # the other's extension
    assert [r.kind for r in results if not r.ok][:1] == ["run"]
    assert "the run header continuing run" in next(r for r in results if not r.ok).divergence


def test_an_unsigned_run_is_not_continued_with_a_key(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    run_to_file(CHAIN, "random", 4, path, progress=False)
    path.write_text("".join(lines_of(path)[:3]), encoding="utf-8")
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(ValueError, match="line 1 is not signed with this key"):
        run_to_file(CHAIN, "random", 4, path, resume=True, progress=False)


def to_format_3(lines: list[str], key: bytes) -> list[str]:
    """The records as agentgym wrote them in format 3 with ``key``: each signed alone."""
    out = []
    for line in lines:
        r = {k: v for k, v in json.loads(line).items() if k not in ("nonce", "prev", "mac", "checksum")}
        r["version"] = 3
        r["mac"] = signature(r, key)
        r["checksum"] = checksum(r)
        out.append(json.dumps(r) + "\n")
    return out


def test_a_format_3_signature_vouches_for_its_record_alone(tmp_path, key):
    """Format-3 signed files read as before (each signature checked), but what a format-3 signature cannot vouch
    for, the run a record came from, leaves the label of an agent replay cannot rerun unverified."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    signed_run(a, 1, 6)
    signed_run(b, 2, 6)
    old = [to_format_3(lines_of(p), key) for p in (a, b)]
    results = replayed(tmp_path / "old.jsonl", old[0])
    assert all(r.ok and "signed in format 3" in r.unverified for r in results)
    spliced = old[0][:3] + old[1][3:]  # what format 3 could not refuse
    assert all(r.ok for r in replayed(tmp_path / "spliced.jsonl", spliced))
    edited = [*old[0][:2], old[0][2].replace('"sampler"', '"gpt-9"'), *old[0][3:]]
    assert not all(r.ok for r in replayed(tmp_path / "edited.jsonl", edited))  # each signature still checked


# --- the class: any splice, permutation or deletion of two runs' records -------------------------------------------


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[list[str], list[str]]:
    """The lines of two signed runs of one plan (4 Chain episodes each) by a sampling agent."""
    folder = tmp_path_factory.mktemp("two")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        signed_run(folder / "a.jsonl", 1, 4)
        signed_run(folder / "b.jsonl", 2, 4)
    return lines_of(folder / "a.jsonl"), lines_of(folder / "b.jsonl")


EDITS = st.lists(
    st.tuples(st.sampled_from(["splice", "swap", "delete", "duplicate", "cut"]), st.integers(0, 9), st.integers(0, 9)),
    max_size=4,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(base=st.sampled_from([0, 1]), edits=EDITS)
@example(base=0, edits=[])
@example(base=1, edits=[("cut", 4, 0)])  # a run cut short at its end: refused as cut short
@example(base=0, edits=[("splice", 2, 2)])
def test_only_one_whole_run_in_order_replays(tmp_path_factory, two_runs, base, edits):
    """Records of two signed runs of one plan, spliced, permuted, duplicated or deleted (a cut at the end
    included), are refused unless they are exactly one run's records in order."""
    lines = list(two_runs[base])
    other = two_runs[1 - base]
    for what, i, j in edits:
        i, j = i % max(len(lines), 1), j % len(other)
        if what == "splice" and lines:
            lines[i] = other[j]
        elif what == "swap" and lines:
            lines[i], lines[j % len(lines)] = lines[j % len(lines)], lines[i]
        elif what == "delete" and len(lines) > 1:
            del lines[i]
        elif what == "duplicate" and lines:
            lines.insert(i, lines[j % len(lines)])
        elif what == "cut":
            del lines[max(i, 1) :]
    results = replayed(tmp_path_factory.mktemp("p") / "t.jsonl", lines)
    assert refused(results) == (lines not in two_runs), (edits, [r.divergence for r in results])


# --- a record too large to write ----------------------------------------------------------------------------------

FLOOD = "test/Flood-v0"


class FloodEnv(GuessNumberEnv):
    """GuessNumber whose task 1 answers every guess with a 6 MiB reply (a tool that prints a huge file): its 8
    turns make a 48 MiB record; the other tasks are ordinary."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.flood = "Higher." + "!" * (6 << 20)

    def _step(self, action: str) -> StepResult:
        if self.task_index != 1:
            return super()._step(action)
        return StepResult([{"role": "user", "content": self.flood}], action_valid=True)


@pytest.fixture
def flood_registered():
    gym.register(FLOOD, entry_point=FloodEnv)
    yield
    del gym.registry[FLOOD]


@pytest.mark.slow
def test_an_episode_too_large_to_write_is_an_error_episode_and_the_run_goes_on(tmp_path, flood_registered, capsys):
    out = tmp_path / "run"
    assert main(["run", FLOOD, "--agent", "bisect", "--episodes", "3", "--out", str(out), "--quiet"]) == 0
    assert "1 episode(s) ended with an error" in capsys.readouterr().err
    path = out / "trajectories.jsonl"
    trajs = list(read_trajectories(path))
    assert [t.index for t in trajs] == [0, 1, 2] and [t.success for t in trajs] == [True, False, True]
    big = trajs[1]
    assert big.turns == [] and big.initial_observation == [] and big.task_id == trajs[1].task_id
    assert big.error.startswith("record too large: the episode's record is ")
    size = int(big.error.split(" is ")[1].split()[0])
    assert size > 48 << 20 and f"over the {MAX_RECORD_BYTES} allowed" in big.error and "8 turn(s)" in big.error
    assert max(len(line) for line in path.read_bytes().splitlines()) < 1 << 20
    assert json.loads((out / "summary.json").read_text())[0]["error"] == pytest.approx(1 / 3)
    assert main(["replay", str(path)]) == 0
    out_text = capsys.readouterr().out
    assert "replayed 3 episode(s): 2 identical, 1 unverified, 0 diverged" in out_text
    assert "the episode's record was too large to write" in out_text


def test_a_record_too_large_is_refused_without_building_its_text(tmp_path):
    """Memory stays flat: refusing a 40 MiB record (four 10 MiB observations) allocates at most one observation's
    copy, never the record's whole JSON text (which used to be built four times)."""
    traj = Trajectory(env_id="e", seed=0, task_id="t", agent="a", initial_observation=[], reset_info={})
    for k in range(4):
        traj.turns.append(Turn("go", [{"role": "user", "content": str(k) * (10 << 20)}], 0.0, k == 3, False, {}))
    path = tmp_path / "t.jsonl"
    tracemalloc.start()
    try:
        with TrajectoryWriter(path) as writer, pytest.raises(ValueError, match="longer than the"):
            writer.write(traj)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    assert not path.exists()
