"""The store going away mid-run: context-id requests -> 503, inline-context requests keep working."""

from __future__ import annotations

import httpx
import pytest

from service.settings import Settings
from tests.conftest import throwaway_redis
from tests.service.conftest import MODEL, assert_problem, rows, running


@pytest.fixture
def own_redis():
    """A throwaway redis-server this test may kill."""
    with throwaway_redis() as server:
        yield server


def test_store_outage(own_redis, model_dir, scenarios):
    proc, url = own_redis
    x, y = scenarios
    # recheck 0: every context-id request asks the store (with the default 1 s a copy in memory
    # could still answer the first requests after the outage began)
    settings = Settings(model_dir=model_dir, redis_url=url, store_timeout_s=0.5, gp_max_iter=5, context_recheck_s=0)
    with running(settings) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        cid = c.post("/v1/context-sets", json={"x": rows(x[:20]), "y": rows(y[:20])}).json()["id"]
        by_id = {"model": MODEL, "context_id": cid, "queries": rows(x[:2])}
        inline = {"model": MODEL, "context": {"x": rows(x[:20]), "y": rows(y[:20])}, "queries": rows(x[:2])}
        assert c.post("/v1/predict", json=by_id).status_code == 200

        proc.kill()
        proc.wait(timeout=10)

        response = c.post("/v1/predict", json=by_id)
        body = assert_problem(response, 503)
        assert body["type"].endswith("store-unavailable") and response.headers["retry-after"]
        assert_problem(c.get(f"/v1/context-sets/{cid}"), 503)
        assert_problem(c.delete(f"/v1/context-sets/{cid}"), 503)
        assert_problem(c.post("/v1/context-sets", json={"x": rows(x[:9]), "y": rows(y[:9])}), 503)
        assert_problem(c.post("/v1/gp/predict", json={"context_id": cid, "queries": rows(x[:1])}), 503)
        assert_problem(c.get("/readyz"), 503)

        ok = c.post("/v1/predict", json=inline)
        assert ok.status_code == 200 and ok.json()["context_id"] == cid
        assert c.post("/v1/gp/predict", json={"context": inline["context"], "queries": rows(x[:1])}).status_code == 200
        assert c.post("/v1/simulate", json={"loads": rows(x[:1])}).status_code == 200
        assert c.get("/healthz").status_code == 200
