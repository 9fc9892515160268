"""BarDistribution against cases with known answers (uniform buckets, half-normal tails)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from models.bar_distribution import BarDistribution

BORDERS = [-2.0, -1.0, 0.0, 0.5, 1.5, 3.0]  # 5 bars, uneven widths; outer widths 1.0 and 1.5
Z75 = stats.norm.ppf(0.75)


def make(dtype=torch.float64) -> BarDistribution:
    return BarDistribution(torch.tensor(BORDERS, dtype=dtype))


def random_logits(shape, dtype=torch.float64, seed=0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, 5, generator=gen, dtype=dtype) * 2.0


def one_hot_logits(bucket: int, dtype=torch.float64, big: float = 1e4) -> torch.Tensor:
    logits = torch.full((5,), -big, dtype=dtype)
    logits[bucket] = big
    return logits


# ----- construction ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "borders, field",
    [
        ([0.0, 1.0], "at least 3"),
        ([0.0, 1.0, 1.0, 2.0], "strictly increasing"),
        ([0.0, float("nan"), 2.0], "finite"),
        ([[0.0, 1.0, 2.0]], "1-D"),
    ],
)
def test_bad_borders_raise(borders, field):
    with pytest.raises(ValueError, match=field):
        BarDistribution(torch.tensor(borders))


def test_logits_with_wrong_last_dim_raise():
    with pytest.raises(ValueError, match="logits"):
        make().mean(torch.zeros(3, 4, dtype=torch.float64))


def test_from_samples_equal_mass_and_strict_with_ties():
    gen = torch.Generator().manual_seed(0)
    samples = torch.randn(20000, generator=gen, dtype=torch.float64)
    bar = BarDistribution.from_samples(samples, 10)
    inner = torch.bucketize(samples, bar.borders[1:-1])
    fractions = torch.bincount(inner, minlength=10).double() / samples.numel()
    assert torch.allclose(fractions, torch.full((10,), 0.1, dtype=torch.float64), atol=2e-3)
    assert bar.n_bars == 10

    atoms = torch.cat([torch.zeros(5000), torch.ones(3000), torch.randn(1000, generator=gen)])
    tied = BarDistribution.from_samples(atoms, 50)
    assert (tied.borders[1:] > tied.borders[:-1]).all()
    assert tied.borders.numel() == 51
    as_float32 = tied.borders.float()  # model buffers hold float32 borders
    assert (as_float32[1:] > as_float32[:-1]).all()
    constant = BarDistribution.from_samples(torch.full((100,), 3.0), 8).borders.float()
    assert (constant[1:] > constant[:-1]).all()
    zeros = BarDistribution.from_samples(torch.zeros(100), 8).borders.float()
    assert (zeros[1:] > zeros[:-1]).all()
    with pytest.raises(ValueError, match="n_bars"):
        BarDistribution.from_samples(samples, 1)
    with pytest.raises(ValueError, match="finite"):
        BarDistribution.from_samples(torch.tensor([0.0, float("inf"), 1.0]), 2)


# ----- known answers ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bucket", [1, 2, 3])
def test_single_interior_bucket_is_uniform(dtype, bucket):
    bar = make(dtype)
    logits = one_hot_logits(bucket, dtype)
    lo, hi = BORDERS[bucket], BORDERS[bucket + 1]
    width = hi - lo
    tol = dict(rel=1e-5, abs=1e-5) if dtype == torch.float32 else dict(rel=1e-12, abs=1e-12)
    assert bar.mean(logits).item() == pytest.approx((lo + hi) / 2, **tol)
    assert bar.variance(logits).item() == pytest.approx(width**2 / 12, **tol)
    for frac in [0.0, 0.1, 0.5, 0.9, 1.0]:
        y = torch.tensor(lo + frac * width, dtype=dtype)
        assert bar.cdf(logits, y).item() == pytest.approx(frac, **tol)
    mid = torch.tensor((lo + hi) / 2, dtype=dtype)
    assert bar.log_prob(logits, mid).item() == pytest.approx(-math.log(width), **tol)
    q = bar.quantile(logits, torch.tensor([0.25, 0.75]))
    assert q[:, ...].tolist() == pytest.approx([lo + 0.25 * width, lo + 0.75 * width], **tol)


def test_single_tail_bucket_is_half_normal():
    bar = make()
    scale = (BORDERS[-1] - BORDERS[-2]) / Z75
    logits = one_hot_logits(4)
    assert bar.mean(logits).item() == pytest.approx(BORDERS[-2] + scale * math.sqrt(2 / math.pi), rel=1e-12)
    assert bar.variance(logits).item() == pytest.approx(scale**2 * (1 - 2 / math.pi), rel=1e-12)
    y = torch.tensor([BORDERS[-2] + 0.3, BORDERS[-2] + 4.0], dtype=torch.float64)
    expected = stats.halfnorm(loc=BORDERS[-2], scale=scale)
    assert np.allclose(bar.log_prob(logits, y).numpy(), expected.logpdf(y.numpy()), rtol=1e-12)
    assert np.allclose(bar.cdf(logits, y).numpy(), expected.cdf(y.numpy()), rtol=1e-12)
    left_scale = (BORDERS[1] - BORDERS[0]) / Z75
    left = stats.halfnorm(loc=0.0, scale=left_scale)
    y_left = torch.tensor([BORDERS[1] - 0.2, BORDERS[1] - 7.0], dtype=torch.float64)
    assert np.allclose(bar.cdf(one_hot_logits(0), y_left).numpy(), left.sf(BORDERS[1] - y_left.numpy()), rtol=1e-10)


def test_tail_mass_equals_outer_bucket_probability_and_half_within_width():
    bar = make()
    logits = random_logits((4,))
    p = torch.softmax(logits, -1)
    b = torch.tensor(BORDERS, dtype=torch.float64)
    cdf_at = lambda v: bar.cdf(logits, torch.full((4,), v, dtype=torch.float64))  # noqa: E731
    assert torch.allclose(cdf_at(BORDERS[1]), p[:, 0], rtol=1e-12)
    assert torch.allclose(1 - cdf_at(BORDERS[-2]), p[:, -1], rtol=1e-12)
    assert torch.allclose(cdf_at(BORDERS[1]) - cdf_at(BORDERS[0]), p[:, 0] / 2, rtol=1e-12)
    assert torch.allclose(cdf_at(BORDERS[-1]) - cdf_at(BORDERS[-2]), p[:, -1] / 2, rtol=1e-10)
    # interior buckets keep exactly their probability
    for i in range(1, 4):
        assert torch.allclose(cdf_at(b[i + 1].item()) - cdf_at(b[i].item()), p[:, i], rtol=1e-10)


def test_quantile_inverts_cdf_over_whole_line_including_tails():
    bar = make()
    logits = random_logits((3, 2))
    s_left, s_right = 1.0 / Z75, 1.5 / Z75
    # from 12 left-tail scales beyond borders[1] to 5 right-tail scales beyond borders[-2]
    y = torch.cat(
        [
            torch.linspace(BORDERS[1] - 12 * s_left, BORDERS[1], 200, dtype=torch.float64),
            torch.linspace(BORDERS[1], BORDERS[-2], 200, dtype=torch.float64),
            torch.linspace(BORDERS[-2], BORDERS[-2] + 5 * s_right, 200, dtype=torch.float64),
        ]
    )
    for i in range(3):
        for j in range(2):
            levels = bar.cdf(logits[i, j], y)
            back = bar.quantile(logits[i, j], levels)
            assert torch.allclose(back, y, rtol=1e-9, atol=1e-9), (back - y).abs().max()
    assert y.min() < BORDERS[0] - 10 and y.max() > BORDERS[-1] + 5  # the tails were exercised


def test_extreme_quantiles_leave_outer_borders():
    bar = make()
    logits = torch.zeros(5, dtype=torch.float64)
    q = bar.quantile(logits, torch.tensor([1e-12, 1e-4, 1 - 1e-4, 1 - 1e-12], dtype=torch.float64))
    assert q[0] < q[1] < BORDERS[0] and BORDERS[-1] < q[2] < q[3]
    assert torch.isfinite(q).all()


def test_quantile_shape_and_levels_validation():
    bar = make()
    logits = random_logits((2, 3))
    assert bar.quantile(logits, torch.tensor([0.1, 0.5, 0.9])).shape == (3, 2, 3)
    for bad in ([0.0, 0.5], [0.5, 1.0], [[0.5]], [float("nan")]):
        with pytest.raises(ValueError, match="levels"):
            bar.quantile(logits, torch.tensor(bad))


def test_density_integrates_to_one_and_to_the_cdf():
    bar = make()
    logits = random_logits((), seed=3)
    pdf = lambda v: bar.pdf(logits, torch.tensor(v, dtype=torch.float64)).item()  # noqa: E731
    total = integrate.quad(pdf, -np.inf, BORDERS[1])[0] + integrate.quad(pdf, BORDERS[-2], np.inf)[0]
    for lo, hi in zip(BORDERS[1:-2], BORDERS[2:-1]):
        total += integrate.quad(pdf, lo, hi)[0]
    assert total == pytest.approx(1.0, abs=1e-9)
    for y in [-4.0, -1.5, 0.2, 2.0, 5.0]:
        pieces = [p for p in BORDERS[1:-1] if p < y]
        mass = integrate.quad(pdf, -np.inf, min(y, BORDERS[1]))[0]
        edges = pieces + [y]
        for lo, hi in zip(edges[:-1], edges[1:]):
            mass += integrate.quad(pdf, lo, hi)[0]
        assert bar.cdf(logits, torch.tensor(y, dtype=torch.float64)).item() == pytest.approx(mass, abs=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sample_moments_match_mean_and_variance(dtype):
    bar = make(dtype)
    logits = random_logits((2, 2), seed=5).to(dtype)
    gen = torch.Generator().manual_seed(0)
    n = 200_000
    draws = bar.sample(logits, n, generator=gen)
    assert draws.shape == (n, 2, 2) and draws.dtype == dtype
    mean, var = bar.mean(logits).double(), bar.variance(logits).double()
    se = (var / n).sqrt()
    assert ((draws.double().mean(0) - mean).abs() < 5 * se).all()
    centred = draws.double() - draws.double().mean(0)
    se_var = ((centred**4).mean(0) - centred.var(0) ** 2).sqrt() / math.sqrt(n)
    assert ((centred.var(0) - var).abs() < 5 * se_var).all()
    # the empirical cdf agrees with cdf() at a few points, tails included
    for y in [-3.0, -1.2, 0.3, 2.0, 4.0]:
        emp = (draws.double() <= y).double().mean(0)
        assert torch.allclose(emp, bar.cdf(logits, torch.tensor(y, dtype=dtype)).double(), atol=5e-3)


def test_sample_is_reproducible_with_generator():
    bar = make()
    logits = random_logits((3,))
    a = bar.sample(logits, 10, generator=torch.Generator().manual_seed(7))
    b = bar.sample(logits, 10, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# ----- numerical safety -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_far_tails_and_extreme_logits_stay_finite(dtype):
    bar = make(dtype)
    logits = torch.stack(
        [
            torch.tensor([-1e4, 1e4, -1e4, -1e4, -1e4]),
            torch.tensor([0.0, -float("inf"), 0.0, -float("inf"), 0.0]),
            torch.tensor([50.0, -50.0, 80.0, -80.0, 30.0]),
        ]
    ).to(dtype)
    y = torch.tensor([-1e30, -1e6, -3.0, 0.25, 10.0, 1e6, 1e30], dtype=dtype)
    lp = bar.log_prob(logits[:, None, :], y[None, :])
    assert lp.shape == (3, 7) and torch.isfinite(lp).all()
    assert (lp[:, [0, -1]] < -1e20).all()  # far out is very unlikely, but finite
    assert (lp[:, [1, -2]] < -1e5).all()
    for fn in (bar.mean, bar.variance):
        assert torch.isfinite(fn(logits)).all()
    c = bar.cdf(logits[:, None, :], y[None, :])
    assert torch.isfinite(c).all() and (c >= 0).all() and (c <= 1).all()
    assert (c[:, 0] == 0).all() and (c[:, -1] == 1).all()
    q = bar.quantile(logits, torch.tensor([1e-6, 0.5, 1 - 1e-6]))
    assert torch.isfinite(q).all()
    assert (q[1:] >= q[:-1]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_prob_gradient_is_finite(dtype):
    bar = make(dtype)
    logits = (random_logits((4, 6), dtype=dtype) * 1e3).requires_grad_(True)
    y = torch.tensor([-1e8, -5.0, -1.0, 0.0, 2.0, 1e8], dtype=dtype).expand(4, 6).clone().requires_grad_(True)
    loss = -bar.log_prob(logits, y).mean()
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all() and torch.isfinite(y.grad).all()
    assert logits.grad.abs().sum() > 0


def test_log_prob_gradient_matches_softmax_cross_entropy():
    """d(-log_prob)/dlogits = softmax - onehot(bucket): the loss is a classification loss."""
    bar = make()
    logits = random_logits((3,)).requires_grad_(True)
    y = torch.tensor([-7.0, 0.7, 9.0], dtype=torch.float64)
    (-bar.log_prob(logits, y).sum()).backward()
    target = torch.nn.functional.one_hot(torch.tensor([0, 3, 4]), 5).double()
    assert torch.allclose(logits.grad, torch.softmax(logits.detach(), -1) - target, atol=1e-12)


def test_float32_agrees_with_float64():
    b32, b64 = make(torch.float32), make(torch.float64)
    logits = random_logits((5,), seed=9)
    y = torch.tensor([-6.0, -1.5, 0.1, 1.0, 6.0], dtype=torch.float64)
    assert torch.allclose(b32.log_prob(logits.float(), y.float()).double(), b64.log_prob(logits, y), atol=1e-4)
    assert torch.allclose(b32.cdf(logits.float(), y.float()).double(), b64.cdf(logits, y), atol=1e-5)
    lv = torch.tensor([0.001, 0.3, 0.999])
    assert torch.allclose(b32.quantile(logits.float(), lv).double(), b64.quantile(logits, lv), atol=1e-3)


def test_borders_are_saved_as_buffer():
    bar = make()
    state = bar.state_dict()
    assert torch.equal(state["borders"], torch.tensor(BORDERS, dtype=torch.float64))
    restored = BarDistribution(state["borders"])
    assert restored.n_bars == 5


def test_gradients_of_all_differentiable_methods_match_finite_differences():
    bar = make()
    logits = random_logits((3,), seed=11).requires_grad_(True)
    y = torch.tensor([-4.0, 0.2, 3.7], dtype=torch.float64)
    for fn in (
        bar.mean,
        bar.variance,
        lambda lg: bar.log_prob(lg, y),
        lambda lg: bar.cdf(lg, y),
        lambda lg: bar.quantile(lg, torch.tensor([0.01, 0.5, 0.99])),
    ):
        assert torch.autograd.gradcheck(fn, (logits,))


def test_cdf_from_probs_at_several_points_equals_one_point_at_a_time():
    bar = make()
    logits = random_logits((4, 3))
    p = torch.softmax(logits, dim=-1)
    y = torch.tensor([-5.0, -1.5, 0.25, 2.0, 9.0], dtype=torch.float64).expand(4, 3, 5)
    together = bar.cdf_from_probs(p, bar.cumulative(p), y.contiguous())
    assert together.shape == (4, 3, 5)
    for j in range(5):
        torch.testing.assert_close(together[..., j], bar.cdf(logits, y[..., j]), rtol=0, atol=1e-15)


def test_derived_constants_follow_borders_changed_in_place():
    """Geometry is derived once and kept; changing the borders in place must not leave it stale."""
    bar, logits = make(), random_logits((6,))
    y = torch.linspace(-3.0, 4.0, 6, dtype=torch.float64)
    before = bar.cdf(logits, y)
    with torch.no_grad():
        bar.borders.mul_(2.0)
    fresh = BarDistribution(torch.tensor(BORDERS, dtype=torch.float64) * 2.0)
    torch.testing.assert_close(bar.cdf(logits, y), fresh.cdf(logits, y), rtol=0, atol=0)
    torch.testing.assert_close(bar.mean(logits), fresh.mean(logits), rtol=0, atol=0)
    assert not torch.allclose(before, bar.cdf(logits, y))


# ----- plus a normal error --------------------------------------------------------------
@pytest.mark.parametrize("sigma", [1e-3, 0.05, 0.5, 3.0, 30.0])
def test_cdf_plus_normal_is_the_convolution_of_bars_tails_and_error(sigma):
    """P(Y + E <= y), E ~ N(0, sigma^2), in closed form (uniform buckets, skew-normal tails) against the convolution
    integrated numerically, for an error from far narrower than a bucket to 20x the whole support."""
    dist = make()
    logits = random_logits((3,), seed=4)
    p = torch.softmax(logits, dim=-1)
    y = torch.tensor([-6.0, -1.3, 0.2, 2.9, 8.0], dtype=torch.float64).expand(3, 5)
    got = dist.cdf_plus_normal(p, y, torch.full((3,), sigma, dtype=torch.float64)).numpy()
    for i in range(3):
        for j, end in enumerate(y[i].tolist()):
            density = lambda z, i=i, end=end: (  # noqa: E731
                float(dist.pdf(logits[i], torch.tensor(z, dtype=torch.float64))) * stats.norm.cdf((end - z) / sigma)
            )
            near = [end + k * sigma for k in (-10.0, -3.0, 0.0, 3.0, 10.0)]  # where the error's kernel turns
            ref = integrate.quad(density, -60.0, 60.0, points=BORDERS + near, limit=500, epsabs=1e-13)[0]
            assert abs(got[i, j] - ref) < 1e-9, (i, end, got[i, j], ref)


def test_cdf_plus_normal_tends_to_the_cdf_as_the_error_vanishes():
    dist = make()
    p = torch.softmax(random_logits((4,), seed=5), dim=-1)
    y = torch.linspace(-4.0, 5.0, 19, dtype=torch.float64).expand(4, 19)
    near = dist.cdf_plus_normal(p, y, torch.full((4,), 1e-10, dtype=torch.float64))
    torch.testing.assert_close(near, dist.cdf_from_probs(p, dist.cumulative(p), y), rtol=0.0, atol=1e-9)
