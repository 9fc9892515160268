"""Exact GP: agreement with scikit-learn, batching, linear term, calibration, validation, chunking."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from models.gp import ExactGP, _explained_variance, _nll, _robust_cholesky
from models.predictive import GaussianPredictive


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These problems are tiny: one thread avoids OpenMP spin-waits on the shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _smooth_data(seed: int, n: int, d: int, noise: float = 0.1):
    """A smooth function of inputs with very different scales; y in odd units (offset, scale)."""
    rng = np.random.default_rng(seed)
    scales = np.array([1.0, 3.0, 0.5, 10.0, 2.0][:d])
    x = rng.uniform(-2.0, 2.0, (n, d)) * scales
    u = x / scales
    f = np.sin(1.5 * u[:, 0]) + 0.3 * u[:, 1] ** 2 + (np.cos(2.0 * u[:, 2]) if d > 2 else 0.0)
    return x, (3.0 + 5.0 * (f + noise * rng.standard_normal(n)))[:, None]


@pytest.mark.parametrize("seed,d", [(0, 3), (1, 4)])
def test_marginal_likelihood_and_error_at_least_as_good_as_sklearn(seed, d):
    x, y = _smooth_data(seed, 100 + 300, d)
    cx, cy, qx, qy = x[:100], y[:100], x[100:], y[100:]
    fitted = ExactGP(device="cpu", max_iter=200).fit(cx, cy)
    ours = ExactGP(device="cpu").predict(fitted, qx)
    kernel = ConstantKernel() * RBF(length_scale=np.ones(d)) + WhiteKernel()
    sk = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=2, random_state=0).fit(cx, cy[:, 0])
    sk_lml = sk.log_marginal_likelihood_value_  # on y / std(y) (ddof 0), as our standardised value
    assert fitted.log_marginal_likelihood_standardized[0] >= sk_lml - 1e-3 * abs(sk_lml) - 1e-2
    # Original-units convention: the Jacobian of the standardisation is -n log std(y).
    assert fitted.log_marginal_likelihood[0] == pytest.approx(
        fitted.log_marginal_likelihood_standardized[0] - 100 * math.log(cy.std()), abs=1e-9
    )
    sk_mu, sk_sd = sk.predict(qx, return_std=True)  # WhiteKernel: sk's std includes the noise too
    ours_mse, sk_mse = np.mean((ours.mean[:, 0] - qy[:, 0]) ** 2), np.mean((sk_mu - qy[:, 0]) ** 2)
    assert ours_mse <= sk_mse * 1.02
    if abs(fitted.log_marginal_likelihood_standardized[0] - sk_lml) < 0.1:  # same optimum: same predictive
        assert np.max(np.abs(ours.std[:, 0] / sk_sd - 1)) < 1e-4


@pytest.mark.parametrize("linear", [False, True])
def test_hand_written_gradient_matches_autograd(linear):
    torch.manual_seed(0)
    k, n, d = 3, 25, 4
    x, y = torch.randn(n, d, dtype=torch.float64), torch.randn(k, n, dtype=torch.float64)
    p = {"lengthscale": 0.3 * torch.randn(k, d), "signal": 0.3 * torch.randn(k), "noise": torch.full((k,), -3.0)}
    if linear:
        p["linear"] = torch.randn(k, d) - 2.0
    p = {name: v.double().requires_grad_(True) for name, v in p.items()}
    diff = (x[:, None, :] - x[None, :, :])[None] / p["lengthscale"].exp()[:, None, None, :]
    cov = p["signal"].exp()[:, None, None] * torch.exp(-0.5 * diff.square().sum(-1))
    if linear:
        cov = cov + torch.einsum("id,jd,kd->kij", x, x, p["linear"].exp())
    cov = cov + torch.diag_embed(p["noise"].exp()[:, None].expand(k, n))
    ref = -torch.distributions.MultivariateNormal(torch.zeros(n, dtype=torch.float64), cov).log_prob(y)
    ref.sum().backward()
    nll, grads = _nll(x, y, {name: v.detach() for name, v in p.items()}, grad=True)
    torch.testing.assert_close(nll, ref.detach(), rtol=1e-10, atol=1e-9)
    for name, value in p.items():
        torch.testing.assert_close(grads[name], value.grad, rtol=1e-8, atol=1e-9, msg=name)


def test_k_outputs_in_one_call_equal_k_single_calls():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (60, 2))
    y = np.stack([np.sin(3 * x[:, 0]), x[:, 0] * x[:, 1] * 10 + 4, np.cos(2 * x[:, 1]) - x[:, 0]], 1)
    y += 0.05 * rng.standard_normal(y.shape)
    q = rng.uniform(-1, 1, (50, 2))
    gp = ExactGP(device="cpu", max_iter=300)
    joint_fit = gp.fit(x, y)
    joint = gp.predict(joint_fit, q)
    for j in range(3):
        single_fit = gp.fit(x, y[:, j : j + 1])
        single = gp.predict(single_fit, q)
        scale = y[:, j].std()
        assert np.max(np.abs(joint.mean[:, j] - single.mean[:, 0])) < 1e-3 * scale
        assert np.max(np.abs(joint.std[:, j] / single.std[:, 0] - 1)) < 1e-2
        assert joint_fit.log_marginal_likelihood[j] == pytest.approx(single_fit.log_marginal_likelihood[0], abs=1e-2)


def test_linear_term_extrapolates_a_linear_trend_far_better():
    """A linear trend plus a short-scale wiggle: the RBF alone needs a short length scale for the
    wiggle and reverts to the mean outside the data; the linear term carries the trend on."""
    rng = np.random.default_rng(4)
    w = np.array([1.5, 2.0, 0.7])
    x = rng.uniform(-1, 1, (60, 3))
    wiggle = lambda v: 0.2 * np.sin(4.0 * v[:, 0])  # noqa: E731
    y = (x @ w + wiggle(x) + 0.01 * rng.standard_normal(60))[:, None]
    q = rng.uniform(2, 3, (100, 3))  # outside the context's box
    truth = (q @ w + wiggle(q))[:, None]
    mse = {}
    for linear in (False, True):
        gp = ExactGP(linear_term=linear, device="cpu", max_iter=200)
        mse[linear] = np.mean((gp(x, y, q).mean - truth) ** 2)
    assert mse[True] < 0.05 * mse[False]
    assert mse[True] < 0.5  # the wiggle (variance 0.02) is unpredictable out there; the trend is not


def test_predictive_intervals_cover_a_gp_sampled_function():
    """Functions drawn from an RBF GP prior with noise: 90 % intervals hold about 90 % of new draws."""
    rng = np.random.default_rng(5)
    n, m, k = 120, 200, 4
    pts = rng.uniform(-2, 2, (n + m, 2))
    sq = ((pts[:, None, :] - pts[None, :, :]) / np.array([0.8, 1.5])) ** 2
    cov = 2.0 * np.exp(-0.5 * sq.sum(-1)) + 0.05 * np.eye(n + m)
    y = np.linalg.cholesky(cov) @ rng.standard_normal((n + m, k)) + 1.0
    pred = ExactGP(device="cpu", max_iter=200)(pts[:n], y[:n], pts[n:])
    low, high = pred.interval(0.9)
    coverage = np.mean((y[n:] >= low) & (y[n:] <= high))
    assert 0.84 <= coverage <= 0.96
    assert isinstance(pred, GaussianPredictive) and pred.timing.fit_s > 0 and pred.timing.predict_s > 0


@pytest.mark.parametrize(
    "args,field",
    [
        ((np.zeros(10), np.zeros((10, 1)), np.zeros((2, 1))), "context_x"),
        ((np.zeros((10, 2)), np.zeros(10), np.zeros((2, 2))), "context_y"),
        ((np.zeros((10, 2)), np.zeros((9, 1)), np.zeros((2, 2))), "context_y"),
        ((np.zeros((1, 2)), np.zeros((1, 1)), np.zeros((2, 2))), "context_x"),
        ((np.full((10, 2), np.nan), np.zeros((10, 1)), np.zeros((2, 2))), "context_x"),
        ((np.zeros((10, 2)), np.full((10, 1), np.inf), np.zeros((2, 2))), "context_y"),
        ((np.zeros((10, 2)), np.zeros((10, 1)), np.zeros((2, 3))), "query_x"),
        ((np.zeros((10, 2)), np.zeros((10, 1)), np.array([[0.0, np.nan]])), "query_x"),
        ((np.zeros((10, 0)), np.zeros((10, 1)), np.zeros((2, 0))), "context_x"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_field(args, field):
    rng = np.random.default_rng(6)
    cx, cy, q = (a if np.isnan(a).any() or np.isinf(a).any() else a + rng.standard_normal(a.shape) for a in args)
    with pytest.raises(ValueError, match=field):
        ExactGP(device="cpu", max_iter=5)(cx, cy, q)


def test_bad_options_raise():
    for kwargs in ({"max_iter": -1}, {"min_noise": 0.0}, {"opt_points": 1}, {"query_chunk": 0}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            ExactGP(**kwargs)


def test_chunked_prediction_equals_unchunked():
    x, y = _smooth_data(7, 150, 3)
    y = np.hstack([y, -2 * y + x[:, :1]])
    fitted = ExactGP(device="cpu", max_iter=30, linear_term=True).fit(x[:80], y[:80])
    whole = ExactGP(device="cpu", linear_term=True).predict(fitted, x[80:])
    chunked = ExactGP(device="cpu", linear_term=True, query_chunk=7).predict(fitted, x[80:])
    np.testing.assert_allclose(chunked.mean, whole.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(chunked.std, whole.std, rtol=1e-12, atol=1e-12)
    assert whole.mean.shape == (70, 2)


def test_standardisation_conventions_and_original_unit_hyperparameters():
    """Rescaling x changes only length scales; rescaling y shifts the original-units LML by -n log c."""
    x, y = _smooth_data(8, 60, 3)
    base = ExactGP(device="cpu", max_iter=100).fit(x, y)
    scaled = ExactGP(device="cpu", max_iter=100).fit(x * 10.0, y * 100.0)
    np.testing.assert_allclose(scaled.lengthscale, base.lengthscale * 10.0, rtol=1e-6)
    np.testing.assert_allclose(scaled.noise_variance, base.noise_variance * 1e4, rtol=1e-6)
    np.testing.assert_allclose(
        scaled.log_marginal_likelihood, base.log_marginal_likelihood - 60 * math.log(100.0), rtol=1e-9
    )
    assert base.linear_variance is None and base.signal_variance.shape == (1,)


def test_subset_optimisation_then_polish_on_all_points():
    x, y = _smooth_data(9, 300, 2, noise=0.2)
    rough = ExactGP(device="cpu", opt_points=80, max_iter=100).fit(x, y)
    polished = ExactGP(device="cpu", opt_points=80, max_iter=100, polish_iter=30).fit(x, y)
    assert polished.chol_inv.shape == (1, 300, 300) and polished.n_iter > rough.n_iter
    assert polished.log_marginal_likelihood[0] >= rough.log_marginal_likelihood[0] - 1e-6


def test_degenerate_context_stays_finite():
    """Duplicated rows, a constant input column and a constant output: finite answers, no NaN."""
    rng = np.random.default_rng(10)
    x = np.repeat(rng.uniform(0, 1, (15, 3)), 2, axis=0)
    x[:, 2] = 4.0
    y = np.stack([x[:, 0] * 2, np.full(30, 7.0)], 1)
    pred = ExactGP(device="cpu", max_iter=50)(x, y, rng.uniform(0, 1, (5, 3)))
    assert np.isfinite(pred.mean).all() and (pred.std > 0).all() and np.isfinite(pred.std).all()
    np.testing.assert_allclose(pred.mean[:, 1], 7.0, atol=1e-6)


def test_cholesky_adds_jitter_only_where_needed_and_raises_on_garbage():
    v = torch.randn(2, 6, 1, dtype=torch.float64)
    k_mat = torch.cat([v @ v.transpose(1, 2), torch.eye(6, dtype=torch.float64)[None]])  # 2 singular, 1 fine
    chol, jitter = _robust_cholesky(k_mat)
    assert (jitter[:2] > 0).all() and jitter[2] == 0
    rebuilt = chol @ chol.transpose(1, 2)
    torch.testing.assert_close(rebuilt, k_mat + jitter[:, None, None] * torch.eye(6, dtype=torch.float64))
    with pytest.raises(FloatingPointError, match="positive definite"):
        _robust_cholesky(torch.full((1, 3, 3), float("nan"), dtype=torch.float64))


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_blocked_explained_variance_equals_dense(n):
    chol_inv = torch.randn(3, n, n, dtype=torch.float64).tril()
    k_star = torch.randn(3, 5, n, dtype=torch.float64)
    dense = (k_star @ chol_inv.transpose(1, 2)).square().sum(-1)
    torch.testing.assert_close(_explained_variance(k_star, chol_inv), dense, rtol=1e-12, atol=1e-12)
