"""The README as a new user meets it: its runnable blocks run as written against a live server.

A fenced block whose info string is `bash runnable` or `python runnable` is a promise that it runs
from a clean clone once `make serve` is up. This test starts `gridpfn serve` (the shipped models,
the embedded store) on a free port, then runs every runnable shell block in order in one bash
(`set -euo pipefail`, so variables carry over and any failing command fails the test) and every
runnable Python block with the project's interpreter, in a scratch directory holding only a link
to `.venv` (files the examples write land there). `GRIDPFN_URL` points them at the server. Also:
the README stays short and every relative link in it points at a file of the repository.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w+) runnable[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)#\s]+)\)")
log = logging.getLogger(__name__)


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(text)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    """`gridpfn serve` as `make serve` runs it (shipped registry, embedded store), on a free port."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDPFN_")}
    env["GRIDPFN_JOBS_DIR"] = str(tmp_path_factory.mktemp("jobs"))
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("gridpfn")), "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert process.poll() is None, log_path.read_text()[-4000:]
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("server not ready within 180 s:\n" + log_path.read_text()[-4000:])
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) < 400
    missing = [
        link
        for link in LINK.findall(text)
        if not link.startswith(("http://", "https://")) and not (ROOT / link).exists()
    ]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_readme_runnable_blocks_run_as_written(live_server, tmp_path):
    blocks = runnable_blocks(README.read_text())
    shell = [body for lang, body in blocks if lang == "bash"]
    python = [body for lang, body in blocks if lang == "python"]
    assert len(shell) >= 5 and len(python) >= 1, f"runnable blocks found: {[lang for lang, _ in blocks]}"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDPFN_")}
    env["GRIDPFN_URL"] = live_server
    script = "set -euo pipefail\n" + "\n".join(shell)
    started = time.monotonic()
    result = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log.info("README shell blocks: %.1f s\n%s", time.monotonic() - started, result.stdout)
    assert result.returncode == 0, f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert '"ready":true' in result.stdout and "transformer-dva" in result.stdout
    assert "validation-error" not in result.stdout.split('"errors"')[0]  # only the example 422 shows errors
    assert result.stdout.rstrip().endswith("204"), result.stdout[-500:]
    for body in python:
        started = time.monotonic()
        result = subprocess.run(
            [str(ROOT / ".venv/bin/python"), "-c", body],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        log.info("README Python block: %.1f s\n%s", time.monotonic() - started, result.stdout)
        assert result.returncode == 0, f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
        assert "done" in result.stdout
