"""Spreads calibrated on held-out errors less the readings' meter noise (models.meter_noise), as served: the
off-context guard with network-fit as denoiser, on IEEE 33 with the batched solver's exact voltages as truth."""

from __future__ import annotations

import numpy as np
import pytest

import gridsim
from gridsim.api import VoltageModel
from models import network_fit
from models.meter_noise import independent_across_buses, meter_noise, worth_taking_out
from models.off_context import OffContextGuard
from models.physics_base import PhysicsBaseMethod

LEVELS = (0.025, 0.975)


def test_meter_noise_is_the_reading_less_the_denoised_answer_and_keeps_what_moves_every_bus():
    rng = np.random.default_rng(0)
    truth = 1.0 - 0.01 * rng.uniform(size=(400, 20))
    noise = rng.normal(0.0, 1e-3, truth.shape)
    np.testing.assert_allclose(meter_noise(truth + noise, truth), noise, atol=2e-4)
    drift = rng.normal(0.0, 5e-3, (400, 1))  # the substation's voltage moving every bus of a row: no meter's noise
    found = meter_noise(truth + noise + drift, truth)
    # the drift is left in the readings; of the noise, all but its row mean (1e-3 / sqrt(20)) is found
    assert np.sqrt(np.mean(np.square(found - noise))) < 1.2 * 1e-3 / np.sqrt(20)
    assert np.sqrt(np.mean(np.square(meter_noise(truth + drift, truth)))) < 1e-4  # no meter noise: none found
    with_gap = truth + noise
    with_gap[3, 4] = np.nan
    assert meter_noise(with_gap, truth)[3, 4] == 0.0 and np.isfinite(meter_noise(with_gap, truth)).all()


def test_only_departures_independent_from_bus_to_bus_are_taken_for_meter_noise():
    rng = np.random.default_rng(1)
    assert independent_across_buses(rng.normal(0.0, 1e-3, (500, 32)))
    loads = rng.uniform(size=(500, 1))
    shared = 1e-6 * loads @ rng.uniform(0.5, 1.0, (1, 32))  # one line off: every bus below it departs alike
    assert not independent_across_buses(shared + rng.normal(0.0, 1e-8, shared.shape))
    lateral = rng.normal(0.0, 1e-3, (500, 32))
    lateral[:, 29:32] += rng.normal(0.0, 1e-3, (500, 1))  # a swing no load explains, shared by a 3-bus lateral
    assert not independent_across_buses(lateral)
    assert not independent_across_buses(rng.normal(0.0, 1e-3, (500, 2)))  # two buses cannot show it
    assert independent_across_buses(np.column_stack([rng.normal(0.0, 1e-3, (500, 8)), np.zeros((500, 3))]))


def test_noise_is_taken_out_only_where_it_is_a_fair_share_of_the_held_out_error():
    assert worth_taking_out(np.array([1e-4, 4e-4]), np.array([1e-3, 1e-3]))
    assert not worth_taking_out(np.array([1e-4, 2e-4]), np.array([1e-3, 1e-3]))
    assert not worth_taking_out(np.array([1e-3]), np.array([0.0]))  # an exact fit has nothing to narrow


def _served_guard(net: gridsim.Network, model: VoltageModel, denoiser: bool = True) -> OffContextGuard:
    """physics-fit as the registry serves it (models.registry.width_free_builder), or without its denoiser."""
    return OffContextGuard(
        PhysicsBaseMethod(net.load_positions),
        model,
        within_reach=True,
        denoiser=network_fit.method_for(net, model) if denoiser else None,
    )


def _coverage_and_width(summary, truth):
    inside = (truth >= summary.quantiles[0]) & (truth <= summary.quantiles[1])
    error = np.abs(summary.mean - truth)
    width = (summary.quantiles[1] - summary.quantiles[0]).mean() / np.mean(2.0 * np.quantile(error, 0.95, axis=0))
    return inside.mean(axis=0).min(), width


@pytest.mark.parametrize("lines", ["as modelled", "each 0.7-1.3x"])
def test_noisy_readings_are_answered_from_the_readings_denoised(lines):
    """IEEE 33, 500 readings with 1e-3 p.u. meter noise within +-10 % of base, queries drawn alike (within the
    context's reach), the lines as modelled or each off by its own factor (not told). A fit of the noisy readings is
    no better than per-bus least squares and its interval is as wide as the noise carries it (as without a
    denoiser: 0.83x least squares, 2.2e-3 p.u. wide); answered from the readings denoised by network-fit's joint
    fit, the error is 0.03x (as modelled) and 0.12x (lines off) least squares, the interval 7-22x narrower, and it
    still holds the noise-free truth on every bus."""
    import dataclasses

    net = gridsim.network("ieee33")
    rng = np.random.default_rng(2903)
    around = lambda rows: net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load)))  # noqa: E731
    scale = 1.0 if lines == "as modelled" else rng.uniform(0.7, 1.3, net.n_lines)
    truth_of = VoltageModel(dataclasses.replace(net, r_ohm=net.r_ohm * scale, x_ohm=net.x_ohm * scale))
    model = VoltageModel(net)
    x, queries = around(500), around(300)
    y = truth_of(x) + rng.normal(0.0, 1e-3, (500, len(net.output_buses)))
    truth = truth_of(queries)
    coef = np.linalg.lstsq(np.c_[np.ones(len(x)), x], y, rcond=None)[0]
    least_squares = np.abs(np.c_[np.ones(len(queries)), queries] @ coef - truth).mean()

    guard = _served_guard(net, model)
    fitted = guard.fit(x, y)
    assert fitted.without_noise
    answer = guard.summarize(fitted, queries, LEVELS)
    coverage, _ = _coverage_and_width(answer, truth)
    width = (answer.quantiles[1] - answer.quantiles[0]).mean()
    assert coverage >= 0.95 and np.abs(answer.mean - truth).mean() <= 0.2 * least_squares

    assert fitted.probes._value is None  # answered from the denoised fits: the 16 noisy probes were never built

    readings = _served_guard(net, model, denoiser=False)
    old = readings.summarize(readings.fit(x, y), queries, LEVELS)
    assert np.abs(old.mean - truth).mean() > 0.7 * least_squares
    assert width < 0.25 * (old.quantiles[1] - old.quantiles[0]).mean()


def test_exact_readings_keep_their_answer_bit_for_bit():
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(2904)
    x = net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (300, 2 * net.n_load)))
    model = VoltageModel(net)
    y, queries = model(x), x[:50] * 1.02
    with_denoiser, without = _served_guard(net, model), _served_guard(net, model, denoiser=False)
    fitted = with_denoiser.fit(x, y)
    assert not fitted.without_noise
    a = with_denoiser.summarize(fitted, queries, LEVELS)
    b = without.summarize(without.fit(x, y), queries, LEVELS)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.quantiles, b.quantiles)


def test_a_checkpoint_is_calibrated_less_the_noise_too(tmp_path):
    """PFNMethod.without_meter_noise: zero noise gives its own factors back; the readings' noise narrows them."""
    from models.registry import load_registry
    from models.testing import build_tiny_registry

    method = next(iter(load_registry(build_tiny_registry(tmp_path), warmup=False).models.values())).method
    rng = np.random.default_rng(3)
    cx = rng.normal(size=(200, 64))
    truth = 1.0 + 0.01 * cx[:, :32]
    noise = rng.normal(0.0, 1e-3, truth.shape)
    encoded = method.fit(cx, truth + noise)
    assert encoded.spread is not None
    same = method.without_meter_noise(encoded, cx, truth + noise, np.zeros_like(noise))
    np.testing.assert_allclose(same.spread, encoded.spread, rtol=1e-6)
    narrowed = method.without_meter_noise(encoded, cx, truth + noise, noise)
    assert np.median(narrowed.spread / encoded.spread) < 0.7
    rms = method.heldout_rms(encoded)
    assert rms is not None and rms.shape == (32,) and np.all(rms > 5e-4)  # the noise is in the held-out errors
