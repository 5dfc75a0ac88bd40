"""Adversarial tests of the local sandboxes (SubprocessSandbox, PooledSandbox) and DockerSandbox where an engine
answers. Every adversarial run is followed by a check that nothing it started survives: no process carrying the
run's marker in its command line and (as root) no live process of a run uid (each run gets one of its own)."""

from __future__ import annotations

import glob
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentgym.tools.sandbox import (
    WORKDIR,
    Capabilities,
    DockerSandbox,
    Limits,
    PooledSandbox,
    RunResult,
    Sandbox,
    SubprocessSandbox,
)
from agentgym.tools.sandbox.local import RUN_UIDS, _remove_cgroup, _spec, host_setup

LIMITS = Limits(memory_bytes=512 << 20, processes=64, output_bytes=1 << 20)
#: "-nons": the same back-ends told not to use namespaces, as on a machine whose kernel refuses them (containment
#: then rests on the run's own uid when root, else on the process group).
BACKENDS = ["subprocess", "pooled", "subprocess-nons", "pooled-nons"]


@pytest.fixture(scope="module")
def boxes():
    made = {
        "subprocess": SubprocessSandbox(LIMITS),
        "pooled": PooledSandbox(workers=2, limits=LIMITS),
        "subprocess-nons": SubprocessSandbox(LIMITS, namespaces=False),
        "pooled-nons": PooledSandbox(workers=1, limits=LIMITS, namespaces=False),
    }
    yield made
    for box in made.values():
        box.close()


@pytest.fixture(params=BACKENDS)
def box(request, boxes) -> Sandbox:
    return boxes[request.param]


@pytest.fixture(scope="module")
def caps(boxes) -> dict[int, Capabilities]:
    """Capabilities by ``id`` of the sandbox."""
    return {id(b): b.capabilities() for b in boxes.values()}


def processes_matching(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def run_uid_processes() -> list[int]:
    """Live (not zombie) processes running as a sandbox run's uid that this process started, or that no process owns
    any more (reparented to init or to one of our ancestors). The runs of other processes on the machine (a parallel
    test worker, another checkout's tests) are theirs to check: their first ancestor outside a run uid is not ours."""
    procs: dict[int, tuple[int, int]] = {}  # pid -> (uid, parent pid), live processes only
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines())
            except (OSError, ValueError):
                continue
            if not status.get("State", "").strip().startswith("Z"):
                procs[int(entry)] = (int(status.get("Uid", "0").split()[0]), int(status.get("PPid", "0")))

    def chain(pid: int) -> list[int]:
        seen = [pid]
        while (pid := procs.get(pid, (0, 0))[1]) > 0 and pid not in seen:
            seen.append(pid)
        return seen

    ours = set(chain(os.getpid()))  # this process and its ancestors
    found = []
    for pid, (uid, _) in procs.items():
        if RUN_UIDS[0] <= uid < RUN_UIDS[1]:
            up = chain(pid)
            owner = next((p for p in up if not RUN_UIDS[0] <= procs.get(p, (0, 0))[0] < RUN_UIDS[1]), 1)
            if owner in ours or os.getpid() in up or owner == 1:
                found.append(pid)
    return found


def assert_nothing_survives(marker: str = "") -> None:
    deadline = time.monotonic() + 30.0  # a hang guard: a killed run's processes may take a while to go when busy
    while True:
        left = (processes_matching(marker) if marker else []) + (run_uid_processes() if os.geteuid() == 0 else [])
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes survived the call: {left}"


def sleeper(marker: str, seconds: int = 60) -> str:
    """Code that execs ``sleep`` with ``marker`` as its argv[0] (so the host can find it)."""
    return f'os.execv("/bin/sleep", ["{marker}", "{seconds}"])'


# --- plain behaviour ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ok_stdin_and_error(box):
    r = box.run("import sys\nprint(sys.stdin.read()[::-1])", stdin="abc")
    assert isinstance(r, RunResult) and r.status == "ok" and r.stdout == "cba\n" and r.exit_code == 0
    r = box.run("raise ValueError('boom')")
    assert r.status == "error" and r.exit_code == 1 and "ValueError: boom" in r.stderr
    r = box.run("import sys\nsys.exit(3)")
    assert r.status == "error" and r.exit_code == 3
    r = box.run("def f(:\n")
    assert r.status == "error" and "SyntaxError" in r.stderr
    assert_nothing_survives()


@pytest.mark.slow
def test_capabilities_are_detected(box, caps):
    c = caps[id(box)]
    assert c.backend == box.name and c.rlimits["RLIMIT_NPROC"] == LIMITS.processes
    assert c.rlimits["RLIMIT_AS"] == LIMITS.memory_bytes and c.rlimits["RLIMIT_NOFILE"] == LIMITS.open_files
    assert c.process_containment in ("pid-namespace", "run-uid", "process-group")
    if not box.namespaces:
        assert c.process_containment != "pid-namespace" and not c.network_isolated and not c.private_tmp
    if os.geteuid() == 0:
        assert c.unprivileged


# --- time --------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_infinite_loop_times_out(box):
    t = time.monotonic()
    r = box.run("while True:\n    pass", timeout=1.5)
    assert r.status == "timeout" and time.monotonic() - t < 1.5 + 30  # killed at its timeout (a hang guard)
    assert_nothing_survives()


@pytest.mark.slow
def test_sleep_past_timeout(box):
    r = box.run("import time\nprint('start', flush=True)\ntime.sleep(60)", timeout=1.0)
    assert r.status == "timeout" and r.stdout == "start\n" and r.wall_time < 1.0 + 30  # not the 60 s sleep
    assert_nothing_survives()


def test_each_run_gets_a_cgroup_of_its_own_that_is_removed_after_it():
    """A run's cgroup has a fresh name (a group a killed supervisor left behind once made a later run with the same
    pid fail to isolate: "File exists"), and the caller removes it once the supervisor has exited."""
    host = host_setup()
    if host["cgroup"] is None:
        pytest.skip("no cgroup for the runs here (not root, or /sys/fs/cgroup read-only)")
    specs = [_spec("/tmp", None, LIMITS, 1.0, True, host) for _ in range(3)]
    names = {s["cgroup"]["name"] for s in specs}
    assert len(names) == 3 and all(n.startswith("agentgym-run-") for n in names)
    left = specs[0]
    for parent in left["cgroup"]["parents"]:  # what a killed supervisor leaves: its empty group
        os.mkdir(os.path.join(parent, left["cgroup"]["name"]))
    _remove_cgroup(left)
    assert not any(os.path.exists(os.path.join(p, left["cgroup"]["name"])) for p in left["cgroup"]["parents"])
    _remove_cgroup(specs[1])  # never made: nothing to do, nothing raised


# --- processes ---------------------------------------------------------------------------------------------------


def test_fork_bomb_is_contained(box):
    r = box.run("import os\nwhile True:\n    os.fork()", timeout=8.0)
    assert r.status in ("killed", "error", "timeout")
    assert_nothing_survives()
    assert box.run("print('healthy')").stdout == "healthy\n"


def test_background_child_dies_with_the_call(box):
    marker = f"agentgym-bg-{uuid.uuid4().hex}"
    code = f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        {sleeper(marker)}\n"
    code += "    os._exit(0)\nimport time\ntime.sleep(0.3)\nprint('parent done')\n"
    r = box.run(code, timeout=10.0)
    assert r.status == "ok" and r.stdout == "parent done\n"
    assert_nothing_survives(marker)


def test_killing_everything_it_can_only_kills_itself(box):
    r = box.run("import os, signal\nos.kill(-1, signal.SIGKILL)\nos.kill(0, signal.SIGKILL)\nprint('alive')")
    assert r.status in ("killed", "error")
    assert box.run("print(2)").stdout == "2\n"
    assert_nothing_survives()


# --- memory, output, files, environment --------------------------------------------------------------------------


def test_ten_gigabytes_is_memory(box):
    r = box.run("b = bytearray(10 * 1024**3)\nprint(len(b))", timeout=10.0)
    assert r.status == "memory" and r.stdout == ""
    assert_nothing_survives()


def test_100mb_of_stdout_is_capped(box):
    code = "import sys\nchunk = 'x' * 65536\nfor _ in range(1600):\n    sys.stdout.write(chunk)\nprint('end')"
    r = box.run(code, timeout=20.0)
    assert r.truncated and r.status == "killed" and len(r.stdout) == LIMITS.output_bytes and "end" not in r.stdout
    assert_nothing_survives()


def test_writing_outside_its_directory_fails(box, caps, tmp_path):
    target = tmp_path / "escaped.txt"
    shared = ["/tmp/agentgym-escape.txt", "/var/tmp/agentgym-escape.txt", "/dev/shm/agentgym-escape"]
    if not caps[id(box)].private_tmp:  # world-writable and not masked: only the others are checked
        shared = []
    names = [
        str(target),
        *shared,
        "/etc/agentgym-escape",
        str(Path(__file__).with_name("agentgym-escape.txt")),
        "../agentgym-escape.txt",
    ]
    code = (
        f"import os\nnames = {names!r}\nopen('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())\n"
        "for n in names:\n    try:\n        open(n, 'w').write('x')\n        print('WROTE', n)\n"
        "    except OSError as e:\n        print('denied', type(e).__name__)\n"
    )
    r = box.run(code)
    assert r.status == "ok" and r.stdout.startswith("ok\n") and "WROTE" not in r.stdout, r.stdout
    for n in names[:-1]:
        assert not Path(n).exists()
    assert_nothing_survives()


def test_environment_is_empty(box, monkeypatch):
    monkeypatch.setenv("AGENTGYM_SECRET", "hunter2")
    code = (
        "import os\nprint(sorted(os.environ.items()))\nfor p in os.listdir('/proc'):\n    try:\n"
        "        print(open(f'/proc/{p}/environ', 'rb').read())\n    except OSError:\n        pass\n"
    )
    r = box.run(code)
    assert r.status == "ok" and "hunter2" not in r.stdout and "AGENTGYM_SECRET" not in r.stdout
    assert r.stdout.splitlines()[0] == "[('PATH', '/usr/bin:/bin')]"


# --- network -----------------------------------------------------------------------------------------------------


def test_no_network(box, caps):
    if not caps[id(box)].network_isolated:
        why = "no network isolation on this machine (it would send real traffic)"
        pytest.skip(f"{type(box).__name__}(namespaces={box.namespaces}): {why}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    code = (
        "import socket, time\n"
        f"for addr in [('127.0.0.1', {port}), ('10.255.255.1', 9)]:\n"
        "    s = socket.socket()\n    s.settimeout(20)\n    t = time.monotonic()\n"
        "    try:\n        s.connect(addr)\n        print('CONNECTED', addr)\n"
        "    except OSError as e:\n        print('failed', round(time.monotonic() - t, 2), e.errno)\n"
    )
    try:
        r = box.run(code, timeout=60.0)
        assert r.status == "ok" and "CONNECTED" not in r.stdout, r.stdout
        for line in r.stdout.splitlines():
            assert float(line.split()[1]) < 10  # refused at once (no route), not a 20 s connect timeout
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


# --- no state between calls --------------------------------------------------------------------------------------


def workdirs() -> set[str]:
    """This process's run directories (other processes on the machine may be running sandboxes too)."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"agentgym-sbx-{os.getpid()}-*")))


def test_no_state_leaks_between_calls(box):
    marker = f"agentgym-leak-{uuid.uuid4().hex}"
    before = workdirs()
    first = (
        "import builtins, json, os\nopen('state.txt', 'w').write('x')\n"
        "builtins.LEAK = json.LEAK = 1\nprint(os.getcwd())\n"
        f"if os.fork() == 0:\n    os.setsid()\n    {sleeper(marker)}\n"
    )
    r1 = box.run(first)
    assert r1.status == "ok"
    second = (
        "import builtins, json, os\n"
        f"print(os.path.exists('state.txt'), os.path.exists({r1.stdout.strip()!r} + '/state.txt'),"
        " hasattr(builtins, 'LEAK'), hasattr(json, 'LEAK'))\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [os.getpid()] or 'ns-less')\n"
    )
    r2 = box.run(second)
    assert r2.status == "ok" and r2.stdout.splitlines()[0] == "False False False False", r2.stdout
    assert_nothing_survives(marker)
    assert workdirs() <= before  # the temporary directories are removed


@pytest.mark.slow
def test_files_fixed_workdir_and_tracebacks_of_the_code_only(box):
    code = "import os\nprint(os.getcwd(), sorted(os.listdir()), open('data/a.csv').read(), input())\n1 / 0\n"
    runs = [box.run(code, stdin="hi", files={"data/a.csv": "x,y", "b.bin": b"\x00"}) for _ in range(2)]
    cwd, listing = runs[0].stdout.split(" [")[0], runs[0].stdout.split(" [")[1]
    assert listing.startswith("'b.bin', 'data', 'main.py'] x,y hi")
    if box.capabilities().private_tmp:  # a mount namespace: every run sees the same working directory
        assert cwd == WORKDIR and runs[0].stdout == runs[1].stdout
    assert runs[0].status == "error" and runs[0].stderr.startswith(
        'Traceback (most recent call last):\n  File "main.py", line 3, in <module>\n'
    )
    assert "_child" not in runs[0].stderr
    for bad in ({"../x": ""}, {"/etc/x": ""}, {"main.py": ""}, {"a": 1}, {"big": "x" * (box.limits.file_bytes + 1)}):
        with pytest.raises(ValueError):
            box.run("pass", files=bad)


def test_pool_runs_concurrently_and_isolated(boxes):
    pool = boxes["pooled"]
    results: list[RunResult] = []

    def call(i: int) -> None:
        results.append(pool.run(f"import time\ntime.sleep(0.5)\nprint({i})", timeout=15.0))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(r.stdout for r in results) == ["0\n", "1\n", "2\n", "3\n"]
    assert time.monotonic() - t < 0.5 * 4 + 5  # two at a time


def test_pool_serves_calls_from_its_warm_servers(boxes):
    """Calls fork from the pool's warm servers, with no interpreter start-up per call: ten calls later the pool
    holds the same server processes, all alive, and started no other. (What that buys in latency is measured by
    bench/bench_code_exec_sessions.py, not asserted here: a loaded machine would fail a clock.)"""
    pool = boxes["pooled"]
    servers = [(server, server.proc.pid) for server in pool._all]
    for _ in range(10):
        assert pool.run("print(1)").stdout == "1\n"
    assert [(server, server.proc.pid) for server in pool._all] == servers
    assert all(server.proc.poll() is None for server, _ in servers)


# --- docker ------------------------------------------------------------------------------------------------------

DOCKER_IMAGE = os.environ.get("AGENTGYM_DOCKER_IMAGE")
DOCKER_OK, DOCKER_WHY = (
    DockerSandbox.available(DOCKER_IMAGE)
    if DOCKER_IMAGE
    else (False, "AGENTGYM_DOCKER_IMAGE is not set (`make sandbox-image` builds the image; .ci/run sets it)")
)


@pytest.mark.slow
@pytest.mark.skipif(not DOCKER_OK, reason=f"DockerSandbox not tested: {DOCKER_WHY}")
def test_docker_sandbox():
    with DockerSandbox(limits=LIMITS) as d:
        assert d.run("print(input() * 2)", stdin="ab").stdout == "abab\n"
        assert d.run("while True: pass", timeout=3).status == "timeout"
        assert d.run("b = bytearray(10 * 1024**3)").status == "memory"
        assert d.run("raise ValueError").status == "error"
        assert d.capabilities().network_isolated


@pytest.mark.slow
@pytest.mark.skipif(not DOCKER_OK, reason=f"DockerSandbox not tested: {DOCKER_WHY}")
def test_docker_output_is_capped_while_the_container_runs():
    """A container that writes without end is killed at the output cap (``killed``, cut), not left to write until
    its time limit into the engine's log on the host's disk."""
    limits = Limits(output_bytes=1 << 16)
    with DockerSandbox(limits=limits) as d:
        r = d.run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout=120)
        assert r.status == "killed" and r.truncated and r.stdout == "x" * (1 << 16), (r.status, len(r.stdout))
        r = d.run("import sys\nwhile True:\n    sys.stderr.write('y' * 65536)", timeout=120)
        assert r.status == "killed" and r.truncated and len(r.stderr) == 1 << 16


def closed_ancestor(path: str) -> str | None:
    """The top-most directory on ``path`` that others cannot traverse (as ``/root`` holding a pyenv Python)."""
    parts = os.path.abspath(path).split("/")[1:]
    for i in range(1, len(parts)):
        d = "/" + "/".join(parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return d
    return None


def test_standard_library_imports_lazily(box):
    closed = closed_ancestor(sys.base_prefix)
    if not box.namespaces and closed and os.geteuid() == 0:
        pytest.skip(f"without a mount namespace the run uid cannot read the interpreter under {closed}")
    r = box.run("import decimal, email.mime.text, subprocess\nprint(subprocess.run(['true']).returncode)")
    assert r.status == "ok" and r.stdout == "0\n", r.stderr
    assert_nothing_survives()
