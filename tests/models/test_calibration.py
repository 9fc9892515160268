"""In-context spread calibration: held-out predictions, conformal factors and the calibrated PFN answer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from models.bar_predictive import BarPredictive
from models.calibration import (
    MIN_CALIBRATION_POINTS,
    MIN_NARROWING_POINTS,
    MIN_SPREAD,
    check_heldout_slope,
    conformal_spread,
    half_width_floor,
    median_leverage,
    spread_from_heldout,
)
from models.pfn import PFNMethod
from models.predictive import GaussianPredictive
from models.testing import TINY_CONFIG, tiny_model


def _gaussian_heldout(true_sd: float, n: int = 4000, k: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(n, k))
    y = mu + true_sd * rng.normal(size=(n, k))
    return GaussianPredictive(mu, np.ones((n, k))), y


@pytest.mark.parametrize("true_sd", [0.5, 1.0, 2.0])
def test_spread_factor_recovers_how_much_wider_the_truth_is(true_sd):
    pred, y = _gaussian_heldout(true_sd)
    factor = spread_from_heldout(pred, y)
    assert factor.shape == (3,)
    np.testing.assert_allclose(factor, true_sd, rtol=0.08)


def test_conformal_factor_covers_its_level_and_never_collapses():
    pred, y = _gaussian_heldout(1.7, n=999)
    low, high = pred.interval(0.9)
    factor = conformal_spread(pred.mean, low, high, y, 0.9)
    mid = pred.mean
    covered = (y >= mid + factor * (low - mid)) & (y <= mid + factor * (high - mid))
    assert (covered.mean(axis=0) >= 0.9).all() and (covered.mean(axis=0) < 0.93).all()
    exact = spread_from_heldout(pred, pred.mean.copy())  # every held-out point predicted exactly
    assert (exact == MIN_SPREAD).all()


def test_few_held_out_points_may_widen_but_not_narrow():
    """A predictive twice too wide: narrowed with enough held-out points, left alone with few;
    one half as wide as the truth is widened either way."""
    wide, y = _gaussian_heldout(0.5, n=MIN_NARROWING_POINTS)
    np.testing.assert_allclose(spread_from_heldout(wide, y), 0.5, rtol=0.25)
    few_wide, few_y = _gaussian_heldout(0.5, n=MIN_NARROWING_POINTS - 1)
    assert (spread_from_heldout(few_wide, few_y) == 1.0).all()
    narrow, y_narrow = _gaussian_heldout(2.0, n=40)
    assert (spread_from_heldout(narrow, y_narrow) > 1.5).all()


def test_spread_stretches_the_bar_predictive_around_its_mean():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 2, 8, generator=gen)
    borders = torch.linspace(-2, 2, 9)
    from models.bar_distribution import BarDistribution

    bar = BarDistribution(borders)
    loc, scale = np.full((5, 2), 1.0), np.array([1e-3, 2e-3])
    plain = BarPredictive(bar, logits, loc, scale)
    spread = np.array([0.5, 1.5])
    wide = BarPredictive(bar, logits, loc, scale, spread=spread)
    np.testing.assert_allclose(wide.mean, plain.mean, rtol=0, atol=1e-15)
    np.testing.assert_allclose(wide.std, plain.std * spread, rtol=1e-12)
    q_plain, q_wide = plain.quantile([0.1, 0.9]), wide.quantile([0.1, 0.9])
    np.testing.assert_allclose(q_wide - wide.mean, (q_plain - plain.mean) * spread, rtol=1e-9, atol=1e-15)
    with pytest.raises(ValueError, match="spread"):
        BarPredictive(bar, logits, loc, scale, spread=np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="spread"):
        BarPredictive(bar, logits, loc, scale, spread=np.ones(3))


def _feeder_like(n: int, seed: int):
    """Smooth nonlinear maps of 6 inputs to 2 outputs, with some noise: a PFN-shaped task."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 6))
    y = np.stack([0.3 * x[:, 0] + np.sin(2 * x[:, 1]), x[:, 2] * x[:, 3] - 0.2 * x[:, 4]], 1)
    return x, 1.0 + 0.01 * (y + 0.1 * rng.normal(size=y.shape))


def test_calibrated_pfn_covers_close_to_nominal_where_the_raw_one_does_not():
    """An untrained tiny PFN's intervals are far off; the held-out spread brings 95 % coverage near 0.95."""
    model = tiny_model(dataclasses.replace(TINY_CONFIG, d_in=6), seed=0)
    raw = PFNMethod(model, calibrate=False)
    calibrated = PFNMethod(model)
    cx, cy = _feeder_like(300, 0)
    qx, qy = _feeder_like(2000, 1)

    def coverage(method):
        encoded = method.fit(cx, cy)
        low, high = method.predict(encoded, qx).interval(0.95)
        return ((qy >= low) & (qy <= high)).mean(axis=0), encoded.spread

    raw_cov, none = coverage(raw)
    cal_cov, spread = coverage(calibrated)
    assert none is None and spread.shape == (2,)
    assert np.abs(raw_cov - 0.95).max() > 0.04, raw_cov  # the premise: the raw model is miscalibrated
    assert np.abs(cal_cov - 0.95).max() < 0.03, cal_cov


def test_small_contexts_skip_calibration():
    model = tiny_model(dataclasses.replace(TINY_CONFIG, d_in=6), seed=0)
    cx, cy = _feeder_like(MIN_CALIBRATION_POINTS - 1, 0)
    assert PFNMethod(model).fit(cx, cy).spread is None
    cx, cy = _feeder_like(MIN_CALIBRATION_POINTS, 0)
    assert PFNMethod(model).fit(cx, cy).spread.shape == (2,)


def test_held_out_prediction_is_the_prediction_without_the_point(monkeypatch):
    """One layer: a context point's keys and values are its own embedding, so masking its key equals
    deleting the point from the encoded context and asking for it as a new query whose leverage
    feature is the point's own in-sample leverage (what a fit without it gives it once added)."""
    model = tiny_model(dataclasses.replace(TINY_CONFIG, d_in=6, n_layers=1), seed=0).eval()
    cx, cy = (torch.as_tensor(a) for a in _feeder_like(40, 0))
    base_at = model._base_at
    with torch.no_grad():
        cache = model.encode_context(cx[None], cy[None])
        held, _, _ = model.predict(cache, cx[None], held_out=True)
        for i in (0, 17, 39):
            keep = torch.arange(40) != i
            smaller = dataclasses.replace(
                cache, keys=[k[:, :, keep] for k in cache.keys], values=[v[:, :, keep] for v in cache.values]
            )
            own = cache.leverage[:, i : i + 1]
            monkeypatch.setattr(model, "_base_at", lambda stats, xs, own=own: (base_at(stats, xs)[0], own, None))
            alone, _, _ = model.predict(smaller, cx[None, i : i + 1])
            monkeypatch.undo()
            torch.testing.assert_close(held[:, :, i], alone[:, :, 0], rtol=1e-5, atol=1e-5)
        plain, _, _ = model.predict(cache, cx[None])
        assert not torch.allclose(plain, held, atol=1e-4)  # the mask does change the answer


def test_held_out_points_keep_their_in_sample_leverage():
    """As new queries the context points would get h / (1 + h) of their in-sample h, a smaller
    leverage than the fit without them gives them; the held-out pass uses the encoding's own."""
    model = tiny_model(dataclasses.replace(TINY_CONFIG, d_in=6, n_layers=1), seed=0).eval()
    cx, cy = (torch.as_tensor(a) for a in _feeder_like(40, 0))
    with torch.no_grad():
        cache = model.encode_context(cx[None], cy[None])
        _, as_queries = model.predict_base(cache.stats, cx[None])
    assert cache.leverage.shape == (1, 40)
    assert bool((as_queries < cache.leverage).all())


def test_half_width_floor_is_an_upper_confidence_bound_on_the_95_interval():
    """With sigma estimated from n held-out errors, the floor reaches the true 95 % half-width
    (1.96 sigma) in about 95 % of contexts, at 16 rows as at 200."""
    rng = np.random.default_rng(3)
    for n in (16, 200):
        errors = 2e-4 * rng.standard_normal((n, 4000))  # 4000 contexts of n errors, sigma 2e-4
        reached = half_width_floor(errors) >= 1.959964 * 2e-4
        assert 0.94 <= reached.mean() <= 0.96, (n, reached.mean())
    np.testing.assert_allclose(half_width_floor(np.ones((16, 1))), 1.959964 * np.sqrt(16 / 7.9616), rtol=1e-4)


def test_overstatement_is_divided_out_only_where_a_factor_may_narrow():
    wide, y = _gaussian_heldout(0.5, n=MIN_NARROWING_POINTS)
    plain = spread_from_heldout(wide, y)
    np.testing.assert_allclose(spread_from_heldout(wide, y, overstatement=1.25), np.maximum(plain / 1.25, MIN_SPREAD))
    narrow, y_narrow = _gaussian_heldout(2.0, n=40)
    np.testing.assert_array_equal(
        spread_from_heldout(narrow, y_narrow, overstatement=1.25), spread_from_heldout(narrow, y_narrow)
    )


def test_median_leverage_is_the_hat_diagonal_of_a_linear_fit():
    """Least squares on p of n points: r = (1 - h) r_loo, so the leverages come back (mean p / n)."""
    rng = np.random.default_rng(0)
    n, p = 200, 40
    x = rng.normal(size=(n, p))
    y = x @ rng.normal(size=(p, 2)) + rng.normal(size=(n, 2))
    hat = x @ np.linalg.solve(x.T @ x, x.T)
    r = y - hat @ y
    loo = r / (1.0 - np.diag(hat))[:, None]
    assert median_leverage(r, loo) == pytest.approx(np.median(np.diag(hat)), rel=1e-9)
    assert median_leverage(np.zeros((3, 2)), np.zeros((3, 2))) == 0.0  # nothing defined: no leverage


@pytest.mark.parametrize("bad", [-0.5, 2.5, float("nan"), "steep", None])
def test_a_heldout_slope_out_of_range_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"calibration.heldout_slope: expected a number in \[0.0, 2.0\]"):
        check_heldout_slope(bad)
    with pytest.raises(ValueError, match="heldout_slope"):
        PFNMethod(tiny_model(), heldout_slope=bad)
