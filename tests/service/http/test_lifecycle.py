"""Start-up edge cases: a registry with a refused checkpoint, and one with no usable model."""

from __future__ import annotations

import json
import shutil

import httpx

from models.testing import build_tiny_registry
from service.settings import Settings
from tests.service.conftest import MODEL, assert_problem, running


def test_refused_checkpoint_is_reported_and_others_serve(tmp_path):
    root = build_tiny_registry(tmp_path / "registry", names=(MODEL, "broken"))
    card_path = root / "broken" / "0.0.1" / "card.json"
    card = json.loads(card_path.read_text())
    card["weights_sha256"] = "0" * 64  # the weights no longer match the card
    card_path.write_text(json.dumps(card))
    with running(Settings(model_dir=root, gp_max_iter=1)) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/readyz").json()["models"] == ["network-fit", "physics-fit", MODEL]
        listing = c.get("/v1/models").json()
        assert [m["name"] for m in listing["models"]] == ["network-fit", "physics-fit", MODEL]
        assert "sha256" in listing["refused"]["broken/0.0.1"]
        body = assert_problem(c.get("/v1/models/broken"), 404, "name")
        assert "checkpoint refused" in body["detail"]


def test_no_usable_model_is_alive_but_not_ready(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    with running(Settings(model_dir=root, gp_max_iter=1)) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/healthz").status_code == 200
        for path in ("/readyz", "/v2/health/ready"):
            assert assert_problem(c.get(path), 503)["type"].endswith("no-models")
        # physics-fit needs no checkpoint, but a model dir without one is a deployment error: not ready
        assert [m["name"] for m in c.get("/v1/models").json()["models"]] == ["network-fit", "physics-fit"]
    missing = tmp_path / "missing"
    with running(Settings(model_dir=missing, gp_max_iter=1)) as server, httpx.Client(base_url=server.url) as c:
        assert_problem(c.get("/readyz"), 503)
        assert "model_dir" in c.get("/v1/models").json()["refused"]["*"]
    shutil.rmtree(root)


def test_older_versions_are_listed_loaded_only_when_pinned_and_unknown_ones_named(tmp_path):
    """Start-up loads the newest version per model and network; `version` pins an older one, loaded on
    first use and answering with its own weights; an unknown version is a 404 naming `version`."""
    import numpy as np

    import gridsim
    from models.registry import write_checkpoint
    from models.testing import tiny_card, tiny_model
    from tests.service.batch_support import wait_for
    from tests.service.conftest import rows

    root = build_tiny_registry(tmp_path / "registry", names=(MODEL,))  # 0.0.1
    write_checkpoint(tiny_model(seed=7), tiny_card(MODEL, version="0.0.2"), root / MODEL / "0.0.2")
    sim = gridsim.simulate(40, 0.1, 0)
    context = {"x": rows(sim.x[:30]), "y": rows(sim.vm_pu[:30])}
    request = {"model": MODEL, "context": context, "queries": rows(sim.x[30:])}
    with running(Settings(model_dir=root, gp_max_iter=1)) as server, httpx.Client(base_url=server.url) as c:
        registry = server.app.state.runtime.registry
        assert c.get("/readyz").status_code == 200 and registry.loaded_versions() == []  # 0.0.1 not loaded
        tiny = [m for m in c.get("/v1/models").json()["models"] if m["name"] == MODEL][0]
        assert tiny["versions"] == {"ieee33": "0.0.2"} and tiny["available"] == {"ieee33": ["0.0.2", "0.0.1"]}
        card = c.get(f"/v1/models/{MODEL}", params={"version": "0.0.1"}).json()
        assert card["version"] == "0.0.1" and card["served"] is False and registry.loaded_versions() == []
        assert c.get(f"/v1/models/{MODEL}", params={"version": "0.0.2", "network": "ieee33"}).json()["served"] is True

        newest = c.post("/v1/predict", json=request).json()
        pinned = c.post("/v1/predict", json={**request, "version": "0.0.1"}).json()
        assert newest["version"] == "0.0.2" and pinned["version"] == "0.0.1"
        assert not np.allclose(newest["std"], pinned["std"])  # another checkpoint's weights answered
        assert registry.loaded_versions() == [(MODEL, "ieee33", "0.0.1")]
        assert c.post("/v1/predict", json=request).json()["version"] == "0.0.2"  # the default is unchanged

        unknown = assert_problem(c.post("/v1/predict", json={**request, "version": "9.9.9"}), 404, "version")
        assert "0.0.2, 0.0.1" in unknown["detail"]
        assert_problem(c.post("/v1/predict", json={**request, "version": "not a version"}), 422, "version")
        assert_problem(c.get(f"/v1/models/{MODEL}", params={"version": "9.9.9"}), 404, "version")

        cid = c.post("/v1/context-sets", json=context).json()["id"]
        batch = {"simulate": {"network": "ieee33", "delta": 0.1, "n": 20, "seed": 1}, "model": MODEL, "context_id": cid}
        assert_problem(c.post("/v1/batch-jobs", json={**batch, "version": "9.9.9"}), 404, "version")
        job = c.post("/v1/batch-jobs", json={**batch, "version": "0.0.1"})
        assert job.status_code == 202, job.text
        assert c.get(f"/v1/batch-jobs/{job.json()['id']}").json()["model_version"] == "0.0.1"
        assert wait_for(c, job.json()["id"], lambda status: status["state"] in ("done", "failed"))["state"] == "done"
        form = c.post(
            "/v1/batch-jobs",
            data={"model": MODEL, "context_id": cid, "version": "9.9.9"},
            files={"file": ("loads.csv", b"a\n1\n")},
        )
        assert_problem(form, 404, "version")
