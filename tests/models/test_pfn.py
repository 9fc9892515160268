"""PFNMethod.summarize streams chunks of queries and equals one predictive's summary."""

from __future__ import annotations

import numpy as np

import models.pfn as pfn
from models.bar_predictive import BarPredictive
from models.registry import load_registry
from models.testing import build_tiny_registry


def test_streamed_summary_equals_the_whole_predictive(tmp_path, monkeypatch):
    method = next(iter(load_registry(build_tiny_registry(tmp_path), warmup=False).models.values())).method
    rng = np.random.default_rng(0)
    cx, qx = rng.normal(size=(120, 64)), rng.normal(size=(23, 64))
    cy = 1.0 + 0.01 * cx[:, :32] + 0.001 * rng.normal(size=(120, 32))
    encoded = method.fit(cx, cy)
    assert encoded.spread is not None  # calibrated: the fold happens per chunk in the streamed path
    levels, band = (0.05, 0.5, 0.95), (0.995, 1.005)
    whole = method.predict(encoded, qx).summary(levels, band)
    monkeypatch.setattr(pfn, "SUMMARY_CHUNK", 5)  # 5 chunks, the last one short
    streamed = method.summarize(encoded, qx, levels, band)
    for name in ("mean", "std", "quantiles"):
        np.testing.assert_allclose(getattr(streamed, name), getattr(whole, name), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(streamed.p_outside, whole.p_outside, rtol=0, atol=1e-6)  # float32 probabilities
    assert streamed.mean.shape == (23, 32) and streamed.quantiles.shape == (3, 23, 32)


def test_summary_of_a_transposed_view_equals_that_of_contiguous_logits(tmp_path):
    """The PFN hands BarPredictive a (m, k) view of (k, m) memory; the summary works in memory order."""
    method = next(iter(load_registry(build_tiny_registry(tmp_path), warmup=False).models.values())).method
    rng = np.random.default_rng(1)
    cx, qx = rng.normal(size=(120, 64)), rng.normal(size=(7, 64))
    encoded = method.fit(cx, 1.0 + 0.01 * cx[:, :32])
    logits, loc, scale = method.raw_predict(encoded, qx)
    assert not logits.is_contiguous()
    levels, band = (0.1, 0.9), (0.995, 1.005)
    view = BarPredictive(method.bar, logits, loc, scale, spread=encoded.spread).summary(levels, band)
    dense = BarPredictive(method.bar, logits.contiguous(), loc, scale, spread=encoded.spread).summary(levels, band)
    for name in ("mean", "std", "quantiles", "p_outside"):
        np.testing.assert_array_equal(getattr(view, name), getattr(dense, name))


def test_small_context_calibration_holds_out_the_whole_base_fit():
    """Under physics_base.CV_BELOW_POINTS rows the calibration's truth is the base fit's K-fold
    residual (tree and model choice refit without the point): on 50 IEEE 33 rows those are larger
    than the final fit's LOO residuals, so the shipped model's intervals widen where they were short."""
    import gridsim
    from models.registry import DEFAULT_ROOT, load_checkpoint

    method = load_checkpoint(DEFAULT_ROOT / "transformer-dva-fast" / "0.2.1", warmup=False).method
    sim = gridsim.simulate(50, 0.3, seed=501)
    encoded = method.fit(sim.x, sim.vm_pu)
    loo_only = method.spread_factors(encoded.cache, method._tensor(sim.x))
    assert encoded.spread is not None and loo_only is not None
    assert np.median(encoded.spread / loo_only) > 1.05


def test_small_context_intervals_are_no_narrower_than_the_base_fits_bound():
    """Under CV_BELOW_POINTS rows each answer's 95 % interval is at least 2 * min_half wide, min_half
    the base fit's K-fold rms at its 95 % upper confidence bound; at 300 rows there is no floor."""
    import gridsim
    from models import physics_base
    from models.calibration import half_width_floor
    from models.registry import DEFAULT_ROOT, load_checkpoint

    method = load_checkpoint(DEFAULT_ROOT / "transformer-dva-fast" / "0.2.1", warmup=False).method
    sim = gridsim.simulate(16 + 200, 0.3, seed=502)
    cx, cy, qx = sim.x[:16], sim.vm_pu[:16], sim.x[16:]
    encoded = method.fit(cx, cy)
    cv = physics_base.cross_validated_errors(method._tensor(cx)[None], method._tensor(cy)[None], None).numpy()
    np.testing.assert_allclose(encoded.min_half, half_width_floor(cv), rtol=1e-9)
    low, high = method.predict(encoded, qx).interval(0.95)
    assert (0.5 * (high - low) >= encoded.min_half * (1 - 1e-9)).all()
    summary = method.summarize(encoded, qx, levels=(0.025, 0.975))
    assert (0.5 * (summary.quantiles[1] - summary.quantiles[0]) >= encoded.min_half * (1 - 1e-5)).all()
    large = gridsim.simulate(physics_base.CV_BELOW_POINTS, 0.3, seed=503)
    assert method.fit(large.x, large.vm_pu).min_half is None


def test_a_fit_for_means_is_uncalibrated_and_answers_the_same_means(tmp_path):
    """The guard's exact probe reads only means (models.off_context): its fit skips the calibration's pass."""
    method = next(iter(load_registry(build_tiny_registry(tmp_path), warmup=False).models.values())).method
    rng = np.random.default_rng(2)
    cx, qx = rng.normal(size=(120, 64)), rng.normal(size=(9, 64))
    cy = 1.0 + 0.01 * cx[:, :32] + 0.001 * rng.normal(size=(120, 32))
    full, means_only = method.fit(cx, cy), method.fit_for_means(cx, cy)
    assert full.spread is not None and means_only.spread is None and means_only.min_half is None
    np.testing.assert_array_equal(method.summarize(means_only, qx).mean, method.summarize(full, qx).mean)
