"""What every bench report shares: the line saying when, how and where it was made, and an atomic write."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

import torch


def provenance(script: str) -> str:
    """'Generated <UTC time> by `<command>`; <machine>, <cores> CPU cores, torch <version>'."""
    command = shlex.join([script, *sys.argv[1:]])
    return (f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by `{command}`; "
            f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}")


def write(path: Path, lines: list[str]) -> None:
    """The report at `path` (written whole or not at all), and on stdout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    print("\n".join(lines))
