"""Local back-ends: ``SubprocessSandbox`` (a fresh interpreter per call) and ``PooledSandbox`` (fork servers: a
pre-imported interpreter forks a fresh isolated process per call, no start-up cost).

Both run the code through ``_child.py``: a supervisor enters new mount, network and PID namespaces (``unshare(2)``,
what util-linux's ``unshare`` does; where the kernel refuses, the run goes on without them and ``capabilities()``
says so) and forks the code's process, PID 1 of its namespace, which mounts a fresh /proc, masks /tmp, /var/tmp and
/dev/shm with empty read-only tmpfs (its own temporary directory bound back in), drops to a uid of the run's own
when run as root (RLIMIT_NPROC does not apply to root; a uid per run also keeps one run's process count from
another's), sets rlimits, empties the environment and runs the code. When PID 1 ends, the kernel kills everything it
started, ``setsid`` or not; a run killed for its wall time or output takes its whole namespace down the same way.
Without namespaces (``namespaces=False``, or a kernel that refuses them), there is no network or /tmp isolation, and
leftover processes are killed by the run's uid (as root) or by process group only (a ``setsid`` child escapes).

>>> with SubprocessSandbox() as box:  # doctest: +SKIP
...     box.run("print(input() * 2)", stdin="ab").stdout
'abab\\n'
"""

from __future__ import annotations

import json
import math
import os
import queue
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from .base import (
    DEFAULT_TIMEOUT,
    PROBE,
    WORKDIR,
    Capabilities,
    Files,
    Limits,
    RunResult,
    Sandbox,
    check_files,
    classify,
    decode_output,
)

CHILD = str(Path(__file__).with_name("_child.py"))
#: The only environment variable the sandboxed interpreters get.
MIN_ENV = {"PATH": "/usr/bin:/bin"}
#: Seconds a killed run may take to be reaped before the sandbox gives up waiting (it never blocks longer).
REAP_GRACE = 5.0
#: Run uids (as root, each run gets a random one of its own from this range, and the same gid).
RUN_UIDS = (1 << 20, 1 << 30)


def _run_uid() -> int | None:
    """A uid of its own for one run, when running as root (None otherwise): RLIMIT_NPROC then counts that run's
    processes only, and without a PID namespace its leftovers are found and killed by uid."""
    return RUN_UIDS[0] + secrets.randbelow(RUN_UIDS[1] - RUN_UIDS[0]) if os.geteuid() == 0 else None


def _spec(workdir: str, uid: int | None, limits: Limits, timeout: float, namespaces: bool) -> dict:
    rlimits = {
        "RLIMIT_CPU": math.ceil(timeout) + 1,
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    return {"workdir": workdir, "fixed_workdir": WORKDIR, "uid": uid, "limits": rlimits, "namespaces": namespaces}


def _workdir(code: str, stdin: str, uid: int | None, files: dict[str, bytes]) -> tuple[str, int]:
    """A fresh temporary directory holding ``main.py`` and ``files`` (owned by ``uid`` if given; its parent is a
    directory of our own, so ``..`` is not a shared /tmp), and an fd reading ``stdin``. Remove with
    ``_remove(workdir)``."""
    base = tempfile.mkdtemp(prefix="agentgym-sbx-")  # 0o700, ours: its parent (a shared /tmp) is out of reach
    os.chmod(base, 0o711)
    workdir = os.path.join(base, "work")
    os.mkdir(workdir, 0o700)
    Path(workdir, "main.py").write_text(code, encoding="utf-8")
    for name, content in files.items():
        path = Path(workdir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    if uid is not None:
        for root, dirs, names in os.walk(workdir):
            for entry in [root] + [os.path.join(root, n) for n in [*dirs, *names]]:
                os.lchown(entry, uid, uid)
    with tempfile.TemporaryFile() as f:  # unlinked at once; the fd keeps it
        f.write(stdin.encode("utf-8", "replace"))
        f.seek(0)
        return workdir, os.dup(f.fileno())


def _remove(workdir: str) -> None:
    shutil.rmtree(os.path.dirname(workdir), ignore_errors=True)


def _collect(fds: list[int], deadline: float, cap: int, kill: Callable[[], None]) -> tuple[list[bytes], bool, bool]:
    """Read ``fds`` incrementally until EOF on all; past ``deadline`` or ``cap + 1`` bytes on one, ``kill`` and stop.
    Returns the bytes read per fd, whether it timed out, whether it overflowed. Closes ``fds``."""
    bufs = {fd: bytearray() for fd in fds}
    open_fds = list(fds)
    timed_out = overflow = False
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(open_fds, [], [], left)
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    open_fds.remove(fd)
                    continue
                bufs[fd] += data
                if len(bufs[fd]) > cap:
                    overflow = True
            if overflow:
                break
        if timed_out or overflow:
            kill()
    finally:
        for fd in fds:
            os.close(fd)
    return [bytes(bufs[fd]) for fd in fds], timed_out, overflow


def _result(
    outs: list[bytes], exit_code: int | None, timed_out: bool, overflow: bool, cap: int, start: float
) -> RunResult:
    stdout, cut_out = decode_output(outs[0], cap)
    stderr, cut_err = decode_output(outs[1], cap)
    return RunResult(
        status=classify(exit_code, stderr, timed_out=timed_out, overflow=overflow),
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        wall_time=time.monotonic() - start,
        truncated=cut_out or cut_err,
    )


def _capabilities(box: Sandbox, backend: str) -> Capabilities:
    """Run ``PROBE`` in ``box`` and read what it saw."""
    probe_file = Path("/tmp/.agentgym-probe")
    existed = probe_file.exists()
    r = box.run(PROBE, timeout=30.0)
    leaked = not existed and probe_file.exists()  # /tmp is the host's: the probe's file got through
    if leaked:
        probe_file.unlink()
    try:
        seen = json.loads(r.stdout)
    except ValueError:
        return Capabilities(
            backend, False, "none", False, False, notes=(f"probe failed: {r.status} {r.stderr[-300:]}",)
        )
    ifaces = seen["ifaces"]
    pidns = seen["pid"] == 1
    return Capabilities(
        backend=backend,
        network_isolated=set(ifaces) <= {"lo"} and not _loopback_up(box),
        process_containment="pid-namespace" if pidns else "run-uid" if seen["uid"] >= RUN_UIDS[0] else "process-group",
        private_tmp=not seen["tmp_writable"] and not leaked,
        unprivileged=seen["uid"] != 0,
        rlimits=seen["rlimits"],
    )


def _loopback_up(box: Sandbox) -> bool:
    """Whether a loopback connection from the sandbox gets anywhere other than 'network unreachable' at once."""
    code = (
        "import errno, socket\ns = socket.socket()\ns.settimeout(2)\n"
        "try:\n    s.connect(('127.0.0.1', 9))\nexcept OSError as e:\n    print(e.errno == errno.ENETUNREACH)\n"
        "else:\n    print(False)\n"
    )
    return box.run(code, timeout=10.0).stdout.strip() != "True"


class SubprocessSandbox(Sandbox):
    """A fresh ``python -I`` per call (~40 ms of start-up), isolated as the module says."""

    name = "subprocess"

    def __init__(self, limits: Limits | None = None, python: str = sys.executable, namespaces: bool = True) -> None:
        self.limits = limits or Limits()
        self.python = python
        self.namespaces = namespaces

    def run(
        self, code: str, *, stdin: str = "", timeout: float = DEFAULT_TIMEOUT, files: Files | None = None
    ) -> RunResult:
        checked = check_files(files, self.limits.file_bytes)
        start = time.monotonic()
        uid = _run_uid()
        workdir, stdin_fd = _workdir(code, stdin, uid, checked)
        spec = json.dumps(_spec(workdir, uid, self.limits, timeout, self.namespaces))
        try:
            proc = subprocess.Popen(
                [self.python, "-I", CHILD, "--run", spec],
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=MIN_ENV,
                cwd=workdir,
                start_new_session=True,
            )
        except OSError as e:
            _remove(workdir)
            return RunResult("error", "", f"sandbox: cannot start: {e}", None, time.monotonic() - start)
        finally:
            os.close(stdin_fd)

        def kill() -> None:  # the supervisor kills the code (its namespace goes with it) and reaps it
            proc.send_signal(signal.SIGTERM)

        exit_code: int | None = None
        try:
            fds = [os.dup(proc.stdout.fileno()), os.dup(proc.stderr.fileno())]
            proc.stdout.close()
            proc.stderr.close()
            outs, timed_out, overflow = _collect(fds, start + timeout, self.limits.output_bytes, kill)
            exit_code = proc.wait(timeout=REAP_GRACE)
        finally:
            if proc.returncode is None:  # not reaped: the group id is still ours to kill
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            _remove(workdir)
        return _result(outs, exit_code, timed_out, overflow, self.limits.output_bytes, start)

    def capabilities(self) -> Capabilities:
        return _capabilities(self, self.name)


class _ForkServer:
    """One pre-started interpreter running ``_child.serve`` on a SOCK_SEQPACKET socket."""

    def __init__(self, python: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.proc = subprocess.Popen(
            [python, "-I", CHILD, "--serve", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=MIN_ENV,
            pass_fds=[theirs.fileno()],
            start_new_session=True,
        )
        theirs.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.sock.close()  # the server kills its supervisor (if any) and exits
        try:
            self.proc.wait(timeout=REAP_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class PooledSandbox(Sandbox):
    """``workers`` warm fork servers; each call forks a fresh isolated process from one (no state leaks: its files,
    module variables and child processes all go with it). Thread-safe: up to ``workers`` calls run at once."""

    name = "pooled"

    def __init__(
        self, workers: int = 2, limits: Limits | None = None, python: str = sys.executable, namespaces: bool = True
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.limits = limits or Limits()
        self.python = python
        self.namespaces = namespaces
        self._idle: queue.Queue[_ForkServer] = queue.Queue()
        self._all: list[_ForkServer] = []
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(workers):
            self._add()

    def _add(self) -> None:
        server = _ForkServer(self.python)
        with self._lock:
            self._all.append(server)
        self._idle.put(server)

    def _replace(self, server: _ForkServer) -> None:
        with self._lock:
            if server in self._all:
                self._all.remove(server)
        server.close()
        if not self._closed:
            self._add()

    def run(
        self, code: str, *, stdin: str = "", timeout: float = DEFAULT_TIMEOUT, files: Files | None = None
    ) -> RunResult:
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        checked = check_files(files, self.limits.file_bytes)
        start = time.monotonic()
        server = self._idle.get()
        uid = _run_uid()
        workdir, stdin_fd = _workdir(code, stdin, uid, checked)
        healthy = False
        try:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            spec = json.dumps(_spec(workdir, uid, self.limits, timeout, self.namespaces)).encode()
            try:
                socket.send_fds(server.sock, [spec], [stdin_fd, out_w, err_w])
                reply = server.sock.recv(4096)
            finally:
                for fd in (stdin_fd, out_w, err_w):
                    os.close(fd)
            if not reply:
                for fd in (out_r, err_r):
                    os.close(fd)
                return RunResult("error", "", "sandbox: the fork server died", None, time.monotonic() - start)

            def kill() -> None:
                server.sock.send(b"kill")

            outs, timed_out, overflow = _collect([out_r, err_r], start + timeout, self.limits.output_bytes, kill)
            ready, _, _ = select.select([server.sock], [], [], REAP_GRACE)
            msg = server.sock.recv(4096) if ready else b""
            exit_code = os.waitstatus_to_exitcode(json.loads(msg)["status"]) if msg else None
            healthy = bool(msg)
            return _result(outs, exit_code, timed_out, overflow, self.limits.output_bytes, start)
        except OSError as e:
            return RunResult("error", "", f"sandbox: {e}", None, time.monotonic() - start)
        finally:
            _remove(workdir)
            if healthy and server.alive():
                self._idle.put(server)
            else:
                self._replace(server)

    def capabilities(self) -> Capabilities:
        return _capabilities(self, self.name)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            servers, self._all = self._all, []
        for server in servers:
            server.close()


def limits_dict(limits: Limits) -> dict[str, int]:
    """``Limits`` as a plain dict (for reports).

    >>> limits_dict(Limits())["processes"]
    64
    """
    return asdict(limits)
