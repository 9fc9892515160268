"""Service fixtures: real uvicorn servers on free loopback ports, a tiny real checkpoint, real Redis.

The session-wide ones (model_dir, memory_server, redis_server, scenarios) are in tests/conftest.py, so that
tests/security and tests/gridsim share the one instance of each with the tests here; the helpers are here."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from service.http.app import create_app
from service.http.protocol import CoalescingHttpToolsProtocol
from service.settings import Settings

MODEL = "tiny-dva"
PROBLEM = "application/problem+json"

# Small limits so every limit can be hit cheaply; the same for both stores.
LIMITS = dict(
    max_queries=200,
    max_study_rows=200,
    max_body_bytes=2_000_000,
    max_context_rows=600,
    max_simulate=500,
    gp_max_context=60,
    gp_max_iter=5,
    batch_window_ms=1.0,
)


def serve_argv(port: int, model_dir: Path, *options: str) -> list[str]:
    """The command line of `gridpfn serve` on a loopback port, as the tests start it in its own process."""
    return [sys.executable, "-m", "service.commands.cli", "--log-level", "WARNING", "serve", "--port", str(port),
            *options, "--model-dir", str(model_dir)]  # fmt: skip


def wait_ready(proc: subprocess.Popen, url: str, in_a_row: int = 1, timeout_s: float = 180) -> None:
    """Until `GET /readyz` answers 200 `in_a_row` times on fresh connections (several: every process of
    `--processes N`); the server's stderr in the failure when it exited."""
    deadline, ready = time.monotonic() + timeout_s, 0
    while ready < in_a_row and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-3000:] if proc.stderr else ''}")
        try:
            ready = ready + 1 if httpx.get(f"{url}/readyz", timeout=2).status_code == 200 else 0
        except httpx.TransportError:
            ready = 0
            time.sleep(0.2)
    if ready < in_a_row:
        raise RuntimeError(f"server not ready in {timeout_s:g} s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A uvicorn server in a background thread, stopped by `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            http=CoalescingHttpToolsProtocol,
        )  # what `gridpfn serve` runs
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.started:
                return self
            if not self.thread.is_alive():
                raise RuntimeError("server thread died during start-up")
            time.sleep(0.02)
        raise RuntimeError("server did not start within 60 s")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@contextmanager
def running(settings: Settings):
    server = Server(settings).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["memory", "redis"])
def server(request):
    """Each main-flow test runs against the embedded store and against real Redis."""
    return request.getfixturevalue(f"{request.param}_server")


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """Current value of one Prometheus sample (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        sample, _, label_text = key.partition("{")
        if sample == name and ",".join(sorted(label_text.rstrip("}").split(","))) == want:
            return float(value)
    return 0.0


def assert_problem(response: httpx.Response, status: int, field: str | None = None) -> dict:
    """The RFC 9457 shape every error must have; returns the body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["type"].startswith("urn:gridpfn:problem:")
    assert isinstance(body["title"], str) and isinstance(body["detail"], str) and isinstance(body["errors"], list)
    if field is not None:
        assert any(e["field"] == field for e in body["errors"]), body
        assert all({"location", "field", "message", "expected"} <= set(e) for e in body["errors"])
    return body


def rows(a: np.ndarray) -> list:
    return np.asarray(a).tolist()
