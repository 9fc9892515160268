"""The exact commands the containers run, outside Docker, against a real Redis.

The api's and the worker's command lines and environment are taken from docker compose's resolved
model of the stack (with .env.example filled in) and from the image's ENV, and run as processes:
the api becomes ready and its container health check passes, /v1 needs the configured keys, a
batch job stays queued until the worker process starts, the worker consumes it and a second one
(its health check passing), stays up, and both processes stop cleanly on SIGTERM within the
stack's stop grace period.

What differs from the containers, and why: the Redis URL (the test's server, not redis:6379), the
model dir (a tiny real checkpoint, not the baked-in models), the jobs dir (a temp dir standing in
for the shared volume), the device (cpu: no GPU here), the api port (a free one, not 8000) and a
job-queue prefix of its own, so that no other test's jobs are taken.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

import gridsim
from models.testing import build_tiny_registry
from service.client import GridPFNClient
from tests.docker.deploy_files import REPO, TEST_KEYS, dockerfile_instructions, resolved

MODEL = "tiny-dva"
BIN = Path(sys.executable).parent
# where the image keeps files that the repository holds elsewhere
IMAGE_PATHS = {"/opt/gridpfn/healthcheck.py": str(REPO / "docker" / "healthcheck.py")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def image_env() -> dict[str, str]:
    """ENV of the image's final stage (PATH aside: the venv's bin comes first here as there)."""
    steps = dockerfile_instructions()
    final = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    env = {}
    for keyword, rest in final:
        if keyword == "ENV":
            env.update(token.split("=", 1) for token in rest.split())
    env.pop("PATH")
    return env


def local(argv: list[str]) -> list[str]:
    return [IMAGE_PATHS.get(arg, arg) for arg in argv]


class Proc:
    """A container's main process: started with its environment, output kept for failure reports."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], workdir: Path) -> None:
        self.name, self.log = name, workdir / f"{name}.log"
        self.handle = open(self.log, "wb")
        self.popen = subprocess.Popen(local(argv), env=env, cwd=workdir, stdout=self.handle, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_s: float) -> int | None:
        """What `docker stop` does: SIGTERM, then SIGKILL after the grace period (None if that was needed)."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)
            return None
        finally:
            self.handle.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_url):
    """(compose model, container env for api and worker, api port, workdir)."""
    workdir = tmp_path_factory.mktemp("containers")
    config = resolved(workdir / "project")
    port = free_port()
    overrides = {
        "GRIDPFN_REDIS_URL": redis_url,
        "GRIDPFN_MODEL_DIR": str(build_tiny_registry(workdir / "models")),
        "GRIDPFN_JOBS_DIR": str(workdir / "jobs-volume"),
        "GRIDPFN_DEVICE": "cpu",
        "GRIDPFN_JOB_QUEUE": f"gridpfn-deploy-test-{uuid.uuid4().hex[:8]}",
    }
    envs = {}
    for name in ("api", "worker"):
        container = {**image_env(), **{k: str(v) for k, v in config["services"][name]["environment"].items()}}
        replaced = set(overrides) - {"GRIDPFN_JOB_QUEUE"}
        assert replaced <= set(container), (
            f"overriding settings the {name} container does not set: {sorted(replaced - set(container))}"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDPFN_")}
        env.update(container)
        env.update(overrides)
        env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        envs[name] = env
    return config, envs, port, workdir


def healthcheck(config: dict, service: str, env: dict[str, str], port: int) -> subprocess.CompletedProcess:
    """The service's compose health check command, as Docker runs it inside the container."""
    test = config["services"][service]["healthcheck"]["test"]
    assert test[0] == "CMD"
    argv = local(test[1:]) + (["--port", str(port)] if service == "api" else [])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)


def api_argv(config: dict, port: int) -> list[str]:
    argv = list(config["services"]["api"]["command"])
    argv[argv.index("--port") + 1] = str(port)  # the only change: a free port instead of 8000
    return argv


def test_container_commands_serve_and_consume(stack):
    config, envs, port, workdir = stack
    grace_s = float(config["services"]["api"]["stop_grace_period"].rstrip("s"))
    keys = TEST_KEYS.split(",")
    url = f"http://127.0.0.1:{port}"

    down = healthcheck(config, "api", envs["api"], port)
    assert down.returncode == 1 and "unreachable" in down.stderr, "the api check must fail with no server"

    api = Proc("api", api_argv(config, port), envs["api"], workdir)
    worker = None
    try:
        deadline = time.monotonic() + 180
        while True:
            assert api.alive(), f"`{' '.join(api_argv(config, port))}` exited:\n{api.output()}"
            try:
                ready = httpx.get(f"{url}/readyz", timeout=5)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"api not ready after 180 s:\n{api.output()}"
            time.sleep(0.3)
        assert ready.json()["store"] == "redis" and ready.json()["models"] == ["network-fit", "physics-fit", MODEL]
        check = healthcheck(config, "api", envs["api"], port)
        assert check.returncode == 0, check.stderr

        # the keys from .env reached the service: /v1 refuses without one, accepts each
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
        for key in keys:
            answer = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
            assert answer.status_code == 200, answer.text

        with GridPFNClient(url, api_key=keys[0], timeout_s=60) as client:
            context_id = client.create_context(simulate={"network": "ieee33", "delta": 0.1, "n": 40, "seed": 0})
            net = gridsim.network("ieee33")
            rows = gridsim.sample_loads(net, 300, 0.1, np.random.default_rng(1))
            first = client.submit(pd.DataFrame(rows, columns=list(net.feature_names)), MODEL, context_id, [0.5])
            time.sleep(1.5)
            assert client.status(first["id"])["state"] == "queued", "with Redis the api must leave jobs to workers"
            idle = healthcheck(config, "worker", envs["worker"], port)
            assert idle.returncode == 1, "the worker check must fail while no worker consumes"

            worker = Proc("worker", config["services"]["worker"]["command"], envs["worker"], workdir)
            done = client.wait(first["id"], poll_s=0.3, timeout_s=180)
            assert done["state"] == "done", f"{done}\n{worker.output()}"
            result = client.fetch(first["id"])
            assert len(result) == 300
            np.testing.assert_allclose(result[list(net.feature_names)].to_numpy(), rows)
            assert np.isfinite(result[[c for c in result.columns if c.startswith("mean")]].to_numpy()).all()

            second = client.submit_simulated({"network": "ieee33", "delta": 0.1, "n": 50, "seed": 2}, MODEL, context_id)
            assert client.wait(second["id"], poll_s=0.3, timeout_s=120)["state"] == "done", worker.output()
            check = healthcheck(config, "worker", envs["worker"], port)
            assert check.returncode == 0, f"{check.stderr}\n{worker.output()}"
            assert worker.alive(), f"the worker must stay up between jobs:\n{worker.output()}"
    finally:
        codes = {"api": api.stop(grace_s), "worker": worker.stop(grace_s) if worker else 0}
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal, so its status is -SIGTERM
    # (143 in Docker); None would mean it needed the SIGKILL that follows the grace period.
    assert codes["api"] in (0, -signal.SIGTERM) and "Application shutdown complete" in api.output(), (
        f"api did not stop cleanly within {grace_s} s: {codes['api']}\n{api.output()}"
    )
    assert codes["worker"] == 0, (
        f"worker did not stop cleanly within {grace_s} s: {codes['worker']}\n{worker.output() if worker else ''}"
    )
