"""The client ships alone (clients/python, distribution gridpfn-client): no torch, no server code."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# imports service.client's code from the built wheel with the server's packages and torch made unimportable
BLOCKED_IMPORT = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "service", "models", "gridsim", "fastapi", "uvicorn"}:
            raise ImportError(f"{name} must not be needed by the client")
sys.meta_path.insert(0, Block())
sys.path.insert(0, sys.argv[1])
import gridpfn_client as c
client = c.GridPFNClient("http://127.0.0.1:9")
body = c.arrow_request_body([[0.1] * 64], {"model": "m", "context_id": "x"})
print(type(client).__name__, c.AsyncGridPFNClient.__name__, len(body) > 0)
"""


def test_the_client_wheel_holds_service_client_and_imports_without_torch(tmp_path):
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(REPO / "clients" / "python"),
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert built.returncode == 0, built.stderr
    wheel = next(tmp_path.glob("gridpfn_client-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("gridpfn_client/__init__.py") == (REPO / "service" / "client.py").read_bytes()
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith("METADATA"))).decode()
        zf.extractall(tmp_path / "unpacked")
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not [r for r in requires if "torch" in r or "fastapi" in r], requires
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT, str(tmp_path / "unpacked")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["GridPFNClient", "AsyncGridPFNClient", "True"]
