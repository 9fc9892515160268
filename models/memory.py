"""Keep freed memory in the process for the next request instead of handing it back to the OS.

A 4500-query answer writes tens of MB of logits, and every inference block allocates and frees
MB-sized intermediates. glibc serves large blocks with fresh mmaps and trims the heap's free top,
so each request faulted its memory back in page by page: ~14 ms for one request's 37 MB of logits
on the 2-core CPU, and 7-19 % of transformer-dva's cold path (in-process predict and the service's
chunked summarize alike). Telling malloc to keep what it frees (the role jemalloc or tcmalloc play
in CPU inference servers) lets later requests reuse those pages: after a few requests an answer
takes no page faults. The cost is memory: the process holds about its peak, and a little more,
since glibc's aligned allocations do not always fit a freed block of the same size
(bench/memory_soak.py measures both settings on the same stream of mixed requests). Free space
at the top of the heap above TRIM_BYTES still goes back to the OS.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
# Free space at the top of the heap above this goes back to the OS.
TRIM_BYTES = 1 << 30

_applied: bool | None = None


def retain_freed_memory() -> bool:
    """Serve every allocation from the heap and keep up to TRIM_BYTES of freed top; once per process.

    Returns whether the setting is in force (False off glibc, e.g. on musl or macOS, where the
    platform's allocator is left as it is)."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        log.info("allocator left as it is: not glibc (%s)", platform.libc_ver()[0] or platform.system())
        return _applied
    libc = ctypes.CDLL(None)  # the process's own symbols: glibc's mallopt, without searching for the library
    _applied = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES))
    log.info("allocator: freed memory kept for reuse (trim above %d MiB): %s", TRIM_BYTES >> 20, _applied)
    return _applied
