"""`gridpfn serve --processes N`: N uvicorn processes, each listening on its own SO_REUSEPORT socket.

Why not uvicorn's own `workers=N`: its processes share one listening socket, and whichever is
awake accepts a whole burst of new connections. A client that opens its connection pool at once
(wrk's 32, a load balancer's) then lands on one process: in 2-process runs of bench/http_load.py
one process served all 32 connections in one run and 80 % of the requests in another, leaving a
core idle. With SO_REUSEPORT (Linux) the kernel spreads connections over the processes' sockets by
address hash, as nginx's `reuseport` and gunicorn's `--reuse-port` do.

The parent imports no model code: it starts the processes, restarts one that dies after start-up,
stops all on SIGTERM / SIGINT, and exits non-zero when a process fails while starting (a port in use).

Metrics: the processes keep their Prometheus values in one shared directory (PROMETHEUS_MULTIPROC_DIR,
a fresh temporary one unless the operator set it; its old *.db files are removed at start) and any of
them answers /metrics with the sum over all (service.metrics). A process that exits or is replaced is
marked dead there: its counters stay in the sums, its gauges leave them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from service.metrics import MULTIPROCESS_ENV

log = logging.getLogger(__name__)

STARTUP_GRACE_S = 60.0  # a process that exits sooner failed to start: stop everything instead of restarting


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket that other processes may bind to the same address too (SO_REUSEPORT)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def _serve_one(host: str, port: int, options: dict[str, Any]) -> None:
    """One server process: its own socket, the app built by the factory from GRIDPFN_* settings."""
    import uvicorn

    sock = reuseport_socket(host, port)
    config = uvicorn.Config("service.http.app:create_app", factory=True, host=host, port=port, **options)
    uvicorn.Server(config).run(sockets=[sock])


def metrics_dir() -> tuple[Path, bool]:
    """The shared metrics directory, emptied of earlier runs' files, set in the environment the server
    processes inherit; and whether it is a temporary one of ours (removed at the end)."""
    given = os.environ.get(MULTIPROCESS_ENV)
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="gridpfn-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROCESS_ENV] = str(path)
    return path, not given


def run(host: str, port: int, processes: int, options: dict[str, Any]) -> int:
    """Serve with `processes` processes until SIGTERM / SIGINT; the exit status of the whole server."""
    spawn = multiprocessing.get_context("spawn")  # fresh interpreters: no torch state forked from here
    stopping = False
    shared_metrics, temporary = metrics_dir()
    grace_s = float(os.environ.get("GRIDPFN_STARTUP_GRACE_S", STARTUP_GRACE_S))  # tests shorten it

    def start() -> tuple[multiprocessing.process.BaseProcess, float]:
        proc = spawn.Process(target=_serve_one, args=(host, port, options), name="gridpfn-server")
        proc.start()
        return proc, time.monotonic()

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    running = [start() for _ in range(processes)]
    status = 0
    try:
        while not stopping:
            time.sleep(0.2)
            for i, (proc, started) in enumerate(running):
                if proc.is_alive() or stopping:
                    continue
                if time.monotonic() - started < grace_s:
                    log.error("server process %d exited with %s while starting; stopping", proc.pid, proc.exitcode)
                    status = proc.exitcode or 1
                    stopping = True
                    break
                log.error("server process %d exited with %s; starting another", proc.pid, proc.exitcode)
                mark_process_dead(proc.pid, str(shared_metrics))
                running[i] = start()
    finally:
        for proc, _ in running:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn finishes open requests, then runs the lifespan's shutdown
        for proc, _ in running:
            proc.join(timeout=30)
            if proc.is_alive():
                log.error("server process %d did not stop within 30 s; killing it", proc.pid)
                proc.kill()
                proc.join()
            mark_process_dead(proc.pid, str(shared_metrics))
        if temporary:
            shutil.rmtree(shared_metrics, ignore_errors=True)
            os.environ.pop(MULTIPROCESS_ENV, None)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status
