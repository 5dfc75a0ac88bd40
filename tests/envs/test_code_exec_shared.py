"""CodeExec-v0 envs of one process share one pool of fork servers per sandbox configuration (issue 31): counted by
their ``_child.py --serve`` processes in /proc, released by ``close`` or by a dropped env's finalizer, queued for under
load (a clear "no free worker" observation, never an exception), and correct from many threads at once."""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgym.envs.code_exec.env import CodeExecEnv
from agentgym.tools.sandbox import SHARED_WORKERS, PoolKey
from agentgym.tools.sandbox.local import SHARED

KEY = PoolKey()  # the configuration of CodeExecEnv() (namespaces isolation, default limits)
#: A hang guard only (no timing is asserted).
GUARD = 120.0


def call(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


def fork_servers() -> set[int]:
    """Pids of the ``_child.py --serve`` processes whose parent is this process."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/status") as f:
                ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        except (OSError, StopIteration):
            continue
        if ppid == os.getpid() and b"--serve" in argv and any(a.endswith(b"_child.py") for a in argv):
            found.add(int(pid))
    return found


@pytest.fixture(autouse=True)
def no_other_user():
    """Each test starts with no env of this process holding the shared pools it looks at."""
    gc.collect()  # envs other tests dropped release their share
    assert SHARED.users(KEY) == 0, "an env of another test still holds the shared pool"
    assert SHARED.users(PoolKey(namespaces=False)) == 0
    yield
    gc.collect()


def one_call(env: CodeExecEnv, code: str) -> str:
    env.reset(options={"task_index": 0})
    obs, *_ = env.step(call(code))
    return obs[0]["content"]


@pytest.mark.slow
def test_fifty_envs_share_one_pool_and_closing_them_ends_it():
    before = fork_servers()
    envs = [CodeExecEnv(family="numbers") for _ in range(50)]
    try:
        for i, env in enumerate(envs):
            assert one_call(env, f"print({i} * 3)") == f"{i * 3}\n"
        started = fork_servers() - before
        assert 1 <= len(started) <= SHARED_WORKERS, started  # one pool, not one fork server per env
        assert SHARED.users(KEY) == 50
        assert len({id(env.sandbox) for env in envs}) == 1
    finally:
        for env in envs:
            env.close()
    assert SHARED.users(KEY) == 0
    assert not fork_servers() & started  # the last close ended the pool: no process left


@pytest.mark.slow
def test_an_env_dropped_without_close_releases_its_share():
    before = fork_servers()
    kept, dropped = CodeExecEnv(family="numbers"), CodeExecEnv(family="numbers")
    assert one_call(kept, "print(1)") == one_call(dropped, "print(1)") == "1\n"
    assert SHARED.users(KEY) == 2
    del dropped
    gc.collect()
    assert SHARED.users(KEY) == 1
    started = fork_servers() - before
    assert started  # the pool lives on for the env that still holds it
    assert one_call(kept, "print(2)") == "2\n"
    del kept
    gc.collect()
    assert SHARED.users(KEY) == 0 and not fork_servers() & started


@pytest.mark.slow
def test_envs_with_different_timeouts_share_and_different_isolation_does_not():
    short, long = CodeExecEnv(family="numbers", timeout=1.0), CodeExecEnv(family="numbers", timeout=8.0)
    bare = CodeExecEnv(family="numbers", isolation="none")
    try:
        assert one_call(short, "print(1)") == one_call(long, "print(1)") == one_call(bare, "print(1)") == "1\n"
        assert short.sandbox is long.sandbox  # the timeout is per run: not part of the pool's key
        assert bare.sandbox is not short.sandbox
        assert SHARED.users(KEY) == 2 and SHARED.users(PoolKey(namespaces=False)) == 1
        # each run keeps its own env's time limit on the shared pool
        assert one_call(short, "while True: pass").endswith("ran past its 1 s time limit]")
        assert one_call(long, "import time\ntime.sleep(1.5)\nprint('done')") == "done\n"
    finally:
        for env in (short, long, bare):
            env.close()
    assert SHARED.users(KEY) == SHARED.users(PoolKey(namespaces=False)) == 0


@pytest.mark.slow
def test_concurrent_steps_from_8_threads_over_16_envs_are_all_correct():
    envs = [CodeExecEnv(family="numbers", max_turns=20) for _ in range(16)]

    def play(i: int) -> list[str]:
        env = envs[i]
        env.reset(options={"task_index": i})
        return [env.step(call(f"print({i} * 1000 + {k})"))[0][0]["content"] for k in range(6)]

    try:
        with ThreadPoolExecutor(8) as pool:
            outputs = list(pool.map(play, range(16)))
        assert outputs == [[f"{i * 1000 + k}\n" for k in range(6)] for i in range(16)]
        assert SHARED.users(KEY) == 16
    finally:
        for env in envs:
            env.close()
    assert SHARED.users(KEY) == 0


@pytest.mark.slow
def test_a_busy_pool_is_a_no_free_worker_observation_not_an_exception():
    """Every worker busy past the pool's wait: the call comes back as a tool message saying so, the episode goes on,
    and the next call, once a worker is free, runs."""
    busy = [CodeExecEnv(family="numbers", timeout=10.0) for _ in range(SHARED_WORKERS)]
    waiting = CodeExecEnv(family="numbers")
    pool = waiting.sandbox
    pool.worker_wait = 0.2  # this test's pool only: the wait the env server gets is SHARED_WORKER_WAIT
    threads = [threading.Thread(target=one_call, args=(env, "import time\ntime.sleep(3)")) for env in busy]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + GUARD
        while not pool._idle.empty():  # every worker taken
            assert time.monotonic() < deadline, "hang guard"
            time.sleep(0.01)
        waiting.reset(options={"task_index": 0})
        obs, _, terminated, _, info = waiting.step(call("print(1)"))
        text = obs[0]["content"]
        assert f"sandbox: no free worker in 0.2 s (all {SHARED_WORKERS} busy)" in text, text
        assert text.endswith("[the sandbox failed to run it]") and not terminated and info["run_statuses"] == ["error"]
        for t in threads:
            t.join(GUARD)
        obs, *_ = waiting.step(call("print(1)"))
        assert obs[0]["content"] == "1\n"
    finally:
        for t in threads:
            t.join(GUARD)
        for env in [*busy, waiting]:
            env.close()


@pytest.mark.slow
def test_a_forked_child_starts_a_pool_of_its_own():
    """The parent's fork servers are not the child's: a child's env starts its own pool, and the parent's is left
    alone (the child reports by its exit status)."""
    parent = CodeExecEnv(family="numbers")
    try:
        assert one_call(parent, "print(1)") == "1\n"
        inherited = parent.sandbox
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                child = CodeExecEnv(family="numbers")
                ok = one_call(child, "print(2)") == "2\n" and child.sandbox is not inherited
                ok = ok and SHARED.users(KEY) == 1
                child.close()
                ok = ok and SHARED.users(KEY) == 0
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert SHARED.users(KEY) == 1 and parent.sandbox is inherited
        assert one_call(parent, "print(3)") == "3\n"
    finally:
        parent.close()
