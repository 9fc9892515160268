"""Shared fixtures: a real Redis server for the tests that need one, and the session's tiny checkpoint,
in-process servers and scenarios (the helpers they use are in tests/service/conftest.py).

Uses the Redis server at REDIS_URL when set; otherwise starts a throwaway `redis-server` on a
free port and stops it afterwards. No redis-server binary is a failure, not a skip.

The session fixtures are defined here, once for every directory: a fixture defined in a directory's
conftest (or imported into one) is another fixture with a cache of its own, and each instance of a server
starts its own upload sandbox and GP worker processes (seconds of imports each).
"""

from __future__ import annotations

import contextlib
import os

# Before anything imports torch: on a small shared CPU, OpenMP threads that spin while
# waiting make batched linear algebra 5-10x slower (measured on the exact-GP tests).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def throwaway_redis():
    """Start a private `redis-server` on a free port; yields (process, url); stops it afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "tests need a Redis server: set REDIS_URL, or install redis-server "
            "(Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`)",
            pytrace=False,
        )
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="gridpfn-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail(f"redis-server did not start on port {port}", pytrace=False)
        yield proc, f"redis://127.0.0.1:{port}/0"
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url():
    """URL of a reachable Redis server (REDIS_URL, or a throwaway one started here)."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    with throwaway_redis() as (_, url):
        yield url


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from models.testing import build_tiny_registry

    return build_tiny_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="session")
def memory_server(model_dir):
    from service.settings import Settings
    from tests.service.conftest import LIMITS, running

    with running(Settings(model_dir=model_dir, redis_url=None, **LIMITS)) as server:
        yield server


@pytest.fixture(scope="session")
def redis_server(model_dir, redis_url):
    from service.settings import Settings
    from tests.service.conftest import LIMITS, running

    with running(Settings(model_dir=model_dir, redis_url=redis_url, **LIMITS)) as server:
        yield server


@pytest.fixture(scope="session")
def scenarios():
    """Real power-flow scenarios: (x (200, 64), vm_pu (200, 32))."""
    import gridsim

    result = gridsim.simulate(200, 0.1, 123)
    assert result.converged.all()
    return result.x, result.vm_pu
