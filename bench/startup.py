"""Seconds from `gridpfn serve` to /readyz 200, for one or more source trees, alternating.

    .venv/bin/python bench/startup.py . /tmp/old      # this tree and a worktree of an earlier commit

Each tree runs `python -m service.commands.cli serve` with PYTHONPATH set to it (this venv's
packages), the embedded store, its own registry directory; started twice each, in turn.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seconds_to_ready(tree: Path, timeout_s: float = 300.0) -> float:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "GRIDPFN_REDIS_URL"}
    env["PYTHONPATH"] = str(tree)
    started = time.perf_counter()
    command = [sys.executable, "-m", "service.commands.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - started < timeout_s:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1.0).status_code == 200:
                    return time.perf_counter() - started
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{tree}: the server exited with {proc.returncode}")
            time.sleep(0.2)
        raise RuntimeError(f"{tree}: not ready after {timeout_s:.0f} s")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--starts", type=int, default=2)
    args = parser.parse_args()
    times: dict[Path, list[float]] = {tree.resolve(): [] for tree in args.trees}
    for _ in range(args.starts):
        for tree in times:
            times[tree].append(seconds_to_ready(tree))
    for tree, runs in times.items():
        print(f"{tree}: ready after {', '.join(f'{t:.1f}' for t in runs)} s")


if __name__ == "__main__":
    main()
