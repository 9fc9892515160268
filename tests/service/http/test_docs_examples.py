"""Every example shown at /docs runs as shown, each on its own, on a fresh server (issue 31 item 5)."""

from __future__ import annotations

import httpx

from service.settings import Settings
from tests.service.conftest import LIMITS, running


def _json_routes(schema: dict) -> dict[str, str]:
    """Request component -> the path whose POST takes it as its JSON body."""
    routes = {}
    for path, operations in schema["paths"].items():
        body = operations.get("post", {}).get("requestBody", {}).get("content", {}).get("application/json", {})
        ref = body.get("schema", {}).get("$ref", "")
        if ref.startswith("#/components/schemas/"):
            routes[ref.rpartition("/")[2]] = path
    return routes


def test_every_documented_example_runs_on_its_own_on_a_fresh_server(model_dir):
    with running(Settings(model_dir=model_dir, redis_url=None, **LIMITS)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            schema = client.get("/openapi.json").json()
            routes = _json_routes(schema)
            shown = {name: c["examples"] for name, c in schema["components"]["schemas"].items() if "examples" in c}
            assert {"PredictRequest", "StudyRequest", "HostingCapacityRequest", "MeterPlacementRequest"} <= set(shown)
            batch = schema["paths"]["/v1/batch-jobs"]["post"]["requestBody"]["content"]["application/json"]
            job = batch["examples"]["simulated"]["value"]
            # the one example that needs another first says so, and on a fresh server its context is not there
            assert "POST /v1/context-sets" in batch["examples"]["simulated"]["summary"]
            assert client.post("/v1/batch-jobs", json=job).status_code == 404
            for name in sorted(shown, key=lambda n: n == "ContextSetCreate"):  # context sets last: none relies on them
                for example in shown[name]:
                    response = client.post(routes[name], json=example)
                    assert 200 <= response.status_code < 300, (name, response.text[:500])
            created = client.post("/v1/batch-jobs", json=job)  # after the context-set example, as its summary says
            assert created.status_code == 202, created.text
            client.delete(f"/v1/batch-jobs/{created.json()['id']}")
            about = schema["info"]["description"]
            assert "for the IEEE 33-bus feeder" not in about and "uploaded" in about and "(`ieee33`)" in about
