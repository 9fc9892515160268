"""A bar distribution over a standardised residual, mapped back to physical units.

The DVA-PFN predicts z, the query's residual around an in-context fit, standardised per
dataset; the answer the service gives is y = loc + scale * z. This wrapper exposes that as
the common Predictive interface (float64 numpy, (m, k) per query and output), including the
-log(scale) Jacobian in log_prob so NLLs compare with the GP and linear baselines.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from models.bar_distribution import BarDistribution
from models.predictive import Predictive, Summary, Timing


def _finite_array(name: str, value, allow_inf: bool = False) -> np.ndarray:
    arr = np.asarray(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value, dtype=np.float64)
    bad = np.isnan(arr) if allow_inf else ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} must be {'free of NaN' if allow_inf else 'finite'}; found {int(bad.sum())} bad entries")
    return arr


# Logits per chunk (2 Mi, 16 MiB as float64): each method's temporaries stay bounded whatever m is.
_CHUNK_ELEMENTS = 1 << 21


@dataclass
class BarPredictive(Predictive):
    """Predictive y = loc + scale * z with z ~ bar(logits); logits (m, k, n_bars), loc (m, k).

    `spread` (k,), when given, stretches each output's distribution around its mean
    (see models.calibration): folded into loc and scale here, so every statistic follows.
    """

    bar: BarDistribution
    logits: torch.Tensor
    loc: np.ndarray
    scale: np.ndarray
    spread: np.ndarray | None = None
    timing: Timing = field(default_factory=Timing)

    def __post_init__(self) -> None:
        logits = torch.as_tensor(self.logits).detach()
        if logits.ndim != 3 or logits.shape[-1] != self.bar.n_bars:
            raise ValueError(f"logits must be shaped (m, k, {self.bar.n_bars}), got {tuple(logits.shape)}")
        if not logits.is_floating_point() or torch.isnan(logits).any() or torch.isposinf(logits).any():
            raise ValueError("logits must be floating point, free of NaN and +inf")
        self.logits = logits  # kept in its own dtype; each chunk is upcast to float64 when used
        shape = tuple(logits.shape[:2])
        loc = _finite_array("loc", self.loc)
        if loc.shape != shape:
            raise ValueError(f"loc must be shaped (m, k) = {shape}, got {loc.shape}")
        scale = _finite_array("scale", self.scale)
        try:
            scale = np.broadcast_to(scale, shape)
        except ValueError as exc:
            raise ValueError(f"scale must broadcast to (m, k) = {shape}, got {scale.shape}") from exc
        if not (scale > 0).all():
            raise ValueError("scale must be > 0")
        self.loc, self.scale = loc, np.ascontiguousarray(scale)
        self._bar64 = BarDistribution(self.bar.borders.detach().to(device=logits.device, dtype=torch.float64))
        self._bar_native = BarDistribution(self.bar.borders.detach().to(device=logits.device, dtype=logits.dtype))
        self._moments: tuple[np.ndarray, np.ndarray] | None = None
        if self.spread is not None:
            spread = _finite_array("spread", self.spread)
            if spread.shape != shape[1:] or not (spread > 0).all():
                raise ValueError(f"spread must be positive and shaped (k,) = {shape[1:]}, got {spread.shape}")
            # y' = mean + s (y - mean) with mean = loc + scale * E[z]: the same bars, new loc and scale.
            # Only E[z] (float64, so the mean stays exactly the uncalibrated one): every predict of a
            # calibrated model passes here, and the variance would double the cost.
            z_mean = self._by_rows(self._bar64.mean)
            self.loc = self.loc + self.scale * z_mean * (1.0 - spread)
            self.scale = self.scale * spread
            self.spread = spread

    def _torch(self, arr: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(arr, dtype=torch.float64, device=self.logits.device)

    def _standardise(self, name: str, values: np.ndarray) -> torch.Tensor:
        try:
            values = np.broadcast_to(values, self.loc.shape)
        except ValueError as exc:
            raise ValueError(f"{name} must broadcast to (m, k) = {self.loc.shape}, got {values.shape}") from exc
        return self._torch((values - self.loc) / self.scale)

    def _by_rows(self, fn, z: torch.Tensor | None = None, axis: int = 0) -> np.ndarray:
        """fn(float64 logits chunk[, z chunk]) over query chunks, so temporaries stay bounded for any m."""
        m, k, n_bars = self.logits.shape
        step = max(1, _CHUNK_ELEMENTS // max(k * n_bars, 1))
        parts = []
        for start in range(0, max(m, 1), step):
            rows = slice(start, start + step)
            lg = self.logits[rows].to(torch.float64)
            out = fn(lg) if z is None else fn(lg, z[rows])
            parts.append(out.detach().cpu().numpy().astype(np.float64, copy=False))
        return np.concatenate(parts, axis=axis)

    def _z_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the standardised residual, computed once."""
        if self._moments is None:
            both = self._by_rows(lambda lg: torch.stack([self._bar64.mean(lg), self._bar64.variance(lg)]), axis=1)
            self._moments = (both[0], both[1])
        return self._moments

    @property
    def mean(self) -> np.ndarray:
        return self.loc + self.scale * self._z_moments()[0]

    @property
    def std(self) -> np.ndarray:
        return self.scale * np.sqrt(self._z_moments()[1])

    def summary(self, levels: Sequence[float] = (), band: tuple[float, float] | None = None) -> Summary:
        """Mean, std, quantiles and band probability from one softmax per chunk, in the logits' dtype.

        The service's path: float32 bars (z needs no more digits; loc and scale stay float64),
        one softmax and one cumsum shared by every statistic instead of one per statistic.
        """
        lv = self._levels(levels) if len(levels) else None
        m, k, n_bars = self.logits.shape
        bar = self._bar_native
        edges = None
        if band is not None:
            low, high = float(band[0]), float(band[1])
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f"band must be two finite numbers low < high, got {band!r}")
            edges = torch.as_tensor(np.stack([(low - self.loc) / self.scale, (high - self.loc) / self.scale], -1),
                                    dtype=self.logits.dtype, device=self.logits.device)  # (m, k, 2)
        step = max(1, _CHUNK_ELEMENTS // max(k * n_bars, 1))
        mu, var, quant, outside = [], [], [], []
        for start in range(0, m, step):
            rows = slice(start, start + step)
            p = torch.softmax(self.logits[rows], dim=-1)
            moments = bar.moments_from_probs(p)
            mu.append(moments[0])
            var.append(moments[1])
            if lv is not None or edges is not None:
                cum = torch.cumsum(p, dim=-1)
            if lv is not None:
                quant.append(bar.icdf_from_probs(p, cum, lv.to(p.dtype).expand(*p.shape[:-1], -1)).movedim(-1, 0))
            if edges is not None:
                both = torch.stack([bar.cdf_from_probs(p, cum, edges[rows, :, i]) for i in range(2)])
                outside.append((1.0 - (both[1] - both[0])).clamp(0.0, 1.0))
        as64 = lambda parts, axis=0: torch.cat(parts, axis).double().cpu().numpy()  # noqa: E731
        mean = self.loc + self.scale * as64(mu)
        std = self.scale * np.sqrt(np.maximum(as64(var), 0.0))
        quantiles = (self.loc[None] + self.scale[None] * as64(quant, 1)) if lv is not None else np.empty((0, m, k))
        return Summary(mean, std, quantiles, as64(outside) if edges is not None else None)

    @staticmethod
    def _levels(levels: Sequence[float]) -> torch.Tensor:
        lv = np.asarray(levels, dtype=np.float64)
        if lv.ndim != 1 or not np.all((lv > 0) & (lv < 1)):
            raise ValueError(f"levels must be a 1-D sequence inside (0, 1), got {lv!r}")
        return torch.as_tensor(lv)

    def quantile(self, levels: Sequence[float]) -> np.ndarray:
        levels_t = self._levels(levels).to(self.logits.device)
        z = self._by_rows(lambda lg: self._bar64.quantile(lg, levels_t), axis=1)
        return self.loc[None] + self.scale[None] * z

    def cdf(self, values: np.ndarray | float) -> np.ndarray:
        v = _finite_array("values", values, allow_inf=True)
        return self._by_rows(self._bar64.cdf, self._standardise("values", v))

    def log_prob(self, y: np.ndarray) -> np.ndarray:
        v = _finite_array("y", y)
        return self._by_rows(self._bar64.log_prob, self._standardise("y", v)) - np.log(self.scale)

    def sample(self, n: int, seed: int | None = None) -> np.ndarray:
        """(n, m, k) draws in physical units."""
        gen = torch.Generator(device=self.logits.device)
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(seed)
        z = self._by_rows(lambda lg: self._bar64.sample(lg, n, generator=gen), axis=1)
        return self.loc[None] + self.scale[None] * z
