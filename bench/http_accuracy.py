"""Accuracy measured through the HTTP API: a real `gridpfn serve` in a subprocess, figures from its answers.

Used by bench/accuracy.py beside the in-process figures. The context goes up once as a context set
(POST /v1/context-sets), the queries as Arrow through service.client.GridPFNClient.predict with the
quantiles [0.025, 0.975]; max-over-bus MAE and the 95 % coverage are computed from the answer's
mean and quantile columns exactly as models/metrics.accuracy_summary computes them in process
(coverage: the truth within [q0.025, q0.975]). The answer carries no density, so no NLL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from service.client import GridPFNClient

log = logging.getLogger(__name__)

QUANTILES = (0.025, 0.975)
GRIDPFN = Path(sys.executable).with_name("gridpfn")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(registry: Path, max_rows: int, ready_timeout_s: float = 600.0) -> Iterator[str]:
    """Base URL of a fresh server on a free loopback port serving `registry`, with row and body
    limits raised to `max_rows` context rows and queries; stopped on exit."""
    port = _free_port()
    env = dict(
        os.environ,
        GRIDPFN_MODEL_DIR=str(registry),
        GRIDPFN_MAX_QUERIES=str(max_rows),
        GRIDPFN_MAX_CONTEXT_ROWS=str(max_rows),
        GRIDPFN_MAX_BODY_BYTES=str(max(64 << 20, 4096 * max_rows)),
    )
    with tempfile.TemporaryFile(mode="w+") as server_log:
        proc = subprocess.Popen(
            [str(GRIDPFN), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=server_log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, proc, ready_timeout_s)
            log.info("server pid %d ready at %s (registry %s)", proc.pid, url, registry)
            yield url
        except BaseException:
            server_log.seek(0)
            log.error("server log:\n%s", server_log.read()[-4000:])
            raise
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with GridPFNClient(url, retries=0, timeout_s=10.0) as client:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gridpfn serve exited with status {proc.returncode} before /readyz")
            try:
                client.ready()
                return
            except Exception as exc:  # connection refused or 503 while models load and warm up
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gridpfn serve not ready after {timeout_s:.0f} s: {exc}") from exc
            time.sleep(0.5)


def summary_from_answer(frame: pd.DataFrame, y_true: np.ndarray) -> dict[str, float]:
    """accuracy_summary's figures from an answer frame (columns mean_<output>, q<level>_<output>)."""
    outputs = frame.attrs["outputs"]
    low_name, high_name = frame.attrs["quantiles"]
    mean = frame[[f"mean_{o}" for o in outputs]].to_numpy(np.float64)
    low = frame[[f"q{low_name}_{o}" for o in outputs]].to_numpy(np.float64)
    high = frame[[f"q{high_name}_{o}" for o in outputs]].to_numpy(np.float64)
    y_true = np.asarray(y_true, dtype=np.float64)
    if y_true.shape != mean.shape:
        raise ValueError(f"y_true: expected shape {mean.shape}, got {y_true.shape}")
    err = mean - y_true
    mae = np.abs(err).mean(axis=0)
    covered = ((y_true >= low) & (y_true <= high)).mean(axis=0)
    return {
        "max_mse": float((err**2).mean(axis=0).max()),
        "max_mae": float(mae.max()),
        "mean_mae": float(mae.mean()),
        "coverage_mean": float(covered.mean()),
        "coverage_worst": float(covered.min()),
        "coverage_best": float(covered.max()),
    }


def network_on_server(client: GridPFNClient, network: str) -> str:
    """The server's name for a gridsim network: a built-in by name; any other (a random feeder) is
    uploaded as pandapower JSON, as a user uploads theirs, and named by the id the server gives it."""
    import pandapower as pp

    from gridsim.network import KNOWN_NETWORKS, pandapower_net

    if network in KNOWN_NETWORKS:
        return network
    return client.upload_network(pp.to_json(pandapower_net(network)).encode())["id"]


def evaluate_http(
    url: str, models: list[str], cx: np.ndarray, cy: np.ndarray, qx: np.ndarray, qy: np.ndarray, network: str = "ieee33"
) -> dict[str, dict[str, float]]:
    """Rows '<model> via HTTP': each model answers the queries on a context set stored once on
    `network`; seconds is the context upload plus the (first, so encoding and calibration included)
    predict, wall time."""
    rows = {}
    with GridPFNClient(url, timeout_s=600.0) as client:
        served_as = network_on_server(client, network)
        for model in models:
            started = time.perf_counter()
            context_id = client.create_context(cx, cy, network=served_as)
            frame = client.predict(qx, model=model, context_id=context_id, quantiles=list(QUANTILES))
            seconds = time.perf_counter() - started
            summary = summary_from_answer(frame, qy)
            summary["seconds"] = seconds
            summary["server_ms"] = float(frame.attrs.get("timing", {}).get("total_ms", float("nan")))
            summary["context_cached"] = bool(frame.attrs.get("timing", {}).get("context_cached", False))
            rows[f"{model} via HTTP"] = summary
            client.delete_context(context_id)
            log.info(
                "%-22s max MAE %.3e  cov %.3f/%.3f  %.2f s (server %.0f ms)",
                f"{model} via HTTP",
                summary["max_mae"],
                summary["coverage_mean"],
                summary["coverage_worst"],
                seconds,
                summary["server_ms"],
            )
    return rows
