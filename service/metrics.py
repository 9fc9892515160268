"""Prometheus metrics, one registry per app so several apps (tests) never collide.

With several server processes (`gridpfn serve --processes N`) each process counts its own requests,
and a scrape lands on one of them: its counters alone would jump back and forth between processes.
There the supervisor sets PROMETHEUS_MULTIPROC_DIR before starting the processes, prometheus_client
keeps every process's values in files in that directory, and /metrics answers the sum over all
processes (MultiProcessCollector), dead ones included for counters and histograms, live ones only
for gauges (`livesum`). service.commands.supervisor marks a process dead when it exits or is replaced.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client reads it when it is first imported
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    """Request, inference, GP, queue and cache metrics of one service instance."""

    def __init__(self) -> None:
        self.multiprocess_dir = os.environ.get(MULTIPROCESS_ENV) or None
        self.registry = r = CollectorRegistry()
        self.requests = Counter("gridpfn_http_requests", "HTTP requests", ["method", "route", "status"], registry=r)
        self.latency = Histogram(
            "gridpfn_http_request_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._inference_children: dict[tuple[str, str], Any] = {}
        self.inference = Histogram(
            "gridpfn_model_inference_seconds",
            "model time per call",
            ["model", "stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gp = Histogram(
            "gridpfn_gp_seconds", "exact GP time per call", ["stage"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.encodes = Counter("gridpfn_context_encodes", "contexts encoded by a model", ["model"], registry=r)
        self.gp_fits = Counter("gridpfn_gp_fits", "exact GP fits", registry=r)
        self.cache = Counter("gridpfn_cache_lookups", "in-process cache lookups", ["cache", "result"], registry=r)
        # with several processes: the sum over the live ones
        self.running = Gauge(
            "gridpfn_pool_running", "jobs running in the worker pool", registry=r, multiprocess_mode="livesum"
        )
        self.queued = Gauge("gridpfn_queue_depth", "jobs waiting for a worker", registry=r, multiprocess_mode="livesum")
        self.gp_running = Gauge(
            "gridpfn_gp_running",
            "exact GP requests running in its worker processes",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.gp_queued = Gauge(
            "gridpfn_gp_queue_depth",
            "exact GP requests waiting for a GP worker",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.rejected = Counter("gridpfn_rejected", "requests refused for load", ["reason"], registry=r)
        self.batch_rows = Histogram(
            "gridpfn_microbatch_rows",
            "query rows per micro-batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.batch_requests = Counter("gridpfn_microbatch_requests", "requests served by micro-batches", registry=r)

    def inference_time(self, model: str, stage: str) -> Any:
        """The inference histogram's child for (model, stage), looked up once: every request observes one,
        and prometheus_client's .labels() takes a lock and builds a key on every call."""
        child = self._inference_children.get((model, stage))
        if child is None:
            child = self._inference_children[(model, stage)] = self.inference.labels(model, stage)
        return child

    def depth(self, running: int, waiting: int) -> None:
        self.running.set(running)
        self.queued.set(waiting)

    def gp_depth(self, running: int, waiting: int) -> None:
        self.gp_running.set(running)
        self.gp_queued.set(waiting)

    def batch(self, rows: int, requests: int) -> None:
        self.batch_rows.observe(rows)
        self.batch_requests.inc(requests)

    def exposition(self) -> bytes:
        """This process's metrics, or with PROMETHEUS_MULTIPROC_DIR set every server process's summed."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.multiprocess_dir)
        return generate_latest(registry)
