"""API keys: every /v1 route needs a configured bearer key; health and metrics stay open."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from service.settings import Settings
from tests.service.conftest import MODEL, assert_problem, free_port, running

KEYS = ("first-key-123", "second-key-456")


@pytest.fixture(scope="module")
def keyed(model_dir):
    with running(Settings(model_dir=model_dir, api_keys=",".join(KEYS), gp_max_iter=5)) as server:
        yield server


@pytest.mark.parametrize("path", ["/v1/models", f"/v1/models/{MODEL}", "/v1/context-sets/" + "0" * 64])
def test_v1_needs_a_valid_key(keyed, path):
    with httpx.Client(base_url=keyed.url) as c:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Basic {KEYS[0]}"},
            {"Authorization": KEYS[0]},
        ):
            body = assert_problem(c.get(path, headers=headers), 401, "Authorization")
            assert KEYS[0] not in str(body)
        assert c.get(path, headers={"Authorization": f"Bearer {KEYS[0]}"}).status_code in (200, 404)
        assert c.get(path, headers={"Authorization": f"Bearer {KEYS[1]}"}).status_code in (200, 404)


def test_posts_need_a_key_before_anything_else(keyed):
    with httpx.Client(base_url=keyed.url) as c:
        assert_problem(c.post("/v1/predict", json={}), 401)
        assert_problem(c.post("/v1/simulate", json={"loads": [[0.1] * 64]}), 401)
        ok = c.post("/v1/simulate", json={"loads": [[0.01] * 64]}, headers={"Authorization": f"Bearer {KEYS[1]}"})
        assert ok.status_code == 200


@pytest.mark.parametrize(
    "path", ["/v1/studies", "/v1/predict", "/v1/networks", "/v1/context-sets", "/ui/api/context-sets"]
)
def test_a_keyless_body_is_refused_before_it_is_read(keyed, path):
    """A client without a key announcing a 30 MB body gets its 401 at once, with `Connection: close`: the
    server never holds the body (keyless connections could otherwise pin GRIDPFN_MAX_BODY_BYTES each)."""
    host, port = httpx.URL(keyed.url).host, httpx.URL(keyed.url).port
    with socket.create_connection((host, port), timeout=5) as sock:
        head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: 30000000\r\n\r\n"
        sock.sendall(head.encode() + b"{" * 1000)  # a first kilobyte of the body, then nothing more
        answer = sock.recv(65536).decode("latin-1")
    status, _, rest = answer.partition("\r\n")
    assert status.split()[1] == "401" and "connection: close" in rest.lower(), answer[:500]


def test_health_metrics_docs_are_open(keyed):
    with httpx.Client(base_url=keyed.url) as c:
        for path in ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"):
            assert c.get(path).status_code == 200, path


def test_keys_are_never_logged(keyed, caplog):
    with caplog.at_level(logging.DEBUG), httpx.Client(base_url=keyed.url) as c:
        c.get("/v1/models", headers={"Authorization": f"Bearer {KEYS[0]}"})
        c.get("/v1/models", headers={"Authorization": "Bearer guessed-key"})
    assert not any(k in caplog.text for k in KEYS + ("guessed-key",))


def test_serve_cli_warns_beyond_loopback_without_keys(model_dir):
    """A real `gridpfn serve --host 0.0.0.0` process: warns, then serves (probed over loopback only)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDPFN_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.commands.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--model-dir",
            str(model_dir),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail("gridpfn serve did not become ready")
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert "beyond loopback with no API keys" in stderr
