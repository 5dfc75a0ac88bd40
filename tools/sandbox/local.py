"""Local back-ends: ``SubprocessSandbox`` (a fresh interpreter per call) and ``PooledSandbox`` (fork servers: a
pre-imported interpreter forks a fresh isolated process per call, no start-up cost).

Both run the code through ``_child.py``: a supervisor (as root, in a cgroup of the run's own: ``cgroup_parents``)
enters new mount, network, IPC and PID namespaces (``unshare(2)``, what util-linux's ``unshare`` does; as non-root
inside a user namespace) and forks the code's process, PID 1 of its namespace, which moves into a root of its own
(``root_layout``: the system directories and the standard library, read-only; a fresh /proc; a working directory on
a tmpfs of ``Limits.disk_bytes``), drops to a uid of the run's own when run as root (RLIMIT_NPROC does not apply to
root; a uid per run also keeps one run's process count from another's), drops every capability and sets
``no_new_privs`` (so the mounts cannot be undone, as root or not), sets rlimits, empties the environment and runs the
code. When PID 1 ends, the kernel kills everything it started, ``setsid`` or not; a run killed for its wall time or
output takes its whole namespace down the same way. Where the kernel refuses a namespace (or any step fails) the
code does not run: the result is an ``error`` whose stderr starts ``sandbox: cannot isolate the run:``. Only the
operator's ``namespaces=False`` runs without them: then there is no network, IPC, disk, file-system or /tmp
isolation, and leftover processes are killed by the run's uid (as root) or by process group only (a ``setsid`` child
escapes).

>>> with SubprocessSandbox() as box:  # doctest: +SKIP
...     box.run("print(input() * 2)", stdin="ab").stdout
'abab\\n'
"""

from __future__ import annotations

import contextlib
import glob
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
import sysconfig
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ._child import ISOLATION_FAILED, REFUSED
from .base import (
    DEFAULT_TIMEOUT,
    PROBE,
    PROBE_PATHS,
    WORKDIR,
    Capabilities,
    Files,
    Limits,
    RunResult,
    Sandbox,
    check_files,
    classify,
    decode_output,
    unencodable,
)

CHILD = str(Path(__file__).with_name("_child.py"))
#: The only environment variable the sandboxed interpreters get.
MIN_ENV = {"PATH": "/usr/bin:/bin"}
#: Seconds a killed run may take to be reaped before the sandbox gives up waiting (it never blocks longer).
REAP_GRACE = 5.0
#: Run uids (as root, each run gets a random one of its own from this range, and the same gid).
RUN_UIDS = (1 << 20, 1 << 30)
#: Seconds ``PooledSandbox.run`` waits for a free worker by default before it gives up (not part of the run's time).
WORKER_WAIT = 300.0


def _run_uid() -> int | None:
    """A uid of its own for one run, when running as root (None otherwise): RLIMIT_NPROC then counts that run's
    processes only, and without a PID namespace its leftovers are found and killed by uid."""
    return RUN_UIDS[0] + secrets.randbelow(RUN_UIDS[1] - RUN_UIDS[0]) if os.geteuid() == 0 else None


#: Without a cgroup for the run, its memory limit is divided among at most ``memory_bytes // MIN_PROCESS_BYTES``
#: processes (each gets an equal share of address space, so their sum cannot pass it).
MIN_PROCESS_BYTES = 128 << 20
#: Directories of the host that every run's new root holds read-only (the host's symlinks among them, such as
#: ``/bin -> usr/bin``, are copied as symlinks), besides the interpreter's standard library.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Single files of the host bound into the new root (the dynamic loader's cache: it finds shared libraries faster).
SYSTEM_FILES = ("/etc/ld.so.cache",)


def root_layout() -> dict[str, list[str]]:
    """What the code's new root holds (``_child._private_root``): ``bind`` (host paths bound read-only), ``links``
    (host symlinks copied), ``mask`` (directories left empty: every site-packages and dist-packages under what is
    bound, so only the standard library imports) and ``path`` (the code's ``sys.path`` after its own directory).
    The virtualenv, the project and the caller's home are not in it.

    >>> layout = root_layout()
    >>> sysconfig.get_path("stdlib") in layout["path"], any(p.endswith("site-packages") for p in layout["path"])
    (True, False)
    """
    base = {k: sys.base_prefix for k in ("base", "platbase", "installed_base", "installed_platbase")}
    stdlib = [os.path.realpath(sysconfig.get_path(k, vars=base)) for k in ("stdlib", "platstdlib")]
    dynload = [os.path.realpath(p) for p in sys.path if p.endswith("lib-dynload")]
    path = list(dict.fromkeys(p for p in [*stdlib, *dynload] if os.path.isdir(p)))
    links = [d for d in SYSTEM_DIRS if os.path.islink(d)]
    system = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    bind = system + [p for p in path if not any(p == d or p.startswith(d + "/") for d in system)]
    bind += [f for f in SYSTEM_FILES if os.path.isfile(f)]
    mask = []
    for root in bind:
        for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                        "local/lib/python3*/site-packages", "local/lib/python3*/dist-packages", "site-packages",
                        "dist-packages"):  # fmt: skip
            mask += [p for p in glob.glob(os.path.join(root, pattern)) if os.path.isdir(p) and not os.path.islink(p)]
    return {"bind": list(dict.fromkeys(bind)), "links": links, "mask": sorted(set(mask)), "path": path}


def cgroup_parents() -> dict | None:
    """Where a run's own cgroup can be made (it then caps the memory and processes of all the run's processes
    together): as root, cgroup v1's memory and pids hierarchies (the groups this process is in), or cgroup v2's
    root with both controllers, under a group ``agentgym-sandbox`` made for the runs. None where neither can be had
    (not root, or a read-only /sys/fs/cgroup)."""
    if os.geteuid() != 0:
        return None
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    groups = {c: path for _, controllers, path in lines for c in controllers.split(",")}
    v1 = []
    for controller in ("memory", "pids"):
        base = f"/sys/fs/cgroup/{controller}"
        where = base + groups.get(controller, "/")
        where = where if os.path.isdir(where) else base
        if os.path.isfile(os.path.join(where, "cgroup.procs")) and os.access(where, os.W_OK):
            v1.append(where.rstrip("/"))
    if len(v1) == 2:
        return {"version": 1, "parents": v1}
    root = "/sys/fs/cgroup"
    with contextlib.suppress(OSError):
        with open(os.path.join(root, "cgroup.controllers")) as f:
            if not {"memory", "pids"} <= set(f.read().split()):
                return None
        parent = os.path.join(root, "agentgym-sandbox")
        os.makedirs(parent, exist_ok=True)
        for d in (root, parent):
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("+memory +pids")
        return {"version": 2, "parents": [parent]}
    return None


def memory_scope(cgroup: dict | None, namespaces: bool) -> str:
    """How a run's memory limit is enforced: ``cgroup`` (all its processes together), ``divided`` (an equal share of
    address space each, for as many processes as the share allows) or ``process`` (each process on its own: only
    without namespaces as non-root)."""
    if cgroup is not None:
        return "cgroup"
    return "divided" if namespaces or os.geteuid() == 0 else "process"


def host_setup() -> dict:
    """What a sandbox finds out about its host once: the code's root (``root_layout``) and where runs get a cgroup
    (``cgroup_parents``)."""
    return {"root": root_layout(), "cgroup": cgroup_parents()}


def _spec(workdir: str, uid: int | None, limits: Limits, timeout: float, namespaces: bool, host: dict) -> dict:
    """The run's spec for ``_child`` (``host``: ``host_setup()``). The memory and process limits hold for the whole
    run (``memory_scope``): with a cgroup of its own the run's processes share them; without one, each process gets
    ``memory_bytes / n`` of address space and at most ``n`` may run (``n`` from ``MIN_PROCESS_BYTES``), so no
    number of processes can hold more than ``memory_bytes``. Only without namespaces, as non-root (where the
    process count is the caller's, not the run's), are they per process."""
    cgroup = host["cgroup"]
    processes, memory = limits.processes, limits.memory_bytes
    if memory_scope(cgroup, namespaces) == "divided":
        processes = max(1, min(processes, memory // MIN_PROCESS_BYTES))
        memory //= processes
    rlimits = {
        "RLIMIT_CPU": math.ceil(timeout) + 1,
        "RLIMIT_AS": memory,
        "RLIMIT_NPROC": processes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    spec = {
        "workdir": workdir,
        "fixed_workdir": WORKDIR,
        "uid": uid,
        "limits": rlimits,
        "namespaces": namespaces,
        "disk_bytes": limits.disk_bytes,
        "root": host["root"],
    }
    if cgroup is not None:
        # a fresh name per run: a group a killed supervisor could not remove never collides with a later run's
        spec["cgroup"] = {**cgroup, "memory_bytes": limits.memory_bytes, "processes": limits.processes,
                          "name": f"agentgym-run-{secrets.token_hex(8)}"}  # fmt: skip
    return spec


def _remove_cgroup(spec: dict) -> None:
    """After a run's supervisor has exited: remove the run's cgroup if it is still there (the supervisor removes it
    itself, unless it was killed first or its processes outlived its wait). A group that still has processes stays
    (rmdir refuses it); nothing here raises."""
    cgroup = spec.get("cgroup")
    for parent in cgroup["parents"] if cgroup else ():
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(parent, cgroup["name"]))


def _refusal(code: str, stdin: str, files: Files | None, limits: Limits) -> tuple[dict[str, bytes], str | None]:
    """``files`` checked (``ValueError`` for a bad name or type, as ``check_files``), and why the run cannot start
    (text that is not UTF-8, more than ``disk_bytes`` in all, counted in pages as a tmpfs does), or None."""
    problem = unencodable(code, stdin, files)
    if problem is not None:
        return {}, problem
    checked = check_files(files, limits.file_bytes)
    page = os.sysconf("SC_PAGE_SIZE")  # what a tmpfs counts: whole pages, one at least per file
    sizes = [len(code.encode("utf-8")), *map(len, checked.values())]
    total = sum(max(1, -(-n // page)) * page for n in sizes)
    if total > limits.disk_bytes:
        return checked, f"the code and files hold {total} bytes, over the disk limit of {limits.disk_bytes}"
    return checked, None


def _workdir(code: str, stdin: str, uid: int | None, files: dict[str, bytes]) -> tuple[str, int]:
    """A fresh temporary directory holding ``main.py`` and ``files`` (owned by ``uid`` if given; its parent is a
    directory of our own, so ``..`` is not a shared /tmp), and an fd reading ``stdin``. Removes what it made if it
    fails; else remove with ``_remove(workdir)``."""
    # 0o700, ours: its parent (a shared /tmp) is out of reach; named by our pid, so what a process left is its own
    base = tempfile.mkdtemp(prefix=f"agentgym-sbx-{os.getpid()}-")
    try:
        return _fill(os.path.join(base, "work"), code, stdin, uid, files)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise


def _fill(workdir: str, code: str, stdin: str, uid: int | None, files: dict[str, bytes]) -> tuple[str, int]:
    os.chmod(os.path.dirname(workdir), 0o711)
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
        f.write(stdin.encode("utf-8"))
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


def _capabilities(box: Sandbox, backend: str, containment: str | None = None) -> Capabilities:
    """Run ``PROBE`` in ``box`` twice (the second run looks for the System V objects the first made) and read what
    they saw; what the probe wrote to the host's shared directories, if anything got through, is removed. The host
    lays out what the probe looks for (``_ProbeBait``): unix sockets it listens on, a file of the caller's, the
    project's and the virtualenv's paths."""
    key = RUN_UIDS[0] + secrets.randbelow(1 << 20)
    probes = [Path(d, ".agentgym-probe") for d in PROBE_PATHS]
    existed = {p for p in probes if p.exists()}
    with _ProbeBait() as bait:
        code = PROBE.replace("__KEY__", str(key)).replace("__HOST__", repr(bait.host))
        runs = [box.run(code, timeout=30.0) for _ in range(2)]
        accepted = bait.accepted()
    leaked = {str(p.parent) for p in probes if p not in existed and p.exists()}
    for p in probes:
        if str(p.parent) in leaked:
            p.unlink(missing_ok=True)
    host_ipc = _host_ipc_keys()
    _remove_host_ipc(key, host_ipc)
    try:
        seen, again = (json.loads(r.stdout) for r in runs)
    except ValueError:
        r = next(r for r in runs if not r.stdout.startswith("{"))
        return Capabilities(
            backend,
            False,
            "none",
            False,
            False,
            notes=(f"probe failed: {r.status} {r.stderr[-300:]}",),
            caller=os.geteuid(),
        )
    seen["sockets"] = sorted(set(seen["sockets"]) | accepted)
    return _read_probe(box, backend, seen, again, leaked, key in host_ipc, containment)


class _ProbeBait:
    """What ``capabilities()`` leaves for the probe to find: a unix socket listening in a directory of the caller's
    own (outside every directory the sandbox masks), one in the host's /tmp, an abstract one, a file only the
    caller may read, and the paths of the project (this package) and the running environment's site-packages (the
    virtualenv's). A path counts as seen where the code can list something in it or read it."""

    def __init__(self) -> None:
        token = secrets.token_hex(8)
        self.dir = tempfile.mkdtemp(prefix="agentgym-probe-", dir=_caller_dir())
        self.tmp = tempfile.mkdtemp(prefix="agentgym-probe-")
        self.file = os.path.join(self.dir, "secret")
        with open(os.open(self.file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("the caller's")
        for d in (self.dir, self.tmp):
            os.chmod(d, 0o711)  # reachable by a run uid of its own, as the caller's own files would be to its uid
        addrs = [os.path.join(self.dir, "sock"), os.path.join(self.tmp, "sock"), f"\0agentgym-probe-{token}"]
        self.servers = []
        for addr in addrs:
            s = socket.socket(socket.AF_UNIX)
            s.bind(addr.encode("latin-1") if addr.startswith("\0") else addr)
            if not addr.startswith("\0"):
                os.chmod(addr, 0o777)
            s.listen(4)
            s.setblocking(False)
            self.servers.append((addr, s))
        package = __name__.rpartition(".")[0].partition(".")[0] or __name__
        project = str(Path(__file__).resolve().parent)
        paths = [project, sysconfig.get_path("purelib"), self.dir]
        self.host = {
            "paths": [p for p in paths if os.path.exists(p)],
            "file": self.file,
            "package": package,
            "sockets": addrs,
        }

    def accepted(self) -> set[str]:
        """The sockets a connection reached (seen from the host's side)."""
        got = set()
        for addr, s in self.servers:
            with contextlib.suppress(BlockingIOError):
                s.accept()[0].close()
                got.add(addr)
        return got

    def __enter__(self) -> _ProbeBait:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, s in self.servers:
            s.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _caller_dir() -> str:
    """A directory the caller may write to outside every directory the sandbox masks (its home, else the current
    directory, else the system's temporary directory)."""
    for d in (os.path.expanduser("~"), os.getcwd()):
        if os.path.isdir(d) and os.access(d, os.W_OK) and not d.startswith(PROBE_PATHS):
            return d
    return tempfile.gettempdir()


def _read_probe(
    box: Sandbox, backend: str, seen: dict, again: dict, leaked: set[str], on_host: bool, containment: str | None
) -> Capabilities:
    """``Capabilities`` from two probe runs' reports (``seen``, then ``again``)."""
    ifaces = seen["ifaces"]
    pidns = seen["pid"] == 1
    if containment is None:
        containment = "pid-namespace" if pidns else "run-uid" if seen["uid"] >= RUN_UIDS[0] else "process-group"
    caps = seen["caps"]
    notes: list[str] = []
    undone = seen.get("undone", [True, True, True])
    nested = seen.get("undone_nested", [True, True, True])
    if "undone" not in seen:
        notes.append("no ctypes in the sandbox's Python: unmounting and System V IPC were not probed")
    mounts_locked = not any(undone) and not any(nested)
    if not mounts_locked:
        names = ("umount /tmp", "umount /proc", "remount / rw")
        what = [n for n, u, v in zip(names, undone, nested, strict=True) if u or v]
        notes.append(f"the code could undo mounts: {', '.join(what)}")
    writable = seen.get("writable", {"/tmp": seen["tmp_writable"]})
    made = seen.get("ipc_made", [False, False])
    ipc_isolated = bool(all(made) and not any(again.get("ipc_left", [True])) and not on_host)
    if not ipc_isolated:
        notes.append(f"System V IPC: made {made}, seen by the next run {again.get('ipc_left')}, on the host {on_host}")
    disk = seen["cwd_bytes"] if seen["cwd_bytes"] <= box.limits.disk_bytes and seen["cwd_bytes"] > 0 else None
    if seen["sockets"]:
        notes.append(f"unix sockets reached: {seen['sockets']}")
    if seen["visible"]:
        notes.append(f"host paths the code sees: {seen['visible']}")
    rl, limits = seen["rlimits"], box.limits
    if containment == "container":
        scope = "container"
    elif seen["run_cgroup"]:
        scope = "cgroup"
    elif 0 < rl["RLIMIT_AS"] * rl["RLIMIT_NPROC"] <= limits.memory_bytes and pidns:
        scope = "divided"
    else:
        scope = "process"
    return Capabilities(
        backend=backend,
        network_isolated=set(ifaces) <= {"lo"}
        and (containment == "container" or not _loopback_up(box))
        and not seen["sockets"],
        process_containment=containment,
        private_tmp=not any(writable.values()) and not leaked and mounts_locked,
        unprivileged=seen["uid"] != 0,
        rlimits=seen["rlimits"],
        notes=tuple(notes),
        no_capabilities=not any(caps[k] for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")),
        no_new_privs=seen["no_new_privs"],
        mounts_locked=mounts_locked,
        ipc_isolated=ipc_isolated,
        read_only_root=seen["root_readonly"],
        disk_bytes=disk,
        caller=os.geteuid(),
        private_root=not seen["visible"],
        memory_scope=scope,
    )


def _host_ipc_keys() -> set[int]:
    """System V keys of the host's (this process's IPC namespace) shared-memory segments and message queues."""
    keys = set()
    for name in ("shm", "msg"):
        with contextlib.suppress(OSError), open(f"/proc/sysvipc/{name}") as f:
            keys |= {int(line.split()[0]) for line in f.readlines()[1:] if line.split()}
    return keys


def _remove_host_ipc(key: int, keys: set[int]) -> None:
    """Remove the probe's segment and queue where they got through to the host."""
    if key in keys:
        for cmd in (["ipcrm", "-M", str(key)], ["ipcrm", "-Q", str(key)]):
            with contextlib.suppress(OSError):
                subprocess.run(cmd, capture_output=True, timeout=10, check=False)


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
        self._host = host_setup()

    def run(
        self, code: str, *, stdin: str = "", timeout: float = DEFAULT_TIMEOUT, files: Files | None = None
    ) -> RunResult:
        start = time.monotonic()
        checked, refused = _refusal(code, stdin, files, self.limits)
        if refused is not None:
            return RunResult("error", "", f"sandbox: {refused}", None, time.monotonic() - start)
        uid = _run_uid()
        try:
            workdir, stdin_fd = _workdir(code, stdin, uid, checked)
        except OSError as e:
            return RunResult("error", "", f"sandbox: cannot write the work dir: {e}", None, time.monotonic() - start)
        try:
            return self._run(workdir, stdin_fd, uid, timeout, start)
        finally:
            _remove(workdir)

    def _run(self, workdir: str, stdin_fd: int, uid: int | None, timeout: float, start: float) -> RunResult:
        run_spec = _spec(workdir, uid, self.limits, timeout, self.namespaces, self._host)
        try:
            proc = subprocess.Popen(
                [self.python, "-I", "-S", CHILD, "--run", json.dumps(run_spec)],
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=MIN_ENV,
                cwd=workdir,
                start_new_session=True,
            )
        except OSError as e:
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
            # Reaped or not, the group id is still ours (a group's id is not reused while it has members): kill
            # what the code left in it (without namespaces, as non-root, nothing else would).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.returncode is None:
                proc.wait()
            _remove_cgroup(run_spec)
        return _result(outs, exit_code, timed_out, overflow, self.limits.output_bytes, start)

    def capabilities(self) -> Capabilities:
        return _capabilities(self, self.name)


def _pool_size(workers: int, worker_wait: float) -> tuple[int, float]:
    """``(workers, worker_wait)`` checked: ``ValueError`` unless ``workers >= 1`` and ``worker_wait > 0``."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not worker_wait > 0:
        raise ValueError(f"worker_wait must be > 0, got {worker_wait}")
    return workers, worker_wait


class _ForkServer:
    """One pre-started interpreter running ``_child.serve`` on a SOCK_SEQPACKET socket."""

    def __init__(self, python: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.proc = subprocess.Popen(
            [python, "-I", "-S", CHILD, "--serve", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=MIN_ENV,
            pass_fds=[theirs.fileno()],
            start_new_session=True,
        )
        theirs.close()
        self.healthy = True  # False while a run on it has not got its final answer

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
    module variables and child processes all go with it). Thread-safe: up to ``workers`` calls run at once; a call
    waits up to ``worker_wait`` seconds for a free worker (not counted in its ``timeout``), then is an ``error``."""

    name = "pooled"

    def __init__(
        self,
        workers: int = 2,
        limits: Limits | None = None,
        python: str = sys.executable,
        namespaces: bool = True,
        worker_wait: float = WORKER_WAIT,
    ) -> None:
        self.workers, self.worker_wait = _pool_size(workers, worker_wait)
        self.limits = limits or Limits()
        self.python = python
        self.namespaces = namespaces
        self._host = host_setup()
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
        waited = time.monotonic()
        checked, refused = _refusal(code, stdin, files, self.limits)
        if refused is not None:
            return RunResult("error", "", f"sandbox: {refused}", None, time.monotonic() - waited)
        try:
            server = self._idle.get(timeout=self.worker_wait)
        except queue.Empty:
            why = f"sandbox: no free worker in {self.worker_wait:g} s (all {self.workers} busy)"
            return RunResult("error", "", why, None, time.monotonic() - waited)
        # From here on the worker is ours: every way out gives it back (or a fresh one in its place).
        start = time.monotonic()  # the run's deadline counts from here, not from the wait for a worker
        workdir = None
        used = healthy = False
        try:
            uid = _run_uid()
            workdir, stdin_fd = _workdir(code, stdin, uid, checked)
            used = True
            return self._run(server, workdir, stdin_fd, uid, timeout, start)
        except Exception as e:
            return RunResult("error", "", f"sandbox: {type(e).__name__}: {e}", None, time.monotonic() - start)
        finally:
            if workdir is not None:
                _remove(workdir)
            healthy = not used or server.healthy
            if healthy and server.alive():
                self._idle.put(server)
            else:
                self._replace(server)

    def _run(
        self, server: _ForkServer, workdir: str, stdin_fd: int, uid: int | None, timeout: float, start: float
    ) -> RunResult:
        """One run on ``server``; sets ``server.healthy`` when the server answered as it should."""
        server.healthy = False
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        run_spec = _spec(workdir, uid, self.limits, timeout, self.namespaces, self._host)
        try:
            socket.send_fds(server.sock, [json.dumps(run_spec).encode()], [stdin_fd, out_w, err_w])
            reply = server.sock.recv(4096)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
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
        server.healthy = bool(msg)
        if msg:  # the supervisor has exited (without a reply it may still be running: its group is left to it)
            _remove_cgroup(run_spec)
        return _result(outs, exit_code, timed_out, overflow, self.limits.output_bytes, start)

    def capabilities(self) -> Capabilities:
        return _capabilities(self, self.name)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            servers, self._all = self._all, []
        for server in servers:
            server.close()


#: Fork servers of a shared pool (``SharedSandboxes``): as many as the CPUs can run at once, at most 4 (each holds
#: ~13 MB resident; a fifth would only queue for a CPU). Calls from every session sharing the pool queue for one.
SHARED_WORKERS = min(os.cpu_count() or 1, 4)
#: Seconds a call waits for a worker of a shared pool before it comes back as an ``error`` run ("no free worker"):
#: under the env server's default ``call_timeout`` (300 s), so a call that cannot get a worker is an observation,
#: not a timed-out request.
SHARED_WORKER_WAIT = 120.0


@dataclass(frozen=True)
class PoolKey:
    """What makes two users' pools interchangeable: the same ``Limits``, namespaces and interpreter (a run's
    ``timeout`` is per call, so it is not part of the key)."""

    limits: Limits = field(default_factory=Limits)
    namespaces: bool = True
    python: str = sys.executable


class SharedSandboxes:
    """``PooledSandbox``es shared by every user in this process with the same ``PoolKey``, reference-counted.

    ``acquire(key)`` returns the key's pool (started by its first user, with ``workers`` fork servers) and counts
    one more user; ``release(key, pool)`` counts one fewer and closes the pool when none is left. Each ``acquire`` is
    matched by exactly one ``release``. A forked child starts with an empty table (the parent's fork servers are not
    its own): its envs start a pool of their own, and releases of pools it inherited do nothing. Thread-safe (one
    lock over the table; a pool is started under it, so two first users never start two). Calls from all users queue
    for the pool's workers: a call waits up to ``worker_wait`` seconds for one, then is an ``error`` run saying no
    worker was free (never an exception).

    ``SHARED`` is the one process-wide instance the envs use: a deliberate global, because it is a resource cache
    (as a connection pool is), not state any trajectory depends on: runs are stateless and observations hold no
    timings, so which pool a run used changes nothing an agent sees.

    >>> shared = SharedSandboxes(workers=1)
    >>> a, b = shared.acquire(PoolKey()), shared.acquire(PoolKey())
    >>> a is b, shared.users(PoolKey())
    (True, 2)
    >>> shared.release(PoolKey(), a); shared.release(PoolKey(), b)
    >>> shared.users(PoolKey()), a._closed
    (0, True)
    """

    def __init__(self, workers: int = SHARED_WORKERS, worker_wait: float = SHARED_WORKER_WAIT) -> None:
        self.workers, self.worker_wait = _pool_size(workers, worker_wait)
        self._forget()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (shared := ref()) is not None and shared._forget())

    def _forget(self) -> None:
        """An empty table and a fresh lock (in a forked child, the parent's lock may have been held at the fork)."""
        self._lock = threading.Lock()
        self._pools: dict[PoolKey, PooledSandbox] = {}
        self._users: dict[PoolKey, int] = {}

    def acquire(self, key: PoolKey) -> PooledSandbox:
        """The pool of ``key`` (started if it has no user), counting one more user."""
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = PooledSandbox(self.workers, key.limits, key.python, key.namespaces, self.worker_wait)
                self._pools[key] = pool
            self._users[key] = self._users.get(key, 0) + 1
            return pool

    def release(self, key: PoolKey, pool: PooledSandbox) -> None:
        """One user of ``key`` fewer; the last one closes the pool (its fork servers exit). ``pool``: the one
        ``acquire`` returned; a pool that is not the key's (one inherited over a fork) is left alone."""
        with self._lock:
            if self._pools.get(key) is not pool:
                return
            left = self._users[key] - 1
            if left:
                self._users[key] = left
                return
            del self._users[key]
            pool = self._pools.pop(key)
        pool.close()  # outside the lock: waiting for the servers to exit holds up no other key

    def users(self, key: PoolKey) -> int:
        """How many users hold the pool of ``key`` (0: it is not running)."""
        with self._lock:
            return self._users.get(key, 0)


#: The process-wide ``SharedSandboxes`` (see its docstring for why one global is right here).
SHARED = SharedSandboxes()


def isolation_refused(python: str = sys.executable) -> str | None:
    """Why the local back-ends cannot isolate code here (the kernel's refusal, as the sandbox words it), or None.
    Runs ``pass`` once in a ``SubprocessSandbox`` (a fresh interpreter: ~50 ms).

    >>> isolation_refused() is None or isolation_refused().startswith("sandbox: cannot isolate")
    True
    """
    r = SubprocessSandbox(python=python).run("pass", timeout=30.0)
    if r.exit_code == ISOLATION_FAILED and r.stderr.startswith(REFUSED):
        return r.stderr.strip()
    return None if r.ok else f"sandbox: a test run failed: {r.status} {r.stderr.strip()[-300:]}"


def limits_dict(limits: Limits) -> dict[str, int]:
    """``Limits`` as a plain dict (for reports).

    >>> limits_dict(Limits())["processes"]
    64
    """
    return asdict(limits)
