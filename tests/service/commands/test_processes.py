"""`gridpfn serve --processes N`: several server processes on one port sharing Redis."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.service.conftest import MODEL, free_port, rows, serve_argv, wait_ready

REPO = Path(__file__).resolve().parents[3]


def _children(pid: int) -> list[int]:
    """Live processes whose parent is pid (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_more_processes_than_one_need_redis():
    with pytest.raises(ValidationError, match="GRIDPFN_REDIS_URL"):
        Settings(processes=2)
    assert Settings(processes=2, redis_url="redis://127.0.0.1:6379/0").processes == 2
    done = subprocess.run(
        [sys.executable, "-m", "service.commands.cli", "serve", "--processes", "2"],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "GRIDPFN_REDIS_URL"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "GRIDPFN_REDIS_URL" in done.stderr


@contextmanager
def two_processes(model_dir, redis_url, **env_extra: str):
    """`gridpfn serve --processes 2` on a free port, every process ready; yields (supervisor, url)."""
    port = free_port()
    env = dict(os.environ, GRIDPFN_REDIS_URL=redis_url, GRIDPFN_GP_MAX_ITER="1", **env_extra)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen(
        serve_argv(port, model_dir, "--processes", "2"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # every process ready: several answers in a row; a shared 2-core CI host has taken over 100 s to start both
        wait_ready(proc, url, in_a_row=8, timeout_s=240)
        yield proc, url
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def served(model_dir, redis_url):
    """One `gridpfn serve --processes 2` for the two tests below: each start costs three interpreters that import
    torch and load the models (tens of seconds on a shared 2-core host). A process that exits within 2 s of its
    start counts as failing to start, so the restart test's killed process is replaced, not the server stopped."""
    with two_processes(model_dir, redis_url, GRIDPFN_STARTUP_GRACE_S="2") as (proc, url):
        yield SimpleNamespace(proc=proc, url=url, healthz=0)  # healthz: the GET /healthz requests the tests sent


def test_two_processes_answer_on_one_port_with_shared_context_sets(served, scenarios):
    x, y = scenarios
    proc, url = served.proc, served.url
    assert len(_children(proc.pid)) >= 2  # the two server processes
    # 32 keep-alive connections opened at once, as a client's pool does: SO_REUSEPORT spreads them
    # over both processes (one shared socket let one process accept them all)
    clients = [httpx.Client(base_url=url, timeout=10) for _ in range(32)]
    try:
        answered_by = {c.get("/healthz").json()["process"] for c in clients}
        served.healthz += len(clients)
    finally:
        for c in clients:
            c.close()
    assert answered_by <= set(_children(proc.pid)) and len(answered_by) == 2, answered_by
    cid = httpx.post(f"{url}/v1/context-sets", json={"x": rows(x[:30]), "y": rows(y[:30])}).json()["id"]
    body = {"model": MODEL, "context_id": cid, "queries": rows(x[40:43]), "quantiles": [0.1, 0.9]}
    answers = [httpx.post(f"{url}/v1/predict", json=body, timeout=30) for _ in range(12)]  # a new connection each
    assert [a.status_code for a in answers] == [200] * 12
    for a in answers[1:]:  # whichever process answered, from the one context set in Redis
        np.testing.assert_allclose(a.json()["mean"], answers[0].json()["mean"], rtol=1e-6)


def _healthz_total(url: str) -> tuple[float, int]:
    """(GET /healthz 200s counted by the server, the process that answered the scrape), on a fresh connection."""
    with httpx.Client(base_url=url, timeout=10) as one_connection:
        scrape = one_connection.get("/metrics")
        pid = one_connection.get("/healthz").json()["process"]  # same kept-alive connection, same process; counted too
    assert scrape.status_code == 200
    found = [
        float(line.rpartition(" ")[2])
        for line in scrape.text.splitlines()
        if line.startswith("gridpfn_http_requests_total{") and 'route="/healthz"' in line and 'status="200"' in line
    ]
    assert len(found) == 1, scrape.text[:2000]
    return found[0], pid


def test_metrics_of_several_processes_are_their_sums_and_survive_a_restart(served):
    """Every scrape, whichever process answers it, counts every request of both processes, and a counter
    never goes down: not between scrapes, not when a process is killed and replaced (issue 18)."""
    proc, url = served.proc, served.url
    sent, seen, served_by, scraped_by = served.healthz, [], set(), set()  # the other test's on the shared server
    for _ in range(3):
        for _ in range(20):  # a fresh connection each: the kernel spreads them over both processes
            served_by.add(httpx.get(f"{url}/healthz", timeout=10).json()["process"])
            sent += 1
        for _ in range(4):
            total, pid = _healthz_total(url)
            seen.append(total)
            assert total == sent, (total, sent)
            sent += 1  # the pid probe
            scraped_by.add(pid)
    assert len(served_by) == 2 and len(scraped_by) == 2, (served_by, scraped_by)
    victim = sorted(served_by)[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (victim in _children(proc.pid) or len(_children(proc.pid)) < 2):
        time.sleep(0.2)
    wait_ready(proc, url, in_a_row=8, timeout_s=240)
    for _ in range(6):
        total, pid = _healthz_total(url)
        seen.append(total)
        assert total == sent, (total, sent)  # the killed process's requests still count
        sent += 1
    assert victim not in _children(proc.pid) and proc.poll() is None
    assert seen == sorted(seen)
    served.healthz = sent


def test_a_port_in_use_stops_the_server_with_an_error(model_dir, redis_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, GRIDPFN_REDIS_URL=redis_url)
        done = subprocess.run(
            serve_argv(port, model_dir, "--processes", "2"),
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert "Address already in use" in done.stderr and "while starting" in done.stderr, done.stderr[-2000:]
