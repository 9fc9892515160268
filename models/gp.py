"""Exact Gaussian-process regression: the "on-demand exact GP" the PFN is compared against.

One independent GP per output, ARD RBF kernel plus noise (the DVA paper's choice), optionally
plus an ARD linear kernel sum_d w_d x_d x'_d (a linear mean with a Gaussian prior on its weights).
All k outputs are fitted together as a batch of independent problems: kernels (k, n, n), one
batched Cholesky, and the sum of the k negative log marginal likelihoods as a single objective.

Hyperparameters maximise the exact log marginal likelihood with scipy's L-BFGS-B on a flat vector
of log-parameters. L-BFGS-B rather than torch.optim.LBFGS because it takes box bounds (length
scales, variances and noise stay where float64 Cholesky is meaningful instead of drifting to 1e-30
or 1e30) and its line search and stopping rules are mature. The gradient is written out by hand
(dNLL/dK = 0.5 (K^-1 - alpha alpha^T) contracted with dK/dtheta through two matmuls): about half
the time and memory of autograd through the Cholesky and the (k, n, n) kernel graph.
Contexts above opt_points are optimised on a random subset (cost ~ n^3 per step), optionally
polished on all points; the posterior always conditions on every point.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import optimize

from models.predictive import GaussianPredictive, Method
from models.validation import check_context, check_queries

log = logging.getLogger(__name__)

_LOG_2PI = math.log(2.0 * math.pi)
# Bounds on the log-parameters, in standardised units (inputs z-scored, outputs z-scored).
_BOUNDS = {
    "lengthscale": (math.log(1e-2), math.log(1e4)),
    "signal": (math.log(1e-4), math.log(1e5)),
    "linear": (math.log(1e-8), math.log(1e3)),
}
_JITTERS = (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)  # relative to the mean diagonal, tried in order
Params = dict[str, torch.Tensor]
# Starting points: (length scale / sqrt(d), signal variance) pairs x noise variances.
_INIT_SCALES = ((0.5, 1.0), (1.0, 1.0), (2.0, 1.0), (4.0, 1.0))
_INIT_NOISE = (1e-2, 1e-4)


def _scale(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Column means and standard deviations (ddof 0, as scikit-learn); zero spread -> 1."""
    mean = values.mean(dim=0)
    std = values.std(dim=0, unbiased=False)
    return mean, torch.where(std > 0, std, torch.ones_like(std))


def _robust_cholesky(k_mat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched Cholesky of (b, n, n); failing members get growing jitter. Returns (L, jitter (b,))."""
    mean_diag = k_mat.diagonal(dim1=-2, dim2=-1).mean(-1)
    jitter = torch.zeros_like(mean_diag)
    chol = torch.empty_like(k_mat)
    todo = torch.ones_like(mean_diag, dtype=torch.bool)
    eye = torch.eye(k_mat.shape[-1], dtype=k_mat.dtype, device=k_mat.device)
    for rel in _JITTERS:
        if not rel:  # the common case: no copies, one batched call
            idx = torch.arange(len(k_mat), device=k_mat.device)
            factor, info = torch.linalg.cholesky_ex(k_mat)
        else:
            idx = todo.nonzero().flatten()
            factor, info = torch.linalg.cholesky_ex(k_mat[idx] + (rel * mean_diag[idx])[:, None, None] * eye)
        ok = (info == 0) & torch.isfinite(factor.diagonal(dim1=-2, dim2=-1)).all(1)
        if bool(ok.all()) and not rel:
            return factor, jitter
        chol[idx[ok]] = factor[ok]
        jitter[idx[ok]] = rel * mean_diag[idx[ok]]
        todo[idx[ok]] = False
        if not todo.any():
            if rel:
                log.debug("Cholesky needed jitter up to %.1e x mean diagonal", rel)
            return chol, jitter
    raise FloatingPointError(
        f"kernel matrix not positive definite even with jitter {_JITTERS[-1]:g} x mean diagonal "
        f"for outputs {todo.nonzero().flatten().tolist()}; check the context for degenerate values"
    )


def _rbf(xa: torch.Tensor, xb: torch.Tensor, p: Params) -> torch.Tensor:
    """(k, na, nb) signal * exp(-|xa - xb|^2 / 2 ell^2) per output."""
    inv_ell = (-p["lengthscale"]).exp()[:, None, :]  # (k, 1, d)
    a, b = xa.unsqueeze(0) * inv_ell, xb.unsqueeze(0) * inv_ell
    base = (a * a).sum(-1)[:, :, None] + (b * b).sum(-1)[:, None, :]
    sq = torch.baddbmm(base, a, b.transpose(1, 2), alpha=-2.0).clamp_min_(0.0)
    return sq.mul_(-0.5).exp_().mul_(p["signal"].exp()[:, None, None])


def _cross_kernel(xa: torch.Tensor, xb: torch.Tensor, p: Params) -> torch.Tensor:
    """(k, na, nb) RBF plus the optional linear term, no noise."""
    k_mat = _rbf(xa, xb, p)
    if "linear" in p:
        k_mat += (xa.unsqueeze(0) * p["linear"].exp()[:, None, :]) @ xb.T
    return k_mat


def _nll(x: torch.Tensor, y: torch.Tensor, p: Params, grad: bool) -> tuple[torch.Tensor, Params | None]:
    """Per-output NLL (k,) of standardised y (k, n) and, if asked, its gradient per log-parameter."""
    n = x.shape[0]
    k_rbf = _rbf(x, x, p)
    k_mat = k_rbf + (x.unsqueeze(0) * p["linear"].exp()[:, None, :]) @ x.T if "linear" in p else k_rbf.clone()
    k_mat.diagonal(dim1=-2, dim2=-1).add_(p["noise"].exp()[:, None])
    chol, _ = _robust_cholesky(k_mat)
    del k_mat
    alpha = torch.cholesky_solve(y.unsqueeze(-1), chol)  # (k, n, 1)
    logdet = 2.0 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    nll = 0.5 * ((y * alpha.squeeze(-1)).sum(-1) + logdet + n * _LOG_2PI)
    if not grad:
        return nll, None
    eye = torch.eye(n, dtype=x.dtype, device=x.device).expand_as(chol)
    chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)
    g = chol_inv.transpose(1, 2) @ chol_inv  # K^-1
    g.baddbmm_(alpha, alpha.transpose(1, 2), alpha=-1.0).mul_(0.5)  # dNLL/dK
    out = {"noise": p["noise"].exp() * g.diagonal(dim1=-2, dim2=-1).sum(-1)}
    m = k_rbf.mul_(g)  # dNLL/dK (.) K_rbf, reusing the buffer
    out["signal"] = m.sum((1, 2))
    a = x.unsqueeze(0) * (-p["lengthscale"]).exp()[:, None, :]  # (k, n, d) scaled inputs
    # sum_il m_il (a_ij - a_lj)^2 = 2 sum_i a_ij^2 rowsum(m)_i - 2 sum_i a_ij (m a)_ij  (m symmetric)
    out["lengthscale"] = 2.0 * ((a * a * m.sum(2, keepdim=True)).sum(1) - (a * (m @ a)).sum(1))
    if "linear" in p:
        out["linear"] = p["linear"].exp() * (x.unsqueeze(0) * (g @ x)).sum(1)
    return nll, out


def _explained_variance(k_star: torch.Tensor, chol_inv: torch.Tensor) -> torch.Tensor:
    """(k, c) rows of |L^-1 k*|^2 using L^-1's lower-triangular blocks: 3/4 of a dense matmul."""
    h = chol_inv.shape[-1] // 2
    k1, k2 = k_star[..., :h], k_star[..., h:]
    top = k1 @ chol_inv[:, :h, :h].transpose(1, 2)
    bottom = torch.baddbmm(k2 @ chol_inv[:, h:, h:].transpose(1, 2), k1, chol_inv[:, h:, :h].transpose(1, 2))
    return top.square_().sum(-1) + bottom.square_().sum(-1)


@dataclass
class GPFit:
    """A fitted context: everything predict() needs, so repeated query batches reuse it.

    Only L^-1 is kept (not L as well): predictions need just L^-1 and alpha, and one (k, n, n)
    tensor instead of two halves what a cached fit costs (32 x 1000 x 1000 float64 = 256 MB).

    Parameters are stored in standardised units (inputs z-scored with the context's mean and
    std, each output z-scored); the properties convert to original units.
    """

    x: torch.Tensor  # (n, d) standardised context inputs
    x_mean: torch.Tensor  # (d,)
    x_scale: torch.Tensor  # (d,)
    y_mean: torch.Tensor  # (k,)
    y_scale: torch.Tensor  # (k,)
    params: Params  # log-parameters: lengthscale (k, d), signal (k,), noise (k,), [linear (k, d)]
    jitter: torch.Tensor  # (k,) extra diagonal the final Cholesky needed (usually 0)
    chol_inv: torch.Tensor  # (k, n, n) inverse of the lower Cholesky factor L of the training kernel
    alpha: torch.Tensor  # (k, n) K^-1 y (standardised)
    log_marginal_likelihood_standardized: np.ndarray  # (k,) LML of the z-scored outputs
    n_iter: int = 0  # L-BFGS-B iterations, subset and polish stages together
    converged: bool = True  # L-BFGS-B's success flag (False when max_iter ran out first)

    @property
    def log_marginal_likelihood(self) -> np.ndarray:
        """(k,) LML of the outputs in original units: standardised LML - n log(y_scale).

        The std-dev is ddof 0, as scikit-learn's normalize_y, so the *standardised* value is
        directly comparable to `GaussianProcessRegressor.log_marginal_likelihood_value_`.
        """
        lml: np.ndarray = self.log_marginal_likelihood_standardized - self.x.shape[0] * np.log(_np(self.y_scale))
        return lml

    @property
    def lengthscale(self) -> np.ndarray:
        """(k, d) ARD length scales in original input units."""
        return _np(self.params["lengthscale"].exp() * self.x_scale)

    @property
    def signal_variance(self) -> np.ndarray:
        """(k,) RBF signal variance in original output units."""
        return _np(self.params["signal"].exp() * self.y_scale**2)

    @property
    def noise_variance(self) -> np.ndarray:
        """(k,) noise variance in original output units."""
        return _np(self.params["noise"].exp() * self.y_scale**2)

    @property
    def linear_variance(self) -> np.ndarray | None:
        """(k, d) prior variances of the linear weights in original units, or None."""
        if "linear" not in self.params:
            return None
        return _np(self.params["linear"].exp() * (self.y_scale[:, None] / self.x_scale) ** 2)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


class ExactGP(Method):
    """Exact GP regression per output, hyperparameters by maximum marginal likelihood.

    predict() returns the predictive distribution of a new *observation*: its std is
    sqrt(var_f + noise variance), in original output units.
    opt_points: for contexts larger than this the hyperparameters maximise the marginal
    likelihood of a random subset of that size (cost ~ n^3 per L-BFGS step), then polish_iter
    L-BFGS-B iterations on all points follow (default 0); the posterior always uses all points.
    None: optimise on all points. With the defaults, 500 points x 32 outputs + 4500 queries take
    20-30 s on the shared 2-core machine (bench/gp_speed.py); run with OMP_WAIT_POLICY=PASSIVE there.
    """

    name = "exact_gp"

    def __init__(
        self,
        linear_term: bool = False,
        device: str | torch.device | None = None,
        max_iter: int = 30,
        dtype: torch.dtype = torch.float64,
        min_noise: float = 1e-8,
        opt_points: int | None = 256,
        polish_iter: int = 0,
        query_chunk: int | None = None,
        chunk_elements: int = 2**22,
        seed: int = 0,
    ) -> None:
        if max_iter < 0 or polish_iter < 0:
            raise ValueError(f"max_iter, polish_iter: expected >= 0, got {max_iter}, {polish_iter}")
        if not 0.0 < min_noise < 1.0:
            raise ValueError(f"min_noise: expected in (0, 1) (standardised units), got {min_noise}")
        if opt_points is not None and opt_points < 2:
            raise ValueError(f"opt_points: expected >= 2 or None, got {opt_points}")
        if query_chunk is not None and query_chunk < 1:
            raise ValueError(f"query_chunk: expected >= 1 or None, got {query_chunk}")
        self.linear_term = linear_term
        self.device = (
            torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        self.max_iter, self.polish_iter = max_iter, polish_iter
        self.dtype = dtype
        self.noise_bounds = (math.log(min_noise), math.log(10.0))
        self.opt_points, self.seed = opt_points, seed
        self.query_chunk, self.chunk_elements = query_chunk, chunk_elements

    # ------------------------------------------------------------ parameters
    def _sizes(self, d: int) -> dict[str, int]:
        sizes = {"lengthscale": d, "signal": 1, "noise": 1}
        return sizes | ({"linear": d} if self.linear_term else {})

    def _unpack(self, theta: torch.Tensor, k: int, d: int) -> Params:
        out, start = {}, 0
        for name, size in self._sizes(d).items():
            chunk = theta[start : start + k * size].reshape(k, size)
            out[name] = chunk.squeeze(-1) if size == 1 else chunk
            start += k * size
        return out

    def _pack(self, p: Params) -> torch.Tensor:
        return torch.cat([p[name].flatten() for name in self._sizes(1)])

    def _initial(self, x: torch.Tensor, y: torch.Tensor) -> Params:
        """Per output, the best of a few starting points by marginal likelihood (cheap: no gradients).

        Length scales 0.5..4 x sqrt(d) in standardised units, signal variance 1, noise 1e-2 or 1e-4.
        (Adding very long length scales with large signal variances, the RBF's polynomial limit,
        gave a lower held-out marginal likelihood and worse coverage on the 33-bus data.)
        """
        k, d = y.shape[0], x.shape[1]
        best: Params | None = None
        best_nll: torch.Tensor | None = None
        for ell_mult, signal in _INIT_SCALES:
            for noise in _INIT_NOISE:
                cand = {
                    "lengthscale": torch.full((k, d), math.log(ell_mult * math.sqrt(d))),
                    "signal": torch.full((k,), math.log(signal * (0.5 if self.linear_term else 1.0))),
                    "noise": torch.full((k,), max(math.log(noise), self.noise_bounds[0])),
                }
                if self.linear_term:
                    cand["linear"] = torch.full((k, d), math.log(0.5 / d))
                cand = {name: v.to(x) for name, v in cand.items()}
                nll, _ = _nll(x, y, cand, grad=False)
                if best is None:
                    best, best_nll = cand, nll
                    continue
                assert best_nll is not None  # set together with best
                better = nll < best_nll
                for name, value in best.items():
                    best[name] = torch.where(better if value.ndim == 1 else better[:, None], cand[name], value)
                best_nll = torch.minimum(best_nll, nll)
        assert best is not None  # _INIT_SCALES and _INIT_NOISE are not empty
        return best

    def _optimise(self, x: torch.Tensor, y: torch.Tensor, start: Params, max_iter: int) -> tuple[Params, int, bool]:
        """L-BFGS-B on the summed NLL of the k independent problems; returns (params, iters, converged)."""
        k, d = y.shape[0], x.shape[1]
        if max_iter == 0:
            return start, 0, True
        bounds = dict(_BOUNDS, noise=self.noise_bounds)
        box = [bounds[name] for name, size in self._sizes(d).items() for _ in range(k * size)]

        def objective(flat: np.ndarray) -> tuple[float, np.ndarray]:
            theta = torch.as_tensor(flat, dtype=self.dtype, device=self.device)
            with torch.no_grad():
                nll, grads = _nll(x, y, self._unpack(theta, k, d), grad=True)
            assert grads is not None  # grad=True returns them
            value, grad_np = float(nll.sum()), _np(self._pack(grads))
            if not (math.isfinite(value) and np.isfinite(grad_np).all()):
                raise FloatingPointError("GP marginal likelihood or its gradient became non-finite")
            return value, grad_np

        x0 = np.clip(_np(self._pack(start)), [b[0] for b in box], [b[1] for b in box])
        res = optimize.minimize(
            objective,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=box,
            options={"maxiter": max_iter, "ftol": 1e-12, "gtol": 1e-6},
        )
        if not res.success:
            log.info("GP L-BFGS-B stopped after %d iterations (n=%d): %s", res.nit, x.shape[0], res.message)
        theta = torch.as_tensor(res.x, dtype=self.dtype, device=self.device)
        return self._unpack(theta, k, d), int(res.nit), bool(res.success)

    # ------------------------------------------------------------------- fit
    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> GPFit:
        """Standardise, maximise the batched marginal likelihood, factorise the final kernels."""
        cx, cy = check_context(context_x, context_y)
        x_raw = torch.as_tensor(cx, dtype=self.dtype, device=self.device)
        y_raw = torch.as_tensor(cy, dtype=self.dtype, device=self.device)
        x_mean, x_scale = _scale(x_raw)
        y_mean, y_scale = _scale(y_raw)
        x = (x_raw - x_mean) / x_scale
        y = ((y_raw - y_mean) / y_scale).T.contiguous()  # (k, n)
        n = x.shape[0]
        if self.opt_points is not None and n > self.opt_points:
            gen = torch.Generator().manual_seed(self.seed)
            idx = torch.randperm(n, generator=gen)[: self.opt_points].to(self.device)
            params = self._initial(x[idx], y[:, idx])
            params, iters, ok = self._optimise(x[idx], y[:, idx], params, self.max_iter)
            if self.polish_iter:
                params, more, ok = self._optimise(x, y, params, self.polish_iter)
                iters += more
        else:
            params = self._initial(x, y)
            params, iters, ok = self._optimise(x, y, params, self.max_iter)
        with torch.no_grad():
            k_mat = _cross_kernel(x, x, params)
            k_mat.diagonal(dim1=-2, dim2=-1).add_(params["noise"].exp()[:, None])
            chol, jitter = _robust_cholesky(k_mat)
            alpha = torch.cholesky_solve(y.unsqueeze(-1), chol).squeeze(-1)
            logdet = 2.0 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
            lml = -0.5 * ((y * alpha).sum(-1) + logdet + n * _LOG_2PI)
            eye = torch.eye(n, dtype=x.dtype, device=x.device).expand_as(chol)
            chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)
        if not (torch.isfinite(alpha).all() and torch.isfinite(lml).all() and torch.isfinite(chol_inv).all()):
            raise FloatingPointError("GP fit produced non-finite weights or marginal likelihood")
        return GPFit(
            x=x,
            x_mean=x_mean,
            x_scale=x_scale,
            y_mean=y_mean,
            y_scale=y_scale,
            params=params,
            jitter=jitter,
            chol_inv=chol_inv,
            alpha=alpha,
            log_marginal_likelihood_standardized=_np(lml),
            n_iter=iters,
            converged=ok,
        )

    # --------------------------------------------------------------- predict
    def predict(self, fitted: GPFit, query_x: np.ndarray) -> GaussianPredictive:
        """Predictive mean and std (noise included) in original units, in bounded query chunks."""
        n, d = fitted.x.shape
        qx = check_queries(query_x, d)
        k = fitted.alpha.shape[0]
        chunk = self.query_chunk or max(1, self.chunk_elements // (k * n))
        p = fitted.params
        noise = p["noise"].exp() + fitted.jitter
        means, stds = [], []
        with torch.no_grad():
            for start in range(0, qx.shape[0], chunk):
                q = torch.as_tensor(qx[start : start + chunk], dtype=fitted.x.dtype, device=fitted.x.device)
                q = (q - fitted.x_mean) / fitted.x_scale
                k_star = _cross_kernel(q, fitted.x, p)  # (k, c, n)
                mean = (k_star @ fitted.alpha.unsqueeze(-1)).squeeze(-1)
                explained = _explained_variance(k_star, fitted.chol_inv)
                prior = p["signal"].exp()[:, None].expand(-1, q.shape[0])
                if "linear" in p:
                    prior = prior + p["linear"].exp() @ q.square().T
                var = (prior - explained).clamp_min_(0.0) + noise[:, None]
                means.append((mean.T * fitted.y_scale + fitted.y_mean).cpu())
                stds.append((var.sqrt().T * fitted.y_scale).cpu())
        mu = torch.cat(means).numpy().astype(np.float64)
        sigma = torch.cat(stds).numpy().astype(np.float64)
        if not (np.isfinite(mu).all() and np.isfinite(sigma).all() and (sigma > 0).all()):
            raise FloatingPointError("GP prediction produced non-finite values or zero std")
        return GaussianPredictive(mu=mu, sigma=sigma)
