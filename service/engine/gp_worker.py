"""One exact-GP worker process: `python -m service.engine.gp_worker FD`, started by service.engine.gp_pool.

It reads jobs from the socket FD (multiprocessing.connection framing, pickled: only the server
process that started it holds the other end), fits the GP of each context once and keeps the fits
in an LRU keyed by (context id, digest of the context's data), so an id that comes back with other
data is never answered from a stale fit. It exits when the socket closes.

Protocol: first message {"method", "torch_threads", "cache_size", "nice"}; answer ("ready", pid).
Then per job {"context_id", "x", "y", "queries", "spec", "forget"}; answer ("ok", answer, timing,
held ids) or ("error", exception, held ids).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

log = logging.getLogger("service.engine.gp_worker")


def _digest(x: np.ndarray, y: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in (x, y):
        part = np.ascontiguousarray(part)
        h.update(f"{part.dtype.str}{part.shape}".encode())
        h.update(part.data)
    return h.hexdigest()


class Worker:
    """The fits of one process and the one call that answers a job."""

    def __init__(self, method: Any, cache_size: int) -> None:
        self.method, self.cache_size = method, cache_size
        self.fits: OrderedDict[tuple[str, str], tuple[Any, float]] = OrderedDict()  # key -> (fit, seconds)

    def held(self) -> list[str]:
        return [context_id for context_id, _ in self.fits]

    def forget(self, context_ids: Any) -> None:
        for key in [key for key in self.fits if key[0] in set(context_ids)]:
            del self.fits[key]

    def answer(self, job: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        from service.engine.answers import answer

        key = (job["context_id"], _digest(job["x"], job["y"]))
        hit = key in self.fits
        if hit:
            self.fits.move_to_end(key)
            fitted, fit_s = self.fits[key]
        else:
            t0 = time.perf_counter()
            fitted = self.method.fit(job["x"], job["y"])
            fit_s = time.perf_counter() - t0
            self.fits[key] = (fitted, fit_s)
            while len(self.fits) > self.cache_size:
                self.fits.popitem(last=False)
        t0 = time.perf_counter()
        result = answer(self.method, fitted, job["queries"], job["spec"])
        result.all_finite()  # computed here, not on the server's event loop
        return result, {"fit_s": fit_s, "fit_cached": hit, "predict_s": time.perf_counter() - t0}


def _warm(method: Any) -> None:
    """One tiny fit and predict, so the first real job pays no first-call costs (like service.engine.warmup)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 4)), 1.0 + 0.01 * rng.normal(size=(16, 2))
    quick = type(method)(linear_term=method.linear_term, max_iter=1)
    quick.predict(quick.fit(x, y), x[:2])
    import service.engine.answers  # noqa: F401  every job's answer is built there: imported before "ready", not in a job's time


def serve(conn: Connection) -> None:
    config = conn.recv()
    if config["nice"]:
        os.nice(config["nice"])
    import torch

    if config["torch_threads"]:
        torch.set_num_threads(config["torch_threads"])
    worker = Worker(config["method"], config["cache_size"])
    _warm(worker.method)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the server closed its end (shutdown) or went away
        worker.forget(job.get("forget", ()))
        try:
            result, timing = worker.answer(job)
        except Exception as exc:  # noqa: BLE001 - the server re-raises it for its request
            log.debug("GP job failed", exc_info=True)
            conn.send(("error", _sendable(exc), worker.held()))
            continue
        conn.send(("ok", result, timing, worker.held()))


def _sendable(exc: Exception) -> Exception:
    """The exception itself when it pickles; else a RuntimeError naming it (the server reports a 500)."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    from service.process_privacy import forbid_inspection

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s gp-worker %(levelname)s %(message)s")
    forbid_inspection()
    serve(Connection(int(sys.argv[1])))
