"""Every way out of a run gives the pool's worker back and removes the run's temporary directory; text that is not
UTF-8 (a lone surrogate) is an ``error`` result, never an exception; the wait for a worker is not part of the run's
timeout; ``files`` names cannot leave the working directory."""

from __future__ import annotations

import glob
import os
import posixpath
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.tools.sandbox import Limits, PooledSandbox, SubprocessSandbox
from agentgym.tools.sandbox.base import check_files

#: Every code point, lone surrogates included (hypothesis leaves them out of text() by default).
ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=40)
HANG_GUARD = 120.0  # a call that does not come back by then is a hang (the bug this file is about)


@pytest.fixture(scope="module")
def pool():
    box = PooledSandbox(workers=1)
    yield box
    box.close()


@pytest.fixture(scope="module")
def sub():
    return SubprocessSandbox()


def workdirs() -> set[str]:
    """This process's run directories (other processes on the machine may be running sandboxes too)."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"agentgym-sbx-{os.getpid()}-*")))


def call(box, code: str, **kw):
    """``box.run`` in a thread, failing (not hanging) if it does not return within ``HANG_GUARD``."""
    out: list = []

    def target() -> None:
        try:
            out.append(box.run(code, **kw))
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(HANG_GUARD)
    assert out, f"run({code!r}) did not return in {HANG_GUARD} s: the sandbox hangs"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


@pytest.mark.parametrize(
    "kw",
    [
        {"code": "print(1) # \ud800"},
        {"code": "print(input())", "stdin": "\udfff"},
        {"code": "pass", "files": {"a\ud800.txt": "x"}},
        {"code": "pass", "files": {"a.txt": "\ud800"}},
    ],
    ids=["code", "stdin", "file-name", "file-text"],
)
@pytest.mark.parametrize("which", ["pool", "sub"])
def test_a_lone_surrogate_is_an_error_result_and_the_next_call_works(which, kw, request):
    box = request.getfixturevalue(which)
    before = workdirs()
    kw = dict(kw)
    r = call(box, kw.pop("code"), **kw)
    assert r.status == "error" and "not valid UTF-8" in r.stderr and r.exit_code is None, r
    assert call(box, "print(1)").stdout == "1\n"  # the pool's only worker came back
    assert workdirs() <= before


@pytest.mark.parametrize("which", ["pool", "sub"])
def test_a_failure_writing_the_work_dir_gives_the_worker_back(which, request):
    """A file name the file system refuses (a 300-byte component): the run fails inside, after the worker was
    taken; the old pool never gave it back and every later call hung."""
    box = request.getfixturevalue(which)
    before = workdirs()
    r = call(box, "pass", files={"x" * 300: "a"})
    assert r.status == "error" and "name too long" in r.stderr.lower(), r
    assert call(box, "print(2)").stdout == "2\n"
    assert workdirs() <= before


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(code=ANY_TEXT, stdin=ANY_TEXT)
def test_any_text_gives_a_result_never_an_exception(pool, code, stdin):
    r = call(pool, code, stdin=stdin, timeout=10.0)
    encodable = all(not 0xD800 <= ord(c) <= 0xDFFF for c in code + stdin)
    assert r.status in ("ok", "error", "timeout", "memory", "killed")
    assert encodable or (r.status == "error" and "not valid UTF-8" in r.stderr)


@pytest.mark.slow
def test_waiting_for_a_worker_is_not_part_of_the_timeout(pool):
    """One worker busy on a 4 s sleep: a second call with a 2 s timeout waits for it, then runs in full."""
    slow: list = []
    t = threading.Thread(target=lambda: slow.append(pool.run("import time\ntime.sleep(4)\nprint('slow')")))
    t.start()
    deadline = time.monotonic() + HANG_GUARD
    while pool._idle.qsize() and time.monotonic() < deadline:  # the slow call has taken the only worker
        time.sleep(0.01)
    r = call(pool, "print(1)", timeout=2.0)
    t.join(HANG_GUARD)
    assert slow and slow[0].stdout == "slow\n"
    assert r.status == "ok" and r.stdout == "1\n", r
    assert r.wall_time < 2.0 + 1.0  # its time counts from when it got the worker


@pytest.mark.slow
def test_the_wait_for_a_worker_is_bounded():
    with PooledSandbox(workers=1, worker_wait=0.5) as box:
        t = threading.Thread(target=lambda: box.run("import time\ntime.sleep(3)"))
        t.start()
        deadline = time.monotonic() + HANG_GUARD
        while box._idle.qsize() and time.monotonic() < deadline:
            time.sleep(0.01)
        r = call(box, "print(1)")
        t.join(HANG_GUARD)
        assert r.status == "error" and "no free worker in 0.5 s" in r.stderr, r
        assert call(box, "print(1)").stdout == "1\n"


def test_code_and_files_over_the_disk_limit_are_refused():
    """tmpfs counts whole pages: main.py and each file take at least one."""
    page = os.sysconf("SC_PAGE_SIZE")
    with PooledSandbox(workers=1, limits=Limits(disk_bytes=3 * page)) as box:
        r = call(box, "pass", files={"a": "x" * (2 * page + 1)})
        assert r.status == "error" and f"over the disk limit of {3 * page}" in r.stderr, r
        r = call(box, "print(len(open('a').read()))", files={"a": "x" * (2 * page)})
        assert r.stdout == f"{2 * page}\n", r
        r = call(box, "open('b', 'w').write('x' * 10)")  # main.py and b: 2 pages of 3
        assert r.status == "ok", r
        r = call(box, "with open('b', 'w') as f:\n    f.write('x')", files={"a": "x" * (2 * page)})  # all 3 taken
        assert r.status == "error" and "No space left on device" in r.stderr, r
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="disk_bytes"):
            Limits(disk_bytes=bad)


@pytest.mark.parametrize(
    "files",
    [
        {"a": "x", "a/b": "y"},
        {"main.py/x": ""},
        {"a/../../b": ""},
        {"./../b": ""},
        {"/abs": ""},
        {"a\0b": ""},
        {"": ""},
        {"a/./b": "", "a/b": ""},
    ],
)
def test_bad_file_names_are_refused_before_anything_runs(files):
    with pytest.raises(ValueError):
        check_files(files, 1 << 20)


@given(st.dictionaries(st.text(alphabet="ab./\\ ", min_size=1, max_size=8), st.just("x"), max_size=4))
def test_accepted_file_names_stay_inside_the_working_directory(files):
    try:
        checked = check_files(files, 1 << 20)
    except ValueError:
        return
    for path in checked:
        full = posixpath.normpath(posixpath.join("/w", path))
        assert full.startswith("/w/") and full != "/w/main.py" and path == posixpath.normpath(path)
    for a in checked:  # no name is another's directory (one of the two could not be written)
        assert not any(b.startswith(a + "/") for b in checked)
