"""BarPredictive: the bar distribution in physical units behind the common Predictive interface."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.bar_distribution import BarDistribution
from models.bar_predictive import BarPredictive

BORDERS = torch.tensor([-2.0, -1.0, 0.0, 0.5, 1.5, 3.0])  # float32 borders, as a model buffer holds them
M, K = 4, 3


def make(logits=None, loc=None, scale=None, seed=0) -> BarPredictive:
    gen = torch.Generator().manual_seed(seed)
    if logits is None:
        logits = torch.randn(M, K, 5, generator=gen) * 2.0
    if loc is None:
        loc = 1.0 + 0.01 * np.arange(M * K, dtype=np.float64).reshape(M, K)
    if scale is None:
        scale = np.array([1e-3, 2e-3, 5e-4])
    return BarPredictive(BarDistribution(BORDERS), logits, loc, scale)


def test_outputs_are_float64_numpy_with_interface_shapes():
    pred = make()
    assert pred.mean.shape == (M, K) and pred.mean.dtype == np.float64
    assert pred.std.shape == (M, K) and pred.std.dtype == np.float64
    assert pred.quantile([0.05, 0.5, 0.95]).shape == (3, M, K)
    assert pred.cdf(1.0).shape == (M, K)
    assert pred.log_prob(np.full((M, K), 1.0)).shape == (M, K)
    assert pred.p_outside(0.95, 1.05).shape == (M, K)
    assert pred.sample(5, seed=1).shape == (5, M, K)
    low, high = pred.interval(0.9)
    assert (low < pred.mean).all() and (pred.mean < high).all()


def test_one_bucket_maps_through_loc_and_scale():
    logits = torch.full((M, K, 5), -1e4)
    logits[..., 2] = 1e4  # all mass on [0, 0.5)
    loc = np.full((M, K), 1.02)
    pred = make(logits=logits, loc=loc, scale=2e-3)
    assert np.allclose(pred.mean, 1.02 + 2e-3 * 0.25, rtol=0, atol=1e-15)
    assert np.allclose(pred.std, 2e-3 * 0.5 / math.sqrt(12), rtol=1e-12)
    assert np.allclose(pred.cdf(1.02 + 2e-3 * 0.125), 0.25, atol=1e-12)
    assert np.allclose(pred.log_prob(np.full((M, K), 1.0205)), -math.log(2e-3 * 0.5), rtol=1e-12)
    assert np.allclose(pred.quantile([0.5])[0], 1.02 + 2e-3 * 0.25, atol=1e-15)


def test_quantile_inverts_cdf_in_physical_units_including_tails():
    pred = make()
    levels = [1e-9, 1e-3, 0.02, 0.3, 0.5, 0.77, 0.99, 1 - 1e-6]
    q = pred.quantile(levels)
    for i, level in enumerate(levels):
        assert np.allclose(pred.cdf(q[i]), level, rtol=1e-9, atol=1e-15)
    # the extreme quantiles leave the outer borders mapped to physical units
    assert (q[0] < pred.loc + pred.scale * BORDERS[0].item()).all()
    assert (q[-1] > pred.loc + pred.scale * BORDERS[-1].item()).all()


def test_cdf_many_is_each_cdf_to_the_bit_in_one_pass():
    """The off-context guard's band probability asks ~50 cdfs of one answer: cdf_many gives them from one
    softmax, equal to the last bit to one cdf call per set of values, tails included; a stretched answer too."""
    pred = make()
    pred.spread, pred.min_half = np.array([1.5, 1.0, 2.0]), np.array([1e-4, 1e-2, 1e-4])
    values = pred.mean[None] + np.linspace(-8.0, 8.0, 7)[:, None, None] * pred.std[None]
    values[3, 0, 0] = np.inf  # a band end at infinity
    many = pred.cdf_many(values)
    assert many.shape == (7, M, K)
    np.testing.assert_array_equal(many, np.stack([pred.cdf(v) for v in values]))
    assert many[0].max() < 0.05 and many[-1].min() > 0.95 and many[3, 0, 0] == 1.0  # it reached both tails
    with pytest.raises(ValueError, match=r"\(L, m, k\)"):
        pred.cdf_many(values[0])


def test_cdf_with_error_follows_the_stretched_answer_in_physical_units():
    """The error is standardised with the answer's own (stretched) scale: a vanishing error gives the answer's cdf,
    and the sum's cdf at any value equals the standardised closed form (BarDistribution.cdf_plus_normal)."""
    pred = make()
    pred.spread, pred.min_half = np.array([1.5, 1.0, 2.0]), np.array([1e-4, 1e-2, 1e-4])
    values = pred.mean[None] + np.linspace(-8.0, 8.0, 7)[:, None, None] * pred.std[None]
    np.testing.assert_allclose(
        pred.cdf_with_error(values, np.zeros((M, K))), pred.cdf_many(values), rtol=0.0, atol=1e-9
    )
    error = 3.0 * pred.std
    got = pred.cdf_with_error(values, error)
    probe = BarPredictive(BarDistribution(BORDERS), pred.logits, pred._loc_scale()[0], pred._loc_scale()[1])
    np.testing.assert_array_equal(got, probe.cdf_with_error(values, error))  # the stretch is only loc and scale
    assert np.all(np.diff(got, axis=0) > 0) and got[0].min() > pred.cdf_many(values)[0].min()  # the error spreads it
    with pytest.raises(ValueError, match=r"\(L, m, k\)"):
        pred.cdf_with_error(values[0], error)


def test_cells_are_the_same_answers_one_row():
    """The off-context guard works on the few cells near a voltage band only (models.off_context): cells keep
    each cell's own distribution, its output's spread and floor included, to the bit."""
    pred = make()
    pred.spread, pred.min_half = np.array([1.5, 1.0, 2.0]), np.array([1e-4, 1e-2, 1e-4])
    mask = np.zeros((M, K), dtype=bool)
    mask[[0, 1, 3], [2, 0, 1]] = True
    sub = pred.cells(mask)
    assert sub.mean.shape == (1, 3)
    for whole, part in ((pred.mean, sub.mean), (pred.std, sub.std), (pred.cdf(1.0), sub.cdf(1.0))):
        np.testing.assert_array_equal(part[0], whole[mask])
    np.testing.assert_array_equal(sub.quantile([0.1, 0.9])[:, 0], pred.quantile([0.1, 0.9])[:, mask])


def gauss_legendre_grid(edges, n=64):
    """Nodes and weights covering [edges[0], edges[-1]] piecewise (exact for the flat buckets)."""
    x, w = np.polynomial.legendre.leggauss(n)
    nodes, weights = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        nodes.append((b - a) / 2 * x + (a + b) / 2)
        weights.append((b - a) / 2 * w)
    return np.concatenate(nodes), np.concatenate(weights)


def test_log_prob_includes_jacobian_and_integrates_to_one():
    pred = make()
    b = BORDERS.double().numpy()
    tail_l, tail_r = (b[1] - b[0]) / 0.6744897501960817, (b[-1] - b[-2]) / 0.6744897501960817
    for i, j in [(0, 0), (2, 1), (3, 2)]:
        loc, scale = pred.loc[i, j], pred.scale[i, j]
        z_edges = np.concatenate(
            [b[1] - tail_l * np.array([14.0, 8, 4, 2, 1]), b[1:-1], b[-2] + tail_r * np.array([1.0, 2, 4, 8, 14])]
        )
        y, w = gauss_legendre_grid(loc + scale * np.unique(z_edges))
        # one call: the same cell's distribution repeated once per quadrature node
        cell = BarPredictive(pred.bar, pred.logits[i, j].expand(len(y), 1, 5), np.full((len(y), 1), loc), scale)
        total = (np.exp(cell.log_prob(y[:, None]))[:, 0] * w).sum()
        assert total == pytest.approx(1.0, abs=1e-9)
    y = pred.loc + pred.scale * 0.3
    z_lp = pred._bar64.log_prob(pred.logits.double(), torch.full((M, K), 0.3, dtype=torch.float64)).numpy()
    assert np.allclose(pred.log_prob(y), z_lp - np.log(pred.scale), rtol=1e-10)


def test_p_outside_of_the_inner_band_is_the_outer_bucket_mass():
    logits = torch.randn(M, K, 5, generator=torch.Generator().manual_seed(3)).double()
    loc = np.full((M, K), 1.0)
    pred = make(logits=logits, loc=loc, scale=1e-2)
    p = torch.softmax(logits, -1).numpy()
    outside = pred.p_outside(1.0 + 1e-2 * BORDERS[1].item(), 1.0 + 1e-2 * BORDERS[-2].item())
    assert np.allclose(outside, p[..., 0] + p[..., -1], rtol=1e-6)
    # an infinite band holds everything; p_outside stays in [0, 1]
    assert np.allclose(pred.p_outside(-np.inf, np.inf), 0.0)
    assert np.allclose(pred.cdf(-np.inf), 0.0) and np.allclose(pred.cdf(np.inf), 1.0)


def test_samples_match_mean_and_std():
    pred = make()
    draws = pred.sample(100_000, seed=0)
    se = pred.std / math.sqrt(draws.shape[0])
    assert (np.abs(draws.mean(0) - pred.mean) < 5 * se).all()
    assert np.allclose(draws.std(0), pred.std, rtol=0.05)


@pytest.mark.parametrize("scale", [3e-3, np.full(K, 3e-3), np.full((1, K), 3e-3), np.full((M, 1), 3e-3)])
def test_scale_broadcasts(scale):
    ref = make(scale=np.full((M, K), 3e-3))
    pred = make(scale=scale)
    assert np.allclose(pred.std, ref.std) and np.allclose(pred.mean, ref.mean)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(logits=torch.zeros(M, K, 4)), "logits"),
        (dict(logits=torch.zeros(M, 5)), "logits"),
        (dict(logits=torch.full((M, K, 5), float("nan"))), "logits"),
        (dict(loc=np.zeros((M, K + 1))), "loc"),
        (dict(loc=np.full((M, K), np.nan)), "loc"),
        (dict(scale=np.zeros(K)), "scale"),
        (dict(scale=np.ones(K + 1)), "scale"),
        (dict(scale=-1.0), "scale"),
    ],
)
def test_bad_construction_raises(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make(**kwargs)


def test_bad_queries_raise():
    pred = make()
    with pytest.raises(ValueError, match="levels"):
        pred.quantile([0.0, 0.5])
    with pytest.raises(ValueError, match="values"):
        pred.cdf(np.full((M, K), np.nan))
    with pytest.raises(ValueError, match="values"):
        pred.cdf(np.zeros((M + 1, K)))
    with pytest.raises(ValueError, match="y"):
        pred.log_prob(np.full((M, K), np.inf))


def test_fused_summary_matches_the_per_statistic_float64_answers():
    """The service's one-pass float32 summary equals mean/std/quantile/p_outside to float32 precision."""
    pred = make(seed=3)
    levels, band = (0.05, 0.5, 0.95), (0.999, 1.11)
    fused = pred.summary(levels, band)
    tol = 1e-5 * pred.scale  # z to float32 precision, mapped to physical units
    np.testing.assert_allclose(fused.mean, pred.mean, rtol=0, atol=tol.max())
    np.testing.assert_allclose(fused.std, pred.std, rtol=0, atol=tol.max())
    np.testing.assert_allclose(fused.quantiles, pred.quantile(levels), rtol=0, atol=tol.max())
    np.testing.assert_allclose(fused.p_outside, pred.p_outside(*band), rtol=0, atol=1e-6)
    assert ((fused.p_outside > 1e-3) & (fused.p_outside < 0.999)).sum() >= 3  # the band cuts some distributions
    bare = pred.summary()
    assert bare.quantiles.shape == (0, M, K) and bare.p_outside is None
    with pytest.raises(ValueError, match="band"):
        pred.summary(levels, (1.05, 0.95))
    with pytest.raises(ValueError, match="levels"):
        pred.summary((0.0, 0.5))


def test_fused_summary_folds_the_spread_like_the_per_statistic_answers():
    """With a spread the summary folds it per chunk from its own softmax; the per-statistic methods
    fold it lazily in float64: the answers agree, and the mean is the uncalibrated one."""
    plain = make(seed=4)
    spread = np.array([0.5, 1.0, 2.5])
    pred = BarPredictive(plain.bar, plain.logits, plain.loc, plain.scale, spread=spread)
    levels, band = (0.05, 0.5, 0.95), (0.999, 1.11)
    fused = pred.summary(levels, band)
    tol = 1e-5 * (pred.scale * spread).max()
    np.testing.assert_allclose(fused.mean, plain.mean, rtol=0, atol=tol)
    np.testing.assert_allclose(fused.std, plain.std * spread, rtol=1e-5)
    np.testing.assert_allclose(fused.quantiles, pred.quantile(levels), rtol=0, atol=tol)
    np.testing.assert_allclose(fused.p_outside, pred.p_outside(*band), rtol=0, atol=1e-6)
    wide = pred.quantile([0.95]) - pred.mean
    np.testing.assert_allclose(wide, (plain.quantile([0.95]) - plain.mean) * spread, rtol=1e-9)


def test_min_half_widens_only_the_answers_whose_interval_is_narrower():
    """`min_half` (k,) stretches an answer around its mean just enough that its central 95 % interval
    is 2 * min_half wide; answers already wider keep their distribution. Both paths agree."""
    plain = make(seed=5)
    spread = np.array([1.0, 1.5, 0.8])
    calibrated = BarPredictive(plain.bar, plain.logits, plain.loc, plain.scale, spread=spread)
    low, high = calibrated.interval(0.95)
    half = 0.5 * (high - low)
    min_half = np.median(half, axis=0)
    pred = BarPredictive(plain.bar, plain.logits, plain.loc, plain.scale, spread=spread, min_half=min_half)
    low2, high2 = pred.interval(0.95)
    half2 = 0.5 * (high2 - low2)
    narrow = half < min_half
    assert narrow.any() and (~narrow).any()
    np.testing.assert_allclose(half2[narrow], np.broadcast_to(min_half, half.shape)[narrow], rtol=1e-9)
    np.testing.assert_allclose(half2[~narrow], half[~narrow], rtol=1e-9)
    np.testing.assert_allclose(pred.mean, plain.mean, rtol=0, atol=1e-15)  # stretched around the mean
    levels = (0.025, 0.5, 0.975)
    fused = pred.summary(levels)
    np.testing.assert_allclose(fused.quantiles, pred.quantile(levels), rtol=0, atol=1e-5 * (plain.scale * 3).max())
    np.testing.assert_allclose(fused.std, pred.std, rtol=1e-5)
    with pytest.raises(ValueError, match="min_half"):
        BarPredictive(plain.bar, plain.logits, plain.loc, plain.scale, min_half=-min_half)
    with pytest.raises(ValueError, match="min_half"):
        BarPredictive(plain.bar, plain.logits, plain.loc, plain.scale, min_half=np.ones(2))
