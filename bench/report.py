"""What every bench report shares: the line saying when, how and where it was made, and an atomic write."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

import torch


def cpu() -> str:
    """The CPU's model name and widest vector extension (timings differ 2-3x between an AVX2-only and
    an AVX-512 host of the same core count), from /proc/cpuinfo where there is one."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    name = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return f"{name}, {vector}" if vector else name


def provenance(script: str) -> str:
    """'Generated <UTC time> by `<command>`; <machine>, <cores> CPU cores (<cpu>), torch <version>'."""
    command = shlex.join([script, *sys.argv[1:]])
    return (
        f"Generated {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC} by `{command}`; "
        f"{platform.machine()}, {os.cpu_count()} CPU cores ({cpu()}), torch {torch.__version__}"
    )


def write(path: Path, lines: list[str]) -> None:
    """The report at `path` (written whole or not at all), and on stdout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    print("\n".join(lines))
