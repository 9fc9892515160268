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

# The files that take longest, longest first (their seconds in a `make test` run on the 2-core host, 2026-11-27,
# session servers included where a file is the first to use them), run before all others: with `--dist loadfile
# --no-loadscope-reorder` (Makefile) pytest-xdist hands out files in collection order, so the long ones start first
# and the short ones fill in at the end, instead of one worker running, say, the README's blocks alone while the
# other has nothing left (xdist's own order is by number of tests, which put that file of two tests last). Only the
# order changes; a file not listed runs after these.
LONGEST_FIRST = (
    "tests/test_readme.py",  # 75 s
    "tests/service/http/test_network_aware.py",  # 74
    "tests/service/http/test_ui.py",  # 62
    "tests/service/http/test_contract.py",  # 50
    "tests/service/jobs/test_scale_out.py",  # 49
    "tests/service/commands/test_processes.py",  # 38
    "tests/service/engine/test_upload_sandbox.py",  # 35
    "tests/service/http/test_networks.py",  # 33
    "tests/service/test_client.py",  # 32
    "tests/models/test_off_context.py",  # 28
    "tests/gridsim/test_parallel_and_switches.py",  # 28
    "tests/service/http/test_api.py",  # 27
    "tests/service/http/test_sparse_contexts.py",  # 25
    "tests/service/engine/test_gp_pool.py",  # 23
    "tests/service/http/test_hot_routes.py",  # 18
    "tests/service/jobs/test_chunks.py",  # 18
    "tests/service/jobs/test_batch_jobs_recovery.py",  # 17
    "tests/service/jobs/test_batch_long_results.py",  # 16
    "tests/docker/test_container_commands.py",  # 16
    "tests/service/jobs/test_batch_jobs_redis.py",  # 14
    "tests/service/http/test_arrow_request.py",  # 14
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """LONGEST_FIRST's files first, in its order; every file's tests stay together and in their own order."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


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
