"""The sandboxed side: isolate this process (namespaces, a root of its own, no privileges, a cgroup, rlimits), then
run the code.

Standard library only, started with ``python -I -S _child.py --run SPEC`` (one call, ``SubprocessSandbox``) or
``python -I -S _child.py --serve FD`` (a fork server, ``PooledSandbox``). Either way a supervisor process (as root,
first in a cgroup of the run's own) enters new mount, network, IPC and PID namespaces (``unshare(2)``; as non-root
inside a new user namespace) and forks the code's process, which is PID 1 of its namespace: when it exits or is
killed, the kernel kills every process it left behind. The supervisor exits with the code's wait status (a signal is
re-raised). Where any step of the isolation fails, the code never runs: the process that failed writes ``REFUSED``
and why, and exits ``ISOLATION_FAILED``.

Before the code runs, its process: ``pivot_root``s into a new root (``_private_root``: the system directories and the
standard library read-only, site-packages masked, a /dev of harmless devices, a fresh /proc whose host-wide files
read empty, a working directory on a tmpfs of ``disk_bytes``), makes every mount but the working directory read-only
(``mount_setattr(2)``, recursive); drops to the run's own uid (as root); empties its bounding, ambient, permitted and
effective capability sets and sets ``no_new_privs``. A process without ``CAP_SYS_ADMIN`` cannot unmount or remount,
and one that makes a user namespace of its own to regain it gets the mounts locked by the kernel (they came from a
more privileged namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
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
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, MNT_DETACH = 1, 2
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
SYS_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}  # the same number on both (the unified syscall table)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: Where the new root is assembled before ``pivot_root`` (an empty tmpfs is mounted over it), and where the host's
#: old root is put before it is unmounted.
NEW_ROOT, OLD_ROOT = "/tmp", "/.old-root"
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
#: Devices of the new root's /dev, bound from the host's.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: Files of /proc that describe the whole host (its load, memory, CPU time, uptime, devices): read empty in the
#: sandbox.
HOST_PROC_FILES = ("stat", "meminfo", "loadavg", "uptime", "vmstat", "diskstats", "swaps", "zoneinfo", "buddyinfo",
                   "interrupts", "softirqs", "schedstat", "pagetypeinfo", "slabinfo", "partitions", "key-users",
                   "timer_list", "sched_debug")  # fmt: skip
#: The prefix of every message by which the sandbox refuses to run code it could not isolate (exit status
#: ``ISOLATION_FAILED``); the host recognises it.
REFUSED = "sandbox: cannot isolate the run: "
ISOLATION_FAILED = 125


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(libc: ctypes.CDLL, src: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = lambda s: s.encode() if s else None
    if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _enter_namespaces(libc: ctypes.CDLL, memory_bytes: int) -> None:
    """New mount + network + IPC + PID namespaces (PID applies to children); as non-root through a user namespace.
    The new IPC namespace's System V limits are set so all its shared memory fits in ``memory_bytes``. ``OSError``
    naming what the kernel refused."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
    if os.geteuid() != 0:  # the caller is root of the new user namespace (it owns the IPC namespace's limits)
        uid, gid = os.geteuid(), os.getegid()
        extra = sorted(set(os.getgroups()) - {gid})
        if extra:  # an unprivileged user namespace keeps them (setgroups is denied there): they cannot be shed
            raise OSError(errno.EPERM, f"the caller's supplementary groups {extra} cannot be shed without privileges "
                          "(run it as a user without supplementary groups, or as root)")  # fmt: skip
        flags |= CLONE_NEWUSER
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWPID|CLONE_NEWIPC"
                      f"{'|CLONE_NEWUSER' if flags & CLONE_NEWUSER else ''}): {os.strerror(err)}")  # fmt: skip
    if flags & CLONE_NEWUSER:
        _map_ids(uid, gid, 0, 0)
    ipc = {
        "kernel/shmmax": memory_bytes,
        "kernel/shmall": max(1, memory_bytes // os.sysconf("SC_PAGE_SIZE")),
        "kernel/shmmni": 64,
        "kernel/msgmni": 64,
        "fs/mqueue/queues_max": 16,
    }
    for name, value in ipc.items():  # best effort: the queues and segments die with the namespace anyway
        with contextlib.suppress(OSError), open(f"/proc/sys/{name}", "w") as f:
            f.write(str(value))


def _map_ids(outer_uid: int, outer_gid: int, uid: int, gid: int) -> None:
    """Map ``uid``/``gid`` of the user namespace just entered to ``outer_uid``/``outer_gid`` of its parent."""
    with contextlib.suppress(OSError):
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        for name, inner, outer in (("uid_map", uid, outer_uid), ("gid_map", gid, outer_gid)):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(f"{inner} {outer} 1")


def _nest_user(libc: ctypes.CDLL, uid: int, gid: int) -> None:
    """As non-root, the code's process leaves the supervisor's user namespace (where it is uid 0) for one of its
    own where it has the caller's uid and gid again. That namespace owns none of the others (mount, PID, IPC,
    network): even a capability there could not touch them."""
    if libc.unshare(CLONE_NEWUSER) == 0:
        _map_ids(0, 0, uid, gid)


def _read_tree(workdir: str) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under ``workdir``, by relative path, parents first."""
    out: dict[str, bytes | None] = {}
    for root, dirs, names in os.walk(workdir):
        rel = os.path.relpath(root, workdir)
        for d in sorted(dirs):
            out[os.path.normpath(os.path.join(rel, d))] = None
        for n in sorted(names):
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.normpath(os.path.join(rel, n))] = f.read()
    return out


def _readonly_mounts(libc: ctypes.CDLL) -> None:
    """Make every mount in this namespace read-only: one recursive ``mount_setattr(2)`` where the kernel has it
    (5.12+), else a read-only bind remount of each mount point (keeping the flags it has)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64)]
        _fields_ += [("userns_fd", ctypes.c_uint64)]

    nr = SYS_MOUNT_SETATTR.get(os.uname().machine)
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if nr is not None and libc.syscall(nr, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), 32) == 0:
        return
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].encode().decode("unicode_escape") for line in f]
    keep = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # MS_NOATIME, MS_NODIRATIME, MS_RELATIME
    for point in points:
        with contextlib.suppress(OSError):
            flags = os.statvfs(point).f_flag & keep
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)


def _private_root(libc: ctypes.CDLL, spec: dict) -> str:
    """Replace the file system the code sees by a new root of its own (``pivot_root(2)``) and return its working
    directory. The new root is a small tmpfs holding: the system directories of ``spec["root"]["bind"]`` (``/usr``,
    the interpreter's standard library where it lies elsewhere: read-only bind mounts, the host's symlinks such as
    ``/bin -> usr/bin`` copied as symlinks), empty directories over ``spec["root"]["mask"]`` (every site-packages
    and dist-packages: only the standard library imports), a ``/dev`` of the harmless devices, a fresh ``/proc``
    whose host-wide files (``HOST_PROC_FILES``) read empty, and the working directory ``WORKDIR``: a tmpfs of
    ``disk_bytes`` holding the run's files. Nothing else of the host is there: not the project, the virtualenv,
    ``$HOME``, ``/run`` or any socket, nor any file of the caller's. Every mount but the working directory is
    read-only. ``OSError`` when a step fails: the run must not go on half isolated."""
    tree = _read_tree(spec["workdir"])
    uid = spec.get("uid")
    root_spec = spec["root"]
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # Bind sources are opened first: the new root is mounted over /tmp, which may hold one of them.
    sources = {}
    try:
        for path in root_spec["bind"]:
            with contextlib.suppress(FileNotFoundError):
                sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        links = {p: os.readlink(p) for p in root_spec["links"] if os.path.islink(p)}
        new = NEW_ROOT
        _mount(libc, "tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=512,mode=755")
        for path, target in links.items():
            os.symlink(target, new + path)
        for path, fd in sources.items():
            dest = new + path
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(dest, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
                open(dest, "wb").close()
            _mount(libc, f"/proc/self/fd/{fd}", dest, None, MS_BIND | MS_REC)
    finally:
        for fd in sources.values():
            os.close(fd)
    for path in root_spec["mask"]:
        if os.path.isdir(new + path):
            _mount(libc, "tmpfs", new + path, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,nr_inodes=1,mode=755")
    _make_dev(libc, new)
    where = spec.get("fixed_workdir") or "/tmp/work"
    for d in ("/proc", "/etc", where):
        os.makedirs(new + d, mode=0o755, exist_ok=True)
    # A fresh /proc (of the run's PID namespace) is mounted while the host's is still in sight: the kernel lets a
    # user namespace mount a procfs only where one is fully visible already.
    _mount(libc, "proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in HOST_PROC_FILES:
        if os.path.exists(f"{new}/proc/{name}"):
            _mount(libc, "/dev/null", f"{new}/proc/{name}", None, MS_BIND)
    os.mkdir(new + OLD_ROOT)
    os.chdir(new)
    if libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", OLD_ROOT[1:].encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    os.chdir("/")
    if libc.umount2(OLD_ROOT.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount the host's root: {os.strerror(err)}")
    os.rmdir(OLD_ROOT)
    _readonly_mounts(libc)
    disk = int(spec.get("disk_bytes") or 64 << 20)
    owner = f",uid={uid},gid={uid}" if uid else ""
    _mount(libc, "tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk},nr_inodes=4096,mode=700{owner}")
    for rel, data in tree.items():  # as the run's uid owns the tmpfs root, it owns what is written here too
        path = os.path.join(where, rel)
        if data is None:
            os.mkdir(path, 0o755)
        else:
            with open(path, "wb") as f:
                f.write(data)
        if uid:
            os.lchown(path, uid, uid)
    return where


def _make_dev(libc: ctypes.CDLL, new: str) -> None:
    """``/dev`` of the new root: the host's ``DEVICES`` bound in, the usual symlinks, an empty ``/dev/shm``."""
    os.makedirs(f"{new}/dev/shm", mode=0o755)
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{new}/dev/{name}", "wb").close()
            _mount(libc, f"/dev/{name}", f"{new}/dev/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{new}/dev/{name}")


def _drop_privileges(libc: ctypes.CDLL, uid: int | None) -> None:
    """Become ``uid`` (as root) and hold no capability: bounding and ambient sets emptied (so no ``execve`` can
    regain one), permitted, effective and inheritable zeroed, ``no_new_privs`` set (setuid and file capabilities are
    ignored). Raises ``OSError`` where a step that must hold fails."""
    for cap in range(64):  # EINVAL past the last capability; EPERM without CAP_SETPCAP (then there is none to drop)
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if os.geteuid() == 0 and uid:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    if libc.capset(ctypes.byref(Header(LINUX_CAPABILITY_VERSION_3, 0)), ctypes.byref((Data * 2)())) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"no_new_privs: {os.strerror(err)}")


def _die_with_parent(libc: ctypes.CDLL, alive_fd: int) -> None:
    """SIGKILL when the supervisor dies (set after every credential change, which clears it); if it already died,
    its end of the ``alive_fd`` pipe is closed: exit now."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if select.select([alive_fd], [], [], 0)[0]:
        os._exit(137)


def _isolate(spec: dict, libc: ctypes.CDLL, namespaces: bool, alive_fd: int) -> tuple[str, str]:
    """In the code's process: finish isolating it; the code's source and its working directory. Raises where a step
    fails (the caller refuses to run the code then)."""
    _die_with_parent(libc, alive_fd)
    workdir = spec["workdir"]
    with open(os.path.join(workdir, "main.py"), encoding="utf-8") as f:
        source = f.read()
    if namespaces:
        workdir = _private_root(libc, spec)
        sys.path[:] = [workdir, *spec["root"]["path"]]  # as `python main.py`: its directory, then the stdlib
    os.chdir(workdir)
    if namespaces and spec.get("outer_ids"):
        _nest_user(libc, *spec["outer_ids"])
    _drop_privileges(libc, spec.get("uid"))
    _die_with_parent(libc, alive_fd)
    os.environ.clear()
    os.environ["PATH"] = "/usr/bin:/bin"
    for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    os.closerange(3, 65536)
    for name, value in spec["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    return source, workdir


def _refuse(why: object) -> None:
    """Say why the run cannot be isolated and exit with ``ISOLATION_FAILED`` (the code never runs)."""
    with contextlib.suppress(BaseException):
        os.write(2, f"{REFUSED}{why}\n".encode("utf-8", "replace"))
    os._exit(ISOLATION_FAILED)


def _run_code(spec: dict, libc: ctypes.CDLL, namespaces: bool, alive_fd: int) -> None:
    """In the code's process: finish isolating, run ``workdir/main.py`` as ``__main__``, exit (never returns)."""
    try:
        source, workdir = _isolate(spec, libc, namespaces, alive_fd)
    except BaseException as e:
        _refuse(e)
    status = 1
    try:
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


class RunCgroup:
    """The run's own control group (cgroup v1 memory + pids hierarchies, or a v2 directory): its memory and process
    caps hold for all its processes together. The supervisor moves itself in before it forks the code (so every
    process of the run is in it) and out again before removing it. It holds the directories open: the code's
    ``pivot_root`` moves the supervisor's root too, and /sys/fs/cgroup is not in the new one."""

    def __init__(self, spec: dict) -> None:
        self.version = spec["version"]
        self.name = spec["name"]  # fresh per run (tools/sandbox/local.py, _spec)
        self.parents = [os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for p in spec["parents"]]
        self.dirs: list[int] = []
        for parent in self.parents:
            os.mkdir(self.name, 0o700, dir_fd=parent)
            self.dirs.append(os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent))
        memory, pids = spec["memory_bytes"], spec["processes"] + 1  # the supervisor is in it too
        if self.version == 1:  # parents: [memory hierarchy, pids hierarchy]
            self._write(self.dirs[0], "memory.limit_in_bytes", memory)
            with contextlib.suppress(OSError):  # swap accounting may be off; then there is no swap to count
                self._write(self.dirs[0], "memory.memsw.limit_in_bytes", memory)
            self._write(self.dirs[1], "pids.max", pids)
        else:
            self._write(self.dirs[0], "memory.max", memory)
            with contextlib.suppress(OSError):
                self._write(self.dirs[0], "memory.swap.max", 0)
            self._write(self.dirs[0], "pids.max", pids)
        for d in self.dirs:
            self._write(d, "cgroup.procs", os.getpid())

    @staticmethod
    def _write(dir_fd: int, name: str, value: int) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the run's memory cap."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.dirs[0])
            with open(fd) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def remove(self) -> None:
        """Leave the group and remove it (its processes died with the PID namespace; they may take a moment)."""
        for parent in self.parents:
            with contextlib.suppress(OSError):
                self._write(parent, "cgroup.procs", os.getpid())
        for parent, d in zip(self.parents, self.dirs, strict=True):
            os.close(d)
            for _ in range(200):
                try:
                    os.rmdir(self.name, dir_fd=parent)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            os.close(parent)


def supervise(spec: dict) -> None:
    """Enter namespaces (and the run's cgroup), fork the code's process, wait for it, exit with its status (never
    returns). Where isolation cannot be had the code never runs: exit ``ISOLATION_FAILED`` and a line saying why."""
    code_pid: list[int] = []

    def stop(signum: int, frame: object) -> None:  # SIGTERM: kill the code (its namespace goes with it), then reap
        if not code_pid:
            os._exit(128 + signal.SIGKILL)
        os.kill(code_pid[0], signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    cgroup = None
    try:
        libc = _libc()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.geteuid() != 0:
            spec["outer_ids"] = [os.geteuid(), os.getegid()]
        if spec.get("cgroup"):
            cgroup = RunCgroup(spec["cgroup"])
        namespaces = spec["namespaces"]
        if namespaces:
            _enter_namespaces(libc, spec["limits"]["RLIMIT_AS"])
        alive_r, alive_w = os.pipe()
        pid = os.fork()
    except BaseException as e:
        if cgroup is not None:
            cgroup.remove()
        _refuse(e)
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
    if cgroup is not None:
        oom = cgroup.oom_kills()
        cgroup.remove()
        if oom:  # the run's processes together went over its memory: a MemoryError, as one process's would be
            limit = spec["cgroup"]["memory_bytes"]
            os.write(2, f"\nMemoryError: the run's processes together went over {limit} bytes\n".encode())
            os._exit(1)
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
                with contextlib.suppress(ProcessLookupError):  # what the code left in its group (no namespaces)
                    os.killpg(pid, signal.SIGKILL)
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
