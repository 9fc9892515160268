"""models.memory: freed memory is reused by the next request instead of being faulted back in."""
import platform
import subprocess
import sys

import pytest

# Faults taken by touching a freshly allocated 64 MiB tensor after an equal one was freed.
_PROBE = """
import resource, sys, torch
from models.memory import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()
def touch():
    t = torch.empty(16 << 20)  # 64 MiB of float32
    t.fill_(1.0)
    return t
del_me = touch(); del del_me
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
keep = touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_second_allocation_reuses_pages_only_when_retained():
    pages = (64 << 20) // 4096
    assert _faults("default") > pages // 2  # the control: glibc hands the block back and faults it in again
    assert _faults("retain") < pages // 20


@glibc_only
def test_applies_once_and_reports_it():
    from models.memory import retain_freed_memory

    assert retain_freed_memory() is True
    assert retain_freed_memory() is True
