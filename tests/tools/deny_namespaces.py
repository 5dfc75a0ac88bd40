"""``python deny_namespaces.py CMD ARG...``: run CMD where the kernel refuses new namespaces, as Docker's default
seccomp profile (or an AppArmor-restricted user namespace) does: a seccomp filter makes ``unshare``, ``setns`` and
a ``clone`` asking for a new namespace fail with EPERM (``clone3`` with ENOSYS, so the C library falls back to
``clone``). Standard library only; x86_64 and aarch64."""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

ARCH = {
    "x86_64": (0xC000003E, 272, 308, 56),
    "aarch64": (0xC00000B7, 97, 268, 220),
}  # audit arch, unshare, setns, clone
CLONE3 = 435
CLONE_NEW_ANY = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
LD_W_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def deny_namespaces() -> None:
    arch, unshare, setns, clone = ARCH[platform.machine()]
    eperm, enosys = ERRNO | 1, ERRNO | 38
    prog = [
        (LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ, 1, 0, arch),
        (RET, 0, 0, ALLOW),
        (LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (JEQ, 7, 0, unshare),  # -> deny
        (JEQ, 6, 0, setns),  # -> deny
        (JEQ, 6, 0, CLONE3),  # -> enosys
        (JEQ, 0, 3, clone),  # not clone -> allow
        (LD_W_ABS, 0, 0, 16),  # seccomp_data.args[0], low 32 bits (the flags)
        (JSET, 2, 0, CLONE_NEW_ANY),  # -> deny
        (RET, 0, 0, ALLOW),
        (RET, 0, 0, ALLOW),
        (RET, 0, 0, eperm),
        (RET, 0, 0, enosys),
    ]
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")


if __name__ == "__main__":
    deny_namespaces()
    os.execv(sys.argv[1], sys.argv[1:])
