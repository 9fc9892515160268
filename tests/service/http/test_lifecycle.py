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
        assert c.get("/readyz").json()["models"] == ["physics-fit", MODEL]
        listing = c.get("/v1/models").json()
        assert [m["name"] for m in listing["models"]] == ["physics-fit", MODEL]
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
        assert [m["name"] for m in c.get("/v1/models").json()["models"]] == ["physics-fit"]
    missing = tmp_path / "missing"
    with running(Settings(model_dir=missing, gp_max_iter=1)) as server, httpx.Client(base_url=server.url) as c:
        assert_problem(c.get("/readyz"), 503)
        assert "model_dir" in c.get("/v1/models").json()["refused"]["*"]
    shutil.rmtree(root)
