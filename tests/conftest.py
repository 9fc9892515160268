"""Shared fixtures: a real Redis server for the tests that need one, and the session's tiny checkpoint,
in-process servers and scenarios (the helpers they use are in tests/service/conftest.py).

Uses the Redis server at REDIS_URL when set; otherwise starts a throwaway `redis-server` on a
free port and stops it afterwards. No redis-server binary is a failure, not a skip.

Safe under pytest-xdist (`make test` runs `-n 2 --dist loadfile`): every worker starts its own session
fixtures (servers on free ports, its own throwaway Redis), and with REDIS_URL each worker takes a database
of its own (`worker_redis_url`); servers started without a jobs dir of their own write to the session's
temporary one, not JobSettings' default in /tmp.

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
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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


def worker_redis_url(url: str, worker: str | None = None) -> str:
    """`url` as pytest-xdist worker `worker` (default: this process's, PYTEST_XDIST_WORKER) uses it: gwN takes
    the database N after the URL's own, so that no worker's keys, scans or deletes meet another's (content-
    addressed keys are the same in every worker). Unchanged outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    if not worker.startswith("gw"):
        return url
    index, parts = int(worker[2:]), urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "unix" or "db" in query:  # the database in the query (redis-py reads it before the path)
        query["db"] = str(int(query.get("db", 0)) + index)
        return f"{url.partition('?')[0]}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{int(parts.path.strip('/') or 0) + index}"))


@pytest.fixture(scope="session")
def redis_url():
    """URL of a reachable Redis server (REDIS_URL, a database of this xdist worker's own, or a throwaway server
    started here)."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield worker_redis_url(url)
        return
    with throwaway_redis() as (_, url):
        yield url


@pytest.fixture(scope="session", autouse=True)
def jobs_dir_default(tmp_path_factory):
    """GRIDPFN_JOBS_DIR, unless set, is this session's temporary directory: the servers and workers the tests
    start without a jobs dir of their own would otherwise share JobSettings' default /tmp/gridpfn-jobs with
    every other xdist worker (and every other run on the host)."""
    if os.environ.get("GRIDPFN_JOBS_DIR"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRIDPFN_JOBS_DIR", str(tmp_path_factory.mktemp("jobs-default")))
        yield


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
