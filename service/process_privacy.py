"""Keep a service process's memory and environment (which holds the API keys) from its own user's other processes.

Why: in the container every process runs as the same unprivileged user, so without this any of
them, including one an attacker got code into, could read /proc/<server>/environ or attach a
debugger. PR_SET_DUMPABLE 0 makes the kernel treat the process like a setuid one: its /proc files
belong to root, same-user ptrace is refused, and it leaves no core dump. Root can still inspect it.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)
_PR_SET_DUMPABLE, _PR_GET_DUMPABLE = 4, 3


def forbid_inspection() -> bool:
    """Mark this process not dumpable; False (logged) where prctl is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        log.warning("could not mark the process non-dumpable: its environment stays readable by its user")
        return False


def inspectable() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 1
