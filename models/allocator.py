"""Keep freed memory in the process instead of handing it back to the OS after every tensor.

glibc serves blocks over a (dynamic, at most 32 MiB) threshold with fresh mmap pages and
unmaps them on free, so a CPU forward pass that allocates a few MB per layer and block pays a
page fault per 4 KiB page, every time: on the shipped fast model that was about a fifth of a
4500-query predict. Raising the mmap threshold to its maximum and the trim threshold far above
our working set makes those blocks come from the heap and stay mapped (RSS then follows the
high-water mark, which bounded-chunk code keeps small anyway). PyTorch's CPU tuning guide gets
the same effect from jemalloc or tcmalloc; this needs no extra library.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt parameter numbers from glibc's malloc.h
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Apply the thresholds to this process; False (and nothing changed) off glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    log.debug("malloc thresholds %s", "set" if ok else "refused")
    return ok
