"""`gridpfn serve --processes N`: several server processes on one port sharing Redis."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.service.conftest import MODEL, free_port, rows

REPO = Path(__file__).resolve().parents[2]


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
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--processes", "2"], cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "GRIDPFN_REDIS_URL"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "GRIDPFN_REDIS_URL" in done.stderr


def test_two_processes_answer_on_one_port_with_shared_context_sets(model_dir, redis_url, scenarios):
    x, y = scenarios
    port = free_port()
    env = dict(os.environ, GRIDPFN_REDIS_URL=redis_url, GRIDPFN_GP_MAX_ITER="1")
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "--log-level", "WARNING", "serve", "--port", str(port),
                             "--processes", "2", "--model-dir", str(model_dir)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        ready = 0
        while ready < 8 and time.monotonic() < deadline:  # every process ready: several in a row, fresh connections
            try:
                ready = ready + 1 if httpx.get(f"{url}/readyz", timeout=2).status_code == 200 else 0
            except httpx.TransportError:
                ready = 0
                time.sleep(0.2)
        assert ready >= 8, proc.stderr.read().decode() if proc.poll() is not None else "not ready in 120 s"
        assert len(_children(proc.pid)) >= 2  # the two server processes
        # 32 keep-alive connections opened at once, as a client's pool does: SO_REUSEPORT spreads them
        # over both processes (one shared socket let one process accept them all)
        clients = [httpx.Client(base_url=url, timeout=10) for _ in range(32)]
        try:
            answered_by = {c.get("/healthz").json()["process"] for c in clients}
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
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_a_port_in_use_stops_the_server_with_an_error(model_dir, redis_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, GRIDPFN_REDIS_URL=redis_url)
        done = subprocess.run([sys.executable, "-m", "service.cli", "--log-level", "WARNING", "serve", "--port", str(port),
                               "--processes", "2", "--model-dir", str(model_dir)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Address already in use" in done.stderr and "while starting" in done.stderr, done.stderr[-2000:]
