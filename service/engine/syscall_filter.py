"""A seccomp filter for the upload reader: no sockets, no exec, no tracing, even for code it did not mean to run.

Why: the reader (service.engine.sandbox_zygote) already runs as `nobody` with no processes and no
file writes, but a subverted reader could still open a socket (an unauthenticated Redis on the
host, say) or replace itself with another program by exec. This filter makes those system calls
fail with EPERM for the rest of the process's life. It is a classic-BPF program handed to
prctl(PR_SET_SECCOMP) through ctypes (no extra package); it needs no-new-privileges, which the
reader sets first. Only x86-64 and aarch64 are known; elsewhere `install` says so and does nothing.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_X32_SYSCALL_BIT = 0x40000000
# arch -> (AUDIT_ARCH value, denied system call numbers): socket, socketpair, execve, execveat, ptrace,
# process_vm_readv, process_vm_writev
ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "socketpair": 53,
            "execve": 59,
            "execveat": 322,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "socketpair": 199,
            "execve": 221,
            "execveat": 281,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
        },
    ),
}


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program(arch: int, denied: list[int]) -> bytes:
    """seccomp_data: nr at offset 0, arch at 4. Wrong arch: kill; a denied (or x32) call: EPERM; else allow."""

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    errno_ret = _RET_ERRNO | errno.EPERM
    parts = [
        op(_LD_W_ABS, 4),
        op(_JEQ_K, arch, 1, 0),
        op(_RET_K, _RET_KILL_PROCESS),
        op(_LD_W_ABS, 0),
        op(_JGE_K, _X32_SYSCALL_BIT, len(denied) + 1, 0),
    ]
    parts += [op(_JEQ_K, number, len(denied) - i, 0) for i, number in enumerate(denied)]
    parts += [op(_RET_K, _RET_ALLOW), op(_RET_K, errno_ret)]
    return b"".join(parts)


def install() -> bool:
    """Deny the calls in ARCHES for this process (and any it could start); False where the arch is unknown."""
    known = ARCHES.get(platform.machine())
    if known is None:
        return False
    arch, calls = known
    code = _program(arch, sorted(calls.values()))
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _Filter(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True
