"""The sandbox attack suite: each attack runs hostile code in a sandbox and checks from the host whether it got out.

Standard library only, so that it also runs as an unprivileged user (``nobody``) against a copy of the sandbox
package that user can read: ``python3 -I sandbox_attacks.py PKG_PARENT HOST_DIR BACKEND...`` prints one JSON object,
``{backend: {"caps": Capabilities as a dict, "attacks": {name: {"contained": bool, "detail": str}}}}``.
``HOST_DIR`` is a directory the caller owns outside /tmp (the attacks write a file there to see whether the code
can reach the caller's own files). ``test_sandbox_attacks.py`` runs it in-process as root and as ``nobody``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

MNT_DETACH = 2
PRELUDE = "import ctypes, json, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
#: Places every run could write to unless masked: nothing written there may reach the host or the next run.
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")


def _pids_with(token: str) -> list[int]:
    """Host pids whose command line holds ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def _kill_all(token: str) -> list[int]:
    """SIGKILL what carries ``token`` (what an escaped run left behind); the pids found."""
    deadline = time.monotonic() + 3.0
    found = _pids_with(token)
    while found and time.monotonic() < deadline:  # a killed run's namespace may take a moment to go
        time.sleep(0.05)
        found = _pids_with(token)
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return found


def _out(box: Any, code: str, timeout: float = 20.0) -> tuple[Any, dict]:
    """Run ``code`` (which prints one JSON object last) and parse what it printed."""
    r = box.run(PRELUDE + code, timeout=timeout)
    try:
        return r, json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return r, {"error": f"{r.status}: {r.stdout[-300:]} {r.stderr[-500:]}"}


def _own_processes() -> set[int]:
    """Processes of this uid, zombies included (RLIMIT_NPROC counts them until they are reaped)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == os.getuid():
                    found.add(int(entry))
    return found


def _sysv_keys() -> set[int]:
    keys = set()
    for name in ("shm", "msg"):
        with contextlib.suppress(OSError), open(f"/proc/sysvipc/{name}") as f:
            keys |= {int(line.split()[0]) for line in f.readlines()[1:] if line.split()}
    return keys


def _ipcrm(keys: set[int]) -> None:
    for key in keys:
        for flag in ("-M", "-Q"):
            subprocess.run(["ipcrm", flag, str(key)], capture_output=True, check=False)


@dataclasses.dataclass
class Attacks:
    """The attacks against one sandbox ``box``; ``host_dir``: a directory of the caller's own outside /tmp."""

    box: Any
    host_dir: str
    token: str = dataclasses.field(default_factory=lambda: f"agentgym-attack-{uuid.uuid4().hex}")

    def unmount(self) -> dict:
        """Unmount /tmp and /proc (directly, then from a user namespace of the code's own), remount / read-write,
        and look for a file the host put in /tmp, a host process's argv, and write to the caller's own file."""
        marker = Path("/tmp", self.token)
        marker.write_text("host secret")
        marker.chmod(0o644)
        owned = Path(self.host_dir, f"{self.token}.txt")
        owned.write_text("caller's file")
        owned.chmod(0o666)  # writable by anyone who can reach it: only the mounts stand in the way
        sleeper = subprocess.Popen([self.token, "600"], executable="/bin/sleep")
        code = f"""
# spelled backwards: the token must not be in the code's own argv (a container runs python -c CODE)
token, marker, owned = {self.token[::-1]!r}[::-1], {str(marker)[::-1]!r}[::-1], {str(owned)[::-1]!r}[::-1]
def look(where):
    seen = {{"tmp": os.path.exists(marker), "argv": False, "wrote": False}}
    for p in os.listdir("/proc"):
        try:
            seen["argv"] |= token.encode() in open(f"/proc/{{p}}/cmdline", "rb").read()
        except OSError:
            pass
    try:
        with open(owned, "a") as f:
            f.write("ESCAPED " + where)
        seen["wrote"] = True
    except OSError:
        pass
    return seen
def undo():
    return [libc.umount2(b"/tmp", {MNT_DETACH}) == 0, libc.umount2(b"/proc", {MNT_DETACH}) == 0,
            libc.mount(None, b"/", None, 32 | 4096, None) == 0]
report = {{"before": look("plain")}}
r, w = os.pipe()
if os.fork() == 0:
    nested = libc.unshare(0x10000000 | 0x00020000) == 0
    done = undo() if nested else []
    os.write(w, json.dumps({{"nested": nested, "undone": done, "seen": look("nested")}}).encode())
    os._exit(0)
os.close(w)
os.wait()
report["nested"] = json.loads(os.read(r, 4096))
report["undone"] = undo()
report["after"] = look("direct")
print(json.dumps(report))
"""
        try:
            _, seen = _out(self.box, code)
        finally:
            sleeper.kill()
            sleeper.wait()
            text = owned.read_text()
            owned.unlink()
            marker.unlink()
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        looks = [seen["before"], seen["nested"]["seen"], seen["after"]]
        got = {k for look in looks for k, v in look.items() if v} | ({"wrote"} if text != "caller's file" else set())
        undone = seen["undone"] + seen["nested"]["undone"]
        return {"contained": not got and not any(undone), "detail": f"got {sorted(got)}, undone {undone}"}

    def shared_dirs(self) -> dict:
        """Write into /tmp, /var/tmp, /dev/shm, /run/lock, /var/lock, /dev/mqueue: nothing may reach the host or the
        next run."""
        name = f"{self.token}-shared"
        code = (
            f"wrote = []\nfor d in {SHARED_DIRS!r}:\n    try:\n        open(d + '/{name}', 'w').write('x')\n"
            "        wrote.append(d)\n    except OSError:\n        pass\nprint(json.dumps({'wrote': wrote}))\n"
        )
        _, first = _out(self.box, code)
        _, second = _out(
            self.box, f"print(json.dumps({{'seen': [d for d in {SHARED_DIRS!r} if os.path.exists(d + '/{name}')]}}))"
        )
        on_host = [d for d in SHARED_DIRS if os.path.exists(f"{d}/{name}")]
        for d in on_host:
            with contextlib.suppress(OSError):
                os.unlink(f"{d}/{name}")
        if "error" in first or "error" in second:
            return {"contained": False, "detail": str(first.get("error") or second.get("error"))}
        leaked = sorted(set(on_host) | set(second["seen"]))
        return {"contained": not leaked, "detail": f"wrote {first['wrote']}, seen after the run in {leaked}"}

    def sysv_ipc(self) -> dict:
        """A shared-memory segment and a message queue (with a message) made by one run: gone for the next run and
        never the host's; shared memory past the memory limit is refused (or the run is killed for memory)."""
        key = 0x5A000000 + int(self.token[-6:], 16)
        limit = self.box.limits.memory_bytes
        made = (
            f"shm = libc.shmget({key}, 1 << 20, 0o1666)\nq = libc.msgget({key}, 0o1666)\n"
            "buf = ctypes.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00secret')\n"
            "sent = libc.msgsnd(q, buf, 6, 0) == 0\n"
            "print(json.dumps({'made': [shm != -1, q != -1, sent]}), flush=True)\n"
            "libc.shmat.restype = ctypes.c_void_p\ntotal = 0\n"
            f"for i in range(1, {limit // (64 << 20) + 4}):\n"
            f"    s = libc.shmget({key} + i, 64 << 20, 0o1600)\n    if s == -1:\n        break\n"
            "    p = libc.shmat(s, None, 0)\n    if p in (None, ctypes.c_void_p(-1).value):\n        break\n"
            "    ctypes.memset(p, 1, 64 << 20)\n    libc.shmdt(ctypes.c_void_p(p))\n    total += 64 << 20\n"
            "print(json.dumps({'total': total}))\n"
        )
        before = _sysv_keys()
        r = self.box.run(PRELUDE + made, timeout=30.0)
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        left = f"print(json.dumps([libc.shmget({key}, 0, 0) != -1, libc.msgget({key}, 0) != -1]))"
        again = self.box.run(PRELUDE + left)
        on_host = {k for k in _sysv_keys() - before if key <= k < key + 64}
        _ipcrm(on_host)
        if not lines or not again.stdout.startswith("["):
            return {"contained": False, "detail": f"{r.status} {r.stderr[-300:]} {again.stderr[-300:]}"}
        made_all = all(lines[0]["made"])
        # killed at the memory limit (a cgroup counts shared memory too): what it made stayed within the limit
        total = 0 if r.status == "memory" else lines[-1].get("total", limit + 1)
        seen_again = json.loads(again.stdout)
        contained = made_all and not any(seen_again) and not on_host and total <= limit
        detail = f"made {lines[0]['made']}, {total} B of shm ({r.status}), next run sees {seen_again}, host {on_host}"
        return {"contained": contained, "detail": detail}

    def disk(self) -> dict:
        """Write 4 MiB files (under the file-size limit) until refused: all of them may not pass ``disk_bytes``."""
        cap = self.box.limits.disk_bytes
        code = (
            "total, i = 0, 0\nchunk = b'x' * (1 << 20)\n"
            f"while total < {2 * cap + (8 << 20)}:\n    try:\n        with open(f'f{{i}}', 'wb') as f:\n"
            "            for _ in range(4):\n                f.write(chunk)\n                f.flush()\n"
            "                total += len(chunk)\n    except OSError:\n        break\n    i += 1\n"
            "print(json.dumps({'total': total}))\n"
        )
        _, seen = _out(self.box, code, timeout=30.0)
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        return {"contained": seen["total"] <= cap, "detail": f"wrote {seen['total']} B, disk_bytes {cap}"}

    def processes(self) -> dict:
        """A ``setsid`` child left running, then a fork bomb: nothing may outlive the run, and the next runs work."""
        code = (
            f"if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', [{self.token!r}, '600'])\n    os._exit(0)\n"
            "os.wait()\nprint(json.dumps({'started': True}))\n"
        )
        _, seen = _out(self.box, code)
        escaped = _kill_all(self.token)
        mine = _own_processes()
        r2 = self.box.run("import os\nwhile True:\n    os.fork()", timeout=6.0)
        deadline = time.monotonic() + 20.0
        while os.geteuid() != 0 and len(_own_processes()) > len(mine) and time.monotonic() < deadline:
            time.sleep(0.1)  # non-root without namespaces: the bomb's last processes still count against our uid
        after = self.box.run("print('healthy')")
        contained = seen.get("started") is True and not escaped and after.stdout == "healthy\n"
        return {"contained": contained, "detail": f"escaped {escaped}, bomb {r2.status}, next {after.stdout!r}"}

    def memory(self) -> dict:
        """10 GB at once: a ``memory`` status, nothing printed."""
        r = self.box.run("b = bytearray(10 * 1024**3)\nprint(len(b))", timeout=20.0)
        return {"contained": r.status == "memory" and r.stdout == "", "detail": f"{r.status} {r.stdout!r}"}

    def network(self) -> dict:
        """Connect to a server on the host's loopback and to an outside address: both fail, nothing is accepted."""
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        code = (
            "import socket\nok = []\n"
            f"for addr in [('127.0.0.1', {port}), ('10.255.255.1', 9)]:\n"
            "    s = socket.socket()\n    s.settimeout(2)\n    try:\n        s.connect(addr)\n"
            "        ok.append(addr[0])\n    except OSError:\n        pass\n"
            "print(json.dumps({'connected': ok}))\n"
        )
        try:
            _, seen = _out(self.box, code)
            try:
                server.accept()[0].close()
                accepted = True
            except TimeoutError:
                accepted = False
        finally:
            server.close()
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        return {"contained": not seen["connected"] and not accepted, "detail": f"connected to {seen['connected']}"}

    def capability_sets(self) -> dict:
        """The code's capability sets are empty and ``no_new_privs`` is set."""
        code = (
            "st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
            "print(json.dumps({k: st[k].strip() for k in "
            "('CapEff', 'CapPrm', 'CapInh', 'CapBnd', 'CapAmb', 'NoNewPrivs')}))\n"
        )
        _, seen = _out(self.box, code)
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        caps_zero = all(int(seen[k], 16) == 0 for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"))
        return {"contained": caps_zero and seen["NoNewPrivs"] == "1", "detail": json.dumps(seen)}

    def sockets(self) -> dict:
        """Unix sockets the host listens on: in a directory of the caller's own (mode 0777, as a user's session bus
        or a docker.sock the caller's group may use), in the host's /tmp, and an abstract one: none may be
        reached."""
        addrs = [os.path.join(self.host_dir, f"{self.token}.sock"), f"/tmp/{self.token}.sock", f"\0{self.token}"]
        servers = []
        for addr in addrs:
            s = socket.socket(socket.AF_UNIX)
            s.bind(addr.encode() if addr.startswith("\0") else addr)
            if not addr.startswith("\0"):
                os.chmod(addr, 0o777)
            s.listen(4)
            s.settimeout(0.2)
            servers.append(s)
        code = (
            "import socket\nreached = []\n"
            f"for addr in {[a[::-1] for a in addrs]!r}:\n    addr = addr[::-1]\n"
            "    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(2)\n    try:\n"
            "        s.connect(addr.encode() if addr.startswith('\\0') else addr)\n"
            "        s.sendall(b'GET / HTTP/1.0\\r\\n')\n"
            "        reached.append(addr)\n    except OSError:\n        pass\n"
            "print(json.dumps({'reached': reached}))\n"
        )
        try:
            _, seen = _out(self.box, code)
            accepted = 0
            for s in servers:
                with contextlib.suppress(OSError):
                    s.accept()[0].close()
                    accepted += 1
        finally:
            for s, addr in zip(servers, addrs, strict=True):
                s.close()
                if not addr.startswith("\0"):
                    with contextlib.suppress(OSError):
                        os.unlink(addr)
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        reached = [a.replace("\0", "@") for a in seen["reached"]]
        return {"contained": not reached and not accepted, "detail": f"reached {reached}, accepted {accepted}"}

    def caller_file(self) -> dict:
        """A file only the caller may read (mode 0600, an SSH key's) and one anyone may (0644, as the project's
        files are), in a directory of the caller's outside /tmp: the code may read neither."""
        secret, public = Path(self.host_dir, f"{self.token}.key"), Path(self.host_dir, f"{self.token}.pub")
        secret.write_text("caller's key")
        secret.chmod(0o600)
        public.write_text("caller's public file")
        public.chmod(0o644)
        code = (
            f"read = []\nfor p in {[str(secret)[::-1], str(public)[::-1]]!r}:\n    try:\n"
            "        read.append(open(p[::-1]).read())\n    except OSError:\n        pass\n"
            "print(json.dumps({'read': read}))\n"
        )
        try:
            _, seen = _out(self.box, code)
        finally:
            secret.unlink()
            public.unlink()
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        return {"contained": not seen["read"], "detail": f"read {seen['read']}"}

    def project_import(self) -> dict:
        """Import the package running the sandbox (and, where it is agentgym, the CodeExec task generator: the env's
        answer key), read the sandbox's own source file, list the host interpreter's site-packages: all refused."""
        package = self.box.__class__.__module__.partition(".")[0]
        source = sys.modules[self.box.__class__.__module__].__file__
        site = [p for p in sys.path if p.endswith("site-packages")]
        code = (
            f"got = []\nfor name in [{package!r}, 'agentgym.envs.code_exec.tasks']:\n    try:\n"
            "        __import__(name)\n        got.append('import ' + name)\n    except ImportError:\n        pass\n"
            f"for p in {[source, *site]!r}:\n    try:\n"
            "        if open(p).read(1) if os.path.isfile(p) else os.listdir(p):\n            got.append(p)\n"
            "    except OSError:\n        pass\n"
            "print(json.dumps({'got': got}))\n"
        )
        _, seen = _out(self.box, code)
        if "error" in seen:
            return {"contained": False, "detail": seen["error"]}
        return {"contained": not seen["got"], "detail": f"got {seen['got']}"}

    def fork_memory(self) -> dict:
        """Four children each touch 45% of the memory limit and stay: no more than the limit may be held at once
        (a per-process limit lets each hold its share: 1.8x the limit)."""
        limit = self.box.limits.memory_bytes
        size = int(limit * 0.45) // 4096 * 4096
        code = f"""
import signal, time
r, w = os.pipe()
kids = []
for i in range(4):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            b = bytearray({size})
            for j in range(0, {size}, 4096):
                b[j] = 1
            os.write(w, str(os.getpid()).encode() + b" ")
        except MemoryError:
            pass
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
os.close(w)
deadline = time.monotonic() + 15
done, held = set(), []
while time.monotonic() < deadline and len(done) < len(kids):
    for k in kids:
        if k not in done and os.waitpid(k, os.WNOHANG) != (0, 0):
            done.add(k)
    time.sleep(0.2)
    os.set_blocking(r, False)
    try:
        held += [int(p) for p in os.read(r, 4096).split()]
    except BlockingIOError:
        pass
    os.set_blocking(r, True)
    if len(held) + len(done) >= len(kids):
        break
time.sleep(1)
alive = [k for k in kids if k not in done and os.waitpid(k, os.WNOHANG) == (0, 0)]
print(json.dumps({{"held": len([k for k in held if k in alive]) * {size}, "kids": len(kids)}}))
for k in kids:
    try:
        os.kill(k, signal.SIGKILL)
    except OSError:
        pass
"""
        r, seen = _out(self.box, code, timeout=40.0)
        if "error" in seen:
            if r.status == "memory":  # the whole run was stopped at the limit
                return {"contained": True, "detail": f"stopped: {r.stderr[-200:]}"}
            return {"contained": False, "detail": seen["error"]}
        return {"contained": seen["held"] <= limit, "detail": f"held {seen['held']} B at once, limit {limit}"}

    def all(self) -> dict[str, dict]:
        runs: dict[str, Callable[[], dict]] = {
            "unmount": self.unmount,
            "shared_dirs": self.shared_dirs,
            "sysv_ipc": self.sysv_ipc,
            "disk": self.disk,
            "processes": self.processes,
            "memory": self.memory,
            "network": self.network,
            "capability_sets": self.capability_sets,
            "sockets": self.sockets,
            "caller_file": self.caller_file,
            "project_import": self.project_import,
            "fork_memory": self.fork_memory,
        }
        return {name: run() for name, run in runs.items()}


def expected(caps: dict) -> dict[str, bool]:
    """Which attacks ``caps`` (``Capabilities`` as a dict) promise to contain."""
    return {
        "unmount": caps["mounts_locked"] and caps["private_tmp"] and caps["read_only_root"],
        "shared_dirs": caps["private_tmp"],
        "sysv_ipc": caps["ipc_isolated"],
        "disk": caps["disk_bytes"] is not None,
        "processes": caps["process_containment"] in ("pid-namespace", "run-uid", "container"),
        "network": caps["network_isolated"],
        "capability_sets": caps["no_capabilities"] and caps["no_new_privs"],
        "sockets": caps["network_isolated"],
        "caller_file": caps["private_root"],
        "project_import": caps["private_root"],
        "fork_memory": caps["memory_scope"] != "process",
    }


def make_box(sandbox: Any, backend: str, limits: Any) -> Any:
    """A sandbox of module ``sandbox`` for ``backend`` (``subprocess``, ``pooled``, ``docker``, ``-nons``: without
    namespaces)."""
    namespaces = not backend.endswith("-nons")
    kind = backend.removesuffix("-nons")
    if kind == "subprocess":
        return sandbox.SubprocessSandbox(limits, namespaces=namespaces)
    if kind == "pooled":
        return sandbox.PooledSandbox(workers=1, limits=limits, namespaces=namespaces)
    return sandbox.DockerSandbox(limits=limits)


def attack(box: Any, host_dir: str) -> dict:
    """``{"caps": ..., "attacks": ...}`` for ``box``."""
    return {"caps": dataclasses.asdict(box.capabilities()), "attacks": Attacks(box, host_dir).all()}


def main() -> None:
    pkg_parent, host_dir, *backends = sys.argv[1:]
    sys.path.insert(0, pkg_parent)
    sandbox = importlib.import_module("sbxcopy")
    limits = sandbox.Limits(memory_bytes=512 << 20, processes=64, disk_bytes=16 << 20)
    out = {}
    for backend in backends:
        box = make_box(sandbox, backend, limits)
        try:
            out[backend] = attack(box, host_dir)
        finally:
            box.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
