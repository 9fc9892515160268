"""The held-out calibration bias: measured on a checkpoint's prior, stored in its card, applied by its fits."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

import gridsim
from models.heldout_bias import CONTEXT_ROWS, line_fit, measure, slope_through_origin
from models.registry import DEFAULT_ROOT, CheckpointError, load_checkpoint, sha256_file, update_card

SHIPPED = DEFAULT_ROOT / "transformer-dva-fast" / "0.2.2"  # a real checkpoint whose card names its prior


@pytest.fixture
def checkpoint(tmp_path):
    directory = tmp_path / "fast"
    shutil.copytree(SHIPPED, directory)
    card = json.loads((directory / "card.json").read_text())
    card.pop("calibration", None)
    (directory / "card.json").write_text(json.dumps(card))
    return directory


def test_slope_through_origin_recovers_a_known_slope():
    h = np.linspace(0.1, 0.6, 20)
    assert slope_through_origin(h, 0.4 * h) == pytest.approx(0.4)
    np.testing.assert_allclose(line_fit(h, 0.1 + 0.4 * h), [0.1, 0.4])


def test_measured_on_the_prior_stored_in_the_card_and_applied_by_fits(checkpoint):
    weights_before = sha256_file(checkpoint / "model.safetensors")
    entry = measure(checkpoint, datasets=8, seed=3)
    low, high = entry["slope_interval95"]
    assert low <= entry["measured_slope"] <= high
    assert entry["datasets"] == 8 and entry["context_rows"] == list(CONTEXT_ROWS)
    line = entry["with_intercept"]
    shown = line["slope_interval95"][0] > 0 and line["intercept_interval95"][0] <= 0 <= line["intercept_interval95"][1]
    assert entry["heldout_slope"] == (entry["measured_slope"] if shown else 0.0)  # kept only where the data show it
    update_card(checkpoint, "calibration", {**entry, "heldout_slope": 0.5})  # a slope that surely narrows
    card = json.loads((checkpoint / "card.json").read_text())
    assert card["calibration"]["heldout_slope"] == 0.5 and not list(checkpoint.glob("*.tmp"))
    assert sha256_file(checkpoint / "model.safetensors") == weights_before == card["weights_sha256"]

    sloped = load_checkpoint(checkpoint, device="cpu", warmup=False).method
    assert sloped.heldout_slope == 0.5
    sim = gridsim.simulate(400, 0.3, seed=11, solver="batched")
    encoded = sloped.fit(sim.x, sim.vm_pu)
    plain = type(sloped)(sloped.model).fit(sim.x, sim.vm_pu)
    cache = encoded.cache
    h = sloped.base_leverage(
        cache, sloped._tensor(sim.x), sloped._tensor(sim.vm_pu), cache.targets[0].transpose(0, 1).numpy()
    )
    assert 0.05 < h < 0.95  # a 400-row IEEE 33 context: the physics fit has ~100-200 effective parameters
    np.testing.assert_allclose(encoded.spread, np.maximum(plain.spread / math.exp(0.5 * h), 0.2), rtol=1e-12)


def test_no_slope_under_the_k_fold_regime(checkpoint):
    """Below 300 rows the held-out truth is a K-fold residual: the slope does not apply."""
    update_card(checkpoint, "calibration", {"heldout_slope": 0.5})
    sloped = load_checkpoint(checkpoint, device="cpu", warmup=False).method
    sim = gridsim.simulate(120, 0.3, seed=12, solver="batched")
    np.testing.assert_array_equal(
        sloped.fit(sim.x, sim.vm_pu).spread, type(sloped)(sloped.model).fit(sim.x, sim.vm_pu).spread
    )


def test_a_card_without_calibration_serves_with_no_slope(checkpoint):
    assert load_checkpoint(checkpoint, device="cpu", warmup=False).method.heldout_slope == 0.0


@pytest.mark.parametrize("bad", [5.0, -0.1, "wide", float("nan")])
def test_a_broken_slope_in_a_card_is_refused_naming_the_field(checkpoint, bad):
    update_card(checkpoint, "calibration", {"heldout_slope": bad})
    with pytest.raises(CheckpointError, match=r"calibration.heldout_slope: expected a number in \[0.0, 2.0\]"):
        load_checkpoint(checkpoint, device="cpu", warmup=False)


def test_a_checkpoint_without_a_power_flow_prior_cannot_be_measured(checkpoint):
    card = json.loads((checkpoint / "card.json").read_text())
    del card["prior"]
    (checkpoint / "card.json").write_text(json.dumps(card))
    with pytest.raises(ValueError, match="prior: .* names no power-flow prior"):
        measure(checkpoint, datasets=8)
