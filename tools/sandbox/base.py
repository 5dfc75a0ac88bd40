"""The sandbox interface: run untrusted Python code, get a ``RunResult``; never hang, never raise for the code.

>>> r = RunResult(status="ok", stdout="1\\n", stderr="", exit_code=0, wall_time=0.02)
>>> r.ok, r.truncated
(True, False)
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "timeout", "memory", "killed", "error"]

#: Bytes kept of each of stdout and stderr; past it the run is killed and ``truncated`` is set.
OUTPUT_LIMIT = 1 << 20
#: Wall-clock seconds a run may take unless ``timeout=`` says otherwise.
DEFAULT_TIMEOUT = 10.0
#: The code's working directory where the back-end can give every run the same path (a mount namespace, a
#: container), so what a program prints about its paths does not change from run to run.
WORKDIR = "/tmp/work"

Files = Mapping[str, "str | bytes"]


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run.

    ``status``: ``ok`` (exit 0), ``error`` (the code raised or exited non-zero), ``timeout`` (wall or CPU time
    limit), ``memory`` (the address-space limit: a ``MemoryError``), ``killed`` (ended by a signal, or killed for
    writing more than the output limit: then ``truncated`` is set). ``stdout``/``stderr`` hold at most the output
    limit each (decoded as UTF-8, invalid bytes replaced). ``exit_code`` is negative for a signal, None when the run
    was killed by the sandbox before its status was known.
    """

    status: Status
    stdout: str
    stderr: str
    exit_code: int | None
    wall_time: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run (``timeout`` is wall-clock; CPU time is limited to ``ceil(timeout) + 1`` s).

    ``file_bytes``: the largest file the code may write (``RLIMIT_FSIZE``), and the most bytes ``files`` may hold.
    ``disk_bytes``: all the code may have written at once (its working directory is a tmpfs of that size; the rest
    of the file system is read-only), ``main.py`` and ``files`` included; enforced where the back-end has mount
    namespaces or is a container (``Capabilities.disk_bytes``). Counts as memory of the machine, not of the run.
    """

    memory_bytes: int = 1 << 30
    processes: int = 64
    file_bytes: int = 16 << 20
    open_files: int = 64
    output_bytes: int = OUTPUT_LIMIT
    disk_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "processes", "file_bytes", "open_files", "output_bytes", "disk_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class Capabilities:
    """What a back-end really enforces here, detected by running a probe in it (not assumed).

    ``network_isolated``: no interface but a down loopback (connections fail at once, nothing is sent).
    ``process_containment``: ``pid-namespace`` (every process the code starts dies with it), ``run-uid`` (no PID
    namespace, but the code runs as a uid of its own and every process of that uid is killed after the run),
    ``process-group`` (a child that calls ``setsid`` can escape), ``container``. ``private_tmp``: /tmp, /var/tmp,
    /dev/shm and /run/lock are not the host's (nothing written there gets out) and the code cannot unmount them.
    ``unprivileged``: the code does not run as root. ``rlimits``: the limits the code sees (``RLIMIT_*`` -> soft).
    ``no_capabilities``: the code's effective, permitted, ambient and bounding capability sets are empty (it cannot
    regain one by ``execve``). ``no_new_privs``: setuid bits and file capabilities are ignored. ``mounts_locked``:
    unmounting /tmp or /proc and remounting / read-write fail, also from a user namespace the code makes itself.
    ``ipc_isolated``: a System V shared-memory segment and message queue made by one run are gone for the next (and
    never were the host's). ``read_only_root``: / is mounted read-only. ``disk_bytes``: the size of the file system
    holding the working directory when that is the cap on what the code may write (None: no cap but
    ``RLIMIT_FSIZE`` per file). ``caller``: the uid ``capabilities()`` ran as (what was measured holds for it).
    ``network_isolated`` also covers unix sockets: one the caller listens on in its own directory, one in the
    host's /tmp and an abstract one, none reachable. ``private_root``: the code sees none of the host's files but
    the system directories and the standard library: not the project (its package does not import), the
    virtualenv, a directory of the caller's or a file in it. ``memory_scope``: how
    ``Limits.memory_bytes`` holds, ``cgroup`` or ``container`` (for all the run's processes together), ``divided``
    (each process an equal share, as many as the shares allow: together no more), or ``process`` (each process on
    its own: a run that forks may hold a multiple).
    """

    backend: str
    network_isolated: bool
    process_containment: str
    private_tmp: bool
    unprivileged: bool
    rlimits: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    no_capabilities: bool = False
    no_new_privs: bool = False
    mounts_locked: bool = False
    ipc_isolated: bool = False
    read_only_root: bool = False
    disk_bytes: int | None = None
    caller: int = -1
    private_root: bool = False
    memory_scope: str = "process"

    @property
    def isolates(self) -> bool:
        """Whether any isolation beyond rlimits was measured: a PID namespace or container, an isolated network or
        a private root."""
        contained = self.process_containment in ("pid-namespace", "container")
        return contained or self.network_isolated or self.private_root

    def summary(self) -> str:
        """One line of what was measured: process containment, network, root, memory scope, read-only root,
        privileges, then the notes; it starts ``NO ISOLATION`` where nothing but rlimits holds.

        >>> Capabilities("pooled", True, "pid-namespace", True, True, private_root=True, memory_scope="cgroup",
        ...              read_only_root=True).summary()
        'pid-namespace, network isolated, private root, memory per cgroup, read-only root, unprivileged'
        >>> bare = Capabilities("pooled", False, "run-uid", False, True, notes=("host paths the code sees: /run",))
        >>> print(bare.summary())  # doctest: +NORMALIZE_WHITESPACE
        NO ISOLATION (rlimits only: the code can read what this user can and reach the network): run-uid, network NOT
        isolated, host files visible, memory per process, writable root, unprivileged; notes: host paths the code
        sees: /run
        """
        plain = {"process-group": "process-group (a setsid child can escape)", "none": "no containment measured"}
        containment = plain.get(self.process_containment, self.process_containment)
        parts = [
            containment,
            "network isolated" if self.network_isolated else "network NOT isolated",
            "private root" if self.private_root else "host files visible",
            f"memory per {self.memory_scope}",
            "read-only root" if self.read_only_root else "writable root",
            "unprivileged" if self.unprivileged else "runs as ROOT",
        ]
        text = ", ".join(parts) + (f"; notes: {'; '.join(self.notes)}" if self.notes else "")
        if self.isolates:
            return text
        return f"NO ISOLATION (rlimits only: the code can read what this user can and reach the network): {text}"


class Sandbox:
    """Interface of every sandbox back-end."""

    name = "sandbox"

    def run(
        self, code: str, *, stdin: str = "", timeout: float = DEFAULT_TIMEOUT, files: Files | None = None
    ) -> RunResult:
        """Run ``code`` as ``__main__`` (file ``main.py``) in a fresh, isolated process; ``stdin`` is its standard
        input, and ``files`` (relative path -> text or bytes) are written into its working directory first."""
        raise NotImplementedError

    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (pooled interpreters, clients)."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The probe ``capabilities()`` runs in the sandbox: prints a JSON object of what it sees and what it could undo.
#: Standard library only (``ctypes`` where the image has it); the attempts to unmount come last (one that worked
#: would change what the rest sees), the ones from a nested user namespace in a child process of their own.
PROBE = r"""
import json, os, resource
names = ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE"]
ifaces = []
with open("/proc/net/dev") as f:
    for line in f.readlines()[2:]:
        ifaces.append(line.split(":")[0].strip())
status = {}
with open("/proc/self/status") as f:
    for line in f:
        key, _, value = line.partition(":")
        status[key] = value.strip()
caps = {k: int(status.get(k, "ffffffffffffffff"), 16) for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")}
writable = {}
for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        open(d + "/.agentgym-probe", "w").close()
        writable[d] = True
    except OSError:
        writable[d] = False
st = os.statvfs(".")
seen = {"uid": os.getuid(), "pid": os.getpid(), "ifaces": ifaces, "tmp_writable": writable["/tmp"],
        "writable": writable, "caps": caps, "no_new_privs": status.get("NoNewPrivs") == "1",
        "root_readonly": bool(os.statvfs("/").f_flag & os.ST_RDONLY), "cwd_bytes": st.f_blocks * st.f_frsize,
        "rlimits": {n: resource.getrlimit(getattr(resource, n))[0] for n in names}}
host = __HOST__
def shows(path):
    try:
        return os.path.isfile(path) or bool(os.listdir(path))
    except OSError:
        return False
seen["visible"] = [p for p in host["paths"] if shows(p)]
try:
    with open(host["file"]) as f:
        seen["visible"].append(host["file"] + " (read)")
except OSError:
    pass
try:
    __import__(host["package"])
    seen["visible"].append("import " + host["package"])
except ImportError:
    pass
import socket
seen["sockets"] = []
for addr in host["sockets"]:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(addr.encode("latin-1") if addr.startswith("\0") else addr)
        seen["sockets"].append(addr)
    except OSError:
        pass
    finally:
        s.close()
with open("/proc/self/cgroup") as f:
    seen["run_cgroup"] = "agentgym-run-" in f.read()
try:
    import ctypes
except ImportError:
    ctypes = None
if ctypes is not None:
    libc = ctypes.CDLL(None, use_errno=True)
    key = __KEY__
    seen["ipc_left"] = [libc.shmget(key, 0, 0) != -1, libc.msgget(key, 0) != -1]
    seen["ipc_made"] = [libc.shmget(key, 4096, 0o1600) != -1, libc.msgget(key, 0o1600) != -1]
    def undo(libc):
        done = [libc.umount2(p, 2) == 0 for p in (b"/tmp", b"/proc")]
        return done + [libc.mount(None, b"/", None, 32 | 4096, None) == 0]
    seen["undone"] = undo(libc)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = [False, False, False]
        if libc.unshare(0x10000000 | 0x00020000) == 0:
            out = undo(libc)
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    seen["undone_nested"] = json.loads(os.read(r, 100) or b"[false, false, false]")
print(json.dumps(seen))
"""
#: What a probe run may write outside its working directory: the host checks none of it got through.
PROBE_PATHS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def unencodable(code: str, stdin: str, files: Files | None) -> str | None:
    """Why ``code``, ``stdin`` or a file's name or text cannot be encoded as UTF-8 (a lone surrogate), or None.

    >>> unencodable("print(1) # \\ud800", "", None)[:60]
    "the code is not valid UTF-8 text: 'utf-8' codec can't encode"
    """
    items: list[tuple[str, object]] = [("the code", code), ("stdin", stdin)]
    for name, content in (files or {}).items():
        items += [(f"the file name {name!r}", name), (f"file {name!r}", content)]
    for what, text in items:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                return f"{what} is not valid UTF-8 text: {e}"
    return None


def check_files(files: Files | None, limit: int) -> dict[str, bytes]:
    """``files`` as ``{normalised relative path: bytes}``; ``ValueError`` for an absolute path, one that leaves the
    working directory, ``main.py`` (the code's own file), or more than ``limit`` bytes in all.

    >>> check_files({"data/a.csv": "x,y"}, 1 << 20)
    {'data/a.csv': b'x,y'}
    >>> check_files({"../a": ""}, 10)
    Traceback (most recent call last):
    ...
    ValueError: file names must be relative paths inside the working directory, got '../a'
    """
    out: dict[str, bytes] = {}
    for name, content in (files or {}).items():
        path = posixpath.normpath(name) if isinstance(name, str) else ""
        if not path or path.startswith(("/", "../")) or path in (".", "..") or "\0" in path:
            raise ValueError(f"file names must be relative paths inside the working directory, got {name!r}")
        if path == "main.py" or path.startswith("main.py/"):
            raise ValueError("main.py is the code's own file; give the code as `code`")
        if path in out:
            raise ValueError(f"file {name!r} is given twice")
        if not isinstance(content, str | bytes):
            raise ValueError(f"file {name!r} must be str or bytes, got {type(content).__name__}")
        out[path] = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    dirs = {posixpath.dirname(p) for p in out}
    for path in out:  # a file that is also another's directory: one of them could not be written
        if any(d == path or d.startswith(path + "/") for d in dirs):
            raise ValueError(f"file {path!r} is also a directory of another file")
    total = sum(map(len, out.values()))
    if total > limit:
        raise ValueError(f"the files hold {total} bytes, over the limit of {limit}")
    return out


def decode_output(data: bytes, limit: int) -> tuple[str, bool]:
    """``data`` cut to ``limit`` bytes and decoded; whether it was cut.

    >>> decode_output(b"abcdef", 4)
    ('abcd', True)
    """
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def classify(exit_code: int | None, stderr: str, *, timed_out: bool, overflow: bool) -> Status:
    """The status of a run from how it ended.

    >>> classify(1, "Traceback ...\\nMemoryError\\n", timed_out=False, overflow=False)
    'memory'
    >>> classify(-24, "", timed_out=False, overflow=False)  # SIGXCPU: the CPU-time limit
    'timeout'
    """
    if timed_out:
        return "timeout"
    if overflow:
        return "killed"
    if exit_code is None:
        return "killed"
    if exit_code == 0:
        return "ok"
    if exit_code < 0:
        return "timeout" if exit_code == -24 else "killed"  # 24: SIGXCPU
    lines = stderr.rstrip().splitlines()
    if lines and lines[-1].startswith("MemoryError"):
        return "memory"
    return "error"
