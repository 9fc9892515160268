"""Behaviour under load: micro-batching of concurrent single queries, and 503 when the pool is full."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import numpy as np

from service.http.routers import context_sets
from service.settings import Settings
from tests.service.conftest import MODEL, assert_problem, metric, rows, running


def test_concurrent_single_queries_share_forward_passes(model_dir, scenarios):
    x, y = scenarios
    settings = Settings(model_dir=model_dir, batch_window_ms=50, batch_max_queries=64, gp_max_iter=1)
    with running(settings) as server:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            cid = c.post("/v1/context-sets", json={"x": rows(x[:30]), "y": rows(y[:30])}).json()["id"]
            together = c.post(
                "/v1/predict",
                json={"model": MODEL, "context_id": cid, "queries": rows(x[50:58]), "quantiles": [0.1, 0.9]},
            ).json()

        async def fire():
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as ac:
                requests = [
                    ac.post(
                        "/v1/predict",
                        json={
                            "model": MODEL,
                            "context_id": cid,
                            "queries": [rows(x[50 + i])],
                            "quantiles": [0.1, 0.9] if i % 2 else [0.5],
                        },
                    )
                    for i in range(8)
                ]
                return [r.json() for r in await asyncio.gather(*requests)]

        answers = asyncio.run(fire())
        assert max(a["timing"]["batch_rows"] for a in answers) >= 2  # they were batched
        for i, answer in enumerate(answers):  # each got its own row and its own statistics back
            np.testing.assert_allclose(answer["mean"], [together["mean"][i]], rtol=1e-5, atol=1e-7)
            assert set(answer["quantiles"]) == ({"0.1", "0.9"} if i % 2 else {"0.5"})
            if i % 2:
                np.testing.assert_allclose(answer["quantiles"]["0.9"], [together["quantiles"]["0.9"][i]], rtol=1e-5)
        with httpx.Client(base_url=server.url) as c:
            assert metric(c, "gridpfn_microbatch_requests_total") >= 8


def test_full_queue_answers_503_with_retry_after(model_dir, scenarios, monkeypatch):
    x, y = scenarios
    # the simulation holds the one model worker until the predict below has its answer: 1,000 power flows take
    # tens of ms, and on a busy host (pytest-xdist's other worker) they could end before the predict arrived
    release, simulate_context = threading.Event(), context_sets.simulate_context

    def held(spec, net):
        release.wait(60)
        return simulate_context(spec, net)

    monkeypatch.setattr(context_sets, "simulate_context", held)
    settings = Settings(model_dir=model_dir, workers=1, queue_size=0, max_simulate=1000)
    with running(settings) as server, httpx.Client(base_url=server.url, timeout=120) as c:
        cid = c.post("/v1/context-sets", json={"x": rows(x[:30]), "y": rows(y[:30])}).json()["id"]
        assert (
            c.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[:1])}).status_code == 200
        )
        slow: dict = {}
        # 1,000 power flows in the one model worker (the exact GP has its own pool: service.engine.gp_pool)
        simulated = {"simulate": {"network": "ieee33", "delta": 0.1, "n": 1000, "seed": 5}}
        worker = threading.Thread(
            target=lambda: slow.update(r=httpx.post(f"{server.url}/v1/context-sets", json=simulated, timeout=300))
        )
        worker.start()
        deadline = time.monotonic() + 30
        while metric(c, "gridpfn_pool_running") < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            response = c.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[:1])})
            # the built-ins' descriptions (computed at start-up) never wait for the model worker: they were a
            # worker job per built-in on every list, 3 s behind another key's study, a 503 with the pool full
            listed, read = c.get("/v1/networks"), c.get("/v1/networks/mv_oberrhein_sub0")
        finally:
            release.set()
        assert listed.status_code == 200 and read.status_code == 200, (listed.text, read.text)
        built_ins = {"ieee33", "kerber_landnetz_kabel_1", "mv_oberrhein_sub0"}
        assert built_ins <= {n["id"] for n in listed.json()["networks"]}
        assert read.json()["n_buses"] == len(read.json()["buses"]) > 0
        body = assert_problem(response, 503)
        assert body["type"].endswith("overloaded") and int(response.headers["retry-after"]) >= 1
        assert metric(c, "gridpfn_rejected_total", reason="queue_full") >= 1
        worker.join(timeout=300)
        assert slow["r"].status_code == 201  # the admitted job still finished
        assert (
            c.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[:1])}).status_code == 200
        )
