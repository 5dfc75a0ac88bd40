"""The sandboxed side: isolate this process (namespaces, private /tmp, no privileges, rlimits), then run the code.

Standard library only, started with ``python -I _child.py --run SPEC`` (one call, ``SubprocessSandbox``) or
``python -I _child.py --serve FD`` (a fork server, ``PooledSandbox``). Either way a supervisor process enters new
mount, network and PID namespaces (``unshare(2)``) and forks the code's process, which is PID 1 of its namespace:
when it exits or is killed, the kernel kills every process it left behind. The supervisor exits with the code's
wait status (a signal is re-raised).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback
import types

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, MNT_DETACH = 1, 2
MASKED = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable places: replaced by empty read-only tmpfs


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(libc: ctypes.CDLL, src: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = lambda s: s.encode() if s else None
    if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _enter_namespaces(libc: ctypes.CDLL) -> bool:
    """New mount + network + PID namespaces (PID applies to children); as non-root through a user namespace."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID
    if os.geteuid() == 0:
        return libc.unshare(flags) == 0
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(flags | CLONE_NEWUSER) != 0:
        return False
    try:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        for name, ident in (("uid_map", uid), ("gid_map", gid)):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(f"{ident} {ident} 1")
    except OSError:
        pass
    return True


def _private_fs(libc: ctypes.CDLL, workdir: str, fixed: str | None) -> str:
    """Fresh /proc; /tmp, /var/tmp, /dev/shm empty and read-only, except ``workdir`` bound back in read-write, at the
    path ``fixed`` when that lies in a masked directory (every run then sees the same path). Returns where the
    workdir is. Each step that the kernel refuses is skipped (``capabilities()`` detects what took effect)."""
    try:
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    except OSError:
        return workdir
    with contextlib.suppress(OSError):
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    wfd = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    # The interpreter's prefixes may lie under a masked directory (a virtualenv under /tmp): bound back, read-only.
    kept = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in sorted({sys.prefix, sys.base_prefix}) if _masked(p)}
    masked: list[str] = []
    where = workdir
    try:
        for d in MASKED:
            if os.path.isdir(d) and not os.path.islink(d):
                _mount(libc, "tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
                masked.append(d)
        if fixed and any(fixed.startswith(d + "/") for d in masked):
            where = fixed
        os.makedirs(where, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{wfd}", where, None, MS_BIND)
        for path, fd in kept.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        for d in masked:
            _mount(libc, None, d, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        for d in reversed(masked):  # undo, so the workdir and the interpreter are reachable again
            libc.umount2(d.encode(), MNT_DETACH)
        where = workdir
    finally:
        os.close(wfd)
        for fd in kept.values():
            os.close(fd)
    _expose_python(libc)
    return where


def _masked(path: str) -> bool:
    """Whether ``path`` lies in one of the directories replaced by an empty tmpfs."""
    return any(path == d or path.startswith(d + "/") for d in MASKED)


def _closed_ancestor(path: str) -> str | None:
    """The top-most directory on ``path`` that others cannot traverse (as ``/root`` holding a pyenv Python)."""
    parts = os.path.abspath(path).split("/")[1:]
    for i in range(1, len(parts)):
        d = "/" + "/".join(parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return d
    return None


def _expose_python(libc: ctypes.CDLL) -> None:
    """Where the interpreter lies under a directory closed to others (``/root/.pyenv``), that directory is replaced
    by an empty read-only tmpfs holding only the interpreter's prefixes: the code (an unprivileged uid) can import
    the standard library and site-packages, and sees nothing else of it."""
    binds: dict[str, list[tuple[str, int]]] = {}
    for root in sorted({sys.base_prefix, sys.prefix}):
        closed = _closed_ancestor(root)
        if closed is not None:
            binds.setdefault(closed, []).append((root, os.open(root, os.O_PATH | os.O_DIRECTORY)))
    for closed, roots in binds.items():
        try:
            _mount(libc, "tmpfs", closed, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
            try:
                for root, fd in roots:
                    os.makedirs(root, exist_ok=True)
                    _mount(libc, f"/proc/self/fd/{fd}", root, None, MS_BIND | MS_REC)
                _mount(libc, None, closed, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
            except OSError:
                libc.umount2(closed.encode(), MNT_DETACH)
        except OSError:
            pass
        finally:
            for _, fd in roots:
                os.close(fd)


def _die_with_parent(libc: ctypes.CDLL, alive_fd: int) -> None:
    """SIGKILL when the supervisor dies (set after every credential change, which clears it); if it already died,
    its end of the ``alive_fd`` pipe is closed: exit now."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if select.select([alive_fd], [], [], 0)[0]:
        os._exit(137)


def _run_code(spec: dict, libc: ctypes.CDLL, namespaces: bool, alive_fd: int) -> None:
    """In the code's process: finish isolating, run ``workdir/main.py`` as ``__main__``, exit (never returns)."""
    status = 1
    try:
        _die_with_parent(libc, alive_fd)
        workdir = spec["workdir"]
        with open(os.path.join(workdir, "main.py"), encoding="utf-8") as f:
            source = f.read()
        if namespaces:
            workdir = _private_fs(libc, workdir, spec.get("fixed_workdir"))
        os.chdir(workdir)
        uid = spec.get("uid")
        if os.geteuid() == 0 and uid:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            _die_with_parent(libc, alive_fd)
        os.environ.clear()
        os.environ["PATH"] = "/usr/bin:/bin"
        for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        limits = spec["limits"]
        os.closerange(3, 65536)
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), (value, value))
        sys.argv = ["main.py"]
        main = types.ModuleType("__main__")
        main.__file__ = os.path.join(workdir, "main.py")
        sys.modules["__main__"] = main
        status = 0
        exec(compile(source, "main.py", "exec"), main.__dict__)
    except SystemExit as e:
        code = e.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int | None):
            print(code, file=sys.stderr)
    except MemoryError:
        status = 1
        os.write(2, b"MemoryError\n")
    except BaseException as e:
        status = 1
        try:  # the traceback starts at the code (main.py): this file's frame is not the code's business
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next
            traceback.print_exception(type(e), e, tb)
        except BaseException:
            os.write(2, b"sandbox: the code raised\n")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(status & 0xFF)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (the run's own, unused by anything else): a helper becomes ``uid`` and
    calls ``kill(-1, SIGKILL)`` until none is left."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(10000):
                os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            os._exit(0)
        except BaseException:
            pass
        os._exit(1)
    os.waitpid(pid, 0)


def supervise(spec: dict) -> None:
    """Enter namespaces, fork the code's process, wait for it, exit with its status (never returns)."""
    code_pid: list[int] = []

    def stop(signum: int, frame: object) -> None:  # SIGTERM: kill the code (its namespace goes with it), then reap
        if not code_pid:
            os._exit(128 + signal.SIGKILL)
        os.kill(code_pid[0], signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    try:
        libc = _libc()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        namespaces = spec["namespaces"] and _enter_namespaces(libc)
        alive_r, alive_w = os.pipe()
        pid = os.fork()
    except BaseException:
        traceback.print_exc()
        os._exit(125)
    if pid == 0:
        os.close(alive_w)
        _run_code(spec, libc, namespaces, alive_r)
    code_pid.append(pid)
    os.close(alive_r)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if not namespaces and spec.get("uid"):  # no PID namespace: kill whatever the code left, by its own uid
        _kill_uid(spec["uid"])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _stop(pid: int) -> None:
    """Ask a supervisor (an unreaped child: its pid cannot have been reused) to kill the code and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def serve(fd: int) -> None:
    """Fork server on a SOCK_SEQPACKET socket: each request (JSON spec + stdin/stdout/stderr fds) forks a supervisor;
    replies ``{"pid": ...}`` then ``{"status": wait_status}``; a ``kill`` message SIGKILLs the supervisor."""
    sock = socket.socket(fileno=fd)
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 65536, 3)
        if not msg:
            return
        if not fds:  # a late "kill" for a run that already ended
            continue
        spec = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.setsid()
            for target, src in enumerate(fds):
                os.dup2(src, target)
            for src in fds:
                if src > 2:
                    os.close(src)
            supervise(spec)
        for src in fds:
            os.close(src)
        pidfd = os.pidfd_open(pid)
        sock.send(json.dumps({"pid": pid}).encode())
        stopped_at = None
        while True:
            ready, _, _ = select.select([sock, pidfd], [], [], 1.0 if stopped_at else None)
            if stopped_at and not ready and time.monotonic() - stopped_at > 2.0:  # the supervisor is stuck
                os.killpg(pid, signal.SIGKILL)
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                os.close(pidfd)
                sock.send(json.dumps({"status": status}).encode())
                break
            if not ready:
                continue
            if not sock.recv(64):  # the caller went away: kill and quit
                _stop(pid)
                os.waitpid(pid, 0)
                return
            _stop(pid)
            stopped_at = time.monotonic()


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        supervise(json.loads(sys.argv[2]))
