"""Linear baselines every other method is judged against.

On the 33-bus feeder the load -> voltage map is nearly linear (least-squares errors around
1e-7 p.u.), so these are strong, cheap references, not strawmen:
- MeanPredictor: the context mean and spread per output (the trivial baseline);
- LeastSquares: ordinary least squares with intercept, std from residual variance and leverage;
- BayesianLinearRegression: isotropic Gaussian prior on standardised inputs, prior precision
  and noise per output by evidence maximisation, predictive std with parameter uncertainty;
- RidgeLOO: ridge on standardised inputs, penalty per output by exact leave-one-out error.
All share one SVD of the standardised design across the k outputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from models.predictive import GaussianPredictive, Method
from models.validation import check_context, check_queries

log = logging.getLogger(__name__)

# These matrices are small ((500, 64) SVDs, (m, 64) @ (64, k) products): one BLAS thread is
# fastest, and on a loaded machine spinning OpenBLAS threads made the same SVD 2 s instead of 5 ms.
_F = TypeVar("_F", bound=Callable[..., Any])
_one_blas_thread: Callable[[_F], _F] = threadpool_limits.wrap(limits=1, user_api="blas")

_REL_FLOOR = 1e-12  # smallest std reported, relative to the output's magnitude: never 0


def _floor(y_mean: np.ndarray, y_sd: np.ndarray) -> np.ndarray:
    """Per-output std floor: a tiny fraction of the output's magnitude (1 if it is 0)."""
    ref = np.maximum(np.abs(y_mean), y_sd)
    return _REL_FLOOR * np.where(ref > 0, ref, 1.0)


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear model: y = intercept + x @ coef, per output; std terms in standardised units."""

    x_mean: np.ndarray  # (d,)
    x_scale: np.ndarray  # (d,), inf for constant columns (they carry no information)
    y_mean: np.ndarray  # (k,)
    y_scale: np.ndarray  # (k,)
    w: np.ndarray  # (d, k) coefficients on standardised inputs and outputs
    vt: np.ndarray  # (r, d) right singular vectors of the standardised design, rank r
    param_prec: np.ndarray  # (r, k) posterior precision along each singular direction
    null_var: np.ndarray  # (k,) parameter variance outside the design's span (0: ignored)
    noise_var: np.ndarray  # (k,) noise variance including the intercept's share
    std_floor: np.ndarray  # (k,)
    alpha: np.ndarray | None = None  # (k,) noise precision (Bayesian only)
    lam: np.ndarray | None = None  # (k,) prior precision of standardised weights (Bayesian), ridge penalty (RidgeLOO)
    n_context: int | None = None  # rows fitted (noise_var holds the intercept's 1 / n share of them)

    @property
    def coef(self) -> np.ndarray:
        """(d, k) coefficients in physical units."""
        coef: np.ndarray = self.w * self.y_scale[None, :] / self.x_scale[:, None]
        return coef

    @property
    def intercept(self) -> np.ndarray:
        intercept: np.ndarray = self.y_mean - self.x_mean @ self.coef
        return intercept

    @property
    def noise_std(self) -> np.ndarray:
        """(k,) the readings' noise std in output units, the intercept's 1 / n share taken out of noise_var."""
        share = 1.0 if self.n_context is None else 1.0 + 1.0 / self.n_context
        std: np.ndarray = self.y_scale * np.sqrt(self.noise_var / share)
        return std


def _thin_svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The thin SVD by LAPACK's divide and conquer (gesdd), by its QR iteration (gesvd) where that does not converge:
    single-threaded OpenBLAS's gesdd failed on a rank-deficient design that gesvd takes (IEEE 33 with half its loads
    unmetered at their typical values: an HTTP 500 before)."""
    try:
        return np.linalg.svd(a, full_matrices=False)
    except np.linalg.LinAlgError:
        log.debug("linear: gesdd did not converge on a %s design; gesvd instead", a.shape)
        return scipy.linalg.svd(a, full_matrices=False, lapack_driver="gesvd")  # type: ignore[no-any-return]


@_one_blas_thread
def _standardised_svd(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Standardise inputs and outputs, then one thin SVD of the design shared by all outputs."""
    n = x.shape[0]
    x_mean, x_sd = x.mean(0), x.std(0)
    x_scale = np.where(x_sd > 1e-10 * np.abs(x_mean), x_sd, np.inf)
    y_mean, y_sd = y.mean(0), y.std(0)
    y_const = ~(y_sd > 1e-10 * np.abs(y_mean))
    y_scale = np.where(y_const, np.where(np.abs(y_mean) > 0, np.abs(y_mean), 1.0), y_sd)
    xs = (x - x_mean) / x_scale
    ys = (y - y_mean) / y_scale
    u, s, vt = _thin_svd(xs)
    # numpy's lstsq rank rule; exactly collinear columns (fixed power factors: Q proportional to P) drop out
    rank = int((s > s[0] * max(xs.shape) * np.finfo(float).eps).sum()) if s.size and s[0] > 0 else 0
    u, s, vt = u[:, :rank], s[:rank], vt[:rank]
    c = u.T @ ys  # (r, k)
    outside = ys - u @ c  # (n, k) part of y no linear fit can explain
    floor = _floor(y_mean, y_sd)
    return dict(
        n=n,
        x_mean=x_mean,
        x_scale=x_scale,
        y_mean=y_mean,
        y_scale=y_scale,
        y_sd=y_sd,
        u=u,
        s=s,
        vt=vt,
        c=c,
        outside=outside,
        resid=(outside**2).sum(0),
        floor=floor,
    )


def posterior_mean(fit: LinearFit, query_x: np.ndarray) -> np.ndarray:
    """(m, k) the posterior mean alone at (m, d) queries: `posterior`'s without the variance's cost."""
    return _mean_at(fit, (query_x - fit.x_mean) / fit.x_scale)


def _mean_at(fit: LinearFit, xs: np.ndarray) -> np.ndarray:
    """The posterior mean at standardised queries xs (m, d)."""
    mean: np.ndarray = fit.y_mean + fit.y_scale * (xs @ fit.w)
    return mean


@_one_blas_thread
def posterior(fit: LinearFit, query_x: np.ndarray, readings: bool = True) -> GaussianPredictive:
    """The predictive at (m, d) queries: of a new reading (`readings`: the noise included), or of the
    function itself (the posterior of intercept + coefficients only: what a noise-free truth needs)."""
    xq = check_queries(query_x, d=fit.x_mean.shape[0])
    xs = (xq - fit.x_mean) / fit.x_scale
    mu = _mean_at(fit, xs)
    proj = xs @ fit.vt.T  # (m, r)
    n = fit.n_context
    noise = fit.noise_var if readings or n is None else fit.noise_var / (n + 1.0)  # the intercept's share only
    var = noise[None, :] + (proj**2) @ (1.0 / fit.param_prec)
    if np.any(fit.null_var > 0) and fit.vt.shape[0] < fit.vt.shape[1]:
        outside = np.clip((xs**2).sum(1) - (proj**2).sum(1), 0.0, None)
        var = var + outside[:, None] * fit.null_var[None, :]
    sigma = np.maximum(fit.y_scale * np.sqrt(var), fit.std_floor)
    return GaussianPredictive(mu=mu, sigma=sigma)


def _predict(fit: LinearFit, query_x: np.ndarray) -> GaussianPredictive:
    return posterior(fit, query_x, readings=True)


class MeanPredictor(Method):
    """Ignores the inputs: context mean, and the std a new draw would have around it."""

    name = "mean"

    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> LinearFit:
        x, y = check_context(context_x, context_y)
        n, d = x.shape
        k = y.shape[1]
        y_mean, y_sd = y.mean(0), y.std(0, ddof=1)
        return LinearFit(
            x_mean=x.mean(0),
            x_scale=np.full(d, np.inf),
            y_mean=y_mean,
            y_scale=np.ones(k),
            w=np.zeros((d, k)),
            vt=np.zeros((0, d)),
            param_prec=np.ones((0, k)),
            null_var=np.zeros(k),
            noise_var=y_sd**2 * (1.0 + 1.0 / n),
            std_floor=_floor(y_mean, y_sd),
        )

    def predict(self, fitted: LinearFit, query_x: np.ndarray) -> GaussianPredictive:
        return _predict(fitted, query_x)


class LeastSquares(Method):
    """OLS with intercept (minimum-norm when rank deficient); std = sigma * sqrt(1 + 1/n + leverage).

    With no residual degrees of freedom left (n <= rank + 1) the noise cannot be estimated; the
    output's sample variance is used instead (logged), rather than a zero std.
    """

    name = "least_squares"

    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> LinearFit:
        x, y = check_context(context_x, context_y)
        g = _standardised_svd(x, y)
        n, s, r = g["n"], g["s"], g["s"].shape[0]
        k = y.shape[1]
        dof = n - 1 - r
        if dof >= 1:
            sigma2 = g["resid"] / dof
        else:
            log.warning(
                "least squares: %d rows leave no residual degrees of freedom for rank %d; "
                "using the sample variance of y as noise",
                n,
                r,
            )
            sigma2 = (g["y_sd"] / g["y_scale"]) ** 2 * n / (n - 1)
        sigma2 = np.maximum(sigma2, (g["floor"] / g["y_scale"]) ** 2)
        return LinearFit(
            x_mean=g["x_mean"],
            x_scale=g["x_scale"],
            y_mean=g["y_mean"],
            y_scale=g["y_scale"],
            w=g["vt"].T @ (g["c"] / s[:, None]),
            vt=g["vt"],
            param_prec=(s**2)[:, None] / sigma2[None, :],
            null_var=np.zeros(k),
            noise_var=sigma2 * (1.0 + 1.0 / n),
            std_floor=g["floor"],
        )

    def predict(self, fitted: LinearFit, query_x: np.ndarray) -> GaussianPredictive:
        return _predict(fitted, query_x)


def _log_evidence(
    log_gamma: np.ndarray, s2: np.ndarray, c2: np.ndarray, resid: np.ndarray, n_eff: int, e_floor: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Profile log evidence over gamma = prior / noise precision, the noise precision maximised out.

    log_gamma (G, k); s2 (r,); c2 (r, k). Returns (evidence (G, k), E(gamma) (G, k)) where
    E = ||y - X w||^2 * alpha-part + gamma ||w||^2 = resid + sum gamma c^2 / (s^2 + gamma).
    """
    gamma = np.exp(log_gamma)[..., None, :]  # (G, 1, k)
    denom = s2[None, :, None] + gamma  # (G, r, k)
    e = np.maximum(resid + (gamma * c2[None] / denom).sum(1), e_floor)
    ev = 0.5 * s2.size * log_gamma - 0.5 * np.log(denom).sum(1) - 0.5 * n_eff * np.log(e)
    return ev, e


class BayesianLinearRegression(Method):
    """y = b + x_std @ w + noise, w ~ N(0, I / lam), noise ~ N(0, 1 / alpha), flat prior on b.

    alpha and lam per output maximise the marginal likelihood (intercept integrated out, so
    n - 1 effective rows). For fixed gamma = lam / alpha the optimal alpha is closed form, which
    leaves a 1-D search over log gamma across the singular-value spectrum: a coarse grid, then a
    fine one around each output's best point. Unlike fixed-point updates this cannot stall when
    the data are nearly noiseless or when n < d.
    """

    name = "bayesian_linear"

    def __init__(self, coarse_points: int = 161, fine_points: int = 41, decades: tuple[float, float] = (-18.0, 6.0)):
        if coarse_points < 3 or fine_points < 3:
            raise ValueError(f"coarse_points and fine_points must be >= 3, got {coarse_points}, {fine_points}")
        if not decades[0] < decades[1]:
            raise ValueError(f"decades must be (low, high) with low < high, got {decades}")
        self.coarse_points, self.fine_points, self.decades = coarse_points, fine_points, decades

    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> LinearFit:
        x, y = check_context(context_x, context_y)
        g = _standardised_svd(x, y)
        n, s, vt, c, resid = g["n"], g["s"], g["vt"], g["c"], g["resid"]
        k, d, r = y.shape[1], x.shape[1], s.shape[0]
        n_eff = n - 1
        e_floor = n_eff * (g["floor"] / g["y_scale"]) ** 2
        if r == 0:  # no usable input direction: a mean model
            alpha = n_eff / np.maximum(resid, e_floor)
            return self._fit_state(g, np.zeros((d, k)), np.ones((0, k)), alpha, np.ones(k), n)
        s2, c2 = s**2, c**2
        lo, hi = np.log(s2[0]) + np.log(10.0) * np.array(self.decades)
        coarse = np.linspace(lo, hi, self.coarse_points)
        ev, _ = _log_evidence(np.repeat(coarse[:, None], k, 1), s2, c2, resid, n_eff, e_floor)
        best = coarse[ev.argmax(0)]  # (k,)
        step = coarse[1] - coarse[0]
        fine = best[None, :] + np.linspace(-step, step, self.fine_points)[:, None]  # (F, k)
        ev, e = _log_evidence(fine, s2, c2, resid, n_eff, e_floor)
        pick = ev.argmax(0)
        log_gamma = fine[pick, np.arange(k)]
        gamma = np.exp(log_gamma)
        alpha = n_eff / e[pick, np.arange(k)]
        lam = gamma * alpha
        w = vt.T @ (s[:, None] * c / (s2[:, None] + gamma[None, :]))
        param_prec = alpha[None, :] * s2[:, None] + lam[None, :]
        return self._fit_state(g, w, param_prec, alpha, lam, n)

    @staticmethod
    def _fit_state(
        g: dict[str, Any], w: np.ndarray, param_prec: np.ndarray, alpha: np.ndarray, lam: np.ndarray, n: int
    ) -> LinearFit:
        return LinearFit(
            x_mean=g["x_mean"],
            x_scale=g["x_scale"],
            y_mean=g["y_mean"],
            y_scale=g["y_scale"],
            w=w,
            vt=g["vt"],
            param_prec=param_prec,
            null_var=1.0 / lam,
            noise_var=(1.0 + 1.0 / n) / alpha,
            std_floor=g["floor"],
            alpha=alpha,
            lam=lam,
            n_context=n,
        )

    def predict(self, fitted: LinearFit, query_x: np.ndarray) -> GaussianPredictive:
        return _predict(fitted, query_x)


def _ridge_loo(g: dict[str, Any], lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact leave-one-out residuals (n, k) of ridge with penalty lam (k,) on the standardised design
    (intercept unpenalised), and 1 - leverage (n, k): e_i / (1 - h_i), no refit.

    Both are sums of what lies outside the design's span (exactly 0 when the centred design spans all
    n - 1 directions) and of the shrunk part lam / (s^2 + lam), never 1 - (something close to 1), so a
    nearly interpolating fit (tiny lam, n <= rank + 1) keeps its finite min-norm LOO limit."""
    u, c, n = g["u"], g["c"], g["n"]
    damp = lam[None, :] / (g["s"][:, None] ** 2 + lam[None, :])  # (r, k)
    spans_all = u.shape[1] >= n - 1
    outside_resid = 0.0 if spans_all else g["outside"]
    outside_lev = 0.0 if spans_all else np.clip(1.0 - 1.0 / n - (u**2).sum(1, keepdims=True), 0.0, None)
    resid = outside_resid + u @ (damp * c)
    one_minus_h = outside_lev + (u**2) @ damp
    return resid / np.maximum(one_minus_h, np.finfo(float).tiny), one_minus_h


class RidgeLOO(Method):
    """Ridge regression on standardised inputs, penalty per output by exact leave-one-out error.

    The penalty is the grid point (log grid relative to the largest squared singular value) with the
    smallest mean squared LOO residual, which needs no refit: e_i / (1 - h_i) from one SVD. The noise
    variance is estimated from the LOO residuals at that penalty as mean(e_loo^2 (1 - h)) (unbiased
    for least squares), and a query's predictive variance is that noise inflated by its leverage,
    sigma^2 (1 + 1/n + x_q' (X'X + lam)^-1 x_q), plus sigma^2 / lam per unit of the query outside the
    design's span (n < d): the Gaussian-prior reading of ridge, w ~ N(0, sigma^2 / lam).
    """

    name = "ridge_loo"

    def __init__(self, points_per_decade: int = 4, decades: tuple[float, float] = (-14.0, 4.0)):
        if points_per_decade < 1:
            raise ValueError(f"points_per_decade must be >= 1, got {points_per_decade}")
        if not decades[0] < decades[1]:
            raise ValueError(f"decades must be (low, high) with low < high, got {decades}")
        self.points_per_decade, self.decades = points_per_decade, decades

    def _select(self, g: dict[str, Any]) -> np.ndarray:
        """(k,) penalty with the smallest mean squared LOO residual per output."""
        k = g["c"].shape[1]
        if g["s"].size == 0:
            return np.ones(k)
        lo, hi = self.decades
        grid = g["s"][0] ** 2 * 10.0 ** np.linspace(lo, hi, int(round((hi - lo) * self.points_per_decade)) + 1)
        errors = np.stack([(_ridge_loo(g, np.full(k, lam))[0] ** 2).mean(0) for lam in grid])  # (G, k)
        best: np.ndarray = grid[errors.argmin(0)]
        return best

    @_one_blas_thread
    def loo_residuals(self, context_x: np.ndarray, context_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(LOO residuals (n, k) in output units, chosen penalties (k,)) on this context."""
        x, y = check_context(context_x, context_y)
        g = _standardised_svd(x, y)
        lam = self._select(g)
        return _ridge_loo(g, lam)[0] * g["y_scale"], lam

    @_one_blas_thread
    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> LinearFit:
        x, y = check_context(context_x, context_y)
        g = _standardised_svd(x, y)
        n, s = g["n"], g["s"]
        lam = self._select(g)
        loo, one_minus_h = _ridge_loo(g, lam)
        sigma2 = np.maximum((loo**2 * one_minus_h).mean(0), (g["floor"] / g["y_scale"]) ** 2)
        s2 = (s**2)[:, None]
        return LinearFit(
            x_mean=g["x_mean"],
            x_scale=g["x_scale"],
            y_mean=g["y_mean"],
            y_scale=g["y_scale"],
            w=g["vt"].T @ (s[:, None] * g["c"] / (s2 + lam[None, :])),
            vt=g["vt"],
            param_prec=(s2 + lam[None, :]) / sigma2[None, :],
            null_var=sigma2 / lam,
            noise_var=sigma2 * (1.0 + 1.0 / n),
            std_floor=g["floor"],
            lam=lam,
        )

    def predict(self, fitted: LinearFit, query_x: np.ndarray) -> GaussianPredictive:
        return _predict(fitted, query_x)
