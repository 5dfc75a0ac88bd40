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
    """Resource limits of one run (``timeout`` is wall-clock; CPU time is limited to ``ceil(timeout) + 1`` s)."""

    memory_bytes: int = 1 << 30
    processes: int = 64
    file_bytes: int = 16 << 20
    open_files: int = 64
    output_bytes: int = OUTPUT_LIMIT


@dataclass(frozen=True)
class Capabilities:
    """What a back-end really enforces here, detected by running a probe in it (not assumed).

    ``network_isolated``: no interface but a down loopback (connections fail at once, nothing is sent).
    ``process_containment``: ``pid-namespace`` (every process the code starts dies with it), ``run-uid`` (no PID
    namespace, but the code runs as a uid of its own and every process of that uid is killed after the run),
    ``process-group`` (a child that calls ``setsid`` can escape), ``container``. ``private_tmp``: /tmp is not the
    host's /tmp. ``unprivileged``: the code does not run as root. ``rlimits``: the limits the code sees
    (``RLIMIT_*`` -> soft).
    """

    backend: str
    network_isolated: bool
    process_containment: str
    private_tmp: bool
    unprivileged: bool
    rlimits: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


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


#: The probe ``capabilities()`` runs in the sandbox: prints a JSON object of what it sees.
PROBE = r"""
import json, os, resource
names = ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE"]
ifaces = []
with open("/proc/net/dev") as f:
    for line in f.readlines()[2:]:
        ifaces.append(line.split(":")[0].strip())
up = []
for i in ifaces:
    try:
        with open(f"/sys/class/net/{i}/operstate") as f:
            up.append((i, f.read().strip()))
    except OSError:
        up.append((i, "?"))
try:
    open("/tmp/.agentgym-probe", "w").close()
    tmp_writable = True
except OSError:
    tmp_writable = False
print(json.dumps({"uid": os.getuid(), "pid": os.getpid(), "ifaces": ifaces, "tmp_writable": tmp_writable,
                  "rlimits": {n: resource.getrlimit(getattr(resource, n))[0] for n in names}}))
"""


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
        if path == "main.py":
            raise ValueError("main.py is the code's own file; give the code as `code`")
        if not isinstance(content, str | bytes):
            raise ValueError(f"file {name!r} must be str or bytes, got {type(content).__name__}")
        out[path] = content.encode("utf-8") if isinstance(content, str) else bytes(content)
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
