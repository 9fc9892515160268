"""The registry loads good checkpoints and refuses bad ones with a reason, the rest still loading."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from models.registry import CheckpointError, ModelNotServed, load_checkpoint, load_registry
from models.testing import build_tiny_registry


@pytest.fixture()
def registry_root(tmp_path):
    return build_tiny_registry(tmp_path / "reg", names=("good", "victim"))


def test_loads_models_with_cards_and_predicts(registry_root):
    registry = load_registry(registry_root, device="cpu")
    assert set(registry.models) == {"good", "victim"} and registry.errors == {}
    model = registry.get("good")
    assert model.device == "cpu" and model.card["device"] == "cpu"
    rng = np.random.default_rng(0)
    x = rng.random((120, 64))
    y = 1.0 - 0.01 * x[:, :32]
    pred = model.method.predict(model.method.fit(x[:100], y[:100]), x[100:])
    assert pred.mean.shape == (20, 32) and np.isfinite(pred.std).all() and (pred.std > 0).all()


def test_corrupted_weights_are_refused_while_the_rest_load(registry_root):
    weights = registry_root / "victim" / "0.0.1" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    registry = load_registry(registry_root, device="cpu")
    assert set(registry.models) == {"good"}
    assert "sha256" in registry.errors["victim/0.0.1"]


def test_incompatible_config_is_refused(registry_root):
    card_path = registry_root / "victim" / "0.0.1" / "card.json"
    card = json.loads(card_path.read_text())
    card["config"]["n_layers"] = 3
    card_path.write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match="tensor names differ"):
        load_checkpoint(card_path.parent, device="cpu")
    card["config"]["n_bars"] = 7
    card["config"]["n_layers"] = 2
    card_path.write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(card_path.parent, device="cpu")
    assert set(load_registry(registry_root, device="cpu").models) == {"good"}


def test_missing_card_field_and_missing_weights(registry_root, tmp_path):
    card_path = registry_root / "victim" / "0.0.1" / "card.json"
    card = json.loads(card_path.read_text())
    del card["outputs"]
    card_path.write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match="outputs"):
        load_checkpoint(card_path.parent, device="cpu")
    shutil.copytree(registry_root / "good", tmp_path / "copy")
    (tmp_path / "copy" / "0.0.1" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(tmp_path / "copy" / "0.0.1", device="cpu")


def test_shipped_registry_loads_without_errors():
    """Every checkpoint committed under models/registry must load and pass its checks: the served ones at
    start, every older one when pinned (start-up loads only the newest per model and network)."""
    from models.registry import DEFAULT_ROOT, EVERY_NETWORK

    cards = list(DEFAULT_ROOT.glob("*/*/card.json"))
    if not cards:
        pytest.fail("no shipped checkpoints under models/registry")
    registry = load_registry(DEFAULT_ROOT, device="cpu", pinned_versions=1, width_free=True)  # as the service
    assert registry.errors == {}
    assert len(registry.models) >= 1
    pinned = [(name, net, version) for (name, net), found in registry.available.items() for version in found]
    assert len(pinned) == len(cards)
    for name, net, version in pinned:
        served_on = "ieee33" if net == EVERY_NETWORK else net  # a checkpoint of every feeder, bound to one
        assert registry.get(name, served_on, version=version).version == version
    assert registry.errors == {}


def _add_version(root, name, version, source="0.0.1"):
    """A copy of `source` published as `version` (same weights, the card's version changed)."""
    target = root / name / version
    shutil.copytree(root / name / source, target)
    card = json.loads((target / "card.json").read_text())
    (target / "card.json").write_text(json.dumps({**card, "version": version}))
    return target


def test_older_versions_are_loaded_only_when_pinned(tmp_path, monkeypatch):
    import models.registry as registry_module
    from models.registry import VersionNotServed

    root = build_tiny_registry(tmp_path / "versions", names=("tiny",))
    _add_version(root, "tiny", "0.0.10")
    broken = _add_version(root, "tiny", "0.0.2")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10] + b"0123456789")  # only a load would notice
    loads = []
    real_load = registry_module.load_checkpoint
    monkeypatch.setattr(registry_module, "load_checkpoint", lambda d, **kw: loads.append(d.name) or real_load(d, **kw))

    registry = load_registry(root, device="cpu", pinned_versions=1)
    assert loads == ["0.0.10"] and registry.errors == {}  # 0.0.10 is newer than 0.0.2: numbers, not text
    assert registry.versions("tiny") == {"ieee33": "0.0.10"} and registry.loaded_versions() == []
    assert registry.available_versions("tiny") == {"ieee33": ["0.0.10", "0.0.2", "0.0.1"]}
    assert registry.get("tiny").version == "0.0.10" and registry.get("tiny", version="0.0.10") is registry.get("tiny")

    old = registry.get("tiny", "ieee33", version="0.0.1")
    assert old.version == "0.0.1" and old.card["version"] == "0.0.1" and loads == ["0.0.10", "0.0.1"]
    assert registry.get("tiny", version="0.0.1") is old and loads == ["0.0.10", "0.0.1"]  # loaded once
    assert registry.loaded_versions() == [("tiny", "ieee33", "0.0.1")]
    assert registry.get("tiny").version == "0.0.10"  # pinning changes nothing for everyone else

    with pytest.raises(VersionNotServed) as unknown:
        registry.get("tiny", version="9.9.9")
    assert unknown.value.versions == ["0.0.10", "0.0.2", "0.0.1"] and "9.9.9" in str(unknown.value)
    with pytest.raises(VersionNotServed, match="sha256") as refused:
        registry.get("tiny", version="0.0.2")
    assert refused.value.reason and "sha256" in registry.errors["tiny/0.0.2"]
    assert registry.loaded_versions() == [("tiny", "ieee33", "0.0.1")]


def test_pinned_versions_are_bounded_least_recently_used_dropped(tmp_path):
    root = build_tiny_registry(tmp_path / "lru", names=("tiny",))
    for version in ("0.0.2", "0.0.3", "0.0.4"):
        _add_version(root, "tiny", version)
    registry = load_registry(root, device="cpu", warmup=False, pinned_versions=2)
    first = registry.get("tiny", version="0.0.1")
    registry.get("tiny", version="0.0.2")
    registry.get("tiny", version="0.0.1")  # used again: 0.0.2 is now the least recent
    registry.get("tiny", version="0.0.3")
    assert registry.loaded_versions() == [("tiny", "ieee33", "0.0.1"), ("tiny", "ieee33", "0.0.3")]
    assert registry.get("tiny", version="0.0.1") is first
    assert registry.get("tiny", version="0.0.2").version == "0.0.2"  # dropped before, loaded again
    assert registry.loaded_versions() == [("tiny", "ieee33", "0.0.1"), ("tiny", "ieee33", "0.0.2")]


def test_a_refused_newest_version_leaves_the_next_older_one_served(tmp_path):
    root = build_tiny_registry(tmp_path / "fallback", names=("tiny",))
    newest = _add_version(root, "tiny", "0.0.2")
    (newest / "model.safetensors").unlink()
    registry = load_registry(root, device="cpu", warmup=False)
    assert registry.versions("tiny") == {"ieee33": "0.0.1"} and "missing" in registry.errors["tiny/0.0.2"]


def test_pinning_on_a_network_or_model_that_is_not_served(tmp_path):
    from models.registry import VersionNotServed

    root = build_tiny_registry(tmp_path / "pins", names=("tiny",))
    registry = load_registry(root, device="cpu", warmup=False, width_free=True, max_context=500)
    with pytest.raises(ModelNotServed):
        registry.get("tiny", "kerber_landnetz_kabel_1", version="0.0.1")
    with pytest.raises(ModelNotServed):
        registry.get("nonesuch", version="0.0.1")
    physics = registry.get("physics-fit", "ieee33")
    assert registry.get("physics-fit", "ieee33", version=physics.version) is physics
    with pytest.raises(VersionNotServed):
        registry.get("physics-fit", "ieee33", version="0.0.1")
    assert registry.available_versions("physics-fit") == {"*": [physics.version]}


def test_checkpoints_per_network_newest_version_of_each(tmp_path):
    root = build_tiny_registry(tmp_path / "nets", names=("tiny",), networks=("ieee33", "kerber_landnetz_kabel_1"))
    newer = root / "tiny" / "0.0.2-kerber"
    shutil.copytree(root / "tiny" / "0.0.1-kerber_landnetz_kabel_1", newer)
    card = json.loads((newer / "card.json").read_text())
    (newer / "card.json").write_text(json.dumps({**card, "version": "0.0.2"}))
    registry = load_registry(root, device="cpu", warmup=False)
    assert registry.errors == {} and registry.versions("tiny") == {
        "ieee33": "0.0.1",
        "kerber_landnetz_kabel_1": "0.0.2",
    }
    assert registry.get("tiny", "kerber_landnetz_kabel_1").version == "0.0.2"
    assert registry.get("tiny").card["network"] == "ieee33" and registry.models["tiny"].card["network"] == "ieee33"
    with pytest.raises(ModelNotServed) as refused:
        registry.get("tiny", "mv_oberrhein_sub0")
    assert refused.value.serves == ["ieee33", "kerber_landnetz_kabel_1"] and "mv_oberrhein_sub0" in str(refused.value)
    only = load_registry(root, device="cpu", warmup=False, network="kerber_landnetz_kabel_1")
    assert list(only.checkpoints) == [("tiny", "kerber_landnetz_kabel_1")] and only.models["tiny"].version == "0.0.2"


def test_card_naming_another_networks_features_is_refused(registry_root):
    card_path = registry_root / "victim" / "0.0.1" / "card.json"
    card = json.loads(card_path.read_text())
    card_path.write_text(json.dumps({**card, "network": "kerber_landnetz_kabel_1"}))
    with pytest.raises(CheckpointError, match="not network kerber_landnetz_kabel_1's"):
        load_checkpoint(card_path.parent, device="cpu")


def test_width_free_models_serve_any_network(registry_root):
    import gridsim
    from gridsim.feeders import snapshot
    from tests.gridsim.feeder_cases import small_feeder

    registry = load_registry(registry_root, device="cpu", warmup=False, width_free=True, max_context=500)
    assert registry.names() == ["good", "network-fit", "physics-fit", "victim"]
    assert registry.models_for("mv_oberrhein_sub0") == ["network-fit", "physics-fit"]
    for name in ("network-fit", "physics-fit"):
        assert registry.networks_of(name) == ["any radial feeder"]
        for net in (gridsim.network("kerber_landnetz_kabel_1"), snapshot(small_feeder())):
            loaded = registry.get(name, net)
            assert loaded.card["features"] == list(net.feature_names) and loaded.card["context_size"]["max"] == 500
            sim = gridsim.simulate(40, 0.2, 0, network=net)
            pred = loaded.method.predict(loaded.method.fit(sim.x[:30], sim.vm_pu[:30]), sim.x[30:])
            assert np.abs(pred.mean - sim.vm_pu[30:]).max() < 1e-4 and (pred.std > 0).all()
            assert registry.get(name, net) is loaded  # built once per network
