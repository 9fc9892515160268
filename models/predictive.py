"""One interface for every method: a fitted context answers queries with a predictive distribution.

The service, the batch jobs and the benchmarks only use what is defined here, so a DVA-PFN,
the exact GP and Bayesian linear regression are interchangeable behind it.
Arrays are numpy, shaped (m queries, k outputs); quantile() adds a leading levels axis.
"""

from __future__ import annotations

import copy
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import linalg, special


@dataclass
class Timing:
    """Wall-clock seconds spent fitting the context and predicting the queries."""

    fit_s: float = 0.0
    predict_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fit_s + self.predict_s


@dataclass
class Summary:
    """Float64 arrays (m, k); quantiles (levels, m, k); p_outside None when no band was asked."""

    mean: np.ndarray
    std: np.ndarray
    quantiles: np.ndarray
    p_outside: np.ndarray | None
    finite: bool | None = None  # all_finite()'s answer once known; rows of a finite summary are finite

    def rows(self, start: int, stop: int) -> Summary:
        return Summary(
            self.mean[start:stop],
            self.std[start:stop],
            self.quantiles[:, start:stop],
            None if self.p_outside is None else self.p_outside[start:stop],
            self.finite or None,
        )

    def all_finite(self) -> bool:
        """Computed once (the service checks a shared micro-batch answer in its worker thread)."""
        if self.finite is None:
            parts = [self.mean, self.std, self.quantiles] + ([self.p_outside] if self.p_outside is not None else [])
            self.finite = all(bool(np.isfinite(part).all()) for part in parts)
        return self.finite

    @staticmethod
    def concat(parts: list[Summary]) -> Summary:
        """Summaries of consecutive query blocks, joined in order."""
        if len(parts) == 1:
            return parts[0]
        p_outside = None if parts[0].p_outside is None else np.concatenate([p.p_outside for p in parts])
        return Summary(
            np.concatenate([p.mean for p in parts]),
            np.concatenate([p.std for p in parts]),
            np.concatenate([p.quantiles for p in parts], axis=1),
            p_outside,
        )


class Predictive(ABC):
    """Predictive distribution for m queries and k outputs."""

    timing: Timing

    @property
    @abstractmethod
    def mean(self) -> np.ndarray: ...

    @property
    @abstractmethod
    def std(self) -> np.ndarray: ...

    @abstractmethod
    def quantile(self, levels: Sequence[float]) -> np.ndarray:
        """(len(levels), m, k) values q with P(y <= q) = level."""

    @abstractmethod
    def cdf(self, values: np.ndarray | float) -> np.ndarray:
        """(m, k) probabilities P(y <= value); values broadcast against (m, k)."""

    def cdf_many(self, values: np.ndarray) -> np.ndarray:
        """(L, m, k) P(y <= values[l]) for L sets of values (L, m, k) at once: a subclass whose cdf costs a pass
        over its distributions (a bar answer's softmax) makes that pass once for all L."""
        return np.stack([self.cdf(v) for v in np.asarray(values, dtype=np.float64)])

    @abstractmethod
    def cdf_with_error(self, values: np.ndarray, error_std: np.ndarray) -> np.ndarray:
        """(L, m, k) P(y + e <= values[l]) for L sets of values (L, m, k), e ~ N(0, error_std^2) independent of y,
        error_std (m, k) >= 0: the answer plus an error its model cannot see (models.off_context widens by one)."""

    @abstractmethod
    def log_prob(self, y: np.ndarray) -> np.ndarray:
        """(m, k) log-density of observed y; the NLL reported by the benchmarks."""

    def cells(self, mask: np.ndarray) -> Predictive | None:
        """The distributions of the (m, k) cells where `mask` holds, as (1, count) (None: not offered): work
        that matters on a few cells only (models.off_context.convolved_outside) need not touch the others."""
        return None

    def p_outside(self, low: float, high: float) -> np.ndarray:
        """(m, k) probability of leaving the band [low, high]."""
        outside: np.ndarray = np.clip(1.0 - (self.cdf(high) - self.cdf(low)), 0.0, 1.0)
        return outside

    def summary(self, levels: Sequence[float] = (), band: tuple[float, float] | None = None) -> Summary:
        """Every statistic an answer carries, in one call (a subclass may fuse them into one pass)."""
        quantiles = self.quantile(list(levels)) if len(levels) else np.empty((0,) + self.mean.shape)
        p_outside = None if band is None else self.p_outside(*band)
        return Summary(self.mean, self.std, quantiles, p_outside)

    def interval(self, coverage: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Central interval holding `coverage` of the mass."""
        tail = (1.0 - coverage) / 2.0
        low, high = self.quantile([tail, 1.0 - tail])
        return low, high


class _LocationScale(Predictive):
    """Independent location-scale distributions per query and output: what a Gaussian and a
    Student-t share (the location is the mean; quantiles, cdf and density are the standard ones
    shifted and scaled). Subclasses set mu, scale (both (m, k)) and timing, and give the standard
    distribution's quantile, cdf and log-density."""

    mu: np.ndarray
    scale: np.ndarray
    # the standard distribution's quantile, cdf and log-density, given by each subclass
    _standard_quantile: Callable[[np.ndarray], np.ndarray]
    _standard_cdf: Callable[[np.ndarray], np.ndarray]
    _standard_log_pdf: Callable[[np.ndarray], np.ndarray]

    @property
    def mean(self) -> np.ndarray:
        return self.mu

    def _standard(self, values: np.ndarray | float) -> np.ndarray:
        z: np.ndarray = (np.asarray(values, dtype=np.float64) - self.mu) / self.scale
        return z

    def quantile(self, levels: Sequence[float]) -> np.ndarray:
        z = self._standard_quantile(np.asarray(levels, dtype=np.float64))
        q: np.ndarray = self.mu[None] + z[:, None, None] * self.scale[None]
        return q

    def cdf(self, values: np.ndarray | float) -> np.ndarray:
        return self._standard_cdf(self._standard(values))

    def cdf_many(self, values: np.ndarray) -> np.ndarray:
        return self._standard_cdf(self._standard(values))  # (L, m, k) broadcasts against (m, k)

    def cells(self, mask: np.ndarray) -> Predictive | None:
        out = copy.copy(self)
        out.mu, out.scale = self.mu[mask][None], self.scale[mask][None]
        return out

    def log_prob(self, y: np.ndarray) -> np.ndarray:
        lp: np.ndarray = self._standard_log_pdf(self._standard(y)) - np.log(self.scale)
        return lp


class GaussianPredictive(_LocationScale):
    """Independent normals per query and output (exact GP, Bayesian linear regression); `sigma` is the std."""

    def __init__(self, mu: np.ndarray, sigma: np.ndarray, timing: Timing | None = None):
        self.mu, self.scale, self.timing = mu, sigma, timing or Timing()

    @property
    def sigma(self) -> np.ndarray:
        return self.scale

    @property
    def std(self) -> np.ndarray:
        return self.scale

    _standard_quantile = staticmethod(special.ndtri)
    _standard_cdf = staticmethod(special.ndtr)

    @staticmethod
    def _standard_log_pdf(z: np.ndarray) -> np.ndarray:
        lp: np.ndarray = -0.5 * z**2 - 0.5 * np.log(2 * np.pi)
        return lp

    def cdf_with_error(self, values: np.ndarray, error_std: np.ndarray) -> np.ndarray:
        """A normal plus a normal: exact."""
        out: np.ndarray = special.ndtr((values - self.mu) / np.sqrt(np.square(self.sigma) + np.square(error_std)))
        return out


# Nodes of the Gauss quadrature for a t's Gamma-distributed precision (StudentTPredictive.cdf_with_error).
GAMMA_NODES = 32


@functools.lru_cache(maxsize=64)
def _gamma_nodes(dof: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes g and weights (summing to 1) for the mean over g ~ Gamma(dof / 2, rate dof / 2), by Golub-Welsch on
    the generalised Laguerre recurrence: its normalised weights stay finite for any dof (scipy's
    roots_genlaguerre overflows past dof ~ 340)."""
    alpha = dof / 2.0 - 1.0
    i = np.arange(GAMMA_NODES, dtype=np.float64)
    nodes, vectors = linalg.eigh_tridiagonal(2.0 * i + alpha + 1.0, np.sqrt(i[1:] * (i[1:] + alpha)))
    weights = np.square(vectors[0])
    return nodes / (dof / 2.0), weights / weights.sum()


class StudentTPredictive(_LocationScale):
    """Independent Student-t per query and output: location, scale and degrees of freedom.

    For a spread estimated from a few held-out residuals (the physics fit on a small context):
    the scale's own uncertainty widens the tails, as a t with `dof` = residuals - 1 does."""

    def __init__(self, mu: np.ndarray, scale: np.ndarray, dof: float, timing: Timing | None = None):
        self.mu, self.scale, self.dof, self.timing = mu, scale, float(dof), timing or Timing()

    @property
    def std(self) -> np.ndarray:
        sd: np.ndarray = (
            self.scale * np.sqrt(self.dof / (self.dof - 2.0)) if self.dof > 2 else np.full_like(self.scale, np.inf)
        )
        return sd

    def cdf_with_error(self, values: np.ndarray, error_std: np.ndarray) -> np.ndarray:
        """A t is a normal whose precision is drawn from Gamma(dof / 2, rate dof / 2): P(y + e <= v) is the mean of
        Phi((v - mu) / sqrt(scale^2 / g + error_std^2)) over g, smooth in g, by Gauss quadrature for that Gamma
        (to about 1e-12, tests/models/test_predictive.py)."""
        g, weights = _gamma_nodes(self.dof)
        spread = np.sqrt(np.square(self.scale)[None] / g[:, None, None] + np.square(error_std)[None])  # (G, m, k)
        out = np.zeros(np.broadcast_shapes(np.shape(values), self.mu.shape))
        for gi, wi in zip(spread, weights, strict=True):  # summed in the nodes' order
            out += wi * special.ndtr((values - self.mu) / gi)
        return out

    def _standard_quantile(self, levels: np.ndarray) -> np.ndarray:
        z: np.ndarray = special.stdtrit(self.dof, levels)
        return z

    def _standard_cdf(self, z: np.ndarray) -> np.ndarray:
        p: np.ndarray = special.stdtr(self.dof, z)
        return p

    def _standard_log_pdf(self, z: np.ndarray) -> np.ndarray:
        nu = self.dof
        lp: np.ndarray = (
            special.gammaln((nu + 1) / 2)
            - special.gammaln(nu / 2)
            - 0.5 * np.log(nu * np.pi)
            - (nu + 1) / 2 * np.log1p(z**2 / nu)
        )
        return lp


class Method(ABC):
    """A way to turn a context into predictions: fit once, predict many query batches."""

    name: str = "method"
    # whether fit takes NaN in context x / y (a load or voltage not measured); the service refuses sparse
    # contexts to a method that does not declare it (service.engine.sparse)
    accepts_missing: bool = False

    @abstractmethod
    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> Any:
        """Condition on a context (n, d), (n, k); returns an opaque fitted state."""

    def fit_many(self, context_x: np.ndarray, targets: Sequence[np.ndarray]) -> list[Any]:
        """`fit` of the same context loads to each voltage set (n, k) in `targets` (models.off_context's noisy
        probes): a method whose fit has work that depends on the loads alone does it once here."""
        return [self.fit(context_x, y) for y in targets]

    def fit_for_means(self, context_x: np.ndarray, context_y: np.ndarray) -> Any:
        """`fit` for a caller that reads only its answers' means (models.off_context's exact probe): a method whose
        spread costs work its mean does not depend on skips that work here."""
        return self.fit(context_x, context_y)

    @abstractmethod
    def predict(self, fitted: Any, query_x: np.ndarray) -> Predictive:
        """Predict (m, d) queries against a fitted state."""

    def summarize(
        self, fitted: Any, query_x: np.ndarray, levels: Sequence[float] = (), band: tuple[float, float] | None = None
    ) -> Summary:
        """The statistics an answer carries for (m, d) queries; a method may stream this in chunks."""
        return self.predict(fitted, query_x).summary(levels, band)

    def heldout_rms(self, fitted: Any) -> np.ndarray | None:
        """(k,) the rms of the held-out errors at the context rows that the spread was calibrated on (p.u.); None:
        the spread does not come from the readings' held-out errors, and `without_meter_noise` changes nothing."""
        return None

    def without_meter_noise(self, fitted: Any, context_x: np.ndarray, context_y: np.ndarray, noise: np.ndarray) -> Any:
        """`fitted` (of this context) with its spread calibrated on held-out errors less each reading's meter noise
        (n, k) (models.meter_noise): an answer is about the true voltage, not about a reading of it."""
        return fitted

    def refuse_unsolved(self, fitted: Any, query_x: np.ndarray, extrapolation: np.ndarray) -> None:
        """RowsRefused naming every query row whose answer this method would refuse because the network
        model's power flow has no solution at its loads (models.network_voltages), found without computing
        any answer: a batch job checks its whole input so before its first chunk. `extrapolation`: the
        rows' measure on the context's geometry (a guarded method asks the network model only beyond the
        context's reach). Here none: a method that never asks the network model refuses no row for it."""
        return None

    def __call__(self, context_x: np.ndarray, context_y: np.ndarray, query_x: np.ndarray) -> Predictive:
        """Fit and predict in one call, with both times recorded on the result."""
        t0 = time.perf_counter()
        fitted = self.fit(context_x, context_y)
        t1 = time.perf_counter()
        result = self.predict(fitted, query_x)
        t2 = time.perf_counter()
        result.timing = Timing(fit_s=t1 - t0, predict_s=t2 - t1)
        return result
