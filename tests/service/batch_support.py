"""Helpers for the batch-job tests: servers with job settings, worker processes, expected answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

import gridsim
from service.jobs.settings import JobSettings
from service.settings import Settings
from tests.service.conftest import LIMITS, MODEL, Server

ROOT = Path(__file__).resolve().parents[2]
NET = gridsim.network("ieee33")
FEATURES = list(NET.feature_names)
OUTPUTS = list(NET.output_names)
QUANTILES = [0.05, 0.5, 0.95]
BAND = [0.95, 1.05]


def loads(n: int, seed: int) -> pd.DataFrame:
    x = gridsim.sample_loads(NET, n, 0.2, np.random.default_rng(seed))
    return pd.DataFrame(x, columns=FEATURES)


@contextmanager
def job_server(model_dir: Path, jobs_dir: Path, redis_url: str | None, **job_options):
    """A real uvicorn server whose JobService uses `jobs_dir` and the given job settings."""
    server = Server(Settings(model_dir=model_dir, redis_url=redis_url, **LIMITS))
    server.app.state.job_settings = JobSettings(jobs_dir=jobs_dir, **job_options)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def context_id(client: httpx.Client, n: int = 60, seed: int = 5) -> str:
    response = client.post(
        "/v1/context-sets", json={"simulate": {"network": "ieee33", "delta": 0.2, "n": n, "seed": seed}}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def submit_file(client: httpx.Client, path: Path, cid: str, **fields) -> httpx.Response:
    data = {
        "model": MODEL,
        "context_id": cid,
        "quantiles": ",".join(map(str, QUANTILES)),
        "voltage_band": ",".join(map(str, BAND)),
        **fields,
    }
    with open(path, "rb") as handle:
        return client.post("/v1/batch-jobs", data=data, files={"file": (path.name, handle)})


def wait_for(client: httpx.Client, job_id: str, predicate, timeout_s: float = 60.0, poll_s: float = 0.05) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get(f"/v1/batch-jobs/{job_id}").json()
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"job {job_id} never reached the expected condition: {status}"
        time.sleep(poll_s)


def done(status: dict) -> bool:
    assert status["state"] not in ("failed", "cancelled"), status
    return status["state"] == "done"


def fetch_frame(client: httpx.Client, job_id: str, fmt: str = "parquet") -> pd.DataFrame:
    import io

    response = client.get(f"/v1/batch-jobs/{job_id}/result", params={"format": fmt})
    assert response.status_code == 200, response.text
    data = io.BytesIO(response.content)
    return pd.read_csv(data) if fmt == "csv" else pd.read_parquet(data)


def expected_stats(model_dir: Path, client: httpx.Client, cid: str, x: np.ndarray, chunk_rows: int) -> dict:
    """Mean, std, quantiles and p_outside computed here, in the same chunks, from the same checkpoint, and
    each row's extrapolation from the context's loads."""
    from models.off_context import ContextGeometry
    from models.registry import load_registry
    from service.engine.answers import AnswerSpec, answer

    info = client.get(f"/v1/context-sets/{cid}", params={"include_data": True}).json()
    method = load_registry(model_dir, warmup=False).get(MODEL).method
    encoded = method.fit(np.array(info["x"]), np.array(info["y"]))
    spec = AnswerSpec(tuple(QUANTILES), tuple(BAND))
    parts = [answer(method, encoded, x[i : i + chunk_rows], spec) for i in range(0, len(x), chunk_rows)]
    out = {
        "mean": np.concatenate([p.mean for p in parts]),
        "std": np.concatenate([p.std for p in parts]),
        "p_outside": np.concatenate([p.p_outside for p in parts]),
        "extrapolation": ContextGeometry.of(np.array(info["x"])).extrapolation(x),
    }
    for j, q in enumerate(QUANTILES):
        out[f"q{q!r}"] = np.concatenate([p.quantiles[j] for p in parts])
    return out


def block(frame: pd.DataFrame, stat: str) -> np.ndarray:
    return frame[[f"{stat}_{name}" for name in OUTPUTS]].to_numpy()


class WorkerProcess:
    """`python -m service.commands.cli worker` with its log in a file."""

    def __init__(self, log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self.log = open(log_path, "wb")
        full_env = {**os.environ, "GRIDPFN_WORKER_THREADS": "1", **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.commands.cli", "worker"],
            cwd=ROOT,
            env=full_env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while "waiting for jobs" not in self.text():
            assert self.proc.poll() is None, f"worker exited:\n{self.text()}"
            assert time.monotonic() < deadline, f"worker not ready:\n{self.text()}"
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def worker_env(redis_url: str, model_dir: Path, jobs_dir: Path, queue: str, **extra: str) -> dict[str, str]:
    return {
        "GRIDPFN_REDIS_URL": redis_url,
        "GRIDPFN_MODEL_DIR": str(model_dir),
        "GRIDPFN_JOBS_DIR": str(jobs_dir),
        "GRIDPFN_JOB_QUEUE": queue,
        **{k: str(v) for k, v in extra.items()},
    }


@contextmanager
def server_and_worker(model_dir: Path, redis_url: str, jobs_dir: Path, chunk_rows: int):
    """A server in Redis mode on its own stream and one `gridpfn worker` process sharing `jobs_dir`: yields
    (server, client, queue, worker)."""
    import uuid

    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = WorkerProcess(jobs_dir.parent / f"{queue}-worker.log", worker_env(redis_url, model_dir, jobs_dir, queue))
    try:
        with job_server(model_dir, jobs_dir, redis_url, job_chunk_rows=chunk_rows, job_queue=queue) as server:
            worker.wait_ready()
            with httpx.Client(base_url=server.url, timeout=60) as client:
                yield server, client, queue, worker
    finally:
        worker.stop()
