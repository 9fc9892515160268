"""models.memory: memory the models free stays in the process for the next request."""

import platform
import subprocess
import sys

import pytest

# How much of a touched 64 MiB tensor's memory the process hands back to the OS when it is freed, in MiB.
_PROBE = """
import sys, torch
from models.memory import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()
def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
t = torch.empty(16 << 20)  # 64 MiB of float32
t.fill_(1.0)
before = resident_mib()
del t
print(before - resident_mib())
"""

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def _returned_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_freed_block_stays_resident_only_when_retained():
    assert _returned_mib("default") > 60  # the control: glibc unmaps the block, the next request faults it in again
    assert _returned_mib("retain") < 4


@glibc_only
def test_applies_once_and_reports_it():
    from models.memory import retain_freed_memory

    assert retain_freed_memory() is True
    assert retain_freed_memory() is True
